//! glibc's malloc tunables for analysis runs: large allocations served from the heap
//! (M_MMAP_THRESHOLD 1 GiB instead of mapping each one) and freed memory kept there for
//! reuse (M_TRIM_THRESHOLD 1 GiB). Each attention block frees and reallocates the same
//! temporaries; mapped and unmapped, they would page-fault their way in again every block
//! (SmolLM2, 2k tokens: 440k page faults by default, 2.6M with only the trim setting, 160k
//! with both, most of those the weights' first touch; 8k tokens: 56 s by default, 42-47 s
//! with both). The library never calls these: they change the whole process, so they are
//! the host's to set. The binary sets them for its whole life (`main`); the Python
//! extension never does: any `mallopt` of the mmap threshold, even to its default, turns off
//! glibc's dynamic threshold for the rest of the process, and a torch training loop in that
//! process then mmaps every large tensor (40 % slower, measured).

/// Both thresholds during a run.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const RUN_THRESHOLD: libc::c_int = 1 << 30;
/// glibc's default for both (M_MMAP_THRESHOLD's starting value, M_TRIM_THRESHOLD's value).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const GLIBC_DEFAULT: libc::c_int = 128 * 1024;

/// Sets the run's tunables for the rest of the process (the binary, before any thread).
pub fn keep_freed_memory() {
    set_run_tunables(true);
}

/// The run's tunables (`run`), or glibc's defaults with the freed memory returned to the
/// system. Process-wide: for a host that knows no run is going when it gives them back.
pub fn set_run_tunables(run: bool) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let value = if run { RUN_THRESHOLD } else { GLIBC_DEFAULT };
        // SAFETY: mallopt only sets allocator tunables (glibc takes the arena lock);
        // malloc_trim only returns free heap memory to the system
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, value);
            libc::mallopt(libc::M_TRIM_THRESHOLD, value);
            if !run {
                libc::malloc_trim(0);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = run;
}
