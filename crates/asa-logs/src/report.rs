//! The log commands' work as library calls with typed options (`grad-stats`, `spikes` and
//! `curves` call these, and so does `demo`): read the runs, run the analysis, and the files
//! an output folder gets (the tables, their Markdown and `run_<table>.json`).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use super::curves::{self, CurvePoint, CurveSummary};
use super::grad::{self, GradStatsRow};
use super::spikes::{self, SpikeRow, SpikeStep};
use super::{load_runs, LogFormat, LogRequest, RunSeries, RunSpec, StepWindow};
use asa_core::error::{Error, Result};
use asa_tables::{Format, OutputDir, StagingWatch, Table};

/// The logs to read: each `label=path` or a path (see [`RunSpec::parse`]).
#[derive(Debug, Clone, Default)]
pub struct LogInputs {
    pub runs: Vec<String>,
    /// The step column or key (default: the first of the usual names).
    pub step_column: Option<String>,
}

/// Options of `grad-stats` (paper Table 4).
#[derive(Debug, Clone)]
pub struct GradStatsOptions {
    /// Metric column or tag.
    pub metric: String,
    /// Step window the statistics are taken over.
    pub steps: StepWindow,
    /// Delta degrees of freedom: 1 sample statistics, 0 population.
    pub ddof: u32,
}

/// Options of `spikes` (paper Table 5).
#[derive(Debug, Clone)]
pub struct SpikesOptions {
    /// Metric column or tag.
    pub metric: String,
    /// Step window (`None`: every step); median and MAD are taken over it.
    pub steps: Option<StepWindow>,
    /// Threshold multipliers: tau = median + k * MAD.
    pub k: Vec<f64>,
    /// MAD scale: 1 (unscaled, the paper's), 1.4826 (normal-consistent).
    pub mad_scale: f64,
}

/// Options of `curves` (paper Figs. 7, 8, 10).
#[derive(Debug, Clone, Default)]
pub struct CurvesOptions {
    /// Metrics (empty: loss and grad_norm, each skipped with a warning where a log lacks it).
    pub metrics: Vec<String>,
    /// Step window (`None`: every step).
    pub steps: Option<StepWindow>,
    /// Debiased EMA smoothing weight in [0, 1).
    pub ema: Option<f64>,
}

/// What a log analysis read and found; `warnings` (data-quality notes, logs that start
/// after the window) are for the caller to print or not.
#[derive(Debug)]
pub struct LogReport<R> {
    pub series: Vec<RunSeries>,
    pub warnings: Vec<String>,
    pub result: R,
}

/// `grad-stats`' rows, one per run.
#[derive(Debug)]
pub struct GradStats {
    pub options: GradStatsOptions,
    pub rows: Vec<GradStatsRow>,
}

/// `spikes`' rows (one per run and k) and the spike steps.
#[derive(Debug)]
pub struct Spikes {
    pub options: SpikesOptions,
    /// The window used (`options.steps` or every step).
    pub window: StepWindow,
    pub rows: Vec<SpikeRow>,
    pub steps: Vec<SpikeStep>,
}

/// `curves`' points and a summary per (run, metric).
#[derive(Debug)]
pub struct Curves {
    pub options: CurvesOptions,
    /// The metrics read (the defaults when none was named).
    pub metrics: Vec<String>,
    pub window: StepWindow,
    pub points: Vec<CurvePoint>,
    pub summary: Vec<CurveSummary>,
}

/// The files of an output folder: tables, extra text files and the run record.
pub struct LogFiles {
    pub tables: Vec<Table>,
    pub extra: Vec<(&'static str, String)>,
    pub record: serde_json::Value,
}

/// Reads the runs of `inputs` with `metrics` (`optional`: a log lacking one is skipped with
/// a warning).
fn load(
    inputs: &LogInputs,
    metrics: Vec<String>,
    optional: bool,
) -> Result<(Vec<RunSeries>, Vec<String>)> {
    let specs: Vec<RunSpec> = inputs.runs.iter().map(|a| RunSpec::parse(a)).collect();
    let request = LogRequest {
        metrics,
        step_column: inputs.step_column.clone(),
    };
    let loaded = load_runs(&specs, &request, optional)?;
    Ok((loaded.series, loaded.warnings))
}

/// A note for each log that starts after `window` does (a log from step 1 with `0..500`).
fn late_starts(series: &[RunSeries], window: &StepWindow) -> Vec<String> {
    series
        .iter()
        .filter_map(|s| {
            let (first, _) = s.series.step_range()?;
            let note = window.late_start_note(first)?;
            Some(format!(
                "{} (run {}): the log {note}",
                s.path.display(),
                s.run
            ))
        })
        .collect()
}

/// Gradient-norm statistics over a step window (paper Table 4).
pub fn grad_stats(inputs: &LogInputs, options: &GradStatsOptions) -> Result<LogReport<GradStats>> {
    let (series, mut warnings) = load(inputs, vec![options.metric.clone()], false)?;
    warnings.extend(late_starts(&series, &options.steps));
    let rows = series
        .iter()
        .map(|s| grad::grad_stats(s, &options.steps, options.ddof))
        .collect::<Result<Vec<_>>>()?;
    let options = options.clone();
    Ok(LogReport {
        series,
        warnings,
        result: GradStats { options, rows },
    })
}

/// Spike counts above median + k * MAD and the spike steps (paper Table 5).
pub fn spikes(inputs: &LogInputs, options: &SpikesOptions) -> Result<LogReport<Spikes>> {
    spikes::check_options(&options.k, options.mad_scale)?;
    let window = options.steps.unwrap_or(StepWindow::ALL);
    let (series, mut warnings) = load(inputs, vec![options.metric.clone()], false)?;
    warnings.extend(late_starts(&series, &window));
    let (mut rows, mut steps) = (Vec::new(), Vec::new());
    for s in &series {
        let (r, st) = spikes::spikes(s, &window, &options.k, options.mad_scale)?;
        rows.extend(r);
        steps.extend(st);
    }
    let options = options.clone();
    Ok(LogReport {
        series,
        warnings,
        result: Spikes {
            options,
            window,
            rows,
            steps,
        },
    })
}

/// Raw and smoothed curves of log metrics (paper Figs. 7, 8, 10).
pub fn curves(inputs: &LogInputs, options: &CurvesOptions) -> Result<LogReport<Curves>> {
    curves::check_ema(options.ema)?;
    let window = options.steps.unwrap_or(StepWindow::ALL);
    let (metrics, optional) = curves::requested_metrics(&options.metrics);
    let (series, warnings) = load(inputs, metrics.clone(), optional)?;
    let (mut points, mut summary) = (Vec::new(), Vec::new());
    for s in &series {
        let (p, sum) = curves::curve(s, &window, options.ema)?;
        points.extend(p);
        summary.push(sum);
    }
    let options = options.clone();
    Ok(LogReport {
        series,
        warnings,
        result: Curves {
            options,
            metrics,
            window,
            points,
            summary,
        },
    })
}

/// One input, as recorded in run_<table>.json.
#[derive(Serialize)]
struct InputRecord<'a> {
    run: &'a str,
    path: String,
    format: LogFormat,
    metric: &'a str,
    source: &'a str,
    steps: usize,
}

fn input_records(series: &[RunSeries]) -> Vec<InputRecord<'_>> {
    series
        .iter()
        .map(|s| InputRecord {
            run: &s.run,
            path: s.path.display().to_string(),
            format: s.format,
            metric: &s.series.metric,
            source: &s.series.source,
            steps: s.series.len(),
        })
        .collect()
}

impl LogReport<GradStats> {
    /// `grad_stats` and `grad_stats.md`.
    pub fn files(&self) -> LogFiles {
        let (o, rows) = (&self.result.options, &self.result.rows);
        LogFiles {
            tables: vec![grad::table(rows)],
            extra: vec![("grad_stats.md", grad::markdown(rows, &o.steps, o.ddof))],
            record: json!({
                "command": "grad-stats",
                "version": env!("CARGO_PKG_VERSION"),
                "inputs": input_records(&self.series),
                "options": {"metric": o.metric, "steps": o.steps.to_string(), "ddof": o.ddof},
            }),
        }
    }
}

impl LogReport<Spikes> {
    /// `spikes`, `spike_steps` and `spikes.md`.
    pub fn files(&self) -> LogFiles {
        let r = &self.result;
        let o = &r.options;
        LogFiles {
            tables: vec![spikes::table(&r.rows), spikes::steps_table(&r.steps)],
            extra: vec![(
                "spikes.md",
                spikes::markdown(&r.rows, &r.window, &o.k, o.mad_scale),
            )],
            record: json!({
                "command": "spikes",
                "version": env!("CARGO_PKG_VERSION"),
                "inputs": input_records(&self.series),
                "options": {"metric": o.metric, "steps": r.window.to_string(), "k": o.k, "mad_scale": o.mad_scale},
            }),
        }
    }
}

impl LogReport<Curves> {
    /// `curves`.
    pub fn files(&self) -> LogFiles {
        let r = &self.result;
        LogFiles {
            tables: vec![curves::table(&r.points)],
            extra: Vec::new(),
            record: json!({
                "command": "curves",
                "version": env!("CARGO_PKG_VERSION"),
                "inputs": input_records(&self.series),
                "options": {"metric": r.metrics, "steps": r.window.to_string(), "ema": r.options.ema},
            }),
        }
    }
}

impl LogFiles {
    /// Writes the files into `dir` (created; they appear all at once): the tables in
    /// `format`, the extra files, then `run_<first table>.json`. The files written.
    pub fn write(
        &self,
        dir: &Path,
        format: Format,
        staging: &StagingWatch,
    ) -> Result<Vec<PathBuf>> {
        let mut out = OutputDir::create(dir, format, staging)?;
        for t in &self.tables {
            out.write(t)?;
        }
        for (name, text) in &self.extra {
            out.write_bytes(name, text.as_bytes())?;
        }
        let name = format!("run_{}.json", self.tables[0].name);
        let mut bytes = serde_json::to_vec_pretty(&self.record)
            .map_err(|e| Error::failed(format!("cannot encode {name}"), e))?;
        bytes.push(b'\n');
        out.write_bytes(&name, &bytes)?;
        out.commit()
    }
}
