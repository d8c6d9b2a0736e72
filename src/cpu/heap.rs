//! glibc's malloc tunables for an analysis run: large allocations served from the heap
//! (M_MMAP_THRESHOLD 1 GiB instead of mapping each one) and freed memory kept there for
//! reuse (M_TRIM_THRESHOLD 1 GiB). Each attention block frees and reallocates the same
//! temporaries; mapped and unmapped, they would page-fault their way in again every block
//! (SmolLM2, 2k tokens: 440k page faults by default, 2.6M with only the trim setting, 160k
//! with both, most of those the weights' first touch; 8k tokens: 56 s by default, 42-47 s
//! with both). The binary sets them for its whole life; a host process (Python) for the
//! length of a run, with glibc's defaults and the freed memory given back after it.

/// Both thresholds during a run.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const RUN_THRESHOLD: libc::c_int = 1 << 30;
/// glibc's default for both (M_MMAP_THRESHOLD's starting value, M_TRIM_THRESHOLD's value).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const GLIBC_DEFAULT: libc::c_int = 128 * 1024;

/// Sets the run's tunables for the rest of the process (the binary, before any thread).
pub fn keep_freed_memory() {
    set_thresholds(true);
}

/// The run's tunables while it lives; glibc's defaults again, and the freed memory
/// returned to the system, when it is dropped.
pub struct RunHeap(());

impl RunHeap {
    /// Sets the run's tunables.
    pub fn enter() -> RunHeap {
        set_thresholds(true);
        RunHeap(())
    }
}

impl Drop for RunHeap {
    fn drop(&mut self) {
        set_thresholds(false);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free heap memory to the system
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

fn set_thresholds(run: bool) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let value = if run { RUN_THRESHOLD } else { GLIBC_DEFAULT };
        // SAFETY: mallopt only sets allocator tunables (glibc takes the arena lock)
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, value);
            libc::mallopt(libc::M_TRIM_THRESHOLD, value);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = run;
}
