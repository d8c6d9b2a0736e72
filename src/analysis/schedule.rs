//! The schedule of a model's forward passes: all weights in memory, or layer-major with
//! one layer's weights at a time (streamed), chosen from the weights' size in the analysis
//! dtype and the memory budget (SPEC section 8).

use std::path::Path;

use super::record::ScheduleRecord;
use candle_core::Device;

use super::run::RunOptions;
use crate::device::available_memory;
use crate::error::{Error, Result};
use crate::model::{Checkpoint, LayerTiming};

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
}

impl Schedule {
    /// Streamed when asked (`--stream-layers`) or, on the CPU, when the weights would not
    /// fit the memory budget.
    pub fn plan(ckpt: &Checkpoint, o: &RunOptions, device: &Device) -> Schedule {
        let store = &ckpt.store;
        let in_memory = store.footprint("");
        let largest_layer = (0..ckpt.config.num_layers)
            .map(|l| store.footprint(&format!("model.layers.{l}.")))
            .max()
            .unwrap_or(0);
        let budget = o.memory_budget.unwrap_or_else(default_memory_budget);
        let streamed = o.stream_layers || (device.is_cpu() && in_memory > budget);
        let residual_bytes = (o.num_seqs * o.seq_len * ckpt.config.hidden_size * 4) as u64;
        Schedule {
            streamed,
            in_memory,
            largest_layer,
            budget,
            forced: o.stream_layers,
            residual_bytes,
            spill: streamed && largest_layer + residual_bytes > budget,
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
        if need <= available {
            return Ok(());
        }
        Err(Error::input(
            checkpoint,
            format!(
                "{what} {:.1} GiB in {dtype}, more than the {:.1} GiB of memory available: \
                 {advice}",
                gib(need),
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
