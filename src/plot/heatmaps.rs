//! Heatmaps in viridis with a shared colour bar: layer x head total attention (Fig. 5)
//! and the 30 x 30 attention map of one layer (Fig. 9).

use std::collections::BTreeMap;

use super::bars::fmt3;
use super::data::{attention_rows, Cols};
use super::scene::{int_range, Axis, ColorBar, Figure, Mark, Panel};
use super::theme::{viridis, INK, MISSING};
use super::{Built, Ctx};

/// One map: (query, key) -> weight.
type Cells = BTreeMap<(i64, i64), f64>;

/// A cell centred on integer `(x, y)`.
fn cell(x: i64, y: i64) -> (f64, f64, f64, f64) {
    let (x, y) = (x as f64, y as f64);
    (x - 0.5, y - 0.5, x + 0.5, y + 0.5)
}

/// Relative spread under which a model's head totals count as constant: head_total is 1
/// by construction for softmax and gated models, and float error must not be stretched
/// to the full colour range by min-max normalisation.
const CONSTANT_SPREAD: f64 = 1e-3;

/// Fig. 5: total attention per (layer, head), min-max normalised to [0, 1] per model, one
/// panel per model, shared colour bar. A constant model (e.g. softmax, where every head
/// total is 1) is drawn grey and labelled, never divided by zero.
pub fn fig5_head_total(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig5_head_total";
    let rows = attention_rows(ctx.res, "head_total")?;
    let mut grids: BTreeMap<String, BTreeMap<(i64, i64), f64>> = BTreeMap::new();
    let mut nan = 0;
    for r in rows.iter().filter(|r| r.stat == "mean") {
        let (Some(l), Some(h)) = (r.layer, r.head) else {
            continue;
        };
        if r.value.is_finite() {
            grids
                .entry(r.model.clone())
                .or_default()
                .insert((l, h), r.value);
        } else {
            nan += 1;
        }
    }
    if nan > 0 {
        ctx.note(FIG, format!("{nan} non-finite head totals left blank"));
    }
    if grids.is_empty() {
        return Err("attention.csv has no finite per-head head_total means".into());
    }
    let models = ctx.pal.order(grids.keys().cloned());
    let mut panels = Vec::new();
    for m in &models {
        let g = &grids[m];
        let (lo, hi) = g
            .values()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let scale = hi.abs().max(lo.abs()).max(1.0);
        let constant = hi - lo <= CONSTANT_SPREAD * scale;
        let cells = g
            .iter()
            .map(|(&(l, h), &v)| {
                let color = if constant {
                    MISSING
                } else {
                    viridis((v - lo) / (hi - lo))
                };
                (cell(h, l), color)
            })
            .collect();
        let heads = int_range(g.keys().map(|k| k.1 as f64));
        let layers = int_range(g.keys().map(|k| k.0 as f64));
        let mut marks = vec![Mark::Cells { cells }];
        let title = if constant {
            marks.push(Mark::Text {
                x: (heads.0 + heads.1) / 2.0,
                y: (layers.0 + layers.1) / 2.0,
                text: format!("constant: every head {}", fmt3((lo + hi) / 2.0)),
                color: INK,
            });
            format!("{m} (constant, not normalised)")
        } else {
            format!("{m} (raw {} to {})", fmt3(lo), fmt3(hi))
        };
        panels.push(Panel {
            title,
            x: Axis::integer("head", heads),
            y: Axis::integer("layer", layers),
            marks,
            grid: false,
        });
    }
    let mut f = Figure::new(
        FIG,
        "Fig. 5: total attention per layer and head (min-max normalised per model)",
        panels,
    );
    f.panel_size = (420, 360);
    f.colorbar = Some(ColorBar {
        label: "head total, normalised per model".into(),
        range: (0.0, 1.0),
    });
    Ok(f)
}

/// The largest position Fig. 9 draws (`--size` is 30 by default): a table naming query
/// 200000 would otherwise ask for a grid of 4e10 cells.
const MAX_HEATMAP_POSITION: i64 = 1024;

/// Fig. 9: mean attention a_ij for i, j < 30 of one layer (mean over heads and
/// sequences), one panel per model, query 0 at the top, one colour scale for all panels.
/// Keys a query cannot see (j > i) are grey.
pub fn fig9_heatmap(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig9_heatmap";
    let t = ctx.res.get("heatmap").ok_or("no heatmap table")?;
    let c = Cols::new(t, "heatmap.csv");
    let (model, query, key, value) = (
        c.text("model")?,
        c.int("query")?,
        c.int("key")?,
        c.num("value")?,
    );
    let layer = c.int_or_empty("layer");
    let mut maps: BTreeMap<String, (Option<i64>, Cells)> = BTreeMap::new();
    let (mut nan, mut other, mut outside) = (0, 0, 0);
    for i in 0..t.height() {
        let (Some(m), Some(q), Some(k)) = (&model[i], query[i], key[i]) else {
            continue;
        };
        if !(0..MAX_HEATMAP_POSITION).contains(&q) || !(0..MAX_HEATMAP_POSITION).contains(&k) {
            outside += 1;
            continue;
        }
        let e = maps
            .entry(m.clone())
            .or_insert_with(|| (layer[i], BTreeMap::new()));
        if e.0 != layer[i] {
            other += 1;
            continue;
        }
        match value[i] {
            Some(v) if v.is_finite() => {
                e.1.insert((q, k), v);
            }
            _ => nan += 1,
        }
    }
    if nan > 0 {
        ctx.note(FIG, format!("{nan} non-finite weights left blank"));
    }
    if outside > 0 {
        ctx.note(
            FIG,
            format!("{outside} rows with a position outside 0..{MAX_HEATMAP_POSITION} not drawn"),
        );
    }
    if other > 0 {
        ctx.note(
            FIG,
            format!("{other} rows of a second layer not drawn (one layer per model)"),
        );
    }
    maps.retain(|_, (_, cells)| !cells.is_empty());
    if maps.is_empty() {
        return Err("heatmap.csv has no finite weights".into());
    }
    let visible = maps
        .values()
        .flat_map(|(_, cells)| cells.iter().filter(|((q, k), _)| k <= q).map(|(_, v)| *v));
    let (mut lo, mut hi) = visible.fold((0.0f64, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !hi.is_finite() || hi <= lo {
        (lo, hi) = (lo.min(0.0), lo.max(0.0) + 1.0);
    }
    let models = ctx.pal.order(maps.keys().cloned());
    let mut panels = Vec::new();
    for m in &models {
        let (layer, cells) = &maps[m];
        let n = cells.keys().map(|&(q, k)| q.max(k)).max().unwrap_or(0) + 1;
        let mut marks = Vec::new();
        let mut drawn = Vec::new();
        for q in 0..n {
            for k in 0..n {
                let color = match cells.get(&(q, k)) {
                    _ if k > q => MISSING,
                    Some(v) => viridis((v - lo) / (hi - lo)),
                    None => continue,
                };
                drawn.push((cell(k, q), color));
            }
        }
        marks.push(Mark::Cells { cells: drawn });
        let mut y = Axis::integer("query position i", (-0.5, n as f64 - 0.5));
        y.reversed = true;
        let layer = layer.map_or(String::new(), |l| format!(", layer {l}"));
        panels.push(Panel {
            title: format!("{m}{layer}"),
            x: Axis::integer("key position j", (-0.5, n as f64 - 0.5)),
            y,
            marks,
            grid: false,
        });
    }
    let mut f = Figure::new(
        FIG,
        "Fig. 9: mean attention map of one layer (grey: masked keys j > i)",
        panels,
    );
    f.panel_size = (400, 390);
    f.colorbar = Some(ColorBar {
        label: "attention weight a_ij".into(),
        range: (lo, hi),
    });
    Ok(f)
}
