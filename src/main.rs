//! The `asa-analyze` binary: parse arguments, run, map errors to exit status 2.

fn main() -> std::process::ExitCode {
    asa_analyze::cpu::heap::keep_freed_memory();
    asa_analyze::cli::main()
}
