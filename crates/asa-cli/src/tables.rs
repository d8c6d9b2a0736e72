//! `tables`: the paper's Tables 1-3 from checkpoints, training logs, `analyze` results and
//! lm-eval-harness result files (SPEC section 10).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::choice::choice;
use super::stdout::with_stdout;
use asa_core::error::{Error, Result};
use asa_figures::paper::runs::Input;
use asa_figures::paper::typeset::{latex, markdown, tidy};
use asa_figures::paper::{paper_tables, PaperTable, RunSet, ValueOptions, TASKS};
use asa_tables::{Format, OutputDir};

/// `tables`: paper Tables 1-3.
#[derive(Debug, Args)]
pub struct TablesArgs {
    /// A TOML or JSON manifest of the runs (size, method, checkpoint, log, results, model,
    /// lm_eval; paths relative to it). The options below add to it.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// A run's checkpoint, for Delta Params against its size's baseline: SIZE/METHOD=PATH
    /// (METHOD: baseline, sink, affine_scaled, gated, affine_scaled_gated, or any name).
    #[arg(long, value_name = "SIZE/METHOD=PATH")]
    checkpoint: Vec<String>,
    /// A run's training log, for the final loss: SIZE/METHOD=PATH.
    #[arg(long, value_name = "SIZE/METHOD=PATH")]
    log: Vec<String>,
    /// A run's `analyze --out` folder, for its perplexity: SIZE/METHOD=DIR (the model
    /// labelled SIZE/METHOD there, else METHOD, else the only one).
    #[arg(long, value_name = "SIZE/METHOD=DIR")]
    results: Vec<String>,
    /// A run's lm-eval-harness result JSON (repeat for several): SIZE/METHOD=FILE.
    #[arg(long = "lm-eval", value_name = "SIZE/METHOD=FILE")]
    lm_eval: Vec<String>,
    /// Table 3's methods (comma-separated), e.g. linear_clipping,sigmoid.
    #[arg(long, value_delimiter = ',', value_name = "METHODS")]
    table3: Vec<String>,
    /// Final loss: the mean over the last N steps of each log (default 100).
    #[arg(long, value_name = "N")]
    loss_window: Option<i64>,
    /// The log's loss column (default loss).
    #[arg(long, value_name = "NAME")]
    loss_metric: Option<String>,
    /// Report another lm-eval metric for a task: TASK=METRIC, comma-separated (defaults:
    /// acc_norm for hellaswag and arc_challenge, acc for the others).
    #[arg(long, value_delimiter = ',', value_name = "TASK=METRIC")]
    accuracy: Vec<String>,
    /// Write table1.md / .tex, ..., paper_tables.csv and run_tables.json into this folder.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Format of the tidy table under --out.
    #[arg(long, value_parser = choice::<Format>(&Format::NAMES), default_value = "csv")]
    format: Format,
    /// Print nothing on stdout.
    #[arg(long, short)]
    quiet: bool,
}

/// The runs and options `args` name.
fn run_set(args: &TablesArgs) -> Result<(RunSet, ValueOptions)> {
    let mut set = match &args.manifest {
        Some(path) => RunSet::from_manifest(
            path,
            &asa_analysis::analysis::checkpoint_facts::ModelCheckpoints,
        )?,
        None => RunSet::default(),
    };
    for (input, values) in [
        (Input::Checkpoint, &args.checkpoint),
        (Input::Log, &args.log),
        (Input::Results, &args.results),
        (Input::LmEval, &args.lm_eval),
    ] {
        for v in values {
            set.add_option(input, v)?;
        }
    }
    if set.runs.is_empty() {
        return Err(Error::usage(
            "tables needs runs: --manifest FILE, or --checkpoint / --log / --results / --lm-eval SIZE/METHOD=PATH",
        ));
    }
    if args.table3.iter().any(|m| m.trim().is_empty()) {
        return Err(Error::usage("--table3: a method name is empty"));
    }
    if !args.table3.is_empty() {
        set.table3 = args
            .table3
            .iter()
            .map(|m| asa_figures::paper::Method::parse(m))
            .collect();
    }
    let options = ValueOptions::resolve(
        &set,
        args.loss_window,
        args.loss_metric.clone(),
        &args.accuracy,
    )?;
    Ok((set, options))
}

/// Writes the tables' Markdown, LaTeX and tidy table, and `record` as run_tables.json.
pub(crate) fn write_tables(
    tables: &[PaperTable],
    out: &mut OutputDir,
    record: &serde_json::Value,
) -> Result<()> {
    for t in tables {
        out.write_bytes(&format!("table{}.md", t.number), markdown(t).as_bytes())?;
        out.write_bytes(&format!("table{}.tex", t.number), latex(t).as_bytes())?;
    }
    out.write(&tidy(tables))?;
    let mut bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| Error::failed("cannot encode run_tables.json", e))?;
    bytes.push(b'\n');
    out.write_bytes("run_tables.json", &bytes)
}

/// What run_tables.json records.
pub(crate) fn record(set: &RunSet, o: &ValueOptions, tables: &[PaperTable]) -> serde_json::Value {
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    json!({
        "command": "tables",
        "version": env!("CARGO_PKG_VERSION"),
        "runs": set.runs.iter().map(|r| json!({
            "size": r.size,
            "method": r.method.key(),
            "method_source": r.method_source.clone().unwrap_or_else(|| "given".into()),
            "checkpoint": path(&r.checkpoint),
            "log": path(&r.log),
            "results": path(&r.results),
            "model": r.model,
            "lm_eval": r.lm_eval.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "options": {
            "loss_window": o.loss_window,
            "loss_metric": o.loss_metric,
            "accuracy": TASKS.iter().map(|t| (t.key, o.accuracy.get(t.key).map_or(t.default_metric, String::as_str))).collect::<BTreeMap<_, _>>(),
            "table3": set.table3.iter().map(|m| m.key().to_string()).collect::<Vec<_>>(),
        },
        "tables": tables.iter().map(|t| t.number).collect::<Vec<_>>(),
    })
}

/// Builds the tables, prints their Markdown, writes them under --out.
pub fn run(args: TablesArgs, process: &super::Process) -> Result<()> {
    let (set, options) = run_set(&args)?;
    let tables = paper_tables(
        &set,
        &options,
        &asa_analysis::analysis::checkpoint_facts::ModelCheckpoints,
    )?;
    if tables.is_empty() {
        return Err(Error::usage(
            "no table to build: Tables 1-2 need a sink, affine_scaled, gated or affine_scaled_gated run; Table 3 its methods (--table3)",
        ));
    }
    if let Some(dir) = &args.out {
        let mut out = OutputDir::create(dir, args.format, &process.staging)?;
        write_tables(&tables, &mut out, &record(&set, &options, &tables))?;
        out.commit()?;
    }
    if !args.quiet {
        with_stdout(|w| {
            for (i, t) in tables.iter().enumerate() {
                if i > 0 {
                    writeln!(w)?;
                }
                write!(w, "{}", markdown(t))?;
            }
            Ok(())
        })?;
    }
    Ok(())
}
