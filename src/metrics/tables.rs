//! The attention tables of SPEC section 6, built from computed metrics (`export` writes
//! them). Column names and meanings here are the contract that figures, notebooks and other
//! tools read.

use super::key_received::KeyReceivedResult;
use super::max_logit::MaxLogitResult;
use super::ModelMetrics;
use crate::export::{Column, Table};

/// Rows of `attention.csv`: model, metric, layer, head, stat, value.
#[derive(Default)]
struct LongRows {
    model: Vec<Option<String>>,
    metric: Vec<Option<String>>,
    layer: Vec<Option<i64>>,
    head: Vec<Option<i64>>,
    stat: Vec<Option<String>>,
    value: Vec<Option<f64>>,
}

impl LongRows {
    /// One row; `layer`/`head` 0-based (written 1-based) or `None` for summaries.
    fn push(
        &mut self,
        model: &str,
        metric: &str,
        layer: Option<usize>,
        head: Option<usize>,
        stat: &str,
        value: f64,
    ) {
        self.model.push(Some(model.to_string()));
        self.metric.push(Some(metric.to_string()));
        self.layer.push(layer.map(|l| l as i64 + 1));
        self.head.push(head.map(|h| h as i64 + 1));
        self.stat.push(Some(stat.to_string()));
        self.value.push(Some(value));
    }

    fn per_head(&mut self, model: &str, metric: &str, values: &[Vec<f64>]) {
        for (l, heads) in values.iter().enumerate() {
            for (h, &v) in heads.iter().enumerate() {
                self.push(model, metric, Some(l), Some(h), "mean", v);
            }
        }
    }

    fn per_layer(&mut self, model: &str, metric: &str, mean: &[f64], std: &[f64]) {
        for (l, (&m, &s)) in mean.iter().zip(std).enumerate() {
            self.push(model, metric, Some(l), None, "mean", m);
            self.push(model, metric, Some(l), None, "std", s);
        }
    }

    /// max_logit rows: per (layer, head) and per layer, stats `max` and `mean`.
    fn max_logit(&mut self, model: &str, ml: &MaxLogitResult) {
        for (l, (max, mean)) in ml.max.iter().zip(&ml.mean).enumerate() {
            self.push(model, "max_logit", Some(l), None, "max", ml.layer_max[l]);
            self.push(model, "max_logit", Some(l), None, "mean", ml.layer_mean[l]);
            for (h, (&x, &m)) in max.iter().zip(mean).enumerate() {
                self.push(model, "max_logit", Some(l), Some(h), "max", x);
                self.push(model, "max_logit", Some(l), Some(h), "mean", m);
            }
        }
    }

    fn into_table(self) -> Table {
        Table::new(
            "attention",
            vec![
                ("model", Column::Str(self.model)),
                ("metric", Column::Str(self.metric)),
                ("layer", Column::Int(self.layer)),
                ("head", Column::Int(self.head)),
                ("stat", Column::Str(self.stat)),
                ("value", Column::Float(self.value)),
            ],
        )
    }
}

fn strs(values: impl IntoIterator<Item = String>) -> Column {
    Column::Str(values.into_iter().map(Some).collect())
}

fn ints(values: impl IntoIterator<Item = i64>) -> Column {
    Column::Int(values.into_iter().map(Some).collect())
}

fn floats(values: impl IntoIterator<Item = f64>) -> Column {
    Column::Float(values.into_iter().map(Some).collect())
}

/// Every attention table for `models` (label, metrics); tables with no rows are left out.
pub fn attention_tables(models: &[(String, ModelMetrics)]) -> Vec<Table> {
    let mut long = LongRows::default();
    let (mut hist, mut heat, mut prof, mut dist, mut npos, mut nbin) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for (label, m) in models {
        let label = label.as_str();
        if let Some(ft) = &m.first_token {
            long.per_layer(label, "first_token", &ft.mean, &ft.std);
        }
        if let Some(e) = &m.entropy {
            long.per_layer(label, "entropy", &e.per_layer.mean, &e.per_layer.std);
            long.per_head(label, "entropy", &e.per_head);
        }
        if let Some(ws) = &m.weight_sum {
            for (l, d) in ws.per_layer.iter().enumerate() {
                for (stat, v) in d.named() {
                    long.push(label, "weight_sum", Some(l), None, stat, v);
                }
            }
            long.per_head(label, "head_total", &ws.head_total);
            for k in 0..ws.histogram.count.len() {
                hist.push((
                    label,
                    ws.histogram.bin_lo[k],
                    ws.histogram.bin_hi[k],
                    ws.histogram.count[k],
                ));
            }
        }
        if let Some(qk) = &m.qk {
            long.push(label, "qk_mean", None, None, "mean", qk.mean);
            long.push(label, "qk_abs_mean", None, None, "mean", qk.abs_mean);
            for (l, (&a, &b)) in qk
                .per_layer_mean
                .iter()
                .zip(&qk.per_layer_abs_mean)
                .enumerate()
            {
                long.push(label, "qk_mean", Some(l), None, "mean", a);
                long.push(label, "qk_abs_mean", Some(l), None, "mean", b);
            }
        }
        if let Some(sm) = &m.sink_mass {
            long.per_head(label, "sink_mass", sm);
        }
        if let Some(sr) = &m.sink_rate {
            long.per_head(label, "sink_importance", &sr.importance);
            long.push(label, "sink_rate", None, None, "mean", sr.rate);
        }
        if let Some(a) = &m.alpha {
            for (l, heads) in a.per_head.iter().enumerate() {
                for (h, d) in heads.iter().enumerate() {
                    for (stat, v) in d.named() {
                        long.push(label, "alpha", Some(l), Some(h), stat, v);
                    }
                }
            }
            long.per_head(label, "alpha_ma", &a.alpha_ma);
        }
        if let Some(g) = &m.gate {
            long.per_head(label, "gate", g);
        }
        if let Some(n) = &m.nll {
            long.push(label, "nll", None, None, "mean", n.mean);
            long.push(label, "ppl", None, None, "mean", n.ppl);
            for (i, &v) in n.per_position.iter().enumerate() {
                npos.push((label, i as i64 + 1, v));
            }
            for (band, v) in decade_bins(&n.per_position) {
                nbin.push((label, band, v));
            }
        }
        if let Some(h) = &m.heatmap {
            for (q, row) in h.values.iter().enumerate() {
                for (k, &v) in row.iter().enumerate() {
                    heat.push((label, h.layer as i64 + 1, q as i64, k as i64, v));
                }
            }
        }
        if let Some(p) = &m.query_profile {
            for (k, &v) in p.values.iter().enumerate() {
                prof.push((
                    label,
                    p.layer as i64 + 1,
                    p.query as i64,
                    k as i64,
                    v,
                    p.sink_mass,
                ));
            }
        }
        if let Some(d) = &m.distance {
            for (l, bands) in d.per_layer.iter().enumerate() {
                for (b, &v) in bands.iter().enumerate() {
                    dist.push((label, l as i64 + 1, None, d.bands[b].clone(), v));
                }
                for (h, bands) in d.per_head[l].iter().enumerate() {
                    for (b, &v) in bands.iter().enumerate() {
                        dist.push((
                            label,
                            l as i64 + 1,
                            Some(h as i64 + 1),
                            d.bands[b].clone(),
                            v,
                        ));
                    }
                }
            }
        }
    }
    for (label, m) in models {
        if let Some(ml) = &m.max_logit {
            long.max_logit(label, ml);
        }
    }
    let mut tables = Vec::new();
    if !long.model.is_empty() {
        tables.push(long.into_table());
    }
    let received: Vec<(&str, &KeyReceivedResult)> = models
        .iter()
        .filter_map(|(label, m)| Some((label.as_str(), m.key_received.as_ref()?)))
        .collect();
    if !received.is_empty() {
        tables.push(key_received_table(&received));
    }
    if !hist.is_empty() {
        tables.push(Table::new(
            "weight_sum_hist",
            vec![
                ("model", strs(hist.iter().map(|r| r.0.to_string()))),
                ("bin_lo", floats(hist.iter().map(|r| r.1))),
                ("bin_hi", floats(hist.iter().map(|r| r.2))),
                ("count", ints(hist.iter().map(|r| r.3 as i64))),
            ],
        ));
    }
    if !heat.is_empty() {
        tables.push(Table::new(
            "heatmap",
            vec![
                ("model", strs(heat.iter().map(|r| r.0.to_string()))),
                ("layer", ints(heat.iter().map(|r| r.1))),
                ("query", ints(heat.iter().map(|r| r.2))),
                ("key", ints(heat.iter().map(|r| r.3))),
                ("value", floats(heat.iter().map(|r| r.4))),
            ],
        ));
    }
    if !prof.is_empty() {
        tables.push(Table::new(
            "query_profile",
            vec![
                ("model", strs(prof.iter().map(|r| r.0.to_string()))),
                ("layer", ints(prof.iter().map(|r| r.1))),
                ("query", ints(prof.iter().map(|r| r.2))),
                ("key", ints(prof.iter().map(|r| r.3))),
                ("value", floats(prof.iter().map(|r| r.4))),
                ("sink_mass", floats(prof.iter().map(|r| r.5))),
            ],
        ));
    }
    if !dist.is_empty() {
        tables.push(Table::new(
            "distance_profile",
            vec![
                ("model", strs(dist.iter().map(|r| r.0.to_string()))),
                ("layer", ints(dist.iter().map(|r| r.1))),
                ("head", Column::Int(dist.iter().map(|r| r.2).collect())),
                ("band", strs(dist.iter().map(|r| r.3.clone()))),
                ("value", floats(dist.iter().map(|r| r.4))),
            ],
        ));
    }
    if !npos.is_empty() {
        tables.push(Table::new(
            "nll_position",
            vec![
                ("model", strs(npos.iter().map(|r| r.0.to_string()))),
                ("position", ints(npos.iter().map(|r| r.1))),
                ("nll", floats(npos.iter().map(|r| r.2))),
            ],
        ));
        tables.push(Table::new(
            "nll_bins",
            vec![
                ("model", strs(nbin.iter().map(|r| r.0.to_string()))),
                ("positions", strs(nbin.iter().map(|r| r.1.clone()))),
                ("nll", floats(nbin.iter().map(|r| r.2))),
            ],
        ));
    }
    tables
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
fn key_received_table(models: &[(&str, &KeyReceivedResult)]) -> Table {
    type Row = (String, i64, Option<i64>, i64, i64, &'static str, f64);
    let mut rows: Vec<Row> = Vec::new();
    for &(label, k) in models {
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
    }
    Table::new(
        "key_received",
        vec![
            ("model", strs(rows.iter().map(|r| r.0.clone()))),
            ("layer", ints(rows.iter().map(|r| r.1))),
            ("head", Column::Int(rows.iter().map(|r| r.2).collect())),
            ("key_lo", ints(rows.iter().map(|r| r.3))),
            ("key_hi", ints(rows.iter().map(|r| r.4))),
            ("stat", strs(rows.iter().map(|r| r.5.to_string()))),
            ("value", floats(rows.iter().map(|r| r.6))),
        ],
    )
}

/// Mean NLL over target positions in decade bins `1-10`, `10-100`, ... (half-open).
/// `per_position[0]` is position 1.
pub fn decade_bins(per_position: &[f64]) -> Vec<(String, f64)> {
    let mut bins = Vec::new();
    let mut lo = 1usize;
    while lo <= per_position.len() {
        let hi = lo * 10;
        let values: Vec<f64> = (lo..hi.min(per_position.len() + 1))
            .map(|p| per_position[p - 1])
            .collect();
        bins.push((
            format!("{lo}-{hi}"),
            values.iter().sum::<f64>() / values.len() as f64,
        ));
        lo = hi;
    }
    bins
}

/// `qk_series.csv`: model, step, qk_mean, qk_abs_mean.
pub fn qk_series_table(rows: &[(String, u64, f64, f64)]) -> Table {
    Table::new(
        "qk_series",
        vec![
            ("model", strs(rows.iter().map(|r| r.0.clone()))),
            ("step", ints(rows.iter().map(|r| r.1 as i64))),
            ("qk_mean", floats(rows.iter().map(|r| r.2))),
            ("qk_abs_mean", floats(rows.iter().map(|r| r.3))),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bins_are_exact_below_30_then_decades_cut_at_the_length() {
        assert_eq!(key_bins(3), [(0, 1), (1, 2), (2, 3)]);
        let bins = key_bins(1024);
        assert_eq!(bins.len(), 30 + 3);
        assert_eq!(bins[29..], [(29, 30), (30, 100), (100, 1000), (1000, 1024)]);
        assert_eq!(key_bins(100)[30..], [(30, 100)]);
    }

    #[test]
    fn nll_decade_bins_are_half_open() {
        // positions 1..=12: bin 1-10 holds 1..=9, bin 10-100 holds 10..=12
        let per: Vec<f64> = (1..=12).map(|p| p as f64).collect();
        let bins = decade_bins(&per);
        assert_eq!(bins[0], ("1-10".to_string(), 5.0)); // (1 + ... + 9) / 9
        assert_eq!(bins[1], ("10-100".to_string(), 11.0)); // (10 + 11 + 12) / 3
    }
}
