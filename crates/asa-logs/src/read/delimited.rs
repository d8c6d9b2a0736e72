//! CSV and TSV logs with a header row, including Weights & Biases exports (`Step`
//! column plus `<run> - <metric>` columns; `__MIN`/`__MAX` columns are ignored).
//!
//! Empty cells: in a plain log an empty cell is a missing value (counted); in a W&B
//! export the rows are the union of every run's steps, so an empty cell only means
//! that run did not log at that step and is skipped.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::{list_names, parse_step, parse_value, LogFile, LogFormat, LogRequest, Matcher};
use crate::metric;
use crate::series::{Observation, RawSeries};
use asa_core::error::{Error, InputKind, Result};

/// One column to extract.
struct Target {
    column: usize,
    run: Option<String>,
    metric: String,
    source: String,
    rows: Vec<Observation>,
}

/// The columns chosen from a header: what to read, the requests no column answers, and
/// every metric name the log offers.
struct Columns {
    targets: Vec<Target>,
    absent: Vec<String>,
    names: Vec<String>,
}

/// How the data rows are laid out, for reading them.
struct Rows<'a> {
    path: &'a Path,
    headers: &'a [String],
    step_col: Option<usize>,
    /// An empty cell means "not logged at this step" (W&B exports), not a missing value.
    skip_empty: bool,
}

/// What reading the data rows counted.
#[derive(Default)]
struct RowCounts {
    /// Rows with at least one non-empty cell.
    rows: i64,
    /// Of those, rows whose step cell is empty (skipped).
    no_step: usize,
}

pub(super) fn read(path: &Path, request: &LogRequest, delimiter: Option<u8>) -> Result<LogFile> {
    let file = asa_core::input::open(path)?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let delimiter = match delimiter {
        Some(d) => d,
        None => sniff_delimiter(&mut reader, path)?,
    };
    let format = if delimiter == b'\t' {
        LogFormat::Tsv
    } else {
        LogFormat::Csv
    };
    let mut csv = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .from_reader(reader);
    let headers = read_headers(&mut csv, path)?;

    let mut warnings = Vec::new();
    let wandb = is_wandb_export(&headers);
    let step_col = step_column(path, &headers, request, wandb)?;
    if step_col.is_none() {
        warnings.push(format!(
            "no step column (looked for {}); using the row number as the step",
            metric::STEP_NAMES.join(", ")
        ));
    }
    let (mut columns, format) = if wandb {
        let columns = wandb_targets(path, &headers, request, &mut warnings)?;
        (columns, LogFormat::WandbCsv)
    } else {
        (plain_targets(path, &headers, step_col, request)?, format)
    };
    check_unique(path, &headers, step_col, &columns.targets)?;
    let rows = Rows {
        path,
        headers: &headers,
        step_col,
        skip_empty: format == LogFormat::WandbCsv,
    };
    let counts = rows.read(&mut csv, &mut columns.targets)?;
    if counts.rows == 0 {
        return Err(Error::training_log(
            path,
            "log file has a header but no data rows",
        ));
    }
    if counts.no_step > 0 {
        warnings.push(format!(
            "{} rows without a step were skipped",
            counts.no_step
        ));
    }
    Ok(LogFile {
        path: path.to_path_buf(),
        format,
        series: columns.targets.into_iter().map(Target::series).collect(),
        absent: columns.absent,
        names: columns.names,
        warnings,
    })
}

/// The delimiter of a file not named `.csv` or `.tsv`: a tab when the first line has tabs
/// and no commas, else a comma.
fn sniff_delimiter(reader: &mut BufReader<File>, path: &Path) -> Result<u8> {
    let head = reader.fill_buf().map_err(|e| Error::io(path, e))?;
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    Ok(if line.contains(&b'\t') && !line.contains(&b',') {
        b'\t'
    } else {
        b','
    })
}

/// The header row, each name trimmed; an error when every name is empty.
fn read_headers<R: Read>(csv: &mut csv::Reader<R>, path: &Path) -> Result<Vec<String>> {
    let headers: Vec<String> = csv
        .headers()
        .map_err(|e| csv_error(path, e))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    if headers.iter().all(|h| h.is_empty()) {
        return Err(Error::training_log(path, "log file has no header row"));
    }
    Ok(headers)
}

/// The step column: the one requested, else W&B's x axis, else a known step name.
fn step_column(
    path: &Path,
    headers: &[String],
    request: &LogRequest,
    wandb: bool,
) -> Result<Option<usize>> {
    Ok(match &request.step_column {
        Some(want) => Some(headers.iter().position(|h| h == want).ok_or_else(|| {
            Error::training_log(
                path,
                format!("no step column `{want}`; columns: {}", list_names(headers)),
            )
        })?),
        // W&B writes the chart's x axis first: `Step`, or the key chosen (e.g. train/global_step)
        None if wandb => headers
            .iter()
            .position(|h| h == "Step")
            .or_else(|| (!headers[0].contains(" - ")).then_some(0)),
        None => metric::find_step(headers.iter().map(String::as_str), None)
            .and_then(|s| headers.iter().position(|h| h == s)),
    })
}

/// A plain log's columns: every header but the step column names a metric; one target per
/// request that a column answers.
fn plain_targets(
    path: &Path,
    headers: &[String],
    step_col: Option<usize>,
    request: &LogRequest,
) -> Result<Columns> {
    let names: Vec<String> = headers
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != step_col)
        .map(|(_, h)| h.clone())
        .collect();
    let mut matcher = Matcher::new(&request.metrics);
    for n in &names {
        matcher.offer(n);
    }
    let mut targets = Vec::new();
    let mut absent = Vec::new();
    for (req, pick) in request.metrics.iter().zip(matcher.resolve(path)?) {
        match pick {
            Some(pick) => targets.push(Target {
                column: headers.iter().position(|h| *h == pick).unwrap_or_default(),
                run: None,
                metric: metric::display_name(req),
                source: pick,
                rows: Vec::new(),
            }),
            None => absent.push(req.clone()),
        }
    }
    Ok(Columns {
        targets,
        absent,
        names,
    })
}

/// Refuses a step or target column whose name the header holds twice.
fn check_unique(
    path: &Path,
    headers: &[String],
    step_col: Option<usize>,
    targets: &[Target],
) -> Result<()> {
    for column in step_col.iter().chain(targets.iter().map(|t| &t.column)) {
        let name = &headers[*column];
        if headers.iter().filter(|h| *h == name).count() > 1 {
            return Err(Error::training_log(
                path,
                format!("column `{name}` appears more than once in the header; which one to read is ambiguous"),
            ));
        }
    }
    Ok(())
}

impl Rows<'_> {
    /// Reads every data row into `targets`; blank rows are skipped, rows without a step
    /// counted and skipped.
    fn read<R: Read>(&self, csv: &mut csv::Reader<R>, targets: &mut [Target]) -> Result<RowCounts> {
        let mut record = csv::StringRecord::new();
        let mut counts = RowCounts::default();
        while csv
            .read_record(&mut record)
            .map_err(|e| csv_error(self.path, e))?
        {
            let line = record.position().map_or(0, |p| p.line());
            if record.iter().all(|c| c.trim().is_empty()) {
                continue;
            }
            self.check_width(&record, line)?;
            let index = counts.rows;
            counts.rows += 1;
            let Some(step) = self.step(&record, line, index)? else {
                counts.no_step += 1;
                continue;
            };
            self.push_values(&record, line, step, targets)?;
        }
        Ok(counts)
    }

    /// Refuses a row with more cells than the header names: which column a value belongs
    /// to is unknown (empty trailing cells, a trailing delimiter, are fine).
    fn check_width(&self, record: &csv::StringRecord, line: u64) -> Result<()> {
        if record
            .iter()
            .skip(self.headers.len())
            .any(|c| !c.trim().is_empty())
        {
            return Err(Error::training_log(
                self.path,
                format!(
                    "line {line}: {} fields, but the header names {} columns",
                    record.len(),
                    self.headers.len()
                ),
            ));
        }
        Ok(())
    }

    /// The row's step: the row number without a step column, `None` for an empty cell.
    fn step(&self, record: &csv::StringRecord, line: u64, index: i64) -> Result<Option<i64>> {
        let Some(c) = self.step_col else {
            return Ok(Some(index));
        };
        let cell = record.get(c).unwrap_or("");
        parse_step(cell).map_err(|()| {
            Error::training_log(
                self.path,
                format!("line {line}: step `{}` is not an integer", cell.trim()),
            )
        })
    }

    /// Adds the row's value at `step` to each target (an empty cell skipped where
    /// `skip_empty`, else a missing value).
    fn push_values(
        &self,
        record: &csv::StringRecord,
        line: u64,
        step: i64,
        targets: &mut [Target],
    ) -> Result<()> {
        for t in targets {
            let cell = record.get(t.column).unwrap_or("");
            let value = parse_value(cell).map_err(|()| {
                Error::training_log(
                    self.path,
                    format!(
                        "line {line}, column `{}`: `{}` is not a number",
                        self.headers[t.column],
                        cell.trim()
                    ),
                )
            })?;
            if value.is_none() && self.skip_empty {
                continue;
            }
            t.rows.push(Observation { step, value });
        }
        Ok(())
    }
}

impl Target {
    /// The rows read, as a series.
    fn series(self) -> RawSeries {
        RawSeries {
            run: self.run,
            metric: self.metric,
            source: self.source,
            rows: self.rows,
        }
    }
}

/// Whether a header is a Weights & Biases CSV export: `<run> - <metric>` columns beside the
/// x axis, which is `Step` by default, or any key with the `__MIN` / `__MAX` companion
/// columns W&B writes for sampled charts, or a known step name first.
fn is_wandb_export(headers: &[String]) -> bool {
    let runs = headers.iter().any(|h| h.contains(" - "));
    let step_first = metric::find_step(headers.iter().take(1).map(String::as_str), None).is_some();
    let companions = headers
        .iter()
        .any(|h| h.contains(" - ") && (h.ends_with("__MIN") || h.ends_with("__MAX")));
    runs && (headers.iter().any(|h| h == "Step") || companions || step_first)
}

/// W&B columns `<run> - <metric>`: one target per run and requested metric.
fn wandb_targets(
    path: &Path,
    headers: &[String],
    request: &LogRequest,
    warnings: &mut Vec<String>,
) -> Result<Columns> {
    // (run, [(metric name, column)]) in order of appearance.
    let mut runs: Vec<(String, Vec<(String, usize)>)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        if h.ends_with("__MIN") || h.ends_with("__MAX") {
            continue;
        }
        let Some((run, name)) = h.rsplit_once(" - ") else {
            continue;
        };
        let (run, name) = (run.trim().to_string(), name.trim().to_string());
        if !names.contains(&name) {
            names.push(name.clone());
        }
        match runs.iter_mut().find(|(r, _)| *r == run) {
            Some((_, cols)) => cols.push((name, i)),
            None => runs.push((run, vec![(name, i)])),
        }
    }
    let mut targets = Vec::new();
    let mut absent = Vec::new();
    for req in &request.metrics {
        let mut found = Vec::new();
        let mut lacking = Vec::new();
        for (run, cols) in &runs {
            match metric::resolve(req, cols.iter().map(|(n, _)| n.as_str())) {
                Ok(Some(pick)) => {
                    let column = cols.iter().find(|(n, _)| n == pick).map_or(0, |c| c.1);
                    found.push(Target {
                        column,
                        run: Some(run.clone()),
                        metric: metric::display_name(req),
                        source: headers[column].clone(),
                        rows: Vec::new(),
                    });
                }
                Ok(None) => lacking.push(run.clone()),
                Err(tied) => {
                    let tied: Vec<String> = tied.iter().map(|n| format!("{run} - {n}")).collect();
                    return Err(super::ambiguous(path, req, &tied));
                }
            }
        }
        if found.is_empty() {
            absent.push(req.clone());
        } else if !lacking.is_empty() {
            warnings.push(format!(
                "runs without `{req}` skipped: {}",
                lacking.join(", ")
            ));
        }
        targets.extend(found);
    }
    Ok(Columns {
        targets,
        absent,
        names,
    })
}

fn csv_error(path: &Path, e: csv::Error) -> Error {
    let line = e
        .position()
        .map(|p| format!("line {}: ", p.line()))
        .unwrap_or_default();
    match e.kind() {
        csv::ErrorKind::Io(_) => match e.into_kind() {
            csv::ErrorKind::Io(io) => Error::io(path, io),
            _ => unreachable!("the kind was just matched"),
        },
        csv::ErrorKind::Utf8 { .. } => {
            Error::training_log(path, format!("{line}not valid UTF-8 text"))
        }
        _ => Error::invalid(path, format!("{line}cannot parse as CSV"), e)
            .about(InputKind::TrainingLog),
    }
}
