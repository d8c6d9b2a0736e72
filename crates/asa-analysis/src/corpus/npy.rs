//! A strict reader for `.npy` token-id arrays (NumPy format versions 1-3).
//!
//! Hand-rolled rather than `Tensor::read_npy` so that a bad file is a one-line error naming
//! it (never a huge allocation from a lying header, never a panic), ids are checked against
//! the vocabulary while they are decoded, and every integer dtype (either byte order,
//! C or Fortran order) is accepted.

use std::path::Path;

use asa_core::error::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// What is wrong with a `.npy` header (the dict after the magic and the header length).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NpyError {
    /// The dict lacks `descr`, `fortran_order` or `shape`, or one does not read.
    #[error("malformed .npy header {header:?}")]
    Malformed { header: String },
    /// The element type is not an integer (floats, strings, objects).
    #[error("dtype '{descr}' is not an integer type; token ids must be int32 or int64")]
    NotInteger { descr: String },
    /// An integer type of a size other than 1, 2, 4 or 8 bytes.
    #[error("unsupported integer dtype '{descr}'")]
    UnsupportedInteger { descr: String },
}

/// A parsed header: element type, Fortran order, shape.
struct Header {
    dtype: Dtype,
    fortran: bool,
    shape: Vec<usize>,
}

/// Token ids read from a `.npy`: shape `[n]` gives one row, `[seqs, len]` gives `seqs` rows.
#[derive(Debug)]
pub(crate) struct NpyIds {
    /// The array's shape as stored (`[n]` or `[seqs, len]`).
    pub shape: Vec<usize>,
    /// Rows in C order, every id checked `< vocab_size`.
    pub rows: Vec<Vec<u32>>,
}

/// Element type of the array.
#[derive(Debug, Clone, Copy)]
struct Dtype {
    signed: bool,
    size: usize,
    big_endian: bool,
}

impl Dtype {
    fn parse(descr: &str) -> std::result::Result<Dtype, NpyError> {
        let (order, rest) = match descr.chars().next() {
            Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
            _ => ('=', descr),
        };
        let kind = rest.chars().next();
        let size: Option<usize> = rest.get(1..).and_then(|s| s.parse().ok());
        let signed = match kind {
            Some('i') => true,
            Some('u') => false,
            _ => {
                return Err(NpyError::NotInteger {
                    descr: descr.to_string(),
                })
            }
        };
        match size {
            Some(size @ (1 | 2 | 4 | 8)) => Ok(Dtype {
                signed,
                size,
                big_endian: order == '>' || (order == '=' && cfg!(target_endian = "big")),
            }),
            _ => Err(NpyError::UnsupportedInteger {
                descr: descr.to_string(),
            }),
        }
    }

    /// The element at `bytes` (exactly `size` long) as an i128 (exact for every dtype).
    fn decode(&self, bytes: &[u8]) -> i128 {
        let mut buf = [0u8; 8];
        if self.big_endian {
            buf[8 - self.size..].copy_from_slice(bytes);
            buf.reverse();
        } else {
            buf[..self.size].copy_from_slice(bytes);
        }
        let raw = u64::from_le_bytes(buf);
        if self.signed {
            // Sign-extend from `size` bytes.
            let shift = 64 - 8 * self.size as u32;
            (((raw << shift) as i64) >> shift) as i128
        } else {
            raw as i128
        }
    }
}

/// The value of `key` in the header dict, from just after its colon.
fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'"))?;
    let rest = &header[at + key.len() + 2..];
    let colon = rest.find(':')?;
    Some(rest[colon + 1..].trim_start())
}

/// Parses `{'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }`.
fn parse_header(header: &str) -> std::result::Result<Header, NpyError> {
    let bad = || NpyError::Malformed {
        header: header.trim().to_string(),
    };
    let descr = header_value(header, "descr").ok_or_else(bad)?;
    let descr = descr.strip_prefix('\'').ok_or_else(bad)?;
    let descr = &descr[..descr.find('\'').ok_or_else(bad)?];
    let dtype = Dtype::parse(descr)?;
    let fortran = header_value(header, "fortran_order").ok_or_else(bad)?;
    let fortran = if fortran.starts_with("True") {
        true
    } else if fortran.starts_with("False") {
        false
    } else {
        return Err(bad());
    };
    let shape = header_value(header, "shape").ok_or_else(bad)?;
    let shape = shape.strip_prefix('(').ok_or_else(bad)?;
    let shape = &shape[..shape.find(')').ok_or_else(bad)?];
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Header {
        dtype,
        fortran,
        shape,
    })
}

/// Reads `path`, checking each id is in `0..vocab_size`.
pub(crate) fn read_ids(path: &Path, vocab_size: usize) -> Result<NpyIds> {
    let bytes = asa_core::input::read_bytes(path, asa_core::input::TOKEN_IDS)?;
    let input = |m: String| Error::corpus(path, m);
    if !bytes.starts_with(MAGIC) || bytes.len() < 10 {
        return Err(input("not a .npy file (no NUMPY magic)".into()));
    }
    let (len_bytes, start) = match bytes[6] {
        1 => (2, 10),
        2 | 3 => (4, 12),
        v => return Err(input(format!("unsupported .npy format version {v}"))),
    };
    if bytes.len() < start {
        return Err(input("truncated .npy header".into()));
    }
    let mut len = [0u8; 4];
    len[..len_bytes].copy_from_slice(&bytes[8..8 + len_bytes]);
    let header_end = start + u32::from_le_bytes(len) as usize;
    let header = bytes
        .get(start..header_end)
        .ok_or_else(|| input("truncated .npy header".into()))?;
    let header = String::from_utf8_lossy(header);
    let Header {
        dtype,
        fortran,
        shape,
    } = parse_header(&header).map_err(|e| input(e.to_string()))?;
    let (rows, cols) = match shape[..] {
        [n] => (1, n),
        [seqs, len] => (seqs, len),
        _ => {
            return Err(input(format!(
                "token ids must have shape [n] or [seqs, len], got {shape:?}"
            )))
        }
    };
    let data = &bytes[header_end..];
    let expected = rows
        .checked_mul(cols)
        .and_then(|n| n.checked_mul(dtype.size));
    if expected != Some(data.len()) {
        return Err(input(format!(
            "shape {shape:?} of {}-byte ids needs {} data bytes, the file has {}",
            dtype.size,
            expected.map_or_else(|| "too many".to_string(), |n| n.to_string()),
            data.len()
        )));
    }
    let mut out = Vec::with_capacity(rows);
    for r in 0..rows {
        let mut row = Vec::with_capacity(cols);
        for c in 0..cols {
            let k = if fortran { c * rows + r } else { r * cols + c };
            let id = dtype.decode(&data[k * dtype.size..(k + 1) * dtype.size]);
            if id < 0 || id >= vocab_size as i128 {
                let at = if shape.len() == 1 {
                    format!("position {c}")
                } else {
                    format!("row {r}, position {c}")
                };
                return Err(input(format!(
                    "token id {id} ({at}) is out of range for the model's vocab_size {vocab_size}"
                )));
            }
            row.push(id as u32);
        }
        out.push(row);
    }
    Ok(NpyIds { shape, rows: out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_dtypes() {
        let h =
            parse_header("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }").unwrap();
        let d = h.dtype;
        assert_eq!(
            (d.size, d.signed, d.big_endian, h.fortran, h.shape),
            (8, true, false, false, vec![3, 4])
        );
        let h = parse_header("{'descr': '|u1', 'fortran_order': True, 'shape': (7,), }").unwrap();
        assert!(h.fortran);
        assert_eq!(h.shape, vec![7]);
        assert_eq!(
            parse_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }")
                .err()
                .map(|e| e.to_string()),
            Some(
                "dtype '<f4' is not an integer type; token ids must be int32 or int64".to_string()
            )
        );
        assert_eq!(
            parse_header("{'descr': '<i3', 'fortran_order': False, 'shape': (3,), }")
                .err()
                .map(|e| e.to_string()),
            Some("unsupported integer dtype '<i3'".to_string())
        );
        assert_eq!(
            parse_header(" {'descr': '<i4'} ")
                .err()
                .map(|e| e.to_string()),
            Some(r#"malformed .npy header "{'descr': '<i4'}""#.to_string())
        );
        let be = Dtype::parse(">i2").unwrap();
        assert_eq!(be.decode(&[0xff, 0xfe]), -2);
        let le = Dtype::parse("<i4").unwrap();
        assert_eq!(le.decode(&[5, 0, 0, 0]), 5);
        assert_eq!(
            Dtype::parse("<u8").unwrap().decode(&[0xff; 8]),
            u64::MAX as i128
        );
    }
}
