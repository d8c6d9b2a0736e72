//! Attention mass by query-key distance band t = i - j, per layer (the extra figure
//! `distance_profile`, from distance_profile.csv).

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::data::Cols;
use super::scene::{fit_range, int_range, Axis, Dash, Figure, LegendEntry, Mark, Panel, Swatch};
use super::theme::viridis;
use super::{Built, Ctx, FigureError};

/// Sort key of a distance band: `first`, `0`, `1-10`, `10-100`, ... by lower bound.
fn band_key(band: &str) -> (i64, String) {
    if band == "first" {
        return (-1, band.into());
    }
    let lo = band
        .split('-')
        .next()
        .and_then(|s| s.trim().parse::<i64>().ok());
    (lo.unwrap_or(i64::MAX), band.into())
}

/// The legend text of a band; an upper edge past the longest window (`window`, from
/// run.json) is shown as the window length, the largest distance + 1 any window has.
fn band_label(band: &str, window: Option<i64>) -> String {
    match band {
        "first" => "first token (key 0)".into(),
        "0" => "t = 0 (itself)".into(),
        b => match b.split_once('-') {
            Some((lo, hi)) => {
                let hi = match (hi.trim().parse::<i64>(), window) {
                    (Ok(h), Some(w)) if h > w => w.to_string(),
                    _ => hi.to_string(),
                };
                format!("{lo} ≤ t < {hi}")
            }
            None => format!("t in {b}"),
        },
    }
}

/// One model's bands: (sort key, band) -> (layer, value) points.
type Bands = BTreeMap<(i64, String), Vec<(f64, f64)>>;

/// Attention mass per distance band t = i - j over layers, one panel per model, one line
/// per band (per-layer rows; per-head rows are not drawn). A band whose lower edge is at
/// or past the model's window length (run.json's `seq_len`) holds nothing and is not
/// drawn.
pub fn distance_profile(ctx: &mut Ctx) -> Built {
    const FIG: &str = "distance_profile";
    let data = read_bands(ctx, FIG)?;
    let mut bands: Vec<(i64, String)> = data.values().flat_map(|b| b.keys().cloned()).collect();
    bands.sort();
    bands.dedup();
    let all: Vec<f64> = data
        .values()
        .flat_map(|b| b.values().flatten().map(|p| p.1))
        .collect();
    let y_range = fit_range(all, true);
    let models = ctx.pal.order(data.keys().cloned());
    let panels = models
        .iter()
        .map(|m| band_panel(m, &data[m], &bands, y_range))
        .collect();
    let mut f = Figure::new(
        FIG,
        "Attention mass by query-key distance t = i − j (mean over queries)",
        panels,
    );
    let window = longest_window(ctx, &models);
    f.legend = bands
        .iter()
        .map(|b| LegendEntry {
            label: band_label(&b.1, window),
            color: band_color(&bands, b),
            swatch: Swatch::Line(Dash::Solid),
        })
        .collect();
    Ok(f)
}

/// Each model's per-layer points of distance_profile.csv by band, with notes on the rows
/// left out; a band that starts at or past the model's window length holds no pair
/// (t < seq_len) and is left out too.
fn read_bands(
    ctx: &mut Ctx,
    fig: &str,
) -> std::result::Result<BTreeMap<String, Bands>, FigureError> {
    let t = ctx
        .res
        .get("distance_profile")
        .ok_or(FigureError::no_table("distance_profile"))?;
    let c = Cols::new(t, "distance_profile.csv");
    let (model, layer, band, value) = (
        c.text("model")?,
        c.int("layer")?,
        c.text("band")?,
        c.num("value")?,
    );
    let head = c.int_or_empty("head");
    let mut data: BTreeMap<String, Bands> = BTreeMap::new();
    let (mut nan, mut past) = (0, BTreeMap::<String, i64>::new());
    for i in 0..t.height() {
        let (Some(m), Some(l), Some(b)) = (&model[i], layer[i], &band[i]) else {
            continue;
        };
        if head[i].is_some() {
            continue;
        }
        let key = band_key(b);
        if let Some(&n) = ctx.res.seq_lens.get(m) {
            if key.0 >= n {
                past.insert(b.clone(), n);
                continue;
            }
        }
        match value[i] {
            Some(v) if v.is_finite() => data
                .entry(m.clone())
                .or_default()
                .entry(key)
                .or_default()
                .push((l as f64, v)),
            _ => nan += 1,
        }
    }
    if nan > 0 {
        ctx.note(fig, format!("{nan} non-finite values left out"));
    }
    for (band, n) in past {
        ctx.note(
            fig,
            format!("band {band} not drawn: it starts at or past the window length {n}"),
        );
    }
    if data.is_empty() {
        return Err(FigureError::no_rows(
            "distance_profile.csv",
            "finite per-layer rows",
        ));
    }
    Ok(data)
}

/// The colour of band `b` of all `bands` (sorted): viridis from dark (the first) to
/// light.
fn band_color(bands: &[(i64, String)], b: &(i64, String)) -> RGBColor {
    let i = bands.iter().position(|x| x == b).unwrap_or(0);
    viridis(0.9 * i as f64 / (bands.len().max(2) - 1) as f64)
}

/// One model's panel: a line per band over layers.
fn band_panel(m: &str, data: &Bands, bands: &[(i64, String)], y_range: (f64, f64)) -> Panel {
    let mut xs = Vec::new();
    let marks = data
        .iter()
        .map(|(b, pts)| {
            let mut pts = pts.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            xs.extend(pts.iter().map(|p| p.0));
            Mark::line(pts, band_color(bands, b))
        })
        .collect();
    Panel {
        title: m.to_string(),
        x: Axis::integer("layer", int_range(xs)),
        y: Axis::new("attention mass in band", y_range),
        marks,
        grid: true,
    }
}

/// The longest window length (run.json's `seq_len`) of `models` when every model's is
/// known: no band label then reaches past it.
fn longest_window(ctx: &Ctx, models: &[String]) -> Option<i64> {
    models
        .iter()
        .map(|m| ctx.res.seq_lens.get(m).copied())
        .collect::<Option<Vec<i64>>>()
        .and_then(|w| w.into_iter().max())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_band_closes_at_the_window() {
        assert_eq!(band_label("100-1000", Some(128)), "100 ≤ t < 128");
        assert_eq!(band_label("10-100", Some(128)), "10 ≤ t < 100");
        assert_eq!(band_label("100-1000", None), "100 ≤ t < 1000");
    }

    #[test]
    fn bands_sort_by_distance() {
        let mut b = [
            band_key("10-100"),
            band_key("0"),
            band_key("first"),
            band_key("1-10"),
        ];
        b.sort();
        let names: Vec<&str> = b.iter().map(|k| k.1.as_str()).collect();
        assert_eq!(names, ["first", "0", "1-10", "10-100"]);
    }
}
