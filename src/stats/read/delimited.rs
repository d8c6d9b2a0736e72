//! CSV and TSV logs with a header row, including Weights & Biases exports (`Step`
//! column plus `<run> - <metric>` columns; `__MIN`/`__MAX` columns are ignored).
//!
//! Empty cells: in a plain log an empty cell is a missing value (counted); in a W&B
//! export the rows are the union of every run's steps, so an empty cell only means
//! that run did not log at that step and is skipped.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{list_names, parse_step, parse_value, LogFile, LogFormat, LogRequest, Matcher};
use crate::error::{Error, Result};
use crate::stats::metric;
use crate::stats::series::{Observation, RawSeries};

/// One column to extract.
struct Target {
    column: usize,
    run: Option<String>,
    metric: String,
    source: String,
    rows: Vec<Observation>,
}

pub(super) fn read(path: &Path, request: &LogRequest, delimiter: Option<u8>) -> Result<LogFile> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let delimiter = match delimiter {
        Some(d) => d,
        None => {
            let head = reader.fill_buf().map_err(|e| Error::io(path, e))?;
            let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
            if line.contains(&b'\t') && !line.contains(&b',') {
                b'\t'
            } else {
                b','
            }
        }
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
    let headers: Vec<String> = csv
        .headers()
        .map_err(|e| csv_error(path, e))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    if headers.iter().all(|h| h.is_empty()) {
        return Err(Error::input(path, "log file has no header row"));
    }

    let mut warnings = Vec::new();
    let wandb = is_wandb_export(&headers);
    let step_col = match &request.step_column {
        Some(want) => Some(headers.iter().position(|h| h == want).ok_or_else(|| {
            Error::input(
                path,
                format!("no step column `{want}`; columns: {}", list_names(&headers)),
            )
        })?),
        // W&B writes the chart's x axis first: `Step`, or the key chosen (e.g. train/global_step)
        None if wandb => headers
            .iter()
            .position(|h| h == "Step")
            .or_else(|| (!headers[0].contains(" - ")).then_some(0)),
        None => metric::find_step(headers.iter().map(String::as_str), None)
            .and_then(|s| headers.iter().position(|h| h == s)),
    };
    if step_col.is_none() {
        warnings.push(format!(
            "no step column (looked for {}); using the row number as the step",
            metric::STEP_NAMES.join(", ")
        ));
    }

    let (mut targets, absent, names, format) = if wandb {
        let (t, a, n) = wandb_targets(path, &headers, request, &mut warnings)?;
        (t, a, n, LogFormat::WandbCsv)
    } else {
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
        (targets, absent, names, format)
    };

    for column in step_col.iter().chain(targets.iter().map(|t| &t.column)) {
        let name = &headers[*column];
        if headers.iter().filter(|h| *h == name).count() > 1 {
            return Err(Error::input(
                path,
                format!("column `{name}` appears more than once in the header; which one to read is ambiguous"),
            ));
        }
    }
    let skip_empty = format == LogFormat::WandbCsv;
    let mut record = csv::StringRecord::new();
    let mut n_rows: i64 = 0;
    let mut no_step = 0usize;
    loop {
        match csv.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(csv_error(path, e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        if record.iter().all(|c| c.trim().is_empty()) {
            continue;
        }
        // more cells than the header names: which column a value belongs to is unknown
        // (empty trailing cells, a trailing delimiter, are fine)
        if record
            .iter()
            .skip(headers.len())
            .any(|c| !c.trim().is_empty())
        {
            return Err(Error::input(
                path,
                format!(
                    "line {line}: {} fields, but the header names {} columns",
                    record.len(),
                    headers.len()
                ),
            ));
        }
        let index = n_rows;
        n_rows += 1;
        let step = match step_col {
            None => index,
            Some(c) => {
                let cell = record.get(c).unwrap_or("");
                match parse_step(cell) {
                    Ok(Some(s)) => s,
                    Ok(None) => {
                        no_step += 1;
                        continue;
                    }
                    Err(()) => {
                        return Err(Error::input(
                            path,
                            format!("line {line}: step `{}` is not an integer", cell.trim()),
                        ))
                    }
                }
            }
        };
        for t in &mut targets {
            let cell = record.get(t.column).unwrap_or("");
            let value = parse_value(cell).map_err(|()| {
                Error::input(
                    path,
                    format!(
                        "line {line}, column `{}`: `{}` is not a number",
                        headers[t.column],
                        cell.trim()
                    ),
                )
            })?;
            if value.is_none() && skip_empty {
                continue;
            }
            t.rows.push(Observation { step, value });
        }
    }
    if n_rows == 0 {
        return Err(Error::input(path, "log file has a header but no data rows"));
    }
    if no_step > 0 {
        warnings.push(format!("{no_step} rows without a step were skipped"));
    }
    let series = targets
        .into_iter()
        .map(|t| RawSeries {
            run: t.run,
            metric: t.metric,
            source: t.source,
            rows: t.rows,
        })
        .collect();
    Ok(LogFile {
        path: path.to_path_buf(),
        format,
        series,
        absent,
        names,
        warnings,
    })
}

type Targets = (Vec<Target>, Vec<String>, Vec<String>);

/// W&B columns `<run> - <metric>`: one target per run and requested metric.
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

fn wandb_targets(
    path: &Path,
    headers: &[String],
    request: &LogRequest,
    warnings: &mut Vec<String>,
) -> Result<Targets> {
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
    Ok((targets, absent, names))
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
        csv::ErrorKind::Utf8 { .. } => Error::input(path, format!("{line}not valid UTF-8 text")),
        _ => Error::invalid(path, format!("{line}cannot parse as CSV"), e),
    }
}
