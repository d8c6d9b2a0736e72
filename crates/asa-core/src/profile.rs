//! `--profile`: where a run's time goes, phase by phase (q/k/v projections, the attention
//! blocks' products and softmax, the MLP, logits, NLL, copies of metric tables). Off by
//! default, when a phase costs one thread-local read. On, a phase waits for the device at
//! its end, so its "total" includes the device work it queued; "host" is the time the host
//! spent queueing that work. Their difference is device time the host was not waiting for;
//! summed over phases, "host" close to "total" means the run is bound by the host.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use candle_core::Device;

thread_local! {
    /// The recording of this thread's run (a run's forward passes and metrics run on the
    /// thread that called it): no state is shared between threads, so a run profiled in one
    /// thread leaves the runs of others untouched.
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// The device to wait for and the time recorded per phase.
struct State {
    device: Device,
    phases: BTreeMap<&'static str, Totals>,
}

/// Calls, host time and total time of one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub calls: u64,
    pub host: Duration,
    pub total: Duration,
}

/// Starts recording this thread's phases on `device` (and forgets earlier ones).
pub fn enable(device: &Device) {
    STATE.with_borrow_mut(|state| {
        *state = Some(State {
            device: device.clone(),
            phases: BTreeMap::new(),
        })
    });
}

/// A phase that ends when the returned guard is dropped.
pub fn phase(name: &'static str) -> Phase {
    let on = STATE.with_borrow(Option::is_some);
    Phase {
        name,
        started: on.then(Instant::now),
    }
}

/// A running phase (see [`phase`]).
#[must_use = "a phase ends when its guard is dropped"]
pub struct Phase {
    name: &'static str,
    started: Option<Instant>,
}

impl Drop for Phase {
    fn drop(&mut self) {
        let Some(started) = self.started else {
            return;
        };
        STATE.with_borrow_mut(|state| {
            let Some(state) = state.as_mut() else {
                return;
            };
            let host = started.elapsed();
            // a failed wait shows up as a short total; the run itself reports device errors
            let _ = state.device.synchronize();
            let total = started.elapsed();
            let t = state.phases.entry(self.name).or_default();
            t.calls += 1;
            t.host += host;
            t.total += total;
        });
    }
}

/// The phases this thread recorded since [`enable`], by name.
pub fn totals() -> BTreeMap<&'static str, Totals> {
    STATE.with_borrow(|state| state.as_ref().map(|s| s.phases.clone()).unwrap_or_default())
}

/// The phases as a table, longest first, with the run's `elapsed` time for scale.
pub fn report(elapsed: Duration) -> String {
    let mut rows: Vec<_> = totals().into_iter().collect();
    rows.sort_by(|a, b| b.1.total.cmp(&a.1.total));
    let mut out = format!(
        "{:<34} {:>8} {:>10} {:>10} {:>6}\n",
        "phase", "calls", "host s", "total s", "share"
    );
    for (name, t) in &rows {
        out.push_str(&format!(
            "{:<34} {:>8} {:>10.3} {:>10.3} {:>5.1}%\n",
            name,
            t.calls,
            t.host.as_secs_f64(),
            t.total.as_secs_f64(),
            100.0 * t.total.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)
        ));
    }
    let covered: f64 = rows.iter().map(|(_, t)| t.total.as_secs_f64()).sum();
    let run = elapsed.as_secs_f64();
    out.push_str(&format!(
        "all phases: {covered:.3} s of the run's {run:.3} s ({:.1}%)\n",
        100.0 * covered / run.max(1e-9)
    ));
    out
}
