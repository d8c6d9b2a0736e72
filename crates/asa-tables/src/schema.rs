//! The schema of every exported table of SPEC section 6, declared once: its file stem and
//! its columns (name, kind, whether readers require it), in output order. Writers build
//! their tables through [`TableSchema::build`] (a column the schema does not declare, out
//! of order or of another kind, is a bug and panics), the figures validate what they read
//! against [`TableSchema::required`] (`plot::data`), and the Python frames are checked with
//! [`TableSchema::check`].

use super::table::{Column, Table};

/// How a table differs from its schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The table was checked against the schema of another table.
    #[error("table {table} checked against the {schema} schema")]
    OtherTable { table: String, schema: &'static str },
    /// The column names differ from those declared, or their order does.
    #[error("table {table}: columns {} where its schema declares {}", found.join(","), declared.join(","))]
    Columns {
        table: &'static str,
        found: Vec<String>,
        declared: Vec<&'static str>,
    },
    /// A column holds another kind of value than declared.
    #[error("table {table}: column {column} is not of kind {kind:?}")]
    Kind {
        table: &'static str,
        column: &'static str,
        kind: ColumnKind,
    },
}

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Text (labels, metric names, stats).
    Text,
    /// Floating-point numbers (NaN kept; empty cells allowed).
    Float,
    /// Integers (layers, heads, steps, counts; empty cells allowed).
    Int,
}

impl ColumnKind {
    /// The kind of `column` (`None` for bytes, which no section 6 table has).
    pub fn of(column: &Column) -> Option<ColumnKind> {
        match column {
            Column::Str(_) => Some(ColumnKind::Text),
            Column::Float(_) => Some(ColumnKind::Float),
            Column::Int(_) => Some(ColumnKind::Int),
            Column::Bytes(_) => None,
        }
    }
}

/// One declared column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: &'static str,
    pub kind: ColumnKind,
    /// Readers (the figures) refuse a table without it; an optional column is detail the
    /// writer adds that a hand-made or older table may lack.
    pub required: bool,
}

/// A table's file stem and its columns, in output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSchema {
    pub name: &'static str,
    pub columns: &'static [ColumnSpec],
}

const fn req(name: &'static str, kind: ColumnKind) -> ColumnSpec {
    ColumnSpec {
        name,
        kind,
        required: true,
    }
}

const fn opt(name: &'static str, kind: ColumnKind) -> ColumnSpec {
    ColumnSpec {
        name,
        kind,
        required: false,
    }
}

use ColumnKind::{Float, Int, Text};

/// `attention`: one value per model, metric, layer (1-based; empty for a summary), head
/// (1-based; empty for a per-layer or summary row) and stat.
pub const ATTENTION: TableSchema = TableSchema {
    name: "attention",
    columns: &[
        req("model", Text),
        req("metric", Text),
        req("layer", Int),
        req("head", Int),
        req("stat", Text),
        req("value", Float),
    ],
};

/// `weight_sum_hist`: the histogram of attention-weight row sums.
pub const WEIGHT_SUM_HIST: TableSchema = TableSchema {
    name: "weight_sum_hist",
    columns: &[
        req("model", Text),
        req("bin_lo", Float),
        req("bin_hi", Float),
        req("count", Int),
    ],
};

/// `heatmap`: the top-left corner of one layer's attention map, a row per (query, key).
pub const HEATMAP: TableSchema = TableSchema {
    name: "heatmap",
    columns: &[
        req("model", Text),
        req("layer", Int),
        req("query", Int),
        req("key", Int),
        req("value", Float),
    ],
};

/// `query_profile`: one query's attention over the keys, with its sink mass.
pub const QUERY_PROFILE: TableSchema = TableSchema {
    name: "query_profile",
    columns: &[
        req("model", Text),
        req("layer", Int),
        req("query", Int),
        req("key", Int),
        req("value", Float),
        req("sink_mass", Float),
    ],
};

/// `distance_profile`: attention mass per query-key distance band, per layer (head
/// empty) and per head.
pub const DISTANCE_PROFILE: TableSchema = TableSchema {
    name: "distance_profile",
    columns: &[
        req("model", Text),
        req("layer", Int),
        req("head", Int),
        req("band", Text),
        req("value", Float),
    ],
};

/// `nll_position`: mean NLL per target position (1-based).
pub const NLL_POSITION: TableSchema = TableSchema {
    name: "nll_position",
    columns: &[req("model", Text), req("position", Int), req("nll", Float)],
};

/// `nll_bins`: mean NLL over decade bins of positions (`1-10`, `10-100`, ...).
pub const NLL_BINS: TableSchema = TableSchema {
    name: "nll_bins",
    columns: &[
        req("model", Text),
        req("positions", Text),
        req("nll", Float),
    ],
};

/// `qk_series`: the mean query-key logit per checkpoint step.
pub const QK_SERIES: TableSchema = TableSchema {
    name: "qk_series",
    columns: &[
        req("model", Text),
        req("step", Int),
        req("qk_mean", Float),
        req("qk_abs_mean", Float),
    ],
};

/// `attention_series`: the attention rows of each analysed step of a training run
/// (callbacks, `watch`, checkpoint series): model, step, then `attention`'s columns.
pub const ATTENTION_SERIES: TableSchema = TableSchema {
    name: "attention_series",
    columns: &[
        req("model", Text),
        req("step", Int),
        req("metric", Text),
        req("layer", Int),
        req("head", Int),
        req("stat", Text),
        req("value", Float),
    ],
};

/// `key_received`: attention each key position receives, exact below 30 then decade bins
/// `[key_lo, key_hi)`; head empty: mean over heads.
pub const KEY_RECEIVED: TableSchema = TableSchema {
    name: "key_received",
    columns: &[
        req("model", Text),
        req("layer", Int),
        req("head", Int),
        req("key_lo", Int),
        req("key_hi", Int),
        req("stat", Text),
        req("value", Float),
    ],
};

/// `head_roles`: per model, layer and head (1-based) the head's role (sink, local,
/// previous_token, induction or mixed; docs/head-roles.md) and the scores it was decided
/// from; induction_score empty where the induction probe did not run.
pub const HEAD_ROLES: TableSchema = TableSchema {
    name: "head_roles",
    columns: &[
        req("model", Text),
        req("layer", Int),
        req("head", Int),
        req("role", Text),
        req("first_token", Float),
        req("local_mass", Float),
        req("prev_token", Float),
        req("induction_score", Float),
    ],
};

/// `block_map`: the attention map at a fixed resolution, a row per (layer, head, cell
/// with a visible pair, stat): query positions `[q_lo, q_hi)`, key positions `[k_lo, k_hi)`,
/// stat `mean` or `max`; head empty: over heads. Written as Parquet whatever `--format`
/// says ([`TableSchema::parquet_only`]): it is large.
pub const BLOCK_MAP: TableSchema = TableSchema {
    name: "block_map",
    columns: &[
        req("model", Text),
        req("layer", Int),
        req("head", Int),
        req("q_lo", Int),
        req("q_hi", Int),
        req("k_lo", Int),
        req("k_hi", Int),
        req("stat", Text),
        req("value", Float),
    ],
};

/// `grad_stats` (paper Table 4): statistics of a log metric over a step window.
pub const GRAD_STATS: TableSchema = TableSchema {
    name: "grad_stats",
    columns: &[
        req("run", Text),
        req("metric", Text),
        req("step_start", Int),
        req("step_end", Int),
        req("n", Int),
        req("mean", Float),
        req("std", Float),
        req("var", Float),
        req("cv", Float),
        req("ddof", Int),
        req("n_excluded", Int),
        opt("n_missing", Int),
        opt("n_nan", Int),
        opt("n_inf", Int),
        opt("n_duplicate", Int),
        opt("source", Text),
        opt("first_step", Int),
        opt("last_step", Int),
    ],
};

/// `spikes` (paper Table 5): spike counts above median + k * MAD, a row per run and k.
pub const SPIKES: TableSchema = TableSchema {
    name: "spikes",
    columns: &[
        req("run", Text),
        req("metric", Text),
        req("k", Float),
        req("mad_scale", Float),
        req("median", Float),
        req("mad", Float),
        req("tau", Float),
        req("count", Int),
        opt("mad_raw", Float),
        opt("n", Int),
        opt("step_start", Int),
        opt("step_end", Int),
        opt("n_excluded", Int),
        opt("n_missing", Int),
        opt("n_nan", Int),
        opt("n_inf", Int),
        opt("n_duplicate", Int),
        opt("source", Text),
    ],
};

/// `spike_steps`: the steps above each threshold.
pub const SPIKE_STEPS: TableSchema = TableSchema {
    name: "spike_steps",
    columns: &[
        req("run", Text),
        req("metric", Text),
        req("k", Float),
        req("step", Int),
        req("value", Float),
    ],
};

/// `curves`: a log metric per step, raw and smoothed.
pub const CURVES: TableSchema = TableSchema {
    name: "curves",
    columns: &[
        req("run", Text),
        req("metric", Text),
        req("step", Int),
        req("value", Float),
        req("smoothed", Float),
    ],
};

/// `paper_tables`: the cells of the paper's Tables 1-3 (`tables`).
pub const PAPER_TABLES: TableSchema = TableSchema {
    name: "paper_tables",
    columns: &[
        req("table", Int),
        req("size", Text),
        req("method", Text),
        req("method_name", Text),
        req("column", Text),
        req("value", Float),
        req("stderr", Float),
        req("unit", Text),
        req("source", Text),
        req("missing", Text),
    ],
};

/// `tokens`: the first window's tokens as text (a short run's, for the report's tokens
/// view; `analysis::tokens`): model, position (0-based), token_id, text.
pub const TOKENS: TableSchema = TableSchema {
    name: "tokens",
    columns: &[
        req("model", Text),
        req("position", Int),
        req("token_id", Int),
        req("text", Text),
    ],
};

/// Every declared table.
pub const SCHEMAS: [&TableSchema; 18] = [
    &ATTENTION,
    &WEIGHT_SUM_HIST,
    &HEATMAP,
    &QUERY_PROFILE,
    &DISTANCE_PROFILE,
    &NLL_POSITION,
    &NLL_BINS,
    &QK_SERIES,
    &ATTENTION_SERIES,
    &KEY_RECEIVED,
    &HEAD_ROLES,
    &BLOCK_MAP,
    &GRAD_STATS,
    &SPIKES,
    &SPIKE_STEPS,
    &CURVES,
    &PAPER_TABLES,
    &TOKENS,
];

/// The schema of the table with file stem `name`, if it is a declared one.
pub fn schema(name: &str) -> Option<&'static TableSchema> {
    SCHEMAS.iter().copied().find(|s| s.name == name)
}

impl TableSchema {
    /// The declared column called `name`.
    pub fn column(&self, name: &str) -> Option<&'static ColumnSpec> {
        self.columns.iter().find(|c| c.name == name)
    }

    /// The columns readers require, in order.
    pub fn required(&self) -> impl Iterator<Item = &'static ColumnSpec> {
        self.columns.iter().filter(|c| c.required)
    }

    /// The column names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.columns.iter().map(|c| c.name).collect()
    }

    /// This table from its columns; they must be exactly the declared ones, in order and
    /// of the declared kinds (a writer's bug otherwise: panics).
    pub fn build(&self, columns: Vec<(&str, Column)>) -> Table {
        let table = Table::new(self.name, columns);
        if let Err(e) = self.check(&table) {
            panic!("{e}");
        }
        table
    }

    /// `Ok` when `table` has exactly the declared columns, in order, of the declared kinds
    /// (and a text [`STACK`] column after `model`, in the tables of a captured model's
    /// stacks).
    pub fn check(&self, table: &Table) -> Result<(), SchemaError> {
        if table.name != self.name {
            return Err(SchemaError::OtherTable {
                table: table.name.clone(),
                schema: self.name,
            });
        }
        let stacked = stack_column(table).is_some();
        let columns: Vec<&(String, Column)> = table
            .columns
            .iter()
            .enumerate()
            .filter(|&(i, _)| !(stacked && i == 1))
            .map(|(_, c)| c)
            .collect();
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        if names != self.names() {
            return Err(SchemaError::Columns {
                table: self.name,
                found: names.into_iter().map(str::to_string).collect(),
                declared: self.names(),
            });
        }
        for (spec, (_, column)) in self.columns.iter().zip(columns) {
            if ColumnKind::of(column) != Some(spec.kind) {
                return Err(SchemaError::Kind {
                    table: self.name,
                    column: spec.name,
                    kind: spec.kind,
                });
            }
        }
        Ok(())
    }
}

impl TableSchema {
    /// Whether the table is written as Parquet whatever the run's `--format` (SPEC section
    /// 6: `block_map.parquet`, too large for CSV).
    pub fn parquet_only(&self) -> bool {
        self.name == BLOCK_MAP.name
    }
}

/// The column that keeps the stacks of one captured model apart (a VLM's `vision_tower`
/// and `language_model`): text, right after `model`, in the tables of a capture of several
/// stacks only (a table of one model's stack has none).
pub const STACK: &str = "stack";

/// `table`'s [`STACK`] column: text, right after `model`.
fn stack_column(table: &Table) -> Option<&Vec<Option<String>>> {
    match table.columns.as_slice() {
        [(model, _), (stack, Column::Str(values)), ..] if model == "model" && stack == STACK => {
            Some(values)
        }
        _ => None,
    }
}

/// Puts a [`STACK`] column holding `stack` after `model` (a table without `model` is left
/// as it is).
pub fn insert_stack(table: &mut Table, stack: &str) {
    if table.columns.first().is_some_and(|(n, _)| n == "model") {
        let rows = vec![Some(stack.to_string()); table.height()];
        table
            .columns
            .insert(1, (STACK.to_string(), Column::Str(rows)));
    }
}

/// The table with its [`STACK`] column folded into `model` (`model/stack`), so that every
/// reader of a table sees each stack as a model of its own.
pub fn fold_stack(mut table: Table) -> Table {
    if stack_column(&table).is_none() {
        return table;
    }
    let (_, stack) = table.columns.remove(1);
    if let (Column::Str(stacks), Some((_, Column::Str(models)))) =
        (stack, table.columns.first_mut())
    {
        for (model, stack) in models.iter_mut().zip(stacks) {
            if let (Some(m), Some(s)) = (model.as_mut(), stack.filter(|s| !s.is_empty())) {
                *m = format!("{m}/{s}");
            }
        }
    }
    table
}

/// `Ok` when `table` matches its schema, or has none (tables outside section 6).
pub fn check_declared(table: &Table) -> Result<(), SchemaError> {
    schema(&table.name).map_or(Ok(()), |s| s.check(table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_column_passes_after_model_and_folds_into_it() {
        let heatmap = |model: &str| {
            HEATMAP.build(vec![
                ("model", Column::Str(vec![Some(model.to_string())])),
                ("layer", Column::Int(vec![Some(1)])),
                ("query", Column::Int(vec![Some(0)])),
                ("key", Column::Int(vec![Some(0)])),
                ("value", Column::Float(vec![Some(1.0)])),
            ])
        };
        let mut table = heatmap("m");
        insert_stack(&mut table, "vision_tower");
        assert_eq!(table.columns[1].0, "stack");
        assert!(HEATMAP.check(&table).is_ok());
        assert_eq!(fold_stack(table), heatmap("m/vision_tower"));
        // anywhere else, or of another kind, it is a column the schema does not declare
        let mut moved = heatmap("m");
        moved
            .columns
            .push((STACK.to_string(), Column::Str(vec![Some("v".into())])));
        assert!(HEATMAP.check(&moved).is_err());
        let mut ints = heatmap("m");
        ints.columns
            .insert(1, (STACK.to_string(), Column::Int(vec![Some(1)])));
        assert!(HEATMAP.check(&ints).is_err());
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = SCHEMAS.iter().map(|s| s.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        for s in SCHEMAS {
            let mut cols = s.names();
            cols.sort();
            cols.dedup();
            assert_eq!(cols.len(), s.columns.len(), "{}", s.name);
        }
    }

    #[test]
    fn build_refuses_an_undeclared_column() {
        let ok = std::panic::catch_unwind(|| {
            NLL_BINS.build(vec![
                ("model", Column::Str(vec![])),
                ("positions", Column::Str(vec![])),
                ("nll", Column::Float(vec![])),
            ])
        });
        assert!(ok.is_ok());
        let extra = std::panic::catch_unwind(|| {
            NLL_BINS.build(vec![
                ("model", Column::Str(vec![])),
                ("positions", Column::Str(vec![])),
                ("nll", Column::Float(vec![])),
                ("extra", Column::Float(vec![])),
            ])
        });
        assert!(extra.is_err());
        let kind = std::panic::catch_unwind(|| {
            NLL_BINS.build(vec![
                ("model", Column::Str(vec![])),
                ("positions", Column::Int(vec![])),
                ("nll", Column::Float(vec![])),
            ])
        });
        assert!(kind.is_err());
    }

    #[test]
    fn check_says_what_differs() {
        let says = |name: &str, columns: Vec<(&str, Column)>| {
            NLL_BINS
                .check(&Table::new(name, columns))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            says("heatmap", vec![]),
            "table heatmap checked against the nll_bins schema"
        );
        assert_eq!(
            says("nll_bins", vec![("model", Column::Str(vec![]))]),
            "table nll_bins: columns model where its schema declares model,positions,nll"
        );
        assert_eq!(
            says(
                "nll_bins",
                vec![
                    ("model", Column::Str(vec![])),
                    ("positions", Column::Int(vec![])),
                    ("nll", Column::Float(vec![])),
                ]
            ),
            "table nll_bins: column positions is not of kind Text"
        );
    }
}
