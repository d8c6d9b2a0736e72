//! Every catchable signal that ends a process by default (Ctrl-C's SIGINT, SIGTERM from
//! `timeout`, Slurm or CI, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM, ...) leaves no partial
//! output: every live staging folder is registered here, and a signal thread removes them
//! (with the output folders made for them that are still empty) before the process ends by
//! the signal's default action (a shell reports 130, 143, ...). A commit holds the registry's
//! lock while it moves files, so a signal lands before or after it, never halfway. A signal
//! the process was started with ignored stays ignored (`nohup` runs go on after SIGHUP).
//! SIGKILL cannot be caught: the next run into the same `--out` removes what it left.

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

/// Records a staging folder; starts the signal thread on first use.
pub(super) fn register(staging: &Path, made: Option<&Path>, target: &Path) {
    HANDLER.call_once(watch_signals);
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

/// Waits for the signals that end a process by default on a thread of its own, each unless
/// the process was started with it ignored (a job put in the background by a
/// non-interactive shell ignores SIGINT, `nohup` SIGHUP, and they keep doing so).
#[cfg(unix)]
fn watch_signals() {
    use signal_hook::consts::{
        SIGALRM, SIGHUP, SIGINT, SIGPROF, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGVTALRM, SIGXCPU,
        SIGXFSZ,
    };
    let wanted: Vec<i32> = [
        SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGXFSZ, SIGVTALRM,
        SIGPROF,
    ]
    .into_iter()
    .filter(|&s| !ignored(s))
    .collect();
    if wanted.is_empty() {
        return;
    }
    let Ok(mut signals) = signal_hook::iterator::Signals::new(&wanted) else {
        return; // nothing was installed: the signals keep their default action
    };
    let spawned = std::thread::Builder::new()
        .name("asa-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                remove_and_exit(signal);
            }
        });
    if spawned.is_err() {
        // the handlers stay installed with nobody to act on them: give the default back
        for signal in wanted {
            // SAFETY: restores the default disposition of a signal we installed a handler for
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

#[cfg(not(unix))]
fn watch_signals() {}

/// Whether `signal`'s disposition is "ignore".
#[cfg(unix)]
fn ignored(signal: i32) -> bool {
    // SAFETY: queries the current action only (a null new action changes nothing)
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Removes every registered staging folder, says so, and ends the process by `signal`'s
/// default action (so a calling shell sees the signal, e.g. a loop stops on Ctrl-C).
#[cfg(unix)]
fn remove_and_exit(signal: i32) -> ! {
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
    let name = match signal {
        libc::SIGINT => "interrupted",
        libc::SIGTERM => "terminated",
        _ => "ended by a signal",
    };
    eprintln!("asa-analyze: {name} ({signal}); unfinished output removed");
    // the default action runs no exit handlers (other threads may be inside a device
    // kernel); stderr is unbuffered, so the message is out
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    // SAFETY: as above; only reached if the default action could not be raised
    unsafe { libc::_exit(128 + signal) }
}
