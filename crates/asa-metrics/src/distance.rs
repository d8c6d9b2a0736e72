//! distance_profile: attention mass by query-key distance t = i - j in bands [0], [1, 10),
//! [10, 100), ... ; key 0 seen from a query i > 0 is its own band "first" and is left out
//! of its distance band, so a query's bands sum to its weight sum.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::layer_stat::head_means;
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::rows::{Pool, RowAccumulator};
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_kernels::row_table::RowWants;
use asa_tables::{schema, Column};

/// Distance bands: `first`, then `[edges[k], edges[k+1])` with edges starting at 0, 1.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
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

impl DistanceProfile {
    /// For `layers` x `seqs` x `heads`.
    pub fn new(bands: Bands, layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        let n = bands.labels().len();
        DistanceProfile {
            bands,
            rows: vec![RowAccumulator::new(layers, seqs, heads, min_query); n],
        }
    }

    /// The bands' distance ranges (after `first`).
    pub fn ranges(&self) -> Vec<(usize, usize)> {
        self.bands.ranges()
    }

    /// Adds a block's pools `[band][batch * head]` (`first` first) over its counted rows
    /// ([`RowAccumulator::counted_rows`]).
    pub fn add_pools<'a>(
        &mut self,
        layer: usize,
        seq_offset: usize,
        bands: impl IntoIterator<Item = &'a Vec<Pool>>,
    ) {
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

impl Metric {
    /// distance_profile: mass per distance band t = i - j, per layer and head.
    pub const DISTANCE_PROFILE: Metric = Metric::by_default("distance_profile");
}

/// The distance_profile accumulator over `--bands`.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let (layers, seqs, heads) = (s.layers, s.windows.len(), s.heads);
    let bands = s.opts.bands.clone();
    Box::new(DistanceProfile::new(
        bands,
        layers,
        seqs,
        heads,
        s.opts.min_query,
    ))
}

impl Accumulator for DistanceProfile {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                bands: self.ranges(),
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = b.rows {
            let columns = RowWants::band_columns(rows.bands, &self.ranges())
                .expect("the row table holds every band the accumulators asked for");
            let pools = columns.iter().map(|&c| &rows.pools.counted[c]);
            self.add_pools(b.layer, b.seq_offset, pools);
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::DISTANCE_PROFILE, DistanceProfile::finish(self));
    }
}

impl MetricResult for DistanceResult {
    /// `distance_profile.csv`: per layer (head empty), then per head.
    fn write_rows(&self, _metric: Metric, model: &str, out: &mut TableRows) {
        type Row = (i64, Option<i64>, String, f64);
        let mut rows: Vec<Row> = Vec::new();
        for (l, bands) in self.per_layer.iter().enumerate() {
            let layer = l as i64 + 1;
            for (b, &v) in bands.iter().enumerate() {
                rows.push((layer, None, self.bands[b].clone(), v));
            }
            for (h, bands) in self.per_head[l].iter().enumerate() {
                for (b, &v) in bands.iter().enumerate() {
                    rows.push((layer, Some(h as i64 + 1), self.bands[b].clone(), v));
                }
            }
        }
        out.append(schema::DISTANCE_PROFILE.build(vec![
            ("model", strs(rows.iter().map(|_| model.to_string()))),
            ("layer", ints(rows.iter().map(|r| r.0))),
            ("head", Column::Int(rows.iter().map(|r| r.1).collect())),
            ("band", strs(rows.iter().map(|r| r.2.clone()))),
            ("value", floats(rows.iter().map(|r| r.3))),
        ]));
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
