//! Gradient-norm statistics over a step window (paper Table 4): mean, standard
//! deviation, variance and coefficient of variation (std / mean), with ddof 1 (sample)
//! by default or 0 (population).

use serde::Serialize;

use super::cols;
use super::runs::RunSeries;
use super::window::StepWindow;
use super::{num, Quality};
use asa_core::error::{Error, Result};
use asa_core::robust::moments;
use asa_tables::{schema, Table};

/// One row of `grad_stats` (SPEC section 6), plus data-quality columns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GradStatsRow {
    /// Run label.
    pub run: String,
    /// Metric (`grad_norm`).
    pub metric: String,
    /// Column or tag read.
    pub source: String,
    /// First step of the window; `None`: open.
    pub step_start: Option<i64>,
    /// End of the window, exclusive; `None`: open.
    pub step_end: Option<i64>,
    /// Finite values used.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Standard deviation (ddof as below).
    pub std: f64,
    /// Variance, sum of squares / (n - ddof).
    pub var: f64,
    /// Coefficient of variation, std / mean.
    pub cv: f64,
    /// Delta degrees of freedom.
    pub ddof: u32,
    /// Steps excluded: missing + NaN + inf.
    pub n_excluded: usize,
    /// Counts behind `n_excluded`, and overwritten duplicates.
    #[serde(flatten)]
    pub quality: Quality,
    /// First and last step used.
    pub first_step: Option<i64>,
    /// Last step used.
    pub last_step: Option<i64>,
}

/// Table-4 statistics of one run's series over `window`.
pub fn grad_stats(rs: &RunSeries, window: &StepWindow, ddof: u32) -> Result<GradStatsRow> {
    let sample = rs.sample(window)?;
    let m = moments(&sample.values, ddof).ok_or_else(|| {
        Error::training_log(
            &rs.path,
            format!(
                "only {} finite value(s) of `{}` (run {}) in {}; ddof {ddof} needs at least {}",
                sample.values.len(),
                rs.series.source,
                rs.run,
                window.describe(),
                ddof + 1
            ),
        )
    })?;
    Ok(GradStatsRow {
        run: rs.run.clone(),
        metric: rs.series.metric.clone(),
        source: rs.series.source.clone(),
        step_start: window.start,
        step_end: window.end_exclusive(),
        n: m.n,
        mean: m.mean,
        std: m.std,
        var: m.var,
        cv: m.cv,
        ddof,
        n_excluded: sample.quality.n_excluded(),
        quality: sample.quality,
        first_step: sample.steps.first().copied(),
        last_step: sample.steps.last().copied(),
    })
}

/// The `grad_stats` table.
pub fn table(rows: &[GradStatsRow]) -> Table {
    let c = |n: usize| Some(n as i64);
    schema::GRAD_STATS.build(vec![
        ("run", cols::text(rows, |r| r.run.clone())),
        ("metric", cols::text(rows, |r| r.metric.clone())),
        ("step_start", cols::int(rows, |r| r.step_start)),
        ("step_end", cols::int(rows, |r| r.step_end)),
        ("n", cols::int(rows, |r| c(r.n))),
        ("mean", cols::float(rows, |r| r.mean)),
        ("std", cols::float(rows, |r| r.std)),
        ("var", cols::float(rows, |r| r.var)),
        ("cv", cols::float(rows, |r| r.cv)),
        ("ddof", cols::int(rows, |r| Some(r.ddof as i64))),
        ("n_excluded", cols::int(rows, |r| c(r.n_excluded))),
        ("n_missing", cols::int(rows, |r| c(r.quality.n_missing))),
        ("n_nan", cols::int(rows, |r| c(r.quality.n_nan))),
        ("n_inf", cols::int(rows, |r| c(r.quality.n_inf))),
        ("n_duplicate", cols::int(rows, |r| c(r.quality.n_duplicate))),
        ("source", cols::text(rows, |r| r.source.clone())),
        ("first_step", cols::int(rows, |r| r.first_step)),
        ("last_step", cols::int(rows, |r| r.last_step)),
    ])
}

/// Table 4 as Markdown: one row per run, Mean | Std | Var | CV.
pub fn markdown(rows: &[GradStatsRow], window: &StepWindow, ddof: u32) -> String {
    let metric = rows.first().map_or("grad_norm", |r| r.metric.as_str());
    let mut s = format!(
        "**Table 4.** Statistics of `{metric}` over {} (ddof {ddof}).\n\n\
         | Method | Mean | Std | Var | CV | n |\n|---|---:|---:|---:|---:|---:|\n",
        window.describe()
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.run,
            num(r.mean),
            num(r.std),
            num(r.var),
            num(r.cv),
            r.n
        ));
    }
    let excluded: Vec<String> = rows
        .iter()
        .filter(|r| r.n_excluded > 0)
        .map(|r| {
            let q = r.quality;
            format!(
                "{}: {} ({} missing, {} NaN, {} inf)",
                r.run, r.n_excluded, q.n_missing, q.n_nan, q.n_inf
            )
        })
        .collect();
    if !excluded.is_empty() {
        s.push_str(&format!("\nExcluded steps: {}.\n", excluded.join("; ")));
    }
    s
}
