//! key_received (H2O's heavy-hitter score): the attention each key position j receives,
//! sum over the queries i >= max(j, min_query) that see it of a_ij, per (layer, head) and key, mean over
//! sequences; also divided by the number of those queries. Per-key sums are column sums of
//! the weights: the flash tiles hand them beside the row table (each task's kept tile
//! weights rescaled to the rows' finished softmax, `attention::cpu_kept_weights`), a
//! materialised block its weights.

use candle_core::{DType, Tensor};

use super::accumulator::{Accumulator, Event, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_engine::hooks::KeyWindow;
use asa_tables::export::{schema, Column, Table};

/// Per (layer, head, key): the received weight summed over sequences, and the sequences seen.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KeyReceived {
    heads: usize,
    min_query: usize,
    seq_len: usize,
    /// `[layer]` the keys each query sees.
    windows: Vec<KeyWindow>,
    /// `[layer][head][key]`.
    sum: Vec<Vec<Vec<f64>>>,
    /// `[layer]` sequences added.
    seqs: Vec<u64>,
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
    /// For the layers of `windows` (the keys their queries see) x `heads` and sequences of
    /// `seq_len` tokens, queries >= `min_query`.
    pub fn new(windows: &[KeyWindow], heads: usize, seq_len: usize, min_query: usize) -> Self {
        let layers = windows.len();
        KeyReceived {
            heads,
            min_query,
            seq_len,
            windows: windows.to_vec(),
            sum: vec![vec![vec![0.0; seq_len]; heads]; layers],
            seqs: vec![0; layers],
        }
    }

    /// Adds a block's weights `[batch, head, n, keys]` of queries `q_start ..`: the column
    /// sums over its counted queries, reduced on the device.
    pub fn add(&mut self, layer: usize, q_start: usize, weights: &Tensor) -> Result<()> {
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
        self.add_sums(layer, q_start, &sums)
    }

    /// Adds a block's key sums `[batch, head, keys]` over its counted queries (the queries
    /// of block `q_start ..` from `min_query` on).
    pub fn add_sums(&mut self, layer: usize, q_start: usize, sums: &Tensor) -> Result<()> {
        let (b, h, keys) = sums.dims3()?;
        if q_start == 0 {
            self.seqs[layer] += b as u64;
        }
        let columns = sums.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        for (cell, column) in columns.chunks(keys.max(1)).enumerate() {
            let sums = &mut self.sum[layer][cell % h];
            for (s, &v) in sums.iter_mut().zip(column) {
                *s += v as f64;
            }
        }
        Ok(())
    }

    /// Queries of layer `l` that count for key `j`: i in max(j, min_query) .. seq_len that
    /// see it.
    fn queries(&self, l: usize, j: usize) -> usize {
        self.windows[l].queries_seeing(j, self.min_query..self.seq_len)
    }

    /// Means over sequences (and heads for the per-layer rows).
    pub fn finish(&self) -> KeyReceivedResult {
        let per_seq = |l: usize, v: f64| v / self.seqs[l] as f64;
        let sum: Vec<Vec<Vec<f64>>> = (0..self.sum.len())
            .map(|l| {
                let heads = &self.sum[l];
                heads
                    .iter()
                    .map(|k| k.iter().map(|&v| per_seq(l, v)).collect())
                    .collect()
            })
            .collect();
        let over_queries = |l: usize, keys: &[f64]| -> Vec<f64> {
            keys.iter()
                .enumerate()
                .map(|(j, v)| v / self.queries(l, j) as f64)
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
        s.key_windows,
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

    fn add(&mut self, event: &Event) -> Result<()> {
        if let Event::Block(b) = event {
            match (b.key_sums, b.weights) {
                (Some(sums), _) => self.add_sums(b.layer, b.q_start, sums)?,
                (None, Some(weights)) => {
                    KeyReceived::add(self, b.layer, b.q_start, weights.pattern)?
                }
                (None, None) => {}
            }
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

    #[test]
    fn column_sums_over_counted_queries() {
        // one sequence, one head, T = 3, min_query 1, in blocks of 2 and 1 queries:
        // rows i = 0: (1, 0, 0) left out; i = 1: (0.25, 0.75, 0); i = 2: (0.5, 0.125, 0.375)
        let mut acc = KeyReceived::new(&[KeyWindow::CAUSAL], 1, 3, 1);
        let a = Tensor::new(&[[[[1f32, 0.0], [0.25, 0.75]]]], &Device::Cpu).unwrap();
        acc.add(0, 0, &a).unwrap();
        let b = Tensor::new(&[[[[0.5f32, 0.125, 0.375]]]], &Device::Cpu).unwrap();
        acc.add(0, 2, &b).unwrap();
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
        let mut ones = KeyReceived::new(&[KeyWindow::CAUSAL], 1, 3, 1);
        let rows = a.narrow(2, 0, 1).unwrap();
        ones.add(0, 0, &rows).unwrap();
        ones.add(0, 1, &a.narrow(2, 1, 1).unwrap()).unwrap();
        ones.add(0, 2, &b).unwrap();
        assert_eq!(ones.finish(), r);
    }
}
