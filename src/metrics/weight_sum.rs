//! weight_sum (paper Fig. 3) and head_total (Fig. 5): sum_j a_ij per query, averaged over
//! heads (W_i) or over queries per head.

use super::layer_stat::head_means;
use super::rows::RowAccumulator;
use super::summary::{histogram, Distribution, Histogram};

/// Accumulates row sums.
pub struct WeightSum {
    heads: usize,
    min_query: usize,
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
            min_query,
            rows: RowAccumulator::new(layers, seqs, heads, min_query),
            values: vec![Vec::new(); layers],
        }
    }

    /// Adds a block's row sums `[batch, head, n]`.
    pub fn add(&mut self, layer: usize, seq_offset: usize, q_start: usize, n: usize, sums: &[f32]) {
        self.rows.add(layer, seq_offset, q_start, n, sums);
        let batch = sums.len() / (self.heads * n);
        for b in 0..batch {
            for r in 0..n {
                if q_start + r < self.min_query {
                    continue;
                }
                let w: f64 = (0..self.heads)
                    .map(|h| sums[(b * self.heads + h) * n + r] as f64)
                    .sum::<f64>()
                    / self.heads as f64;
                self.values[layer].push(w);
            }
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
