//! The attention tables of SPEC section 6, built from computed metrics (`export` writes
//! them): each metric's result writes its own rows ([`super::results::MetricResult`]) into
//! [`TableRows`]. Column names and meanings here are the contract that figures, notebooks
//! and other tools read.

use super::results::ModelMetrics;
use asa_tables::schema::{self, ATTENTION, QK_SERIES};
use asa_tables::{Column, Table};

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
    fn into_table(self) -> Table {
        ATTENTION.build(vec![
            ("model", Column::Str(self.model)),
            ("metric", Column::Str(self.metric)),
            ("layer", Column::Int(self.layer)),
            ("head", Column::Int(self.head)),
            ("stat", Column::Str(self.stat)),
            ("value", Column::Float(self.value)),
        ])
    }
}

/// The tables being written: rows of `attention.csv` and whole tables of their own
/// (appended to the table of the same name).
#[derive(Default)]
pub struct TableRows {
    long: LongRows,
    others: Vec<Table>,
    /// The decoder layer (0-based) of each layer the results number (their attention
    /// layers); empty: the same numbers.
    layer_numbers: Vec<usize>,
}

impl TableRows {
    /// One row of `attention.csv`; `layer`/`head` 0-based (written 1-based) or `None` for
    /// summaries.
    pub fn push(
        &mut self,
        model: &str,
        metric: &str,
        layer: Option<usize>,
        head: Option<usize>,
        stat: &str,
        value: f64,
    ) {
        let layer = layer.map(|l| self.decoder_layer(l as i64 + 1));
        let long = &mut self.long;
        long.model.push(Some(model.to_string()));
        long.metric.push(Some(metric.to_string()));
        long.layer.push(layer);
        long.head.push(head.map(|h| h as i64 + 1));
        long.stat.push(Some(stat.to_string()));
        long.value.push(Some(value));
    }

    /// Rows written next number their layers as `layer_numbers` says (the decoder layer
    /// of each attention layer, 0-based; empty: the same numbers).
    pub fn number_layers_by(&mut self, layer_numbers: &[usize]) {
        self.layer_numbers = layer_numbers.to_vec();
    }

    /// The 1-based decoder layer of the results' 1-based layer `l`.
    fn decoder_layer(&self, l: i64) -> i64 {
        let index = usize::try_from(l - 1).ok();
        match index.and_then(|i| self.layer_numbers.get(i)) {
            Some(&decoder) => decoder as i64 + 1,
            None => l,
        }
    }

    /// A `mean` row per (layer, head) of `values` `[layer][head]`.
    pub fn per_head(&mut self, model: &str, metric: &str, values: &[Vec<f64>]) {
        for (l, heads) in values.iter().enumerate() {
            for (h, &v) in heads.iter().enumerate() {
                self.push(model, metric, Some(l), Some(h), "mean", v);
            }
        }
    }

    /// A `mean` and a `std` row per layer.
    pub fn per_layer(&mut self, model: &str, metric: &str, mean: &[f64], std: &[f64]) {
        for (l, (&m, &s)) in mean.iter().zip(std).enumerate() {
            self.push(model, metric, Some(l), None, "mean", m);
            self.push(model, metric, Some(l), None, "std", s);
        }
    }

    /// Rows of a table of its own (`heatmap`, ...), after those of other models; a table
    /// of SPEC section 6 must have exactly its schema's columns
    /// ([`asa_tables::schema`]).
    pub fn append(&mut self, mut table: Table) {
        if let Err(e) = schema::check_declared(&table) {
            panic!("{e}");
        }
        let layers = table.columns.iter_mut().find(|(name, _)| name == "layer");
        if let Some((_, Column::Int(layers))) = layers {
            for l in layers.iter_mut().flatten() {
                *l = self.decoder_layer(*l);
            }
        }
        match self.others.iter_mut().find(|t| t.name == table.name) {
            Some(existing) => existing.append(table),
            None => self.others.push(table),
        }
    }

    /// The tables with rows: `attention` first.
    pub fn into_tables(self) -> Vec<Table> {
        let mut tables = Vec::new();
        if !self.long.model.is_empty() {
            tables.push(self.long.into_table());
        }
        tables.extend(self.others.into_iter().filter(|t| t.height() > 0));
        tables
    }
}

/// A text column.
pub fn strs(values: impl IntoIterator<Item = String>) -> Column {
    Column::Str(values.into_iter().map(Some).collect())
}

/// An integer column.
pub fn ints(values: impl IntoIterator<Item = i64>) -> Column {
    Column::Int(values.into_iter().map(Some).collect())
}

/// A float column.
pub fn floats(values: impl IntoIterator<Item = f64>) -> Column {
    Column::Float(values.into_iter().map(Some).collect())
}

/// Every attention table for `models` (label, metrics); tables with no rows are left out.
pub fn attention_tables(models: &[(String, ModelMetrics)]) -> Vec<Table> {
    let mut rows = TableRows::default();
    for (label, m) in models {
        rows.number_layers_by(&m.layer_numbers);
        for (metric, result) in m.results() {
            result.write_rows(metric, label, &mut rows);
        }
    }
    rows.into_tables()
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
    QK_SERIES.build(vec![
        ("model", strs(rows.iter().map(|r| r.0.clone()))),
        ("step", ints(rows.iter().map(|r| r.1 as i64))),
        ("qk_mean", floats(rows.iter().map(|r| r.2))),
        ("qk_abs_mean", floats(rows.iter().map(|r| r.3))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_decade_bins_are_half_open() {
        // positions 1..=12: bin 1-10 holds 1..=9, bin 10-100 holds 10..=12
        let per: Vec<f64> = (1..=12).map(|p| p as f64).collect();
        let bins = decade_bins(&per);
        assert_eq!(bins[0], ("1-10".to_string(), 5.0)); // (1 + ... + 9) / 9
        assert_eq!(bins[1], ("10-100".to_string(), 11.0)); // (10 + 11 + 12) / 3
    }
}
