//! The compact human table printed on stdout after a metric command.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use super::stdout::with_stdout;
use asa_core::error::Result;
use asa_metrics::alpha_gate::AlphaResult;
use asa_metrics::entropy::EntropyResult;
use asa_metrics::first_token::SinkRate;
use asa_metrics::layer_stat::LayerStat;
use asa_metrics::nll::NllResult;
use asa_metrics::qk_mean::QkResult;
use asa_metrics::weight_sum::WeightSumResult;
use asa_metrics::{Metric, ModelMetrics, PerHead};

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.4}"),
        Some(_) => "nan".into(),
        None => "-".into(),
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// A column of the summary row: its title and the model's value, if it has one.
type SummaryColumn = (&'static str, fn(&ModelMetrics) -> Option<f64>);

/// The summary row's columns (mean over layers where the metric is per layer).
const SUMMARY: [SummaryColumn; 6] = [
    ("ppl", |m| m.get::<NllResult>(Metric::NLL).map(|n| n.ppl)),
    ("first_token", |m| {
        m.get::<LayerStat>(Metric::FIRST_TOKEN)
            .map(|f| mean(&f.mean))
    }),
    ("entropy", |m| {
        m.get::<EntropyResult>(Metric::ENTROPY)
            .map(|e| mean(&e.per_layer.mean))
    }),
    ("weight_sum", |m| {
        m.get::<WeightSumResult>(Metric::WEIGHT_SUM)
            .map(|w| mean(&w.per_layer.iter().map(|d| d.mean).collect::<Vec<_>>()))
    }),
    ("qk_mean", |m| {
        m.get::<QkResult>(Metric::QK_MEAN).map(|q| q.mean)
    }),
    ("sink_rate", |m| {
        m.get::<SinkRate>(Metric::SINK_RATE).map(|s| s.rate)
    }),
];

/// Per layer: the mean over heads of `[layer][head]` values.
fn head_means(per_head: &[Vec<f64>]) -> Vec<f64> {
    per_head.iter().map(|heads| mean(heads)).collect()
}

/// A metric shown per layer: which one, the table's title, the model's values by layer.
type PerLayer = (Metric, &'static str, fn(&ModelMetrics) -> Option<Vec<f64>>);

/// The per-layer tables, in the order they are printed.
const PER_LAYER: [PerLayer; 7] = [
    (Metric::FIRST_TOKEN, "first_token", |m| {
        m.get::<LayerStat>(Metric::FIRST_TOKEN)
            .map(|f| f.mean.clone())
    }),
    (Metric::ENTROPY, "entropy (nats)", |m| {
        m.get::<EntropyResult>(Metric::ENTROPY)
            .map(|e| e.per_layer.mean.clone())
    }),
    (Metric::WEIGHT_SUM, "weight_sum", |m| {
        m.get::<WeightSumResult>(Metric::WEIGHT_SUM)
            .map(|w| w.per_layer.iter().map(|d| d.mean).collect())
    }),
    (Metric::QK_MEAN, "qk_mean", |m| {
        m.get::<QkResult>(Metric::QK_MEAN)
            .map(|q| q.per_layer_mean.clone())
    }),
    (Metric::SINK_MASS, "sink_mass (mean over heads)", |m| {
        m.get::<PerHead>(Metric::SINK_MASS)
            .map(|p| head_means(&p.0))
    }),
    (Metric::ALPHA, "alpha (mean over heads)", |m| {
        m.get::<AlphaResult>(Metric::ALPHA).map(|a| {
            a.per_head
                .iter()
                .map(|heads| mean(&heads.iter().map(|d| d.mean).collect::<Vec<_>>()))
                .collect()
        })
    }),
    (Metric::GATE, "gate (mean over heads)", |m| {
        m.get::<PerHead>(Metric::GATE).map(|p| head_means(&p.0))
    }),
];

/// Blocks of output with one blank line between them, none before the first.
#[derive(Default)]
struct Blocks(usize);

impl Blocks {
    fn start(&mut self, out: &mut dyn Write) -> io::Result<()> {
        if self.0 > 0 {
            writeln!(out)?;
        }
        self.0 += 1;
        Ok(())
    }
}

/// Prints one summary row per model (the columns some model has), then a per-layer table
/// for each per-layer metric asked for, then the QK^T series; a failed write (a closed
/// pipe) is an error.
pub fn print_summary(
    models: &[(String, ModelMetrics)],
    series: &[(String, u64, f64, f64)],
    asked: &BTreeSet<Metric>,
) -> Result<()> {
    with_stdout(|out| write_summary(out, models, series, asked))
}

/// [`print_summary`] into `out`.
pub fn write_summary(
    out: &mut dyn Write,
    models: &[(String, ModelMetrics)],
    series: &[(String, u64, f64, f64)],
    asked: &BTreeSet<Metric>,
) -> io::Result<()> {
    let mut blocks = Blocks::default();
    write_summary_rows(out, &mut blocks, models)?;
    for per_layer in &PER_LAYER {
        write_per_layer(out, &mut blocks, models, asked, per_layer)?;
    }
    if !series.is_empty() {
        blocks.start(out)?;
        writeln!(out, "qk_mean over training steps")?;
        for (label, step, qk, abs) in series {
            writeln!(
                out,
                "{label:<12} step {step:>8}  qk_mean {qk:>10.4}  qk_abs_mean {abs:>10.4}"
            )?;
        }
    }
    Ok(())
}

/// One row per model: the summary columns some model has.
fn write_summary_rows(
    out: &mut dyn Write,
    blocks: &mut Blocks,
    models: &[(String, ModelMetrics)],
) -> io::Result<()> {
    let shown: Vec<&SummaryColumn> = SUMMARY
        .iter()
        .filter(|(_, get)| models.iter().any(|(_, m)| get(m).is_some()))
        .collect();
    if models.is_empty() || shown.is_empty() {
        return Ok(());
    }
    blocks.start(out)?;
    let width = models
        .iter()
        .map(|(l, _)| l.len())
        .max()
        .unwrap_or(5)
        .max(5);
    write!(out, "{:<width$} ", "model")?;
    for (title, _) in &shown {
        write!(out, " {title:>11}")?;
    }
    writeln!(out)?;
    for (label, m) in models {
        write!(out, "{label:<width$} ")?;
        for (_, get) in &shown {
            write!(out, " {:>11}", fmt(get(m)))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// The by-layer table of one metric, if it was asked for (alone or with one other).
fn write_per_layer(
    out: &mut dyn Write,
    blocks: &mut Blocks,
    models: &[(String, ModelMetrics)],
    asked: &BTreeSet<Metric>,
    (metric, title, get): &PerLayer,
) -> io::Result<()> {
    if asked.len() > 2 || !asked.contains(metric) {
        return Ok(());
    }
    // each model's values by decoder layer (a hybrid's attention layers only)
    let columns: Vec<(&str, BTreeMap<usize, f64>)> = models
        .iter()
        .filter_map(|(l, m)| {
            let by_layer = get(m)?.into_iter().enumerate();
            Some((
                l.as_str(),
                by_layer.map(|(k, v)| (m.decoder_layer(k), v)).collect(),
            ))
        })
        .collect();
    if columns.is_empty() && models.is_empty() {
        return Ok(()); // a training series alone (qk): its table follows
    }
    blocks.start(out)?;
    if columns.is_empty() {
        let name = title.split(' ').next().unwrap_or(title);
        return writeln!(
            out,
            "{name}: none of these models computes it (their variant has no {name})"
        );
    }
    writeln!(out, "{title} by layer")?;
    write!(out, "{:>5}", "layer")?;
    for (label, _) in &columns {
        write!(out, " {label:>12}")?;
    }
    writeln!(out)?;
    let layers: BTreeSet<usize> = columns
        .iter()
        .flat_map(|(_, v)| v.keys().copied())
        .collect();
    for l in layers {
        write!(out, "{:>5}", l + 1)?;
        for (label, v) in &columns {
            let width = label.len().max(12);
            write!(out, " {:>width$}", fmt(v.get(&l).copied()))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
