//! Command-line interface: clap arguments (raw) turned into validated run configs, one
//! file per command group. Errors print as `asa-analyze: {err}` and exit with status 2.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::Result;

mod inspect;
mod logs;

/// Analyse attention in transformer checkpoints (Affine-Scaled Attention and friends).
#[derive(Debug, Parser)]
#[command(name = "asa-analyze", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Architecture, attention variant (and how it was detected), shapes, parameter counts.
    Inspect(inspect::InspectArgs),
    /// Gradient-norm statistics over a step window: mean, std, var, CV (paper Table 4).
    GradStats(logs::GradStatsArgs),
    /// Gradient-norm spikes above median + k * MAD (paper Table 5).
    Spikes(logs::SpikesArgs),
    /// Loss and gradient-norm curves with optional EMA smoothing (paper Figs. 7, 8, 10).
    Curves(logs::CurvesArgs),
}

/// Runs the CLI with the process arguments; returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let line = err.to_string().replace('\n', " ");
            eprintln!("asa-analyze: {line}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::GradStats(args) => logs::grad_stats(args),
        Command::Spikes(args) => logs::spikes(args),
        Command::Curves(args) => logs::curves(args),
    }
}
