//! Writing a run's results as `analyze --out DIR` does: every section 6 table and run.json
//! staged, the figures rendered from the staged tables when asked (so tables and figures
//! appear together or not at all), then everything moved into place. The CLI, `demo`,
//! `merge` and the Python package's `Result.write()` all write through here. It sits above
//! `analysis` and `plot`, so that `analysis` need not import `plot`, which reads
//! `analysis::record`.

use std::path::{Path, PathBuf};

use asa_analysis::analysis::record::RunRecord;
use asa_analysis::analysis::RunOutput;
use asa_core::error::Result;
use asa_tables::{Format, OutputDir, StagingWatch};

/// What a commit moved into place, and the figures' notes (skipped figures, dropped data).
#[derive(Debug, Default)]
pub struct Committed {
    pub files: Vec<PathBuf>,
    pub notes: Vec<String>,
}

/// How [`write_results`] writes: the tables' `format`, and the figures rendered from them
/// (under `figures/`) when `figures`.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    pub format: Format,
    pub figures: bool,
}

/// Writes `output`'s tables and its run.json `record` into `dir` as `options` say,
/// atomically; the staging folders are registered with `watch` while they live.
pub fn write_results(
    output: &RunOutput,
    record: &RunRecord,
    dir: &Path,
    options: WriteOptions,
    watch: &StagingWatch,
) -> Result<Committed> {
    let mut out = OutputDir::create(dir, options.format, watch)?;
    stage_tables(&mut out, output, record)?;
    commit_tables(out, options.figures)
}

/// Stages a run's tables and its run.json `record` in `out` (moved into place on commit).
pub fn stage_tables(out: &mut OutputDir, output: &RunOutput, record: &RunRecord) -> Result<()> {
    for table in output.tables() {
        out.write(&table)?;
    }
    out.write_bytes("run.json", record.to_json()?.as_bytes())
}

/// The folder of `--out` that `--figures` draws into.
pub const FIGURES: &str = "figures";

/// Moves staged tables into place, rendering the figures from them first when `figures`:
/// staged in the same folder under `figures/`, so that tables and figures are one commit
/// (a signal lands before or after it, never between the tables and the figures).
pub fn commit_tables(mut out: OutputDir, figures: bool) -> Result<Committed> {
    let mut notes = Vec::new();
    if figures {
        let tables = [out.staging().to_path_buf()];
        notes = asa_figures::plot::render_all_in(&tables, &mut out, FIGURES)?.notes;
    }
    let files = out.commit()?;
    Ok(Committed { files, notes })
}
