//! The `asa-analyze` binary: parse arguments, run, map errors to exit status 2.

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    asa_analyze::cli::main()
}

/// Serves large allocations from glibc's heap (M_MMAP_THRESHOLD 1 GiB instead of mapping
/// each one) and keeps freed memory there for reuse (M_TRIM_THRESHOLD 1 GiB). Each
/// attention block frees and reallocates the same temporaries; mapped and unmapped, they
/// would page-fault their way in again every block (SmolLM2, 2k tokens: 440k page faults
/// by default, 2.6M with only the trim setting, 160k with both, most of those the weights'
/// first touch; 8k tokens: 56 s by default, 42-47 s with both).
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator tunables; called before any other thread exists
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
