//! The `asa-analyze` binary, the one owner of the process: glibc's malloc tunables and the
//! compute threads for its whole life, the signal thread, then the CLI; errors map to exit
//! status 2.

mod signals;

/// The system allocator; a failed allocation ends the run cleanly (exit 2, no staging
/// folder left) instead of aborting.
#[global_allocator]
static ALLOCATOR: asa_core::out_of_memory::ExitOnOutOfMemory =
    asa_core::out_of_memory::ExitOnOutOfMemory;

fn main() -> std::process::ExitCode {
    asa_kernels::cpu::heap::keep_freed_memory();
    one_compute_thread_for_demo();
    let process = asa_cli::Process::new();
    signals::watch(&process);
    signals::exit_on_out_of_memory(&process);
    asa_tables::damaged::quiet_guarded_panics();
    asa_cli::main(&process)
}

/// `demo` trains its five small models in parallel threads, one compute thread each (on a
/// small model faster than sharing the cores per matmul): candle's and rayon's pools read
/// their size from `RAYON_NUM_THREADS` once, so it is set here, before any thread starts,
/// unless the environment sets it (measured: 138 s with one thread each, 301 s without).
fn one_compute_thread_for_demo() {
    let demo = std::env::args_os().nth(1).is_some_and(|a| a == "demo");
    if demo && std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
}
