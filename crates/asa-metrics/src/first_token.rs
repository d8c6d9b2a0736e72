//! first_token (paper Fig. 4) and sink_rate (Gu et al., ICLR 2025): the mass a_i0 each
//! query gives the first token. In a sliding-window layer a query whose window no longer
//! holds the first token gives it nothing, and is no evidence about sinks: it is left out
//! of both means (not counted as 0), and the tables say which share of queries remained.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::layer_stat::{head_means, LayerStat};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::rows::{Pool, RowAccumulator};
use super::tables::TableRows;
use super::Metric;
use asa_core::error::Result;
use asa_hooks::KeyWindow;
use asa_kernels::row_table::Column;
use asa_kernels::row_table::{RowWants, FIRST};
use std::ops::Range;

/// Accumulates a_i0 per row, once with `min_query` (first_token) and once over all
/// queries (the sink-rate importance, query 0 included as in Gu et al.), over the queries
/// that see the first token.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FirstToken {
    rows: RowAccumulator,
    all_rows: RowAccumulator,
    min_query: usize,
    /// `[layer]` the keys each query sees.
    windows: Vec<KeyWindow>,
    /// `[layer]` (queries >= min_query that see the first token, all of them), summed over
    /// sequences and heads.
    seen: Vec<(u64, u64)>,
}

/// Sink rate: per-head first-token importance and the share of heads above epsilon.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SinkRate {
    /// `[layer][head]` mean of a_i0 over every query and sequence.
    pub importance: Vec<Vec<f64>>,
    /// Share of (layer, head) pairs with importance > eps (strict).
    pub rate: f64,
    pub eps: f64,
}

impl FirstToken {
    /// For `layers` x `seqs` x `heads`, every query seeing every earlier key.
    pub fn new(layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        Self::windowed(&vec![KeyWindow::CAUSAL; layers], seqs, heads, min_query)
    }

    /// For the layers of `windows` x `seqs` x `heads`.
    pub fn windowed(windows: &[KeyWindow], seqs: usize, heads: usize, min_query: usize) -> Self {
        let layers = windows.len();
        FirstToken {
            rows: RowAccumulator::new(layers, seqs, heads, min_query),
            all_rows: RowAccumulator::new(layers, seqs, heads, 0),
            min_query,
            windows: windows.to_vec(),
            seen: vec![(0, 0); layers],
        }
    }

    /// Adds a block's a_i0 values `[batch, head, n]`.
    pub fn add<'v>(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        n: usize,
        first: impl Into<Column<'v>>,
    ) {
        let first = first.into();
        self.rows.add(layer, seq_offset, q_start, n, first);
        self.all_rows.add(layer, seq_offset, q_start, n, first);
    }

    /// Adds the pools `[batch * head]` of a_i0 of the block of queries `queries`: `counted`
    /// over those `>= min_query` ([`RowAccumulator::counted_rows`]), `early` over those
    /// before. Rows whose window hides the first token hold 0 and leave the counts.
    pub fn add_pools(
        &mut self,
        layer: usize,
        seq_offset: usize,
        queries: Range<usize>,
        counted: &[Pool],
        early: &[Pool],
    ) {
        let window = self.windows[layer];
        let split = queries.start.max(self.min_query).min(queries.end);
        let hidden =
            |range: Range<usize>| (range.len() - window.queries_seeing_first(range)) as u64;
        let (hidden_counted, hidden_early) =
            (hidden(split..queries.end), hidden(queries.start..split));
        let seen = |pools: &[Pool], hidden: u64| -> Vec<Pool> {
            pools
                .iter()
                .map(|p| Pool {
                    count: p.count.saturating_sub(hidden),
                    ..*p
                })
                .collect()
        };
        let (counted, early) = (seen(counted, hidden_counted), seen(early, hidden_early));
        self.rows.add_pools(layer, seq_offset, &counted);
        self.all_rows.add_pools(layer, seq_offset, &counted);
        self.all_rows.add_pools(layer, seq_offset, &early);
        let rows = (queries.end - split) as u64 * counted.len() as u64;
        let (seeing, all) = &mut self.seen[layer];
        *seeing += rows - hidden_counted * counted.len() as u64;
        *all += rows;
    }

    /// Per-layer first-token mass, with the share of queries that see the first token where
    /// a sliding window hides it from some.
    pub fn first_token(&self) -> LayerStat {
        let share: Vec<f64> = self
            .seen
            .iter()
            .map(|&(seeing, all)| seeing as f64 / all as f64)
            .collect();
        LayerStat {
            visible_share: share.iter().any(|&s| s < 1.0).then_some(share),
            ..LayerStat::from_rows(&self.rows)
        }
    }

    /// `[layer][head]` mean first-token mass over sequences and the queries >= min_query
    /// that see the first token (first_token per head).
    pub fn per_head(&self) -> Vec<Vec<f64>> {
        head_means(&self.rows)
    }

    /// Sink rate at threshold `eps`.
    pub fn sink_rate(&self, eps: f64) -> SinkRate {
        let importance = head_means(&self.all_rows);
        SinkRate {
            rate: sink_rate(&importance, eps),
            importance,
            eps,
        }
    }
}

/// Share of entries strictly above `eps`; NaN when an entry is (a head whose importance is
/// unknown cannot be counted either way).
pub fn sink_rate(importance: &[Vec<f64>], eps: f64) -> f64 {
    let all: Vec<f64> = importance.iter().flatten().copied().collect();
    if all.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    all.iter().filter(|&&v| v > eps).count() as f64 / all.len() as f64
}

impl Merge for FirstToken {
    fn merge(&mut self, other: &FirstToken) {
        self.rows.merge(&other.rows);
        self.all_rows.merge(&other.all_rows);
        for (mine, theirs) in self.seen.iter_mut().zip(&other.seen) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
    }
}

impl Metric {
    /// first_token: mean a_i0 over queries, per layer (paper Fig. 5).
    pub const FIRST_TOKEN: Metric = Metric::by_default("first_token");
    /// sink_rate: share of heads whose first-token importance passes `--sink-eps`.
    pub const SINK_RATE: Metric = Metric::by_default("sink_rate");
}

/// The accumulator of first_token and sink_rate.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let seqs = s.windows.len();
    Box::new(FirstToken::windowed(
        s.key_windows,
        seqs,
        s.heads,
        s.opts.min_query,
    ))
}

impl Accumulator for FirstToken {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                first: true,
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = b.rows {
            let p = rows.pools;
            let queries = b.q_start..b.q_start + b.q_len;
            let (counted, early) = (&p.counted[FIRST], &p.early[FIRST]);
            self.add_pools(b.layer, b.seq_offset, queries, counted, early);
        }
        Ok(())
    }

    fn finish(&self, ctx: &FinishCtx, out: &mut ModelMetrics) {
        if ctx.opts.metrics.contains(&Metric::FIRST_TOKEN) {
            out.insert(Metric::FIRST_TOKEN, self.first_token());
        }
        if ctx.opts.metrics.contains(&Metric::SINK_RATE) {
            out.insert(Metric::SINK_RATE, self.sink_rate(ctx.opts.sink_eps));
        }
    }
}

impl MetricResult for LayerStat {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        out.per_layer(model, metric.name(), &self.mean, &self.std);
        // sliding-window layers: the mean is over this share of the queries
        for (l, &share) in self.visible_share.iter().flatten().enumerate() {
            if share < 1.0 {
                out.push(model, metric.name(), Some(l), None, "visible_share", share);
            }
        }
    }
}

impl MetricResult for SinkRate {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        out.per_head(model, "sink_importance", &self.importance);
        out.push(model, metric.name(), None, None, "mean", self.rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_rate_counts_query_zero_and_is_strict() {
        // one layer, one sequence, two heads, three queries; a_i0 per row:
        // head 0: 1.0 (query 0 always gives itself everything), 0.2, 0.0 -> mean 0.4 > 0.3
        // head 1: 1.0, 0.0, -0.1 -> mean 0.3, not > 0.3
        let mut ft = FirstToken::new(1, 1, 2, 1);
        ft.add(0, 0, 0, 3, &[1.0, 0.2, 0.0, 1.0, 0.0, -0.1]);
        let sr = ft.sink_rate(0.3);
        assert!((sr.importance[0][0] - 0.4).abs() < 1e-7);
        assert!((sr.importance[0][1] - 0.3).abs() < 1e-7);
        assert_eq!(sr.rate, 0.5);
        // first_token leaves query 0 out: (0.2 + 0.0 + 0.0 - 0.1) / 4
        assert!((ft.first_token().mean[0] - 0.025).abs() < 1e-7);
    }

    #[test]
    fn a_nan_importance_makes_the_sink_rate_nan_not_zero() {
        assert!(sink_rate(&[vec![0.5, f64::NAN]], 0.3).is_nan());
        assert_eq!(sink_rate(&[vec![0.5, 0.1]], 0.3), 0.5);
    }
}
