//! `attention_series` tables (SPEC section 6: what `watch`, the training callbacks and an
//! analysed checkpoint series write) read as training logs, so that `curves` draws attention
//! over training beside the loss. Each mean of the table is a series named as the callbacks
//! log it: `attn/<metric>` (the whole model), `attn/<metric>/layer_03`,
//! `attn/<metric>/layer_03/head_05` (1-based, as in the table); each model of the table is a
//! run of the file.

use std::path::Path;

use super::{Collector, LogFile, LogFormat, LogRequest, Matcher};
use crate::series::{Observation, RawSeries};
use asa_core::error::{Error, Result};
use asa_tables::{read_table, Column, Table};

/// The columns of an `attention_series` table, in order.
const COLUMNS: [&str; 7] = ["model", "step", "metric", "layer", "head", "stat", "value"];

/// Whether `header` (a CSV's first line) is an `attention_series` table's.
pub(super) fn is_attention_series_header(header: &str) -> bool {
    let names: Vec<&str> = header.trim_end().split(',').map(str::trim).collect();
    names == COLUMNS
}

/// The log name of a mean of metric `metric` at `layer` / `head` (1-based; `None`: over
/// all), as the training callbacks log it.
pub fn series_name(metric: &str, layer: Option<i64>, head: Option<i64>) -> String {
    let mut name = format!("attn/{metric}");
    if let Some(l) = layer {
        name.push_str(&format!("/layer_{l:02}"));
        if let Some(h) = head {
            name.push_str(&format!("/head_{h:02}"));
        }
    }
    name
}

/// Reads the requested series of the `attention_series` table at `path` (CSV or Parquet).
pub(super) fn read(path: &Path, request: &LogRequest) -> Result<LogFile> {
    let table = read_table(path)?;
    let rows = Rows::of(&table, path)?;
    let mut matcher = Matcher::new(&request.metrics);
    // (model, name) per mean row, in file order; names in order first seen
    let mut names: Vec<String> = Vec::new();
    let mut runs: Vec<(String, Collector)> = Vec::new();
    for i in 0..rows.len() {
        if rows.stat[i].as_deref() != Some("mean") {
            continue;
        }
        let (Some(model), Some(metric), Some(step)) =
            (&rows.model[i], &rows.metric[i], rows.step[i])
        else {
            return Err(Error::training_log(
                path,
                format!("row {}: no model, metric or step", i + 2),
            ));
        };
        let name = series_name(metric, rows.layer[i], rows.head[i]);
        if !names.contains(&name) {
            names.push(name.clone());
        }
        let hits = matcher.offer(&name);
        if hits.is_empty() {
            continue;
        }
        let at = match runs.iter().position(|(m, _)| m == model) {
            Some(at) => at,
            None => {
                runs.push((model.clone(), Collector::default()));
                runs.len() - 1
            }
        };
        for r in hits {
            runs[at].1.push(
                r,
                &name,
                Observation {
                    step,
                    value: rows.value[i],
                },
            );
        }
    }
    if names.is_empty() {
        return Err(Error::training_log(
            path,
            "attention_series table has no mean rows",
        ));
    }
    join_runs(path, request, &matcher, names, runs)
}

/// One log of the runs' series (one run per model), or the requests all absent.
fn join_runs(
    path: &Path,
    request: &LogRequest,
    matcher: &Matcher,
    names: Vec<String>,
    runs: Vec<(String, Collector)>,
) -> Result<LogFile> {
    let mut file: Option<LogFile> = None;
    for (model, collector) in runs {
        let part = collector.finish(
            path,
            LogFormat::AttentionSeries,
            matcher,
            names.clone(),
            Vec::new(),
        )?;
        let series = part.series.into_iter().map(|s| RawSeries {
            run: Some(model.clone()),
            ..s
        });
        match &mut file {
            None => {
                file = Some(LogFile {
                    series: series.collect(),
                    ..part
                })
            }
            Some(f) => f.series.extend(series),
        }
    }
    Ok(file.unwrap_or_else(|| LogFile {
        path: path.to_path_buf(),
        format: LogFormat::AttentionSeries,
        series: Vec::new(),
        absent: request.metrics.clone(),
        names,
        warnings: Vec::new(),
    }))
}

/// The columns of an attention_series table, typed.
struct Rows<'a> {
    model: &'a [Option<String>],
    step: Vec<Option<i64>>,
    metric: &'a [Option<String>],
    layer: Vec<Option<i64>>,
    head: Vec<Option<i64>>,
    stat: &'a [Option<String>],
    value: Vec<Option<f64>>,
}

impl<'a> Rows<'a> {
    fn of(table: &'a Table, path: &Path) -> Result<Self> {
        let column = |name: &str| {
            table.column(name).ok_or_else(|| {
                Error::training_log(
                    path,
                    format!("attention_series table has no `{name}` column"),
                )
            })
        };
        let text = |name: &str| match column(name)? {
            Column::Str(v) => Ok(v.as_slice()),
            _ => Err(Error::training_log(
                path,
                format!("column `{name}` is not text"),
            )),
        };
        // a column with no value reads back as text
        let ints = |name: &str| match column(name)? {
            Column::Int(v) => Ok(v.clone()),
            Column::Str(v) if v.iter().all(Option::is_none) => Ok(vec![None; v.len()]),
            _ => Err(Error::training_log(
                path,
                format!("column `{name}` is not integer"),
            )),
        };
        let value = match column("value")? {
            Column::Float(v) => v.clone(),
            Column::Int(v) => v.iter().map(|x| x.map(|x| x as f64)).collect(),
            Column::Str(v) if v.iter().all(Option::is_none) => vec![None; v.len()],
            _ => return Err(Error::training_log(path, "column `value` is not numeric")),
        };
        Ok(Rows {
            model: text("model")?,
            step: ints("step")?,
            metric: text("metric")?,
            layer: ints("layer")?,
            head: ints("head")?,
            stat: text("stat")?,
            value,
        })
    }

    fn len(&self) -> usize {
        self.model.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_callbacks_log_them() {
        assert_eq!(series_name("entropy", None, None), "attn/entropy");
        assert_eq!(
            series_name("entropy", Some(3), None),
            "attn/entropy/layer_03"
        );
        assert_eq!(
            series_name("first_token", Some(12), Some(5)),
            "attn/first_token/layer_12/head_05"
        );
        assert!(is_attention_series_header(
            "model,step,metric,layer,head,stat,value\n"
        ));
        assert!(!is_attention_series_header("step,loss"));
    }
}
