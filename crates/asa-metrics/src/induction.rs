//! induction_score (Olsson et al. 2022; TransformerLens' induction score): on the induction
//! probe (`--probe induction`: BOS, L random ids, the same L again), per (layer, head) the
//! mean over sequences and the second copy's queries i (`L + 1 <= i <= 2L`) of
//! a_{i, i-L+1}, the attention to the token after the query's earlier occurrence.
//!
//! a_{i, i-L+1} is the row's mass at distance exactly L - 1: a distance band `[L-1, L)` of
//! the row table (never key 0, as i - L + 1 >= 2 on the second copy), which every kernel
//! fills, the flash tiles and the CUDA kernels included, pooled over the queries
//! `>= L + 1` only (`Needs::rows_from`); no attention map is materialised for it. Unlike
//! TransformerLens' stripe (`pattern.diagonal(offset=1-L)`, which also averages queries
//! L - 1 and L of the first copy), only the second copy's queries are averaged. On a
//! sliding-window layer whose window is shorter than L the key is out of sight: the score
//! is the 0 the head can give it.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::layer_stat::head_means;
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::rows::{Pool, RowAccumulator};
use super::tables::TableRows;
use super::Metric;
use asa_core::error::Result;
use asa_kernels::row_table::RowWants;

impl Metric {
    /// induction_score: per (layer, head) mean a_{i, i-L+1} over the induction probe's
    /// second copy; computed with `--probe induction` (which asks for it by default).
    pub const INDUCTION_SCORE: Metric = Metric::on_request("induction_score");
}

/// The attention at distance L - 1 of the queries `>= L + 1`, per (layer, sequence, head).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InductionScore {
    /// L, each copy's length.
    len: usize,
    rows: RowAccumulator,
}

/// Induction scores per (layer, head).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InductionResult {
    /// L, each copy's length.
    pub len: usize,
    /// `[layer][head]` mean a_{i, i-L+1} over sequences and queries `L + 1 ..= 2L`.
    pub per_head: Vec<Vec<f64>>,
}

impl InductionScore {
    /// For copies of `len` (>= 2) tokens and `layers` x `seqs` x `heads`.
    pub fn new(len: usize, layers: usize, seqs: usize, heads: usize) -> Self {
        InductionScore {
            len,
            // the query range is the late rows', min_query plays no part
            rows: RowAccumulator::new(layers, seqs, heads, 0),
        }
    }

    /// The one distance band `[L-1, L)` read.
    pub fn band(&self) -> (usize, usize) {
        (self.len - 1, self.len)
    }

    /// The first query averaged: the second copy's first, L + 1.
    pub fn first_query(&self) -> usize {
        self.len + 1
    }

    /// Adds a block's pools `[batch * head]` of the band over its rows of queries `>= L + 1`.
    pub fn add_pools(&mut self, layer: usize, seq_offset: usize, pools: &[Pool]) {
        self.rows.add_pools(layer, seq_offset, pools);
    }

    /// The scores so far.
    pub fn result(&self) -> InductionResult {
        InductionResult {
            len: self.len,
            per_head: head_means(&self.rows),
        }
    }
}

impl Merge for InductionScore {
    fn merge(&mut self, other: &InductionScore) {
        self.rows.merge(&other.rows);
    }
}

/// The induction_score accumulator: L from `MetricOptions::induction_len`, else that of
/// windows of `2L + 1` tokens.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let window = s.windows.first().map_or(0, Vec::len);
    let len = s.opts.induction_len.unwrap_or(window.saturating_sub(1) / 2);
    Box::new(InductionScore::new(
        len.max(2),
        s.layers,
        s.windows.len(),
        s.heads,
    ))
}

impl Accumulator for InductionScore {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                bands: vec![self.band()],
                ..RowWants::default()
            },
            rows_from: Some(self.first_query()),
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = b.rows {
            let columns = RowWants::band_columns(rows.bands, &[self.band()])
                .expect("the row table holds every band the accumulators asked for");
            let pools = &rows.pools.late[columns[1]];
            self.add_pools(b.layer, b.seq_offset, pools);
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::INDUCTION_SCORE, self.result());
    }
}

impl MetricResult for InductionResult {
    /// A `mean` row per (layer, head) in `attention.csv`.
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        out.per_head(model, metric.name(), &self.per_head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulator::Rows;
    use crate::block_pools::{pool_host, PoolShape};
    use asa_hooks::{BlockCtx, KeyWindow};
    use asa_kernels::row_table::BANDS;

    #[test]
    fn only_the_second_copys_band_is_averaged() {
        // L = 3, windows of 7: queries 4, 5, 6 count. One sequence, two heads, the band
        // column of query i holds 0.1 i for head 0 and 0.5 for head 1; a block of queries
        // 2..7 (rows 2, 3 before the copy) in one table of width BANDS + 2.
        let mut acc = InductionScore::new(3, 1, 1, 2);
        assert_eq!(acc.band(), (2, 3));
        let needs = acc.needs(0);
        assert_eq!(
            (needs.rows.bands.clone(), needs.rows_from),
            (vec![(2, 3)], Some(4))
        );
        let width = BANDS + 2;
        let (q_start, n) = (2, 5);
        let mut table = vec![0f32; 2 * n * width];
        for h in 0..2 {
            for r in 0..n {
                let i = q_start + r;
                table[(h * n + r) * width + BANDS + 1] = if h == 0 { 0.1 * i as f32 } else { 0.5 };
            }
        }
        let shape = PoolShape {
            batch: 1,
            heads: 2,
            n,
            skip: 0,
            late: Some(4 - q_start),
            width,
        };
        let pools = pool_host(&table, &shape);
        let ctx = BlockCtx {
            layer: 0,
            q_start,
            q_len: n,
            seq_len: 7,
            window: KeyWindow::CAUSAL,
        };
        let event = BlockEvent {
            rows: Some(Rows {
                pools: &pools,
                bands: &needs.rows.bands,
            }),
            ..BlockEvent::empty(&ctx, 0)
        };
        acc.block(&event).unwrap();
        let got = acc.result().per_head;
        assert!((got[0][0] - 0.5).abs() < 1e-6, "{got:?}"); // (0.4 + 0.5 + 0.6) / 3
        assert!((got[0][1] - 0.5).abs() < 1e-6, "{got:?}");
    }
}
