//! [`FigureError`]: why a figure (or Tables 4-5) cannot be built from the tables at hand.
//! It is never fatal: the render skips the figure and notes the message
//! (`fig2_qk_mean: skipped (no qk_series table: ...)`).

/// The tables of a figure do not hold what it needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FigureError {
    /// `no {table} table`, then `: {hint}` (where the table comes from) when there is one.
    #[error("no {table} table{}", hint.map_or_else(String::new, |h| format!(": {h}")))]
    NoTable {
        table: &'static str,
        hint: Option<&'static str>,
    },
    /// `no {a} or {b} table`: none of the tables the output draws on.
    #[error("no {} table", tables.join(" or "))]
    NoTables { tables: &'static [&'static str] },
    /// `{file} has no column `{column}``.
    #[error("{file} has no column `{column}`")]
    NoColumn { file: String, column: String },
    /// `{file} has no {rows}`: none of its rows is one the figure can draw
    /// (`heatmap.csv has no finite weights`).
    #[error("{file} has no {rows}")]
    NoRows { file: &'static str, rows: String },
    /// `--metric` names a metric the file does not have.
    #[error("{file} has no metric {metric} (it has {})", has.join(", "))]
    NoMetric {
        file: &'static str,
        metric: String,
        has: Vec<String>,
    },
    /// The file has no training-loss metric.
    #[error("{file} has no loss metric (it has {})", has.join(", "))]
    NoLossMetric {
        file: &'static str,
        has: Vec<String>,
    },
    /// No value of `metric` lies in the late window (described by `window`).
    #[error("no {metric} values in the late window ({window})")]
    EmptyWindow { metric: String, window: String },
    /// The Affine-Scaled companion figure has no data: no model has `alpha` rows.
    #[error("{0}: no Affine-Scaled model")]
    NoAffineScaled(Box<FigureError>),
}

impl FigureError {
    /// `no {table} table`.
    pub fn no_table(table: &'static str) -> Self {
        FigureError::NoTable { table, hint: None }
    }

    /// `no {table} table: {hint}`.
    pub fn no_table_hint(table: &'static str, hint: &'static str) -> Self {
        FigureError::NoTable {
            table,
            hint: Some(hint),
        }
    }

    /// `{file} has no {rows}`.
    pub fn no_rows(file: &'static str, rows: impl Into<String>) -> Self {
        FigureError::NoRows {
            file,
            rows: rows.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_before() {
        let cases = [
            (FigureError::no_table("curves"), "no curves table"),
            (
                FigureError::no_table_hint("qk_series", "a folder of step checkpoints gives one"),
                "no qk_series table: a folder of step checkpoints gives one",
            ),
            (
                FigureError::NoTables {
                    tables: &["grad_stats", "spikes"],
                },
                "no grad_stats or spikes table",
            ),
            (
                FigureError::NoColumn {
                    file: "heatmap.csv".into(),
                    column: "key".into(),
                },
                "heatmap.csv has no column `key`",
            ),
            (
                FigureError::no_rows("heatmap.csv", "finite weights"),
                "heatmap.csv has no finite weights",
            ),
            (
                FigureError::NoMetric {
                    file: "curves.csv",
                    metric: "kd".into(),
                    has: vec!["loss".into(), "grad_norm".into()],
                },
                "curves.csv has no metric kd (it has loss, grad_norm)",
            ),
            (
                FigureError::NoLossMetric {
                    file: "curves.csv",
                    has: vec!["grad_norm".into()],
                },
                "curves.csv has no loss metric (it has grad_norm)",
            ),
            (
                FigureError::EmptyWindow {
                    metric: "loss".into(),
                    window: "steps 8–9".into(),
                },
                "no loss values in the late window (steps 8–9)",
            ),
            (
                FigureError::NoAffineScaled(Box::new(FigureError::no_rows(
                    "attention.csv",
                    "alpha rows",
                ))),
                "attention.csv has no alpha rows: no Affine-Scaled model",
            ),
        ];
        for (err, says) in cases {
            assert_eq!(err.to_string(), says);
        }
    }
}
