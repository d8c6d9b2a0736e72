//! Loss and gradient-norm curves (paper Figs. 7, 8, 10) as tidy points, with optional
//! debiased EMA smoothing as TensorBoard and W&B draw it: with weight w,
//! last_t = w * last_{t-1} + (1 - w) * x_t (last_0 = 0) and smoothed_t = last_t / (1 - w^t).
//! The EMA runs over every finite point of the run and is then cut to the window, so a
//! late-phase window (7k..9k) shows the same smoothed curve as the full run, zoomed.

use serde::Serialize;

use super::runs::RunSeries;
use super::window::StepWindow;
use super::{cols, Quality};
use asa_core::error::{Error, Result};
use asa_tables::{schema, Table};

/// One point: a row of `curves` (SPEC section 6).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// Run label.
    pub run: String,
    /// Metric (`loss`, `grad_norm`, ...).
    pub metric: String,
    /// Training step.
    pub step: i64,
    /// Logged value.
    pub value: f64,
    /// Debiased EMA (equal to `value` without smoothing).
    pub smoothed: f64,
}

/// Per run and metric: what the curve holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurveSummary {
    /// Run label.
    pub run: String,
    /// Metric.
    pub metric: String,
    /// Column or tag read.
    pub source: String,
    /// Points in the window.
    pub points: usize,
    /// First step in the window.
    pub first_step: Option<i64>,
    /// Last step in the window.
    pub last_step: Option<i64>,
    /// Value at the last step.
    pub last_value: f64,
    /// Smoothed value at the last step.
    pub last_smoothed: f64,
    /// Smallest value in the window.
    pub min: f64,
    /// Largest value in the window.
    pub max: f64,
    /// EMA weight, if smoothing.
    pub ema: Option<f64>,
    /// Steps excluded in the window: missing + NaN + inf.
    pub n_excluded: usize,
    /// Counts behind `n_excluded`, and overwritten duplicates.
    #[serde(flatten)]
    pub quality: Quality,
}

/// Debiased exponential moving average with weight `w` in [0, 1) (TensorBoard's
/// smoothing slider).
pub fn ema_debiased(values: &[f64], w: f64) -> Vec<f64> {
    let mut last = 0.0;
    let mut decay = 1.0; // w^t
    values
        .iter()
        .map(|&x| {
            last = w * last + (1.0 - w) * x;
            decay *= w;
            last / (1.0 - decay)
        })
        .collect()
}

/// The metrics `curves` reads: those `named`, each once, or by default `loss` and
/// `grad_norm`; `true` when they are the defaults, which a log may lack (skipped with a
/// warning, where a named metric missing is an error).
pub fn requested_metrics(named: &[String]) -> (Vec<String>, bool) {
    if named.is_empty() {
        return (vec!["loss".to_string(), "grad_norm".to_string()], true);
    }
    // a metric named twice is read once (it would be two runs of one label)
    let mut unique: Vec<String> = Vec::new();
    for m in named {
        if !unique.contains(m) {
            unique.push(m.clone());
        }
    }
    (unique, false)
}

/// Refuses an EMA weight outside [0, 1).
pub fn check_ema(ema: Option<f64>) -> Result<()> {
    match ema {
        Some(w) if !(0.0..1.0).contains(&w) => Err(Error::option(
            "--ema",
            format!("takes a smoothing weight in [0, 1), e.g. 0.9; got {w}"),
        )),
        _ => Ok(()),
    }
}

/// The curve of one run's series: points in `window`, smoothed with `ema` if given.
pub fn curve(
    rs: &RunSeries,
    window: &StepWindow,
    ema: Option<f64>,
) -> Result<(Vec<CurvePoint>, CurveSummary)> {
    let in_window = rs.sample(window)?;
    let all = rs.series.sample(&StepWindow::ALL);
    let smoothed = match ema {
        Some(w) => ema_debiased(&all.values, w),
        None => all.values.clone(),
    };
    let points: Vec<CurvePoint> = all
        .steps
        .iter()
        .zip(&all.values)
        .zip(&smoothed)
        .filter(|((&step, _), _)| window.contains(step))
        .map(|((&step, &value), &smoothed)| CurvePoint {
            run: rs.run.clone(),
            metric: rs.series.metric.clone(),
            step,
            value,
            smoothed,
        })
        .collect();
    let last = points.last();
    let summary = CurveSummary {
        run: rs.run.clone(),
        metric: rs.series.metric.clone(),
        source: rs.series.source.clone(),
        points: points.len(),
        first_step: points.first().map(|p| p.step),
        last_step: last.map(|p| p.step),
        last_value: last.map_or(f64::NAN, |p| p.value),
        last_smoothed: last.map_or(f64::NAN, |p| p.smoothed),
        min: in_window
            .values
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min),
        max: in_window
            .values
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max),
        ema,
        n_excluded: in_window.quality.n_excluded(),
        quality: in_window.quality,
    };
    Ok((points, summary))
}

/// The `curves` table.
pub fn table(points: &[CurvePoint]) -> Table {
    schema::CURVES.build(vec![
        ("run", cols::text(points, |p| p.run.clone())),
        ("metric", cols::text(points, |p| p.metric.clone())),
        ("step", cols::int(points, |p| Some(p.step))),
        ("value", cols::float(points, |p| p.value)),
        ("smoothed", cols::float(points, |p| p.smoothed)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ema_by_hand() {
        // w = 0.5, x = [2, 4]: last_1 = 0.5 * 2 = 1, / (1 - 0.5) = 2;
        // last_2 = 0.5 * 1 + 0.5 * 4 = 2.5, / (1 - 0.25) = 10 / 3.
        let s = ema_debiased(&[2.0, 4.0], 0.5);
        assert_eq!(s[0], 2.0);
        assert!((s[1] - 10.0 / 3.0).abs() < 1e-15);
        assert_eq!(ema_debiased(&[1.0, 5.0], 0.0), vec![1.0, 5.0]);
    }
}
