//! Bar charts: one query's attention over keys with its sink mass (Fig. 1) and the
//! per-query weight-sum histograms (Fig. 3).

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::data::{attention_rows, Cols, Results};
use super::lines::model_legend;
use super::scene::{fit_range, Axis, Dash, Figure, LegendEntry, Mark, Panel, Swatch};
use super::theme::{Method, FIRST_TOKEN, INK, MUTED};
use super::{Built, Ctx, FigureError};

/// One model's profile: (layer, query, [(key, value)], sink mass).
struct Profile {
    layer: i64,
    query: i64,
    keys: Vec<(i64, f64)>,
    sink: Option<f64>,
}

/// Fig. 1: a_ij over keys j for one query i of one layer, one panel per model, key 0
/// (the first token) in black; the sink mass of sink and off_by_one models (the share
/// that goes to no token) is its own grey bar left of key 0, and other models have no
/// sink slot. All panels share the y axis.
pub fn fig1_query_profile(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig1_query_profile";
    let profiles = read_profiles(ctx, FIG)?;
    let sinks = sink_models(ctx, &profiles);
    let y_range = profile_y_range(&profiles, &sinks);
    let models = ctx.pal.order(profiles.keys().cloned());
    let panels = models
        .iter()
        .map(|m| profile_panel(m, &profiles[m], ctx.pal.color(m), sinks[m], y_range))
        .collect();
    let mut f = Figure::new(
        FIG,
        "Fig. 1: attention of one query over key positions",
        panels,
    );
    f.legend = fig1_legend(ctx, &models, sinks.values().any(|&s| s));
    Ok(f)
}

/// The profile of query_profile.csv's first (layer, query) of each model, with notes on
/// the rows left out; a model with no finite weight has none.
fn read_profiles(
    ctx: &mut Ctx,
    fig: &str,
) -> std::result::Result<BTreeMap<String, Profile>, FigureError> {
    let t = ctx
        .res
        .get("query_profile")
        .ok_or(FigureError::no_table("query_profile"))?;
    let c = Cols::new(t, "query_profile.csv");
    let (model, key, value) = (c.text("model")?, c.int("key")?, c.num("value")?);
    let (layer, query, sink) = (
        c.int_or_empty("layer"),
        c.int_or_empty("query"),
        c.num_or_empty("sink_mass"),
    );
    let mut profiles: BTreeMap<String, Profile> = BTreeMap::new();
    let mut nan = 0;
    let mut other_layers = 0;
    for i in 0..t.height() {
        let (Some(m), Some(k)) = (&model[i], key[i]) else {
            continue;
        };
        let (l, q) = (layer[i].unwrap_or(0), query[i].unwrap_or(0));
        let p = profiles.entry(m.clone()).or_insert_with(|| Profile {
            layer: l,
            query: q,
            keys: Vec::new(),
            sink: None,
        });
        if (l, q) != (p.layer, p.query) {
            other_layers += 1;
            continue;
        }
        match value[i] {
            Some(v) if v.is_finite() => p.keys.push((k, v)),
            _ => nan += 1,
        }
        if p.sink.is_none() {
            p.sink = sink[i].filter(|s| s.is_finite());
        }
    }
    if nan > 0 {
        ctx.note(fig, format!("{nan} non-finite weights left out"));
    }
    if other_layers > 0 {
        ctx.note(
            fig,
            format!(
                "{other_layers} rows of other layers or queries not drawn (one profile per model)"
            ),
        );
    }
    profiles.retain(|_, p| !p.keys.is_empty());
    if profiles.is_empty() {
        return Err(FigureError::no_rows("query_profile.csv", "finite weights"));
    }
    Ok(profiles)
}

/// Whether each model gets a sink bar. Only sink and off-by-one models send mass to no
/// token (run.json's variant, else the label); a model of no known method has a sink
/// when its table gives it mass.
fn sink_models(ctx: &Ctx, profiles: &BTreeMap<String, Profile>) -> BTreeMap<String, bool> {
    profiles
        .iter()
        .map(|(m, p)| {
            let method = ctx.pal.method(m);
            let has =
                method.has_sink() || (method == Method::Other && p.sink.is_some_and(|s| s > 0.0));
            (m.clone(), has)
        })
        .collect()
}

/// The y range all panels share: every weight and every drawn sink mass, with room
/// above for the sink label.
fn profile_y_range(
    profiles: &BTreeMap<String, Profile>,
    sinks: &BTreeMap<String, bool>,
) -> (f64, f64) {
    let values = profiles.iter().flat_map(|(m, p)| {
        let sink = p.sink.filter(|_| sinks[m]);
        p.keys.iter().map(|k| k.1).chain(sink)
    });
    let (y0, y1) = fit_range(values, true);
    (y0, y1 + 0.08 * (y1 - y0))
}

/// One model's panel: its key bars and, when `has_sink`, the sink bar left of key 0.
fn profile_panel(
    m: &str,
    p: &Profile,
    color: RGBColor,
    has_sink: bool,
    y_range: (f64, f64),
) -> Panel {
    let last = p.keys.iter().map(|k| k.0).max().unwrap_or(0).max(0) as f64;
    let n = last + 1.0;
    let mut marks = key_bars(p, color);
    let mut lo = -0.5 - 0.05 * n;
    let mut title = format!("{m} (layer {}, query {}", p.layer, p.query);
    if has_sink {
        let (sink_marks, sink_lo) = sink_bar(p, n, y_range);
        marks.extend(sink_marks);
        lo = sink_lo;
        title.push_str(&format!(", sink {}", fmt3(p.sink.unwrap_or(0.0))));
    }
    title.push(')');
    let mut x = Axis::integer("key position j", (lo, last + 0.5 + 0.02 * n));
    x.hide_below = Some(-0.5);
    Panel {
        title,
        x,
        y: Axis::new("attention weight aᵢⱼ", y_range),
        marks,
        grid: true,
    }
}

/// A bar per key in the model's colour, key 0 in its own colour: the first token is
/// what a sink replaces.
fn key_bars(p: &Profile, color: RGBColor) -> Vec<Mark> {
    let half = 0.42;
    let bar = |&(k, v): &(i64, f64)| (k as f64 - half, 0.0, k as f64 + half, v);
    let (first, rest): (Vec<_>, Vec<_>) = p.keys.iter().partition(|k| k.0 == 0);
    vec![
        Mark::Rects {
            rects: rest.iter().copied().map(bar).collect(),
            color,
        },
        Mark::Rects {
            rects: first.iter().copied().map(bar).collect(),
            color: FIRST_TOKEN,
        },
    ]
}

/// The sink bar of a profile over `n` key positions, its label and the dotted line that
/// parts it from key 0, with the x axis' new left edge. The bar sits left of key 0, a
/// few keys wide so it stays visible, with room for its label.
fn sink_bar(p: &Profile, n: f64, y_range: (f64, f64)) -> (Vec<Mark>, f64) {
    let width = (n / 20.0).max(0.8);
    let gap = (n / 20.0).max(1.2);
    let sink_x = -0.5 - gap - width / 2.0;
    let lo = sink_x - width / 2.0 - (n / 20.0).max(1.0);
    let s = p.sink.unwrap_or(0.0);
    let marks = vec![
        Mark::Rects {
            rects: vec![(sink_x - width / 2.0, 0.0, sink_x + width / 2.0, s)],
            color: MUTED,
        },
        Mark::Text {
            x: sink_x,
            y: s.max(0.0) + 0.05 * (y_range.1 - y_range.0),
            text: if p.sink.is_some() { "sink" } else { "no value" }.into(),
            color: INK,
        },
        Mark::VLine {
            x: -0.5 - gap / 2.0,
            color: MUTED,
            dash: Dash::Dotted,
            width: 1.0,
        },
    ];
    (marks, lo)
}

/// Fig. 1's legend: the models, the first token and, when a panel has one, the sink.
fn fig1_legend(ctx: &Ctx, models: &[String], any_sink: bool) -> Vec<LegendEntry> {
    let mut legend = model_legend(ctx, models, Swatch::Patch);
    legend.push(LegendEntry {
        label: "first token (key 0)".into(),
        color: FIRST_TOKEN,
        swatch: Swatch::Patch,
    });
    if any_sink {
        legend.push(LegendEntry {
            label: "sink mass (to no token)".into(),
            color: MUTED,
            swatch: Swatch::Patch,
        });
    }
    legend
}

/// One model's histogram bins: (lo, hi, count).
type Bins = Vec<(f64, f64, f64)>;

/// A distribution's mean and median.
#[derive(Debug, Clone, Copy)]
struct MeanMedian {
    mean: f64,
    median: f64,
}

/// Mean and median from the bins (median by linear interpolation within its bin).
fn hist_stats(bins: &Bins) -> MeanMedian {
    let total: f64 = bins.iter().map(|b| b.2).sum();
    if total <= 0.0 {
        return MeanMedian {
            mean: f64::NAN,
            median: f64::NAN,
        };
    }
    let mean = bins.iter().map(|b| b.2 * (b.0 + b.1) / 2.0).sum::<f64>() / total;
    let mut seen = 0.0;
    for b in bins {
        if seen + b.2 >= total / 2.0 && b.2 > 0.0 {
            let frac = (total / 2.0 - seen) / b.2;
            let median = b.0 + frac * (b.1 - b.0);
            return MeanMedian { mean, median };
        }
        seen += b.2;
    }
    MeanMedian {
        mean,
        median: f64::NAN,
    }
}

/// Fig. 3: histogram of per-query weight sums W_i, one panel per model on one shared x
/// range, bars on the bin edges of weight_sum_hist.csv, with dashed mean and dotted
/// median lines.
///
/// Mean: the mean over layers of the per-layer `weight_sum` means in attention.csv (every
/// layer pools the same queries, so this is the pooled mean exactly), else from the bins.
/// Median: a pooled `p50` row (empty layer) when attention.csv has one, else interpolated
/// within the histogram bin that holds the middle query (exact to one bin width), clamped
/// to the range of the per-layer medians (the pooled median always lies in it; when the
/// layers agree, as for softmax where every W_i is 1, it is exact).
pub fn fig3_weight_sums(ctx: &mut Ctx) -> Built {
    const FIG: &str = "fig3_weight_sums";
    let mut hists = read_hists(ctx, FIG)?;
    let summary = WeightSumRows::read(ctx.res);
    let models = ctx.pal.order(hists.keys().cloned());
    // (model, mean, median) first: the panels share one x range, so they compare.
    let mut stats = Vec::new();
    for m in &models {
        let Some(bins) = hists.get_mut(m) else {
            continue; // the models are the keys of `hists`
        };
        bins.sort_by(|a, b| a.0.total_cmp(&b.0));
        stats.push((m, summary.mean_median(m, bins)));
    }
    let x_range = hist_x_range(&hists, &stats);
    let panels = stats
        .into_iter()
        .map(|(m, center)| hist_panel(m, &hists[m], ctx.pal.color(m), center, x_range))
        .collect();
    let mut f = Figure::new(FIG, "Fig. 3: per-query attention weight sums", panels);
    f.legend = fig3_legend(ctx, &models);
    Ok(f)
}

/// Each model's bins in weight_sum_hist.csv (edges ordered, counts at least 0), with a
/// note on the bins left out; a model whose bins are all empty has none.
fn read_hists(
    ctx: &mut Ctx,
    fig: &str,
) -> std::result::Result<BTreeMap<String, Bins>, FigureError> {
    let t = ctx
        .res
        .get("weight_sum_hist")
        .ok_or(FigureError::no_table("weight_sum_hist"))?;
    let c = Cols::new(t, "weight_sum_hist.csv");
    let (model, lo, hi, count) = (
        c.text("model")?,
        c.num("bin_lo")?,
        c.num("bin_hi")?,
        c.num("count")?,
    );
    let mut hists: BTreeMap<String, Bins> = BTreeMap::new();
    let mut bad = 0;
    for i in 0..t.height() {
        let Some(m) = &model[i] else { continue };
        match (lo[i], hi[i], count[i]) {
            (Some(a), Some(b), Some(n)) if a.is_finite() && b.is_finite() && n.is_finite() => hists
                .entry(m.clone())
                .or_default()
                .push((a.min(b), a.max(b), n.max(0.0))),
            _ => bad += 1,
        }
    }
    if bad > 0 {
        ctx.note(
            fig,
            format!("{bad} bins with a non-finite edge or count left out"),
        );
    }
    hists.retain(|_, b| b.iter().any(|b| b.2 > 0.0));
    if hists.is_empty() {
        return Err(FigureError::no_rows(
            "weight_sum_hist.csv",
            "non-empty bins",
        ));
    }
    Ok(hists)
}

/// The finite `weight_sum` summary rows of attention.csv (over heads) by model:
/// per-layer means and medians, and the pooled (no layer) mean and median if present.
#[derive(Default)]
struct WeightSumRows {
    layer_means: BTreeMap<String, Vec<f64>>,
    layer_medians: BTreeMap<String, Vec<f64>>,
    /// (model, `mean` or `p50`) -> value.
    pooled: BTreeMap<(String, String), f64>,
}

impl WeightSumRows {
    /// The rows of `res`; none when it has no attention table.
    fn read(res: &Results) -> Self {
        let mut rows = WeightSumRows::default();
        let Ok(attention) = attention_rows(res, "weight_sum") else {
            return rows;
        };
        for r in attention
            .iter()
            .filter(|r| r.head.is_none() && r.value.is_finite())
        {
            match (r.layer, r.stat.as_str()) {
                (Some(_), "mean") => rows
                    .layer_means
                    .entry(r.model.clone())
                    .or_default()
                    .push(r.value),
                (Some(_), "p50") => rows
                    .layer_medians
                    .entry(r.model.clone())
                    .or_default()
                    .push(r.value),
                (None, "mean" | "p50") => {
                    rows.pooled
                        .insert((r.model.clone(), r.stat.clone()), r.value);
                }
                _ => {}
            }
        }
        rows
    }

    /// Model `m`'s mean and median (see [`fig3_weight_sums`]) from these rows and its
    /// `bins`, sorted by lower edge.
    fn mean_median(&self, m: &str, bins: &Bins) -> MeanMedian {
        let MeanMedian {
            mean: h_mean,
            median: h_median,
        } = hist_stats(bins);
        let mean = self
            .pooled
            .get(&(m.to_string(), "mean".into()))
            .copied()
            .or_else(|| {
                self.layer_means
                    .get(m)
                    .map(|v| v.iter().sum::<f64>() / v.len() as f64)
            })
            .unwrap_or(h_mean);
        // The pooled median lies between the smallest and largest per-layer median.
        let h_median = match self.layer_medians.get(m) {
            Some(v) if !v.is_empty() => {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if h_median.is_finite() {
                    h_median.clamp(lo, hi)
                } else {
                    (lo + hi) / 2.0
                }
            }
            _ => h_median,
        };
        let median = self
            .pooled
            .get(&(m.to_string(), "p50".into()))
            .copied()
            .unwrap_or(h_median);
        MeanMedian { mean, median }
    }
}

/// The x range all panels share: the occupied bins (empty bins of a softmax model reach
/// ±0.5 past its sums of 1) and the mean and median lines.
fn hist_x_range(hists: &BTreeMap<String, Bins>, stats: &[(&String, MeanMedian)]) -> (f64, f64) {
    fit_range(
        hists
            .values()
            .flatten()
            .filter(|b| b.2 > 0.0)
            .flat_map(|b| [b.0, b.1])
            .chain(stats.iter().flat_map(|s| [s.1.mean, s.1.median])),
        false,
    )
}

/// One model's panel: its bars as shares of its queries, dashed mean and dotted median.
fn hist_panel(
    m: &str,
    bins: &Bins,
    color: RGBColor,
    center: MeanMedian,
    (xlo, xhi): (f64, f64),
) -> Panel {
    let MeanMedian { mean, median } = center;
    let rects = hist_bars(bins, (xhi - xlo) / 150.0);
    let top = rects.iter().map(|r| r.3).fold(0.0, f64::max);
    let marks = vec![
        Mark::Rects { rects, color },
        Mark::VLine {
            x: mean,
            color: INK,
            dash: Dash::Dashed,
            width: 1.8,
        },
        Mark::VLine {
            x: median,
            color: MUTED,
            dash: Dash::Dotted,
            width: 2.0,
        },
    ];
    Panel {
        title: format!("{m} (mean {}, median {})", fmt3(mean), fmt3(median)),
        x: Axis::new("per-query weight sum Wᵢ = Σⱼ aᵢⱼ", (xlo, xhi)),
        y: Axis::new("share of queries (%)", (0.0, (top * 1.1).max(1e-9))),
        marks,
        grid: true,
    }
}

/// A bar per occupied bin, as a percentage of all queries. Bars span bin_lo..bin_hi; one
/// narrower than `min_w` keeps its left edge, and a bin of zero width (every Wᵢ equal)
/// is a thin bar centred on its value.
fn hist_bars(bins: &Bins, min_w: f64) -> Vec<(f64, f64, f64, f64)> {
    let total: f64 = bins.iter().map(|b| b.2).sum();
    bins.iter()
        .filter(|b| b.2 > 0.0)
        .map(|b| {
            let (mut a, mut z) = (b.0, b.1);
            if z - a <= 0.0 {
                (a, z) = (a - min_w / 2.0, a + min_w / 2.0);
            } else if z - a < min_w {
                z = a + min_w;
            }
            (a, 0.0, z, 100.0 * b.2 / total)
        })
        .collect()
}

/// Fig. 3's legend: the models, then the mean and median lines.
fn fig3_legend(ctx: &Ctx, models: &[String]) -> Vec<LegendEntry> {
    let mut legend = model_legend(ctx, models, Swatch::Patch);
    legend.push(LegendEntry {
        label: "mean".into(),
        color: INK,
        swatch: Swatch::Line(Dash::Dashed),
    });
    legend.push(LegendEntry {
        label: "median".into(),
        color: MUTED,
        swatch: Swatch::Line(Dash::Dotted),
    });
    legend
}

/// Three significant decimals for captions; `n/a` for NaN.
pub(crate) fn fmt3(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.abs() >= 1000.0 || (v != 0.0 && v.abs() < 0.001) {
        format!("{v:.2e}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_interpolates_within_its_bin() {
        // 10 queries in [0, 1), 10 in [1, 2): the middle is the end of the first bin.
        let MeanMedian { mean, median } = hist_stats(&vec![(0.0, 1.0, 10.0), (1.0, 2.0, 10.0)]);
        assert_eq!(mean, 1.0); // (10 * 0.5 + 10 * 1.5) / 20
        assert_eq!(median, 1.0);
        // 30 in [0, 1), 10 in [1, 2): half (20) is 2/3 into the first bin.
        let median = hist_stats(&vec![(0.0, 1.0, 30.0), (1.0, 2.0, 10.0)]).median;
        assert!((median - 2.0 / 3.0).abs() < 1e-12);
    }
}
