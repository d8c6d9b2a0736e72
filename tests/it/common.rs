//! Helpers of the binary's tests: running the built `asa-analyze` and reading what it says;
//! the library's helpers (fixtures, references, edited checkpoints) are asa-analysis'
//! `tests/library/common.rs`, included here.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

#[path = "../../crates/asa-analysis/tests/library/common.rs"]
mod library;
pub use library::*;

/// Runs the built binary with `args` in `dir`.
pub fn run_cli(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(args)
        .current_dir(dir)
        // a test run inside a Slurm array or a Kubernetes indexed job is not a shard
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("binary runs")
}

/// Caps the address space of the process `command` starts at `bytes`: a size read from a
/// hostile input must be refused, not allocated.
pub fn cap_address_space(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; it only caps the child's address space
    unsafe {
        command.pre_exec(move || {
            let cap = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            libc::setrlimit(libc::RLIMIT_AS, &cap);
            Ok(())
        });
    }
}

/// stdout of a run, asserting it succeeded (its stderr in the failure message).
pub fn expect_success(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

/// stderr of a failed run, asserting exit status 2 and a single line.
pub fn expect_error(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(
        output.status.code(),
        Some(2),
        "exit status; stderr: {stderr}"
    );
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "one-line error: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// `analyze` of `model` (a path or `label=path`) on 2 windows of 16 tokens into `out`,
/// quiet, with `extra` flags, run in `dir`.
pub fn analyze_briefly(dir: &Path, model: &str, out: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "analyze",
        model,
        "--seq-len",
        "16",
        "--num-seqs",
        "2",
        "--quiet",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    run_cli(dir, &args)
}
