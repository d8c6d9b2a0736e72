//! The data a report page embeds: every table of the results folders, column by column, and
//! each folder's run record, as JSON compressed with gzip and written in base64 (the page
//! inflates it with the browser's own `DecompressionStream`; nothing is fetched).

use std::io::Write;
use std::path::PathBuf;

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::plot::data::Results;
use asa_core::error::{Error, Result};
use asa_record::record::RunRecord;
use asa_tables::{Column, Table};

/// One results folder as the report names it: its path and its run.json, when it has one.
#[derive(Debug, Clone)]
pub struct Folder {
    pub path: PathBuf,
    pub record: Option<RunRecord>,
}

/// The page's data: `{"folders": [{"path", "record"}], "tables": {name: {column: [...]}}}`.
pub fn data(results: &Results, folders: &[Folder]) -> Result<Value> {
    let mut tables = Map::new();
    for name in results.names() {
        if let Some(table) = results.get(name) {
            tables.insert(name.to_string(), columns(table));
        }
    }
    let folders: Vec<Value> = folders
        .iter()
        .map(|f| {
            let record = match &f.record {
                Some(r) => {
                    serde_json::to_value(r).map_err(|e| Error::failed("cannot encode run.json", e))
                }
                None => Ok(Value::Null),
            }?;
            Ok(json!({ "path": f.path.display().to_string(), "record": record }))
        })
        .collect::<Result<_>>()?;
    Ok(json!({ "folders": folders, "tables": tables }))
}

/// A table as `{column: [values]}` (null for an empty cell; NaN and infinities as the
/// strings "NaN", "Infinity", "-Infinity", which JSON cannot hold as numbers).
fn columns(table: &Table) -> Value {
    let mut out = Map::new();
    for (name, column) in &table.columns {
        let values: Vec<Value> = match column {
            Column::Str(v) => v
                .iter()
                .map(|x| x.as_ref().map_or(Value::Null, |s| json!(s)))
                .collect(),
            Column::Int(v) => v
                .iter()
                .map(|x| x.map_or(Value::Null, |i| json!(i)))
                .collect(),
            Column::Float(v) => v.iter().map(|x| x.map_or(Value::Null, float)).collect(),
            Column::Bytes(_) => continue,
        };
        out.insert(name.clone(), Value::Array(values));
    }
    Value::Object(out)
}

fn float(x: f64) -> Value {
    match x {
        x if x.is_nan() => json!("NaN"),
        x if x == f64::INFINITY => json!("Infinity"),
        x if x == f64::NEG_INFINITY => json!("-Infinity"),
        x => json!(x),
    }
}

/// `value` as gzip-compressed JSON in base64 (the page's `<script>` can hold no `<` of it).
pub fn packed(value: &Value) -> Result<String> {
    let text =
        serde_json::to_vec(value).map_err(|e| Error::failed("cannot encode the report data", e))?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    gz.write_all(&text)
        .and_then(|_| gz.finish())
        .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
        .map_err(|e| Error::failed("cannot compress the report data", e))
}
