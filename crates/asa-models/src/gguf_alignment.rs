//! The `general.alignment` a GGUF header declares, read before candle parses the header:
//! candle divides by it, so an alignment of 0 would panic inside the reader. Walks the
//! metadata key-value pairs (GGUF v1-v3) without keeping them, every length checked against
//! the file's size.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

/// Checks that `path`'s `general.alignment`, when it declares one, is a power of two.
pub fn check_alignment(path: &Path) -> Result<()> {
    match declared_alignment(path) {
        Ok(Some(a)) if a == 0 || !a.is_power_of_two() => Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("general.alignment", a, "a power of two"),
        )),
        // a header this walk cannot read is left to candle's reader, which names the problem
        _ => Ok(()),
    }
}

/// The header's `general.alignment` as an unsigned number, if it has one.
fn declared_alignment(path: &Path) -> std::io::Result<Option<u64>> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut r = Walker {
        inner: BufReader::new(file),
        size,
        wide: true,
    };
    let mut magic = [0u8; 4];
    r.inner.read_exact(&mut magic)?;
    if &magic != b"GGUF" {
        return Ok(None);
    }
    let version = r.u32()?;
    r.wide = version >= 2;
    let _tensors = r.len()?;
    let kvs = r.len()?;
    for _ in 0..kvs {
        let key = r.string()?;
        let kind = r.u32()?;
        if key == "general.alignment" {
            return Ok(match kind {
                0 => Some(r.fixed(1)? as u64),
                2 => Some(r.fixed(2)? as u64),
                4 => Some(r.fixed(4)? as u64),
                10 => Some(r.fixed(8)?),
                // signed: negative values fall back to the default, as candle does
                1 => Some(r.fixed(1)? as i8 as i64)
                    .filter(|v| *v >= 0)
                    .map(|v| v as u64),
                3 => Some(r.fixed(2)? as i16 as i64)
                    .filter(|v| *v >= 0)
                    .map(|v| v as u64),
                5 => Some(r.fixed(4)? as i32 as i64)
                    .filter(|v| *v >= 0)
                    .map(|v| v as u64),
                _ => None,
            });
        }
        r.skip_value(kind, 0)?;
    }
    Ok(None)
}

/// A reader of GGUF's little-endian fields.
struct Walker {
    inner: BufReader<File>,
    size: u64,
    /// Lengths and counts are u64 (v2, v3) rather than u32 (v1).
    wide: bool,
}

impl Walker {
    fn fixed(&mut self, bytes: usize) -> std::io::Result<u64> {
        let mut buf = [0u8; 8];
        self.inner.read_exact(&mut buf[..bytes])?;
        Ok(u64::from_le_bytes(buf))
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        Ok(self.fixed(4)? as u32)
    }

    /// A length or count, refused when it exceeds what is left of the file.
    fn len(&mut self) -> std::io::Result<u64> {
        let n = if self.wide {
            self.fixed(8)?
        } else {
            self.fixed(4)?
        };
        let left = self.size.saturating_sub(self.inner.stream_position()?);
        if n > left {
            return Err(std::io::Error::other("a length past the end of the file"));
        }
        Ok(n)
    }

    fn string(&mut self) -> std::io::Result<String> {
        let n = self.len()?;
        let mut buf = vec![0u8; n as usize];
        self.inner.read_exact(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    fn skip(&mut self, bytes: u64) -> std::io::Result<()> {
        self.inner.seek(SeekFrom::Current(bytes as i64))?;
        Ok(())
    }

    /// Skips a value of type `kind` (arrays nest at most a few levels).
    fn skip_value(&mut self, kind: u32, depth: usize) -> std::io::Result<()> {
        match kind {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            10..=12 => self.skip(8),
            8 => {
                let n = self.len()?;
                self.skip(n)
            }
            9 if depth < 4 => {
                let inner = self.u32()?;
                let count = self.len()?;
                match inner {
                    0 | 1 | 7 => self.skip(count),
                    2 | 3 => self.skip(count.saturating_mul(2)),
                    4..=6 => self.skip(count.saturating_mul(4)),
                    10..=12 => self.skip(count.saturating_mul(8)),
                    _ => {
                        for _ in 0..count {
                            self.skip_value(inner, depth + 1)?;
                        }
                        Ok(())
                    }
                }
            }
            _ => Err(std::io::Error::other("an unknown GGUF value type")),
        }
    }
}
