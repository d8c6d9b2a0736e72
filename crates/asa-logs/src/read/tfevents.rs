//! TensorBoard event files: TFRecord framing (length, masked CRC-32C of the length,
//! payload, masked CRC-32C of the payload) around `tensorflow.Event` protobufs, decoded
//! with prost from the few message fields scalars need. Scalars come as `simple_value`
//! (TF1, tensorboardX, torch.utils.tensorboard) or as one-element tensors (TF2
//! `tf.summary.scalar`). A run folder may hold several event files (a resumed run): they
//! are read in name order (the names start with the creation time) and a later value for
//! the same step wins.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use prost::Message;

use super::{Collector, LogFile, LogFormat, LogRequest, Matcher};
use crate::series::Observation;
use asa_core::error::{Error, InputKind, Result};

/// `tensorflow.Event`, the fields scalars need.
#[derive(Clone, PartialEq, Message)]
struct Event {
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(message, optional, tag = "5")]
    summary: Option<Summary>,
}

#[derive(Clone, PartialEq, Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

#[derive(Clone, PartialEq, Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, optional, tag = "2")]
    simple_value: Option<f32>,
    #[prost(message, optional, tag = "8")]
    tensor: Option<TensorProto>,
    #[prost(message, optional, tag = "9")]
    metadata: Option<SummaryMetadata>,
}

#[derive(Clone, PartialEq, Message)]
struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    plugin_data: Option<PluginData>,
}

#[derive(Clone, PartialEq, Message)]
struct PluginData {
    #[prost(string, tag = "1")]
    plugin_name: String,
}

#[derive(Clone, PartialEq, Message)]
struct TensorProto {
    #[prost(int32, tag = "1")]
    dtype: i32,
    #[prost(message, optional, tag = "2")]
    tensor_shape: Option<TensorShape>,
    #[prost(bytes = "vec", tag = "4")]
    tensor_content: Vec<u8>,
    #[prost(float, repeated, tag = "5")]
    float_val: Vec<f32>,
    #[prost(double, repeated, tag = "6")]
    double_val: Vec<f64>,
    #[prost(int32, repeated, tag = "7")]
    int_val: Vec<i32>,
    #[prost(int64, repeated, tag = "10")]
    int64_val: Vec<i64>,
    #[prost(int32, repeated, tag = "13")]
    half_val: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorShape {
    #[prost(message, repeated, tag = "2")]
    dim: Vec<Dim>,
}

#[derive(Clone, PartialEq, Message)]
struct Dim {
    #[prost(int64, tag = "1")]
    size: i64,
}

// tensorflow.DataType values.
const DT_FLOAT: i32 = 1;
const DT_DOUBLE: i32 = 2;
const DT_INT32: i32 = 3;
const DT_INT64: i32 = 9;
const DT_BFLOAT16: i32 = 14;
const DT_HALF: i32 = 19;

impl SummaryValue {
    /// The scalar this value holds, if it is a scalar summary.
    fn scalar(&self) -> Option<f64> {
        if let Some(v) = self.simple_value {
            return Some(v as f64);
        }
        let t = self.tensor.as_ref()?;
        let plugin = self
            .metadata
            .as_ref()
            .and_then(|m| m.plugin_data.as_ref())
            .map_or("", |p| p.plugin_name.as_str());
        if !(plugin.is_empty() || plugin == "scalars") {
            return None;
        }
        let numel: i64 = t
            .tensor_shape
            .as_ref()
            .map_or(1, |s| s.dim.iter().map(|d| d.size).product());
        if numel != 1 {
            return None;
        }
        let c = &t.tensor_content;
        match t.dtype {
            DT_FLOAT => t
                .float_val
                .first()
                .map(|&v| v as f64)
                .or_else(|| Some(f32::from_le_bytes(c.get(..4)?.try_into().ok()?) as f64)),
            DT_DOUBLE => t
                .double_val
                .first()
                .copied()
                .or_else(|| Some(f64::from_le_bytes(c.get(..8)?.try_into().ok()?))),
            DT_INT32 => t
                .int_val
                .first()
                .map(|&v| v as f64)
                .or_else(|| Some(i32::from_le_bytes(c.get(..4)?.try_into().ok()?) as f64)),
            DT_INT64 => t
                .int64_val
                .first()
                .map(|&v| v as f64)
                .or_else(|| Some(i64::from_le_bytes(c.get(..8)?.try_into().ok()?) as f64)),
            DT_HALF | DT_BFLOAT16 => {
                let bits = match t.half_val.first() {
                    Some(&b) => b as u16,
                    None => u16::from_le_bytes(c.get(..2)?.try_into().ok()?),
                };
                Some(if t.dtype == DT_HALF {
                    f16_to_f64(bits)
                } else {
                    f32::from_bits((bits as u32) << 16) as f64
                })
            }
            _ => None,
        }
    }
}

/// IEEE 754 half precision to f64.
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1f) as i32;
    let frac = (bits & 0x3ff) as f64;
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 if frac == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// The CRC TFRecord stores: CRC-32C rotated right by 15 bits plus a constant.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The event files to read for `path`: the file itself, or the folder's
/// `*tfevents*` files in name order.
fn event_files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut subfolders = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if p.is_dir() {
            subfolders.push(name);
        } else if name.contains("tfevents") {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        subfolders.sort();
        let hint = if subfolders.is_empty() {
            String::new()
        } else {
            format!(
                " (it has subfolders {}: pass the run folder itself)",
                subfolders.join(", ")
            )
        };
        return Err(Error::training_log(
            path,
            format!("folder holds no events.out.tfevents.* files{hint}"),
        ));
    }
    Ok(files)
}

pub(super) fn read(path: &Path, request: &LogRequest) -> Result<LogFile> {
    let mut matcher = Matcher::new(&request.metrics);
    let mut collector = Collector::default();
    let mut names: Vec<String> = Vec::new();
    let mut hits_by_tag: std::collections::HashMap<String, Vec<usize>> = Default::default();
    let mut warnings = Vec::new();
    let mut any_record = false;
    let files = event_files(path)?;
    for file in &files {
        let file = file.as_path();
        let mut reader = Records::open(file)?;
        while let Some(payload) = reader.next_record(&mut warnings)? {
            any_record = true;
            let event = Event::decode(payload).map_err(|e| {
                let at = reader.record_start;
                let what =
                    format!("corrupt event file: record at byte {at} is not a tensorflow.Event");
                Error::invalid(file, what, e).about(InputKind::TrainingLog)
            })?;
            let Some(summary) = event.summary else {
                continue;
            };
            for v in &summary.value {
                let Some(value) = v.scalar() else {
                    continue;
                };
                if !hits_by_tag.contains_key(&v.tag) {
                    names.push(v.tag.clone());
                    hits_by_tag.insert(v.tag.clone(), matcher.offer(&v.tag));
                }
                for &r in &hits_by_tag[&v.tag] {
                    collector.push(
                        r,
                        &v.tag,
                        Observation {
                            step: event.step,
                            value: Some(value),
                        },
                    );
                }
            }
        }
    }
    if !any_record {
        return Err(match files.as_slice() {
            [one] => {
                let bytes = std::fs::metadata(one).map(|m| m.len()).unwrap_or(0);
                Error::training_log(
                    one,
                    format!("event file holds no complete record ({bytes} bytes)"),
                )
            }
            all => Error::training_log(
                path,
                format!(
                    "none of its {} event files holds a complete record",
                    all.len()
                ),
            ),
        });
    }
    collector.finish(path, LogFormat::TensorBoard, &matcher, names, warnings)
}

/// TFRecord reader with CRC checks.
struct Records {
    path: PathBuf,
    reader: BufReader<File>,
    offset: u64,
    record_start: u64,
    file_len: u64,
    buf: Vec<u8>,
}

impl Records {
    fn open(path: &Path) -> Result<Self> {
        let file = asa_core::input::open(path)?;
        let file_len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        Ok(Records {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 16, file),
            offset: 0,
            record_start: 0,
            file_len,
            buf: Vec::new(),
        })
    }

    /// The next payload; `None` at the end. A record cut short at the end of the file
    /// (a run still writing) ends the file with a warning; a CRC mismatch is an error.
    fn next_record(&mut self, warnings: &mut Vec<String>) -> Result<Option<&[u8]>> {
        self.record_start = self.offset;
        let at_end = self
            .reader
            .fill_buf()
            .map_err(|e| Error::io(&self.path, e))?
            .is_empty();
        if at_end {
            return Ok(None);
        }
        let mut header = [0u8; 12];
        if !self.read_exact_or_eof(&mut header)? {
            return Ok(self.truncated(warnings));
        }
        let len_bytes: [u8; 8] = header[..8].try_into().unwrap_or_default();
        let stored = u32::from_le_bytes(header[8..].try_into().unwrap_or_default());
        if masked_crc(&len_bytes) != stored {
            return Err(self.crc_error("length"));
        }
        let len = u64::from_le_bytes(len_bytes);
        if len.saturating_add(4) > self.file_len.saturating_sub(self.offset) {
            // Never allocate more than the file holds.
            return Ok(self.truncated(warnings));
        }
        let len = usize::try_from(len).map_err(|_| self.crc_error("length"))?;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.resize(len + 4, 0);
        let complete = self.read_exact_or_eof(&mut buf)?;
        self.buf = buf;
        if !complete {
            return Ok(self.truncated(warnings));
        }
        let stored = u32::from_le_bytes(self.buf[len..].try_into().unwrap_or_default());
        if masked_crc(&self.buf[..len]) != stored {
            return Err(self.crc_error("data"));
        }
        Ok(Some(&self.buf[..len]))
    }

    /// Fills `buf`; false when the file ends first.
    fn read_exact_or_eof(&mut self, buf: &mut [u8]) -> Result<bool> {
        match self.reader.read_exact(buf) {
            Ok(()) => {
                self.offset += buf.len() as u64;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    fn truncated(&self, warnings: &mut Vec<String>) -> Option<&[u8]> {
        warnings.push(format!(
            "{}: last record (at byte {}) is cut short, ignored (is the run still writing?)",
            self.path.display(),
            self.record_start
        ));
        None
    }

    fn crc_error(&self, what: &str) -> Error {
        Error::training_log(
            &self.path,
            format!(
                "corrupt event file: {what} CRC mismatch in the record at byte {}",
                self.record_start
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_crc_matches_tensorflow() {
        // tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c(b"abc")
        assert_eq!(masked_crc(b"abc"), 569_464_686);
    }

    #[test]
    fn half_precision() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x3555), 0.333251953125);
        assert!(f16_to_f64(0x7e00).is_nan());
    }
}
