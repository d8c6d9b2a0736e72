//! The runs a table is built from: per (size, method), where its checkpoint, training log,
//! `analyze` results and lm-eval-harness results are. Given as `SIZE/METHOD=PATH` options or
//! in a TOML / JSON manifest (paths relative to the manifest's folder):
//!
//! ```toml
//! loss_window = 100             # final loss: mean over the last 100 steps of the log
//! table3 = ["linear_clipping", "sigmoid"]
//! [[run]]
//! size = "1B"
//! method = "affine_scaled"      # omitted: the checkpoint's attention variant, said so
//! checkpoint = "ckpt/1b-asa"
//! log = "runs/1b-asa/log.csv"
//! results = "results/1b"        # an `analyze --out` folder
//! model = "asa"                 # its label there (default: SIZE/METHOD, METHOD, the only one)
//! lm_eval = ["eval/1b-asa.json"]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::checks;
use super::method::Method;
use asa_core::error::{Error, Result};
use asa_record::checkpoint_facts::CheckpointFacts;

/// One (size, method) and its inputs; any input may be missing.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperRun {
    pub size: String,
    pub method: Method,
    /// The method as the user wrote it (`asa` for affine_scaled), if it was written.
    pub method_as_given: Option<String>,
    /// How the method was known when the user did not name it.
    pub method_source: Option<String>,
    /// A checkpoint folder, GGUF file or Hub id.
    pub checkpoint: Option<PathBuf>,
    /// A training log (any format `grad-stats` reads).
    pub log: Option<PathBuf>,
    /// An `analyze --out` folder.
    pub results: Option<PathBuf>,
    /// The run's model label in `results`.
    pub model: Option<String>,
    /// lm-eval-harness result JSON files (one or more; each task in one of them).
    pub lm_eval: Vec<PathBuf>,
}

/// Every run, and the options that shape the tables.
#[derive(Debug, Clone, Default)]
pub struct RunSet {
    pub runs: Vec<PaperRun>,
    /// Table 3's methods, in order.
    pub table3: Vec<Method>,
    /// Final-loss window in steps (the manifest's; a flag overrides it).
    pub loss_window: Option<i64>,
    /// The log's loss column (the manifest's; a flag overrides it).
    pub loss_metric: Option<String>,
    /// Per task, the lm-eval metric to report instead of the default (`acc`, `acc_norm`).
    pub accuracy: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    loss_window: Option<i64>,
    loss_metric: Option<String>,
    table3: Option<Vec<String>>,
    accuracy: Option<BTreeMap<String, String>>,
    #[serde(alias = "runs")]
    run: Vec<ManifestRun>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestRun {
    size: String,
    method: Option<String>,
    checkpoint: Option<String>,
    log: Option<String>,
    results: Option<String>,
    model: Option<String>,
    lm_eval: Option<OneOrMany>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// What an input option fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Checkpoint,
    Log,
    Results,
    LmEval,
}

impl Input {
    fn flag(self) -> &'static str {
        match self {
            Input::Checkpoint => "--checkpoint",
            Input::Log => "--log",
            Input::Results => "--results",
            Input::LmEval => "--lm-eval",
        }
    }
}

/// Refuses a manifest's `loss_window` below 1 step, naming the manifest at `path`.
fn check_loss_window(path: &Path, window: Option<i64>) -> Result<()> {
    match window.filter(|&w| w < 1) {
        Some(w) => Err(Error::input(
            path,
            format!("loss_window must be at least 1 step, got {w}"),
        )),
        None => Ok(()),
    }
}

impl RunSet {
    /// The runs of a manifest (`.toml` or `.json`); a run naming no method takes its
    /// checkpoint's, read by `checkpoints`.
    pub fn from_manifest(path: &Path, checkpoints: &dyn CheckpointFacts) -> Result<RunSet> {
        let text = asa_core::input::read_text(path, asa_core::input::JSON_RECORD)?;
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let manifest: Manifest = if is_json {
            serde_json::from_str(&text).map_err(|e| Error::invalid(path, "invalid manifest", e))?
        } else {
            toml::from_str(&text).map_err(|e| {
                Error::input(path, format!("invalid manifest: {}", e.message().trim()))
            })?
        };
        check_loss_window(path, manifest.loss_window)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &str| {
            let joined = base.join(p);
            // a Hub id (`org/name`) stays as given when no such path exists
            if joined.exists() || Path::new(p).is_absolute() {
                joined
            } else {
                PathBuf::from(p)
            }
        };
        let table3 = manifest.table3.unwrap_or_default();
        for m in &table3 {
            checks::name(m, "a method of table3", path)?;
        }
        let mut set = RunSet {
            loss_window: manifest.loss_window,
            loss_metric: manifest.loss_metric,
            table3: table3.iter().map(|m| Method::parse(m)).collect(),
            accuracy: manifest.accuracy.unwrap_or_default(),
            runs: Vec::new(),
        };
        for (n, r) in manifest.run.into_iter().enumerate() {
            checks::name(&r.size, &format!("run {}: size", n + 1), path)?;
            if let Some(m) = &r.method {
                checks::name(m, &format!("run {} (size {}): method", n + 1, r.size), path)?;
            }
            let checkpoint = r.checkpoint.as_deref().map(resolve);
            let (method, method_source) = match (&r.method, &checkpoint) {
                (Some(m), _) => (Method::parse(m), None),
                (None, Some(ckpt)) => {
                    let (m, source) = method_of_checkpoint(ckpt, checkpoints)?;
                    (m, Some(source))
                }
                (None, None) => {
                    return Err(Error::input(
                        path,
                        format!(
                            "run of size {} names no method and no checkpoint to take it from",
                            r.size
                        ),
                    ))
                }
            };
            set.add(
                PaperRun {
                    size: r.size.trim().to_string(),
                    method,
                    method_as_given: r.method.clone(),
                    method_source,
                    checkpoint,
                    log: r.log.as_deref().map(resolve),
                    results: r.results.as_deref().map(resolve),
                    model: r.model,
                    lm_eval: match r.lm_eval {
                        None => Vec::new(),
                        Some(OneOrMany::One(p)) => vec![resolve(&p)],
                        Some(OneOrMany::Many(ps)) => ps.iter().map(|p| resolve(p)).collect(),
                    },
                },
                path,
            )?;
        }
        Ok(set)
    }

    /// Adds `SIZE/METHOD=PATH` (an option's argument) as `input` of that run.
    pub fn add_option(&mut self, input: Input, arg: &str) -> Result<()> {
        let flag = input.flag();
        let (key, path) = arg.split_once('=').ok_or_else(|| {
            Error::option(
                flag,
                format!("takes SIZE/METHOD=PATH (e.g. {flag} 1B/baseline=...), got `{arg}`"),
            )
        })?;
        let (size, method) = key.split_once('/').ok_or_else(|| {
            Error::option(
                flag,
                format!("{arg}: the run is SIZE/METHOD (e.g. 1B/affine_scaled)"),
            )
        })?;
        if size.trim().is_empty() || method.trim().is_empty() || path.is_empty() {
            return Err(Error::option(
                flag,
                format!("{arg}: size, method and path must all be given"),
            ));
        }
        if key.chars().any(char::is_control) {
            return Err(Error::option(
                flag,
                format!("{arg:?}: the size or method has a control character"),
            ));
        }
        let given = method.to_string();
        let method = Method::parse(method);
        let path = PathBuf::from(path);
        let i = match self.find(size, &method) {
            Some(i) => i,
            None => {
                self.runs.push(PaperRun {
                    size: size.to_string(),
                    method: method.clone(),
                    method_as_given: Some(given),
                    method_source: None,
                    checkpoint: None,
                    log: None,
                    results: None,
                    model: None,
                    lm_eval: Vec::new(),
                });
                self.runs.len() - 1
            }
        };
        let run = &mut self.runs[i];
        let slot = match input {
            Input::Checkpoint => &mut run.checkpoint,
            Input::Log => &mut run.log,
            Input::Results => &mut run.results,
            Input::LmEval => {
                run.lm_eval.push(path);
                return Ok(());
            }
        };
        if slot.is_some() {
            return Err(Error::usage(format!(
                "{flag}: {size}/{} is given twice",
                method.key()
            )));
        }
        *slot = Some(path);
        Ok(())
    }

    fn find(&self, size: &str, method: &Method) -> Option<usize> {
        self.runs
            .iter()
            .position(|r| r.size == size && &r.method == method)
    }

    fn add(&mut self, run: PaperRun, manifest: &Path) -> Result<()> {
        if let Some(i) = self.find(&run.size, &run.method) {
            return Err(Error::input(
                manifest,
                format!(
                    "runs {} and {} are both of size {} and method {}",
                    i + 1,
                    self.runs.len() + 1,
                    run.size,
                    run.method.key()
                ),
            ));
        }
        self.runs.push(run);
        Ok(())
    }
}

/// The method a checkpoint's variant stands for, and how it was detected.
fn method_of_checkpoint(
    spec: &Path,
    checkpoints: &dyn CheckpointFacts,
) -> Result<(Method, String)> {
    let (variant, source) = checkpoints.variant(spec)?;
    Ok((
        Method::parse(&variant),
        format!("the checkpoint's variant {variant} ({source})"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_fill_one_run_and_refuse_a_second_path() {
        let mut set = RunSet::default();
        set.add_option(Input::Checkpoint, "1B/asa=ckpt/a").unwrap();
        set.add_option(Input::LmEval, "1B/affine_scaled=e1.json")
            .unwrap();
        set.add_option(Input::LmEval, "1B/affine_scaled=e2.json")
            .unwrap();
        assert_eq!(set.runs.len(), 1);
        assert_eq!(set.runs[0].lm_eval.len(), 2);
        assert!(set.add_option(Input::Checkpoint, "1B/asa=ckpt/b").is_err());
        assert!(set.add_option(Input::Log, "1B=log.csv").is_err());
        assert!(set.add_option(Input::Log, "log.csv").is_err());
    }
}
