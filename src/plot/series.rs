//! Figures of a training run's `attention_series` (callbacks, `watch`): sink emergence,
//! the first-token mass of every layer over the steps whose weights were analysed.

use std::collections::BTreeMap;

use super::data::Cols;
use super::scene::{fit_range, Axis, Dash, Figure, LegendEntry, Mark, Panel, Swatch};
use super::theme::viridis;
use super::{Built, Ctx};

/// One panel per model: the per-layer `first_token` means of `attention_series` over
/// training steps, one line per layer (viridis from the first layer to the last).
pub fn sink_emergence(ctx: &mut Ctx) -> Built {
    const FIG: &str = "sink_emergence";
    let t = ctx
        .res
        .get("attention_series")
        .ok_or("no attention_series table: `watch` or a training callback writes one")?;
    let c = Cols::new(t, "attention_series.csv");
    let (model, step, metric, layer, head, stat, value) = (
        c.text("model")?,
        c.num("step")?,
        c.text("metric")?,
        c.int_or_empty("layer"),
        c.int_or_empty("head"),
        c.text("stat")?,
        c.num("value")?,
    );
    // model -> layer -> (step, first-token mean)
    let mut series: BTreeMap<String, BTreeMap<i64, Vec<(f64, f64)>>> = BTreeMap::new();
    let mut dropped = 0;
    for i in 0..t.height() {
        let wanted = metric[i].as_deref() == Some("first_token")
            && stat[i].as_deref() == Some("mean")
            && head[i].is_none();
        let (true, Some(m), Some(s), Some(l)) = (wanted, &model[i], step[i], layer[i]) else {
            continue;
        };
        match value[i].filter(|v| v.is_finite()) {
            Some(v) => series
                .entry(m.clone())
                .or_default()
                .entry(l)
                .or_default()
                .push((s, v)),
            None => dropped += 1,
        }
    }
    if dropped > 0 {
        ctx.note(
            FIG,
            format!("{dropped} non-finite first-token means left out"),
        );
    }
    if series.is_empty() {
        return Err("attention_series.csv has no per-layer first_token means".into());
    }
    let models = ctx.pal.order(series.keys().cloned());
    let layers = series
        .values()
        .flat_map(|l| l.keys().copied())
        .max()
        .unwrap_or(1);
    let color = |l: i64| viridis((l - 1) as f64 / (layers - 1).max(1) as f64);
    let steps: Vec<f64> = series
        .values()
        .flat_map(|l| l.values())
        .flatten()
        .map(|p| p.0)
        .collect();
    let values: Vec<f64> = series
        .values()
        .flat_map(|l| l.values())
        .flatten()
        .map(|p| p.1)
        .collect();
    let (x_range, y_range) = (fit_range(steps, false), fit_range(values, true));
    let panels = models
        .iter()
        .map(|m| {
            let marks = series[m]
                .iter()
                .map(|(&l, points)| {
                    let mut points = points.clone();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Mark::line(points, color(l))
                })
                .collect();
            Panel {
                title: m.clone(),
                x: Axis::new("training step (weights analysed)", x_range),
                y: Axis::new("mean first-token weight", y_range),
                marks,
                grid: true,
            }
        })
        .collect();
    let mut f = Figure::new(
        FIG,
        "Sink emergence: first-token weight per layer over training",
        panels,
    );
    // the first, middle and last layers name the colour scale
    let mut named: Vec<i64> = vec![1, (layers + 1) / 2, layers];
    named.dedup();
    f.legend = named
        .into_iter()
        .map(|l| LegendEntry {
            label: format!("layer {l}"),
            color: color(l),
            swatch: Swatch::Line(Dash::Solid),
        })
        .collect();
    Ok(f)
}
