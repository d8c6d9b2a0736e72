//! `asa-analyze inspect CKPT`: what a checkpoint is, without running it (the facts come
//! from `analysis::inspect`; this prints them).

use std::path::PathBuf;

use super::stdout::{print_json, with_stdout};
use asa_analysis::analysis::inspect::{json_report, open, stored_dtypes, table_rows};
use asa_core::error::Result;

/// Arguments of `inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Checkpoint folder (config.json + safetensors) or GGUF file.
    pub checkpoint: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// JSON of "convention name": "checkpoint name" patterns (see `analyze --help`).
    #[arg(long, value_name = "FILE")]
    pub weight_map: Option<PathBuf>,
}

/// Prints architecture, variant and shapes of a checkpoint.
pub fn run(args: InspectArgs) -> Result<()> {
    let ckpt = open(&args.checkpoint, args.weight_map.as_deref())?;
    let stored = stored_dtypes(&ckpt);
    if args.json {
        return print_json(&json_report(&args.checkpoint, &ckpt, &stored));
    }
    let rows = table_rows(&args.checkpoint, &ckpt, &stored);
    let note = ckpt.variant.unused_weights.as_ref();
    print_rows(&rows, note)
}

/// The rows of the table `inspect` prints, and the note of unused variant weights.
fn print_rows(rows: &[(&'static str, String)], note: Option<&String>) -> Result<()> {
    with_stdout(|out| {
        for (key, value) in rows {
            writeln!(out, "{key:<14} {value}")?;
        }
        if let Some(note) = note {
            writeln!(out, "{:<14} {note}", "note")?;
        }
        Ok(())
    })
}
