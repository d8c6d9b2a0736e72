//! Line charts: per-layer metrics (Figs. 4, 6), the QK^T training series (Fig. 2) and
//! training curves (Figs. 7, 8, 10).

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::data::{attention_rows, Cols};
use super::scene::{
    fit_range, int_range, Axis, Dash, Figure, FigureText, LegendEntry, Mark, Panel, Shape, Swatch,
};
use super::theme::{FAINT, INK};
use super::training::{self, Curves};
use super::{Built, Ctx, FigureError};
use asa_logs::StepWindow;

/// One legend line per model, in palette order.
pub(crate) fn model_legend(ctx: &Ctx, models: &[String], swatch: Swatch) -> Vec<LegendEntry> {
    models
        .iter()
        .map(|m| LegendEntry {
            label: m.clone(),
            color: ctx.pal.color(m),
            swatch,
        })
        .collect()
}

/// Per-layer `mean` (and `std`) rows of one attention metric, one line per model with a
/// ±1 std band (std over sequences); `from_zero` anchors the y axis at 0.
fn per_layer(ctx: &mut Ctx, text: FigureText, metric: &str, from_zero: bool) -> Built {
    let FigureText {
        fig,
        title,
        value_label: y_label,
    } = text;
    let rows = attention_rows(ctx.res, metric)?;
    let mut by_model: BTreeMap<String, BTreeMap<i64, (f64, f64)>> = BTreeMap::new();
    let mut nan = 0;
    for r in rows.iter().filter(|r| r.head.is_none()) {
        let Some(layer) = r.layer else { continue };
        let e = by_model
            .entry(r.model.clone())
            .or_default()
            .entry(layer)
            .or_insert((f64::NAN, f64::NAN));
        match r.stat.as_str() {
            "mean" => {
                e.0 = r.value;
                nan += usize::from(!r.value.is_finite());
            }
            "std" => e.1 = r.value,
            _ => {}
        }
    }
    by_model.retain(|_, layers| layers.values().any(|(m, _)| m.is_finite()));
    if by_model.is_empty() {
        return Err(FigureError::no_rows(
            "attention.csv",
            format!("finite per-layer {metric} means"),
        ));
    }
    if nan > 0 {
        ctx.note(
            fig,
            format!("{nan} non-finite or overflowing {metric} means drawn as gaps"),
        );
    }
    let models = ctx.pal.order(by_model.keys().cloned());
    let mut marks = Vec::new();
    let mut ys = Vec::new();
    let mut xs = Vec::new();
    for m in &models {
        let layers = &by_model[m];
        let color = ctx.pal.color(m);
        let (pts, bands) = layer_marks(layers, color);
        for band in &bands {
            if let Mark::Band { upper, lower, .. } = band {
                ys.extend(upper.iter().chain(lower).map(|p| p.1));
            }
        }
        marks.extend(bands);
        xs.extend(pts.iter().map(|p| p.0).filter(|x| x.is_finite()));
        ys.extend(pts.iter().map(|p| p.1));
        marks.push(Mark::line(pts, color));
    }
    let panel = Panel {
        title: String::new(),
        x: Axis::integer("layer", int_range(xs)),
        y: Axis::new(y_label, fit_range(ys, from_zero)),
        marks,
        grid: true,
    };
    let mut f = Figure::new(fig, title, vec![panel]);
    f.panel_size = (560, 380);
    f.legend = model_legend(ctx, &models, Swatch::Line(Dash::Solid));
    Ok(f)
}

/// One model's per-layer line (`layer -> (mean, std)`) and its ±1 std bands: a hybrid's
/// layers without attention have no rows, so the line has gaps there rather than lines
/// across them, and a band runs over each run of consecutive layers (a narrow box around a
/// layer alone).
fn layer_marks(
    layers: &BTreeMap<i64, (f64, f64)>,
    color: RGBColor,
) -> (Vec<(f64, f64)>, Vec<Mark>) {
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for (&l, &(v, _)) in layers {
        if pts.last().is_some_and(|&(x, _)| x + 1.0 < l as f64) {
            pts.push((f64::NAN, f64::NAN));
        }
        pts.push((l as f64, v));
    }
    let spread: Vec<(i64, f64, f64)> = layers
        .iter()
        .filter(|(_, (v, s))| v.is_finite() && s.is_finite())
        .map(|(&l, &(v, s))| (l, v - s, v + s))
        .collect();
    let bands = spread
        .chunk_by(|a, b| a.0 + 1 == b.0)
        .map(|run| {
            let edges: Vec<(f64, f64, f64)> = match run {
                [(x, lo, hi)] => vec![(*x as f64 - 0.08, *lo, *hi), (*x as f64 + 0.08, *lo, *hi)],
                _ => run.iter().map(|&(x, lo, hi)| (x as f64, lo, hi)).collect(),
            };
            Mark::Band {
                upper: edges.iter().map(|&(x, _, hi)| (x, hi)).collect(),
                lower: edges.iter().map(|&(x, lo, _)| (x, lo)).collect(),
                color,
            }
        })
        .collect();
    (pts, bands)
}

/// Fig. 4: mean attention weight on the first token, per layer.
pub fn fig4_first_token(ctx: &mut Ctx) -> Built {
    let text = FigureText {
        fig: "fig4_first_token",
        title: "Fig. 4: first-token attention per layer (band: ±1 std over sequences)",
        value_label: "first-token weight aᵢ₀ (mean over queries)",
    };
    per_layer(ctx, text, "first_token", true)
}

/// Fig. 6: mean attention entropy per layer.
pub fn fig6_entropy(ctx: &mut Ctx) -> Built {
    let text = FigureText {
        fig: "fig6_entropy",
        title: "Fig. 6: attention entropy per layer (band: ±1 std over sequences)",
        value_label: "attention entropy (nats)",
    };
    // Entropies differ by tenths of a nat around ~3: zoom to them.
    per_layer(ctx, text, "entropy", false)
}

/// Fig. 2: raw QK^T mean (and mean absolute value) over training steps, one line per run.
pub fn fig2_qk_mean(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig2_qk_mean";
    let t = ctx.res.get("qk_series").ok_or(FigureError::no_table_hint(
        "qk_series",
        "a folder of step checkpoints gives one",
    ))?;
    let c = Cols::new(t, "qk_series.csv");
    let (model, step, mean, abs) = (
        c.text("model")?,
        c.num("step")?,
        c.num("qk_mean")?,
        c.num_or_empty("qk_abs_mean"),
    );
    let mut series: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut dropped = 0;
    for i in 0..t.height() {
        let (Some(m), Some(s)) = (&model[i], step[i]) else {
            dropped += 1;
            continue;
        };
        let (v, a) = (mean[i].unwrap_or(f64::NAN), abs[i].unwrap_or(f64::NAN));
        if !v.is_finite() && !a.is_finite() {
            dropped += 1;
            continue;
        }
        series.entry(m.clone()).or_default().push((s, v, a));
    }
    if dropped > 0 {
        ctx.note(
            FIG,
            format!("{dropped} rows without a finite value left out"),
        );
    }
    if series.is_empty() {
        return Err(FigureError::no_rows("qk_series.csv", "finite values"));
    }
    let models = ctx.pal.order(series.keys().cloned());
    let steps: Vec<f64> = series.values().flatten().map(|p| p.0).collect();
    let x_range = fit_range(steps, false);
    let mut panels = Vec::new();
    for (k, (title, y_label)) in [
        ("mean q·k", "mean raw q·k (before 1/√d)"),
        ("mean |q·k|", "mean |q·k| (before 1/√d)"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut marks = Vec::new();
        let mut ys = Vec::new();
        for m in &models {
            let mut pts: Vec<(f64, f64)> = series[m]
                .iter()
                .map(|p| (p.0, if k == 0 { p.1 } else { p.2 }))
                .filter(|p| p.1.is_finite())
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            ys.extend(pts.iter().map(|p| p.1));
            marks.push(Mark::line(pts, ctx.pal.color(m)));
        }
        if k == 1 && ys.is_empty() {
            continue;
        }
        panels.push(Panel {
            title: title.into(),
            x: Axis::new("training step", x_range),
            y: Axis::new(y_label, fit_range(ys, k == 1)),
            marks,
            grid: true,
        });
    }
    let mut f = Figure::new(FIG, "Fig. 2: QKᵀ logits over training", panels);
    f.legend = model_legend(ctx, &models, Swatch::Line(Dash::Solid));
    Ok(f)
}

/// Whether a curves/spikes metric name is the gradient norm: `grad_norm`,
/// `train/grad_norm`, `gradient_norm`.
fn is_grad_norm(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name).to_lowercase();
    let last = last.strip_prefix("train_").unwrap_or(&last);
    matches!(
        last,
        "grad_norm" | "gradient_norm" | "grad_norm_total" | "gradnorm"
    )
}

/// The rows of `curves.csv` whose metric `is_wanted`, per run.
fn curves(
    ctx: &mut Ctx,
    fig: &str,
    what: &str,
    is_wanted: &dyn Fn(&str) -> bool,
) -> std::result::Result<Curves, FigureError> {
    let t = ctx
        .res
        .get("curves")
        .ok_or(FigureError::no_table("curves"))?;
    let c = Cols::new(t, "curves.csv");
    let (run, metric, step, value) = (
        c.text("run")?,
        c.text("metric")?,
        c.num("step")?,
        c.num("value")?,
    );
    let smoothed = c.num_or_empty("smoothed");
    let mut out: Curves = BTreeMap::new();
    let mut dropped = 0;
    for i in 0..t.height() {
        if !metric[i].as_deref().is_some_and(is_wanted) {
            continue;
        }
        let (Some(r), Some(s)) = (&run[i], step[i]) else {
            continue;
        };
        let v = value[i].unwrap_or(f64::NAN);
        dropped += usize::from(!v.is_finite());
        out.entry(r.clone())
            .or_default()
            .push((s, v, smoothed[i].unwrap_or(f64::NAN)));
    }
    out.retain(|_, pts| pts.iter().any(|p| p.1.is_finite()));
    if out.is_empty() {
        return Err(FigureError::no_rows(
            "curves.csv",
            format!("finite {what} values"),
        ));
    }
    if dropped > 0 {
        ctx.note(
            fig,
            format!("{dropped} non-finite or overflowing {what} values drawn as gaps"),
        );
    }
    for pts in out.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(out)
}

/// Raw curves (faint when smoothed) and smoothed curves, one colour per run.
fn curve_marks(
    colors: &BTreeMap<String, RGBColor>,
    runs: &[String],
    data: &Curves,
    smoothed: bool,
) -> (Vec<Mark>, Vec<f64>) {
    let mut faint = Vec::new();
    let mut marks = Vec::new();
    let mut ys = Vec::new();
    for r in runs {
        let pts = &data[r];
        let color = colors[r];
        // non-finite values stay in as gaps in the lines
        let raw: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1)).collect();
        let smooth: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.2)).collect();
        let markers = raw.len() <= 40;
        if smoothed && smooth.iter().any(|p| p.1.is_finite()) {
            ys.extend(raw.iter().chain(&smooth).map(|p| p.1));
            faint.push(Mark::Line {
                points: raw,
                color,
                width: 1.0,
                dash: Dash::Solid,
                opacity: 0.3,
                markers: false,
            });
            marks.push(Mark::Line {
                points: smooth,
                color,
                width: 2.0,
                dash: Dash::Solid,
                opacity: 1.0,
                markers,
            });
        } else {
            ys.extend(raw.iter().map(|p| p.1));
            marks.push(Mark::Line {
                points: raw,
                color,
                width: 1.6,
                dash: Dash::Solid,
                opacity: 1.0,
                markers,
            });
        }
    }
    // Every faint raw line under every solid one.
    faint.extend(marks);
    (faint, ys)
}

fn steps_range(data: &Curves) -> (f64, f64) {
    fit_range(data.values().flatten().map(|p| p.0), false)
}

/// Legend entries: one per method (the METHOD of `SIZE/METHOD` labels, shown once across
/// the size panels), plus the line saying what the faint and solid lines are.
fn curve_legend(
    colors: &BTreeMap<String, RGBColor>,
    runs: &[String],
    smoothing: &Option<String>,
) -> Vec<LegendEntry> {
    let mut legend: Vec<LegendEntry> = Vec::new();
    for r in runs {
        let label = training::method_of(r).to_string();
        if !legend.iter().any(|e| e.label == label) {
            legend.push(LegendEntry {
                label,
                color: colors[r],
                swatch: Swatch::Line(Dash::Solid),
            });
        }
    }
    if let Some(text) = smoothing {
        legend.push(LegendEntry {
            label: text.clone(),
            color: FAINT,
            swatch: Swatch::Line(Dash::Solid),
        });
    }
    legend
}

/// Each run's colour: that of the first run of its method (the METHOD of `SIZE/METHOD`),
/// so that a method keeps one colour across the size panels.
fn run_colors(ctx: &Ctx, runs: &[String]) -> BTreeMap<String, RGBColor> {
    let mut by_method: BTreeMap<&str, RGBColor> = BTreeMap::new();
    runs.iter()
        .map(|r| {
            let c = *by_method
                .entry(training::method_of(r))
                .or_insert_with(|| ctx.pal.color(r));
            (r.clone(), c)
        })
        .collect()
}

/// A training-curve figure: `data` smoothed as asked, on a log axis with `--log-y`, one
/// panel per size when the runs are labelled SIZE/METHOD; `extra` adds marks to the panel
/// of a run (Fig. 8's spikes).
fn curve_figure(
    ctx: &Ctx,
    text: FigureText,
    mut data: Curves,
    from_zero: bool,
    extra: &dyn Fn(&[String], &BTreeMap<String, RGBColor>) -> Vec<Mark>,
) -> Figure {
    let FigureText {
        fig,
        title,
        value_label: y_label,
    } = text;
    let runs = ctx.pal.order(data.keys().cloned());
    let colors = run_colors(ctx, &runs);
    let smoothing = training::smooth(ctx, &mut data);
    if ctx.opts.log_y {
        training::log10_values(&mut data);
    }
    let x_range = steps_range(&data);
    let groups = training::size_panels(&runs);
    let panels = groups
        .iter()
        .map(|(panel_title, members)| {
            let (mut marks, ys) = curve_marks(&colors, members, &data, smoothing.is_some());
            marks.extend(extra(members, &colors));
            let mut y = Axis::new(
                match ctx.opts.log_y {
                    true => format!("{y_label}, log scale"),
                    false => y_label.to_string(),
                },
                fit_range(ys, from_zero && !ctx.opts.log_y),
            );
            y.log10 = ctx.opts.log_y;
            Panel {
                title: panel_title.clone(),
                x: Axis::new("training step", x_range),
                y,
                marks,
                grid: true,
            }
        })
        .collect();
    let mut f = Figure::new(fig, title, panels);
    f.panel_size = match groups.len() {
        1 => (620, 400),
        _ => (460, 340),
    };
    f.legend = curve_legend(&colors, &runs, &smoothing);
    f
}

/// The loss curves of Figs. 7 and 10 and the metric they show (a KD loss when the logs have
/// one), noted.
fn loss_curves(ctx: &mut Ctx, fig: &str) -> std::result::Result<(Curves, String), FigureError> {
    let (metric, why) = training::loss_metric(ctx)?;
    if let Some(why) = why {
        ctx.note(fig, format!("plots {metric} ({why})"));
    }
    let wanted = metric.clone();
    let data = curves(ctx, fig, &metric, &move |m: &str| m == wanted)?;
    Ok((data, metric))
}

/// The y-axis title of a loss metric.
fn loss_label(metric: &str) -> String {
    match training::is_loss(metric) {
        true => "training loss (nats/token)".into(),
        false => format!("{metric} (nats/token)"),
    }
}

/// Fig. 7: the loss over the whole run (a KD loss when logged), a panel per model size.
pub fn fig7_loss(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig7_loss";
    let (data, metric) = loss_curves(ctx, FIG)?;
    let title = format!("Fig. 7: {metric} over training");
    let label = loss_label(&metric);
    let text = FigureText {
        fig: FIG,
        title: &title,
        value_label: &label,
    };
    Ok(curve_figure(ctx, text, data, false, &|_, _| Vec::new()))
}

/// The late window: `--late-steps`, else the last `late_fraction` of the logged steps.
fn late_window(ctx: &Ctx, data: &Curves) -> (StepWindow, String) {
    if let Some(w) = ctx.opts.late_steps {
        return (w, w.describe());
    }
    let steps = data.values().flatten().map(|p| p.0);
    let (lo, hi) = steps.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), s| {
        (a.min(s), b.max(s))
    });
    // steps 0..=9999 at 20%: 8000..=9999, 2000 steps
    let start = (hi - ctx.opts.late_fraction * (hi - lo)).ceil() as i64;
    let end = hi as i64;
    let pct = (ctx.opts.late_fraction * 100.0).round();
    (
        StepWindow {
            start: Some(start),
            end: Some(end),
            inclusive: true,
        },
        format!("steps {start}–{end}, last {pct}% of the run"),
    )
}

/// Fig. 10: the loss in the late phase, zoomed to its own range, a panel per model size.
/// Smoothing runs over the whole run first, so the window shows the same curve, zoomed.
pub fn fig10_loss_late(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig10_loss_late";
    let (mut all, metric) = loss_curves(ctx, FIG)?;
    let (window, what) = late_window(ctx, &all);
    let smoothing = training::smooth(ctx, &mut all);
    let data: Curves = all
        .into_iter()
        .map(|(r, pts)| {
            let keep = pts
                .into_iter()
                .filter(|p| window.contains(p.0 as i64))
                .collect::<Vec<_>>();
            (r, keep)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    if data.is_empty() {
        return Err(FigureError::EmptyWindow {
            metric,
            window: what,
        });
    }
    let title = format!("Fig. 10: {metric}, late phase ({what})");
    let label = loss_label(&metric);
    // already smoothed over the whole run: the figure must not smooth the cut again
    let opts = super::FigureOptions {
        smooth: None,
        ..ctx.opts.clone()
    };
    let inner = Ctx::new(ctx.res, ctx.pal, &opts);
    let text = FigureText {
        fig: FIG,
        title: &title,
        value_label: &label,
    };
    let mut f = curve_figure(&inner, text, data, false, &|_, _| Vec::new());
    if let (Some(text), Some(last)) = (smoothing, f.legend.last_mut()) {
        last.label = text;
    }
    Ok(f)
}

/// Spike markers of `spike_steps.csv` per (run, k), and the k values in order.
type SpikeMarks = (BTreeMap<(String, i64), Vec<(f64, f64)>>, Vec<i64>);

fn spike_marks(
    ctx: &mut Ctx,
    fig: &str,
    data: &Curves,
) -> std::result::Result<SpikeMarks, FigureError> {
    let mut by_k: BTreeMap<(String, i64), Vec<(f64, f64)>> = BTreeMap::new();
    match ctx.res.get("spike_steps") {
        None => ctx.note(fig, "no spike_steps table: spikes not marked"),
        Some(t) => {
            let c = Cols::new(t, "spike_steps.csv");
            let (run, k, step, value) =
                (c.text("run")?, c.num("k")?, c.num("step")?, c.num("value")?);
            let metric = c.text_or_empty("metric");
            for i in 0..t.height() {
                let grad = metric[i].as_deref().is_none_or(is_grad_norm);
                let (Some(r), Some(k), Some(s), Some(v)) = (&run[i], k[i], step[i], value[i])
                else {
                    continue;
                };
                if grad && data.contains_key(r) && k.is_finite() {
                    // k as thousandths so it can key a map (k = 6, 9, 4.5 ...).
                    let key = (r.clone(), (k * 1000.0).round() as i64);
                    let v = match ctx.opts.log_y {
                        true if v > 0.0 => v.log10(),
                        true => continue,
                        false => v,
                    };
                    by_k.entry(key).or_default().push((s, v));
                }
            }
            if by_k.is_empty() {
                ctx.note(fig, "spike_steps.csv has no spikes of the plotted runs");
            }
        }
    }
    let mut ks: Vec<i64> = by_k.keys().map(|(_, k)| *k).collect();
    ks.sort();
    ks.dedup();
    Ok((by_k, ks))
}

/// Fig. 8: gradient-norm trajectories with the spike steps of `spike_steps.csv` marked
/// (one marker shape per k, in the run's colour), a panel per model size.
pub fn fig8_grad_norm(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig8_grad_norm";
    let data = curves(ctx, FIG, "grad_norm", &is_grad_norm)?;
    let (by_k, ks) = spike_marks(ctx, FIG, &data)?;
    let shapes = [Shape::Ring, Shape::Triangle, Shape::Cross, Shape::Dot];
    let sizes = [6.0, 3.5, 3.0, 2.5];
    let extra = |members: &[String], colors: &BTreeMap<String, RGBColor>| -> Vec<Mark> {
        by_k.iter()
            .filter(|((r, _), _)| members.contains(r))
            .map(|((r, k), pts)| {
                let i = ks.iter().position(|x| x == k).unwrap_or(0).min(3);
                Mark::Points {
                    points: pts.clone(),
                    color: colors[r],
                    shape: shapes[i],
                    size: sizes[i],
                }
            })
            .collect()
    };
    let text = FigureText {
        fig: FIG,
        title: "Fig. 8: gradient norm with spike steps (g > median + k·MAD)",
        value_label: "gradient norm ‖g‖₂",
    };
    let mut f = curve_figure(ctx, text, data, true, &extra);
    for (i, k) in ks.iter().enumerate().take(4) {
        let k = *k as f64 / 1000.0;
        f.legend.push(LegendEntry {
            label: format!("spike, k = {k}"),
            color: INK,
            swatch: Swatch::Marker(shapes[i]),
        });
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_aliases() {
        assert!(training::is_loss("train/loss"));
        assert!(training::is_loss("loss"));
        assert!(!training::is_loss("val/loss_scale"));
        assert!(is_grad_norm("train/grad_norm"));
        assert!(is_grad_norm("gradient_norm"));
        assert!(!is_grad_norm("loss"));
    }

    /// A hybrid's attention layers 2 and 4: a gap at layer 3, not a line across it, and a
    /// narrow band box around each; consecutive layers keep one band along them.
    #[test]
    fn layers_without_rows_are_gaps_with_a_band_box_per_lone_layer() {
        let color = RGBColor(0, 0, 0);
        let hybrid = BTreeMap::from([(2, (0.5, 0.1)), (4, (0.25, 0.05))]);
        let (pts, bands) = layer_marks(&hybrid, color);
        assert_eq!(pts.len(), 3);
        assert!(pts[1].0.is_nan() && pts[1].1.is_nan());
        assert_eq!((pts[0], pts[2]), ((2.0, 0.5), (4.0, 0.25)));
        assert_eq!(bands.len(), 2);
        let Mark::Band { upper, lower, .. } = &bands[0] else {
            panic!("not a band")
        };
        assert_eq!(upper, &vec![(1.92, 0.6), (2.08, 0.6)]);
        assert_eq!(lower, &vec![(1.92, 0.4), (2.08, 0.4)]);
        let dense = BTreeMap::from([(1, (0.5, 0.1)), (2, (0.25, 0.05))]);
        let (pts, bands) = layer_marks(&dense, color);
        assert!(pts.iter().all(|p| p.0.is_finite()));
        assert_eq!(bands.len(), 1);
        let Mark::Band { upper, .. } = &bands[0] else {
            panic!("not a band")
        };
        assert_eq!(upper, &vec![(1.0, 0.6), (2.0, 0.3)]);
    }
}
