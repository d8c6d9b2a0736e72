//! Runs named on the command line (`label=path` or a plain path) loaded into labelled,
//! cleaned series. Default labels: the file stem (`runs/asa.csv` -> `asa`), the folder
//! name for a TensorBoard run folder or for an event file inside one, and the W&B run
//! name for each run of a W&B export (`label/run` when a label is given and the export
//! holds several runs).

use std::path::{Path, PathBuf};

use super::read::{read_log, LogFormat, LogRequest};
use super::series::{Sample, Series};
use super::window::StepWindow;
use asa_core::error::{Error, Result};

/// A log given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The label given with `label=path`, if any.
    pub label: Option<String>,
    /// File or folder.
    pub path: PathBuf,
}

impl RunSpec {
    /// Parses `label=path` or `path`. An argument that names an existing path is a path
    /// even if it contains `=`.
    pub fn parse(arg: &str) -> RunSpec {
        if !Path::new(arg).exists() {
            if let Some((label, path)) = arg.split_once('=') {
                if !label.is_empty() && !path.is_empty() {
                    return RunSpec {
                        label: Some(label.to_string()),
                        path: PathBuf::from(path),
                    };
                }
            }
        }
        RunSpec {
            label: None,
            path: PathBuf::from(arg),
        }
    }

    /// The label when none was given: file stem, or folder name for TensorBoard.
    pub fn default_label(&self) -> String {
        let p = &self.path;
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| p.display().to_string())
        };
        let file = name(p);
        if p.is_dir() {
            return name(&p.canonicalize().unwrap_or_else(|_| p.clone()));
        }
        if file.contains("tfevents") {
            let parent = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            return name(&parent.canonicalize().unwrap_or(parent));
        }
        p.file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or(file)
    }
}

/// One metric of one run, cleaned, with where it came from.
#[derive(Debug, Clone)]
pub struct RunSeries {
    /// Run label.
    pub run: String,
    /// The log file or folder.
    pub path: PathBuf,
    /// Its format.
    pub format: LogFormat,
    /// The metric's values.
    pub series: Series,
}

impl RunSeries {
    /// The finite values in `window`; an error naming the file when the window holds no
    /// logged step, or only missing, NaN and infinite values.
    pub fn sample(&self, window: &StepWindow) -> Result<Sample> {
        let s = &self.series;
        let sample = s.sample(window);
        if sample.n_steps == 0 {
            let range = match s.step_range() {
                Some((a, b)) => format!("the log has steps {a}..={b}"),
                None => "the log has no values for it".into(),
            };
            return Err(Error::training_log(
                &self.path,
                format!(
                    "no step of `{}` (run {}) in {}; {range}",
                    s.source,
                    self.run,
                    window.describe()
                ),
            ));
        }
        if sample.values.is_empty() {
            let q = sample.quality;
            return Err(Error::training_log(
                &self.path,
                format!(
                    "all {} values of `{}` (run {}) in {} are missing, NaN or inf ({} missing, {} NaN, {} inf)",
                    sample.n_steps,
                    s.source,
                    self.run,
                    window.describe(),
                    q.n_missing,
                    q.n_nan,
                    q.n_inf
                ),
            ));
        }
        Ok(sample)
    }
}

/// Loaded runs plus the warnings to show (each already names its file).
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// One entry per (run, metric), in command-line order, then request order.
    pub series: Vec<RunSeries>,
    /// Data-quality notes: steps sorted, duplicates overwritten, metrics skipped.
    pub warnings: Vec<String>,
}

/// Reads every run. With `optional`, a requested metric absent from a log is skipped
/// with a warning (but each log must hold at least one); otherwise it is an error
/// that lists the columns or tags the log has.
pub fn load_runs(specs: &[RunSpec], request: &LogRequest, optional: bool) -> Result<Loaded> {
    let mut out = Loaded::default();
    for spec in specs {
        let log = read_log(&spec.path, request)?;
        let path = spec.path.display().to_string();
        if let Some(req) = log.absent.first() {
            if !optional || log.series.is_empty() {
                return Err(log.absent_error(req));
            }
            for req in &log.absent {
                out.warnings
                    .push(format!("{path}: no `{req}` in this log; skipped"));
            }
        }
        out.warnings
            .extend(log.warnings.iter().map(|w| format!("{path}: {w}")));
        let n_runs = {
            let mut runs: Vec<&str> = log.series.iter().filter_map(|s| s.run.as_deref()).collect();
            runs.sort_unstable();
            runs.dedup();
            runs.len()
        };
        for raw in log.series {
            let run = match (&spec.label, &raw.run) {
                (Some(l), Some(r)) if n_runs > 1 => format!("{l}/{r}"),
                (Some(l), _) => l.clone(),
                (None, Some(r)) => r.clone(),
                (None, None) => spec.default_label(),
            };
            let series = Series::from_raw(raw);
            let what = format!("{path}: `{}` of run {run}", series.source);
            if series.reordered {
                out.warnings
                    .push(format!("{what}: steps out of order; sorted"));
            }
            let dup = series.n_duplicate();
            if dup > 0 {
                out.warnings.push(format!(
                    "{what}: {dup} values overwritten by a later row with the same step (the last one is kept)"
                ));
            }
            out.series.push(RunSeries {
                run,
                path: spec.path.clone(),
                format: log.format,
                series,
            });
        }
    }
    for (i, a) in out.series.iter().enumerate() {
        if let Some(b) = out.series[..i]
            .iter()
            .find(|b| b.run == a.run && b.series.metric == a.series.metric)
        {
            return Err(Error::usage(format!(
                "two runs are labelled `{}` ({} and {}); name them with label=path",
                a.run,
                b.path.display(),
                a.path.display()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let s = RunSpec::parse("asa=runs/asa.csv");
        assert_eq!(s.label.as_deref(), Some("asa"));
        assert_eq!(s.path, PathBuf::from("runs/asa.csv"));
        let s = RunSpec::parse("runs/softmax.csv");
        assert_eq!(s.label, None);
        assert_eq!(s.default_label(), "softmax");
        let s = RunSpec::parse("logs/sink/events.out.tfevents.1.host");
        assert_eq!(s.default_label(), "sink");
        assert_eq!(RunSpec::parse("=x").label, None);
    }
}
