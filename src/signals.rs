//! The binary's signals (not part of the library: `src/main.rs` owns the process). Every
//! catchable signal that ends a process by default (Ctrl-C's SIGINT, SIGTERM from
//! `timeout`, Slurm or CI, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM, ...) leaves no partial
//! output: a thread waits for them, cancels the run, removes every staging folder the
//! [`Process`]'s watch holds (with the output folders made for them that are still empty)
//! and ends the process by the signal's default action (a shell reports 130, 143, ...). A
//! signal the process was started with ignored stays ignored (`nohup` runs go on after
//! SIGHUP). SIGKILL cannot be caught: the next run into the same `--out` removes what it
//! left.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use asa_cli::Process;

/// The process whose staging folders a failed allocation removes.
static OUT_OF_MEMORY_PROCESS: OnceLock<Process> = OnceLock::new();

/// Makes a failed allocation end the process as a signal does: the run cancelled, its
/// unfinished output removed, one line, exit status 2 (not Rust's abort, exit 134, which
/// leaves the staging folder).
pub fn exit_on_out_of_memory(process: &Process) {
    let _ = OUT_OF_MEMORY_PROCESS.set(process.clone());
    asa_core::out_of_memory::on_out_of_memory(out_of_memory);
}

/// The handler of a failed allocation of `bytes`. Cleaning up allocates a little; a second
/// failure on the same thread ends the process at once, other threads wait for the first.
fn out_of_memory(bytes: usize) -> ! {
    static ENTERED: AtomicBool = AtomicBool::new(false);
    thread_local! {
        static HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if HERE.with(|h| h.replace(true)) {
        let line = b"asa-analyze: out of memory\n";
        // SAFETY: writes a static buffer to stderr and ends the process without unwinding
        unsafe {
            libc::write(2, line.as_ptr().cast(), line.len());
            libc::_exit(2)
        }
    }
    if ENTERED.swap(true, Ordering::SeqCst) {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1)); // the first one exits
        }
    }
    if let Some(process) = OUT_OF_MEMORY_PROCESS.get() {
        process.cancel.cancel();
        // held until the exit below: nothing is committed meanwhile
        let _held = process
            .staging
            .remove_all_within(std::time::Duration::from_secs(2));
    }
    eprintln!(
        "asa-analyze: out of memory: {:.2} GiB more could not be allocated (a shorter \
         --seq-len or a smaller --batch-size needs less); unfinished output removed",
        bytes as f64 / (1u64 << 30) as f64
    );
    // SAFETY: ends the process without exit handlers, as the signal path does
    unsafe { libc::_exit(2) }
}

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
