//! nll: next-token negative log-likelihood from logit blocks, never holding [T, vocab]
//! logits for the whole sequence; per target position and overall (perplexity). On a GPU
//! one kernel computes each block's log-sum-exp and picks the target (`cuda::nll`); on the
//! CPU, for bf16 logits, one pass per row over their host values does ([`host_nll`]), so no
//! temporary the size of the block is made (a 1B model's 512 x 128,256 block is 0.26 GB in
//! f32); f32 logits keep candle's ops, whose sums the f32 tables are pinned to.

use super::accumulator::{Accumulator, FinishCtx, Needs, Setup, TensorEvent};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::{decade_bins, floats, ints, strs, TableRows};
use super::Metric;
use asa_hooks::Hook;
use asa_tables::schema;
use candle_core::{DType, Tensor, D};

use asa_core::error::Result;
use asa_core::profile::phase;

/// Accumulates -log p(x_{p} | x_{<p}) per target position p = 1 .. T-1.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Nll {
    /// Target ids `[seq][T]` of the whole run.
    targets: Vec<Vec<u32>>,
    sum: Vec<f64>,
    count: Vec<f64>,
}

/// Likelihood results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NllResult {
    pub mean: f64,
    pub ppl: f64,
    /// `[position]` for target positions 1 ..= T-1 (index 0 is position 1).
    pub per_position: Vec<f64>,
}

impl Nll {
    /// For the run's token windows.
    pub fn new(windows: &[Vec<u32>]) -> Self {
        let t = windows.first().map_or(0, Vec::len);
        Nll {
            targets: windows.to_vec(),
            sum: vec![0.0; t.saturating_sub(1)],
            count: vec![0.0; t.saturating_sub(1)],
        }
    }

    /// Adds logits `[batch, n, vocab]` (any float dtype; f32 math) for positions `start .. start + n` of sequences
    /// `seq_offset ..`: position p predicts the token at p + 1.
    pub fn add(&mut self, seq_offset: usize, start: usize, logits: &Tensor) -> Result<()> {
        let _p = phase("nll");
        let (b, n, _) = logits.dims3()?;
        let t = self.sum.len() + 1;
        let n_pred = n.min(t - 1 - start.min(t - 1));
        if n_pred == 0 {
            return Ok(());
        }
        let logits = logits.narrow(1, 0, n_pred)?.contiguous()?;
        let mut ids = Vec::with_capacity(b * n_pred);
        for s in 0..b {
            ids.extend_from_slice(&self.targets[seq_offset + s][start + 1..start + 1 + n_pred]);
        }
        let rows = logits.reshape((b * n_pred, ()))?;
        let fused = match device_nll(&rows, &ids)? {
            Some(nll) => Some(nll),
            // bf16 only: f32 tables stay bit-identical to the candle ops' below
            None if rows.dtype() == DType::BF16 => host_nll(&rows, &ids)?,
            None => None,
        };
        let nll = match fused {
            Some(nll) => nll,
            None => {
                let logits = logits.to_dtype(DType::F32)?;
                let ids = Tensor::from_vec(ids, (b, n_pred, 1), logits.device())?;
                let max = logits.max_keepdim(D::Minus1)?;
                let lse = (logits
                    .broadcast_sub(&max)?
                    .exp()?
                    .sum_keepdim(D::Minus1)?
                    .log()?
                    + &max)?;
                let picked = logits.gather(&ids, D::Minus1)?;
                (lse - picked)?.flatten_all()?.to_vec1::<f32>()?
            }
        };
        for (i, v) in nll.into_iter().enumerate() {
            let p = start + i % n_pred;
            self.sum[p] += v as f64;
            self.count[p] += 1.0;
        }
        Ok(())
    }

    /// Mean, perplexity, per-position means.
    pub fn finish(&self) -> NllResult {
        let mean = self.sum.iter().sum::<f64>() / self.count.iter().sum::<f64>();
        NllResult {
            mean,
            ppl: mean.exp(),
            per_position: self
                .sum
                .iter()
                .zip(&self.count)
                .map(|(s, c)| s / c)
                .collect(),
        }
    }
}

/// Per-row NLL of `logits` `[rows, vocab]` by the CUDA kernel, where they are on a GPU.
#[cfg(feature = "cuda")]
fn device_nll(logits: &Tensor, targets: &[u32]) -> Result<Option<Vec<f32>>> {
    asa_kernels::cuda::nll::nll_rows(logits, targets)
}

#[cfg(not(feature = "cuda"))]
fn device_nll(_: &Tensor, _: &[u32]) -> Result<Option<Vec<f32>>> {
    Ok(None)
}

/// Each row's -log softmax at its target from the host values of contiguous CPU logits
/// `[rows, vocab]` (f32, or bf16 widened a row at a time): the row's maximum, then the sum of
/// exp(x - max) in f32 lanes with an f64 total, both cores taking rows. A target past the
/// vocabulary gives NaN; `None` for logits on another device or of another dtype.
fn host_nll(logits: &Tensor, targets: &[u32]) -> Result<Option<Vec<f32>>> {
    use candle_core::Storage;
    use rayon::prelude::*;
    let (rows, vocab) = logits.dims2()?;
    if !matches!(logits.dtype(), DType::F32 | DType::BF16) || targets.len() != rows {
        return Ok(None);
    }
    let logits = logits.contiguous()?;
    let (storage, layout) = logits.storage_and_layout();
    let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) else {
        return Ok(None);
    };
    let nll = |row: &[f32], target: u32| -> f32 {
        match row.get(target as usize) {
            Some(&x) => asa_kernels::simd_dispatch!(log_sum_exp(row)) - x,
            None => f32::NAN,
        }
    };
    Ok(Some(match logits.dtype() {
        DType::BF16 => {
            let all = &cpu.as_slice::<half::bf16>()?[start..end];
            (0..rows)
                .into_par_iter()
                .map(|r| {
                    let row: Vec<f32> = all[r * vocab..(r + 1) * vocab]
                        .iter()
                        .map(|v| v.to_f32())
                        .collect();
                    nll(&row, targets[r])
                })
                .collect()
        }
        _ => {
            let all = &cpu.as_slice::<f32>()?[start..end];
            (0..rows)
                .into_par_iter()
                .map(|r| nll(&all[r * vocab..(r + 1) * vocab], targets[r]))
                .collect()
        }
    }))
}

/// ln sum_j e^(x_j) of a row, shifted by its maximum.
#[inline(always)]
fn log_sum_exp(row: &[f32]) -> f32 {
    use asa_kernels::cpu::host::{lane_max, lane_sum};
    let max = lane_max(row, |x| x);
    if !max.is_finite() {
        return max;
    }
    let sum = lane_sum(row, |x| asa_kernels::cpu::fast_math::exp(x - max));
    (sum.ln() + max as f64) as f32
}

impl Merge for Nll {
    fn merge(&mut self, other: &Nll) {
        self.sum.merge(&other.sum);
        self.count.merge(&other.count);
    }
}

impl Metric {
    /// nll: next-token negative log-likelihood per position, and perplexity.
    pub const NLL: Metric = Metric::by_default("nll");
}

/// The nll accumulator over the run's windows.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(Nll::new(s.windows))
}

impl Accumulator for Nll {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            tensors: vec![Hook::Logits],
            ..Needs::default()
        }
    }

    fn tensor(&mut self, event: &TensorEvent) -> Result<()> {
        if event.hook == Hook::Logits {
            Nll::add(self, event.seq_offset, event.ctx.q_start, event.xs)?;
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::NLL, Nll::finish(self));
    }
}

impl MetricResult for NllResult {
    /// `nll` and `ppl` rows, `nll_position.csv` and `nll_bins.csv`.
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        out.push(model, metric.name(), None, None, "mean", self.mean);
        out.push(model, "ppl", None, None, "mean", self.ppl);
        let positions = self.per_position.len();
        out.append(schema::NLL_POSITION.build(vec![
            ("model", strs((0..positions).map(|_| model.to_string()))),
            ("position", ints((1..=positions).map(|p| p as i64))),
            ("nll", floats(self.per_position.iter().copied())),
        ]));
        let bins = decade_bins(&self.per_position);
        out.append(schema::NLL_BINS.build(vec![
            ("model", strs(bins.iter().map(|_| model.to_string()))),
            ("positions", strs(bins.iter().map(|b| b.0.clone()))),
            ("nll", floats(bins.iter().map(|b| b.1))),
        ]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The host pass against float64 -log softmax at the target, on f32 logits and on the
    /// same values rounded to bf16 (each against its own values); a target past the
    /// vocabulary is NaN.
    #[test]
    fn host_nll_is_the_float64_negative_log_softmax() {
        let (rows, vocab) = (7, 1000);
        let values: Vec<f32> = (0..rows * vocab)
            .map(|i| ((i as f32 * 0.731).sin() * 9.0) + (i % 13) as f32 * 0.5)
            .collect();
        let targets: Vec<u32> = (0..rows as u32).map(|r| r * 97 % vocab as u32).collect();
        let logits = Tensor::from_vec(values, (rows, vocab), &Device::Cpu).unwrap();
        for dtype in [DType::F32, DType::BF16] {
            let logits = logits.to_dtype(dtype).unwrap();
            let got = host_nll(&logits, &targets).unwrap().unwrap();
            let exact = logits
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec2::<f64>()
                .unwrap();
            for (r, row) in exact.iter().enumerate() {
                let max = row.iter().cloned().fold(f64::MIN, f64::max);
                let lse = row.iter().map(|x| (x - max).exp()).sum::<f64>().ln() + max;
                let want = lse - row[targets[r] as usize];
                let err = (got[r] as f64 - want).abs();
                assert!(
                    err <= 1e-5 * want.abs().max(1.0),
                    "{dtype:?} row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
        let past = host_nll(&logits, &[0, 1, 2, 3, 4, 5, vocab as u32])
            .unwrap()
            .unwrap();
        assert!(past[6].is_nan() && past[0].is_finite());
    }
}
