//! `grad-stats`, `spikes` and `curves`: training-log statistics over several runs
//! (SPEC section 5). Glue only: [`asa_logs::report`] reads the runs and runs the
//! analysis (as for `demo`); this prints a compact
//! table (or JSON) and, with `--out`, write the tables, their Markdown (paper Tables 4
//! and 5) and `run_<table>.json` atomically.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::choice::choice;
use super::stdout;
use asa_core::error::Result;
use asa_logs::report::{self, CurvesOptions, GradStatsOptions, LogFiles, SpikesOptions};
use asa_logs::{num, StepWindow};
use asa_tables::Format;

/// Logs to read, shared by the three commands.
#[derive(Debug, Args)]
pub struct LogInputs {
    /// Training logs, each `label=path` or a path (label: the file stem, or the folder
    /// name for TensorBoard). CSV/TSV with a header, JSON Lines, a W&B CSV export (one
    /// run per W&B run in it), a TensorBoard event file or run folder.
    #[arg(required = true, value_name = "RUN")]
    runs: Vec<String>,
    /// The step column or key (default: the first of step, global_step,
    /// trainer/global_step, iteration, iter, _step; W&B exports: Step).
    #[arg(long, value_name = "NAME")]
    step_column: Option<String>,
}

/// Where results go, shared by the three commands.
#[derive(Debug, Args)]
pub struct LogOutput {
    /// Write the tables (and Markdown, and run_<table>.json) into this folder.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Table format under --out.
    #[arg(long, value_parser = choice::<Format>(&Format::NAMES), default_value = "csv")]
    format: Format,
    /// Print JSON rows on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Print neither the stdout table nor warnings (errors still print).
    #[arg(long, short)]
    quiet: bool,
}

/// `grad-stats`: paper Table 4.
#[derive(Debug, Args)]
pub struct GradStatsArgs {
    #[command(flatten)]
    inputs: LogInputs,
    /// Metric column or tag (aliases: train/grad_norm, gradient_norm, ...).
    #[arg(long, default_value = "grad_norm")]
    metric: String,
    /// Step window: A..B (B excluded), A..=B, A.., ..B, all.
    #[arg(long, default_value = "0..500", value_name = "A..B")]
    steps: StepWindow,
    /// Delta degrees of freedom: 1 sample statistics, 0 population.
    #[arg(long, default_value_t = 1)]
    ddof: u32,
    #[command(flatten)]
    output: LogOutput,
}

/// `spikes`: paper Table 5.
#[derive(Debug, Args)]
pub struct SpikesArgs {
    #[command(flatten)]
    inputs: LogInputs,
    /// Metric column or tag (aliases: train/grad_norm, gradient_norm, ...).
    #[arg(long, default_value = "grad_norm")]
    metric: String,
    /// Step window (default: every step); median and MAD are taken over it.
    #[arg(long, value_name = "A..B")]
    steps: Option<StepWindow>,
    /// Threshold multipliers: tau = median + k * MAD.
    #[arg(long, value_delimiter = ',', default_values_t = [6.0, 9.0])]
    k: Vec<f64>,
    /// MAD scale: 1 (unscaled, the paper's), 1.4826 (normal-consistent).
    #[arg(long, default_value_t = 1.0)]
    mad_scale: f64,
    #[command(flatten)]
    output: LogOutput,
}

/// `curves`: paper Figs. 7, 8, 10.
#[derive(Debug, Args)]
pub struct CurvesArgs {
    #[command(flatten)]
    inputs: LogInputs,
    /// Metrics, comma-separated (default: loss,grad_norm; a default metric a log lacks
    /// is skipped with a warning, a named one is an error).
    #[arg(long, value_delimiter = ',')]
    metric: Vec<String>,
    /// Step window (default: every step), e.g. 7000..9000 for the late phase.
    #[arg(long, value_name = "A..B")]
    steps: Option<StepWindow>,
    /// Debiased EMA smoothing weight in [0, 1), as TensorBoard's slider (0.9, 0.99).
    #[arg(long, value_name = "W")]
    ema: Option<f64>,
    #[command(flatten)]
    output: LogOutput,
}

impl LogInputs {
    fn typed(&self) -> report::LogInputs {
        report::LogInputs {
            runs: self.runs.clone(),
            step_column: self.step_column.clone(),
        }
    }
}

impl LogOutput {
    /// Writes `files` under `--out` (nothing without it), then prints the warnings (after
    /// success: a failing command prints its one-line error alone) unless `--quiet`.
    fn finish(&self, files: LogFiles, warnings: &[String], process: &super::Process) -> Result<()> {
        if let Some(dir) = &self.out {
            let written = files.write(dir, self.format, &process.staging)?;
            if !self.quiet {
                eprintln!(
                    "asa-analyze: wrote {} files to {}",
                    written.len(),
                    dir.display()
                );
            }
        }
        if !self.quiet {
            for w in warnings {
                eprintln!("asa-analyze: warning: {w}");
            }
        }
        Ok(())
    }
}

/// A plain aligned table: the first two columns left-aligned, the rest right-aligned.
fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if i < 2 {
                s.push_str(&format!("{c:<w$}"));
            } else {
                s.push_str(&format!("{c:>w$}"));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut s = line(headers.to_vec());
    for r in rows {
        s.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    s
}

fn opt(step: Option<i64>) -> String {
    step.map_or_else(|| "-".into(), |s| s.to_string())
}

/// `grad-stats`.
pub fn grad_stats(args: GradStatsArgs, process: &super::Process) -> Result<()> {
    let out = &args.output;
    let options = GradStatsOptions {
        metric: args.metric.clone(),
        steps: args.steps,
        ddof: args.ddof,
    };
    let report = report::grad_stats(&args.inputs.typed(), &options)?;
    out.finish(report.files(), &report.warnings, process)?;
    let rows = &report.result.rows;
    if out.json {
        return stdout::print_json(&json!({ "grad_stats": rows }));
    }
    if out.quiet {
        return Ok(());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.run.clone(),
                r.metric.clone(),
                args.steps.to_string(),
                r.n.to_string(),
                num(r.mean),
                num(r.std),
                num(r.var),
                num(r.cv),
                r.n_excluded.to_string(),
            ]
        })
        .collect();
    stdout::print(&render(
        &[
            "run", "metric", "steps", "n", "mean", "std", "var", "cv", "excluded",
        ],
        &table,
    ))
}

/// `spikes`.
pub fn spikes(args: SpikesArgs, process: &super::Process) -> Result<()> {
    let out = &args.output;
    let options = SpikesOptions {
        metric: args.metric.clone(),
        steps: args.steps,
        k: args.k.clone(),
        mad_scale: args.mad_scale,
    };
    let report = report::spikes(&args.inputs.typed(), &options)?;
    out.finish(report.files(), &report.warnings, process)?;
    let (rows, steps, window) = (
        &report.result.rows,
        &report.result.steps,
        report.result.window,
    );
    if out.json {
        return stdout::print_json(&json!({ "spikes": rows, "spike_steps": steps }));
    }
    if out.quiet {
        return Ok(());
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.run.clone(),
                r.metric.clone(),
                window.to_string(),
                r.n.to_string(),
                num(r.median),
                num(r.mad),
                format!("{}", r.k),
                num(r.tau),
                r.count.to_string(),
                r.n_excluded.to_string(),
            ]
        })
        .collect();
    stdout::print(&render(
        &[
            "run", "metric", "steps", "n", "median", "mad", "k", "tau", "spikes", "excluded",
        ],
        &table,
    ))
}

/// `curves`.
pub fn curves(args: CurvesArgs, process: &super::Process) -> Result<()> {
    let out = &args.output;
    let options = CurvesOptions {
        metrics: args.metric.clone(),
        steps: args.steps,
        ema: args.ema,
    };
    let report = report::curves(&args.inputs.typed(), &options)?;
    out.finish(report.files(), &report.warnings, process)?;
    let (points, summary) = (&report.result.points, &report.result.summary);
    if out.json {
        return stdout::print_json(&json!({ "curve_summary": summary, "curves": points }));
    }
    if out.quiet {
        return Ok(());
    }
    let table: Vec<Vec<String>> = summary
        .iter()
        .map(|s| {
            vec![
                s.run.clone(),
                s.metric.clone(),
                s.points.to_string(),
                opt(s.first_step),
                opt(s.last_step),
                num(s.min),
                num(s.max),
                num(s.last_value),
                num(s.last_smoothed),
                s.n_excluded.to_string(),
            ]
        })
        .collect();
    stdout::print(&render(
        &[
            "run",
            "metric",
            "points",
            "first",
            "last",
            "min",
            "max",
            "last_value",
            "last_smoothed",
            "excluded",
        ],
        &table,
    ))
}
