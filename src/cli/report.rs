//! The compact human table printed on stdout after a metric command.

use std::collections::BTreeSet;

use crate::metrics::{Metric, ModelMetrics};

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
    ("ppl", |m| m.nll.as_ref().map(|n| n.ppl)),
    ("first_token", |m| {
        m.first_token.as_ref().map(|f| mean(&f.mean))
    }),
    ("entropy", |m| {
        m.entropy.as_ref().map(|e| mean(&e.per_layer.mean))
    }),
    ("weight_sum", |m| {
        m.weight_sum
            .as_ref()
            .map(|w| mean(&w.per_layer.iter().map(|d| d.mean).collect::<Vec<_>>()))
    }),
    ("qk_mean", |m| m.qk.as_ref().map(|q| q.mean)),
    ("sink_rate", |m| m.sink_rate.as_ref().map(|s| s.rate)),
];

/// Per layer: the mean over heads of `[layer][head]` values.
fn head_means(per_head: &[Vec<f64>]) -> Vec<f64> {
    per_head.iter().map(|heads| mean(heads)).collect()
}

/// Prints one summary row per model (the columns some model has), then a per-layer table
/// for each per-layer metric asked for, then the QK^T series.
pub fn print_summary(
    models: &[(String, ModelMetrics)],
    series: &[(String, u64, f64, f64)],
    asked: &BTreeSet<Metric>,
) {
    let shown: Vec<&SummaryColumn> = SUMMARY
        .iter()
        .filter(|(_, get)| models.iter().any(|(_, m)| get(m).is_some()))
        .collect();
    // a blank line between blocks, none before the first
    let mut blocks = 0;
    let mut gap = || {
        if blocks > 0 {
            println!();
        }
        blocks += 1;
    };
    if !models.is_empty() && !shown.is_empty() {
        gap();
        let width = models
            .iter()
            .map(|(l, _)| l.len())
            .max()
            .unwrap_or(5)
            .max(5);
        print!("{:<width$} ", "model");
        for (title, _) in &shown {
            print!(" {title:>11}");
        }
        println!();
        for (label, m) in models {
            print!("{label:<width$} ");
            for (_, get) in &shown {
                print!(" {:>11}", fmt(get(m)));
            }
            println!();
        }
    }
    let per_layer: [(Metric, &str, fn(&ModelMetrics) -> Option<Vec<f64>>); 7] = [
        (Metric::FirstToken, "first_token", |m| {
            m.first_token.as_ref().map(|f| f.mean.clone())
        }),
        (Metric::Entropy, "entropy (nats)", |m| {
            m.entropy.as_ref().map(|e| e.per_layer.mean.clone())
        }),
        (Metric::WeightSum, "weight_sum", |m| {
            m.weight_sum
                .as_ref()
                .map(|w| w.per_layer.iter().map(|d| d.mean).collect())
        }),
        (Metric::QkMean, "qk_mean", |m| {
            m.qk.as_ref().map(|q| q.per_layer_mean.clone())
        }),
        (Metric::SinkMass, "sink_mass (mean over heads)", |m| {
            m.sink_mass.as_deref().map(head_means)
        }),
        (Metric::Alpha, "alpha (mean over heads)", |m| {
            m.alpha.as_ref().map(|a| {
                a.per_head
                    .iter()
                    .map(|heads| mean(&heads.iter().map(|d| d.mean).collect::<Vec<_>>()))
                    .collect()
            })
        }),
        (Metric::Gate, "gate (mean over heads)", |m| {
            m.gate.as_deref().map(head_means)
        }),
    ];
    for (metric, title, get) in per_layer {
        if asked.len() > 2 || !asked.contains(&metric) {
            continue;
        }
        let columns: Vec<(&str, Vec<f64>)> = models
            .iter()
            .filter_map(|(l, m)| get(m).map(|v| (l.as_str(), v)))
            .collect();
        if columns.is_empty() && models.is_empty() {
            continue; // a training series alone (qk): its table follows
        }
        gap();
        if columns.is_empty() {
            let name = title.split(' ').next().unwrap_or(title);
            println!("{name}: none of these models computes it (their variant has no {name})");
            continue;
        }
        println!("{title} by layer");
        print!("{:>5}", "layer");
        for (label, _) in &columns {
            print!(" {label:>12}");
        }
        println!();
        let layers = columns.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        for l in 0..layers {
            print!("{:>5}", l + 1);
            for (label, v) in &columns {
                let width = label.len().max(12);
                print!(" {:>width$}", fmt(v.get(l).copied()));
            }
            println!();
        }
    }
    if !series.is_empty() {
        gap();
        println!("qk_mean over training steps");
        for (label, step, qk, abs) in series {
            println!("{label:<12} step {step:>8}  qk_mean {qk:>10.4}  qk_abs_mean {abs:>10.4}");
        }
    }
}
