//! qk_mean (paper Fig. 2): mean of raw q_i . k_j (after RoPE, before 1/sqrt(d) and any
//! variant transform) over all visible pairs j <= i incl. the diagonal (inside the window
//! of a sliding-window layer), every query, head,
//! layer and sequence; also the mean absolute value and per-layer values.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::TableRows;
use super::Metric;
use asa_core::error::Result;
use asa_hooks::row_pass::QkSums;

/// Running sums per layer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct QkMean {
    sum: Vec<f64>,
    abs_sum: Vec<f64>,
    count: Vec<f64>,
}

/// QK^T statistics.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QkResult {
    pub mean: f64,
    pub abs_mean: f64,
    /// `[layer]`.
    pub per_layer_mean: Vec<f64>,
    /// `[layer]`.
    pub per_layer_abs_mean: Vec<f64>,
}

impl QkMean {
    /// For `layers` layers.
    pub fn new(layers: usize) -> Self {
        QkMean {
            sum: vec![0.0; layers],
            abs_sum: vec![0.0; layers],
            count: vec![0.0; layers],
        }
    }

    /// Adds a block's q.k sums.
    pub fn add_sums(&mut self, layer: usize, qk: QkSums) {
        self.sum[layer] += qk.sum;
        self.abs_sum[layer] += qk.abs_sum;
        self.count[layer] += qk.pairs;
    }

    /// Overall and per-layer means.
    pub fn finish(&self) -> QkResult {
        let total: f64 = self.count.iter().sum();
        QkResult {
            mean: self.sum.iter().sum::<f64>() / total,
            abs_mean: self.abs_sum.iter().sum::<f64>() / total,
            per_layer_mean: self
                .sum
                .iter()
                .zip(&self.count)
                .map(|(s, c)| s / c)
                .collect(),
            per_layer_abs_mean: self
                .abs_sum
                .iter()
                .zip(&self.count)
                .map(|(s, c)| s / c)
                .collect(),
        }
    }
}

impl Merge for QkMean {
    fn merge(&mut self, other: &QkMean) {
        self.sum.merge(&other.sum);
        self.abs_sum.merge(&other.abs_sum);
        self.count.merge(&other.count);
    }
}

impl Metric {
    /// qk_mean: mean raw q.k over causal pairs, and of |q.k| (Fig. 2).
    pub const QK_MEAN: Metric = Metric::by_default("qk_mean");
}

/// The qk_mean accumulator.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(QkMean::new(s.layers))
}

impl Accumulator for QkMean {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            qk: true,
            ..Needs::default()
        }
    }

    /// The block's q.k sums.
    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(qk) = b.qk {
            self.add_sums(b.layer, qk);
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::QK_MEAN, QkMean::finish(self));
    }
}

impl MetricResult for QkResult {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        let (mean, abs_mean) = (metric.name(), "qk_abs_mean");
        out.push(model, mean, None, None, "mean", self.mean);
        out.push(model, abs_mean, None, None, "mean", self.abs_mean);
        let layers = self.per_layer_mean.iter().zip(&self.per_layer_abs_mean);
        for (l, (&a, &b)) in layers.enumerate() {
            out.push(model, mean, Some(l), None, "mean", a);
            out.push(model, abs_mean, Some(l), None, "mean", b);
        }
    }
}
