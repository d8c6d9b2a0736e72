//! The exported tables figures are drawn from (SPEC section 6), read from one or more
//! results folders and merged by table name, with lenient typed access: a column polars
//! inferred as text (all empty, `NaN`) still reads as numbers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use asa_core::error::{Error, Result};
use asa_record::record::RunRecord;
use asa_tables::schema::{self, ColumnKind, TableSchema};
use asa_tables::{read_table, Column, Table};

use super::FigureError;

/// The tables figures read (file stems `.csv` or `.parquet`), each checked against its
/// schema's required columns ([`asa_tables::schema`], SPEC section 6).
pub const TABLES: [&TableSchema; 12] = [
    &schema::ATTENTION,
    &schema::WEIGHT_SUM_HIST,
    &schema::HEATMAP,
    &schema::QUERY_PROFILE,
    &schema::DISTANCE_PROFILE,
    &schema::NLL_POSITION,
    &schema::QK_SERIES,
    &schema::ATTENTION_SERIES,
    &schema::GRAD_STATS,
    &schema::SPIKES,
    &schema::SPIKE_STEPS,
    &schema::CURVES,
];

/// Integer columns with a least value: 1-based layers and heads, counts and positions
/// from 0 (heatmap positions outside the map are skipped by Fig. 9 with a note).
const MINIMUM: [(&str, f64); 7] = [
    ("layer", 1.0),
    ("head", 1.0),
    ("count", 0.0),
    ("position", 0.0),
    ("n", 0.0),
    ("n_excluded", 0.0),
    ("ddof", 0.0),
];

/// Every known table found in the results folders.
#[derive(Debug, Default)]
pub struct Results {
    tables: BTreeMap<String, Table>,
    /// Where each table came from, for notes.
    pub sources: BTreeMap<String, Vec<PathBuf>>,
    /// Model label -> detected attention variant, from the folders' run.json (colours
    /// follow the method, not the label's wording, where it is known).
    pub variants: BTreeMap<String, String>,
    /// Model label -> analysed window length (run.json's `seq_len`): no query-key
    /// distance reaches it.
    pub seq_lens: BTreeMap<String, i64>,
}

impl Results {
    /// Reads the known tables of every folder; a table present in several folders is
    /// concatenated (e.g. two `analyze` outputs). A folder that does not exist is an error.
    pub fn load(dirs: &[PathBuf]) -> Result<Results> {
        let mut results = Results::default();
        let mut seen = std::collections::HashSet::new();
        for dir in dirs {
            // the same folder named twice is read once
            if !seen.insert(dir.canonicalize().unwrap_or_else(|_| dir.clone())) {
                continue;
            }
            if !dir.is_dir() {
                return Err(Error::input(dir, "not a results folder"));
            }
            for declared in TABLES {
                let Some(path) = table_path(dir, declared.name) else {
                    continue;
                };
                let table = read_table(&path)?;
                check_contract(&table, declared, &path)?;
                results.insert(table, path)?;
            }
            let (variants, seq_lens) = run_models(dir);
            results.variants.extend(variants);
            results.seq_lens.extend(seq_lens);
        }
        Ok(results)
    }

    /// These results with `tables` added beside them (tables `figures` does not read, shown
    /// by the report); a table of a name already held replaces it.
    pub fn with_tables(mut self, tables: impl IntoIterator<Item = Table>) -> Results {
        for t in tables {
            let path = PathBuf::from(format!("{}.csv", t.name));
            self.sources.entry(t.name.clone()).or_default().push(path);
            self.tables.insert(t.name.clone(), t);
        }
        self
    }

    /// Builds results from tables in memory (tests, `analyze --figures`).
    pub fn from_tables(tables: impl IntoIterator<Item = Table>) -> Results {
        let mut results = Results::default();
        for t in tables {
            let path = PathBuf::from(format!("{}.csv", t.name));
            results
                .insert(t, path)
                .expect("tables built in memory have distinct names");
        }
        results
    }

    /// Adds `table` read from `path`; an error where a model or run label of it is already
    /// in the same table from another folder (the rows of two runs would be drawn as one).
    fn insert(&mut self, table: Table, path: PathBuf) -> Result<()> {
        let name = table.name.clone();
        if let Some(old) = self.tables.get(&name) {
            let seen = table_labels(old);
            if let Some(label) = table_labels(&table).into_iter().find(|l| seen.contains(l)) {
                let other = self.sources[&name]
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(Error::input(
                    &path,
                    format!("label `{label}` is also in {other}; give the models or runs distinct labels (label=path) before drawing them together"),
                ));
            }
        }
        self.sources.entry(name.clone()).or_default().push(path);
        let merged = match self.tables.remove(&name) {
            Some(old) => concat(old, table),
            None => table,
        };
        self.tables.insert(name, merged);
        Ok(())
    }

    /// The table called `name`, if any folder had it.
    pub fn get(&self, name: &str) -> Option<&Table> {
        self.tables.get(name)
    }

    /// Names of the tables found.
    pub fn names(&self) -> Vec<&str> {
        self.tables.keys().map(String::as_str).collect()
    }

    /// Every model or run label in any table (for one palette across all figures).
    pub fn labels(&self) -> Vec<String> {
        let mut labels = Vec::new();
        for t in self.tables.values() {
            for col in ["model", "run"] {
                if let Some(v) = text(t, col) {
                    labels.extend(v.into_iter().flatten());
                }
            }
        }
        labels.sort();
        labels.dedup();
        labels
    }
}

/// Label -> variant and label -> window length of the models `analyze` recorded in
/// `dir/run.json`; empty when the folder has none or it is not readable (the tables alone
/// still draw every figure).
fn run_models(dir: &Path) -> (BTreeMap<String, String>, BTreeMap<String, i64>) {
    let (mut variants, mut seq_lens) = (BTreeMap::new(), BTreeMap::new());
    let Ok(text) = asa_core::input::read_text(&dir.join("run.json"), asa_core::input::JSON_RECORD)
    else {
        return (variants, seq_lens);
    };
    let Ok(run) = serde_json::from_str::<RunRecord>(&text) else {
        return (variants, seq_lens);
    };
    for m in run.models.into_iter().filter(|m| !m.model.is_empty()) {
        if m.seq_len > 0 {
            seq_lens.insert(m.model.clone(), m.seq_len as i64);
        }
        if !m.variant.is_empty() {
            variants.insert(m.model, m.variant);
        }
    }
    (variants, seq_lens)
}

/// The model and run labels in a table's `model` / `run` column.
fn table_labels(t: &Table) -> std::collections::BTreeSet<String> {
    ["model", "run"]
        .iter()
        .filter_map(|col| text(t, col))
        .flatten()
        .flatten()
        .collect()
}

/// `dir/name.csv`, else `dir/name.parquet`.
fn table_path(dir: &Path, name: &str) -> Option<PathBuf> {
    ["csv", "parquet"]
        .iter()
        .map(|ext| dir.join(format!("{name}.{ext}")))
        .find(|p| p.is_file())
}

/// Rows of `b` appended to `a`, columns matched by name (missing cells empty; an integer
/// column meeting a float one becomes float, anything else meeting text becomes text).
fn concat(a: Table, b: Table) -> Table {
    let (ha, hb) = (a.height(), b.height());
    let mut names: Vec<String> = a.columns.iter().map(|(n, _)| n.clone()).collect();
    for (n, _) in &b.columns {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let columns = names
        .into_iter()
        .map(|n| {
            let ca = a.column(&n);
            let cb = b.column(&n);
            let col = match (ca, cb) {
                (Some(Column::Int(x)), Some(Column::Int(y))) => Column::Int(join(x, y)),
                (
                    Some(Column::Int(_) | Column::Float(_)),
                    Some(Column::Int(_) | Column::Float(_)),
                ) => Column::Float(join(&numbers(ca.unwrap()), &numbers(cb.unwrap()))),
                (Some(_), Some(_)) => {
                    Column::Str(join(&strings(ca.unwrap()), &strings(cb.unwrap())))
                }
                (Some(c), None) => pad(c, hb, false),
                (None, Some(c)) => pad(c, ha, true),
                (None, None) => Column::Str(Vec::new()),
            };
            (n, col)
        })
        .collect();
    Table {
        name: a.name,
        columns,
    }
}

fn join<T: Clone>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().chain(b).cloned().collect()
}

/// `c` with `n` empty cells after it (or before it when `before`).
fn pad(c: &Column, n: usize, before: bool) -> Column {
    fn fill<T: Clone>(v: &[Option<T>], n: usize, before: bool) -> Vec<Option<T>> {
        let empty = std::iter::repeat_n(None, n);
        if before {
            empty.chain(v.iter().cloned()).collect()
        } else {
            v.iter().cloned().chain(empty).collect()
        }
    }
    match c {
        Column::Str(v) => Column::Str(fill(v, n, before)),
        Column::Int(v) => Column::Int(fill(v, n, before)),
        Column::Float(v) => Column::Float(fill(v, n, before)),
        Column::Bytes(v) => Column::Bytes(fill(v, n, before)),
    }
}

fn strings(c: &Column) -> Vec<Option<String>> {
    match c {
        Column::Str(v) => v.clone(),
        Column::Int(v) => v.iter().map(|x| x.map(|x| x.to_string())).collect(),
        Column::Float(v) => v.iter().map(|x| x.map(|x| x.to_string())).collect(),
        Column::Bytes(v) => v.iter().map(|_| None).collect(),
    }
}

/// Values past this magnitude are drawn as gaps, like NaN: an axis spanning them would
/// overflow (1.7e308 - -1.7e308 is infinite) and its ticks never end.
pub const DRAWABLE: f64 = 1e300;

fn numbers(c: &Column) -> Vec<Option<f64>> {
    let drawable = |x: f64| if x.abs() > DRAWABLE { f64::NAN } else { x };
    match c {
        Column::Float(v) => v.iter().map(|x| x.map(drawable)).collect(),
        Column::Int(v) => v.iter().map(|x| x.map(|x| x as f64)).collect(),
        Column::Str(v) => v
            .iter()
            .map(|x| x.as_deref().and_then(|s| parse_number(s).ok().flatten()))
            .map(|x| x.map(drawable))
            .collect(),
        Column::Bytes(v) => v.iter().map(|_| None).collect(),
    }
}

/// A text cell as a number: empty is `None`, `NaN` and `inf` are kept; `Err` for text
/// that is no number.
fn parse_number(s: &str) -> std::result::Result<Option<f64>, ()> {
    let s = s.trim();
    match s.to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "nan" => Ok(Some(f64::NAN)),
        "inf" | "+inf" | "infinity" => Ok(Some(f64::INFINITY)),
        "-inf" | "-infinity" => Ok(Some(f64::NEG_INFINITY)),
        _ => s.parse().map(Some).map_err(|_| ()),
    }
}

/// Checks a table against its schema's required columns (SPEC section 6): every one is
/// there; a model or run label is never empty (the row would belong to no line); a cell
/// that is no number, or a non-integer where the schema has integers (layer, step, ...),
/// is an error naming the file, the line and the column; empty number cells are allowed.
fn check_contract(table: &Table, schema: &TableSchema, path: &Path) -> Result<()> {
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    check_columns(table, schema, path, csv)?;
    let at = |row: usize| match csv {
        true => format!("line {}", row + 2),
        false => format!("row {}", row + 1),
    };
    for label in ["model", "run"] {
        let Some(cells) = text(table, label) else {
            continue;
        };
        if let Some(row) = cells
            .iter()
            .position(|c| c.as_deref().is_none_or(|c| c.trim().is_empty()))
        {
            return Err(Error::input(
                path,
                format!("{}, column `{label}`: the label is empty", at(row)),
            ));
        }
    }
    let numeric = schema.required().filter(|c| c.kind != ColumnKind::Text);
    for spec in numeric {
        let name = spec.name;
        let Some(col) = table.column(name) else {
            continue;
        };
        let bad = |row: usize, cell: String, what: &str| {
            Error::input(
                path,
                format!("{}, column `{name}`: `{cell}` is not {what}", at(row)),
            )
        };
        if let Column::Str(v) = col {
            for (row, cell) in v.iter().enumerate() {
                if let Some(cell) = cell.as_deref().filter(|c| parse_number(c).is_err()) {
                    return Err(bad(row, cell.to_string(), "a number"));
                }
            }
        }
        if spec.kind != ColumnKind::Int {
            continue;
        }
        let least = MINIMUM.iter().find(|(c, _)| *c == name).map(|m| m.1);
        for (row, x) in numbers(col).into_iter().enumerate() {
            let Some(x) = x else { continue };
            if !(x.is_finite() && x.fract() == 0.0) {
                return Err(bad(row, x.to_string(), "an integer"));
            }
            if let Some(least) = least.filter(|&least| x < least) {
                return Err(bad(row, x.to_string(), &format!("an integer >= {least}")));
            }
        }
    }
    check_nonnegative(table, path, at)
}

/// Number columns that can hold no negative value (a standard deviation, a variance, a MAD),
/// by table; a negative one is refused naming its line and column (NaN and empty cells are
/// gaps, not values).
const NONNEGATIVE: [(&str, &str); 3] = [
    ("grad_stats", "std"),
    ("grad_stats", "var"),
    ("spikes", "mad"),
];

fn check_nonnegative(table: &Table, path: &Path, at: impl Fn(usize) -> String) -> Result<()> {
    for (_, name) in NONNEGATIVE.iter().filter(|(t, _)| *t == table.name) {
        let Some(values) = num(table, name) else {
            continue;
        };
        if let Some((row, x)) = values
            .iter()
            .enumerate()
            .find_map(|(row, x)| x.filter(|x| *x < 0.0).map(|x| (row, x)))
        {
            return Err(Error::input(
                path,
                format!(
                    "{}, column `{name}`: {x} is negative (it is >= 0 by definition)",
                    at(row)
                ),
            ));
        }
    }
    Ok(())
}

/// An error naming the first required column of `schema` that `table` lacks.
fn check_columns(table: &Table, schema: &TableSchema, path: &Path, csv: bool) -> Result<()> {
    let Some(missing) = schema.required().find(|c| table.column(c.name).is_none()) else {
        return Ok(());
    };
    let header = match csv {
        true => "line 1 (the header)",
        false => "the schema",
    };
    let all: Vec<&str> = schema.required().map(|c| c.name).collect();
    Err(Error::input(
        path,
        format!(
            "{header}: no column `{}`; a {} table has {} (SPEC section 6)",
            missing.name,
            table.name,
            all.join(", ")
        ),
    ))
}

/// Column `name` as text (numbers printed), or `None` when the table lacks it.
pub fn text(t: &Table, name: &str) -> Option<Vec<Option<String>>> {
    t.column(name).map(strings)
}

/// Column `name` as numbers (empty cells `None`, `NaN` kept), or `None` when missing.
pub fn num(t: &Table, name: &str) -> Option<Vec<Option<f64>>> {
    t.column(name).map(numbers)
}

/// Column `name` as integers (non-integral numbers `None`), or `None` when missing.
pub fn int(t: &Table, name: &str) -> Option<Vec<Option<i64>>> {
    t.column(name).map(|c| match c {
        Column::Int(v) => v.clone(),
        c => numbers(c)
            .into_iter()
            .map(|x| {
                x.filter(|x| x.is_finite() && x.fract() == 0.0)
                    .map(|x| x as i64)
            })
            .collect(),
    })
}

/// Fetches required columns, or says which one a figure misses.
pub struct Cols<'a> {
    table: &'a Table,
    file: &'a str,
}

impl<'a> Cols<'a> {
    /// Access to `table`, named `file` in messages.
    pub fn new(table: &'a Table, file: &'a str) -> Self {
        Cols { table, file }
    }

    fn missing(&self, name: &str) -> FigureError {
        FigureError::NoColumn {
            file: self.file.to_string(),
            column: name.to_string(),
        }
    }

    /// A required text column.
    pub fn text(&self, name: &str) -> std::result::Result<Vec<Option<String>>, FigureError> {
        text(self.table, name).ok_or_else(|| self.missing(name))
    }

    /// A required number column.
    pub fn num(&self, name: &str) -> std::result::Result<Vec<Option<f64>>, FigureError> {
        num(self.table, name).ok_or_else(|| self.missing(name))
    }

    /// A required integer column.
    pub fn int(&self, name: &str) -> std::result::Result<Vec<Option<i64>>, FigureError> {
        int(self.table, name).ok_or_else(|| self.missing(name))
    }

    /// An optional integer column (all empty when missing).
    pub fn int_or_empty(&self, name: &str) -> Vec<Option<i64>> {
        int(self.table, name).unwrap_or_else(|| vec![None; self.table.height()])
    }

    /// An optional number column (all empty when missing).
    pub fn num_or_empty(&self, name: &str) -> Vec<Option<f64>> {
        num(self.table, name).unwrap_or_else(|| vec![None; self.table.height()])
    }

    /// An optional text column (all empty when missing).
    pub fn text_or_empty(&self, name: &str) -> Vec<Option<String>> {
        text(self.table, name).unwrap_or_else(|| vec![None; self.table.height()])
    }
}

/// One row of `attention.csv` (model, metric, layer, head, stat, value).
#[derive(Debug, Clone)]
pub struct AttnRow {
    pub model: String,
    pub metric: String,
    /// 1-based; `None` for a summary over layers.
    pub layer: Option<i64>,
    /// 1-based; `None` for a summary over heads.
    pub head: Option<i64>,
    /// `mean` when the table has no stat column.
    pub stat: String,
    /// `NaN` kept (callers count and skip it); empty cells are NaN too.
    pub value: f64,
}

/// The rows of `attention.csv` whose metric is `metric`.
pub fn attention_rows(
    res: &Results,
    metric: &str,
) -> std::result::Result<Vec<AttnRow>, FigureError> {
    let t = res
        .get("attention")
        .ok_or(FigureError::no_table("attention"))?;
    let c = Cols::new(t, "attention.csv");
    let (model, metrics, value) = (c.text("model")?, c.text("metric")?, c.num("value")?);
    let (layer, head, stat) = (
        c.int_or_empty("layer"),
        c.int_or_empty("head"),
        c.text_or_empty("stat"),
    );
    let mut rows = Vec::new();
    for i in 0..t.height() {
        if metrics[i].as_deref() != Some(metric) {
            continue;
        }
        let Some(m) = &model[i] else { continue };
        rows.push(AttnRow {
            model: m.clone(),
            metric: metric.to_string(),
            layer: layer[i],
            head: head[i],
            stat: stat[i].clone().unwrap_or_else(|| "mean".into()),
            value: value[i].unwrap_or(f64::NAN),
        });
    }
    if rows.is_empty() {
        return Err(FigureError::no_rows(
            "attention.csv",
            format!("{metric} rows"),
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_matches_columns_by_name() {
        let a = Table::new(
            "t",
            vec![
                ("model", Column::Str(vec![Some("a".into())])),
                ("value", Column::Int(vec![Some(1)])),
            ],
        );
        let b = Table::new(
            "t",
            vec![
                ("value", Column::Float(vec![Some(2.5)])),
                ("extra", Column::Str(vec![Some("x".into())])),
            ],
        );
        let c = concat(a, b);
        assert_eq!(c.height(), 2);
        assert_eq!(num(&c, "value").unwrap(), vec![Some(1.0), Some(2.5)]);
        assert_eq!(text(&c, "model").unwrap(), vec![Some("a".into()), None]);
        assert_eq!(text(&c, "extra").unwrap(), vec![None, Some("x".into())]);
    }

    #[test]
    fn text_columns_read_as_numbers() {
        let t = Table::new(
            "t",
            vec![(
                "v",
                Column::Str(vec![Some("NaN".into()), None, Some("2".into())]),
            )],
        );
        let v = num(&t, "v").unwrap();
        assert!(v[0].unwrap().is_nan());
        assert_eq!(v[1], None);
        assert_eq!(int(&t, "v").unwrap(), vec![None, None, Some(2)]);
    }
}
