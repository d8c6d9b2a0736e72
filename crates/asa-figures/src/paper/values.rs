//! The numbers of one table row: Delta Params, final loss, perplexity, the six zero-shot
//! accuracies and their average, each a value with where it came from, or missing with why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::checks;
use super::lm_eval::{self, LmEvalResults};
use super::runs::{PaperRun, RunSet};
use asa_core::error::{Error, Result};
use asa_logs::series::Sample;
use asa_logs::{load_runs, LogRequest, RunSpec, StepWindow};
use asa_record::checkpoint_facts::CheckpointFacts;
use asa_tables::{read_table, Column, Table};

/// A zero-shot task of the paper's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// lm-eval-harness task name.
    pub key: &'static str,
    /// Column title.
    pub display: &'static str,
    /// The metric reported unless the user chooses another.
    pub default_metric: &'static str,
}

/// The paper's tasks, in its column order: WinoGrande, PIQA, HellaSwag, ARC-c, ARC-e,
/// BoolQ. HellaSwag and ARC-c by length-normalised accuracy (`acc_norm`), as they are
/// commonly reported; the others by accuracy (WinoGrande and BoolQ have no other).
pub const TASKS: [Task; 6] = [
    Task {
        key: "winogrande",
        display: "WinoGrande",
        default_metric: "acc",
    },
    Task {
        key: "piqa",
        display: "PIQA",
        default_metric: "acc",
    },
    Task {
        key: "hellaswag",
        display: "HellaSwag",
        default_metric: "acc_norm",
    },
    Task {
        key: "arc_challenge",
        display: "ARC-c",
        default_metric: "acc_norm",
    },
    Task {
        key: "arc_easy",
        display: "ARC-e",
        default_metric: "acc",
    },
    Task {
        key: "boolq",
        display: "BoolQ",
        default_metric: "acc",
    },
];

/// A table cell: a number and its source, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Value {
        value: f64,
        stderr: Option<f64>,
        source: String,
        /// What a reader should know about this number (a footnote).
        note: Option<String>,
    },
    Missing(String),
}

impl Cell {
    /// The number, if any.
    pub fn value(&self) -> Option<f64> {
        match self {
            Cell::Value { value, .. } => Some(*value),
            Cell::Missing(_) => None,
        }
    }
}

/// One row's cells.
#[derive(Debug, Clone, PartialEq)]
pub struct RunValues {
    /// Parameters added over the same size's baseline, in millions.
    pub delta_params_m: Cell,
    /// Mean training loss over the final window.
    pub loss: Cell,
    /// Perplexity of the `analyze` run.
    pub ppl: Cell,
    /// Per [`TASKS`], in percent.
    pub accuracy: Vec<Cell>,
    /// Mean of the six accuracies, in percent.
    pub average: Cell,
}

/// How the cells are computed.
#[derive(Debug, Clone)]
pub struct ValueOptions {
    /// Final-loss window: the last this many steps of the log.
    pub loss_window: i64,
    /// The log's loss column.
    pub loss_metric: String,
    /// Per task, the lm-eval metric instead of the default.
    pub accuracy: BTreeMap<String, String>,
}

impl ValueOptions {
    /// The options of `set` (its manifest's) with the flags' over them: `loss_window`
    /// (default 100 steps), `loss_metric` (default `loss`), `accuracy` as `TASK=METRIC`.
    pub fn resolve(
        set: &RunSet,
        loss_window: Option<i64>,
        loss_metric: Option<String>,
        accuracy: &[String],
    ) -> Result<ValueOptions> {
        let mut chosen: BTreeMap<String, String> = set.accuracy.clone();
        for a in accuracy {
            let (task, metric) = a.split_once('=').ok_or_else(|| {
                Error::option(
                    "--accuracy",
                    format!("takes TASK=METRIC (e.g. piqa=acc_norm), got `{a}`"),
                )
            })?;
            chosen.insert(task.to_string(), metric.to_string());
        }
        let known: Vec<&str> = TASKS.iter().map(|t| t.key).collect();
        if let Some(task) = chosen.keys().find(|t| !known.contains(&t.as_str())) {
            return Err(Error::usage(format!(
                "accuracy: unknown task `{task}` (the tables' tasks: {})",
                known.join(", ")
            )));
        }
        let loss_window = loss_window.or(set.loss_window).unwrap_or(100);
        if loss_window < 1 {
            return Err(Error::option(
                "--loss-window",
                format!("must be at least 1 step, got {loss_window}"),
            ));
        }
        Ok(ValueOptions {
            loss_window,
            loss_metric: loss_metric
                .or(set.loss_metric.clone())
                .unwrap_or_else(|| "loss".into()),
            accuracy: chosen,
        })
    }
}

/// The cells of `run`. `params` holds each run's stored parameter count (`None`: no
/// checkpoint); `baseline` the same size's baseline count, if it has one.
pub fn run_values(
    run: &PaperRun,
    params: Option<(usize, usize)>,
    baseline: Option<usize>,
    o: &ValueOptions,
) -> Result<RunValues> {
    let delta_params_m = delta_params(run, params, baseline);
    let loss = match &run.log {
        Some(log) => final_loss(log, run, o)?,
        None => Cell::Missing("no training log (--log)".into()),
    };
    let ppl = match &run.results {
        Some(dir) => perplexity(dir, run)?,
        None => Cell::Missing("no analyze results (--results)".into()),
    };
    let accuracy = match run.lm_eval.is_empty() {
        true => vec![Cell::Missing("no lm-eval-harness result (--lm-eval)".into()); TASKS.len()],
        false => accuracies(&lm_eval::read_all(&run.lm_eval)?, &run.lm_eval, o)?,
    };
    let values: Vec<f64> = accuracy.iter().filter_map(Cell::value).collect();
    let average = match (values.len() == TASKS.len(), checks::mean(&values)) {
        (true, Some(mean)) => Cell::Value {
            value: mean,
            stderr: None,
            source: "mean of the six accuracies".into(),
            note: None,
        },
        _ => match (values.is_empty(), accuracy.first()) {
            // no accuracy at all: the average is empty for the same reason
            (true, Some(Cell::Missing(reason))) => Cell::Missing(reason.clone()),
            _ => Cell::Missing(format!(
                "the average needs all six tasks ({} of {} reported)",
                values.len(),
                TASKS.len()
            )),
        },
    };
    Ok(RunValues {
        delta_params_m,
        loss,
        ppl,
        accuracy,
        average,
    })
}

/// Stored parameters of a run's checkpoint, and those its variant adds (the fallback when
/// the size has no baseline checkpoint).
pub fn parameters(
    run: &PaperRun,
    checkpoints: &dyn CheckpointFacts,
) -> Result<Option<(usize, usize)>> {
    run.checkpoint
        .as_deref()
        .map(|path| checkpoints.parameters(path))
        .transpose()
}

fn delta_params(run: &PaperRun, params: Option<(usize, usize)>, baseline: Option<usize>) -> Cell {
    match (params, baseline) {
        (None, _) => Cell::Missing("no checkpoint (--checkpoint)".into()),
        (Some((count, _)), Some(base)) => Cell::Value {
            value: (count as f64 - base as f64) / 1e6,
            stderr: None,
            source: format!(
                "{count} stored parameters - {base} of the {} baseline",
                run.size
            ),
            note: None,
        },
        (Some((_, added)), None) => Cell::Value {
            value: added as f64 / 1e6,
            stderr: None,
            source: "the parameters its variant adds, counted from its config".into(),
            note: Some(format!(
                "Delta Params: the parameters the variant adds (no baseline checkpoint of size {})",
                run.size
            )),
        },
    }
}

fn final_loss(log: &Path, run: &PaperRun, o: &ValueOptions) -> Result<Cell> {
    let spec = RunSpec {
        label: Some(format!("{}/{}", run.size, run.method.key())),
        path: log.to_path_buf(),
    };
    let request = LogRequest {
        metrics: vec![o.loss_metric.clone()],
        step_column: None,
    };
    let loaded = load_runs(&[spec], &request, false)?;
    let Some(series) = loaded.series.first() else {
        return Ok(Cell::Missing(format!(
            "no {} in {}",
            o.loss_metric,
            log.display()
        )));
    };
    let Some((_, last)) = series.series.step_range() else {
        return Err(Error::input(log, format!("no steps of {}", o.loss_metric)));
    };
    let window = StepWindow {
        start: Some(last.saturating_sub(o.loss_window - 1)),
        end: Some(last),
        inclusive: true,
    };
    let sample = series.sample(&window)?;
    let field = format!("the mean of `{}` over {window}", series.series.source);
    let mean = checks::mean(&sample.values).unwrap_or(f64::NAN);
    let mean = checks::finite(mean, &field, log)?;
    Ok(Cell::Value {
        value: mean,
        stderr: None,
        source: format!(
            "mean of `{}` over {} ({} values) of {}",
            series.series.source,
            window,
            sample.values.len(),
            log.display()
        ),
        note: skipped_note(&sample, &series.series.source, log),
    })
}

/// The footnote of the values a loss window left out (missing, NaN, inf; earlier values of
/// a step logged twice), if any.
fn skipped_note(sample: &Sample, metric: &str, log: &Path) -> Option<String> {
    let q = &sample.quality;
    let parts: Vec<String> = [
        (q.n_missing, "missing"),
        (q.n_nan, "NaN"),
        (q.n_inf, "inf"),
        (q.n_duplicate, "replaced by a later row of the same step"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "Loss: {} values of `{metric}` in the window of {} skipped ({}); the mean is over the other {}",
            q.n_missing + q.n_nan + q.n_inf + q.n_duplicate,
            log.display(),
            parts.join(", "),
            sample.values.len()
        )
    })
}

/// The attention table of an `analyze --out` folder.
fn attention_table(dir: &Path) -> Result<(PathBuf, Table)> {
    for ext in ["csv", "parquet"] {
        let path = dir.join(format!("attention.{ext}"));
        if path.is_file() {
            let table = read_table(&path)?;
            return Ok((path, table));
        }
    }
    Err(Error::input(
        dir,
        "no attention.csv or attention.parquet (not an analyze --out folder)",
    ))
}

fn perplexity(dir: &Path, run: &PaperRun) -> Result<Cell> {
    let (path, table) = attention_table(dir)?;
    let strings = |name: &str| -> Result<Vec<Option<String>>> {
        match table.column(name) {
            Some(Column::Str(v)) => Ok(v.clone()),
            _ => Err(Error::input(&path, format!("no text column `{name}`"))),
        }
    };
    let (models, metrics, stats) = (strings("model")?, strings("metric")?, strings("stat")?);
    let values = match table.column("value") {
        Some(Column::Float(v)) => v.clone(),
        Some(Column::Int(v)) => v.iter().map(|x| x.map(|x| x as f64)).collect(),
        _ => return Err(Error::input(&path, "no number column `value`")),
    };
    let layer_empty = |i: usize| match table.column("layer") {
        Some(Column::Int(v)) => v[i].is_none(),
        Some(Column::Str(v)) => v[i].as_deref().is_none_or(str::is_empty),
        _ => true,
    };
    let label = model_label(&models, run, &path)?;
    let found: Vec<usize> = (0..table.height())
        .filter(|&i| {
            models[i].as_deref() == Some(label.as_str())
                && metrics[i].as_deref() == Some("ppl")
                && stats[i].as_deref() == Some("mean")
                && layer_empty(i)
        })
        .collect();
    // data rows numbered from 1 after the header (a CSV's data row n is its line n + 1)
    if let [first, second, ..] = found[..] {
        return Err(Error::input(
            &path,
            format!(
                "two ppl rows of model {label} (data rows {} and {}): which is the run's is ambiguous",
                first + 1,
                second + 1
            ),
        ));
    }
    let field = |i: usize| {
        format!(
            "data row {} (model {label}, metric ppl) column value",
            i + 1
        )
    };
    let ppl = match found.first() {
        Some(&i) => match values[i] {
            Some(v) => Some(checks::perplexity(v, &field(i), &path)?),
            None => None,
        },
        None => None,
    };
    Ok(match ppl {
        Some(ppl) => Cell::Value {
            value: ppl,
            stderr: None,
            source: format!("ppl of model {label} in {}", path.display()),
            note: None,
        },
        None => Cell::Missing(format!(
            "no ppl of model {label} in {} (analyzed without the nll metric?)",
            path.display()
        )),
    })
}

/// The label a run goes by in an attention table with `models`: named (`model`), or
/// SIZE/METHOD, METHOD (as written or by its key), or the only model.
fn model_label(models: &[Option<String>], run: &PaperRun, path: &Path) -> Result<String> {
    let mut labels: Vec<&str> = Vec::new();
    for m in models.iter().flatten() {
        if !labels.contains(&m.as_str()) {
            labels.push(m);
        }
    }
    // the label the run goes by there: named, or SIZE/METHOD, METHOD (as written or by
    // its key), or the only model
    let mut candidates = Vec::new();
    for m in [run.method_as_given.as_deref(), Some(run.method.key())]
        .into_iter()
        .flatten()
    {
        candidates.push(format!("{}/{m}", run.size));
        candidates.push(m.to_string());
    }
    let wanted = format!("{}/{}", run.size, run.method.key());
    match &run.model {
        Some(m) if labels.contains(&m.as_str()) => Ok(m.clone()),
        Some(m) => Err(Error::input(
            path,
            format!("no model `{m}` (it has {})", labels.join(", ")),
        )),
        None => match candidates.iter().find(|c| labels.contains(&c.as_str())) {
            Some(c) => Ok(c.clone()),
            None if labels.len() == 1 => Ok(labels[0].to_string()),
            None => Err(Error::input(
                path,
                format!(
                    "which model is {wanted}? it has {} (name it: `model` in the manifest)",
                    labels.join(", ")
                ),
            )),
        },
    }
}

fn accuracies(results: &LmEvalResults, files: &[PathBuf], o: &ValueOptions) -> Result<Vec<Cell>> {
    let named = files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    TASKS
        .iter()
        .map(|task| {
            let metric = o
                .accuracy
                .get(task.key)
                .map_or(task.default_metric, String::as_str);
            let Some(result) = results.tasks.get(task.key) else {
                return Ok(Cell::Missing(format!("no {} in {named}", task.key)));
            };
            match result.metrics.get(metric) {
                Some(r) => {
                    let field = format!("results.{}.\"{metric},none\"", task.key);
                    let value = checks::accuracy(r.value, &field, &result.file)?;
                    Ok(Cell::Value {
                        value: 100.0 * value,
                        stderr: r.stderr.map(|s| 100.0 * s),
                        source: format!(
                            "{} `{metric},none` in {}",
                            task.key,
                            result.file.display()
                        ),
                        note: None,
                    })
                }
                None => Ok(Cell::Missing(format!(
                    "{} has no {metric} in {} (it has {})",
                    task.key,
                    result.file.display(),
                    result
                        .metrics
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        })
        .collect()
}
