//! An in-memory tidy table: named, typed columns of equal length.

/// One column's values. `None` is written as an empty cell (CSV) or null (Parquet).
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// Text values (labels, metric names, stats).
    Str(Vec<Option<String>>),
    /// Integer values (layers, heads, steps, counts).
    Int(Vec<Option<i64>>),
    /// Floating-point values (NaN stays NaN).
    Float(Vec<Option<f64>>),
    /// Bytes (a shard's saved metric states; Parquet only).
    Bytes(Vec<Option<Vec<u8>>>),
}

impl Column {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Column::Str(v) => v.len(),
            Column::Int(v) => v.len(),
            Column::Float(v) => v.len(),
            Column::Bytes(v) => v.len(),
        }
    }

    /// True when the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `other`'s values; `false` (nothing appended) when its type differs.
    pub fn append(&mut self, other: Column) -> bool {
        match (self, other) {
            (Column::Str(a), Column::Str(b)) => a.extend(b),
            (Column::Int(a), Column::Int(b)) => a.extend(b),
            (Column::Float(a), Column::Float(b)) => a.extend(b),
            (Column::Bytes(a), Column::Bytes(b)) => a.extend(b),
            _ => return false,
        }
        true
    }
}

/// A named table whose columns all have the same length.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// File stem under the output folder, e.g. `attention`.
    pub name: String,
    /// Column names and values, in output order.
    pub columns: Vec<(String, Column)>,
}

impl Table {
    /// A table with the given file stem and columns (all of one length).
    pub fn new(name: impl Into<String>, columns: Vec<(&str, Column)>) -> Self {
        let columns: Vec<(String, Column)> = columns
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect();
        debug_assert!(columns.windows(2).all(|w| w[0].1.len() == w[1].1.len()));
        Table {
            name: name.into(),
            columns,
        }
    }

    /// Number of rows.
    pub fn height(&self) -> usize {
        self.columns.first().map_or(0, |(_, c)| c.len())
    }

    /// Appends the rows of `other`, a table of the same columns (name, order and type).
    pub fn append(&mut self, other: Table) {
        let same = self.columns.len() == other.columns.len()
            && self
                .columns
                .iter()
                .zip(&other.columns)
                .all(|(a, b)| a.0 == b.0);
        assert!(same, "table {}: appended rows of other columns", self.name);
        for ((_, a), (_, b)) in self.columns.iter_mut().zip(other.columns) {
            assert!(a.append(b), "table {}: a column of another type", self.name);
        }
    }

    /// The column called `name`, if any.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
}
