//! heatmap (paper Fig. 9) and query_profile (Fig. 1): small corners and single rows of one
//! layer's weights, averaged over heads and sequences.

use candle_core::{DType, Tensor, D};

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_hooks::KeyWindow;
use asa_tables::Table;

/// Mean over heads and sequences of a_ij for i, j < size in one layer, each cell over the
/// sequences that hold both positions (a capture pools sequences of different lengths).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Heatmap {
    /// 0-based layer.
    pub layer: usize,
    size: usize,
    sum: Vec<Vec<f64>>,
    /// `[query][key]` (sequence, head) cells added.
    cells: Vec<Vec<f64>>,
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
            cells: vec![vec![0.0; size]; size],
        }
    }

    /// Adds the block's rows that fall in the corner; `weights` `[batch, head, n, keys]`
    /// of sequences whose keys are those of `window` (a bidirectional window's length is
    /// its sequences'; a causal row's later keys are held and 0).
    pub fn add(&mut self, q_start: usize, window: KeyWindow, weights: &Tensor) -> Result<()> {
        let (b, h, n, keys) = weights.dims4()?;
        if q_start >= self.size {
            return Ok(());
        }
        let rows = n.min(self.size - q_start);
        let held = match window {
            KeyWindow::Around { len, .. } => len.min(self.size),
            _ => self.size,
        };
        for cells in &mut self.cells[q_start..q_start + rows] {
            for c in &mut cells[..held] {
                *c += (b * h) as f64;
            }
        }
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
                .zip(&self.cells)
                .map(|(row, cells)| row.iter().zip(cells).map(|(v, c)| v / c).collect())
                .collect(),
        }
    }
}

/// a_ij over keys j for one query of one layer, mean over heads and sequences, with the
/// mean sink mass of that query.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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

impl Metric {
    /// heatmap: the top-left corner of one layer's weights (Fig. 9).
    pub const HEATMAP: Metric = Metric::by_default("heatmap");
    /// query_profile: one query's weights over keys, and its sink mass (Fig. 1).
    pub const QUERY_PROFILE: Metric = Metric::by_default("query_profile");
}

/// The heatmap accumulator (`--heatmap-layer`, `--heatmap-size`).
pub fn build_heatmap(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(Heatmap::new(s.opts.heatmap_layer, s.opts.heatmap_size))
}

/// The query_profile accumulator (`--heatmap-layer`, `--profile-query`).
pub fn build_profile(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(QueryProfile::new(
        s.opts.heatmap_layer,
        s.opts.profile_query,
    ))
}

impl Accumulator for Heatmap {
    fn needs(&self, layer: usize) -> Needs {
        Needs {
            weights: layer == self.layer,
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        match b.weights {
            Some(weights) if b.layer == self.layer => {
                Heatmap::add(self, b.q_start, b.window, weights.pattern)
            }
            _ => Ok(()),
        }
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::HEATMAP, Heatmap::finish(self));
    }
}

impl MetricResult for HeatmapResult {
    /// `heatmap.csv`: a row per (query, key) of the corner.
    fn write_rows(&self, _metric: Metric, model: &str, out: &mut TableRows) {
        let size = self.values.len();
        let cells = || (0..size).flat_map(move |q| (0..self.values[q].len()).map(move |k| (q, k)));
        out.append(Table::new(
            "heatmap",
            vec![
                ("model", strs(cells().map(|_| model.to_string()))),
                ("layer", ints(cells().map(|_| self.layer as i64 + 1))),
                ("query", ints(cells().map(|(q, _)| q as i64))),
                ("key", ints(cells().map(|(_, k)| k as i64))),
                ("value", floats(cells().map(|(q, k)| self.values[q][k]))),
            ],
        ));
    }
}

impl Accumulator for QueryProfile {
    fn needs(&self, layer: usize) -> Needs {
        Needs {
            weights: layer == self.layer,
            sink_mass: layer == self.layer,
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if b.layer != self.layer {
            return Ok(());
        }
        if let Some(weights) = b.weights {
            QueryProfile::add(self, b.q_start, weights.pattern)?;
            if let Some(mass) = weights.sink_mass {
                self.add_sink_mass(b.q_start, mass)?;
            }
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::QUERY_PROFILE, QueryProfile::finish(self));
    }
}

impl MetricResult for QueryProfileResult {
    /// `query_profile.csv`: a row per key.
    fn write_rows(&self, _metric: Metric, model: &str, out: &mut TableRows) {
        let keys = self.values.len();
        let each = |v: i64| ints((0..keys).map(move |_| v));
        out.append(Table::new(
            "query_profile",
            vec![
                ("model", strs((0..keys).map(|_| model.to_string()))),
                ("layer", each(self.layer as i64 + 1)),
                ("query", each(self.query as i64)),
                ("key", ints((0..keys).map(|k| k as i64))),
                ("value", floats(self.values.iter().copied())),
                ("sink_mass", floats((0..keys).map(|_| self.sink_mass))),
            ],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn each_cell_is_a_mean_over_the_sequences_that_hold_it() {
        // a corner of 2: a causal sequence of 2 tokens (rows (1), (0.25, 0.75)) and one of
        // 1 token (row (1)): row 0 over both, row 1 over the first alone; above the
        // diagonal 0
        let mut map = Heatmap::new(0, 2);
        let causal = KeyWindow::CAUSAL;
        let long = Tensor::new(&[[[[1f32, 0.0], [0.25, 0.75]]]], &Device::Cpu).unwrap();
        map.add(0, causal, &long).unwrap();
        let short = Tensor::new(&[[[[1f32]]]], &Device::Cpu).unwrap();
        map.add(0, causal, &short).unwrap();
        assert_eq!(map.finish().values, [[1.0, 0.0], [0.25, 0.75]]);
        // bidirectional: a 1-token sequence holds no key 1, so cell (0, 1) is the 2-token
        // sequence's alone
        let mut both = Heatmap::new(0, 2);
        let long = Tensor::new(&[[[[0.5f32, 0.5], [0.25, 0.75]]]], &Device::Cpu).unwrap();
        both.add(0, KeyWindow::bidirectional(2), &long).unwrap();
        both.add(0, KeyWindow::bidirectional(1), &short).unwrap();
        assert_eq!(both.finish().values, [[0.75, 0.5], [0.25, 0.75]]);
    }
}
