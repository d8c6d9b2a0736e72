//! The block maps of a report, compact (issue 39: a 32k run at `--map-size 256` has 600
//! maps of 32,896 cells, 19.7 M rows of `block_map.parquet`): each map quantised to a byte
//! per cell ([`super::quantise`]), gzip-compressed and written in base64 on its own, so the
//! page inflates only the maps of the head it shows, when it shows it. The index (per model
//! the block edges, once; per map its scale and where its text lies in the blob) goes into
//! the page's data; the blob into a script element of its own.
//!
//! The files are read twice, row by row ([`asa_tables::for_each_row`]), never as a
//! table: first the block edges of every model, then the values into their maps.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{json, Value};

use super::quantise::quantise;
use asa_core::error::{Error, Result};
use asa_tables::{for_each_row, Cell};

/// Rows of block_map a report embeds at most (twice a 32k run's at `--map-size 256`): past
/// them the page would outgrow a browser tab, and the maps stay in block_map.parquet.
pub const BLOCK_MAP_ROWS_SHOWN: usize = 40_000_000;

/// The encoded maps: `index` for the page's data, `blob` for its own script element.
#[derive(Debug, Default)]
pub struct BlockMaps {
    /// `{model: {"bounds": [G + 1 positions], "maps": [{layer, head, stat, scale, lo, hi,
    /// clipped, error, at, len}]}}`; `head` null for the map over heads; the map's text is
    /// `blob[at .. at + len]`.
    pub index: Value,
    /// Every map's gzip-compressed row differences in base64, one after another.
    pub blob: String,
    /// What was left out, and why.
    pub notes: Vec<String>,
}

/// One map's key: model, layer, head (`None`: over heads), stat.
type Key = (String, i64, Option<i64>, String);

/// Reads the `block_map` tables `files` (Parquet) and encodes their maps.
pub fn encode(files: &[PathBuf]) -> Result<BlockMaps> {
    let mut out = BlockMaps::default();
    let (bounds, rows) = block_edges(files)?;
    if rows > BLOCK_MAP_ROWS_SHOWN {
        out.notes.push(format!(
            "block_map has {rows} rows, more than the {BLOCK_MAP_ROWS_SHOWN} a report embeds: the maps are left out (read block_map.parquet, or analyse with a smaller --map-size)"
        ));
        out.index = json!({});
        return Ok(out);
    }
    let maps = cells(files, &bounds, rows)?;
    let mut index = serde_json::Map::new();
    for (model, edges) in &bounds {
        index.insert(model.clone(), json!({ "bounds": edges, "maps": [] }));
    }
    for ((model, layer, head, stat), cells) in maps {
        let q = quantise(&cells);
        let text = gzip_base64(&q.row_differences())?;
        let entry = json!({
            "layer": layer, "head": head, "stat": stat, "scale": q.scale, "lo": q.lo, "hi": q.hi,
            "clipped": q.clipped, "error": q.error, "at": out.blob.len(), "len": text.len(),
        });
        out.blob.push_str(&text);
        if let Some(Value::Array(list)) = index.get_mut(&model).map(|m| &mut m["maps"]) {
            list.push(entry);
        }
    }
    out.index = Value::Object(index);
    Ok(out)
}

/// Per model, the block edges `q_lo` of every block and the last `q_hi`; and the rows read.
fn block_edges(files: &[PathBuf]) -> Result<(BTreeMap<String, Vec<i64>>, usize)> {
    let mut edges: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut rows = 0;
    for file in files {
        for_each_row(file, &["model", "q_lo", "q_hi"], |r| {
            rows += 1;
            let (Cell::Str(model), Some(lo), Some(hi)) = (r[0], r[1].int(), r[2].int()) else {
                return Err(bad_row(file, "a row without its model or query block"));
            };
            let set = edges.entry(model.to_string()).or_default();
            set.insert(lo);
            set.insert(hi);
            Ok(())
        })?;
    }
    let edges = edges
        .into_iter()
        .map(|(m, s)| (m, s.into_iter().collect()))
        .collect();
    Ok((edges, rows))
}

/// How many map cells a table of `rows` rows may lay out: a map's cells are its rows (a
/// visible cell, one row a stat), so a table whose block edges would lay out far more cells
/// than it has rows (an edited file) is refused before the maps are allocated.
fn cell_budget(rows: usize) -> usize {
    rows.saturating_mul(CELLS_A_ROW).saturating_add(1 << 20)
}

/// Laid-out cells a row may stand for: a sliding window's map has rows only near its
/// diagonal, ~4 % of the cells at a window of 1/50 of the sequence.
const CELLS_A_ROW: usize = 32;

/// Every map's cells in the order of [`super::quantise`], `None` where no row gave a value;
/// refused when the maps would lay out more cells than `rows` rows describe
/// ([`cell_budget`]).
fn cells(
    files: &[PathBuf],
    bounds: &BTreeMap<String, Vec<i64>>,
    rows: usize,
) -> Result<BTreeMap<Key, Vec<Option<f64>>>> {
    let mut maps: BTreeMap<Key, Vec<Option<f64>>> = BTreeMap::new();
    let mut laid_out: usize = 0;
    let columns = ["model", "layer", "head", "q_lo", "k_lo", "stat", "value"];
    for file in files {
        for_each_row(file, &columns, |r| {
            let (Cell::Str(model), Some(layer), Cell::Str(stat)) = (r[0], r[1].int(), r[5]) else {
                return Err(bad_row(file, "a row without its model, layer or stat"));
            };
            let Some(edges) = bounds.get(model) else {
                return Err(bad_row(file, "a model the first reading did not see"));
            };
            let block = |p: Option<i64>| p.and_then(|p| edges.binary_search(&p).ok());
            let (Some(a), Some(b)) = (block(r[3].int()), block(r[4].int())) else {
                return Err(bad_row(file, "a cell off its model's block edges"));
            };
            if b > a || a + 1 >= edges.len() {
                return Err(bad_row(file, "a cell above the diagonal"));
            }
            let g = edges.len() - 1;
            let key = (model.to_string(), layer, r[2].int(), stat.to_string());
            if !maps.contains_key(&key) {
                laid_out = laid_out.saturating_add(g.saturating_mul(g + 1) / 2);
                if laid_out > cell_budget(rows) {
                    return Err(bad_row(
                        file,
                        &format!("its {} maps of {g} x {g} blocks would lay out {laid_out} cells, far more than its {rows} rows describe", maps.len() + 1),
                    ));
                }
            }
            let map = maps
                .entry(key)
                .or_insert_with(|| vec![None; g * (g + 1) / 2]);
            map[a * (a + 1) / 2 + b] = Some(r[6].float().unwrap_or(f64::NAN));
            Ok(())
        })?;
    }
    Ok(maps)
}

fn bad_row(file: &Path, what: &str) -> Error {
    Error::input(file, format!("block_map: {what}"))
}

fn gzip_base64(bytes: &[u8]) -> Result<String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    gz.write_all(bytes)
        .and_then(|_| gz.finish())
        .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
        .map_err(|e| Error::failed("cannot compress a block map", e))
}
