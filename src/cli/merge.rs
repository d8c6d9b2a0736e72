//! `asa-analyze merge PARTIAL... --out DIR`: the partial results of `analyze --shard K/N`
//! merged into the section 6 tables a single run writes (counts equal, values within
//! 1e-12 relative), or with `--partial` into one partial of the shards given (a tree of
//! merges for many shards). Partials of another run, missing or doubled shards and
//! unfinished partials are refused, nothing written.

use std::path::PathBuf;

use super::analyze::{commit_tables, FigureFlags};
use super::choice::choice;
use super::Process;
use crate::analysis::partial::{merge_partials, stage_partial};
use crate::analysis::record::RunRecord;
use crate::error::Result;
use crate::export::{Format, OutputDir};
use crate::results::stage_tables;

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
