//! lm-eval-harness v0.4 result files (`results_<date>.json` of `lm_eval --output_path`):
//! the `results` block, per task the metrics of the `none` filter (`"acc,none"`,
//! `"acc_stderr,none"`, `"acc_norm,none"`, ...). A stderr lm-eval could not compute is the
//! string `"N/A"`: no stderr. Values are finite and standard errors finite and >= 0
//! (`super::checks`); whether a value is an accuracy is for the table that reports it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::checks;
use asa_core::error::{Error, Result};

/// A metric's value and standard error as lm-eval reported them (fractions, not percent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reported {
    pub value: f64,
    pub stderr: Option<f64>,
}

/// One task: its metrics, and the file they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    pub metrics: BTreeMap<String, Reported>,
    pub file: PathBuf,
}

/// The tasks of one or more result files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LmEvalResults {
    pub tasks: BTreeMap<String, TaskResult>,
    /// `lm_eval_version` of the files that name it.
    pub versions: Vec<String>,
}

/// Reads result files; a task in two of them is an error naming both.
pub fn read_all(paths: &[PathBuf]) -> Result<LmEvalResults> {
    let mut all = LmEvalResults::default();
    for path in paths {
        let one = read(path)?;
        for (task, result) in one.tasks {
            if let Some(before) = all.tasks.get(&task) {
                return Err(Error::input(
                    path,
                    format!(
                        "task {task} is also in {}: which result to report is ambiguous",
                        before.file.display()
                    ),
                ));
            }
            all.tasks.insert(task, result);
        }
        for v in one.versions {
            if !all.versions.contains(&v) {
                all.versions.push(v);
            }
        }
    }
    Ok(all)
}

/// Reads one result file.
pub fn read(path: &Path) -> Result<LmEvalResults> {
    let text = asa_core::input::read_text(path, asa_core::input::JSON_RECORD)?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(path, "not an lm-eval-harness result file (not JSON)", e))?;
    let Some(results) = json.get("results").and_then(Value::as_object) else {
        return Err(Error::input(
            path,
            "not an lm-eval-harness result file (no `results` object)",
        ));
    };
    if let Some(task) = repeated_task(&text) {
        return Err(Error::input(
            path,
            format!("results.{task} appears twice: a JSON reader keeps one copy silently, so which one counts cannot be told; keep one"),
        ));
    }
    let mut tasks = BTreeMap::new();
    for (task, entry) in results {
        let Some(entry) = entry.as_object() else {
            return Err(Error::input(
                path,
                format!("results.{task} is not an object"),
            ));
        };
        let mut metrics = BTreeMap::new();
        for (key, value) in entry {
            let Some((metric, filter)) = key.split_once(',') else {
                continue; // "alias", "name", ...
            };
            if filter != "none" || metric.ends_with("_stderr") {
                continue;
            }
            let Some(v) = value.as_f64() else {
                return Err(Error::input(
                    path,
                    format!("results.{task}.\"{key}\" is not a number: {value}"),
                ));
            };
            let field = format!("results.{task}.\"{key}\"");
            let v = checks::finite(v, &field, path)?;
            let stderr = stderr_of(entry, &format!("{metric}_stderr,{filter}"), task, path)?;
            metrics.insert(metric.to_string(), Reported { value: v, stderr });
        }
        tasks.insert(
            task.clone(),
            TaskResult {
                metrics,
                file: path.to_path_buf(),
            },
        );
    }
    let versions = ["lm_eval_version", "lm-eval_version"]
        .iter()
        .filter_map(|k| json.get(*k).and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    Ok(LmEvalResults { tasks, versions })
}

/// A task named twice in the file's `results` object (a parsed JSON value keeps only the
/// last): its keys read again in order, values skipped.
fn repeated_task(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct File {
        results: Keys,
    }
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct InOrder;
            impl<'de> serde::de::Visitor<'de> for InOrder {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> std::result::Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(InOrder)
        }
    }
    let mut keys = serde_json::from_str::<File>(text).ok()?.results.0;
    keys.sort();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0].clone())
}

/// `results.TASK."KEY"` as a standard error: none when absent, null or `"N/A"` (lm-eval
/// could not compute it), else finite and >= 0.
fn stderr_of(
    entry: &serde_json::Map<String, Value>,
    key: &str,
    task: &str,
    path: &Path,
) -> Result<Option<f64>> {
    let field = format!("results.{task}.\"{key}\"");
    match entry.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "N/A" => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) => checks::stderr(x, &field, path).map(Some),
            None => Err(Error::input(
                path,
                format!("{field} is not a number or \"N/A\": {v}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_filter_values_with_stderr_or_na() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(
            &path,
            r#"{"results": {"piqa": {"alias": "piqa", "acc,none": 0.5, "acc_stderr,none": 0.1,
                "acc_norm,none": 0.6, "acc_norm_stderr,none": "N/A", "exact_match,strict-match": 1.0}}}"#,
        )
        .unwrap();
        let r = read(&path).unwrap();
        let piqa = &r.tasks["piqa"].metrics;
        assert_eq!(piqa.len(), 2);
        assert_eq!(piqa["acc"].stderr, Some(0.1));
        assert_eq!(piqa["acc_norm"].value, 0.6);
        assert_eq!(piqa["acc_norm"].stderr, None);
        std::fs::write(&path, r#"{"config": {}}"#).unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("no `results` object"));
        let other = dir.path().join("s.json");
        std::fs::write(&other, r#"{"results": {"piqa": {"acc,none": 0.4}}}"#).unwrap();
        std::fs::write(&path, r#"{"results": {"piqa": {"acc,none": 0.4}}}"#).unwrap();
        let err = read_all(&[path, other]).unwrap_err().to_string();
        assert!(err.contains("task piqa is also in"), "{err}");
    }

    #[test]
    fn a_task_repeated_in_one_file_is_refused() {
        // issue 40: serde_json keeps the last of two equal keys; the file says two things
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(
            &path,
            r#"{"results": {"piqa": {"acc,none": 0.9}, "arc_easy": {"acc,none": 0.5},
                "piqa": {"acc,none": 0.4}}, "configs": {"piqa": {}, "piqa": {}}}"#,
        )
        .unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("results.piqa appears twice"), "{err}");
        assert!(err.contains("r.json"), "{err}");
        // the same key in two tasks' blocks, or repeated outside `results`, is fine
        std::fs::write(
            &path,
            r#"{"results": {"piqa": {"acc,none": 0.9}, "arc_easy": {"acc,none": 0.5}},
                "configs": {"piqa": {}, "piqa": {}}}"#,
        )
        .unwrap();
        assert_eq!(read(&path).unwrap().tasks.len(), 2);
    }
}
