//! The `asa_analyze._native` extension: the library's run, inspect and merge called
//! in-process with the GIL released, tables handed to Python as polars DataFrames through
//! Arrow, errors as `AsaError` subclasses whose message is the CLI's one line, Ctrl-C
//! stopping a run between query blocks. `asa_analyze/__init__.py` is the public API.
//!
//! The interpreter owns the process: nothing here installs a signal handler. Each run has a
//! cancellation token of its own, set when `Python::check_signals` reports Ctrl-C (the
//! main thread's runs) or when the caller's `CancelToken.cancel()` is called (any thread).
//! glibc's malloc tunables are left as the interpreter has them: setting them at all (even
//! back to their defaults) stops glibc's dynamic mmap threshold for the rest of the
//! process, which made a torch training loop in the same process 40 % slower after the
//! first analysis (BENCHMARKS.md, "Attention statistics while training").

use std::path::PathBuf;

use asa_analysis::analysis::partial::merge_partials;
use asa_analysis::analysis::record::RunRecord;
use asa_analysis::analysis::run_option::{
    run_options_from, FrontEnd, OptionKind, RunValues, RUN_OPTIONS,
};
use asa_analysis::analysis::{CancelToken, ModelSource, Run, RunEvents, RunOutput};
use asa_cli::results::{write_results, WriteOptions};
use asa_core::error::{ErrorKind, InputKind};
use asa_core::Error;
use asa_figures::paper::runs::Input;
use asa_figures::paper::{paper_tables, typeset, Method, RunSet, ValueOptions};
use asa_logs::report::{self, CurvesOptions, GradStatsOptions, LogInputs, SpikesOptions};
use asa_logs::StepWindow;
use asa_tables::{schema, to_frame, Format, OutputDir, StagingWatch, Table};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use pyo3_polars::PyDataFrame;

mod capture;
mod memory;

create_exception!(
    asa_analyze,
    Cancelled,
    PyException,
    "A run stopped by its CancelToken's cancel(): nothing was written."
);
create_exception!(
    asa_analyze,
    AsaError,
    PyValueError,
    "An error of asa-analyze: the CLI's one line."
);
create_exception!(
    asa_analyze,
    InputError,
    AsaError,
    "A checkpoint, corpus or table that is missing, malformed or inconsistent."
);
create_exception!(
    asa_analyze,
    CheckpointError,
    InputError,
    "A checkpoint (config.json, weights, GGUF, tokenizer, a model in memory) that is missing, malformed or inconsistent."
);
create_exception!(
    asa_analyze,
    CorpusError,
    InputError,
    "A corpus (text, JSONL, token ids) that is missing, malformed or inconsistent."
);
create_exception!(
    asa_analyze,
    TableError,
    InputError,
    "A results table read back (CSV, Parquet) that is missing, malformed or damaged."
);
create_exception!(
    asa_analyze,
    TrainingLogError,
    InputError,
    "A training log (CSV, JSONL, TensorBoard events) that is missing or malformed."
);
create_exception!(
    asa_analyze,
    UsageError,
    AsaError,
    "Options that are invalid or do not go together."
);
create_exception!(
    asa_analyze,
    IoError,
    AsaError,
    "Reading or writing a file failed."
);

/// `UsageError` with the line of a value that did not parse.
fn usage(err: impl std::fmt::Display) -> PyErr {
    UsageError::new_err(err.to_string())
}

/// `f`'s result, a panic turned into an `AsaError` naming it as an internal error (pyo3's
/// PanicException derives from BaseException, so `except Exception` would miss it).
fn no_panic<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(AsaError::new_err(format!(
            "internal error (a bug in asa-analyze, please report it): {text}"
        )))
    })
}

/// The Python exception for a library error, with the file and the option it is about as
/// its `path` and `option` attributes, and a checkpoint's problem as `problem` (its kind:
/// `missing_tensor`, `out_of_range`, ...), `tensor` and `key` (None where it names none).
fn to_py(err: Error) -> PyErr {
    let line = python_spelling(&err.report());
    let path = err.path().map(|p| p.to_string_lossy().into_owned());
    let option = err.option_name().map(python_spelling);
    let tensor = err.problem().and_then(|p| p.tensor()).map(str::to_owned);
    let key = err.problem().and_then(|p| p.key()).map(str::to_owned);
    let problem = err.problem().map(|p| p.name());
    let raised = match err.kind() {
        ErrorKind::Cancelled => Cancelled::new_err("asa-analyze run cancelled"),
        ErrorKind::Input(kind) => match kind {
            InputKind::Checkpoint => CheckpointError::new_err(line),
            InputKind::Corpus => CorpusError::new_err(line),
            InputKind::Table => TableError::new_err(line),
            InputKind::TrainingLog => TrainingLogError::new_err(line),
            InputKind::File => InputError::new_err(line),
        },
        ErrorKind::Usage => UsageError::new_err(line),
        ErrorKind::Io => IoError::new_err(line),
        ErrorKind::Internal => AsaError::new_err(line),
    };
    Python::attach(|py| {
        let value = raised.value(py);
        // setting an attribute on a fresh exception instance cannot fail but for memory
        let _ = value.setattr("path", path);
        let _ = value.setattr("option", option);
        let _ = value.setattr("tensor", tensor);
        let _ = value.setattr("key", key);
        let _ = value.setattr("problem", problem);
    });
    raised
}

/// `text` with the run's options as Python spells them (`--map-size` is `map_size`), the
/// longest flags first (`--role-local-window` before `--role-local`); an option of another
/// command (`--steps`) likewise.
fn python_spelling(text: &str) -> String {
    let mut flags: Vec<(String, &str)> = RUN_OPTIONS
        .iter()
        .map(|o| (format!("--{}", o.flag()), o.name))
        .collect();
    flags.sort_by_key(|(flag, _)| std::cmp::Reverse(flag.len()));
    let mut out = text.to_string();
    for (flag, name) in flags {
        out = out.replace(&flag, name);
    }
    match out.strip_prefix("--") {
        Some(rest) if !rest.contains(' ') => rest.replace('-', "_"),
        _ => out,
    }
}

/// A run's token, for Python: `cancel()` from any thread stops the run it is given to
/// (`analyze(..., cancel=token)`) at its next query block, which then raises `Cancelled`.
#[pyclass(module = "asa_analyze._native", name = "CancelToken", frozen)]
#[derive(Default)]
struct PyCancelToken(CancelToken);

#[pymethods]
impl PyCancelToken {
    #[new]
    fn new() -> Self {
        PyCancelToken::default()
    }

    /// Asks the run to stop at its next query block.
    fn cancel(&self) {
        self.0.cancel()
    }

    /// Whether `cancel()` was called.
    #[getter]
    fn cancelled(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// Forwards a run's events to a Python object (`started(label, tokens)`, `advance(tokens)`,
/// `finished()`, `note(text)`) and checks for Ctrl-C at each of them: Ctrl-C (or a
/// `KeyboardInterrupt` raised by the object) cancels this run's token and is remembered, so
/// the run raises `KeyboardInterrupt`.
struct PyEvents {
    sink: Option<Py<PyAny>>,
    cancel: CancelToken,
    interrupted: bool,
}

impl PyEvents {
    fn new(sink: Option<Py<PyAny>>, cancel: CancelToken) -> PyEvents {
        PyEvents {
            sink,
            cancel,
            interrupted: false,
        }
    }

    /// The run's error for Python: `KeyboardInterrupt` when Ctrl-C stopped it.
    fn error(&self, err: Error) -> PyErr {
        match err {
            Error::Interrupted if self.interrupted => {
                PyKeyboardInterrupt::new_err("asa-analyze run interrupted")
            }
            err => to_py(err),
        }
    }
}

impl PyEvents {
    fn call(
        &mut self,
        method: &str,
        args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>>,
    ) {
        let interrupted = Python::attach(|py| {
            if py.check_signals().is_err() {
                return true;
            }
            let Some(sink) = &self.sink else {
                return false;
            };
            let result = args(py).and_then(|a| sink.bind(py).call_method1(method, a));
            matches!(result, Err(e) if e.is_instance_of::<PyKeyboardInterrupt>(py))
        });
        if interrupted {
            self.interrupted = true;
            self.cancel.cancel();
        }
    }
}

impl RunEvents for PyEvents {
    fn model_started(&mut self, label: &str, tokens: u64) {
        self.call("started", |py| {
            pyo3::types::PyTuple::new(
                py,
                [
                    label.into_pyobject(py)?.into_any(),
                    tokens.into_pyobject(py)?.into_any(),
                ],
            )
        });
    }

    fn progress(&mut self, tokens: u64) {
        self.call("advance", |py| pyo3::types::PyTuple::new(py, [tokens]));
    }

    fn model_finished(&mut self) {
        self.call("finished", |py| Ok(pyo3::types::PyTuple::empty(py)));
    }

    fn note(&mut self, text: &str) {
        self.call("note", |py| pyo3::types::PyTuple::new(py, [text]));
    }
}

/// A run's results: its tables and its run.json record.
#[pyclass(module = "asa_analyze._native", frozen)]
struct NativeResult {
    output: RunOutput,
    record: RunRecord,
}

#[pymethods]
impl NativeResult {
    /// Every section 6 table as (name, DataFrame).
    fn tables(&self) -> PyResult<Vec<(String, PyDataFrame)>> {
        frames(&self.output.tables())
    }

    /// run.json as JSON text.
    fn record(&self) -> PyResult<String> {
        self.record.to_json().map_err(to_py)
    }

    /// Writes the tables and run.json into `dir` exactly as the CLI's `--out dir` does;
    /// returns the files written.
    #[pyo3(signature = (dir, format = "csv", figures = false))]
    fn write(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        format: &str,
        figures: bool,
    ) -> PyResult<Vec<PathBuf>> {
        let format: Format = format.parse().map_err(usage)?;
        // nobody removes this staging folder on a signal but its own Drop: the interpreter,
        // not this library, decides what a signal does
        let watch = StagingWatch::new();
        let options = WriteOptions { format, figures };
        py.detach(|| write_results(&self.output, &self.record, &dir, options, &watch))
            .map(|committed| committed.files)
            .map_err(to_py)
    }
}

/// The run's options given as keyword arguments (`RUN_OPTIONS`, as the CLI's flags), as the
/// text the library parses: a bool for a flag, a list (or one comma-separated string) for
/// a list, a path-like for a file, else the value's text. None leaves an option unset; a
/// keyword that is no option is a TypeError, as Python's own.
pub(crate) fn run_values(
    function: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<RunValues> {
    let mut values = RunValues::new();
    for (key, value) in kwargs.into_iter().flat_map(|d| d.iter()) {
        let name: String = key.extract()?;
        let Some(option) = RUN_OPTIONS.iter().find(|o| o.name == name) else {
            return Err(PyTypeError::new_err(format!(
                "{function}() got an unexpected keyword argument '{name}'"
            )));
        };
        if value.is_none() {
            continue;
        }
        let text = option_text(option.kind, &value)
            .map_err(|why| to_py(Error::option(name.clone(), why)))?;
        values.insert(name, text);
    }
    Ok(values)
}

/// One keyword argument's value as its option's text, or what is wrong with its type.
fn option_text(kind: OptionKind, value: &Bound<'_, PyAny>) -> Result<String, String> {
    let wrong = |what: &str| format!("must be {what}, got {}", describe(value));
    let is_bool = value.is_instance_of::<PyBool>();
    match kind {
        OptionKind::Flag => match is_bool {
            true => Ok(value
                .extract::<bool>()
                .map_err(|_| wrong("True or False"))?
                .to_string()),
            false => Err(wrong("True or False")),
        },
        OptionKind::Count | OptionKind::Seed if is_bool || !value.is_instance_of::<PyInt>() => {
            Err(wrong("a whole number"))
        }
        OptionKind::Number
            if is_bool
                || !(value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>()) =>
        {
            Err(wrong("a number"))
        }
        OptionKind::File => value
            .extract::<PathBuf>()
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|_| wrong("a path")),
        OptionKind::Counts | OptionKind::Choices(_) if !value.is_instance_of::<PyString>() => {
            let items: Vec<Bound<'_, PyAny>> = value
                .try_iter()
                .and_then(|items| items.collect())
                .map_err(|_| wrong("a list"))?;
            let texts: Vec<String> = items.iter().map(|v| text_of(v)).collect::<Result<_, _>>()?;
            Ok(texts.join(","))
        }
        _ => text_of(value),
    }
}

/// A value's `str()`.
fn text_of(value: &Bound<'_, PyAny>) -> Result<String, String> {
    value
        .str()
        .map(|s| s.to_string())
        .map_err(|_| format!("has no text: {}", describe(value)))
}

/// A value as an error shows it: its repr and type.
fn describe(value: &Bound<'_, PyAny>) -> String {
    let repr = value.repr().map(|r| r.to_string()).unwrap_or_default();
    let kind = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    format!("{repr} ({kind})")
}

/// The run options that apply to `asa.capture` (their names), in the table's order.
#[pyfunction]
fn capture_options() -> Vec<&'static str> {
    RUN_OPTIONS
        .iter()
        .map(|o| o.name)
        .filter(|name| asa_analysis::analysis::capture::Capture::OPTIONS.contains(name))
        .collect()
}

/// The run's options as Python sees them: (name, kind, default text or None, help), in the
/// order of the CLI's `--help`.
#[pyfunction]
fn run_options() -> Vec<(&'static str, &'static str, Option<String>, &'static str)> {
    RUN_OPTIONS
        .iter()
        .map(|o| {
            let kind = match o.kind {
                OptionKind::Count | OptionKind::Seed => "int",
                OptionKind::Number => "float",
                OptionKind::Flag => "bool",
                OptionKind::Counts => "List[int]",
                OptionKind::Choices(_) => "List[str]",
                OptionKind::File => "PathLike",
                OptionKind::Bytes => "Union[int, str]",
                OptionKind::Choice(_) | OptionKind::Device => "str",
            };
            (o.name, kind, o.default_text(), o.help)
        })
        .collect()
}

/// The most threads an analysis pool may have (the largest machines have a few hundred
/// cores; a pool is made of real threads, each with its own stack).
const MAX_THREADS: usize = 4096;

/// Runs `work` on `threads` threads of a pool of its own (its rayon tasks and candle's
/// matrix products stay on them), or on the process' pool (every core) when `None`.
fn on_threads<T: Send>(threads: Option<usize>, work: impl FnOnce() -> T + Send) -> PyResult<T> {
    match threads {
        None => Ok(work()),
        Some(0) => Err(UsageError::new_err("threads must be at least 1")),
        Some(n) if n > MAX_THREADS => Err(UsageError::new_err(format!(
            "threads {n} is more than {MAX_THREADS}: a pool that large would only wait on its cores"
        ))),
        Some(n) => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(|i| format!("asa-analyze-{i}"))
                .build()
                .map_err(|e| {
                    UsageError::new_err(format!("cannot start {n} analysis threads: {e}"))
                })?;
            Ok(pool.install(work))
        }
    }
}

/// Runs an analysis (see `asa_analyze.analyze`): the run's options as keyword arguments.
#[pyfunction]
#[pyo3(signature = (models, corpus = None, events = None, cancel = None, memory = None, threads = None, **options))]
fn analyze(
    py: Python<'_>,
    models: Vec<(String, PathBuf)>,
    corpus: Option<PathBuf>,
    events: Option<Py<PyAny>>,
    cancel: Option<PyRef<'_, PyCancelToken>>,
    memory: Option<Vec<memory::MemoryArg>>,
    threads: Option<usize>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<NativeResult> {
    no_panic(|| {
        let values = run_values("analyze", options)?;
        let mut options = run_options_from(&values, FrontEnd::Python).map_err(to_py)?;
        options.inputs.corpus = corpus;
        // models held in memory, by label (their `models` entry gives their place)
        let mut held = std::collections::BTreeMap::new();
        for arg in memory.unwrap_or_default() {
            let label = arg.label.clone();
            held.insert(label, std::sync::Arc::new(memory::memory_model(arg)?));
        }
        let run = Run {
            models: models
                .into_iter()
                .map(|(label, path)| ModelSource {
                    memory: held.remove(&label),
                    ..ModelSource::at(label, path)
                })
                .collect(),
            options,
            cancel: cancel.map(|c| c.0.clone()).unwrap_or_default(),
        };
        let mut sink = PyEvents::new(events, run.cancel.clone());
        let output = py.detach(|| on_threads(threads, || run.execute(&mut sink)))?;
        let output = output.map_err(|e| sink.error(e))?;
        let record = output.record("python analyze", &run.options);
        Ok(NativeResult { output, record })
    })
}

/// `inspect --json` of a checkpoint, or of a model held in memory, as JSON text.
#[pyfunction]
#[pyo3(signature = (path, memory = None))]
fn inspect(py: Python<'_>, path: PathBuf, memory: Option<memory::MemoryArg>) -> PyResult<String> {
    no_panic(|| {
        let model = memory.map(memory::memory_model).transpose()?;
        let report = py
            .detach(|| match &model {
                Some(model) => asa_analysis::analysis::inspect::report_memory(model),
                None => asa_analysis::analysis::inspect::report(&path),
            })
            .map_err(to_py)?;
        Ok(report.to_string())
    })
}

/// The HTML report of results folders (see `asa_analyze.report`): the page's text.
#[pyfunction]
#[pyo3(name = "report")]
fn html_report(py: Python<'_>, results: Vec<PathBuf>) -> PyResult<String> {
    no_panic(|| {
        py.detach(|| asa_figures::report::html(&asa_figures::report::load(&results)?))
            .map_err(to_py)
    })
}

/// The partial results of `analyze --shard K/N` merged into one run's results.
#[pyfunction]
fn merge(py: Python<'_>, partials: Vec<PathBuf>) -> PyResult<NativeResult> {
    no_panic(|| {
        let (output, record) = py
            .detach(|| {
                let merged = merge_partials(&partials, true)?;
                let output = merged.output()?;
                let record = merged.run_record(&output, "python merge");
                Ok::<_, Error>((output, record))
            })
            .map_err(to_py)?;
        Ok(NativeResult { output, record })
    })
}

/// Tables as (name, DataFrame).
fn frames(tables: &[Table]) -> PyResult<Vec<(String, PyDataFrame)>> {
    tables
        .iter()
        .map(|t| {
            // a section 6 table has exactly its schema's columns, in order and kind
            schema::check_declared(t).map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok((t.name.clone(), PyDataFrame(to_frame(t).map_err(to_py)?)))
        })
        .collect()
}

/// The training logs `runs` (`label=path` or paths).
fn log_inputs(runs: Vec<String>, step_column: Option<String>) -> LogInputs {
    LogInputs { runs, step_column }
}

/// A step window (`A..B`, `A..=B`, `A..`, `..B`, `all`).
fn window(text: &str) -> PyResult<StepWindow> {
    text.parse::<StepWindow>().map_err(usage)
}

/// Gradient-norm statistics over a step window, as `asa-analyze grad-stats` (Table 4).
#[pyfunction]
#[pyo3(signature = (runs, metric = "grad_norm", steps = "0..500", ddof = 1, step_column = None))]
fn grad_stats(
    py: Python<'_>,
    runs: Vec<String>,
    metric: &str,
    steps: &str,
    ddof: u32,
    step_column: Option<String>,
) -> PyResult<Vec<(String, PyDataFrame)>> {
    no_panic(|| {
        let options = GradStatsOptions {
            metric: metric.to_string(),
            steps: window(steps)?,
            ddof,
        };
        let inputs = log_inputs(runs, step_column);
        let tables = py
            .detach(|| Ok::<_, Error>(report::grad_stats(&inputs, &options)?.files().tables))
            .map_err(to_py)?;
        frames(&tables)
    })
}

/// Spike counts above median + k * MAD and the spike steps, as `asa-analyze spikes`
/// (Table 5).
#[pyfunction]
#[pyo3(signature = (runs, k = vec![6.0, 9.0], metric = "grad_norm", steps = "all", mad_scale = 1.0, step_column = None))]
fn spikes(
    py: Python<'_>,
    runs: Vec<String>,
    k: Vec<f64>,
    metric: &str,
    steps: &str,
    mad_scale: f64,
    step_column: Option<String>,
) -> PyResult<Vec<(String, PyDataFrame)>> {
    no_panic(|| {
        let options = SpikesOptions {
            metric: metric.to_string(),
            steps: Some(window(steps)?),
            k,
            mad_scale,
        };
        let inputs = log_inputs(runs, step_column);
        let tables = py
            .detach(|| Ok::<_, Error>(report::spikes(&inputs, &options)?.files().tables))
            .map_err(to_py)?;
        frames(&tables)
    })
}

/// Loss and gradient-norm curves, as `asa-analyze curves` (Figs. 7, 8, 10): the `curves`
/// table and the warnings for default metrics a log lacks.
#[pyfunction]
#[pyo3(signature = (runs, metrics = vec![], steps = "all", ema = None, step_column = None))]
fn curves(
    py: Python<'_>,
    runs: Vec<String>,
    metrics: Vec<String>,
    steps: &str,
    ema: Option<f64>,
    step_column: Option<String>,
) -> PyResult<(Vec<(String, PyDataFrame)>, Vec<String>)> {
    no_panic(|| {
        let options = CurvesOptions {
            metrics,
            steps: Some(window(steps)?),
            ema,
        };
        let inputs = log_inputs(runs, step_column);
        let (tables, warnings) = py
            .detach(|| {
                let report = report::curves(&inputs, &options)?;
                Ok::<_, Error>((report.files().tables, report.warnings))
            })
            .map_err(to_py)?;
        Ok((frames(&tables)?, warnings))
    })
}

/// The paper's Tables 1-3 (see `asa_analyze.tables`): the tidy table, and per table its
/// number, Markdown and LaTeX.
#[pyfunction]
#[pyo3(signature = (inputs, manifest = None, table3 = vec![], loss_window = None, loss_metric = None, accuracy = vec![]))]
#[allow(clippy::type_complexity)]
fn tables(
    py: Python<'_>,
    inputs: Vec<(String, String)>,
    manifest: Option<PathBuf>,
    table3: Vec<String>,
    loss_window: Option<i64>,
    loss_metric: Option<String>,
    accuracy: Vec<String>,
) -> PyResult<(Vec<(String, PyDataFrame)>, Vec<(u8, String, String)>)> {
    no_panic(|| {
        let (tidy, texts) = py
            .detach(|| {
                let mut set = match &manifest {
                    Some(path) => RunSet::from_manifest(
                        path,
                        &asa_analysis::analysis::checkpoint_facts::ModelCheckpoints,
                    )?,
                    None => RunSet::default(),
                };
                for (kind, arg) in &inputs {
                    let input = match kind.as_str() {
                        "checkpoint" => Input::Checkpoint,
                        "log" => Input::Log,
                        "results" => Input::Results,
                        "lm_eval" => Input::LmEval,
                        other => {
                            return Err(Error::usage(format!(
                                "unknown input `{other}` (checkpoint, log, results, lm_eval)"
                            )))
                        }
                    };
                    set.add_option(input, arg)?;
                }
                if set.runs.is_empty() {
                    return Err(Error::usage("tables needs runs (runs= or manifest=)"));
                }
                if !table3.is_empty() {
                    set.table3 = table3.iter().map(|m| Method::parse(m)).collect();
                }
                let options = ValueOptions::resolve(&set, loss_window, loss_metric, &accuracy)?;
                let tables = paper_tables(
                    &set,
                    &options,
                    &asa_analysis::analysis::checkpoint_facts::ModelCheckpoints,
                )?;
                let texts: Vec<(u8, String, String)> = tables
                    .iter()
                    .map(|t| (t.number, typeset::markdown(t), typeset::latex(t)))
                    .collect();
                Ok::<_, Error>((typeset::tidy(&tables), texts))
            })
            .map_err(to_py)?;
        Ok((frames(&[tidy])?, texts))
    })
}

/// Every figure the tables of the `results` folders allow, into `out`, as `asa-analyze
/// figures`; returns the files written.
#[pyfunction]
fn figures(py: Python<'_>, results: Vec<PathBuf>, out: PathBuf) -> PyResult<Vec<PathBuf>> {
    no_panic(|| {
        py.detach(|| {
            if let Some(bad) = results.iter().find(|d| !d.is_dir()) {
                return Err(Error::input(bad, "not a results folder"));
            }
            let mut dir = OutputDir::create(&out, Format::Csv, &StagingWatch::new())?;
            asa_figures::plot::render_all(&results, &mut dir)?;
            dir.commit()
        })
        .map_err(to_py)
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // a damaged Parquet table's reader panic is an error naming the file, said once
    asa_tables::damaged::quiet_guarded_panics();
    m.add("AsaError", m.py().get_type::<AsaError>())?;
    m.add("Cancelled", m.py().get_type::<Cancelled>())?;
    m.add_class::<PyCancelToken>()?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    m.add("CheckpointError", m.py().get_type::<CheckpointError>())?;
    m.add("CorpusError", m.py().get_type::<CorpusError>())?;
    m.add("TableError", m.py().get_type::<TableError>())?;
    m.add("TrainingLogError", m.py().get_type::<TrainingLogError>())?;
    m.add("UsageError", m.py().get_type::<UsageError>())?;
    m.add("IoError", m.py().get_type::<IoError>())?;
    m.add_class::<NativeResult>()?;
    m.add_class::<capture::NativeCapture>()?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(run_options, m)?)?;
    m.add_function(wrap_pyfunction!(capture_options, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(merge, m)?)?;
    m.add_function(wrap_pyfunction!(html_report, m)?)?;
    m.add_function(wrap_pyfunction!(grad_stats, m)?)?;
    m.add_function(wrap_pyfunction!(spikes, m)?)?;
    m.add_function(wrap_pyfunction!(curves, m)?)?;
    m.add_function(wrap_pyfunction!(figures, m)?)?;
    m.add_function(wrap_pyfunction!(tables, m)?)?;
    m.add(
        "CHECKPOINT_PROBLEMS",
        asa_core::CheckpointProblem::NAMES.to_vec(),
    )?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
