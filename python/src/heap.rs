//! glibc's malloc tunables while the extension's runs go (`asa_analyze::cpu::heap` says
//! why they pay). The interpreter is a host: the tunables are set when the first of any
//! number of concurrent runs starts and given back (glibc's defaults, the freed memory
//! returned to the system) only when the last one ends, so no run changes them under
//! another.

use std::sync::Mutex;

use asa_analyze::cpu::heap;

/// Runs going now.
static RUNS: Mutex<usize> = Mutex::new(0);

/// One run's share of the tunables: set while at least one lives.
pub struct RunHeap(());

impl RunHeap {
    /// Counts a run in; the first one sets the run's tunables.
    pub fn enter() -> RunHeap {
        let mut runs = RUNS.lock().unwrap_or_else(|e| e.into_inner());
        if *runs == 0 {
            heap::set_run_tunables(true);
        }
        *runs += 1;
        RunHeap(())
    }
}

impl Drop for RunHeap {
    fn drop(&mut self) {
        let mut runs = RUNS.lock().unwrap_or_else(|e| e.into_inner());
        *runs -= 1;
        if *runs == 0 {
            heap::set_run_tunables(false);
        }
    }
}
