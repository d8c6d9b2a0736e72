//! What the training-curve figures (Figs. 7, 8, 10) share beyond drawing lines: which loss
//! column they plot (a KD loss when the logs have one), per-size panels for runs labelled
//! `SIZE/METHOD` (the paper's "(a) 0.5B (b) 1B (c) 3B"), smoothing that does not lag (a
//! centred mean) or the exported debiased EMA, and a log-scaled y axis.

use std::collections::BTreeMap;

use super::data::Cols;
use super::{Ctx, FigureError};

/// (step, value, smoothed) per run of one metric of `curves.csv`.
pub type Curves = BTreeMap<String, Vec<(f64, f64, f64)>>;

/// The loss metric of Figs. 7 and 10: `--metric`, else a KD loss (a name holding `kd`)
/// when the logs have one, else the training loss; with why, for the figure's note, when it
/// is not the plain training loss.
pub fn loss_metric(ctx: &Ctx) -> Result<(String, Option<String>), FigureError> {
    let t = ctx
        .res
        .get("curves")
        .ok_or(FigureError::no_table("curves"))?;
    let c = Cols::new(t, "curves.csv");
    let mut names: Vec<String> = Vec::new();
    for m in c.text("metric")?.into_iter().flatten() {
        if !names.contains(&m) {
            names.push(m);
        }
    }
    if let Some(want) = &ctx.opts.loss_metric {
        return match names.contains(want) {
            true => Ok((want.clone(), Some("--metric".into()))),
            false => Err(FigureError::NoMetric {
                file: "curves.csv",
                metric: want.clone(),
                has: names,
            }),
        };
    }
    let leaf = |n: &str| n.rsplit('/').next().unwrap_or(n).to_lowercase();
    if let Some(kd) = names.iter().find(|n| leaf(n).contains("kd")) {
        return Ok((
            kd.clone(),
            Some("a KD loss, preferred over the training loss; --metric chooses".into()),
        ));
    }
    match names.iter().find(|n| is_loss(n)) {
        Some(loss) => Ok((loss.clone(), None)),
        None => Err(FigureError::NoLossMetric {
            file: "curves.csv",
            has: names,
        }),
    }
}

/// `loss`, `train/loss`, `train_loss`.
pub fn is_loss(name: &str) -> bool {
    let last = name.rsplit('/').next().unwrap_or(name).to_lowercase();
    last.strip_prefix("train_").unwrap_or(&last) == "loss"
}

/// The panels of a training-curve figure: one per size, "(a) 0.5B", when every run is
/// labelled `SIZE/METHOD`, sizes smallest first; else one untitled panel with every run.
pub fn size_panels(runs: &[String]) -> Vec<(String, Vec<String>)> {
    let split: Option<Vec<(&str, &str)>> = runs
        .iter()
        .map(|r| {
            r.split_once('/')
                .filter(|(s, m)| !s.is_empty() && !m.is_empty())
        })
        .collect();
    let Some(split) = split.filter(|s| !s.is_empty()) else {
        return vec![(String::new(), runs.to_vec())];
    };
    let sizes = crate::paper::layout::size_order(split.iter().map(|(s, _)| s.to_string()));
    sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let letter = (b'a' + (i % 26) as u8) as char;
            let members = runs
                .iter()
                .zip(&split)
                .filter(|(_, (s, _))| s == size)
                .map(|(r, _)| r.clone())
                .collect();
            (format!("({letter}) {size}"), members)
        })
        .collect()
}

/// The method part of a `SIZE/METHOD` label (the label itself otherwise): legend text.
pub fn method_of(run: &str) -> &str {
    run.split_once('/').map_or(run, |(_, m)| m)
}

/// Sets each run's smoothed values: a centred mean over `--smooth N` logged steps (no lag),
/// else the exported debiased EMA; returns the legend line saying which, or `None` when
/// nothing is smoothed.
pub fn smooth(ctx: &Ctx, data: &mut Curves) -> Option<String> {
    if let Some(n) = ctx.opts.smooth.filter(|&n| n > 1) {
        let half = n / 2;
        for pts in data.values_mut() {
            let raw: Vec<f64> = pts.iter().map(|p| p.1).collect();
            for (i, p) in pts.iter_mut().enumerate() {
                let window = &raw[i.saturating_sub(half)..(i + half + 1).min(raw.len())];
                let finite: Vec<f64> = window.iter().copied().filter(|v| v.is_finite()).collect();
                p.2 = match finite.is_empty() {
                    true => f64::NAN,
                    false => finite.iter().sum::<f64>() / finite.len() as f64,
                };
            }
        }
        return Some(format!(
            "faint: raw, solid: centred mean of {} steps",
            2 * half + 1
        ));
    }
    let ema = data
        .values()
        .flatten()
        .any(|p| p.2.is_finite() && p.2.to_bits() != p.1.to_bits());
    ema.then(|| "faint: raw, solid: debiased EMA (lags)".to_string())
}

/// log10 of every value (values <= 0 become gaps), for `--log-y`.
pub fn log10_values(data: &mut Curves) {
    let log = |v: f64| if v > 0.0 { v.log10() } else { f64::NAN };
    for pts in data.values_mut() {
        for p in pts.iter_mut() {
            p.1 = log(p.1);
            p.2 = log(p.2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_make_lettered_panels_in_size_order() {
        let runs: Vec<String> = ["3B/asa", "0.5B/base", "3B/base", "0.5B/asa"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let panels = size_panels(&runs);
        assert_eq!(
            panels[0],
            (
                "(a) 0.5B".into(),
                vec!["0.5B/base".into(), "0.5B/asa".into()]
            )
        );
        assert_eq!(panels[1].0, "(b) 3B");
        let plain = vec!["base".to_string(), "1B/asa".to_string()];
        assert_eq!(size_panels(&plain), vec![(String::new(), plain.clone())]);
        assert_eq!(method_of("1B/asa"), "asa");
        assert!(is_loss("train/loss") && !is_loss("kd_loss"));
    }
}
