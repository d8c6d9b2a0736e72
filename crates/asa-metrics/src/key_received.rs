//! key_received (H2O's heavy-hitter score): the attention each key position j receives,
//! sum over the queries i >= max(j, min_query) that see it of a_ij, per (layer, head) and key, mean over
//! sequences; also divided by the number of those queries. Per-key sums are column sums of
//! the weights: the flash tiles hand them beside the row table (each task's kept tile
//! weights rescaled to the rows' finished softmax, `attention::cpu_kept_weights`), a
//! materialised block its weights.

use candle_core::{DType, Tensor};

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_hooks::KeyWindow;
use asa_tables::{schema, Column, Table};
use std::ops::Range;

/// Per (layer, head, key): the received weight summed over sequences; per (layer, key): the
/// sequences that hold the key and the counted queries that see it, summed over them. Both
/// counts come from the blocks themselves, so sequences of different lengths (a capture's
/// padded batch) pool: each key's means are over the sequences that hold it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KeyReceived {
    heads: usize,
    min_query: usize,
    seq_len: usize,
    /// `[layer][head][key]`.
    sum: Vec<Vec<Vec<f64>>>,
    /// `[layer][key]` sequences holding the key.
    seqs: Vec<Vec<u64>>,
    /// `[layer][key]` queries >= min_query that see the key, over those sequences.
    queries: Vec<Vec<u64>>,
}

/// key_received results, mean over sequences: `[layer][head][key]` and, averaged over
/// heads, `[layer][key]`; `sum` is the received weight, `mean` that over its query count.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeyReceivedResult {
    pub sum: Vec<Vec<Vec<f64>>>,
    pub mean: Vec<Vec<Vec<f64>>>,
    pub layer_sum: Vec<Vec<f64>>,
    pub layer_mean: Vec<Vec<f64>>,
}

impl KeyReceived {
    /// For `layers` x `heads` and sequences of at most `seq_len` tokens, queries >=
    /// `min_query`.
    pub fn new(layers: usize, heads: usize, seq_len: usize, min_query: usize) -> Self {
        KeyReceived {
            heads,
            min_query,
            seq_len,
            sum: vec![vec![vec![0.0; seq_len]; heads]; layers],
            seqs: vec![vec![0; seq_len]; layers],
            queries: vec![vec![0; seq_len]; layers],
        }
    }

    /// Adds a block's weights `[batch, head, n, keys]` of queries `q_start ..` whose keys
    /// are those of `window`: the column sums over its counted queries, reduced on the
    /// device.
    pub fn add(
        &mut self,
        layer: usize,
        window: KeyWindow,
        q_start: usize,
        weights: &Tensor,
    ) -> Result<()> {
        let (b, h, n, keys) = weights.dims4()?;
        let skip = self.min_query.saturating_sub(q_start).min(n);
        let sums = match skip == n {
            // no counted query in the block (its sequences still count from query 0)
            true => Tensor::zeros((b, h, keys), DType::F32, weights.device())?,
            false => weights
                .narrow(2, skip, n - skip)?
                .to_dtype(DType::F32)?
                .sum(2)?,
        };
        self.add_sums(layer, window, q_start..q_start + n, &sums)
    }

    /// Adds a block's key sums `[batch, head, keys]` over its counted queries (the queries
    /// of `block` from `min_query` on), the keys those of `window`.
    pub fn add_sums(
        &mut self,
        layer: usize,
        window: KeyWindow,
        block: Range<usize>,
        sums: &Tensor,
    ) -> Result<()> {
        let (b, h, keys) = sums.dims3()?;
        self.count(layer, window, block, b, keys);
        let columns = sums.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        for (cell, column) in columns.chunks(keys.max(1)).enumerate() {
            let sums = &mut self.sum[layer][cell % h];
            for (s, &v) in sums.iter_mut().zip(column) {
                *s += v as f64;
            }
        }
        Ok(())
    }

    /// Counts a block of `b` sequences whose key sums span `keys`: the keys it is the first
    /// to reach are held by its sequences, and each key is seen by the block's counted
    /// queries that see it.
    fn count(
        &mut self,
        layer: usize,
        window: KeyWindow,
        block: Range<usize>,
        b: usize,
        keys: usize,
    ) {
        let held_before = match block.start {
            0 => 0,
            start => window.block_keys(0, start),
        };
        let held = held_before..window.block_keys(block.start, block.len());
        let counted = block.start.max(self.min_query).min(block.end)..block.end;
        let seqs = &mut self.seqs[layer];
        let queries = &mut self.queries[layer];
        for j in 0..keys.min(self.seq_len) {
            if held.contains(&j) {
                seqs[j] += b as u64;
            }
            queries[j] += (b * window.queries_seeing(j, counted.clone())) as u64;
        }
    }

    /// Means over the sequences that hold each key (and heads for the per-layer rows).
    pub fn finish(&self) -> KeyReceivedResult {
        let sum: Vec<Vec<Vec<f64>>> = (0..self.sum.len())
            .map(|l| {
                let heads = &self.sum[l];
                heads
                    .iter()
                    .map(|k| {
                        k.iter()
                            .zip(&self.seqs[l])
                            .map(|(&v, &n)| v / n as f64)
                            .collect()
                    })
                    .collect()
            })
            .collect();
        // the counted queries per sequence holding the key (an integer when every sequence
        // has the same length)
        let over_queries = |l: usize, keys: &[f64]| -> Vec<f64> {
            keys.iter()
                .enumerate()
                .map(|(j, v)| v / (self.queries[l][j] as f64 / self.seqs[l][j] as f64))
                .collect()
        };
        let mean = sum
            .iter()
            .enumerate()
            .map(|(l, heads)| heads.iter().map(|k| over_queries(l, k)).collect())
            .collect();
        let layer_sum: Vec<Vec<f64>> = sum
            .iter()
            .map(|heads: &Vec<Vec<f64>>| {
                (0..self.seq_len)
                    .map(|j| heads.iter().map(|k| k[j]).sum::<f64>() / self.heads as f64)
                    .collect()
            })
            .collect();
        let layer_mean = layer_sum
            .iter()
            .enumerate()
            .map(|(l, k)| over_queries(l, k))
            .collect();
        KeyReceivedResult {
            sum,
            mean,
            layer_sum,
            layer_mean,
        }
    }
}

impl Merge for KeyReceived {
    fn merge(&mut self, other: &KeyReceived) {
        self.sum.merge(&other.sum);
        self.seqs.merge(&other.seqs);
        self.queries.merge(&other.queries);
    }
}

impl Metric {
    /// key_received: the attention each key receives (H2O's heavy-hitter score); a second
    /// pass over the flash tiles' keys, so computed only when asked for.
    pub const KEY_RECEIVED: Metric = Metric::on_request("key_received");
}

/// The key_received accumulator, for windows of the run's length.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let seq_len = s.windows.first().map_or(0, Vec::len);
    Box::new(KeyReceived::new(
        s.layers,
        s.heads,
        seq_len,
        s.opts.min_query,
    ))
}

impl Accumulator for KeyReceived {
    fn needs(&self, _layer: usize) -> Needs {
        let mut needs = Needs::default();
        needs.rows.key_sums_from = Some(self.min_query);
        needs
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        match (b.key_sums, b.weights) {
            (Some(sums), _) => {
                self.add_sums(b.layer, b.window, b.q_start..b.q_start + b.q_len, sums)?
            }
            (None, Some(weights)) => {
                KeyReceived::add(self, b.layer, b.window, b.q_start, weights.pattern)?
            }
            (None, None) => {}
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::KEY_RECEIVED, KeyReceived::finish(self));
    }
}

impl MetricResult for KeyReceivedResult {
    fn write_rows(&self, _metric: Metric, model: &str, out: &mut TableRows) {
        out.append(key_received_table(model, self));
    }
}

/// Key positions exported one by one: keys below this, then decade bins.
pub const EXACT_KEYS: usize = 30;

/// The key ranges `[lo, hi)` of `key_received.csv` for windows of `seq_len` tokens: each key
/// below [`EXACT_KEYS`], then `[30, 100)`, `[100, 1000)`, ... (the last cut at `seq_len`).
pub fn key_bins(seq_len: usize) -> Vec<(usize, usize)> {
    let mut bins: Vec<(usize, usize)> = (0..EXACT_KEYS.min(seq_len)).map(|j| (j, j + 1)).collect();
    let (mut lo, mut hi) = (EXACT_KEYS, 100);
    while lo < seq_len {
        bins.push((lo, hi.min(seq_len)));
        (lo, hi) = (hi, hi * 10);
    }
    bins
}

/// `key_received.csv`: model, layer, head (empty: mean over heads), key_lo, key_hi, stat
/// (`sum`, `mean`), value: a bin's value is the mean over its keys.
fn key_received_table(label: &str, k: &KeyReceivedResult) -> Table {
    type Row = (String, i64, Option<i64>, i64, i64, &'static str, f64);
    let mut rows: Vec<Row> = Vec::new();
    for l in 0..k.sum.len() {
        let heads = (0..k.sum[l].len()).map(|h| (Some(h), &k.sum[l][h], &k.mean[l][h]));
        for (head, sums, means) in
            std::iter::once((None, &k.layer_sum[l], &k.layer_mean[l])).chain(heads)
        {
            for (lo, hi) in key_bins(sums.len()) {
                for (stat, values) in [("sum", sums), ("mean", means)] {
                    let value = values[lo..hi].iter().sum::<f64>() / (hi - lo) as f64;
                    let head = head.map(|h| h as i64 + 1);
                    rows.push((
                        label.to_string(),
                        l as i64 + 1,
                        head,
                        lo as i64,
                        hi as i64,
                        stat,
                        value,
                    ));
                }
            }
        }
    }
    schema::KEY_RECEIVED.build(vec![
        ("model", strs(rows.iter().map(|r| r.0.clone()))),
        ("layer", ints(rows.iter().map(|r| r.1))),
        ("head", Column::Int(rows.iter().map(|r| r.2).collect())),
        ("key_lo", ints(rows.iter().map(|r| r.3))),
        ("key_hi", ints(rows.iter().map(|r| r.4))),
        ("stat", strs(rows.iter().map(|r| r.5.to_string()))),
        ("value", floats(rows.iter().map(|r| r.6))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn key_bins_are_exact_below_30_then_decades_cut_at_the_length() {
        assert_eq!(key_bins(3), [(0, 1), (1, 2), (2, 3)]);
        let bins = key_bins(1024);
        assert_eq!(bins.len(), 30 + 3);
        assert_eq!(bins[29..], [(29, 30), (30, 100), (100, 1000), (1000, 1024)]);
        assert_eq!(key_bins(100)[30..], [(30, 100)]);
    }

    /// One sequence, one head, T = 3, min_query 1, in blocks of 2 and 1 queries: rows
    /// i = 0: (1, 0, 0); i = 1: (0.25, 0.75, 0); i = 2: (0.5, 0.125, 0.375); and the blocks.
    fn three_tokens() -> (KeyReceived, Tensor, Tensor) {
        let mut acc = KeyReceived::new(1, 1, 3, 1);
        let a = Tensor::new(&[[[[1f32, 0.0], [0.25, 0.75]]]], &Device::Cpu).unwrap();
        acc.add(0, KeyWindow::CAUSAL, 0, &a).unwrap();
        let b = Tensor::new(&[[[[0.5f32, 0.125, 0.375]]]], &Device::Cpu).unwrap();
        acc.add(0, KeyWindow::CAUSAL, 2, &b).unwrap();
        (acc, a, b)
    }

    #[test]
    fn column_sums_over_counted_queries() {
        // one sequence, one head, T = 3, min_query 1, in blocks of 2 and 1 queries:
        // rows i = 0: (1, 0, 0) left out; i = 1: (0.25, 0.75, 0); i = 2: (0.5, 0.125, 0.375)
        let c = KeyWindow::CAUSAL;
        let (acc, a, b) = three_tokens();
        let r = acc.finish();
        // key 0: 0.25 + 0.5 over 2 queries; key 1: 0.75 + 0.125 over 2; key 2: 0.375 over 1
        assert_eq!(r.sum, [[[0.75, 0.875, 0.375]]]);
        assert_eq!(r.mean, [[[0.375, 0.4375, 0.375]]]);
        assert_eq!(r.layer_sum, [[0.75, 0.875, 0.375]]);
        // merged with itself: twice the sums over twice the sequences, the same means
        let mut twice = acc.clone();
        Merge::merge(&mut twice, &acc);
        assert_eq!(twice.finish(), r);
        // blocks of one query: the first holds no counted query, yet its sequence counts
        let mut ones = KeyReceived::new(1, 1, 3, 1);
        let rows = a.narrow(2, 0, 1).unwrap();
        ones.add(0, c, 0, &rows).unwrap();
        ones.add(0, c, 1, &a.narrow(2, 1, 1).unwrap()).unwrap();
        ones.add(0, c, 2, &b).unwrap();
        assert_eq!(ones.finish(), r);
    }

    #[test]
    fn sequences_of_different_lengths_pool_per_key() {
        // the sequence above (T = 3) and one of 2 tokens, rows i = 0: (1, 0); i = 1:
        // (0.5, 0.5): key 0 is held by both (queries 1 + 2), key 2 by the first alone
        let c = KeyWindow::CAUSAL;
        let (mut acc, _, _) = three_tokens();
        let short = Tensor::new(&[[[[1f32, 0.0], [0.5, 0.5]]]], &Device::Cpu).unwrap();
        acc.add(0, c, 0, &short).unwrap();
        let r = acc.finish();
        // key 0: (0.75 + 0.5) / 2 sequences, over (2 + 1) / 2 queries a sequence
        assert_eq!(r.sum, [[[0.625, 0.6875, 0.375]]]);
        assert_eq!(r.mean, [[[1.25 / 3.0, 1.375 / 3.0, 0.375]]]);
        // a bidirectional window: every key is held from the first block on, and seen by
        // every counted query (2 of a 3-token sequence)
        let mut both = KeyReceived::new(1, 1, 3, 1);
        let w = KeyWindow::bidirectional(3);
        let rows = Tensor::new(&[[[[0.25f32, 0.25, 0.5]]]], &Device::Cpu).unwrap();
        for q in 0..3 {
            both.add(0, w, q, &rows).unwrap();
        }
        let r = both.finish();
        assert_eq!(r.sum, [[[0.5, 0.5, 1.0]]]);
        assert_eq!(r.mean, [[[0.25, 0.25, 0.5]]]);
    }
}
