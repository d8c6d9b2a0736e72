//! Tokenizing a long text in pieces, in bounded memory, and only as far as the windows need
//! (issue 24, class 4: a 44 MB text tokenized whole took 7.2 GB).
//!
//! The text is read in segments of [`Pieces::segment`] bytes. Each segment is encoded whole,
//! and only its tokens that end at least [`Pieces::overlap`] bytes before the segment's end
//! are kept; the next segment starts `overlap` bytes before the first token not kept, so the
//! tokens around every cut are computed with at least `overlap / 2` bytes of text on either
//! side. A cut is made only where two consecutive tokens meet exactly (no character split
//! between them). The next segment must agree with what was kept: its tokens in the second
//! half of the overlap, and a token starting exactly at the cut. Where a tokenizer's output
//! depends on more context than that (no real tokenizer does: pre-tokenizers split on
//! whitespace and punctuation), [`NotLocal`] says so and the caller tokenizes the text whole.
//! The ids are then the same as the whole text's tokenization, cut short.

use std::io::Read;

use asa_core::error::{Error, Result};

/// Bytes a segment holds by default.
pub(crate) const SEGMENT: usize = 1 << 20;
/// Bytes of context kept on each side of a cut by default.
pub(crate) const OVERLAP: usize = 8 << 10;
/// Bytes read from the source at a time.
const READ: usize = 64 << 10;

/// The tokens around a cut differed between two segments: this tokenizer needs the whole
/// text. `at` is the byte offset of the cut.
#[derive(Debug)]
pub(crate) struct NotLocal {
    pub at: usize,
}

/// Segment sizes (the defaults, or small ones in tests).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    pub segment: usize,
    pub overlap: usize,
}

impl Default for Pieces {
    fn default() -> Pieces {
        Pieces {
            segment: SEGMENT,
            overlap: OVERLAP,
        }
    }
}

/// One encoded segment: ids and byte ranges relative to the segment's start.
pub(crate) struct Encoded {
    pub ids: Vec<u32>,
    pub offsets: Vec<(usize, usize)>,
}

/// Text read from a byte source as UTF-8, kept from an absolute byte offset on.
struct TextBuffer<'a> {
    source: &'a mut dyn Read,
    /// The text from `base` on.
    text: String,
    /// Absolute byte offset of `text[0]`.
    base: usize,
    /// Bytes read that end inside a character.
    partial: Vec<u8>,
    eof: bool,
}

impl TextBuffer<'_> {
    /// Reads until the text reaches absolute offset `end` or the source ends.
    fn fill(&mut self, end: usize) -> std::result::Result<(), FillError> {
        let mut block = vec![0u8; READ];
        while !self.eof && self.base + self.text.len() < end {
            let n = loop {
                match self.source.read(&mut block) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(FillError::Io(e)),
                }
            };
            if n == 0 {
                self.eof = true;
                if !self.partial.is_empty() {
                    return Err(FillError::Utf8(self.base + self.text.len()));
                }
                break;
            }
            self.partial.extend_from_slice(&block[..n]);
            let valid = match std::str::from_utf8(&self.partial) {
                Ok(s) => s.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(e) => {
                    return Err(FillError::Utf8(
                        self.base + self.text.len() + e.valid_up_to(),
                    ))
                }
            };
            let chunk = std::str::from_utf8(&self.partial[..valid]).expect("checked UTF-8");
            // A byte-order mark is no text: offsets count from after it.
            let chunk = match self.base == 0 && self.text.is_empty() {
                true => chunk.strip_prefix('\u{feff}').unwrap_or(chunk),
                false => chunk,
            };
            self.text.push_str(chunk);
            self.partial.drain(..valid);
        }
        Ok(())
    }

    /// Forgets the text before absolute offset `from` (a character boundary).
    fn forget_before(&mut self, from: usize) {
        let cut = from.saturating_sub(self.base).min(self.text.len());
        self.text.drain(..cut);
        self.base += cut;
    }

    fn end(&self) -> usize {
        self.base + self.text.len()
    }
}

enum FillError {
    Io(std::io::Error),
    Utf8(usize),
}

impl FillError {
    /// The error for the source `path`.
    fn into_error(self, path: &std::path::Path) -> Error {
        match self {
            FillError::Io(e) => Error::io(path, e),
            FillError::Utf8(at) => Error::corpus(path, format!("not UTF-8 text (byte {at})")),
        }
    }
}

/// The largest character boundary of `text` at or below `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Encodes the text of `source` (UTF-8; a leading byte-order mark is dropped) until at least
/// `want` ids are had or the text ends, in segments (see the module doc). `encode` encodes
/// one segment; `path` names the source in errors. The outer error is a read or encoding
/// failure; the inner one says the text must be tokenized whole.
pub(crate) fn encode_prefix(
    source: &mut dyn Read,
    path: &std::path::Path,
    want: usize,
    pieces: Pieces,
    encode: &dyn Fn(&str) -> Result<Encoded>,
) -> Result<std::result::Result<Vec<u32>, NotLocal>> {
    let mut buf = TextBuffer {
        source,
        text: String::new(),
        base: 0,
        partial: Vec::new(),
        eof: false,
    };
    let mut ids: Vec<u32> = Vec::new();
    // Kept tokens that start in the last `overlap` bytes before the cut: (start, id).
    let mut tail: Vec<(usize, u32)> = Vec::new();
    let mut cut = 0usize;
    let mut segment = pieces.segment.max(2 * pieces.overlap + 1);
    loop {
        buf.fill(cut + segment).map_err(|e| e.into_error(path))?;
        // `base <= cut - overlap`: the last segment started `overlap` before an earlier cut.
        let from = cut.saturating_sub(pieces.overlap).max(buf.base);
        let start = buf.base + floor_boundary(&buf.text, from - buf.base);
        buf.forget_before(start);
        let last = buf.eof;
        let seg = Segment {
            enc: encode(&buf.text)?,
            base: buf.base,
        };
        let Some(first) = seg.take_over(cut, pieces.overlap, &tail) else {
            return Ok(Err(NotLocal { at: cut }));
        };
        // Where this segment stops: all of it at the end of the text, else before the
        // last `overlap` bytes, at a clean meeting of two tokens.
        let end = match last {
            true => seg.enc.ids.len(),
            false => seg.clean_stop(first, buf.end() - pieces.overlap),
        };
        if end == first && !last {
            // No clean cut in this segment (e.g. one enormous token): read more.
            segment = segment.saturating_mul(2);
            continue;
        }
        ids.extend_from_slice(&seg.enc.ids[first..end]);
        if last || ids.len() >= want {
            return Ok(Ok(ids));
        }
        cut = seg.abs(end).0;
        seg.move_tail(&mut tail, first..end, cut, pieces.overlap);
        segment = pieces.segment.max(2 * pieces.overlap + 1);
    }
}

/// One encoded segment, with the absolute byte offset where its text starts.
struct Segment {
    enc: Encoded,
    base: usize,
}

impl Segment {
    /// The absolute byte range of token `i`.
    fn abs(&self, i: usize) -> (usize, usize) {
        let (start, end) = self.enc.offsets[i];
        (self.base + start, self.base + end)
    }

    /// Where this segment takes over at `cut` (0 at the start of the text): the token
    /// starting exactly at the cut, none ending past it, and the tokens in the second half
    /// of the overlap the same as those kept (`tail`). `None` where they differ.
    fn take_over(&self, cut: usize, overlap: usize, tail: &[(usize, u32)]) -> Option<usize> {
        if cut == 0 {
            return Some(0);
        }
        let first = (0..self.enc.ids.len()).find(|&i| self.abs(i).0 >= cut)?;
        let agree_from = cut - overlap / 2;
        let here: Vec<(usize, u32)> = (0..first)
            .filter(|&i| self.abs(i).0 >= agree_from)
            .map(|i| (self.abs(i).0, self.enc.ids[i]))
            .collect();
        let kept: Vec<(usize, u32)> = tail
            .iter()
            .copied()
            .filter(|&(s, _)| s >= agree_from)
            .collect();
        if self.abs(first).0 != cut || (first > 0 && self.abs(first - 1).1 > cut) || here != kept {
            return None;
        }
        Some(first)
    }

    /// The last token after `first` that starts exactly where the one before it ends, with
    /// that one ending by absolute offset `limit`; `first` if there is none.
    fn clean_stop(&self, first: usize, limit: usize) -> usize {
        (first + 1..self.enc.ids.len())
            .take_while(|&i| self.abs(i - 1).1 <= limit)
            .filter(|&i| self.abs(i).0 == self.abs(i - 1).1)
            .last()
            .unwrap_or(first)
    }

    /// Moves `tail` to the new `cut`: of what it held and of the tokens `kept`, those that
    /// start in the last `overlap` bytes before the cut.
    fn move_tail(
        &self,
        tail: &mut Vec<(usize, u32)>,
        kept: std::ops::Range<usize>,
        cut: usize,
        overlap: usize,
    ) {
        tail.retain(|&(s, _)| s + overlap >= cut);
        tail.extend(
            kept.filter(|&i| self.abs(i).0 + overlap >= cut)
                .map(|i| (self.abs(i).0, self.enc.ids[i])),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tokenizers::Tokenizer;

    /// Shakespeare with multi-byte characters, blank lines and long space runs mixed in.
    fn text() -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/corpus/tinyshakespeare.txt"
        );
        let plain = std::fs::read_to_string(path).unwrap();
        let mut text = String::new();
        for (i, line) in plain.lines().take(12000).enumerate() {
            text.push_str(line);
            text.push_str(match i % 7 {
                0 => " naïve café 日本語 🙂\n",
                3 => "\n\n\n",
                5 => "      \t\n",
                _ => "\n",
            });
        }
        text
    }

    fn tokenizer(fixture: &str) -> Tokenizer {
        let path = format!(
            "{}/../../tests/fixtures/{fixture}/tokenizer.json",
            env!("CARGO_MANIFEST_DIR")
        );
        Tokenizer::from_file(path).unwrap()
    }

    fn encoder(tok: &Tokenizer) -> impl Fn(&str) -> Result<Encoded> + '_ {
        move |s: &str| {
            let enc = tok.encode(s, false).unwrap();
            Ok(Encoded {
                ids: enc.get_ids().to_vec(),
                offsets: enc.get_offsets().to_vec(),
            })
        }
    }

    /// Hands out at most 7 bytes a read, so characters are split between reads.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(7).min(out.len());
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    const SMALL: Pieces = Pieces {
        segment: 6000,
        overlap: 700,
    };

    #[test]
    fn pieces_give_the_ids_of_the_whole_text_for_byte_level_and_metaspace_tokenizers() {
        let text = text();
        assert!(text.len() > 200_000);
        for fixture in ["train/softmax_ckpt", "models/off_by_one"] {
            let tok = tokenizer(fixture);
            let whole = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
            let encode = encoder(&tok);
            let all = encode_prefix(
                &mut text.as_bytes(),
                Path::new("t"),
                usize::MAX,
                SMALL,
                &encode,
            )
            .unwrap()
            .unwrap();
            assert_eq!(all.len(), whole.len(), "{fixture}");
            assert!(all == whole, "{fixture}: ids differ from the whole text's");
            let some = encode_prefix(
                &mut Trickle(text.as_bytes()),
                Path::new("t"),
                5000,
                SMALL,
                &encode,
            )
            .unwrap()
            .unwrap();
            assert!(
                some.len() >= 5000 && some.len() < whole.len(),
                "{}",
                some.len()
            );
            assert!(whole.starts_with(&some), "{fixture}: a prefix differs");
        }
    }

    #[test]
    fn a_byte_order_mark_is_dropped_and_bytes_that_are_not_utf8_are_named() {
        let tok = tokenizer("train/softmax_ckpt");
        let encode = encoder(&tok);
        let mut bom = "\u{feff}".as_bytes().to_vec();
        bom.extend_from_slice(b"To be, or not to be");
        let ids = encode_prefix(&mut Trickle(&bom), Path::new("t"), 100, SMALL, &encode)
            .unwrap()
            .unwrap();
        assert_eq!(
            ids,
            tok.encode("To be, or not to be", false).unwrap().get_ids()
        );
        let mut bad = text().into_bytes();
        bad[150_000] = 0xff;
        let err = encode_prefix(
            &mut bad.as_slice(),
            Path::new("t.txt"),
            usize::MAX,
            SMALL,
            &encode,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("t.txt") && err.contains("not UTF-8"), "{err}");
    }

    #[test]
    fn a_tokenizer_that_reads_far_context_is_found_out() {
        // Each character's id depends on the length of the text it was encoded with.
        let far = |s: &str| -> Result<Encoded> {
            let (ids, offsets) = s
                .char_indices()
                .map(|(i, c)| (c as u32 + s.len() as u32, (i, i + c.len_utf8())))
                .unzip();
            Ok(Encoded { ids, offsets })
        };
        let text = text();
        let got = encode_prefix(
            &mut text.as_bytes(),
            Path::new("t"),
            usize::MAX,
            SMALL,
            &far,
        )
        .unwrap();
        assert!(matches!(got, Err(NotLocal { at }) if at > 0));
    }
}
