//! Figures of a training run's `attention_series` (callbacks, `watch`): sink emergence,
//! the first-token mass of every layer over the steps whose weights were analysed.

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::data::Cols;
use super::scene::{fit_range, Axis, Dash, Figure, LegendEntry, Mark, Panel, Swatch};
use super::theme::viridis;
use super::{Built, Ctx, FigureError};

const FIG: &str = "sink_emergence";

/// Per model, per layer: (step, first-token mean) points.
type LayerSeries = BTreeMap<String, BTreeMap<i64, Vec<(f64, f64)>>>;

/// One panel per model: the per-layer `first_token` means of `attention_series` over
/// training steps, one line per layer (viridis from the first layer to the last).
pub fn sink_emergence(ctx: &mut Ctx) -> Built {
    let series = first_token_means(ctx)?;
    let layers = series
        .values()
        .flat_map(|l| l.keys().copied())
        .max()
        .unwrap_or(1);
    let color = |l: i64| viridis((l - 1) as f64 / (layers - 1).max(1) as f64);
    let points = || series.values().flat_map(|l| l.values()).flatten();
    let x = Axis::new(
        "training step (weights analysed)",
        fit_range(points().map(|p| p.0), false),
    );
    let y = Axis::new(
        "mean first-token weight",
        fit_range(points().map(|p| p.1), true),
    );
    let panels = ctx
        .pal
        .order(series.keys().cloned())
        .into_iter()
        .map(|m| Panel {
            marks: layer_lines(&series[&m], color),
            title: m,
            x: x.clone(),
            y: y.clone(),
            grid: true,
        })
        .collect();
    let mut f = Figure::new(
        FIG,
        "Sink emergence: first-token weight per layer over training",
        panels,
    );
    f.legend = layer_legend(layers, color);
    Ok(f)
}

/// The per-layer first-token means of `attention_series` (per-head rows, other stats and
/// metrics left out; non-finite values noted and left out).
fn first_token_means(ctx: &mut Ctx) -> Result<LayerSeries, FigureError> {
    let t = ctx
        .res
        .get("attention_series")
        .ok_or(FigureError::no_table_hint(
            "attention_series",
            "`watch` or a training callback writes one",
        ))?;
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
    let mut series = LayerSeries::new();
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
        return Err(FigureError::no_rows(
            "attention_series.csv",
            "per-layer first_token means",
        ));
    }
    Ok(series)
}

/// One line per layer of one model, its points in step order.
fn layer_lines(
    layers: &BTreeMap<i64, Vec<(f64, f64)>>,
    color: impl Fn(i64) -> RGBColor,
) -> Vec<Mark> {
    layers
        .iter()
        .map(|(&l, points)| {
            let mut points = points.clone();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Mark::line(points, color(l))
        })
        .collect()
}

/// The first, middle and last of `layers` layers name the colour scale.
fn layer_legend(layers: i64, color: impl Fn(i64) -> RGBColor) -> Vec<LegendEntry> {
    let mut named: Vec<i64> = vec![1, (layers + 1) / 2, layers];
    named.dedup();
    named
        .into_iter()
        .map(|l| LegendEntry {
            label: format!("layer {l}"),
            color: color(l),
            swatch: Swatch::Line(Dash::Solid),
        })
        .collect()
}
