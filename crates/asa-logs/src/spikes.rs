//! Gradient-norm spikes (paper Table 5): tau = median(g) + k * MAD(g), with
//! MAD = mad_scale * median(|g - median(g)|) (mad_scale 1 by default; 1.4826 makes it
//! consistent with the standard deviation of a normal), median and MAD over the step
//! window; a spike is a step with g > tau.

use serde::Serialize;

use super::runs::RunSeries;
use super::window::StepWindow;
use super::{cols, num, Quality};
use asa_core::error::{Error, Result};
use asa_core::robust::{mad, median};
use asa_tables::{schema, Table};

/// One row of `spikes` (SPEC section 6): one run and one k.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpikeRow {
    /// Run label.
    pub run: String,
    /// Metric (`grad_norm`).
    pub metric: String,
    /// Column or tag read.
    pub source: String,
    /// Threshold multiplier.
    pub k: f64,
    /// Scale applied to the raw MAD.
    pub mad_scale: f64,
    /// Median of the window's finite values.
    pub median: f64,
    /// The MAD used in tau: mad_scale * mad_raw.
    pub mad: f64,
    /// median(|g - median(g)|), unscaled.
    pub mad_raw: f64,
    /// median + k * mad.
    pub tau: f64,
    /// Steps with g > tau.
    pub count: usize,
    /// Finite values in the window.
    pub n: usize,
    /// First step of the window; `None`: open.
    pub step_start: Option<i64>,
    /// End of the window, exclusive; `None`: open.
    pub step_end: Option<i64>,
    /// Steps excluded: missing + NaN + inf.
    pub n_excluded: usize,
    /// Counts behind `n_excluded`, and overwritten duplicates.
    #[serde(flatten)]
    pub quality: Quality,
}

/// One spike: a row of `spike_steps`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpikeStep {
    /// Run label.
    pub run: String,
    /// Metric.
    pub metric: String,
    /// The k whose threshold it exceeds.
    pub k: f64,
    /// Training step.
    pub step: i64,
    /// The value there.
    pub value: f64,
}

/// Refuses thresholds the spike counts cannot use: negative or non-finite k, a MAD scale
/// that is not a positive number.
pub fn check_options(ks: &[f64], mad_scale: f64) -> Result<()> {
    if ks.is_empty() || ks.iter().any(|k| !k.is_finite() || *k < 0.0) {
        return Err(Error::option(
            "--k",
            "takes non-negative numbers, e.g. --k 6,9",
        ));
    }
    if !(mad_scale.is_finite() && mad_scale > 0.0) {
        return Err(Error::option(
            "--mad-scale",
            format!("must be a positive number, got {mad_scale}"),
        ));
    }
    Ok(())
}

/// Spike counts for every k, and the spike steps, of one run over `window`.
pub fn spikes(
    rs: &RunSeries,
    window: &StepWindow,
    ks: &[f64],
    mad_scale: f64,
) -> Result<(Vec<SpikeRow>, Vec<SpikeStep>)> {
    let sample = rs.sample(window)?;
    let mut scratch = sample.values.clone();
    let med = median(&mut scratch);
    let mad_raw = mad(&sample.values, med);
    let mut rows = Vec::with_capacity(ks.len());
    let mut steps = Vec::new();
    for &k in ks {
        let tau = med + k * (mad_scale * mad_raw);
        let before = steps.len();
        for (&step, &value) in sample.steps.iter().zip(&sample.values) {
            if value > tau {
                steps.push(SpikeStep {
                    run: rs.run.clone(),
                    metric: rs.series.metric.clone(),
                    k,
                    step,
                    value,
                });
            }
        }
        rows.push(SpikeRow {
            run: rs.run.clone(),
            metric: rs.series.metric.clone(),
            source: rs.series.source.clone(),
            k,
            mad_scale,
            median: med,
            mad: mad_scale * mad_raw,
            mad_raw,
            tau,
            count: steps.len() - before,
            n: sample.values.len(),
            step_start: window.start,
            step_end: window.end_exclusive(),
            n_excluded: sample.quality.n_excluded(),
            quality: sample.quality,
        });
    }
    Ok((rows, steps))
}

/// The `spikes` table.
pub fn table(rows: &[SpikeRow]) -> Table {
    let c = |n: usize| Some(n as i64);
    schema::SPIKES.build(vec![
        ("run", cols::text(rows, |r| r.run.clone())),
        ("metric", cols::text(rows, |r| r.metric.clone())),
        ("k", cols::float(rows, |r| r.k)),
        ("mad_scale", cols::float(rows, |r| r.mad_scale)),
        ("median", cols::float(rows, |r| r.median)),
        ("mad", cols::float(rows, |r| r.mad)),
        ("tau", cols::float(rows, |r| r.tau)),
        ("count", cols::int(rows, |r| c(r.count))),
        ("mad_raw", cols::float(rows, |r| r.mad_raw)),
        ("n", cols::int(rows, |r| c(r.n))),
        ("step_start", cols::int(rows, |r| r.step_start)),
        ("step_end", cols::int(rows, |r| r.step_end)),
        ("n_excluded", cols::int(rows, |r| c(r.n_excluded))),
        ("n_missing", cols::int(rows, |r| c(r.quality.n_missing))),
        ("n_nan", cols::int(rows, |r| c(r.quality.n_nan))),
        ("n_inf", cols::int(rows, |r| c(r.quality.n_inf))),
        ("n_duplicate", cols::int(rows, |r| c(r.quality.n_duplicate))),
        ("source", cols::text(rows, |r| r.source.clone())),
    ])
}

/// The `spike_steps` table.
pub fn steps_table(steps: &[SpikeStep]) -> Table {
    schema::SPIKE_STEPS.build(vec![
        ("run", cols::text(steps, |r| r.run.clone())),
        ("metric", cols::text(steps, |r| r.metric.clone())),
        ("k", cols::float(steps, |r| r.k)),
        ("step", cols::int(steps, |r| Some(r.step))),
        ("value", cols::float(steps, |r| r.value)),
    ])
}

/// `6`, `4.5`: k as written in headers.
fn k_label(k: f64) -> String {
    if k.fract() == 0.0 && k.abs() < 1e15 {
        format!("{}", k as i64)
    } else {
        format!("{k}")
    }
}

/// Table 5 as Markdown: one row per run, the spike count for each k, then median, MAD.
pub fn markdown(rows: &[SpikeRow], window: &StepWindow, ks: &[f64], mad_scale: f64) -> String {
    let metric = rows.first().map_or("grad_norm", |r| r.metric.as_str());
    let scale = if mad_scale == 1.0 {
        "MAD unscaled".to_string()
    } else {
        format!("MAD scaled by {mad_scale}")
    };
    let mut s = format!(
        "**Table 5.** Spikes of `{metric}` (steps with g > median + k * MAD) over {}, {scale}.\n\n| Method |",
        window.describe()
    );
    for &k in ks {
        s.push_str(&format!(" k = {} |", k_label(k)));
    }
    s.push_str(" Median | MAD | n |\n|---|");
    s.push_str(&"---:|".repeat(ks.len() + 3));
    s.push('\n');
    let mut runs: Vec<&str> = Vec::new();
    for r in rows {
        if !runs.contains(&r.run.as_str()) {
            runs.push(&r.run);
        }
    }
    for run in runs {
        let mine: Vec<&SpikeRow> = rows.iter().filter(|r| r.run == run).collect();
        s.push_str(&format!("| {run} |"));
        for &k in ks {
            let count = mine.iter().find(|r| r.k == k).map_or(0, |r| r.count);
            s.push_str(&format!(" {count} |"));
        }
        let first = mine[0];
        s.push_str(&format!(
            " {} | {} | {} |\n",
            num(first.median),
            num(first.mad),
            first.n
        ));
    }
    s
}
