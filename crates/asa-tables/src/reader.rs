//! Reading tables back (`figures` re-renders from exported tables alone): CSV or Parquet
//! by extension, through polars, into the crate's own [`Table`].
//!
//! Column types follow what polars infers: integers become [`Column::Int`], floats
//! [`Column::Float`], everything else (strings, booleans, all-null columns) [`Column::Str`].
//! CSV schemas are inferred from every row, so an empty `layer` cell in the first rows
//! does not make a later integer unreadable.

use std::path::Path;

use polars::prelude::{
    Column as PlColumn, CsvReadOptions, DataFrame, DataType, ParquetReader, SerReader,
};

use super::parquet_claims::Decoded;
use super::table::{Column, Table};
use asa_core::error::{Error, InputKind, Result};

/// Reads `path` (`.csv` or `.parquet`) into a [`Table`] named after the file stem.
pub fn read_table(path: &Path) -> Result<Table> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let frame = match ext.as_deref() {
        Some("csv") => read_csv(path)?,
        Some("parquet") => {
            let mut file = asa_core::input::open(path)?;
            super::damaged::read_guarded(path, "cannot read Parquet table", || {
                super::parquet_claims::check(path, &mut file, Decoded::Whole)?;
                ParquetReader::new(file).finish().map_err(|e| {
                    Error::invalid(path, "cannot read Parquet table", e).about(InputKind::Table)
                })
            })?
        }
        _ => {
            return Err(Error::table(
                path,
                "unknown table format (expected .csv or .parquet)",
            ))
        }
    };
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let columns = frame
        .columns()
        .iter()
        .map(|c| Ok((c.name().to_string(), convert(c, path)?)))
        .collect::<Result<Vec<_>>>()?;
    for (name, column) in &columns {
        super::parquet_claims::check_decoded(path, name, column.len(), frame.height())?;
    }
    Ok(Table { name, columns })
}

/// Reads `path` as the declared table `schema`: a `stack` column folded into `model`
/// ([`super::schema::fold_stack`]), a column with no value at all (which reads back as
/// text) gets its declared kind, then the table is checked against the schema.
pub fn read_declared(path: &Path, schema: &super::TableSchema) -> Result<Table> {
    // a captured model's stacks are models of their own to every reader
    let mut table = super::schema::fold_stack(read_table(path)?);
    for (name, column) in &mut table.columns {
        if let (Some(spec), Column::Str(values)) = (schema.column(name), &*column) {
            if values.iter().all(Option::is_none) {
                *column = match spec.kind {
                    super::ColumnKind::Int => Column::Int(vec![None; values.len()]),
                    super::ColumnKind::Float => Column::Float(vec![None; values.len()]),
                    super::ColumnKind::Text => continue,
                };
            }
        }
    }
    schema
        .check(&table)
        .map_err(|e| Error::table(path, e.to_string()))?;
    Ok(table)
}

fn read_csv(path: &Path) -> Result<DataFrame> {
    let mut file = asa_core::input::open(path)?;
    check_last_line(path, &mut file)?;
    CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(None)
        .into_reader_with_file_handle(file)
        .finish()
        .map_err(|e| Error::invalid(path, "cannot read CSV table", e).about(InputKind::Table))
}

/// Refuses a CSV whose last line has no newline: a table is written whole, so a file that
/// stops inside a line was cut off (a copy or a write that did not finish), and its last row
/// may hold a shortened number that reads as a valid one. Leaves `file` at its start.
fn check_last_line(path: &Path, file: &mut std::fs::File) -> Result<()> {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len == 0 {
        return Ok(());
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::End(-1))
        .and_then(|_| file.read_exact(&mut last))
        .and_then(|_| file.seek(SeekFrom::Start(0)))
        .map_err(|e| Error::io(path, e))?;
    if last[0] == b'\n' {
        return Ok(());
    }
    // counted in pieces: the table may be larger than memory cares to hold twice
    let mut lines = 1;
    let mut reader = std::io::BufReader::new(&*file);
    loop {
        let chunk = reader.fill_buf().map_err(|e| Error::io(path, e))?;
        if chunk.is_empty() {
            break;
        }
        lines += chunk.iter().filter(|&&b| b == b'\n').count();
        let n = chunk.len();
        reader.consume(n);
    }
    Err(Error::table(
        path,
        format!(
            "line {lines} stops without a newline: the table looks cut off (a truncated copy?)"
        ),
    ))
}

fn convert(col: &PlColumn, path: &Path) -> Result<Column> {
    let fail = |e: polars::prelude::PolarsError| {
        Error::invalid(path, format!("column {}", col.name()), e).about(InputKind::Table)
    };
    let dtype = col.dtype();
    if dtype.is_integer() {
        let c = col.cast(&DataType::Int64).map_err(fail)?;
        return Ok(Column::Int(c.i64().map_err(fail)?.iter().collect()));
    }
    if dtype.is_float() {
        let c = col.cast(&DataType::Float64).map_err(fail)?;
        return Ok(Column::Float(c.f64().map_err(fail)?.iter().collect()));
    }
    if matches!(dtype, DataType::Binary) {
        let values = col
            .binary()
            .map_err(fail)?
            .iter()
            .map(|v| v.map(<[u8]>::to_vec))
            .collect();
        return Ok(Column::Bytes(values));
    }
    let c = col.cast(&DataType::String).map_err(fail)?;
    let values = c
        .str()
        .map_err(fail)?
        .iter()
        .map(|v| v.map(str::to_string))
        .collect();
    Ok(Column::Str(values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_table, Format};

    #[test]
    fn round_trip_csv_and_parquet() {
        let dir = tempfile::tempdir().unwrap();
        let table = Table::new(
            "attention",
            vec![
                (
                    "model",
                    Column::Str(vec![Some("base".into()), Some("asa".into())]),
                ),
                ("layer", Column::Int(vec![None, Some(2)])),
                ("value", Column::Float(vec![Some(0.5), Some(f64::NAN)])),
            ],
        );
        for format in [Format::Csv, Format::Parquet] {
            let path = dir.path().join(format!("attention.{}", format.extension()));
            write_table(&table, &path, format).unwrap();
            let back = read_table(&path).unwrap();
            assert_eq!(back.name, "attention");
            assert_eq!(back.column("model"), table.column("model"));
            assert_eq!(back.column("layer"), table.column("layer"));
            let Some(Column::Float(v)) = back.column("value") else {
                panic!("value is not a float column: {:?}", back.column("value"));
            };
            assert_eq!(v[0], Some(0.5));
            assert!(v[1].unwrap().is_nan());
        }
    }
}
