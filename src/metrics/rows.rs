//! Per-row reductions: one value per (sequence, head, query) pulled off the device as a
//! small vector, then pooled on the host in f64 per (layer, sequence, head).

use candle_core::{DType, Tensor};

use crate::error::Result;

/// A `[batch, head, n]` tensor as a host vector (row-major).
pub fn to_host(xs: &Tensor) -> Result<Vec<f32>> {
    Ok(xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Sums and counts of a per-row quantity per (layer, sequence, head), over queries
/// `i >= min_query`; NaN rows are counted apart and left out.
#[derive(Debug, Clone)]
pub struct RowAccumulator {
    heads: usize,
    min_query: usize,
    /// `[layer][seq][head]` sums and counts.
    sum: Vec<Vec<Vec<f64>>>,
    count: Vec<Vec<Vec<u64>>>,
    nan: Vec<u64>,
}

impl RowAccumulator {
    /// For `layers` x `seqs` x `heads` cells, pooling queries `>= min_query`.
    pub fn new(layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        RowAccumulator {
            heads,
            min_query,
            sum: vec![vec![vec![0.0; heads]; seqs]; layers],
            count: vec![vec![vec![0; heads]; seqs]; layers],
            nan: vec![0; layers],
        }
    }

    /// Adds a block of values `[batch, head, n]` (host, row-major) for queries
    /// `q_start .. q_start + n` of sequences `seq_offset ..`.
    pub fn add(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        n: usize,
        values: &[f32],
    ) {
        if n == 0 {
            return;
        }
        let batch = values.len() / (self.heads * n);
        for b in 0..batch {
            for h in 0..self.heads {
                let row = &values[(b * self.heads + h) * n..][..n];
                for (r, &v) in row.iter().enumerate() {
                    if q_start + r < self.min_query {
                        continue;
                    }
                    if v.is_nan() {
                        self.nan[layer] += 1;
                        continue;
                    }
                    self.sum[layer][seq_offset + b][h] += v as f64;
                    self.count[layer][seq_offset + b][h] += 1;
                }
            }
        }
    }

    /// Pooled mean over sequences, heads and queries of `layer`.
    pub fn layer_mean(&self, layer: usize) -> f64 {
        let (s, c) = self.sum[layer]
            .iter()
            .zip(&self.count[layer])
            .flat_map(|(s, c)| s.iter().zip(c))
            .fold((0.0, 0u64), |(a, n), (s, c)| (a + s, n + c));
        s / c as f64
    }

    /// Standard deviation over sequences (ddof 0) of each sequence's mean over heads and
    /// queries of `layer`.
    pub fn layer_std_over_seqs(&self, layer: usize) -> f64 {
        let per_seq: Vec<f64> = self.sum[layer]
            .iter()
            .zip(&self.count[layer])
            .map(|(s, c)| s.iter().sum::<f64>() / c.iter().sum::<u64>() as f64)
            .collect();
        super::summary::std_pop(&per_seq)
    }

    /// Mean over sequences and queries of `(layer, head)`.
    pub fn head_mean(&self, layer: usize, head: usize) -> f64 {
        let s: f64 = self.sum[layer].iter().map(|s| s[head]).sum();
        let c: u64 = self.count[layer].iter().map(|c| c[head]).sum();
        s / c as f64
    }

    /// NaN rows seen in `layer`.
    pub fn nan_count(&self, layer: usize) -> u64 {
        self.nan[layer]
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.sum.len()
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.heads
    }
}
