//! Whether a step checkpoint that a training run is writing is complete, read from the files
//! themselves rather than from how long they have been still (a trainer that pauses
//! between writes would fool a "sizes stable" rule): config.json parses, and every weight
//! file the checkpoint will have is whole. A safetensors file is whole when its length
//! reaches what its own header says (8 bytes, the header, then the data up to the largest
//! offset); a sharded checkpoint is complete when its index, which `save_pretrained` writes
//! after the shards, lists shards that are all whole.

use std::collections::BTreeSet;
use std::fs::File;
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
        let waiting = state_error.or_else(|| readiness(&dir).err());
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

/// `Ok` when the checkpoint in `dir` is complete, else what it still lacks.
pub fn readiness(dir: &Path) -> Result<(), String> {
    let config = dir.join("config.json");
    read_json(&config).map_err(|e| format!("config.json: {e}"))?;
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if index.is_file() {
        let json = read_json(&index).map_err(|e| format!("{}: {e}", name(&index)))?;
        let shards: BTreeSet<String> = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| format!("{}: no weight_map", name(&index)))?
            .values()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        shards.iter().map(|s| dir.join(s)).collect()
    } else {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err("no safetensors weights yet".into());
        }
        if let Some(shard) = files.iter().find(|p| name(p).contains("-of-")) {
            return Err(format!("{}: a shard, and no index yet", name(shard)));
        }
        files
    };
    for file in &files {
        whole_safetensors(file).map_err(|e| format!("{}: {e}", name(file)))?;
    }
    Ok(())
}

fn name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// A JSON file read whole (at most [`MAX_JSON`] bytes): a file still being written does not
/// parse.
fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let file = File::open(path).map_err(|_| "not written yet".to_string())?;
    let mut text = String::new();
    file.take(MAX_JSON)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|_| "not valid JSON yet".into())
}

/// `Ok` when the safetensors file at `path` is as long as its header says.
fn whole_safetensors(path: &Path) -> Result<(), String> {
    let mut file = File::open(path).map_err(|_| "not written yet".to_string())?;
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut prefix = [0u8; 8];
    if len < 8 || file.read_exact(&mut prefix).is_err() {
        return Err("header not written yet".into());
    }
    let header_len = u64::from_le_bytes(prefix);
    if header_len > MAX_HEADER {
        return Err(format!("a header of {header_len} bytes is not safetensors"));
    }
    if len < 8 + header_len {
        return Err("header not written yet".into());
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(|e| e.to_string())?;
    let json: serde_json::Value =
        serde_json::from_slice(&header).map_err(|_| "header not valid JSON yet".to_string())?;
    let end = json
        .as_object()
        .ok_or("header is not a JSON object")?
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    let expected = 8 + header_len + end;
    if len < expected {
        return Err(format!("{len} of {expected} bytes written"));
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
        assert!(readiness(&dir).unwrap_err().contains("config.json"));
        std::fs::write(dir.join("config.json"), "{\"model_type\": ").unwrap();
        assert!(readiness(&dir).unwrap_err().contains("not valid JSON"));
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        assert!(readiness(&dir).unwrap_err().contains("no safetensors"));
        // every cut of the file is waiting; the whole file is ready
        let full = safetensors(100);
        for cut in [0, 4, 8, 20, full.len() - 1] {
            std::fs::write(dir.join("model.safetensors"), &full[..cut]).unwrap();
            assert!(readiness(&dir).is_err(), "{cut} bytes");
        }
        std::fs::write(dir.join("model.safetensors"), &full).unwrap();
        assert_eq!(readiness(&dir), Ok(()));
        // shards wait for their index, and the index for its shards
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
        std::fs::write(dir.join("model-00001-of-00002.safetensors"), &full).unwrap();
        assert!(readiness(&dir).unwrap_err().contains("no index"));
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        assert!(readiness(&dir).unwrap_err().contains("00002-of-00002"));
        std::fs::write(dir.join("model-00002-of-00002.safetensors"), &full).unwrap();
        assert_eq!(readiness(&dir), Ok(()));
        let steps = step_folders(tmp.path()).unwrap();
        assert_eq!(steps.len(), 1);
        assert_eq!((steps[0].step, steps[0].waiting.clone()), (10, None));
    }
}
