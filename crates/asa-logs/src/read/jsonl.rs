//! JSON Lines logs: one object per line, nested objects flattened with `/`
//! (`{"train": {"grad_norm": 1.2}}` is key `train/grad_norm`). Python's `NaN`,
//! `Infinity` and `-Infinity` literals are accepted; `null` is a missing value; a line
//! without the key did not log that metric and is skipped (eval lines between training
//! lines, say). A `.json` file holding one array of objects, or an object with a
//! `log_history` array (Hugging Face `trainer_state.json`), is read the same way.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::{Collector, LogFile, LogFormat, LogRequest, Matcher};
use crate::metric;
use crate::series::Observation;
use asa_core::error::{Error, InputKind, Result};

/// Streaming state shared by the line and the whole-document paths.
struct State<'a> {
    path: &'a Path,
    matcher: Matcher,
    collector: Collector,
    /// Every key with a scalar value, in order seen.
    names: Vec<String>,
    /// Key -> the requests it answers, cached.
    seen: HashMap<String, Vec<usize>>,
    step_key: Option<String>,
    objects: i64,
    no_step: usize,
}

pub(super) fn read(path: &Path, request: &LogRequest) -> Result<LogFile> {
    let file = asa_core::input::open(path)?;
    let reader = BufReader::with_capacity(1 << 16, file);
    let mut state = State {
        path,
        matcher: Matcher::new(&request.metrics),
        collector: Collector::default(),
        names: Vec::new(),
        seen: HashMap::new(),
        step_key: request.step_column.clone(),
        objects: 0,
        no_step: 0,
    };
    if !state.whole_document()? {
        state.lines(reader)?;
    }
    state.finish()
}

/// The objects of a whole JSON document: an array, or trainer_state.json's `log_history`.
fn document_items(doc: Value) -> Option<Vec<Value>> {
    match doc {
        Value::Array(a) => Some(a),
        Value::Object(mut o) => match o.remove("log_history") {
            Some(Value::Array(a)) => Some(a),
            _ => None,
        },
        _ => None,
    }
}

impl State<'_> {
    /// Reads a `.json` file holding a whole JSON document (array, or trainer_state.json)
    /// rather than JSON Lines; false when the file is not one.
    fn whole_document(&mut self) -> Result<bool> {
        let path = self.path;
        let is_json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if !is_json {
            return Ok(false);
        }
        let text = asa_core::input::read_text(path, asa_core::input::TEXT)?;
        let Ok(doc) = serde_json::from_str::<Value>(&python_literals(&text)) else {
            return Ok(false);
        };
        let Some(items) = document_items(doc) else {
            return Ok(false);
        };
        for (i, item) in items.iter().enumerate() {
            self.object(item, &format!("item {i}"))?;
        }
        Ok(true)
    }

    /// Reads JSON Lines: one object a line, blank lines skipped.
    fn lines(&mut self, mut reader: BufReader<File>) -> Result<()> {
        let path = self.path;
        let mut line = String::new();
        let mut number = 0usize;
        loop {
            line.clear();
            let n = reader
                .read_line(&mut line)
                .map_err(|e| Error::io(path, e))?;
            if n == 0 {
                return Ok(());
            }
            number += 1;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&python_literals(text)).map_err(|e| {
                Error::invalid(path, format!("line {number}: not valid JSON"), e)
                    .about(InputKind::TrainingLog)
            })?;
            self.object(&value, &format!("line {number}"))?;
        }
    }

    /// The log once every object is read: errors for no objects or no steps, warnings for
    /// a step taken from position and for objects skipped.
    fn finish(self) -> Result<LogFile> {
        let path = self.path;
        if self.objects == 0 {
            return Err(Error::training_log(path, "log file has no JSON objects"));
        }
        let mut warnings = Vec::new();
        if self.step_key.is_none() {
            warnings.push(format!(
                "no step key (looked for {}); using the object's position as the step",
                metric::STEP_NAMES.join(", ")
            ));
        }
        if self.no_step as i64 == self.objects {
            let key = self.step_key.as_deref().unwrap_or_default();
            return Err(Error::training_log(
                path,
                format!("no object has the step key `{key}`"),
            ));
        }
        if self.no_step > 0 {
            warnings.push(format!(
                "{} objects without a step were skipped",
                self.no_step
            ));
        }
        let step_key = self.step_key;
        let names = self
            .names
            .into_iter()
            .filter(|n| Some(n) != step_key.as_ref())
            .collect();
        self.collector
            .finish(path, LogFormat::JsonLines, &self.matcher, names, warnings)
    }

    /// Takes one object (`place` names it in errors): its step, and the values of the keys
    /// that answer a request.
    fn object(&mut self, value: &Value, place: &str) -> Result<()> {
        let Value::Object(_) = value else {
            return Err(Error::training_log(
                self.path,
                format!("{place}: expected a JSON object, found {}", kind(value)),
            ));
        };
        let index = self.objects;
        self.objects += 1;
        let mut leaves: Vec<(String, &Value)> = Vec::new();
        flatten(value, &mut String::new(), &mut leaves);

        if self.step_key.is_none() {
            self.step_key =
                metric::find_step(leaves.iter().map(|(k, _)| k.as_str()), None).map(str::to_string);
        }
        let step = match &self.step_key {
            None => index,
            Some(key) => match leaves.iter().find(|(k, _)| k == key) {
                None | Some((_, Value::Null)) => {
                    self.no_step += 1;
                    return Ok(());
                }
                // an integer, or a float that is one exactly (as in CSV logs: below 9e15)
                Some((_, v)) => match v.as_i64().or_else(|| {
                    scalar(v)
                        .ok()
                        .flatten()
                        .filter(|s| s.is_finite() && s.fract() == 0.0 && s.abs() < 9.0e15)
                        .map(|s| s as i64)
                }) {
                    Some(s) => s,
                    None => {
                        return Err(Error::training_log(
                            self.path,
                            format!("{place}: step `{key}` is {v}, not an integer"),
                        ))
                    }
                },
            },
        };
        for (key, v) in &leaves {
            let hits = match self.seen.get(key) {
                Some(hits) => hits.clone(),
                None => {
                    let hits = self.matcher.offer(key);
                    self.seen.insert(key.clone(), hits.clone());
                    self.names.push(key.clone());
                    hits
                }
            };
            if hits.is_empty() {
                continue;
            }
            let value = scalar(v).map_err(|()| {
                Error::training_log(self.path, format!("{place}: `{key}` is {v}, not a number"))
            })?;
            for &r in &hits {
                self.collector.push(r, key, Observation { step, value });
            }
        }
        Ok(())
    }
}

/// Leaves of nested objects as (`a/b/c`, value); arrays are not descended into.
fn flatten<'v>(value: &'v Value, prefix: &mut String, out: &mut Vec<(String, &'v Value)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let len = prefix.len();
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(k);
                flatten(v, prefix, out);
                prefix.truncate(len);
            }
        }
        Value::Array(_) => {}
        _ => out.push((prefix.clone(), value)),
    }
}

/// A JSON leaf as a metric value: numbers, numeric strings (`"NaN"`), `null` (missing).
fn scalar(v: &Value) -> std::result::Result<Option<f64>, ()> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n.as_f64().map(Some).ok_or(()),
        Value::String(s) => super::parse_value(s),
        _ => Err(()),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Rewrites the bare `NaN`, `Infinity` and `-Infinity` tokens Python's json module writes
/// (outside strings) as the strings `"NaN"`, `"inf"`, `"-inf"`.
fn python_literals(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let replaced = [
            ("NaN", "\"NaN\""),
            ("-Infinity", "\"-inf\""),
            ("Infinity", "\"inf\""),
        ]
        .iter()
        .find(|(tok, _)| rest.starts_with(tok));
        if let Some((tok, rep)) = replaced {
            out.push_str(rep);
            rest = &rest[tok.len()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_literals_outside_strings_only() {
        let t = r#"{"a": NaN, "b": -Infinity, "c": Infinity, "d": "NaN Infinity \" NaN"}"#;
        let v: Value = serde_json::from_str(&python_literals(t)).unwrap();
        assert!(scalar(&v["a"]).unwrap().unwrap().is_nan());
        assert_eq!(scalar(&v["b"]).unwrap(), Some(f64::NEG_INFINITY));
        assert_eq!(scalar(&v["c"]).unwrap(), Some(f64::INFINITY));
        assert_eq!(v["d"], Value::String("NaN Infinity \" NaN".into()));
    }

    #[test]
    fn flattens_nested_keys() {
        let v: Value =
            serde_json::from_str(r#"{"step": 3, "train": {"loss": 1.5, "x": [1]}}"#).unwrap();
        let mut out = Vec::new();
        flatten(&v, &mut String::new(), &mut out);
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["step", "train/loss"]);
    }
}
