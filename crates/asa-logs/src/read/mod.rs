//! Training-log readers: CSV/TSV with a header, Weights & Biases CSV exports, JSON Lines
//! (nested keys flattened with `/`), and TensorBoard event files. Each reader returns
//! the requested metrics as [`RawSeries`] in file order; cleaning happens in
//! [`super::series`].

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::metric::{self, MatchKind};
use super::series::{Observation, RawSeries};
use asa_core::error::{Error, Result};

mod attention_series;
mod delimited;
mod jsonl;
mod tfevents;

pub use attention_series::series_name;

/// The kind of log a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Comma-separated with a header.
    Csv,
    /// Tab-separated with a header.
    Tsv,
    /// A W&B panel/run export: `Step`, `<run> - <metric>` columns.
    WandbCsv,
    /// One JSON object per line.
    JsonLines,
    /// `events.out.tfevents.*` files (one file or a run folder).
    TensorBoard,
    /// An `attention_series` table (CSV or Parquet): its means as `attn/...` series, one
    /// run per model.
    AttentionSeries,
}

/// What to read from a log.
#[derive(Debug, Clone, Default)]
pub struct LogRequest {
    /// Metric names as the user gave them (aliases allowed).
    pub metrics: Vec<String>,
    /// The step column, when the user named it (`--step-column`).
    pub step_column: Option<String>,
}

/// The requested metrics found in one log file (or TensorBoard folder).
#[derive(Debug, Clone)]
pub struct LogFile {
    /// The file or folder read.
    pub path: PathBuf,
    /// Its format.
    pub format: LogFormat,
    /// One entry per requested metric found (and per run, for W&B exports).
    pub series: Vec<RawSeries>,
    /// Requests that matched nothing.
    pub absent: Vec<String>,
    /// Every column or tag that holds values, for error messages.
    pub names: Vec<String>,
    /// Things the user should know (no step column, truncated record, ...).
    pub warnings: Vec<String>,
}

impl LogFile {
    /// The error for a request that matched nothing: names the file, the request, its
    /// aliases and the columns or tags that exist.
    pub fn absent_error(&self, request: &str) -> Error {
        let (what, plural) = match self.format {
            LogFormat::TensorBoard => ("scalar tag", "scalar tags"),
            LogFormat::AttentionSeries => ("series", "series"),
            LogFormat::JsonLines => ("key", "keys"),
            _ => ("column", "columns"),
        };
        let aliases = metric::alias_hint(request)
            .map(|a| format!(" (or an alias: {a})"))
            .unwrap_or_default();
        Error::training_log(
            &self.path,
            format!(
                "no {what} `{request}`{aliases}; {plural} found: {}",
                list_names(&self.names)
            ),
        )
    }
}

/// `a, b, c` with at most 40 names, then a count of the rest.
fn list_names(names: &[String]) -> String {
    if names.is_empty() {
        return "none".into();
    }
    const MAX: usize = 40;
    let mut s = names
        .iter()
        .take(MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX {
        s.push_str(&format!(" ... ({} more)", names.len() - MAX));
    }
    s
}

/// Reads the requested metrics from `path`, choosing the reader from the path: a
/// folder or an `*tfevents*` file is TensorBoard, `.jsonl`/`.ndjson`/`.json` is JSON
/// Lines, `.tsv`/`.tab` is TSV, `.parquet` and a CSV with the `attention_series` header are
/// attention series, anything else CSV (TSV when the header has tabs and no commas; a W&B
/// export when it has `Step` and `<run> - <metric>` columns).
pub fn read_log(path: &Path, request: &LogRequest) -> Result<LogFile> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if meta.is_dir() || name.contains("tfevents") {
        return tfevents::read(path, request);
    }
    if meta.len() == 0 {
        return Err(Error::training_log(path, "log file is empty"));
    }
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "jsonl" | "ndjson" | "json" => jsonl::read(path, request),
        "parquet" => attention_series::read(path, request),
        "csv" if attention_series::is_attention_series_header(&first_line(path)?) => {
            attention_series::read(path, request)
        }
        "tsv" | "tab" => delimited::read(path, request, Some(b'\t')),
        _ => delimited::read(path, request, None),
    }
}

/// The first line of the text file at `path` (at most 64 KiB of it).
fn first_line(path: &Path) -> Result<String> {
    use std::io::{BufRead, Read};
    let file = asa_core::input::open(path)?;
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(file.take(1 << 16));
    // a file that is not UTF-8 is not an attention_series table: the CSV reader says why
    if reader.read_line(&mut line).is_err() {
        line.clear();
    }
    Ok(line)
}

/// Tracks, for each request, which column/key/tag answers it, while names stream in
/// (JSON Lines keys and TensorBoard tags are only known once seen).
struct Matcher {
    requests: Vec<String>,
    /// Per request: the best match kind so far and the names of that kind, in order seen.
    best: Vec<Option<(MatchKind, Vec<String>)>>,
}

impl Matcher {
    fn new(requests: &[String]) -> Self {
        Matcher {
            requests: requests.to_vec(),
            best: vec![None; requests.len()],
        }
    }

    /// Requests (by index) that `name` answers; records the match.
    fn offer(&mut self, name: &str) -> Vec<usize> {
        let mut hits = Vec::new();
        for (i, req) in self.requests.iter().enumerate() {
            let Some(kind) = metric::match_kind(req, name) else {
                continue;
            };
            hits.push(i);
            match &mut self.best[i] {
                Some((k, v)) if *k == kind => {
                    if !v.iter().any(|n| n == name) {
                        v.push(name.to_string());
                    }
                }
                Some((k, _)) if *k > kind => {}
                slot => *slot = Some((kind, vec![name.to_string()])),
            }
        }
        hits
    }

    /// The chosen name per request; an error when several aliases tie.
    fn resolve(&self, path: &Path) -> Result<Vec<Option<String>>> {
        self.best
            .iter()
            .zip(&self.requests)
            .map(|(b, req)| match b {
                None => Ok(None),
                Some((_, v)) if v.len() == 1 => Ok(Some(v[0].clone())),
                Some((_, v)) => Err(ambiguous(path, req, v)),
            })
            .collect()
    }
}

fn ambiguous(path: &Path, request: &str, names: &[String]) -> Error {
    Error::training_log(
        path,
        format!(
            "metric `{request}` matches several columns ({}); name one exactly with --metric",
            names.join(", ")
        ),
    )
}

/// Parses a logged value: empty, `null`, `None`, `NA`, `N/A` are missing; `nan`, `inf`,
/// `-inf`, `Infinity` are accepted in any case.
fn parse_value(cell: &str) -> std::result::Result<Option<f64>, ()> {
    let t = cell.trim();
    if t.is_empty()
        || ["null", "none", "na", "n/a"]
            .iter()
            .any(|m| t.eq_ignore_ascii_case(m))
    {
        return Ok(None);
    }
    t.parse::<f64>().map(Some).map_err(|_| ())
}

/// Parses a step: an integer, or a float with no fractional part (`100.0`).
fn parse_step(cell: &str) -> std::result::Result<Option<i64>, ()> {
    let t = cell.trim();
    if t.is_empty() {
        return Ok(None);
    }
    if let Ok(v) = t.parse::<i64>() {
        return Ok(Some(v));
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 => Ok(Some(v as i64)),
        _ => Err(()),
    }
}

/// Collects observations per (request, name) while reading, then keeps the chosen name's.
#[derive(Default)]
struct Collector {
    /// (request index, name) -> rows.
    rows: Vec<(usize, String, Vec<Observation>)>,
}

impl Collector {
    fn push(&mut self, request: usize, name: &str, obs: Observation) {
        if let Some((_, _, v)) = self
            .rows
            .iter_mut()
            .find(|(r, n, _)| *r == request && n == name)
        {
            v.push(obs);
        } else {
            self.rows.push((request, name.to_string(), vec![obs]));
        }
    }

    /// Builds the [`LogFile`] once every name is known.
    fn finish(
        mut self,
        path: &Path,
        format: LogFormat,
        matcher: &Matcher,
        names: Vec<String>,
        warnings: Vec<String>,
    ) -> Result<LogFile> {
        let chosen = matcher.resolve(path)?;
        let mut series = Vec::new();
        let mut absent = Vec::new();
        for (i, (req, pick)) in matcher.requests.iter().zip(chosen).enumerate() {
            let Some(pick) = pick else {
                absent.push(req.clone());
                continue;
            };
            let rows = self
                .rows
                .iter_mut()
                .find(|(r, n, _)| *r == i && *n == pick)
                .map(|(_, _, v)| std::mem::take(v))
                .unwrap_or_default();
            series.push(RawSeries {
                run: None,
                metric: metric::display_name(req),
                source: pick,
                rows,
            });
        }
        Ok(LogFile {
            path: path.to_path_buf(),
            format,
            series,
            absent,
            names,
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_steps() {
        assert_eq!(parse_value(" 1.5 "), Ok(Some(1.5)));
        assert_eq!(parse_value(""), Ok(None));
        assert_eq!(parse_value("None"), Ok(None));
        assert!(parse_value("NaN").unwrap().unwrap().is_nan());
        assert_eq!(parse_value("-Infinity"), Ok(Some(f64::NEG_INFINITY)));
        assert_eq!(parse_value("inf"), Ok(Some(f64::INFINITY)));
        assert_eq!(parse_value("abc"), Err(()));
        assert_eq!(parse_step("100"), Ok(Some(100)));
        assert_eq!(parse_step("100.0"), Ok(Some(100)));
        assert_eq!(parse_step("1e3"), Ok(Some(1000)));
        assert_eq!(parse_step("1.5"), Err(()));
        assert_eq!(parse_step(""), Ok(None));
    }
}
