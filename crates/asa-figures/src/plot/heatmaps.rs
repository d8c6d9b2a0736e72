//! Heatmaps in viridis with a shared colour bar: layer x head total attention (Fig. 5),
//! the Affine-Scaled α per layer and head (its companion) and the 30 x 30 attention map
//! of one layer (Fig. 9).

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::bars::fmt3;
use super::data::{attention_rows, Cols};
use super::scene::{int_range, Axis, ColorBar, Figure, FigureText, Mark, Panel};
use super::theme::{viridis, MISSING};
use super::{Built, Ctx, FigureError};
use asa_metrics::summary::quantile_sorted;

/// One map: (query, key) -> weight.
type Cells = BTreeMap<(i64, i64), f64>;

/// A cell centred on integer `(x, y)`.
fn cell(x: i64, y: i64) -> (f64, f64, f64, f64) {
    let (x, y) = (x as f64, y as f64);
    (x - 0.5, y - 0.5, x + 0.5, y + 0.5)
}

/// Relative spread under which a model's values count as constant (head_total is 1 by
/// construction for softmax and gated models): such a panel says so in its title.
const CONSTANT_SPREAD: f64 = 1e-3;

/// Per-(layer, head) `mean` rows of one attention metric, by model.
type Grids = BTreeMap<String, BTreeMap<(i64, i64), f64>>;

fn per_head(ctx: &mut Ctx, fig: &str, metric: &str) -> std::result::Result<Grids, FigureError> {
    let rows = attention_rows(ctx.res, metric)?;
    let mut grids: Grids = BTreeMap::new();
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
        ctx.note(fig, format!("{nan} non-finite {metric} means left blank"));
    }
    if grids.is_empty() {
        return Err(FigureError::no_rows(
            "attention.csv",
            format!("finite per-head {metric} means"),
        ));
    }
    Ok(grids)
}

/// One layer x head panel per model, every cell coloured on the one scale `lo..hi`.
fn head_panels(ctx: &Ctx, grids: &Grids, (lo, hi): (f64, f64)) -> Vec<Panel> {
    let models = ctx.pal.order(grids.keys().cloned());
    models
        .iter()
        .map(|m| {
            let g = &grids[m];
            let (min, max) = g
                .values()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                    (a.min(v), b.max(v))
                });
            let cells = g
                .iter()
                .map(|(&(l, h), &v)| (cell(h, l), viridis((v - lo) / (hi - lo))))
                .collect();
            let constant = max - min <= CONSTANT_SPREAD * max.abs().max(min.abs()).max(1.0);
            let title = if constant {
                format!("{m} (every head {})", fmt3((min + max) / 2.0))
            } else {
                format!("{m} ({} to {})", fmt3(min), fmt3(max))
            };
            Panel {
                title,
                x: Axis::integer("head", int_range(g.keys().map(|k| k.1 as f64))),
                y: Axis::integer("layer", int_range(g.keys().map(|k| k.0 as f64))),
                marks: vec![Mark::Cells { cells }],
                grid: false,
            }
        })
        .collect()
}

/// Fig. 5: total attention Σⱼ aᵢⱼ per (layer, head) (mean over queries), one panel per
/// model, all on one colour scale from 0 (or the least total) to 1 (or the largest), so a
/// flat sink model looks flat and a softmax model (every head 1) sits at the top.
pub fn fig5_head_total(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig5_head_total";
    let grids = per_head(ctx, FIG, "head_total")?;
    let text = FigureText {
        fig: FIG,
        title: "Fig. 5: total attention per layer and head (one colour scale)",
        value_label: "head total Σⱼ aᵢⱼ (mean over queries)",
    };
    Ok(one_scale_figure(ctx, &grids, text))
}

/// Companion of Fig. 5: the mean Affine-Scaled scale α per (layer, head) of each model
/// with `alpha` rows (affine_scaled and affine_scaled_gated), on φ's range [0, 1].
pub fn fig5_alpha(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig5_alpha";
    let grids =
        per_head(ctx, FIG, "alpha").map_err(|why| FigureError::NoAffineScaled(Box::new(why)))?;
    let text = FigureText {
        fig: FIG,
        title: "Fig. 5 (companion): mean Affine-Scaled α per layer and head",
        value_label: "mean α = φ(wₕ · xᵢ) over queries",
    };
    Ok(one_scale_figure(ctx, &grids, text))
}

/// Per-head grids, a panel per model, on one colour scale from min(0, least) to
/// max(1, largest), stated on the colour bar (labelled with the text's value label).
fn one_scale_figure(ctx: &Ctx, grids: &Grids, text: FigureText) -> Figure {
    let FigureText {
        fig,
        title,
        value_label: scale_label,
    } = text;
    let (lo, hi) = grids
        .values()
        .flat_map(|g| g.values())
        .fold((0.0f64, 1.0f64), |(a, b), &v| (a.min(v), b.max(v)));
    let panels = head_panels(ctx, grids, (lo, hi));
    let mut f = Figure::new(fig, title, panels);
    f.panel_size = (420, 360);
    f.colorbar = Some(ColorBar {
        label: scale_label.into(),
        range: (lo, hi),
    });
    f
}

/// Share of the visible Fig. 9 cells below the top of its colour scale.
const CLIP_QUANTILE: f64 = 0.98;

/// The largest position Fig. 9 draws (`--size` is 30 by default): a table naming query
/// 200000 would otherwise ask for a grid of 4e10 cells.
const MAX_HEATMAP_POSITION: i64 = 1024;

/// Fig. 9: mean attention aᵢⱼ for i, j < 30 of one layer (mean over heads and
/// sequences), one panel per model, query 0 at the top, one colour scale for all panels,
/// clipped at the 98th percentile of the visible cells (said in the title and on the
/// colour bar) so that cell (0, 0) does not darken the rest. Keys a query cannot see
/// (j > i) are grey.
pub fn fig9_heatmap(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig9_heatmap";
    let maps = read_maps(ctx, FIG)?;
    let scale = HeatScale::of(&maps);
    let models = ctx.pal.order(maps.keys().cloned());
    let panels = models
        .iter()
        .map(|m| {
            let (layer, cells) = &maps[m];
            map_panel(m, *layer, cells, &scale)
        })
        .collect();
    let (title, label) = scale.labels();
    let mut f = Figure::new(FIG, title, panels);
    f.panel_size = (400, 390);
    f.colorbar = Some(ColorBar {
        label,
        range: (scale.lo, scale.hi),
    });
    Ok(f)
}

/// Each model's map: its layer (the first in heatmap.csv) and cells.
type Maps = BTreeMap<String, (Option<i64>, Cells)>;

/// The map of each model in heatmap.csv, with notes on the rows left out; a model with
/// no finite weight has none.
fn read_maps(ctx: &mut Ctx, fig: &str) -> std::result::Result<Maps, FigureError> {
    let t = ctx
        .res
        .get("heatmap")
        .ok_or(FigureError::no_table("heatmap"))?;
    let c = Cols::new(t, "heatmap.csv");
    let (model, query, key, value) = (
        c.text("model")?,
        c.int("query")?,
        c.int("key")?,
        c.num("value")?,
    );
    let layer = c.int_or_empty("layer");
    let mut maps: Maps = BTreeMap::new();
    let mut left_out = LeftOut::default();
    for i in 0..t.height() {
        let (Some(m), Some(q), Some(k)) = (&model[i], query[i], key[i]) else {
            continue;
        };
        if !(0..MAX_HEATMAP_POSITION).contains(&q) || !(0..MAX_HEATMAP_POSITION).contains(&k) {
            left_out.outside += 1;
            continue;
        }
        let e = maps
            .entry(m.clone())
            .or_insert_with(|| (layer[i], BTreeMap::new()));
        if e.0 != layer[i] {
            left_out.other_layer += 1;
            continue;
        }
        match value[i] {
            Some(v) if v.is_finite() => {
                e.1.insert((q, k), v);
            }
            _ => left_out.nan += 1,
        }
    }
    left_out.note(ctx, fig);
    maps.retain(|_, (_, cells)| !cells.is_empty());
    if maps.is_empty() {
        return Err(FigureError::no_rows("heatmap.csv", "finite weights"));
    }
    Ok(maps)
}

/// The heatmap rows left out: non-finite weights (`nan`), positions past
/// [`MAX_HEATMAP_POSITION`] (`outside`), rows of a second layer (`other_layer`).
#[derive(Debug, Clone, Copy, Default)]
struct LeftOut {
    nan: usize,
    outside: usize,
    other_layer: usize,
}

impl LeftOut {
    /// A note on `fig` for each kind of row left out.
    fn note(self, ctx: &mut Ctx, fig: &str) {
        let LeftOut {
            nan,
            outside,
            other_layer: other,
        } = self;
        if nan > 0 {
            ctx.note(fig, format!("{nan} non-finite weights left blank"));
        }
        if outside > 0 {
            ctx.note(
                fig,
                format!(
                    "{outside} rows with a position outside 0..{MAX_HEATMAP_POSITION} not drawn"
                ),
            );
        }
        if other > 0 {
            ctx.note(
                fig,
                format!("{other} rows of a second layer not drawn (one layer per model)"),
            );
        }
    }
}

/// Fig. 9's colour scale `lo..hi` over the visible cells (k <= q) of every map, and
/// their largest weight `max`.
struct HeatScale {
    lo: f64,
    hi: f64,
    max: f64,
}

impl HeatScale {
    /// The scale of `maps`. Query 0 sees only itself (weight 1 under softmax) and the
    /// first rows few keys: a linear scale up to their weights leaves every later cell
    /// dark. Colours stop at the CLIP_QUANTILE of the visible cells; the cells above it
    /// share the top colour.
    fn of(maps: &Maps) -> Self {
        let mut visible: Vec<f64> = maps
            .values()
            .flat_map(|(_, cells)| cells.iter().filter(|((q, k), _)| k <= q).map(|(_, v)| *v))
            .collect();
        visible.sort_by(f64::total_cmp);
        let lo = visible.first().copied().unwrap_or(0.0).min(0.0);
        let max = visible.last().copied().unwrap_or(1.0);
        let mut hi = quantile_sorted(&visible, CLIP_QUANTILE);
        if hi.is_nan() || hi <= lo {
            hi = if max > lo { max } else { lo + 1.0 };
        }
        HeatScale { lo, hi, max }
    }

    /// The colour of weight `v`; weights above `hi` share the top colour.
    fn color(&self, v: f64) -> RGBColor {
        viridis((v.min(self.hi) - self.lo) / (self.hi - self.lo))
    }

    /// The figure title and colour bar label, which say where colours are clipped.
    fn labels(&self) -> (String, String) {
        if self.hi < self.max {
            (
                format!(
                    "Fig. 9: mean attention map of one layer (grey: masked j > i; colours clipped at {}, the {}th percentile, max {})",
                    fmt3(self.hi),
                    (CLIP_QUANTILE * 100.0).round(),
                    fmt3(self.max)
                ),
                format!("attention weight aᵢⱼ (≥ {} at the top)", fmt3(self.hi)),
            )
        } else {
            (
                "Fig. 9: mean attention map of one layer (grey: masked keys j > i)".to_string(),
                "attention weight aᵢⱼ".to_string(),
            )
        }
    }
}

/// One model's map, query 0 at the top: masked keys (j > i) grey, cells without a value
/// blank.
fn map_panel(m: &str, layer: Option<i64>, cells: &Cells, scale: &HeatScale) -> Panel {
    let n = cells.keys().map(|&(q, k)| q.max(k)).max().unwrap_or(0) + 1;
    let mut drawn = Vec::new();
    for q in 0..n {
        for k in 0..n {
            let color = match cells.get(&(q, k)) {
                _ if k > q => MISSING,
                Some(v) => scale.color(*v),
                None => continue,
            };
            drawn.push((cell(k, q), color));
        }
    }
    let mut y = Axis::integer("query position i", (-0.5, n as f64 - 0.5));
    y.reversed = true;
    let layer = layer.map_or(String::new(), |l| format!(", layer {l}"));
    Panel {
        title: format!("{m}{layer}"),
        x: Axis::integer("key position j", (-0.5, n as f64 - 0.5)),
        y,
        marks: vec![Mark::Cells { cells: drawn }],
        grid: false,
    }
}
