//! alpha (paper Sec. 4.3) and gate statistics per (layer, head): the per-query scalars the
//! Affine-Scaled and gated variants compute.

use super::merge::Merge;
use super::summary::Distribution;

/// Pools alpha values per (layer, head), queries >= min_query.
#[derive(Debug, Clone)]
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
#[derive(Debug, Clone)]
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
