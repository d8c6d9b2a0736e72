//! Line charts: per-layer metrics (Figs. 4, 6), the QK^T training series (Fig. 2) and
//! training curves (Figs. 7, 8, 10).

use std::collections::BTreeMap;

use super::data::{attention_rows, Cols};
use super::scene::{
    fit_range, int_range, Axis, Dash, Figure, LegendEntry, Mark, Panel, Shape, Swatch,
};
use super::theme::{FAINT, INK};
use super::{Built, Ctx};
use crate::stats::StepWindow;

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
fn per_layer(
    ctx: &mut Ctx,
    fig: &str,
    metric: &str,
    (title, y_label): (&str, &str),
    from_zero: bool,
) -> Built {
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
        return Err(format!(
            "attention.csv has no finite per-layer {metric} means"
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
        let pts: Vec<(f64, f64)> = layers.iter().map(|(&l, &(v, _))| (l as f64, v)).collect();
        let spread: Vec<(f64, f64, f64)> = layers
            .iter()
            .filter(|(_, (v, s))| v.is_finite() && s.is_finite())
            .map(|(&l, &(v, s))| (l as f64, v - s, v + s))
            .collect();
        if spread.len() >= 2 {
            ys.extend(spread.iter().flat_map(|&(_, lo, hi)| [lo, hi]));
            marks.push(Mark::Band {
                upper: spread.iter().map(|&(x, _, hi)| (x, hi)).collect(),
                lower: spread.iter().map(|&(x, lo, _)| (x, lo)).collect(),
                color,
            });
        }
        xs.extend(pts.iter().map(|p| p.0));
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

/// Fig. 4: mean attention weight on the first token, per layer.
pub fn fig4_first_token(ctx: &mut Ctx) -> Built {
    per_layer(
        ctx,
        "fig4_first_token",
        "first_token",
        (
            "Fig. 4: first-token attention per layer (band: ±1 std over sequences)",
            "first-token weight aᵢ₀ (mean over queries)",
        ),
        true,
    )
}

/// Fig. 6: mean attention entropy per layer.
pub fn fig6_entropy(ctx: &mut Ctx) -> Built {
    per_layer(
        ctx,
        "fig6_entropy",
        "entropy",
        (
            "Fig. 6: attention entropy per layer (band: ±1 std over sequences)",
            "attention entropy (nats)",
        ),
        // Entropies differ by tenths of a nat around ~3: zoom to them.
        false,
    )
}

/// Fig. 2: raw QK^T mean (and mean absolute value) over training steps, one line per run.
pub fn fig2_qk_mean(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig2_qk_mean";
    let t = ctx
        .res
        .get("qk_series")
        .ok_or("no qk_series table: a folder of step checkpoints gives one")?;
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
        return Err("qk_series.csv has no finite values".into());
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

/// Whether a curves/spikes metric name is the wanted one: `loss`, `train/loss`,
/// `train_loss` for loss; `grad_norm`, `train/grad_norm`, `gradient_norm` for grad.
fn is_metric(name: &str, want: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name).to_lowercase();
    let last = last.strip_prefix("train_").unwrap_or(&last);
    match want {
        "loss" => last == "loss",
        _ => matches!(
            last,
            "grad_norm" | "gradient_norm" | "grad_norm_total" | "gradnorm"
        ),
    }
}

/// (step, value, smoothed) per run of one metric of `curves.csv`.
type Curves = BTreeMap<String, Vec<(f64, f64, f64)>>;

fn curves(ctx: &mut Ctx, fig: &str, want: &str) -> std::result::Result<Curves, String> {
    let t = ctx.res.get("curves").ok_or("no curves table")?;
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
        if !metric[i].as_deref().is_some_and(|m| is_metric(m, want)) {
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
        return Err(format!("curves.csv has no finite {want} values"));
    }
    if dropped > 0 {
        ctx.note(
            fig,
            format!("{dropped} non-finite or overflowing {want} values drawn as gaps"),
        );
    }
    for pts in out.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(out)
}

/// Raw curves (faint when a smoothed curve exists) and smoothed curves, one colour per run.
fn curve_marks(ctx: &Ctx, runs: &[String], data: &Curves) -> (Vec<Mark>, Vec<f64>) {
    let mut faint = Vec::new();
    let mut marks = Vec::new();
    let mut ys = Vec::new();
    for r in runs {
        let pts = &data[r];
        let color = ctx.pal.color(r);
        // non-finite values stay in as gaps in the lines
        let raw: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1)).collect();
        let smooth: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.2)).collect();
        ys.extend(raw.iter().chain(&smooth).map(|p| p.1));
        let markers = raw.len() <= 40;
        let smoothed = smooth.iter().any(|p| p.1.is_finite())
            && raw
                .iter()
                .zip(&smooth)
                .any(|(r, s)| r.1.to_bits() != s.1.to_bits());
        if smoothed {
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

/// Legend entries for runs, plus one saying what the faint lines are when curves are
/// smoothed.
fn curve_legend(ctx: &Ctx, runs: &[String], data: &Curves) -> Vec<LegendEntry> {
    let mut legend = model_legend(ctx, runs, Swatch::Line(Dash::Solid));
    if data
        .values()
        .flatten()
        .any(|p| p.2.is_finite() && p.2 != p.1)
    {
        legend.push(LegendEntry {
            label: "faint: raw, solid: EMA".into(),
            color: FAINT,
            swatch: Swatch::Line(Dash::Solid),
        });
    }
    legend
}

/// Fig. 7: training loss over the whole run, one line per run.
pub fn fig7_loss(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig7_loss";
    let data = curves(ctx, FIG, "loss")?;
    let runs = ctx.pal.order(data.keys().cloned());
    let (marks, ys) = curve_marks(ctx, &runs, &data);
    let panel = Panel {
        title: String::new(),
        x: Axis::new("training step", steps_range(&data)),
        y: Axis::new("training loss (nats/token)", fit_range(ys, false)),
        marks,
        grid: true,
    };
    let mut f = Figure::new(FIG, "Fig. 7: training loss", vec![panel]);
    f.panel_size = (620, 400);
    f.legend = curve_legend(ctx, &runs, &data);
    Ok(f)
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

/// Fig. 10: training loss in the late phase, zoomed to its own range.
pub fn fig10_loss_late(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig10_loss_late";
    let all = curves(ctx, FIG, "loss")?;
    let (window, what) = late_window(ctx, &all);
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
        return Err(format!("no loss values in the late window ({what})"));
    }
    let runs = ctx.pal.order(data.keys().cloned());
    let (marks, ys) = curve_marks(ctx, &runs, &data);
    let panel = Panel {
        title: String::new(),
        x: Axis::new("training step", steps_range(&data)),
        y: Axis::new("training loss (nats/token)", fit_range(ys, false)),
        marks,
        grid: true,
    };
    let mut f = Figure::new(
        FIG,
        format!("Fig. 10: training loss, late phase ({what})"),
        vec![panel],
    );
    f.panel_size = (620, 400);
    f.legend = curve_legend(ctx, &runs, &data);
    Ok(f)
}

/// Fig. 8: gradient-norm trajectories with the spike steps of `spike_steps.csv` marked
/// (one marker shape per k, in the run's colour).
pub fn fig8_grad_norm(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig8_grad_norm";
    let data = curves(ctx, FIG, "grad_norm")?;
    let runs = ctx.pal.order(data.keys().cloned());
    let (mut marks, ys) = curve_marks(ctx, &runs, &data);
    let mut legend = curve_legend(ctx, &runs, &data);
    match ctx.res.get("spike_steps") {
        None => ctx.note(FIG, "no spike_steps table: spikes not marked"),
        Some(t) => {
            let c = Cols::new(t, "spike_steps.csv");
            let (run, k, step, value) =
                (c.text("run")?, c.num("k")?, c.num("step")?, c.num("value")?);
            let metric = c.text_or_empty("metric");
            let mut by_k: BTreeMap<(String, i64), Vec<(f64, f64)>> = BTreeMap::new();
            for i in 0..t.height() {
                let grad = metric[i]
                    .as_deref()
                    .is_none_or(|m| is_metric(m, "grad_norm"));
                let (Some(r), Some(k), Some(s), Some(v)) = (&run[i], k[i], step[i], value[i])
                else {
                    continue;
                };
                if grad && data.contains_key(r) && k.is_finite() {
                    // k as thousandths so it can key a map (k = 6, 9, 4.5 ...).
                    let key = (r.clone(), (k * 1000.0).round() as i64);
                    by_k.entry(key).or_default().push((s, v));
                }
            }
            let mut ks: Vec<i64> = by_k.keys().map(|(_, k)| *k).collect();
            ks.sort();
            ks.dedup();
            let shapes = [Shape::Ring, Shape::Triangle, Shape::Cross, Shape::Dot];
            let sizes = [6.0, 3.5, 3.0, 2.5];
            for ((r, k), pts) in &by_k {
                let i = ks.iter().position(|x| x == k).unwrap_or(0).min(3);
                marks.push(Mark::Points {
                    points: pts.clone(),
                    color: ctx.pal.color(r),
                    shape: shapes[i],
                    size: sizes[i],
                });
            }
            for (i, k) in ks.iter().enumerate().take(4) {
                let k = *k as f64 / 1000.0;
                legend.push(LegendEntry {
                    label: format!("spike, k = {k}"),
                    color: INK,
                    swatch: Swatch::Marker(shapes[i]),
                });
            }
            if ks.is_empty() {
                ctx.note(FIG, "spike_steps.csv has no spikes of the plotted runs");
            }
        }
    }
    let panel = Panel {
        title: String::new(),
        x: Axis::new("training step", steps_range(&data)),
        y: Axis::new("gradient norm ‖g‖₂", fit_range(ys, true)),
        marks,
        grid: true,
    };
    let mut f = Figure::new(
        FIG,
        "Fig. 8: gradient norm with spike steps (g > median + k·MAD)",
        vec![panel],
    );
    f.panel_size = (620, 400);
    f.legend = legend;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_aliases() {
        assert!(is_metric("train/loss", "loss"));
        assert!(is_metric("loss", "loss"));
        assert!(!is_metric("val/loss_scale", "loss"));
        assert!(is_metric("train/grad_norm", "grad_norm"));
        assert!(is_metric("gradient_norm", "grad_norm"));
        assert!(!is_metric("loss", "grad_norm"));
    }
}
