//! `report`: one self-contained HTML page of one or several results folders (SPEC section
//! 11): the page's code (`page.js`, `page.css`), the charting library (Apache ECharts,
//! vendored under `vendor/` with its licence) and the tables' data (gzip, base64) all inside
//! the file; it makes no request when opened. Every label and text from the tables reaches
//! the page as data and is set as text, never as markup.

pub mod block_maps;
pub mod payload;
pub mod quantise;

use std::path::{Path, PathBuf};

use crate::plot::data::Results;
use asa_core::error::{Error, Result};
use asa_record::record::RunRecord;
pub use payload::Folder;

const TEMPLATE: &str = include_str!("page.html");
const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");
/// Apache ECharts 6.1.0 (Apache-2.0, `vendor/LICENSE-echarts`, `vendor/NOTICE-echarts`).
const ECHARTS: &str = include_str!("vendor/echarts-6.1.0.min.js");
const ECHARTS_NOTICE: &str = include_str!("vendor/NOTICE-echarts");

/// Tables the report shows beyond those `figures` reads: per-key and per-head results, and
/// Tables 1-3, a short run's tokens (block maps come apart, compact: [`block_maps`]).
const MORE_TABLES: [&str; 4] = ["key_received", "head_roles", "paper_tables", "tokens"];

/// What a report shows: the folders' tables, their block maps, their run records, and notes
/// on what it left out.
pub struct Contents {
    pub results: Results,
    pub block_maps: block_maps::BlockMaps,
    pub folders: Vec<Folder>,
    pub notes: Vec<String>,
}

/// The folders' tables and run records, read for a report.
pub fn load(dirs: &[PathBuf]) -> Result<Contents> {
    if dirs.is_empty() {
        return Err(Error::usage("report needs at least one results folder"));
    }
    let results = Results::load(dirs)?;
    let mut more: Vec<asa_tables::Table> = Vec::new();
    for name in MORE_TABLES {
        let mut joined: Option<asa_tables::Table> = None;
        for dir in dirs {
            let Some(path) = ["csv", "parquet"]
                .iter()
                .map(|e| dir.join(format!("{name}.{e}")))
                .find(|p| p.is_file())
            else {
                continue;
            };
            let table = match asa_tables::schema::schema(name) {
                Some(schema) => asa_tables::read_declared(&path, schema)?,
                None => asa_tables::read_table(&path)?,
            };
            match &mut joined {
                None => joined = Some(table),
                Some(t) => t.append(table),
            }
        }
        more.extend(joined);
    }
    let results = results.with_tables(more);
    for name in results.names() {
        if let Some(table) = results.get(name) {
            check_grid(name, table, &dirs[0])?;
        }
    }
    let map_files: Vec<PathBuf> = dirs
        .iter()
        .map(|d| d.join("block_map.parquet"))
        .filter(|p| p.is_file())
        .collect();
    let block_maps = block_maps::encode(&map_files)?;
    let folders = dirs
        .iter()
        .map(|dir| {
            let path = dir.join("run.json");
            let record = match asa_core::input::read_text(&path, asa_core::input::JSON_RECORD) {
                Ok(text) => Some(RunRecord::parse(&text, &path)?),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    None
                }
                Err(e) => return Err(e),
            };
            Ok(Folder {
                path: dir.clone(),
                record,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if results.names().is_empty() && map_files.is_empty() {
        return Err(Error::input(
            &dirs[0],
            "no tables to report (expected the --out folder of analyze, watch, merge, curves ...)",
        ));
    }
    Ok(Contents {
        results,
        notes: block_maps.notes.clone(),
        block_maps,
        folders,
    })
}

/// Refuses a table whose layer and head numbers would make the page's layers x heads grid
/// far larger than the table's rows describe (a forged layer 1e9 hung the browser): the
/// grid's cells are bounded by the rows, as the block maps' are.
fn check_grid(name: &str, table: &asa_tables::Table, dir: &Path) -> Result<()> {
    use asa_tables::Column;

    let largest = |column: &str| match table.column(column) {
        Some(Column::Int(values)) => values.iter().flatten().copied().max().unwrap_or(0),
        _ => 0,
    };
    let (layers, heads) = (
        largest("layer").max(0) as u128,
        largest("head").max(0) as u128,
    );
    let rows = table.height() as u128;
    if layers.max(1) * heads.max(1) > 64 * rows + 65_536 {
        return Err(Error::input(
            dir,
            format!("{name}: layer {layers} and head {heads} would draw a grid far larger than its {rows} rows describe"),
        ));
    }
    Ok(())
}

/// The page's HTML.
pub fn html(contents: &Contents) -> Result<String> {
    let mut data = payload::data(&contents.results, &contents.folders)?;
    data["notes"] = serde_json::json!(contents.notes);
    data["block_maps"] = contents.block_maps.index.clone();
    let data = payload::packed(&data)?;
    let notice = ECHARTS_NOTICE.replace("*/", "* /");
    // the data first: base64 holds none of the code's placeholders
    Ok(TEMPLATE
        .replace("@data@", &data)
        .replace("@maps@", &contents.block_maps.blob)
        .replace("/*@style@*/", STYLE)
        .replace(
            "/*@echarts@*/",
            &format!("/*\n{notice}\nLicensed under the Apache License, Version 2.0 */\n{ECHARTS}"),
        )
        .replace("/*@page@*/", SCRIPT))
}

/// Writes the report of `dirs` to `out` whole (through a temporary file beside it: a failed
/// or interrupted run leaves no partial page).
pub fn write(dirs: &[PathBuf], out: &Path) -> Result<(usize, Vec<String>)> {
    check_destination(dirs, out)?;
    let contents = load(dirs)?;
    let page = html(&contents)?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (mut tmp, mut file) = tempfile_in(&parent, out)?;
    std::io::Write::write_all(&mut file, page.as_bytes()).map_err(|e| Error::io(&tmp.0, e))?;
    drop(file);
    // the destination is checked again: it may have changed while the page was made
    check_destination(dirs, out)?;
    std::fs::rename(&tmp.0, out).map_err(|e| Error::io(out, e))?;
    tmp.1 = false;
    Ok((page.len(), contents.notes))
}

/// Refuses a destination the page must not replace: anything but a regular file or
/// nothing (a folder, a device, a FIFO, a socket, a symlink), and a table of the results
/// being read (`--out res/attention.csv`).
fn check_destination(dirs: &[PathBuf], out: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(out, e)),
    };
    if !meta.file_type().is_file() {
        return Err(Error::input(
            out,
            "the report's destination exists and is not a regular file (a folder, device, FIFO, socket or link): name a new .html file",
        ));
    }
    let real = out.canonicalize().map_err(|e| Error::io(out, e))?;
    let table = real
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "csv" | "parquet" | "json"));
    let inside = dirs
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .any(|d| real.starts_with(&d));
    if table && inside {
        return Err(Error::input(
            out,
            "the report's destination is a file of the results it reads: name a new .html file",
        ));
    }
    Ok(())
}

/// A temporary path beside `out`, removed on drop unless taken (its `.1` cleared).
struct TempPath(PathBuf, bool);

impl Drop for TempPath {
    fn drop(&mut self) {
        if self.1 {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// A new temporary file beside `out`, created exclusively (`O_CREAT | O_EXCL`: a planted
/// symlink or FIFO of its name is never opened through, another name is tried).
fn tempfile_in(dir: &Path, out: &Path) -> Result<(TempPath, std::fs::File)> {
    if !dir.is_dir() {
        return Err(Error::input(dir, "no such folder for the report"));
    }
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report.html".into());
    let mut last = None;
    for attempt in 0..16 {
        let path = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((TempPath(path, true), file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((path, e)),
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    match last {
        Some((path, e)) => Err(Error::io(&path, e)),
        None => Err(Error::input(
            dir,
            "no temporary name for the report could be made",
        )),
    }
}

#[cfg(test)]
mod write_tests {
    use super::*;

    /// Issue 54: a symlink or FIFO planted at the temporary file's name is never opened
    /// through: the next name is taken.
    #[cfg(unix)]
    #[test]
    fn a_planted_temporary_name_is_not_opened_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let out = dir.path().join("page.html");
        let planted = dir
            .path()
            .join(format!(".page.html.{}.0.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let (tmp, mut file) = tempfile_in(dir.path(), &out).unwrap();
        assert_ne!(tmp.0, planted);
        std::io::Write::write_all(&mut file, b"page").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        drop(file);
        drop(tmp);
        assert!(
            planted.symlink_metadata().is_ok(),
            "the planted link is left alone"
        );
    }
}
