//! The `asa-analyze` binary: parse arguments, run, map errors to exit status 2.

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    asa_analyze::cli::main()
}

/// Serves large allocations from the heap and keeps freed memory for reuse: by default
/// glibc maps and unmaps every allocation over 128 KiB-32 MiB, so each attention block's
/// temporaries would page-fault their way in again (10-15% of the time at 2k tokens).
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator tunables; called before any other thread exists
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
