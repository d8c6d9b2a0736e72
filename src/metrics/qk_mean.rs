//! qk_mean (paper Fig. 2): mean of raw q_i . k_j (after RoPE, before 1/sqrt(d) and any
//! variant transform) over all visible pairs j <= i incl. the diagonal (inside the window
//! of a sliding-window layer), every query, head,
//! layer and sequence; also the mean absolute value and per-layer values.

use super::accumulator::{Accumulator, Event, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::TableRows;
use super::Metric;
use crate::probe::row_table::{QK_ABS_SUM, QK_SUM};
use candle_core::{Tensor, D};

use crate::error::Result;
use crate::probe::blocks::visibility;
use crate::probe::row_pass::qk_sums;
use crate::probe::KeyWindow;

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

    /// Adds raw q.k `[batch, head, n, q_start + n]` of queries `q_start ..` over the keys
    /// `window` lets each see.
    pub fn add(
        &mut self,
        layer: usize,
        raw: &Tensor,
        q_start: usize,
        window: KeyWindow,
    ) -> Result<()> {
        let (b, h, n, _) = raw.dims4()?;
        if let Some((sum, abs_sum)) = qk_sums(raw, q_start, window)? {
            self.add_sums(
                layer,
                sum,
                abs_sum,
                b * h * window.pairs(q_start..q_start + n),
            );
            return Ok(());
        }
        let visible = visibility(q_start, n, window, raw.device())?;
        let masked = raw.broadcast_mul(&visible)?;
        // per-row partial sums keep f32 accumulation short; the total is summed in f64
        let rows = masked.sum(D::Minus1)?.flatten_all()?.to_vec1::<f32>()?;
        let abs_rows = masked
            .abs()?
            .sum(D::Minus1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        self.sum[layer] += rows.iter().map(|&v| v as f64).sum::<f64>();
        self.abs_sum[layer] += abs_rows.iter().map(|&v| v as f64).sum::<f64>();
        self.count[layer] += (b * h) as f64 * visible.sum_all()?.to_scalar::<f32>()? as f64;
        Ok(())
    }

    /// Adds the sum and absolute sum of raw q.k over `pairs` visible (query, key) pairs.
    pub fn add_sums(&mut self, layer: usize, sum: f64, abs_sum: f64, pairs: usize) {
        self.sum[layer] += sum;
        self.abs_sum[layer] += abs_sum;
        self.count[layer] += pairs as f64;
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

    /// From a fused kernel's q.k columns, or a materialised block's raw q.k.
    fn add(&mut self, event: &Event) -> Result<()> {
        let Event::Block(b) = event else {
            return Ok(());
        };
        if let Some(qk) = b.qk {
            QkMean::add(self, b.layer, qk, b.q_start, b.window)?;
        }
        if let Some(rows) = b.rows.filter(|r| r.fused) {
            let p = rows.pools;
            let pairs = p.counted[QK_SUM].len() * b.window.pairs(b.q_start..b.q_start + b.q_len);
            self.add_sums(b.layer, p.total(QK_SUM), p.total(QK_ABS_SUM), pairs);
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
