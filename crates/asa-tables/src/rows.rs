//! Reading a large table row by row, a slice of rows at a time, without building a
//! [`super::Table`] of it: `block_map.parquet` of a long run has about 20 million rows, which
//! as a `Table` (a `String` per text cell, an `Option<i64>` per number) takes gigabytes.

use std::path::Path;

use polars::prelude::{DataFrame, DataType, ParquetReader, SerReader};

use super::parquet_claims::Decoded;
use asa_core::error::{Error, InputKind, Result};

/// Rows read from the file at once: bounds the memory a read takes whatever the table's size.
const SLICE_ROWS: usize = 1 << 20;

/// One cell of a row, as [`for_each_row`] passes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// An empty cell.
    Null,
    /// An integer column's value.
    Int(i64),
    /// A float column's value.
    Float(f64),
    /// A text column's value.
    Str(&'a str),
}

impl Cell<'_> {
    /// The integer, `None` for an empty cell or another kind.
    pub fn int(self) -> Option<i64> {
        match self {
            Cell::Int(i) => Some(i),
            _ => None,
        }
    }

    /// The number (an integer as a float too), `None` for an empty cell or text.
    pub fn float(self) -> Option<f64> {
        match self {
            Cell::Float(x) => Some(x),
            Cell::Int(i) => Some(i as f64),
            _ => None,
        }
    }
}

/// Calls `row` with the cells of `columns` (in that order) for every row of the Parquet
/// table `path`, in file order. Integer columns come as [`Cell::Int`], float columns as
/// [`Cell::Float`], text as [`Cell::Str`]; a missing column is an error naming it.
pub fn for_each_row(
    path: &Path,
    columns: &[&str],
    mut row: impl FnMut(&[Cell<'_>]) -> Result<()>,
) -> Result<()> {
    let open = || std::fs::File::open(path).map_err(|e| Error::io(path, e));
    let fail = |e| Error::invalid(path, "cannot read Parquet table", e).about(InputKind::Table);
    let guarded = |read: &mut dyn FnMut() -> Result<DataFrame>| {
        super::damaged::read_guarded(path, "cannot read Parquet table", read)
    };
    let total = super::damaged::read_guarded(path, "cannot read Parquet table", || {
        let mut file = open()?;
        super::parquet_claims::check(path, &mut file, Decoded::RowGroupAtATime)?;
        ParquetReader::new(file).num_rows().map_err(fail)
    })?;
    let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let mut start = 0;
    while start < total {
        let frame = guarded(&mut || {
            ParquetReader::new(open()?)
                .with_columns(Some(names.clone()))
                .with_slice(Some((start, SLICE_ROWS)))
                .finish()
                .map_err(fail)
        })?;
        rows_of(&frame, columns, path, &mut row)?;
        start += SLICE_ROWS;
    }
    Ok(())
}

/// One column's values, typed once per slice.
enum Values {
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Str(Vec<Option<String>>),
}

fn rows_of(
    frame: &DataFrame,
    columns: &[&str],
    path: &Path,
    row: &mut impl FnMut(&[Cell<'_>]) -> Result<()>,
) -> Result<()> {
    let values = columns
        .iter()
        .map(|name| typed(frame, name, path))
        .collect::<Result<Vec<_>>>()?;
    for (name, column) in columns.iter().zip(&values) {
        super::parquet_claims::check_decoded(path, name, column.len(), frame.height())?;
    }
    let mut cells = vec![Cell::Null; columns.len()];
    for i in 0..frame.height() {
        for (cell, column) in cells.iter_mut().zip(&values) {
            *cell = match column {
                Values::Int(v) => v[i].map_or(Cell::Null, Cell::Int),
                Values::Float(v) => v[i].map_or(Cell::Null, Cell::Float),
                Values::Str(v) => v[i].as_deref().map_or(Cell::Null, Cell::Str),
            };
        }
        row(&cells)?;
    }
    Ok(())
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Str(v) => v.len(),
        }
    }
}

fn typed(frame: &DataFrame, name: &str, path: &Path) -> Result<Values> {
    let fail = |e: polars::prelude::PolarsError| {
        Error::invalid(path, format!("column {name}"), e).about(InputKind::Table)
    };
    let col = frame.column(name).map_err(fail)?;
    let dtype = col.dtype();
    Ok(if dtype.is_integer() {
        let c = col.cast(&DataType::Int64).map_err(fail)?;
        Values::Int(c.i64().map_err(fail)?.iter().collect())
    } else if dtype.is_float() {
        let c = col.cast(&DataType::Float64).map_err(fail)?;
        Values::Float(c.f64().map_err(fail)?.iter().collect())
    } else {
        let c = col.cast(&DataType::String).map_err(fail)?;
        let v = c.str().map_err(fail)?.iter().map(|s| s.map(str::to_string));
        Values::Str(v.collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_table, Column, Format, Table};

    #[test]
    fn every_row_comes_in_order_with_its_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let table = Table::new(
            "t",
            vec![
                ("model", Column::Str(vec![Some("a".into()), None])),
                ("head", Column::Int(vec![None, Some(2)])),
                ("value", Column::Float(vec![Some(0.5), Some(f64::NAN)])),
            ],
        );
        write_table(&table, &path, Format::Parquet).unwrap();
        let mut seen = Vec::new();
        for_each_row(&path, &["value", "model", "head"], |r| {
            seen.push(format!("{:?}", r));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                "[Float(0.5), Str(\"a\"), Null]",
                "[Float(NaN), Null, Int(2)]"
            ]
        );
        let err = for_each_row(&path, &["nope"], |_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
