//! Training text and batches: documents (the built-in generator or a file) tokenized and
//! joined with EOS between them into one stream; each training window is BOS followed by
//! T ids of the stream at a random offset, one more id than the model sees (the targets).

use std::path::Path;

use candle_core::{Device, Tensor};
use tokenizers::Tokenizer;

use super::params::SplitMix64;
use crate::corpus::generator;
use asa_core::error::{Error, InputKind, Result};

/// Where the training text comes from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum TextSource {
    /// The built-in generated prose for a seed, about `chars` characters.
    BuiltIn { seed: u64, chars: usize },
    /// A text file (`.txt`: one document; `.jsonl`: the `text` field of each line).
    File(std::path::PathBuf),
}

/// The documents of a source.
pub fn documents(source: &TextSource) -> Result<Vec<String>> {
    match source {
        TextSource::BuiltIn { seed, chars } => {
            let mut docs = Vec::new();
            let mut total = 0;
            for doc in generator::documents(*seed) {
                total += doc.len();
                docs.push(doc);
                if total >= *chars {
                    break;
                }
            }
            Ok(docs)
        }
        TextSource::File(path) => read_documents(path),
    }
}

fn read_documents(path: &Path) -> Result<Vec<String>> {
    let text = asa_core::input::read_text(path, asa_core::input::TEXT)?;
    let jsonl = path.extension().and_then(|e| e.to_str()) == Some("jsonl");
    if !jsonl {
        return Ok(vec![text]);
    }
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            Error::invalid(path, format!("line {}: invalid JSON", i + 1), e)
                .about(InputKind::Corpus)
        })?;
        match value.get("text").and_then(|t| t.as_str()) {
            Some(t) => docs.push(t.to_string()),
            None => {
                return Err(Error::input(
                    path,
                    format!("line {}: no string `text` field", i + 1),
                ))
            }
        }
    }
    Ok(docs)
}

/// The tokenized training stream.
pub struct TokenStream {
    pub ids: Vec<u32>,
    pub bos: u32,
}

impl TokenStream {
    /// Encodes `documents` (no special tokens) and joins them with `eos`.
    pub fn encode(tokenizer: &Tokenizer, documents: &[String], bos: u32, eos: u32) -> Result<Self> {
        let mut ids = Vec::new();
        for doc in documents {
            let enc = tokenizer
                .encode(doc.as_str(), false)
                .map_err(|e| Error::failed("tokenizing the training text failed", e))?;
            if enc.get_ids().is_empty() {
                continue;
            }
            if !ids.is_empty() {
                ids.push(eos);
            }
            ids.extend_from_slice(enc.get_ids());
        }
        Ok(TokenStream { ids, bos })
    }

    /// `batch` windows `[batch, seq_len + 1]` (u32): BOS, then `seq_len` ids of the stream
    /// from a random offset.
    pub fn batch(
        &self,
        rng: &mut SplitMix64,
        batch: usize,
        seq_len: usize,
        device: &Device,
    ) -> Result<Tensor> {
        if self.ids.len() < seq_len + 1 {
            return Err(Error::usage(format!(
                "the training text has {} tokens, fewer than one window of {}",
                self.ids.len(),
                seq_len + 1
            )));
        }
        let mut rows = Vec::with_capacity(batch * (seq_len + 1));
        for _ in 0..batch {
            let off = rng.below(self.ids.len() - seq_len + 1);
            rows.push(self.bos);
            rows.extend_from_slice(&self.ids[off..off + seq_len]);
        }
        Ok(Tensor::from_vec(rows, (batch, seq_len + 1), device)?)
    }
}
