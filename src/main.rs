//! The `asa-analyze` binary, the one owner of the process: glibc's malloc tunables for its
//! whole life, the signal thread, then the CLI; errors map to exit status 2.

mod signals;

fn main() -> std::process::ExitCode {
    asa_analyze::cpu::heap::keep_freed_memory();
    let process = asa_analyze::cli::Process::new();
    signals::watch(&process);
    asa_analyze::cli::main(&process)
}
