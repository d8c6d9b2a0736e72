//! distance_profile: attention mass by query-key distance t = i - j in bands [0], [1, 10),
//! [10, 100), ... ; key 0 seen from a query i > 0 is its own band "first" and is left out
//! of its distance band, so a query's bands sum to its weight sum.

use super::merge::Merge;
use candle_core::{DType, Device, Tensor, D};

use super::layer_stat::head_means;
use super::rows::{to_host, Pool, RowAccumulator};
use crate::error::Result;

/// Distance bands: `first`, then `[edges[k], edges[k+1])` with edges starting at 0, 1.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Bands {
    /// Lower edges after 0, starting at 1: e.g. [1, 10, 100] gives bands 0, 1-10, 10-100
    /// and 100 on.
    pub edges: Vec<usize>,
    /// The upper end the last band's label names: every distance the analysed windows
    /// have lies below it.
    pub end: usize,
}

impl Bands {
    /// Decade bands covering distances up to `seq_len - 1`.
    pub fn decades(seq_len: usize) -> Self {
        let mut edges = vec![1];
        while *edges.last().expect("non-empty") * 10 < seq_len.max(2) {
            let next = edges.last().expect("non-empty") * 10;
            edges.push(next);
        }
        let end = edges.last().expect("non-empty") * 10;
        Bands { edges, end }
    }

    /// Bands at the given increasing lower edges (each >= 1) for windows of `seq_len`
    /// tokens: 1 is added in front when missing, so that the bands cover every distance
    /// and sum to the weight sum, and edges at or beyond `seq_len` (bands no distance falls
    /// in) are dropped; the last band's label closes at `seq_len`.
    pub fn with_edges(edges: &[usize], seq_len: usize) -> Self {
        let mut kept = vec![1];
        kept.extend(edges.iter().copied().filter(|&e| e > 1 && e < seq_len));
        let end = seq_len.max(kept.last().expect("non-empty") + 1);
        Bands { edges: kept, end }
    }

    /// Band labels: `first`, `0`, `1-10`, ... (the last closes at `end`).
    pub fn labels(&self) -> Vec<String> {
        let mut labels = vec!["first".to_string(), "0".to_string()];
        for (k, lo) in self.edges.iter().enumerate() {
            let hi = self.edges.get(k + 1).copied().unwrap_or(self.end);
            labels.push(format!("{lo}-{hi}"));
        }
        labels
    }

    /// The distance ranges `[lo, hi)` after `first` (`hi` = `usize::MAX` for the last).
    pub fn ranges(&self) -> Vec<(usize, usize)> {
        let mut ranges = vec![(0, 1)];
        for (k, &lo) in self.edges.iter().enumerate() {
            ranges.push((lo, self.edges.get(k + 1).copied().unwrap_or(usize::MAX)));
        }
        ranges
    }
}

/// Accumulates band masses per row.
#[derive(Debug, Clone)]
pub struct DistanceProfile {
    bands: Bands,
    /// One accumulator per band label (first, 0, ...).
    rows: Vec<RowAccumulator>,
}

/// Band masses per layer and head.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DistanceResult {
    pub bands: Vec<String>,
    /// `[layer][band]`.
    pub per_layer: Vec<Vec<f64>>,
    /// `[layer][head][band]`.
    pub per_head: Vec<Vec<Vec<f64>>>,
}

/// 0/1 masks `[n, keys]` (f32) of the block's (query, key) pairs in each band, `first` first.
fn band_masks(bands: &Bands, q_start: usize, n: usize, device: &Device) -> Result<Vec<Tensor>> {
    let keys = q_start + n;
    let i = Tensor::arange(q_start as i64, keys as i64, device)?
        .to_dtype(DType::F32)?
        .reshape((n, 1))?;
    let j = Tensor::arange(0i64, keys as i64, device)?
        .to_dtype(DType::F32)?
        .reshape((1, keys))?;
    let t = i.broadcast_sub(&j)?;
    // first: j == 0 and i > 0
    let first = j
        .eq(0f32)?
        .to_dtype(DType::F32)?
        .broadcast_mul(&i.gt(0f32)?.to_dtype(DType::F32)?)?;
    let not_first = (1.0 - &first)?;
    let mut masks = vec![first];
    for (lo, hi) in bands.ranges() {
        let in_band = t.ge(lo as f32)?.to_dtype(DType::F32)?;
        let in_band = if hi == usize::MAX {
            in_band
        } else {
            (in_band * t.lt(hi as f32)?.to_dtype(DType::F32)?)?
        };
        masks.push((in_band * &not_first)?);
    }
    Ok(masks)
}

impl DistanceProfile {
    /// For `layers` x `seqs` x `heads`.
    pub fn new(bands: Bands, layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        let n = bands.labels().len();
        DistanceProfile {
            bands,
            rows: vec![RowAccumulator::new(layers, seqs, heads, min_query); n],
        }
    }

    /// Adds a block of weights `[batch, head, n, keys]`.
    pub fn add(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        weights: &Tensor,
    ) -> Result<()> {
        let n = weights.dim(2)?;
        for (acc, mask) in
            self.rows
                .iter_mut()
                .zip(band_masks(&self.bands, q_start, n, weights.device())?)
        {
            let mass = weights.broadcast_mul(&mask)?.sum(D::Minus1)?;
            acc.add(layer, seq_offset, q_start, n, &to_host(&mass)?);
        }
        Ok(())
    }

    /// The bands' distance ranges (after `first`).
    pub fn ranges(&self) -> Vec<(usize, usize)> {
        self.bands.ranges()
    }

    /// Adds a block's pools `[band][batch * head]` (`first` first) over its counted rows
    /// ([`RowAccumulator::counted_rows`]).
    pub fn add_pools(&mut self, layer: usize, seq_offset: usize, bands: &[Vec<Pool>]) {
        for (acc, pools) in self.rows.iter_mut().zip(bands) {
            acc.add_pools(layer, seq_offset, pools);
        }
    }

    /// Per-layer and per-head band masses.
    pub fn finish(&self) -> DistanceResult {
        let per_band: Vec<Vec<Vec<f64>>> = self.rows.iter().map(head_means).collect();
        let layers = self.rows[0].layers();
        let heads = self.rows[0].heads();
        DistanceResult {
            bands: self.bands.labels(),
            per_layer: (0..layers)
                .map(|l| self.rows.iter().map(|r| r.layer_mean(l)).collect())
                .collect(),
            per_head: (0..layers)
                .map(|l| {
                    (0..heads)
                        .map(|h| per_band.iter().map(|b| b[l][h]).collect())
                        .collect()
                })
                .collect(),
        }
    }
}

impl Merge for DistanceProfile {
    fn merge(&mut self, other: &DistanceProfile) {
        self.rows.merge(&other.rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decade_bands_cover_the_sequence() {
        assert_eq!(
            Bands::decades(20).labels(),
            vec!["first", "0", "1-10", "10-100"]
        );
        assert_eq!(Bands::decades(5).labels(), vec!["first", "0", "1-10"]);
        assert_eq!(Bands::decades(1024).labels().len(), 6); // first 0 1-10 10-100 100-1000 1000-10000
    }

    #[test]
    fn given_edges_cover_every_distance_and_name_the_last_bands_end() {
        // --bands 1,10 at 300 tokens: the last band is [10, 300), not "10-100"
        let b = Bands::with_edges(&[1, 10], 300);
        assert_eq!(b.labels(), ["first", "0", "1-10", "10-300"]);
        assert_eq!(b.ranges(), [(0, 1), (1, 10), (10, usize::MAX)]);
        // distance 1 gets a band when the first edge is above it
        assert_eq!(Bands::with_edges(&[2, 5], 20).edges, [1, 2, 5]);
        // edges no distance reaches are dropped
        let b = Bands::with_edges(&[1, 50, 100], 20);
        assert_eq!(b.labels(), ["first", "0", "1-20"]);
    }
}
