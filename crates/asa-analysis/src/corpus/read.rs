//! Reading corpus files: the format from the extension, text documents (`.txt`, `.jsonl`)
//! and token-id documents (`.npy`, `.json`).

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::Value;

use asa_core::error::{Error, InputKind, Result};

/// The formats `--corpus` accepts, by extension.
pub(crate) const SUPPORTED: &str = ".txt (plain text), .jsonl (a \"text\" field per line), \
                                    .npy (int32/int64 token ids), .json (lists of token ids)";

/// A corpus file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Txt,
    Jsonl,
    Npy,
    Json,
}

impl Format {
    /// The format of `path` from its extension (case-insensitive).
    pub(crate) fn of(path: &Path) -> Result<Format> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("txt") => Ok(Format::Txt),
            Some("jsonl") => Ok(Format::Jsonl),
            Some("npy") => Ok(Format::Npy),
            Some("json") => Ok(Format::Json),
            _ => Err(Error::corpus(
                path,
                format!("unsupported corpus format; supported: {SUPPORTED}"),
            )),
        }
    }
}

/// Text bytes as UTF-8 without a leading byte-order mark.
fn utf8(bytes: Vec<u8>) -> std::result::Result<String, ()> {
    let mut s = String::from_utf8(bytes).map_err(|_| ())?;
    if s.starts_with('\u{feff}') {
        s.drain(..'\u{feff}'.len_utf8());
    }
    Ok(s)
}

/// The whole of a `.txt` file: one document.
pub(crate) fn read_txt(path: &Path) -> Result<String> {
    let bytes = asa_core::input::read_bytes(path, asa_core::input::TEXT)?;
    utf8(bytes).map_err(|_| Error::corpus(path, "not UTF-8 text"))
}

/// The documents of a `.jsonl` file, read lazily line by line: each non-blank line's string
/// `text` field.
pub(crate) struct JsonlDocs {
    path: PathBuf,
    reader: std::io::BufReader<std::fs::File>,
    line: usize,
}

impl JsonlDocs {
    pub(crate) fn open(path: &Path) -> Result<JsonlDocs> {
        let file = asa_core::input::open(path)?;
        Ok(JsonlDocs {
            path: path.to_path_buf(),
            reader: std::io::BufReader::new(file),
            line: 0,
        })
    }
}

impl Iterator for JsonlDocs {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Result<String>> {
        loop {
            let mut buf = Vec::new();
            match self.reader.read_until(b'\n', &mut buf) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(Error::io(&self.path, e))),
            }
            self.line += 1;
            let at = |m: &str| Error::corpus(&self.path, format!("line {}: {m}", self.line));
            let Ok(line) = utf8(buf) else {
                return Some(Err(at("not UTF-8 text")));
            };
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(e) => {
                    let what = format!("line {}: not valid JSON", self.line);
                    return Some(Err(
                        Error::invalid(&self.path, what, e).about(InputKind::Corpus)
                    ));
                }
            };
            return Some(match value.get("text") {
                Some(Value::String(text)) => Ok(text.clone()),
                Some(_) => Err(at("the \"text\" field is not a string")),
                None => Err(at("no \"text\" field")),
            });
        }
    }
}

/// Token-id documents from a `.npy` or `.json` file.
#[derive(Debug)]
pub(crate) struct IdDocs {
    /// The documents (rows), every id `< vocab_size`.
    pub docs: Vec<Vec<u32>>,
    /// True when the file is a 2-D table (`[seqs, len]` `.npy`, or a `.json` list of lists
    /// that all have the same length): its rows may be used as windows directly.
    pub table: bool,
}

/// Reads a `.npy` of token ids.
pub(crate) fn read_npy(path: &Path, vocab_size: usize) -> Result<IdDocs> {
    let npy = super::npy::read_ids(path, vocab_size)?;
    Ok(IdDocs {
        table: npy.shape.len() == 2,
        docs: npy.rows,
    })
}

/// Reads a `.json` list of lists of token ids (a flat list of ids is one document).
pub(crate) fn read_json(path: &Path, vocab_size: usize) -> Result<IdDocs> {
    let bytes = asa_core::input::read_bytes(path, asa_core::input::TOKEN_IDS)?;
    let text = utf8(bytes).map_err(|_| Error::corpus(path, "not UTF-8 text"))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(path, "not valid JSON", e).about(InputKind::Corpus))?;
    let shape_err = || {
        Error::corpus(
            path,
            "expected a list of lists of token ids, e.g. [[1, 5, 9], [1, 7]]",
        )
    };
    let Value::Array(items) = value else {
        return Err(shape_err());
    };
    let id = |v: &Value, at: &dyn Fn() -> String| -> Result<u32> {
        match v.as_u64() {
            Some(id) if id < vocab_size as u64 => Ok(id as u32),
            _ if v.is_i64() || v.is_u64() => Err(Error::corpus(
                path,
                format!(
                    "token id {v} ({}) is out of range for the model's vocab_size {vocab_size}",
                    at()
                ),
            )),
            _ => Err(Error::corpus(
                path,
                format!("{}: expected an integer token id, got {v}", at()),
            )),
        }
    };
    if items.iter().all(Value::is_number) {
        // A flat list: one document.
        let doc = items
            .iter()
            .enumerate()
            .map(|(j, v)| id(v, &|| format!("position {j}")))
            .collect::<Result<Vec<_>>>()?;
        return Ok(IdDocs {
            docs: vec![doc],
            table: false,
        });
    }
    let mut docs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Array(row) = item else {
            return Err(shape_err());
        };
        let doc = row
            .iter()
            .enumerate()
            .map(|(j, v)| id(v, &|| format!("list {i}, position {j}")))
            .collect::<Result<Vec<_>>>()?;
        docs.push(doc);
    }
    let table = docs.windows(2).all(|w| w[0].len() == w[1].len());
    Ok(IdDocs { docs, table })
}
