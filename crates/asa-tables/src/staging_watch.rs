//! The staging folders of one process that are not yet committed, for whoever owns the
//! process to remove when it ends by a signal (the binary's signal thread, `src/signals.rs`).
//! The library starts no thread and installs no handler: a [`StagingWatch`] is made by the
//! owner and handed to each [`OutputDir`](super::OutputDir) it wants watched; an output
//! folder made with an unwatched one (the Python package's) is only cleaned up by its own
//! `Drop` when the run fails or is cancelled. A commit holds the watch's lock while it
//! moves files, so a signal's removal lands before or after it, never halfway.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A staging folder not yet committed, and what to clean up with it.
#[derive(Debug)]
struct Live {
    staging: PathBuf,
    made: Option<PathBuf>,
    target: PathBuf,
}

/// A list of live staging folders shared by its clones.
#[derive(Debug, Clone, Default)]
pub struct StagingWatch(Arc<Mutex<Vec<Live>>>);

impl StagingWatch {
    /// A watch with nothing registered.
    pub fn new() -> StagingWatch {
        StagingWatch::default()
    }

    /// Creates a staging folder with `create` and records it (and the outermost folder made
    /// for its target, if any) as one step under the list's lock: a signal's
    /// [`remove_all`](Self::remove_all) either runs first (and keeps the lock, so the folder
    /// is never made) or sees it registered.
    pub(super) fn create_registered<E>(
        &self,
        staging: &Path,
        made: Option<&Path>,
        target: &Path,
        create: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut live = self.live();
        create()?;
        live.push(Live {
            staging: staging.to_path_buf(),
            made: made.map(Path::to_path_buf),
            target: target.to_path_buf(),
        });
        Ok(())
    }

    /// Forgets a staging folder that was removed.
    pub(super) fn unregister(&self, staging: &Path) {
        self.live().retain(|l| l.staging != staging);
    }

    /// Holds off [`remove_all`](Self::remove_all) while a commit moves files; the commit
    /// forgets its staging folder through [`Commit::done`] before the guard is dropped.
    pub(super) fn begin_commit(&self) -> Commit<'_> {
        Commit(self.live())
    }

    /// Removes every registered staging folder (with the output folders made for them that
    /// are still empty), innermost first, and keeps the lock: nothing is registered or
    /// committed through this watch until the returned guard is dropped (the binary exits
    /// holding it).
    pub fn remove_all(&self) -> MutexGuard<'_, impl Sized> {
        Self::remove_listed(self.live())
    }

    /// [`StagingWatch::remove_all`] when the list is free within `wait` (a failed
    /// allocation may have stopped the very thread that holds it); `None` otherwise.
    pub fn remove_all_within(
        &self,
        wait: std::time::Duration,
    ) -> Option<MutexGuard<'_, impl Sized>> {
        let started = std::time::Instant::now();
        loop {
            match self.0.try_lock() {
                Ok(live) => return Some(Self::remove_listed(live)),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    return Some(Self::remove_listed(p.into_inner()))
                }
                Err(std::sync::TryLockError::WouldBlock) if started.elapsed() < wait => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
    }

    fn remove_listed(live: MutexGuard<'_, Vec<Live>>) -> MutexGuard<'_, Vec<Live>> {
        // again while anything is left (at least twice, at most 5 passes 20 ms apart): a
        // writer thread keeps running until the process exits, and may recreate a folder
        // inside a staging folder, or hold a temporary file in a folder made for it, while
        // a pass runs (a folder made for a run was once left empty under load)
        for pass in 0..5 {
            if pass > 0 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            for l in live.iter().rev() {
                super::writer::remove_uncommitted(&l.staging, l.made.as_deref(), &l.target);
            }
            // a folder made for the run that holds committed output stays: only an empty
            // one is left to remove
            let empty = |m: &PathBuf| std::fs::read_dir(m).is_ok_and(|mut e| e.next().is_none());
            let left = |l: &Live| l.staging.exists() || l.made.as_ref().is_some_and(empty);
            if pass > 0 && !live.iter().any(left) {
                break;
            }
        }
        live
    }

    /// The list, even after a thread panicked while holding it (the list stays valid).
    fn live(&self) -> MutexGuard<'_, Vec<Live>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A commit in progress (see [`StagingWatch::begin_commit`]).
pub(super) struct Commit<'a>(MutexGuard<'a, Vec<Live>>);

impl Commit<'_> {
    /// The commit of `staging` finished: nothing to remove for it any more.
    pub(super) fn done(&mut self, staging: &Path) {
        self.0.retain(|l| l.staging != staging);
    }
}
