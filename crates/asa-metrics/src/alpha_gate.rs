//! alpha (paper Sec. 4.3) and gate statistics per (layer, head): the per-query scalars the
//! Affine-Scaled and gated variants compute.

use candle_core::{DType, D};

use super::accumulator::{Accumulator, FinishCtx, Needs, Setup, TensorEvent};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics, PerHead};
use super::rows::to_host;
use super::summary::Distribution;
use super::tables::TableRows;
use super::Metric;
use asa_core::error::Result;
use asa_hooks::Hook;

/// Pools alpha values per (layer, head), queries >= min_query.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AlphaStats {
    heads: usize,
    min_query: usize,
    values: Vec<Vec<Vec<f64>>>,
}

/// Alpha summary per (layer, head) and the stored moving average.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AlphaResult {
    /// `[layer][head]`, std over values.
    pub per_head: Vec<Vec<Distribution>>,
    /// `[layer][head]` stored alpha_ma buffer.
    pub alpha_ma: Vec<Vec<f64>>,
}

impl AlphaStats {
    /// For `layers` x `heads`.
    pub fn new(layers: usize, heads: usize, min_query: usize) -> Self {
        AlphaStats {
            heads,
            min_query,
            values: vec![vec![Vec::new(); heads]; layers],
        }
    }

    /// Adds alpha `[batch, head, T]` (host, row-major) of one layer.
    pub fn add(&mut self, layer: usize, seq_len: usize, alpha: &[f32]) {
        for (row, chunk) in alpha.chunks(seq_len).enumerate() {
            let h = row % self.heads;
            self.values[layer][h].extend(chunk.iter().skip(self.min_query).map(|&v| v as f64));
        }
    }

    /// Summaries with the stored `alpha_ma` `[layer][head]`.
    pub fn finish(&self, alpha_ma: Vec<Vec<f64>>) -> AlphaResult {
        AlphaResult {
            per_head: self
                .values
                .iter()
                .map(|hs| hs.iter().map(|v| Distribution::of(v)).collect())
                .collect(),
            alpha_ma,
        }
    }
}

/// Mean gate value per (layer, head) over sequences, queries >= min_query and head dims.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GateStats {
    heads: usize,
    min_query: usize,
    sum: Vec<Vec<f64>>,
    count: Vec<Vec<f64>>,
}

impl GateStats {
    /// For `layers` x `heads`.
    pub fn new(layers: usize, heads: usize, min_query: usize) -> Self {
        GateStats {
            heads,
            min_query,
            sum: vec![vec![0.0; heads]; layers],
            count: vec![vec![0.0; heads]; layers],
        }
    }

    /// Adds per-(sequence, position, head) gate means `[batch, T, head]` (host).
    pub fn add(&mut self, layer: usize, seq_len: usize, means: &[f32]) {
        for (i, &v) in means.iter().enumerate() {
            let pos = (i / self.heads) % seq_len;
            if pos < self.min_query {
                continue;
            }
            let h = i % self.heads;
            self.sum[layer][h] += v as f64;
            self.count[layer][h] += 1.0;
        }
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.heads
    }

    /// Whether any gate value arrived (only gated variants have gates).
    pub fn has_data(&self) -> bool {
        self.count.iter().flatten().any(|&c| c > 0.0)
    }

    /// `[layer][head]` means.
    pub fn finish(&self) -> Vec<Vec<f64>> {
        self.sum
            .iter()
            .zip(&self.count)
            .map(|(s, c)| s.iter().zip(c).map(|(s, c)| s / c).collect())
            .collect()
    }
}

/// The pooled alpha values of `other` follow this one's.
impl Merge for AlphaStats {
    fn merge(&mut self, other: &AlphaStats) {
        for (mine, theirs) in self.values.iter_mut().zip(&other.values) {
            super::merge::concat(mine, theirs);
        }
    }
}

impl Merge for GateStats {
    fn merge(&mut self, other: &GateStats) {
        self.sum.merge(&other.sum);
        self.count.merge(&other.count);
    }
}

impl Metric {
    /// alpha: the Affine-Scaled alpha per (layer, head), and the stored moving average.
    pub const ALPHA: Metric = Metric::by_default("alpha");
    /// gate: the mean sigmoid gate per (layer, head) (gated variants).
    pub const GATE: Metric = Metric::by_default("gate");
}

/// The alpha accumulator.
pub fn build_alpha(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(AlphaStats::new(s.layers, s.heads, s.opts.min_query))
}

/// The gate accumulator.
pub fn build_gate(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(GateStats::new(s.layers, s.heads, s.opts.min_query))
}

impl Accumulator for AlphaStats {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            tensors: vec![Hook::Alpha],
            ..Needs::default()
        }
    }

    fn tensor(&mut self, event: &TensorEvent) -> Result<()> {
        if event.hook == Hook::Alpha {
            let ctx = event.ctx;
            AlphaStats::add(self, ctx.layer, ctx.seq_len, &to_host(event.xs)?);
        }
        Ok(())
    }

    /// Only for a variant with a stored alpha_ma (the Affine-Scaled ones).
    fn finish(&self, ctx: &FinishCtx, out: &mut ModelMetrics) {
        if let Some(ma) = ctx.alpha_ma {
            out.insert(Metric::ALPHA, AlphaStats::finish(self, ma.to_vec()));
        }
    }
}

impl MetricResult for AlphaResult {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        for (l, heads) in self.per_head.iter().enumerate() {
            for (h, d) in heads.iter().enumerate() {
                for (stat, v) in d.named() {
                    out.push(model, metric.name(), Some(l), Some(h), stat, v);
                }
            }
        }
        out.per_head(model, "alpha_ma", &self.alpha_ma);
    }
}

impl Accumulator for GateStats {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            tensors: vec![Hook::Gate],
            ..Needs::default()
        }
    }

    fn tensor(&mut self, event: &TensorEvent) -> Result<()> {
        if event.hook == Hook::Gate {
            let (ctx, xs) = (event.ctx, event.xs);
            // [batch, T, heads * d] -> mean over d -> [batch, T, heads]
            let (b, t, hd) = xs.dims3()?;
            let means = xs
                .reshape((b, t, self.heads, hd / self.heads))?
                .mean(D::Minus1)?;
            GateStats::add(self, ctx.layer, t, &to_host(&means.to_dtype(DType::F32)?)?);
        }
        Ok(())
    }

    /// Only when gate values arrived (gated variants).
    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        if self.has_data() {
            out.insert(Metric::GATE, PerHead(GateStats::finish(self)));
        }
    }
}
