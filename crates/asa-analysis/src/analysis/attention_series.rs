//! The `attention_series` table (SPEC section 6) of a training run: every analysed step's
//! `attention` rows with the step beside them, and what can be read back from it (the
//! steps already done, the QK^T points of `qk_series`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::run::SeriesPoint;
use asa_core::error::{Error, Result};
use asa_metrics::{attention_tables, Metric, ModelMetrics};
use asa_tables::schema::ATTENTION_SERIES;
use asa_tables::{read_declared, Column, Table};

/// The `attention_series` rows of one step: `attention`'s rows (model, metric, layer, head,
/// stat, value) with `step`.
pub fn step_rows(step: u64, attention: &Table) -> Table {
    let height = attention.height();
    let column = |name: &str| {
        attention
            .column(name)
            .cloned()
            .unwrap_or_else(|| panic!("the attention table has a `{name}` column"))
    };
    ATTENTION_SERIES.build(vec![
        ("model", column("model")),
        ("step", Column::Int(vec![Some(step as i64); height])),
        ("metric", column("metric")),
        ("layer", column("layer")),
        ("head", column("head")),
        ("stat", column("stat")),
        ("value", column("value")),
    ])
}

/// The `attention_series` of the training series an `analyze` run computed: each step's
/// whole-model QK^T rows (`points`), and at each series' last step, the metrics computed
/// there (`models`' rows of its label) in their place.
pub fn of_series(points: &[SeriesPoint], models: &[(String, ModelMetrics)]) -> Table {
    let mut series = empty();
    let mut last: std::collections::BTreeMap<&str, u64> = Default::default();
    for (label, step, _, _) in points {
        let entry = last.entry(label.as_str()).or_insert(*step);
        *entry = (*entry).max(*step);
    }
    for point in points {
        let (label, step, _, _) = point;
        let model = models.iter().find(|(l, _)| l == label);
        if last[label.as_str()] == *step {
            if let Some(model) = model {
                let tables = attention_tables(std::slice::from_ref(model));
                if let Some(attention) = tables.iter().find(|t| t.name == "attention") {
                    let rows = step_rows(*step, attention);
                    if qk_points(&rows).is_empty() {
                        series.append(qk_rows(point));
                    }
                    series.append(rows);
                    continue;
                }
            }
        }
        series.append(qk_rows(point));
    }
    series
}

/// The two whole-model QK^T rows of one step.
fn qk_rows(point: &SeriesPoint) -> Table {
    let (label, step, mean, abs) = point;
    let (label, step, mean, abs) = (label.as_str(), *step, *mean, *abs);
    let text = |v: &str| Some(v.to_string());
    ATTENTION_SERIES.build(vec![
        ("model", Column::Str(vec![text(label), text(label)])),
        ("step", Column::Int(vec![Some(step as i64); 2])),
        (
            "metric",
            Column::Str(vec![text(Metric::QK_MEAN.name()), text("qk_abs_mean")]),
        ),
        ("layer", Column::Int(vec![None, None])),
        ("head", Column::Int(vec![None, None])),
        ("stat", Column::Str(vec![text("mean"), text("mean")])),
        ("value", Column::Float(vec![Some(mean), Some(abs)])),
    ])
}

/// An empty `attention_series` table.
pub fn empty() -> Table {
    ATTENTION_SERIES.build(vec![
        ("model", Column::Str(Vec::new())),
        ("step", Column::Int(Vec::new())),
        ("metric", Column::Str(Vec::new())),
        ("layer", Column::Int(Vec::new())),
        ("head", Column::Int(Vec::new())),
        ("stat", Column::Str(Vec::new())),
        ("value", Column::Float(Vec::new())),
    ])
}

/// The `attention_series` table in folder `dir` (`attention_series.csv` or `.parquet`, as
/// `watch`, `analyze` of a checkpoint series and the Python callbacks write it), checked
/// against its schema; `None` when the folder has none.
pub fn read_in(dir: &Path) -> Result<Option<Table>> {
    for ext in ["csv", "parquet"] {
        let path = dir.join(format!("attention_series.{ext}"));
        if !path.is_file() {
            continue;
        }
        let table = read_declared(&path, &ATTENTION_SERIES)?;
        let mut series = empty();
        series.append(table);
        return Ok(Some(series));
    }
    Ok(None)
}

/// One row of an `attention_series` table but its model and step, as compared between two
/// series that both hold a step (values by their bits: NaN equals NaN).
type StepRow = (
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<u64>,
);

/// The `attention_series` tables of several folders (a run resumed elsewhere, `watch` on
/// several machines) as one: every (model, step) once, in model then step order. A step
/// that two folders both hold is kept once when their rows are the same, and refused when
/// they differ (two runs under one label).
pub fn merge(series: &[(PathBuf, Table)]) -> Result<Table> {
    // (model, step) -> (folder, its rows)
    let mut steps: BTreeMap<(String, i64), (&Path, Vec<StepRow>)> = BTreeMap::new();
    for (dir, table) in series {
        for ((model, step), rows) in by_step(table) {
            match steps.get(&(model.clone(), step)) {
                None => {
                    steps.insert((model, step), (dir, rows));
                }
                Some((_, kept)) if *kept == rows => {}
                Some((first, _)) => {
                    return Err(Error::input(
                        dir,
                        format!(
                            "step {step} of model {model} is also in {} with other values (two runs under one label?)",
                            first.display()
                        ),
                    ))
                }
            }
        }
    }
    let mut merged = empty();
    for ((model, step), (_, rows)) in steps {
        let n = rows.len();
        let mut cols: (Vec<_>, Vec<_>, Vec<_>, Vec<_>, Vec<_>) = Default::default();
        for (metric, layer, head, stat, bits) in rows {
            cols.0.push(metric);
            cols.1.push(layer);
            cols.2.push(head);
            cols.3.push(stat);
            cols.4.push(bits.map(f64::from_bits));
        }
        merged.append(ATTENTION_SERIES.build(vec![
            ("model", Column::Str(vec![Some(model); n])),
            ("step", Column::Int(vec![Some(step); n])),
            ("metric", Column::Str(cols.0)),
            ("layer", Column::Int(cols.1)),
            ("head", Column::Int(cols.2)),
            ("stat", Column::Str(cols.3)),
            ("value", Column::Float(cols.4)),
        ]));
    }
    Ok(merged)
}

/// The rows of `series` grouped by (model, step), in table order within each step.
fn by_step(series: &Table) -> BTreeMap<(String, i64), Vec<StepRow>> {
    let text = |name: &str| match series.column(name) {
        Some(Column::Str(v)) => v.clone(),
        _ => vec![None; series.height()],
    };
    let int = |name: &str| match series.column(name) {
        Some(Column::Int(v)) => v.clone(),
        _ => vec![None; series.height()],
    };
    let (models, steps, metrics, layers, heads, stats) = (
        text("model"),
        int("step"),
        text("metric"),
        int("layer"),
        int("head"),
        text("stat"),
    );
    let values = match series.column("value") {
        Some(Column::Float(v)) => v.clone(),
        _ => vec![None; series.height()],
    };
    let mut out: BTreeMap<(String, i64), Vec<StepRow>> = BTreeMap::new();
    for k in 0..series.height() {
        let (Some(model), Some(step)) = (&models[k], steps[k]) else {
            continue;
        };
        out.entry((model.clone(), step)).or_default().push((
            metrics[k].clone(),
            layers[k],
            heads[k],
            stats[k].clone(),
            values[k].map(f64::to_bits),
        ));
    }
    out
}

/// The steps of model `label` that `series` holds.
pub fn steps_done(series: &Table, label: &str) -> BTreeSet<u64> {
    let (Some(Column::Str(models)), Some(Column::Int(steps))) =
        (series.column("model"), series.column("step"))
    else {
        return BTreeSet::new();
    };
    models
        .iter()
        .zip(steps)
        .filter(|(m, _)| m.as_deref() == Some(label))
        .filter_map(|(_, s)| s.and_then(|s| u64::try_from(s).ok()))
        .collect()
}

/// The QK^T point (model, step, mean, absolute mean) of every step whose whole-model
/// `qk_mean` and `qk_abs_mean` rows `series` holds, in the table's order: the rows of
/// `qk_series`.
pub fn qk_points(series: &Table) -> Vec<SeriesPoint> {
    let cols = (
        series.column("model"),
        series.column("step"),
        series.column("metric"),
        series.column("layer"),
        series.column("value"),
    );
    let (
        Some(Column::Str(models)),
        Some(Column::Int(steps)),
        Some(Column::Str(metrics)),
        Some(Column::Int(layers)),
        Some(Column::Float(values)),
    ) = cols
    else {
        return Vec::new();
    };
    let mut points: Vec<SeriesPoint> = Vec::new();
    let mut abs: Vec<((String, u64), f64)> = Vec::new();
    for k in 0..series.height() {
        let (Some(model), Some(step), Some(metric), None, Some(value)) = (
            &models[k],
            steps[k].and_then(|s| u64::try_from(s).ok()),
            &metrics[k],
            layers[k],
            values[k],
        ) else {
            continue;
        };
        if metric == Metric::QK_MEAN.name() {
            points.push((model.clone(), step, value, f64::NAN));
        } else if metric == "qk_abs_mean" {
            abs.push(((model.clone(), step), value));
        }
    }
    for point in &mut points {
        if let Some((_, v)) = abs
            .iter()
            .find(|(key, _)| key.0 == point.0 && key.1 == point.1)
        {
            point.3 = *v;
        }
    }
    points
}

/// `series` with the steps in `drop` of model `label` left out (a step analysed again
/// replaces its rows).
pub fn without_steps(series: &Table, label: &str, drop: &BTreeSet<u64>) -> Table {
    let done = steps_done(series, label);
    if drop.iter().all(|s| !done.contains(s)) {
        return series.clone();
    }
    let (Some(Column::Str(models)), Some(Column::Int(steps))) =
        (series.column("model"), series.column("step"))
    else {
        return series.clone();
    };
    let keep: Vec<bool> = models
        .iter()
        .zip(steps)
        .map(|(m, s)| {
            let step = s.and_then(|s| u64::try_from(s).ok());
            !(m.as_deref() == Some(label) && step.is_some_and(|s| drop.contains(&s)))
        })
        .collect();
    let columns = series
        .columns
        .iter()
        .map(|(name, column)| (name.clone(), filter(column, &keep)))
        .collect();
    Table {
        name: series.name.clone(),
        columns,
    }
}

/// The values of `column` where `keep` is true.
fn filter(column: &Column, keep: &[bool]) -> Column {
    fn pick<T: Clone>(values: &[T], keep: &[bool]) -> Vec<T> {
        values
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .map(|(v, _)| v.clone())
            .collect()
    }
    match column {
        Column::Str(v) => Column::Str(pick(v, keep)),
        Column::Int(v) => Column::Int(pick(v, keep)),
        Column::Float(v) => Column::Float(pick(v, keep)),
        Column::Bytes(v) => Column::Bytes(pick(v, keep)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attention(model: &str) -> Table {
        Table::new(
            "attention",
            vec![
                ("model", Column::Str(vec![Some(model.into()); 3])),
                (
                    "metric",
                    Column::Str(vec![
                        Some("qk_mean".into()),
                        Some("qk_abs_mean".into()),
                        Some("qk_mean".into()),
                    ]),
                ),
                ("layer", Column::Int(vec![None, None, Some(1)])),
                ("head", Column::Int(vec![None, None, None])),
                ("stat", Column::Str(vec![Some("mean".into()); 3])),
                (
                    "value",
                    Column::Float(vec![Some(0.5), Some(2.0), Some(9.0)]),
                ),
            ],
        )
    }

    #[test]
    fn steps_rows_and_qk_points_of_a_series() {
        let mut series = empty();
        series.append(step_rows(10, &attention("a")));
        series.append(step_rows(20, &attention("a")));
        series.append(step_rows(10, &attention("b")));
        assert_eq!(series.height(), 9);
        assert_eq!(steps_done(&series, "a"), [10, 20].into());
        assert_eq!(steps_done(&series, "b"), [10].into());
        assert!(steps_done(&series, "c").is_empty());
        // one point per (model, step): the whole-model rows, not layer 1's
        let points = qk_points(&series);
        assert_eq!(
            points,
            vec![
                ("a".to_string(), 10, 0.5, 2.0),
                ("a".to_string(), 20, 0.5, 2.0),
                ("b".to_string(), 10, 0.5, 2.0)
            ]
        );
        let dropped = without_steps(&series, "a", &[10].into());
        assert_eq!(dropped.height(), 6);
        assert_eq!(steps_done(&dropped, "a"), [20].into());
        assert_eq!(steps_done(&dropped, "b"), [10].into());
    }
}
