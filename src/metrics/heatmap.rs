//! heatmap (paper Fig. 9) and query_profile (Fig. 1): small corners and single rows of one
//! layer's weights, averaged over heads and sequences.

use candle_core::{DType, Tensor, D};

use super::merge::Merge;
use crate::error::Result;

/// Mean over heads and sequences of a_ij for i, j < size in one layer.
#[derive(Debug, Clone)]
pub struct Heatmap {
    /// 0-based layer.
    pub layer: usize,
    size: usize,
    sum: Vec<Vec<f64>>,
    cells: f64,
}

/// A square heatmap.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeatmapResult {
    /// 0-based layer.
    pub layer: usize,
    /// `[query][key]`, 0 above the diagonal.
    pub values: Vec<Vec<f64>>,
}

impl Heatmap {
    /// A `size` x `size` corner of `layer` (size already clipped to T).
    pub fn new(layer: usize, size: usize) -> Self {
        Heatmap {
            layer,
            size,
            sum: vec![vec![0.0; size]; size],
            cells: 0.0,
        }
    }

    /// Adds the block's rows that fall in the corner; `weights` `[batch, head, n, keys]`.
    pub fn add(&mut self, q_start: usize, weights: &Tensor) -> Result<()> {
        let (b, h, n, keys) = weights.dims4()?;
        if q_start == 0 {
            self.cells += (b * h) as f64;
        }
        if q_start >= self.size {
            return Ok(());
        }
        let rows = n.min(self.size - q_start);
        let cols = keys.min(self.size);
        // summed over heads on the device, over sequences in f64: the same sums whichever
        // sequences share a batch (merged parts of a run give the run's heatmap)
        let corner = weights
            .narrow(2, 0, rows)?
            .narrow(3, 0, cols)?
            .sum(1)?
            .to_dtype(DType::F32)?
            .to_vec3::<f32>()?;
        for seq in corner {
            for (r, row) in seq.into_iter().enumerate() {
                for (c, v) in row.into_iter().enumerate() {
                    self.sum[q_start + r][c] += v as f64;
                }
            }
        }
        Ok(())
    }

    /// The averaged corner.
    pub fn finish(&self) -> HeatmapResult {
        HeatmapResult {
            layer: self.layer,
            values: self
                .sum
                .iter()
                .map(|row| row.iter().map(|v| v / self.cells).collect())
                .collect(),
        }
    }
}

/// a_ij over keys j for one query of one layer, mean over heads and sequences, with the
/// mean sink mass of that query.
#[derive(Debug, Clone)]
pub struct QueryProfile {
    pub layer: usize,
    pub query: usize,
    sum: Vec<f64>,
    sink_sum: f64,
    cells: f64,
}

/// One query's attention over keys.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueryProfileResult {
    pub layer: usize,
    pub query: usize,
    /// `[key]` for keys 0..=query.
    pub values: Vec<f64>,
    /// Mean share that went to no token (0 without a sink).
    pub sink_mass: f64,
}

impl QueryProfile {
    /// Profile of `query` (0-based) in `layer` (0-based).
    pub fn new(layer: usize, query: usize) -> Self {
        QueryProfile {
            layer,
            query,
            sum: vec![0.0; query + 1],
            sink_sum: 0.0,
            cells: 0.0,
        }
    }

    /// The block's row for the query, if the block holds it: `weights` `[batch, head, n, keys]`.
    pub fn add(&mut self, q_start: usize, weights: &Tensor) -> Result<()> {
        let (b, h, n, _) = weights.dims4()?;
        if self.query < q_start || self.query >= q_start + n {
            return Ok(());
        }
        // per sequence, as the heatmap
        let rows = weights
            .narrow(2, self.query - q_start, 1)?
            .narrow(3, 0, self.query + 1)?
            .sum(1)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        for row in rows.chunks(self.query + 1) {
            for (s, &v) in self.sum.iter_mut().zip(row) {
                *s += v as f64;
            }
        }
        self.cells += (b * h) as f64;
        Ok(())
    }

    /// Sink mass `[batch, head, n]` of the block, if it holds the query.
    pub fn add_sink_mass(&mut self, q_start: usize, mass: &Tensor) -> Result<()> {
        let n = mass.dim(D::Minus1)?;
        if self.query >= q_start && self.query < q_start + n {
            let col = mass.narrow(2, self.query - q_start, 1)?.sum(1)?;
            for v in col.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()? {
                self.sink_sum += v as f64;
            }
        }
        Ok(())
    }

    /// The averaged row.
    pub fn finish(&self) -> QueryProfileResult {
        QueryProfileResult {
            layer: self.layer,
            query: self.query,
            values: self.sum.iter().map(|v| v / self.cells).collect(),
            sink_mass: self.sink_sum / self.cells,
        }
    }
}

impl Merge for Heatmap {
    fn merge(&mut self, other: &Heatmap) {
        self.sum.merge(&other.sum);
        self.cells.merge(&other.cells);
    }
}

impl Merge for QueryProfile {
    fn merge(&mut self, other: &QueryProfile) {
        self.sum.merge(&other.sum);
        self.sink_sum.merge(&other.sink_sum);
        self.cells.merge(&other.cells);
    }
}
