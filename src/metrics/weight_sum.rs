//! weight_sum (paper Fig. 3) and head_total (Fig. 5): sum_j a_ij per query, averaged over
//! heads (W_i) or over queries per head.

use super::layer_stat::head_means;
use super::rows::{Pool, RowAccumulator};
use super::summary::{histogram, Distribution, Histogram};
use crate::probe::row_table::Column;

/// Accumulates row sums.
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
        self.add_query_means(layer, q_start, n, sums);
    }

    /// Adds a block's row sums `[batch, head, n]` whose pools over the counted rows
    /// ([`RowAccumulator::counted_rows`]) are `pools` `[batch * head]`.
    pub fn add_pools(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        n: usize,
        pools: &[Pool],
        sums: Column<'_>,
    ) {
        self.rows.add_pools(layer, seq_offset, pools);
        self.add_query_means(layer, q_start, n, sums);
    }

    /// W_i, the mean over heads, of each counted query of a block's row sums.
    fn add_query_means(&mut self, layer: usize, q_start: usize, n: usize, sums: Column<'_>) {
        if n == 0 {
            return;
        }
        let batch = sums.len() / (self.heads * n);
        let counted = self.rows.counted_rows(q_start, n);
        let skip = counted.start;
        let mut per_query = vec![0.0f64; counted.len()];
        for b in 0..batch {
            per_query.fill(0.0);
            // heads summed in order for each query
            for h in 0..self.heads {
                let row = (b * self.heads + h) * n;
                for (r, w) in (skip..n).zip(per_query.iter_mut()) {
                    *w += sums.get(row + r) as f64;
                }
            }
            self.values[layer].extend(per_query.iter().map(|w| w / self.heads as f64));
        }
    }

    /// Summaries, histogram with `bins` bins, head totals.
    pub fn finish(&self, bins: usize) -> WeightSumResult {
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
        WeightSumResult {
            per_layer,
            histogram: histogram(&pooled, bins),
            head_total: head_means(&self.rows),
        }
    }
}
