//! The schedule of a model's forward passes: all weights in memory, or layer-major with
//! one layer's weights at a time (streamed), chosen from the weights' size in the analysis
//! dtype and the memory budget (SPEC section 8).

use std::path::Path;

use super::record::ScheduleRecord;
use candle_core::Device;

use super::run_spec::RunOptions;
use asa_core::error::{Error, Result};
use asa_core::host_memory::available_memory;
use asa_models::{Checkpoint, LayerTiming};

/// Whether a model's layers are streamed, and why.
pub struct Schedule {
    pub streamed: bool,
    /// Bytes of every weight in the analysis dtype (the in-memory schedule holds them all).
    pub in_memory: u64,
    /// Bytes of the largest layer (the streamed schedule holds one, and reads the next).
    pub largest_layer: u64,
    pub budget: u64,
    pub forced: bool,
    /// Bytes of the residual stream of every window (f32), held between layers.
    pub residual_bytes: u64,
    /// The residual stream goes to a scratch file between layers (streamed runs whose
    /// stream and one layer would pass the budget).
    pub spill: bool,
    /// The least one forward pass of one batch holds besides the weights: three hidden
    /// states of its windows (a layer's input, its output and their sum) in the analysis
    /// dtype.
    pub batch_hidden_bytes: u64,
    /// Windows (`--num-seqs`) and their length (`--seq-len`), batched by `--batch-size`.
    pub windows: (usize, usize, usize),
}

/// Weights above this are streamed by default on the CPU. Both schedules read each weight
/// once, so streaming costs no time and holds one layer instead of all: measured on a
/// Llama-3.2-1B shape in bf16, 1 x 512 (BENCHMARKS.md, "bf16 on the CPU"), streamed 8.4 s
/// and 0.54 GiB peak against 18.6 s and 3.2 GiB in memory. Smaller models stay in memory
/// (nothing to save; every batch then runs all layers at once).
pub const STREAM_BY_DEFAULT_BYTES: u64 = 1 << 30;

/// Whether a model is streamed: when asked (`forced`), or on the CPU when its weights
/// (`in_memory` bytes) would not fit the `budget`, or, when no budget was given (`chosen`
/// false), pass [`STREAM_BY_DEFAULT_BYTES`] while one layer and the residual stream fit it
/// (no scratch file: the cheaper schedule). A `--memory-budget` given decides alone.
fn streams(
    forced: bool,
    cpu: bool,
    in_memory: u64,
    streamed_need: u64,
    budget: (u64, bool),
) -> bool {
    let (budget, chosen) = budget;
    let large = !chosen && in_memory > STREAM_BY_DEFAULT_BYTES && streamed_need <= budget;
    forced || (cpu && (in_memory > budget || large))
}

impl Schedule {
    /// Streamed when asked (`--stream-layers`) or on the CPU by [`streams`]' rule.
    pub fn plan(ckpt: &Checkpoint, o: &RunOptions, device: &Device) -> Schedule {
        let store = &ckpt.store;
        let in_memory = store.footprint("");
        let largest_layer = (0..ckpt.config.num_layers)
            .map(|l| store.footprint(&format!("model.layers.{l}.")))
            .max()
            .unwrap_or(0);
        let budget = o
            .execution
            .memory_budget
            .unwrap_or_else(default_memory_budget);
        let hidden = ckpt.config.hidden_size as u64;
        let residual_bytes = o.spec.num_seqs as u64 * o.spec.seq_len as u64 * hidden * 4;
        let rows = o.execution.batch_size.clamp(1, o.spec.num_seqs.max(1)) as u64;
        let dtype_bytes = store.dtype().size_in_bytes() as u64;
        let batch_hidden_bytes = 3 * rows * o.spec.seq_len as u64 * hidden * dtype_bytes;
        let need = largest_layer + residual_bytes;
        let chosen = (budget, o.execution.memory_budget.is_some());
        let streamed = streams(
            o.execution.stream_layers,
            device.is_cpu(),
            in_memory,
            need,
            chosen,
        );
        Schedule {
            streamed,
            in_memory,
            largest_layer,
            budget,
            forced: o.execution.stream_layers,
            residual_bytes,
            spill: streamed && need > budget,
            batch_hidden_bytes,
            windows: (o.spec.num_seqs, o.spec.seq_len, rows as usize),
        }
    }

    /// Refuses, before any weight is read, a CPU run that cannot fit the memory available
    /// now: the largest layer when streamed, every weight when in memory (a `--memory-budget`
    /// above what the machine has).
    pub fn check_fits(&self, checkpoint: &Path, dtype: &str, device: &Device) -> Result<()> {
        let Some(available) = available_memory().filter(|_| device.is_cpu()) else {
            return Ok(());
        };
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let (need, what, advice) = match self.streamed {
            true => (
                self.largest_layer,
                "its largest layer takes",
                "even streamed one layer at a time it cannot run on this machine",
            ),
            false => (
                self.in_memory,
                "its weights take",
                "lower --memory-budget (or pass --stream-layers) to read one layer at a time",
            ),
        };
        if need > available {
            return Err(Error::input(
                checkpoint,
                format!(
                    "{what} {:.1} GiB in {dtype}, more than the {:.1} GiB of memory available: \
                     {advice}",
                    gib(need),
                    gib(available)
                ),
            ));
        }
        self.check_hidden_states_fit(checkpoint, need, available)
    }

    /// Refuses windows whose hidden states alone (with the `weights` bytes held, and the
    /// residual stream of every window when streamed in memory) pass the memory available:
    /// they would fail an allocation midway.
    fn check_hidden_states_fit(
        &self,
        checkpoint: &Path,
        weights: u64,
        available: u64,
    ) -> Result<()> {
        let held = match self.streamed && !self.spill {
            true => self.residual_bytes,
            false => 0,
        };
        let need = weights
            .saturating_add(held)
            .saturating_add(self.batch_hidden_bytes);
        if need <= available {
            return Ok(());
        }
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let (num_seqs, seq_len, rows) = self.windows;
        Err(Error::input(
            checkpoint,
            format!(
                "{num_seqs} windows of --seq-len {seq_len}, {rows} at once, need at least \
                 {:.1} GiB for their hidden states besides {:.1} GiB of weights, more than the \
                 {:.1} GiB of memory available: lower --seq-len or --batch-size",
                gib(need - weights),
                gib(weights),
                gib(available)
            ),
        ))
    }

    /// The schedule's name.
    pub fn name(&self) -> &'static str {
        if self.streamed {
            "layer-major (streamed)"
        } else {
            "in-memory"
        }
    }

    /// What run.json records: the schedule taken and why, and each streamed layer's times.
    pub fn record(&self, timings: &[LayerTiming]) -> ScheduleRecord {
        ScheduleRecord {
            taken: self.name().to_string(),
            forced: self.forced,
            in_memory_weight_bytes: self.in_memory,
            streamed_layer_bytes: self.largest_layer,
            memory_budget_bytes: self.budget,
            residual_bytes: self.residual_bytes,
            residuals: if self.spill { "scratch file" } else { "memory" }.to_string(),
            layers: timings.to_vec(),
        }
    }
}

/// The default `--memory-budget`: 80% of the memory available now (Linux MemAvailable),
/// 8 GiB when it cannot be read.
pub fn default_memory_budget() -> u64 {
    available_memory().map_or(8 << 30, |free| free / 5 * 4)
}

/// The peak resident memory of this process so far (Linux `VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_models_stream_on_the_cpu_unless_the_residual_stream_would_spill() {
        const GIB: u64 = 1 << 30;
        let default = (16 * GIB, false);
        // (forced, cpu, in memory, one layer + residual stream, budget) -> streamed
        for (case, want) in [
            ((false, true, GIB / 2, GIB / 16, default), false), // small: in memory
            ((false, true, 3 * GIB, GIB / 8, default), true),   // 1B in bf16: streamed
            ((false, true, 3 * GIB, 20 * GIB, default), false), // would spill; fits in memory
            ((false, true, 30 * GIB, 20 * GIB, default), true), // fits neither: streamed, spilled
            ((false, false, 3 * GIB, GIB / 8, default), false), // GPU: in memory
            ((true, false, GIB / 2, GIB / 16, default), true),  // --stream-layers
            ((false, true, 3 * GIB, GIB / 8, (16 * GIB, true)), false), // --memory-budget 16G
            ((false, true, 3 * GIB, GIB / 8, (2 * GIB, true)), true), // --memory-budget 2G
        ] {
            let (forced, cpu, in_memory, need, budget) = case;
            assert_eq!(
                streams(forced, cpu, in_memory, need, budget),
                want,
                "{case:?}"
            );
        }
    }
}
