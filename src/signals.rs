//! The binary's signals (not part of the library: `src/main.rs` owns the process). Every
//! catchable signal that ends a process by default (Ctrl-C's SIGINT, SIGTERM from
//! `timeout`, Slurm or CI, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM, ...) leaves no partial
//! output: a thread waits for them, cancels the run, removes every staging folder the
//! [`Process`]'s watch holds (with the output folders made for them that are still empty)
//! and ends the process by the signal's default action (a shell reports 130, 143, ...). A
//! signal the process was started with ignored stays ignored (`nohup` runs go on after
//! SIGHUP). SIGKILL cannot be caught: the next run into the same `--out` removes what it
//! left.

use asa_analyze::cli::Process;

/// Waits for the signals that end a process by default on a thread of its own, each unless
/// the process was started with it ignored (a job put in the background by a
/// non-interactive shell ignores SIGINT, `nohup` SIGHUP, and they keep doing so).
#[cfg(unix)]
pub fn watch(process: &Process) {
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
    let process = process.clone();
    let spawned = std::thread::Builder::new()
        .name("asa-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                remove_and_exit(&process, signal);
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
pub fn watch(_process: &Process) {}

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

/// Cancels the run, removes every unfinished output folder, says so, and ends the process by
/// `signal`'s default action (so a calling shell sees the signal, e.g. a loop stops on
/// Ctrl-C).
#[cfg(unix)]
fn remove_and_exit(process: &Process, signal: i32) -> ! {
    process.cancel.cancel();
    // the lock is held until exit: no staging folder is registered or committed meanwhile
    let _held = process.staging.remove_all();
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
