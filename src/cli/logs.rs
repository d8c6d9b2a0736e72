//! `grad-stats`, `spikes` and `curves`: training-log statistics over several runs
//! (SPEC section 5). Glue only: read the runs, call [`crate::stats`], print a compact
//! table (or JSON) and, with `--out`, write the tables, their Markdown (paper Tables 4
//! and 5) and `run_<table>.json` atomically.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;
use serde_json::json;

use super::choice::choice;
use super::stdout;
use crate::error::{Error, Result};
use crate::export::{Format, OutputDir, Table};
use crate::stats::{self, curves, grad, num, spikes, LogRequest, RunSeries, RunSpec, StepWindow};

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

/// One input, as recorded in run_<table>.json.
#[derive(Serialize)]
struct InputRecord<'a> {
    run: &'a str,
    path: String,
    format: stats::LogFormat,
    metric: &'a str,
    source: &'a str,
    steps: usize,
}

/// Warnings from reading the logs, printed once the command has succeeded: a failing
/// command prints its one-line error alone.
struct Warnings(Vec<String>);

impl Warnings {
    /// Notes each log that starts after `window` does (a log from step 1 with `0..500`).
    fn late_starts(&mut self, series: &[RunSeries], window: &StepWindow, quiet: bool) {
        if quiet {
            return;
        }
        for s in series {
            if let Some(note) = s
                .series
                .step_range()
                .and_then(|(first, _)| window.late_start_note(first))
            {
                self.0.push(format!(
                    "{} (run {}): the log {note}",
                    s.path.display(),
                    s.run
                ));
            }
        }
    }

    fn print(&self) {
        for w in &self.0 {
            eprintln!("asa-analyze: warning: {w}");
        }
    }
}

fn load(
    inputs: &LogInputs,
    metrics: Vec<String>,
    optional: bool,
    quiet: bool,
) -> Result<(Vec<RunSeries>, Warnings)> {
    let specs: Vec<RunSpec> = inputs.runs.iter().map(|a| RunSpec::parse(a)).collect();
    let request = LogRequest {
        metrics,
        step_column: inputs.step_column.clone(),
    };
    let loaded = stats::load_runs(&specs, &request, optional)?;
    let warnings = Warnings(match quiet {
        true => Vec::new(),
        false => loaded.warnings,
    });
    Ok((loaded.series, warnings))
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

/// Stages tables, extra files and the run record under `--out`, then commits.
fn write_out(
    output: &LogOutput,
    tables: &[Table],
    extra: &[(&str, String)],
    record: serde_json::Value,
    process: &super::Process,
) -> Result<()> {
    let Some(dir) = &output.out else {
        return Ok(());
    };
    let mut out = OutputDir::create(dir, output.format, &process.staging)?;
    for t in tables {
        out.write(t)?;
    }
    for (name, text) in extra {
        out.write_bytes(name, text.as_bytes())?;
    }
    let name = format!("run_{}.json", tables[0].name);
    let mut bytes = serde_json::to_vec_pretty(&record)
        .map_err(|e| Error::failed(format!("cannot encode {name}"), e))?;
    bytes.push(b'\n');
    out.write_bytes(&name, &bytes)?;
    let files = out.commit()?;
    if !output.quiet {
        eprintln!(
            "asa-analyze: wrote {} files to {}",
            files.len(),
            dir.display()
        );
    }
    Ok(())
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
    let (series, mut warnings) = load(&args.inputs, vec![args.metric.clone()], false, out.quiet)?;
    warnings.late_starts(&series, &args.steps, out.quiet);
    let rows = series
        .iter()
        .map(|s| grad::grad_stats(s, &args.steps, args.ddof))
        .collect::<Result<Vec<_>>>()?;
    let record = json!({
        "command": "grad-stats",
        "version": env!("CARGO_PKG_VERSION"),
        "inputs": input_records(&series),
        "options": {"metric": args.metric, "steps": args.steps.to_string(), "ddof": args.ddof},
    });
    write_out(
        out,
        &[grad::table(&rows)],
        &[(
            "grad_stats.md",
            grad::markdown(&rows, &args.steps, args.ddof),
        )],
        record,
        process,
    )?;
    warnings.print();
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
    spikes::check_options(&args.k, args.mad_scale)?;
    let window = args.steps.unwrap_or(StepWindow::ALL);
    let (series, mut warnings) = load(&args.inputs, vec![args.metric.clone()], false, out.quiet)?;
    warnings.late_starts(&series, &window, out.quiet);
    let mut rows = Vec::new();
    let mut steps = Vec::new();
    for s in &series {
        let (r, st) = spikes::spikes(s, &window, &args.k, args.mad_scale)?;
        rows.extend(r);
        steps.extend(st);
    }
    let record = json!({
        "command": "spikes",
        "version": env!("CARGO_PKG_VERSION"),
        "inputs": input_records(&series),
        "options": {"metric": args.metric, "steps": window.to_string(), "k": args.k, "mad_scale": args.mad_scale},
    });
    write_out(
        out,
        &[spikes::table(&rows), spikes::steps_table(&steps)],
        &[(
            "spikes.md",
            spikes::markdown(&rows, &window, &args.k, args.mad_scale),
        )],
        record,
        process,
    )?;
    warnings.print();
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
    curves::check_ema(args.ema)?;
    let window = args.steps.unwrap_or(StepWindow::ALL);
    let (metrics, optional) = curves::requested_metrics(&args.metric);
    let (series, warnings) = load(&args.inputs, metrics.clone(), optional, out.quiet)?;
    let mut points = Vec::new();
    let mut summary = Vec::new();
    for s in &series {
        let (p, sum) = curves::curve(s, &window, args.ema)?;
        points.extend(p);
        summary.push(sum);
    }
    let record = json!({
        "command": "curves",
        "version": env!("CARGO_PKG_VERSION"),
        "inputs": input_records(&series),
        "options": {"metric": metrics, "steps": window.to_string(), "ema": args.ema},
    });
    write_out(out, &[curves::table(&points)], &[], record, process)?;
    warnings.print();
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
