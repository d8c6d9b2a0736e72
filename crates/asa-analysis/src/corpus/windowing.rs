//! How the analysed windows are cut from the corpus (`--windows`): `packed` (the default)
//! joins the documents with EOS between them and cuts the stream into consecutive windows,
//! as language-model evaluations pack text; `documents` opens every window at the start of
//! its own document: the first `num_seqs` documents (in corpus order) at least one window
//! long, each cut to one window, shorter ones skipped, so that position 0 is always a
//! document's first token.

use asa_core::parse_error::ParseError;
use std::fmt;
use std::str::FromStr;

/// The windowing rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowMode {
    /// Consecutive windows of the joined stream (documents separated by EOS).
    #[default]
    Packed,
    /// One window per document, from its start.
    Documents,
}

impl WindowMode {
    /// The names `--windows` takes.
    pub const NAMES: [&'static str; 2] = ["packed", "documents"];
}

impl FromStr for WindowMode {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "packed" => Ok(WindowMode::Packed),
            "documents" => Ok(WindowMode::Documents),
            _ => Err(ParseError::unknown("window mode", s, &WindowMode::NAMES)),
        }
    }
}

impl fmt::Display for WindowMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WindowMode::Packed => "packed",
            WindowMode::Documents => "documents",
        })
    }
}

/// Consecutive documents shorter than a window after which `documents` windowing gives up
/// (an endless source such as the built-in generator whose documents are all too short).
pub const MAX_SHORT_IN_A_ROW: usize = 10_000;

/// Windows taken one per document.
#[derive(Debug, Default)]
pub struct DocumentWindows {
    /// Ids per window, the BOS (if any) not included.
    per_window: usize,
    pub windows: Vec<Vec<u32>>,
    /// Documents read.
    pub documents: usize,
    /// Documents shorter than a window (skipped).
    pub skipped: usize,
    /// Skipped since the last window taken.
    pub short_in_a_row: usize,
}

impl DocumentWindows {
    /// Collects windows of `per_window` ids (after the BOS).
    pub fn new(per_window: usize) -> DocumentWindows {
        DocumentWindows {
            per_window,
            ..Default::default()
        }
    }

    /// Takes the first `per_window` ids of `doc` as a window (with `bos` first), or skips
    /// a shorter document; empty documents are not counted.
    pub fn push(&mut self, doc: &[u32], bos: Option<u32>) {
        if doc.is_empty() {
            return;
        }
        self.documents += 1;
        if doc.len() < self.per_window {
            self.skipped += 1;
            self.short_in_a_row += 1;
            return;
        }
        self.short_in_a_row = 0;
        self.windows.push(
            bos.into_iter()
                .chain(doc[..self.per_window].iter().copied())
                .collect(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_window_per_long_enough_document() {
        let mut w = DocumentWindows::new(3);
        w.push(&[1, 2], Some(9));
        w.push(&[], Some(9));
        w.push(&[4, 5, 6, 7], Some(9));
        w.push(&[8, 9, 10], None);
        assert_eq!(w.windows, vec![vec![9, 4, 5, 6], vec![8, 9, 10]]);
        assert_eq!((w.documents, w.skipped), (3, 1));
        assert_eq!("documents".parse::<WindowMode>(), Ok(WindowMode::Documents));
    }
}
