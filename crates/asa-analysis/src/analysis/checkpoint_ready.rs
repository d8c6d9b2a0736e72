//! Whether a step checkpoint that a training run is writing is complete, read from the files
//! themselves rather than from how long they have been still (a trainer that pauses
//! between writes would fool a "sizes stable" rule): config.json parses, and every weight
//! file the checkpoint will have is whole. A safetensors file is whole when its length
//! reaches what its own header says (8 bytes, the header, then the data up to the largest
//! offset); a sharded checkpoint is complete when its index, which `save_pretrained` writes
//! after the shards, lists shards that are all whole.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::series::step_of;

/// Largest config.json or index read (a real one is kilobytes).
const MAX_JSON: u64 = 64 << 20;
/// Largest safetensors header believed (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// A step folder of a run and whether it can be read yet.
#[derive(Debug, Clone, PartialEq)]
pub struct StepFolder {
    pub step: u64,
    pub dir: PathBuf,
    /// `None` when complete; else what is still missing.
    pub waiting: Option<String>,
}

/// The step folders in `run` (`checkpoint-N/`, `step-N/`, or any folder whose
/// trainer_state.json names its `global_step`), sorted by step, each with what it still
/// lacks. A folder whose trainer_state.json cannot be read yet is waiting at its name's step.
pub fn step_folders(run: &Path) -> std::io::Result<Vec<StepFolder>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(run)? {
        let dir = entry?.path();
        if !dir.is_dir() {
            continue;
        }
        let (step, state_error) = match step_of(&dir) {
            Ok(Some((step, _))) => (step, None),
            Ok(None) => continue,
            Err(e) => match trailing_number(&dir) {
                Some(step) => (step, Some(e.to_string())),
                None => continue,
            },
        };
        let waiting = state_error.or_else(|| readiness(&dir).err().map(|e| e.to_string()));
        found.push(StepFolder { step, dir, waiting });
    }
    found.sort_by(|a, b| a.step.cmp(&b.step).then_with(|| a.dir.cmp(&b.dir)));
    Ok(found)
}

/// The folder name's trailing number.
fn trailing_number(dir: &Path) -> Option<u64> {
    let name = dir.file_name()?.to_str()?;
    let start = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    name[start..].parse().ok()
}

/// What a checkpoint still lacks before it can be read.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// `file` (config.json, the index, a weight file) is not whole yet.
    #[error("{file}: {why}")]
    File { file: String, why: FileNotReady },
    /// An unsharded checkpoint with no `.safetensors` file yet.
    #[error("no safetensors weights yet")]
    NoWeights,
    /// The folder cannot be listed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Why one file of a checkpoint is not whole yet.
#[derive(Debug, thiserror::Error)]
pub enum FileNotReady {
    /// The file does not exist (or cannot be opened) yet.
    #[error("not written yet")]
    NotWritten,
    /// Reading the file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A JSON file that does not parse (yet).
    #[error("not valid JSON yet")]
    NotJson,
    /// An index without its `weight_map`.
    #[error("no weight_map")]
    NoWeightMap,
    /// A shard (`-of-` in its name) in a folder with no index yet.
    #[error("a shard, and no index yet")]
    ShardWithoutIndex,
    /// A safetensors file shorter than its header.
    #[error("header not written yet")]
    HeaderNotWritten,
    /// A header length no safetensors file has.
    #[error("a header of {0} bytes is not safetensors")]
    HeaderTooLong(u64),
    /// A header that does not parse (yet).
    #[error("header not valid JSON yet")]
    HeaderNotJson,
    /// A header that is JSON but no object.
    #[error("header is not a JSON object")]
    HeaderNotObject,
    /// Fewer bytes than the header's largest data offset needs.
    #[error("{len} of {expected} bytes written")]
    Short { len: u64, expected: u64 },
}

/// `Ok` when the checkpoint in `dir` is complete, else what it still lacks.
pub fn readiness(dir: &Path) -> Result<(), NotReady> {
    let config = dir.join("config.json");
    read_json(&config).map_err(|why| at(&config, why))?;
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if index.is_file() {
        let json = read_json(&index).map_err(|why| at(&index, why))?;
        let shards: BTreeSet<String> = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| at(&index, FileNotReady::NoWeightMap))?
            .values()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        shards.iter().map(|s| dir.join(s)).collect()
    } else {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(NotReady::NoWeights);
        }
        if let Some(shard) = files.iter().find(|p| name(p).contains("-of-")) {
            return Err(at(shard, FileNotReady::ShardWithoutIndex));
        }
        files
    };
    for file in &files {
        whole_safetensors(file).map_err(|why| at(file, why))?;
    }
    Ok(())
}

/// `why` the file at `path` is not whole, named by its file name.
fn at(path: &Path, why: FileNotReady) -> NotReady {
    NotReady::File {
        file: name(path),
        why,
    }
}

fn name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// A JSON file read whole (at most [`MAX_JSON`] bytes): a file still being written does not
/// parse.
fn read_json(path: &Path) -> Result<serde_json::Value, FileNotReady> {
    let file = asa_core::input::open(path).map_err(|_| FileNotReady::NotWritten)?;
    let mut text = String::new();
    file.take(MAX_JSON).read_to_string(&mut text)?;
    serde_json::from_str(&text).map_err(|_| FileNotReady::NotJson)
}

/// `Ok` when the safetensors file at `path` is as long as its header says.
fn whole_safetensors(path: &Path) -> Result<(), FileNotReady> {
    let mut file = asa_core::input::open(path).map_err(|_| FileNotReady::NotWritten)?;
    let len = file.metadata()?.len();
    let mut prefix = [0u8; 8];
    if len < 8 || file.read_exact(&mut prefix).is_err() {
        return Err(FileNotReady::HeaderNotWritten);
    }
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER {
        return Err(FileNotReady::HeaderTooLong(header_len));
    }
    if len < 8 + header_len {
        return Err(FileNotReady::HeaderNotWritten);
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)?;
    let json: serde_json::Value =
        serde_json::from_slice(&header).map_err(|_| FileNotReady::HeaderNotJson)?;
    let end = json
        .as_object()
        .ok_or(FileNotReady::HeaderNotObject)?
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let expected = 8 + header_len + end;
    if len < expected {
        return Err(FileNotReady::Short { len, expected });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of one f32 tensor of `n` values.
    fn safetensors(n: usize) -> Vec<u8> {
        let header = format!(
            "{{\"w\":{{\"dtype\":\"F32\",\"shape\":[{n}],\"data_offsets\":[0,{}]}}}}",
            4 * n
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(vec![0u8; 4 * n]);
        bytes
    }

    #[test]
    fn a_checkpoint_is_ready_only_when_every_file_is_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("checkpoint-10");
        std::fs::create_dir(&dir).unwrap();
        let waiting = |dir: &Path| readiness(dir).unwrap_err().to_string();
        assert_eq!(waiting(&dir), "config.json: not written yet");
        std::fs::write(dir.join("config.json"), "{\"model_type\": ").unwrap();
        assert_eq!(waiting(&dir), "config.json: not valid JSON yet");
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        assert_eq!(waiting(&dir), "no safetensors weights yet");
        // every cut of the file is waiting; the whole file is ready
        let full = safetensors(100);
        for cut in [0, 4, 8, 20, full.len() - 1] {
            std::fs::write(dir.join("model.safetensors"), &full[..cut]).unwrap();
            assert!(readiness(&dir).is_err(), "{cut} bytes");
        }
        assert_eq!(
            waiting(&dir),
            format!(
                "model.safetensors: {} of {} bytes written",
                full.len() - 1,
                full.len()
            )
        );
        std::fs::write(dir.join("model.safetensors"), &full).unwrap();
        assert!(readiness(&dir).is_ok());
        // shards wait for their index, and the index for its shards
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
        std::fs::write(dir.join("model-00001-of-00002.safetensors"), &full).unwrap();
        assert_eq!(
            waiting(&dir),
            "model-00001-of-00002.safetensors: a shard, and no index yet"
        );
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        assert_eq!(
            waiting(&dir),
            "model-00002-of-00002.safetensors: not written yet"
        );
        std::fs::write(dir.join("model-00002-of-00002.safetensors"), &full).unwrap();
        assert!(readiness(&dir).is_ok());
        let steps = step_folders(tmp.path()).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!((steps[0].step, steps[0].waiting.clone()), (10, None));
    }
}
