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

/// Prints one summary row per model, then a per-layer table for each per-layer metric
/// asked for, then the QK^T series.
pub fn print_summary(
    models: &[(String, ModelMetrics)],
    series: &[(String, u64, f64, f64)],
    asked: &BTreeSet<Metric>,
) {
    if !models.is_empty() {
        let width = models
            .iter()
            .map(|(l, _)| l.len())
            .max()
            .unwrap_or(5)
            .max(5);
        println!(
            "{:<width$}  {:>9} {:>11} {:>9} {:>10} {:>10} {:>9}",
            "model", "ppl", "first_token", "entropy", "weight_sum", "qk_mean", "sink_rate"
        );
        for (label, m) in models {
            println!(
                "{:<width$}  {:>9} {:>11} {:>9} {:>10} {:>10} {:>9}",
                label,
                fmt(m.nll.as_ref().map(|n| n.ppl)),
                fmt(m.first_token.as_ref().map(|f| mean(&f.mean))),
                fmt(m.entropy.as_ref().map(|e| mean(&e.per_layer.mean))),
                fmt(m
                    .weight_sum
                    .as_ref()
                    .map(|w| mean(&w.per_layer.iter().map(|d| d.mean).collect::<Vec<_>>()))),
                fmt(m.qk.as_ref().map(|q| q.mean)),
                fmt(m.sink_rate.as_ref().map(|s| s.rate)),
            );
        }
    }
    let per_layer: [(Metric, &str, fn(&ModelMetrics) -> Option<Vec<f64>>); 4] = [
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
    ];
    for (metric, title, get) in per_layer {
        if asked.len() > 2 || !asked.contains(&metric) {
            continue;
        }
        let columns: Vec<(&str, Vec<f64>)> = models
            .iter()
            .filter_map(|(l, m)| get(m).map(|v| (l.as_str(), v)))
            .collect();
        if columns.is_empty() {
            continue;
        }
        println!("\n{title} by layer");
        print!("{:>5}", "layer");
        for (label, _) in &columns {
            print!(" {label:>12}");
        }
        println!();
        let layers = columns.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        for l in 0..layers {
            print!("{:>5}", l + 1);
            for (_, v) in &columns {
                print!(" {:>12}", fmt(v.get(l).copied()));
            }
            println!();
        }
    }
    if !series.is_empty() {
        println!("\nqk_mean over training steps");
        for (label, step, qk, abs) in series {
            println!("{label:<12} step {step:>8}  qk_mean {qk:>10.4}  qk_abs_mean {abs:>10.4}");
        }
    }
}
