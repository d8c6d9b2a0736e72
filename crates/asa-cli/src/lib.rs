//! The `asa-analyze` command line: clap arguments (raw) turned into validated run configs, one
//! file per command group, and [`results`], the writing of a run's tables, run.json and
//! figures that the Python package's `Result.write()` shares. Errors print as one line, `asa-analyze: {err}` with its causes
//! ([`Error::report`]), and exit with status 2; a closed stdout (`| head`) exits 0 quietly.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use asa_analysis::analysis::CancelToken;
use asa_core::error::{Error, Result};
use asa_metrics::Metric;
use asa_tables::StagingWatch;

pub mod results;

mod analyze;
mod choice;
mod demo;
mod figures;
mod html_report;
mod inspect;
mod logs;
mod merge;
mod report;
mod run_args;
mod stdout;
mod tables;
mod train;
mod watch;

/// Analyse attention in transformer checkpoints (Affine-Scaled Attention and friends).
#[derive(Debug, Parser)]
#[command(name = "asa-analyze", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every attention metric in one pass: tables under --out, a summary on stdout.
    Analyze(analyze::MetricArgs),
    /// Attention entropy per layer and head (paper Fig. 6).
    Entropy(analyze::MetricArgs),
    /// First-token attention mass per layer (paper Fig. 4).
    FirstToken(analyze::MetricArgs),
    /// Per-query attention weight sums: summaries and histogram (paper Fig. 3).
    WeightSums(analyze::MetricArgs),
    /// Raw QK^T means; a folder of step checkpoints gives the training curve (paper Fig. 2).
    Qk(analyze::MetricArgs),
    /// Total attention per layer and head (paper Fig. 5).
    Heads(analyze::MetricArgs),
    /// 30 x 30 attention heatmap of one layer (paper Fig. 9).
    Heatmap(analyze::MetricArgs),
    /// One query's attention over keys with its sink mass (paper Fig. 1).
    Profile(analyze::MetricArgs),
    /// Sink mass (sink, off_by_one) per layer and head, and the sink rate.
    Sink(analyze::MetricArgs),
    /// Affine-Scaled alpha statistics per layer and head (paper Sec. 4.3).
    Alpha(analyze::MetricArgs),
    /// Next-token NLL and perplexity, overall and per position.
    Nll(analyze::MetricArgs),
    /// First-token importance per head and the sink rate (Gu et al., ICLR 2025).
    SinkRate(analyze::MetricArgs),
    /// Attention mass by query-key distance band.
    Distance(analyze::MetricArgs),
    /// Largest logit per layer and head, and the mean row maximum (what QK-clip monitors).
    MaxLogit(analyze::MetricArgs),
    /// Attention each key position receives (H2O's heavy-hitter score): key_received.csv.
    KeyReceived(analyze::MetricArgs),
    /// Follow a training run's folder: analyse each step checkpoint once it is complete
    /// into attention_series (resumable; --once: what is there now).
    Watch(watch::WatchArgs),
    /// Merge the partial results of `analyze --shard K/N` into the tables of one run.
    Merge(merge::MergeArgs),
    /// Architecture, attention variant (and how it was detected), shapes, parameter counts.
    Inspect(inspect::InspectArgs),
    /// Gradient-norm statistics over a step window: mean, std, var, CV (paper Table 4).
    GradStats(logs::GradStatsArgs),
    /// Gradient-norm spikes above median + k * MAD (paper Table 5).
    Spikes(logs::SpikesArgs),
    /// Loss and gradient-norm curves with optional EMA smoothing (paper Figs. 7, 8, 10).
    Curves(logs::CurvesArgs),
    /// The paper's Tables 1-3 (Markdown, LaTeX, CSV) from checkpoints, training logs,
    /// analyze results and lm-eval-harness results.
    Tables(tables::TablesArgs),
    /// Every paper figure (PNG + SVG) and Tables 4-5 (Markdown) from exported tables.
    Figures(figures::FiguresArgs),
    /// One self-contained HTML page of results folders: layer x head grids, each head's
    /// profiles and block map side by side across models, training series, tables.
    Report(html_report::ReportArgs),
    /// Train a small Llama-style model for one attention variant (CSV log, HF checkpoints).
    Train(train::TrainArgs),
    /// Train baseline, sink, Affine-Scaled, gated and Affine-Scaled + gated models here and
    /// analyse them end to end (figures, Tables 1-2).
    Demo(demo::DemoArgs),
}

/// What the binary owns for the length of the process and hands to the commands: the
/// cancellation token of the run and the watch of its unfinished output folders (its signal
/// thread cancels the one and removes the other's folders). The library holds neither.
#[derive(Debug, Clone, Default)]
pub struct Process {
    pub cancel: CancelToken,
    pub staging: StagingWatch,
}

impl Process {
    /// A process with no run cancelled and no output folder open.
    pub fn new() -> Process {
        Process::default()
    }
}

/// Runs the CLI with the process arguments; returns the exit code.
pub fn main(process: &Process) -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help, --version (stdout, status 0), and no command at all: the help itself
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            e.exit()
        }
        Err(e) => {
            eprintln!("asa-analyze: {}", usage_line(&e));
            return ExitCode::from(2);
        }
    };
    match run(cli, process) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Interrupted) if process.cancel.is_cancelled() => {
            // the binary's signal thread cancelled the run: it removes the unfinished output
            // and ends the process by the signal (a shell sees 130, not 2); this thread only
            // got to its next check first
            std::thread::sleep(std::time::Duration::from_secs(10));
            exit_with(&Error::Interrupted)
        }
        Err(err) => exit_with(&err),
    }
}

/// The exit for an error: a closed pipe (`asa-analyze ... | head`) is not one (status 0,
/// nothing printed); anything else prints one line with its causes, status 2.
fn exit_with(err: &Error) -> ExitCode {
    if err.is_broken_pipe() {
        return ExitCode::SUCCESS;
    }
    eprintln!("asa-analyze: {}", err.report());
    ExitCode::from(2)
}

/// clap's usage error as one line: its message (with any tip or list of values) without
/// the usage block, e.g. "invalid value 'f64' for '--dtype <DTYPE>': ... (see --help)".
fn usage_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let parts: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let message = parts.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    format!("{message} (see --help)")
}

fn run(cli: Cli, process: &Process) -> Result<()> {
    match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Tables(args) => tables::run(args, process),
        Command::Merge(args) => merge::run(args, process),
        Command::Watch(args) => watch::run(args, process),
        Command::Analyze(args) => analyze::run(args, &Metric::defaults(), "analyze", process),
        Command::Entropy(args) => analyze::run(args, &[Metric::ENTROPY], "entropy", process),
        Command::FirstToken(args) => {
            analyze::run(args, &[Metric::FIRST_TOKEN], "first-token", process)
        }
        Command::WeightSums(args) => {
            analyze::run(args, &[Metric::WEIGHT_SUM], "weight-sums", process)
        }
        Command::Qk(args) => analyze::run(args, &[Metric::QK_MEAN], "qk", process),
        Command::Heads(args) => analyze::run(args, &[Metric::HEAD_TOTAL], "heads", process),
        Command::Heatmap(args) => analyze::run(args, &[Metric::HEATMAP], "heatmap", process),
        Command::Profile(args) => analyze::run(args, &[Metric::QUERY_PROFILE], "profile", process),
        Command::Sink(args) => analyze::run(
            args,
            &[Metric::SINK_MASS, Metric::SINK_RATE],
            "sink",
            process,
        ),
        Command::Alpha(args) => analyze::run(args, &[Metric::ALPHA], "alpha", process),
        Command::Nll(args) => analyze::run(args, &[Metric::NLL], "nll", process),
        Command::SinkRate(args) => analyze::run(args, &[Metric::SINK_RATE], "sink-rate", process),
        Command::Distance(args) => {
            analyze::run(args, &[Metric::DISTANCE_PROFILE], "distance", process)
        }
        Command::MaxLogit(args) => analyze::run(args, &[Metric::MAX_LOGIT], "max-logit", process),
        Command::KeyReceived(args) => {
            analyze::run(args, &[Metric::KEY_RECEIVED], "key-received", process)
        }
        Command::GradStats(args) => logs::grad_stats(args, process),
        Command::Spikes(args) => logs::spikes(args, process),
        Command::Curves(args) => logs::curves(args, process),
        Command::Figures(args) => figures::run(args, process),
        Command::Report(args) => html_report::run(args),
        Command::Train(args) => train::run(args, process),
        Command::Demo(args) => demo::run(args, process),
    }
}
