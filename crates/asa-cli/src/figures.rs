//! `figures`: every paper figure (PNG and SVG) and Tables 4-5 (Markdown) from exported
//! tables. Glue only: [`asa_figures::plot`] does the work; notes on skipped figures go to stderr.

use std::path::PathBuf;

use clap::Args;

use asa_core::error::{Error, Result};
use asa_figures::plot::{self, FigureOptions};
use asa_logs::StepWindow;

/// `figures RESULTS_DIR... --out DIR`.
#[derive(Debug, Args)]
pub struct FiguresArgs {
    /// Folders with exported tables (from analyze, curves, spikes, grad-stats ...);
    /// several are merged.
    #[arg(required = true, value_name = "RESULTS_DIR")]
    results: Vec<PathBuf>,
    /// Output folder for the figures (created; files appear all at once).
    #[arg(long, value_name = "DIR", default_value = "figures")]
    out: PathBuf,
    /// Step window of the late-phase loss figure (Fig. 10), e.g. 7000..9000; default:
    /// the last 20% of the logged steps.
    #[arg(long, value_name = "A..B")]
    late_steps: Option<StepWindow>,
    /// The metric of Figs. 7 and 10 (a column of the curves table); default a KD loss
    /// (a metric named like `kd_loss`) when the logs have one, else the training loss.
    #[arg(long, value_name = "NAME")]
    metric: Option<String>,
    /// Figs. 7, 8, 10: smooth with a centred mean over N logged steps (no lag) instead of
    /// the curves table's debiased EMA.
    #[arg(long, value_name = "N")]
    smooth: Option<usize>,
    /// Figs. 7, 8, 10 on a log-scaled y axis.
    #[arg(long)]
    log_y: bool,
    /// Print no notes and no summary (errors still print).
    #[arg(long, short)]
    quiet: bool,
}

/// Runs `figures`.
pub fn run(args: FiguresArgs, process: &super::Process) -> Result<()> {
    if let Some(w) = &args.late_steps {
        if w.is_empty() {
            return Err(Error::option(
                "--late-steps",
                format!("{w} is an empty window"),
            ));
        }
    }
    let opts = FigureOptions {
        late_steps: args.late_steps,
        loss_metric: args.metric.clone(),
        smooth: args.smooth,
        log_y: args.log_y,
        ..FigureOptions::default()
    };
    let report = plot::write_figures(&args.results, &args.out, &opts, &process.staging)?;
    if !args.quiet {
        for note in &report.notes {
            eprintln!("asa-analyze: note: {note}");
        }
        eprintln!(
            "asa-analyze: wrote {} files to {}",
            report.files.len(),
            args.out.display()
        );
    }
    Ok(())
}
