//! `asa-analyze merge PARTIAL... --out DIR`: the partial results of `analyze --shard K/N`
//! merged into the section 6 tables a single run writes (counts equal, values within
//! 1e-12 relative), or with `--partial` into one partial of the shards given (a tree of
//! merges for many shards). Partials of another run, missing or doubled shards and
//! unfinished partials are refused, nothing written. Folders that hold an `attention_series`
//! table and no partial (`watch` outputs, the Python callbacks' `out`) are merged as series:
//! every (model, step) once (see [`attention_series::merge`]), with `qk_series` and run.json.

use std::path::{Path, PathBuf};

use super::analyze::{commit_tables, FigureFlags};
use super::choice::choice;
use super::Process;
use crate::results::stage_tables;
use asa_analysis::analysis::attention_series::{self, qk_points};
use asa_analysis::analysis::partial::{merge_partials, stage_partial, MARKER, STATES};
use asa_analysis::analysis::record::RunRecord;
use asa_core::error::{Error, Result};
use asa_metrics::qk_series_table;
use asa_tables::{Format, OutputDir, Table};

/// Arguments of `merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Partial results (the `--out` folders of `analyze --shard K/N`, or of `merge --partial`).
    #[arg(required = true, value_name = "PARTIAL")]
    pub partials: Vec<PathBuf>,
    /// Output folder for the tables and run.json (or, with --partial, the merged partial).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Merge some of the shards into one partial result, to be merged again later.
    #[arg(long)]
    pub partial: bool,
    /// Table format.
    #[arg(long, value_parser = choice::<Format>(&Format::NAMES), default_value = "csv")]
    pub format: Format,
    /// Also render every figure the tables allow into OUT/figures/.
    #[arg(long)]
    pub figures: bool,
    /// No messages on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `merge`.
pub fn run(args: MergeArgs, process: &Process) -> Result<()> {
    refuse_out_among_inputs(&args.out, &args.partials)?;
    if let Some(series) = series_inputs(&args.partials)? {
        return merge_series(&args, &series, process);
    }
    let started = std::time::Instant::now();
    let merged = merge_partials(&args.partials, !args.partial)?;
    let mut out = OutputDir::create(&args.out, args.format, &process.staging)?;
    let mut record = merged.record.clone();
    record.merged_from = Some(
        args.partials
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    );
    record.merge_seconds = Some(started.elapsed().as_secs_f64());
    if args.partial {
        record.command = "merge --partial".to_string();
        stage_partial(&mut out, &merged.models, &merged.info, record)?;
        out.commit()?;
    } else {
        let output = merged.output()?;
        let record = RunRecord {
            merged_from: record.merged_from,
            merge_seconds: record.merge_seconds,
            ..merged.run_record(&output, "merge")
        };
        stage_tables(&mut out, &output, &record)?;
        let flags = FigureFlags {
            figures: args.figures,
            quiet: args.quiet,
        };
        commit_tables(out, flags)?;
    }
    if !args.quiet {
        let what = match args.partial {
            true => "a partial result",
            false => "the tables",
        };
        eprintln!(
            "asa-analyze: merged shards {:?} of {} into {what} in {}",
            merged.info.shards,
            merged.info.count,
            args.out.display()
        );
    }
    Ok(())
}

/// Refuses an `--out` that is one of the `inputs` (the same folder, however named): the
/// merge would overwrite what it reads. Nothing is written.
fn refuse_out_among_inputs(out: &Path, inputs: &[PathBuf]) -> Result<()> {
    let Ok(target) = out.canonicalize() else {
        // no such folder yet: not an input that exists
        return Ok(());
    };
    match inputs.iter().find(|p| p.canonicalize().is_ok_and(|p| p == target)) {
        Some(input) => Err(Error::input(
            out,
            format!(
                "--out names {}, one of the folders merged: merging would overwrite its run.json; give another --out",
                input.display()
            ),
        )),
        None => Ok(()),
    }
}

/// The `attention_series` tables of `dirs` when every one holds one and none is a shard's
/// partial result; `None` otherwise (the partials' merge then says what is wrong).
fn series_inputs(dirs: &[PathBuf]) -> Result<Option<Vec<(PathBuf, Table)>>> {
    let partial = |d: &Path| d.join(MARKER).exists() || d.join(STATES).exists();
    if dirs.iter().any(|d| partial(d)) {
        return Ok(None);
    }
    let mut series = Vec::new();
    for dir in dirs {
        match attention_series::read_in(dir)? {
            Some(table) => series.push((dir.clone(), table)),
            None => return Ok(None),
        }
    }
    Ok(Some(series))
}

/// `merge` of series folders: one `attention_series` (and its `qk_series`), run.json
/// saying what was merged, the figures with `--figures`.
fn merge_series(args: &MergeArgs, series: &[(PathBuf, Table)], process: &Process) -> Result<()> {
    let started = std::time::Instant::now();
    if args.partial {
        return Err(Error::option(
            "--partial",
            "is for shards' partial results; attention series merge whole",
        ));
    }
    let merged = attention_series::merge(series)?;
    let mut out = OutputDir::create(&args.out, args.format, &process.staging)?;
    out.write(&merged)?;
    let points = qk_points(&merged);
    if !points.is_empty() {
        out.write(&qk_series_table(&points))?;
    }
    let record = RunRecord {
        command: "merge".to_string(),
        asa_analyze_version: env!("CARGO_PKG_VERSION").to_string(),
        options: serde_json::json!({ "format": args.format }),
        merged_from: Some(
            series
                .iter()
                .map(|(d, _)| d.display().to_string())
                .collect(),
        ),
        merge_seconds: Some(started.elapsed().as_secs_f64()),
        ..RunRecord::default()
    };
    out.write_bytes("run.json", record.to_json()?.as_bytes())?;
    let flags = FigureFlags {
        figures: args.figures,
        quiet: args.quiet,
    };
    commit_tables(out, flags)?;
    if !args.quiet {
        eprintln!(
            "asa-analyze: merged the attention series of {} folders ({} rows) into {}",
            series.len(),
            merged.height(),
            args.out.display()
        );
    }
    Ok(())
}
