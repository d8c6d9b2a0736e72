//! `report RESULTS_DIR... --out report.html`: one self-contained HTML page of the folders'
//! tables (see [`asa_figures::report`]). Glue only.

use std::path::PathBuf;

use clap::Args;

use asa_core::error::Result;

/// `report RESULTS_DIR... --out FILE`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Folders with exported tables (from analyze, watch, merge, curves ...); several are
    /// shown side by side.
    #[arg(required = true, value_name = "RESULTS_DIR")]
    results: Vec<PathBuf>,
    /// The HTML file to write (whole, or not at all).
    #[arg(long, value_name = "FILE", default_value = "report.html")]
    out: PathBuf,
    /// No summary on stderr.
    #[arg(long, short)]
    quiet: bool,
}

/// Runs `report`.
pub fn run(args: ReportArgs) -> Result<()> {
    let (bytes, notes) = asa_figures::report::write(&args.results, &args.out)?;
    if !args.quiet {
        for note in notes {
            eprintln!("asa-analyze: report: {note}");
        }
        eprintln!(
            "asa-analyze: wrote {} ({:.1} MB, self-contained: open it in a browser)",
            args.out.display(),
            bytes as f64 / 1e6
        );
    }
    Ok(())
}
