//! Ctrl-C leaves no partial output: every live staging folder is registered here, and the
//! SIGINT handler removes them (with the output folders made for them that are still empty)
//! before the process exits with status 130. A commit holds the registry's lock while it
//! moves files, so an interrupt lands before or after it, never halfway.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

/// A staging folder not yet committed, and what to clean up with it.
struct Live {
    staging: PathBuf,
    made: Option<PathBuf>,
    target: PathBuf,
}

static LIVE: Mutex<Vec<Live>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Exit status after an interrupt (128 + SIGINT, as shells report it).
pub const INTERRUPTED_STATUS: i32 = 130;

/// Records a staging folder; installs the SIGINT handler on first use, unless SIGINT is
/// ignored (a job started in the background by a non-interactive shell keeps ignoring it).
pub(super) fn register(staging: &Path, made: Option<&Path>, target: &Path) {
    HANDLER.call_once(|| {
        if !sigint_ignored() {
            // fails only where a handler was set through ctrlc before (a host program
            // embedding the library); that one stays
            let _ = ctrlc::set_handler(on_interrupt);
        }
    });
    live().push(Live {
        staging: staging.to_path_buf(),
        made: made.map(Path::to_path_buf),
        target: target.to_path_buf(),
    });
}

/// Forgets a staging folder that was removed.
pub(super) fn unregister(staging: &Path) {
    live().retain(|l| l.staging != staging);
}

/// Holds off the interrupt handler while a commit moves files; the commit unregisters its
/// staging folder through [`Commit::done`] before the guard is dropped.
pub(super) struct Commit(MutexGuard<'static, Vec<Live>>);

impl Commit {
    /// Blocks interrupts until dropped.
    pub(super) fn begin() -> Commit {
        Commit(live())
    }

    /// The commit of `staging` finished: nothing to remove for it any more.
    pub(super) fn done(&mut self, staging: &Path) {
        self.0.retain(|l| l.staging != staging);
    }
}

/// The registry, even after a thread panicked while holding it (the list stays valid).
fn live() -> MutexGuard<'static, Vec<Live>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(unix)]
fn sigint_ignored() -> bool {
    // SAFETY: queries the current action only (a null new action changes nothing)
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGINT, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

#[cfg(not(unix))]
fn sigint_ignored() -> bool {
    false
}

/// Removes every registered staging folder, says so, and exits at once.
fn on_interrupt() {
    // the lock is held until exit: no staging folder is registered or committed meanwhile
    let live = live();
    // twice: a writer thread may have recreated a folder inside a staging folder while the
    // first pass ran (it keeps running until exit)
    for pass in 0..2 {
        if pass == 1 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // innermost targets first, so a folder made for an outer one is empty when reached
        for l in live.iter().rev() {
            super::writer::remove_uncommitted(&l.staging, l.made.as_deref(), &l.target);
        }
    }
    eprintln!("asa-analyze: interrupted; unfinished output removed");
    exit_now();
}

/// Exits without running exit handlers (other threads may be inside a device kernel).
#[cfg(unix)]
fn exit_now() -> ! {
    // SAFETY: _exit ends the process; stderr is unbuffered, so the message is out
    unsafe { libc::_exit(INTERRUPTED_STATUS) }
}

#[cfg(not(unix))]
fn exit_now() -> ! {
    std::process::exit(INTERRUPTED_STATUS)
}
