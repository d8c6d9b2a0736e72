//! weight_sum (paper Fig. 3) and head_total (Fig. 5): sum_j a_ij per query, averaged over
//! heads (W_i) or over queries per head.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_kernels::row_table::{RowWants, SUM};
use asa_tables::schema;
use std::ops::Range;

use super::layer_stat::head_means;
use super::rows::{Pool, RowAccumulator};
use super::summary::{constant_histogram, histogram, mean, Distribution, Histogram};
use asa_kernels::row_table::Column;

/// Accumulates row sums.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WeightSum {
    heads: usize,
    rows: RowAccumulator,
    /// `[layer]` pooled W_i values (mean over heads), queries >= min_query.
    values: Vec<Vec<f64>>,
}

/// Weight-sum results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WeightSumResult {
    /// `[layer]` summary of W_i; `std` is over sequences.
    pub per_layer: Vec<Distribution>,
    /// W_i pooled over layers.
    pub histogram: Histogram,
    /// `[layer][head]` mean over queries of sum_j a_ij (head_total).
    pub head_total: Vec<Vec<f64>>,
}

impl WeightSum {
    /// For `layers` x `seqs` x `heads`.
    pub fn new(layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        WeightSum {
            heads,
            rows: RowAccumulator::new(layers, seqs, heads, min_query),
            values: vec![Vec::new(); layers],
        }
    }

    /// Adds a block's row sums `[batch, head, n]`.
    pub fn add<'v>(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        n: usize,
        sums: impl Into<Column<'v>>,
    ) {
        let sums = sums.into();
        self.rows.add(layer, seq_offset, q_start, n, sums);
        let counted = self.rows.counted_rows(q_start, n);
        self.values[layer].extend(query_means(sums, self.heads, n, counted));
    }

    /// Adds a block's pools `[batch * head]` of the row sums over its counted rows
    /// ([`RowAccumulator::counted_rows`]) and W_i of those rows `[batch, counted]`.
    pub fn add_pools(&mut self, layer: usize, seq_offset: usize, pools: &[Pool], means: &[f64]) {
        self.rows.add_pools(layer, seq_offset, pools);
        self.values[layer].extend_from_slice(means);
    }

    /// Summaries, histogram with `bins` bins, head totals. Where the weights sum to 1 by
    /// construction (`sums_to_one`), the histogram is that of a constant at the pooled
    /// mean: the spread of f32 rounding around 1 is not binned as if it were data.
    pub fn finish(&self, bins: usize, sums_to_one: bool) -> WeightSumResult {
        let per_layer = self
            .values
            .iter()
            .enumerate()
            .map(|(l, v)| Distribution {
                std: self.rows.layer_std_over_seqs(l),
                ..Distribution::of(v)
            })
            .collect();
        let pooled: Vec<f64> = self.values.iter().flatten().copied().collect();
        let finite: Vec<f64> = pooled.iter().copied().filter(|v| v.is_finite()).collect();
        let histogram = if sums_to_one && !finite.is_empty() {
            constant_histogram(mean(&finite), finite.len() as u64, bins)
        } else {
            histogram(&pooled, bins)
        };
        WeightSumResult {
            per_layer,
            histogram,
            head_total: head_means(&self.rows),
        }
    }
}

/// W_i, the mean over heads of the row sums `sums` `[batch, head, n]`, of the queries
/// `counted` of each sequence: `[batch, counted]`.
pub fn query_means(sums: Column<'_>, heads: usize, n: usize, counted: Range<usize>) -> Vec<f64> {
    if n == 0 || heads == 0 {
        return Vec::new();
    }
    let batch = sums.len() / (heads * n);
    let mut means = Vec::with_capacity(batch * counted.len());
    let mut per_query = vec![0.0f64; counted.len()];
    for b in 0..batch {
        per_query.fill(0.0);
        // heads summed in order for each query
        for h in 0..heads {
            let row = (b * heads + h) * n;
            for (r, w) in counted.clone().zip(per_query.iter_mut()) {
                *w += sums.get(row + r) as f64;
            }
        }
        means.extend(per_query.iter().map(|w| w / heads as f64));
    }
    means
}

/// Row sums add; the pooled W_i values of `other` follow this one's.
impl Merge for WeightSum {
    fn merge(&mut self, other: &WeightSum) {
        self.rows.merge(&other.rows);
        super::merge::concat(&mut self.values, &other.values);
    }
}

impl Metric {
    /// weight_sum: W_i = sum_j a_ij, its distribution per layer and histogram (Fig. 3).
    pub const WEIGHT_SUM: Metric = Metric::by_default("weight_sum");
    /// head_total: mean W_i per (layer, head) (Fig. 4); part of weight_sum's result.
    pub const HEAD_TOTAL: Metric = Metric::by_default("head_total");
}

/// The accumulator of weight_sum and head_total.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let seqs = s.windows.len();
    Box::new(WeightSum::new(s.layers, seqs, s.heads, s.opts.min_query))
}

impl Accumulator for WeightSum {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                sum: true,
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = b.rows {
            let p = rows.pools;
            self.add_pools(b.layer, b.seq_offset, &p.counted[SUM], &p.query_means);
        }
        Ok(())
    }

    fn finish(&self, ctx: &FinishCtx, out: &mut ModelMetrics) {
        let result = WeightSum::finish(self, ctx.opts.bins, ctx.traits.weights_sum_to_one);
        out.insert(Metric::WEIGHT_SUM, result);
    }
}

impl MetricResult for WeightSumResult {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        for (l, d) in self.per_layer.iter().enumerate() {
            for (stat, v) in d.named() {
                out.push(model, metric.name(), Some(l), None, stat, v);
            }
        }
        out.per_head(model, Metric::HEAD_TOTAL.name(), &self.head_total);
        let h = &self.histogram;
        out.append(schema::WEIGHT_SUM_HIST.build(vec![
            ("model", strs(h.count.iter().map(|_| model.to_string()))),
            ("bin_lo", floats(h.bin_lo.iter().copied())),
            ("bin_hi", floats(h.bin_hi.iter().copied())),
            ("count", ints(h.count.iter().map(|&c| c as i64))),
        ]));
    }
}
