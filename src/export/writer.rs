//! Writing tables with polars, atomically: every file of a run is staged in a hidden
//! folder inside `--out` and renamed into place only when the whole run succeeded.

use std::fs;
use std::path::{Path, PathBuf};

use polars::prelude::{CsvWriter, DataFrame, NamedFrom, ParquetWriter, SerWriter, Series};

use super::table::{Column, Table};
use crate::error::{Error, Result};

/// Output file format (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Comma-separated values with a header.
    #[default]
    Csv,
    /// Apache Parquet.
    Parquet,
}

impl Format {
    /// File extension without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }
}

fn to_frame(table: &Table) -> Result<DataFrame> {
    let columns = table
        .columns
        .iter()
        .map(|(name, col)| {
            let series = match col {
                Column::Str(v) => Series::new(name.as_str().into(), v.as_slice()),
                Column::Int(v) => Series::new(name.as_str().into(), v.as_slice()),
                Column::Float(v) => Series::new(name.as_str().into(), v.as_slice()),
            };
            series.into()
        })
        .collect::<Vec<_>>();
    DataFrame::new(table.height(), columns)
        .map_err(|e| Error::usage(format!("table {}: {e}", table.name)))
}

/// Writes `table` to `path` in `format` (not atomic by itself; see [`OutputDir`]).
pub fn write_table(table: &Table, path: &Path, format: Format) -> Result<()> {
    let mut frame = to_frame(table)?;
    let file = fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let result = match format {
        Format::Csv => CsvWriter::new(file).include_header(true).finish(&mut frame),
        Format::Parquet => ParquetWriter::new(file).finish(&mut frame).map(|_| ()),
    };
    result.map_err(|e| Error::input(path, format!("cannot write table: {e}")))
}

/// An output folder whose files appear all at once, or not at all.
///
/// Files are written into a hidden staging folder inside the target; [`OutputDir::commit`]
/// renames them into place. Dropping an uncommitted `OutputDir` removes the staging folder,
/// and the folders `create` made for it where they are still empty.
pub struct OutputDir {
    target: PathBuf,
    /// The outermost folder `create` made (`target` or a parent), if it made any.
    made: Option<PathBuf>,
    staging: PathBuf,
    format: Format,
    files: Vec<String>,
    committed: bool,
}

impl OutputDir {
    /// Creates `target` (and parents) and a fresh staging folder inside it.
    pub fn create(target: &Path, format: Format) -> Result<Self> {
        if target.exists() && !target.is_dir() {
            return Err(Error::input(
                target,
                "the output folder is a file; name a folder with --out",
            ));
        }
        let made = target
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .last()
            .map(Path::to_path_buf);
        fs::create_dir_all(target).map_err(|e| Error::io(target, e))?;
        let staging = target.join(format!(".asa-staging-{}", std::process::id()));
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
        }
        fs::create_dir(&staging).map_err(|e| Error::io(target, e))?;
        Ok(OutputDir {
            target: target.to_path_buf(),
            made,
            staging,
            format,
            files: Vec::new(),
            committed: false,
        })
    }

    /// The final folder.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The hidden folder files are staged in until [`OutputDir::commit`].
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Stages a table as `<name>.<ext>`.
    pub fn write(&mut self, table: &Table) -> Result<()> {
        let file = format!("{}.{}", table.name, self.format.extension());
        write_table(table, &self.staging.join(&file), self.format)?;
        self.files.push(file);
        Ok(())
    }

    /// Stages an arbitrary file (e.g. `run.json`, a Markdown table) with its bytes.
    pub fn write_bytes(&mut self, file: &str, bytes: &[u8]) -> Result<()> {
        let path = self.staging.join(file);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
        self.files.push(file.to_string());
        Ok(())
    }

    /// Path inside the staging folder for a file a caller writes itself (e.g. a figure);
    /// the file is moved into place on commit.
    pub fn staged_path(&mut self, file: &str) -> Result<PathBuf> {
        let path = self.staging.join(file);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        self.files.push(file.to_string());
        Ok(path)
    }

    /// Moves every staged file into the target folder; returns their final paths.
    pub fn commit(mut self) -> Result<Vec<PathBuf>> {
        let mut done = Vec::new();
        for file in &self.files {
            let from = self.staging.join(file);
            let to = self.target.join(file);
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
            done.push(to);
        }
        self.committed = true;
        let _ = fs::remove_dir_all(&self.staging);
        Ok(done)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.staging);
            if let Some(made) = &self.made {
                // innermost first; remove_dir leaves a folder that is not empty
                for dir in self.target.ancestors() {
                    if fs::remove_dir(dir).is_err() || dir == made {
                        break;
                    }
                }
            }
        }
    }
}
