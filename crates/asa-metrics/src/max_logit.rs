//! max_logit (what QK-clip monitors): per (layer, head) the largest logit the variant
//! normalises over sequences, queries i >= min_query and visible keys, and the mean over
//! those queries of each row's largest logit. Where the logits are soft-capped (Gemma 2),
//! these are before the cap, and the capped maximum cap tanh(max / cap) is reported beside
//! (tanh is monotone: the capped logits' maximum). Flash kernels keep only a row maximum, so this
//! is read from the row table (or the `MaxLogit` hook where a block is materialised).

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::rows::Pool;
use super::tables::TableRows;
use super::Metric;
use asa_core::error::Result;
use asa_kernels::row_table::{Column, RowWants};

/// Per (layer, head): the largest row maximum, and the sum and count of row maxima.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MaxLogit {
    heads: usize,
    min_query: usize,
    /// The logit soft-cap, where there is one.
    softcap: Option<f64>,
    /// `[layer][head]`.
    max: Vec<Vec<f64>>,
    sum: Vec<Vec<Pool>>,
}

/// max_logit results, `[layer][head]` and per layer over heads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MaxLogitResult {
    pub max: Vec<Vec<f64>>,
    pub mean: Vec<Vec<f64>>,
    pub layer_max: Vec<f64>,
    pub layer_mean: Vec<f64>,
    /// Soft-capped logits: the capped maxima `[layer][head]` and per layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capped: Option<(Vec<Vec<f64>>, Vec<f64>)>,
}

impl MaxLogit {
    /// For `layers` x `heads`, queries >= `min_query`.
    pub fn new(layers: usize, heads: usize, min_query: usize) -> Self {
        MaxLogit {
            heads,
            min_query,
            softcap: None,
            max: vec![vec![f64::NEG_INFINITY; heads]; layers],
            sum: vec![vec![Pool::default(); heads]; layers],
        }
    }

    /// Adds a block's row maxima `[batch, head, n]` of queries `q_start .. q_start + n`
    /// (NaN rows are counted apart).
    pub fn add<'v>(
        &mut self,
        layer: usize,
        q_start: usize,
        n: usize,
        maxima: impl Into<Column<'v>>,
    ) {
        let maxima = maxima.into();
        let skip = self.min_query.saturating_sub(q_start).min(n);
        for cell in 0..maxima.len() / n.max(1) {
            let h = cell % self.heads;
            let (max, pool) = (&mut self.max[layer][h], &mut self.sum[layer][h]);
            for r in skip..n {
                let v = maxima.get(cell * n + r) as f64;
                if v.is_nan() {
                    pool.nan += 1;
                    continue;
                }
                *max = max.max(v);
                pool.sum += v;
                pool.count += 1;
            }
        }
    }

    /// Per (layer, head) and per layer: the largest logit and the mean row maximum.
    pub fn finish(&self) -> MaxLogitResult {
        let mean = |pools: &[Pool]| {
            let (s, c) = pools
                .iter()
                .fold((0.0, 0), |(s, c), p| (s + p.sum, c + p.count));
            s / c as f64
        };
        MaxLogitResult {
            max: self.max.clone(),
            mean: self
                .sum
                .iter()
                .map(|heads| {
                    heads
                        .iter()
                        .map(|p| mean(std::slice::from_ref(p)))
                        .collect()
                })
                .collect(),
            layer_max: self
                .max
                .iter()
                .map(|heads| heads.iter().copied().fold(f64::NEG_INFINITY, f64::max))
                .collect(),
            layer_mean: self.sum.iter().map(|heads| mean(heads)).collect(),
            capped: None,
        }
        .with_cap(self.softcap)
    }
}

/// Maxima take the larger; sums and counts add.
impl Merge for MaxLogit {
    fn merge(&mut self, other: &MaxLogit) {
        for (mine, theirs) in self
            .max
            .iter_mut()
            .flatten()
            .zip(other.max.iter().flatten())
        {
            *mine = mine.max(*theirs);
        }
        self.sum.merge(&other.sum);
    }
}

impl Metric {
    /// max_logit: the largest logit per (layer, head), and the mean row maximum.
    pub const MAX_LOGIT: Metric = Metric::by_default("max_logit");
}

/// The max_logit accumulator.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let mut acc = MaxLogit::new(s.layers, s.heads, s.opts.min_query);
    acc.softcap = s.logit_softcap;
    Box::new(acc)
}

impl Accumulator for MaxLogit {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                max_logit: true,
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(maxima) = b.max_logit {
            MaxLogit::add(self, b.layer, b.q_start, b.q_len, maxima);
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::MAX_LOGIT, MaxLogit::finish(self));
    }
}

impl MaxLogitResult {
    /// With the capped maxima of soft-cap `cap`, if any.
    fn with_cap(mut self, cap: Option<f64>) -> Self {
        if let Some(cap) = cap {
            let capped = |x: f64| cap * (x / cap).tanh();
            self.capped = Some((
                self.max
                    .iter()
                    .map(|heads| heads.iter().map(|&x| capped(x)).collect())
                    .collect(),
                self.layer_max.iter().map(|&x| capped(x)).collect(),
            ));
        }
        self
    }
}

impl MetricResult for MaxLogitResult {
    /// Per layer and per (layer, head), stats `max` and `mean`; soft-capped logits also
    /// metric `max_logit_capped`, stat `max`.
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        let name = metric.name();
        for (l, (max, mean)) in self.max.iter().zip(&self.mean).enumerate() {
            out.push(model, name, Some(l), None, "max", self.layer_max[l]);
            out.push(model, name, Some(l), None, "mean", self.layer_mean[l]);
            for (h, (&x, &m)) in max.iter().zip(mean).enumerate() {
                out.push(model, name, Some(l), Some(h), "max", x);
                out.push(model, name, Some(l), Some(h), "mean", m);
            }
        }
        if let Some((heads, layers)) = &self.capped {
            let capped = "max_logit_capped";
            for (l, (heads, &layer)) in heads.iter().zip(layers).enumerate() {
                out.push(model, capped, Some(l), None, "max", layer);
                for (h, &x) in heads.iter().enumerate() {
                    out.push(model, capped, Some(l), Some(h), "max", x);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maxima_and_means_over_counted_queries_merge_exactly() {
        // one layer, two heads, queries 0..3 of one sequence, min_query 1:
        // head 0 rows (9 left out, query 0), 2, -1 -> max 2, mean 0.5
        // head 1 rows (left out), 4, NaN -> max 4, mean 4
        let rows = [9.0f32, 2.0, -1.0, 7.0, 4.0, f32::NAN];
        let mut whole = MaxLogit::new(1, 2, 1);
        whole.add(0, 0, 3, &rows);
        let r = whole.finish();
        assert_eq!(r.max, [[2.0, 4.0]]);
        assert_eq!(r.mean, [[0.5, 4.0]]);
        // layer: max over heads 4, mean (2 - 1 + 4) / 3
        assert_eq!((r.layer_max[0], r.layer_mean[0]), (4.0, 5.0 / 3.0));
        // a second sequence accumulated apart, then merged: the same as one accumulator
        let second = [0.0f32, 8.0, 1.0, 0.0, -3.0, -5.0];
        let mut apart = MaxLogit::new(1, 2, 1);
        apart.add(0, 0, 3, &second);
        whole.add(0, 0, 3, &second);
        let mut merged = MaxLogit::new(1, 2, 1);
        merged.add(0, 0, 3, &rows);
        Merge::merge(&mut merged, &apart);
        assert_eq!(merged.finish(), whole.finish());
    }
}
