//! The run fingerprint of a shard (SPEC section 8): what must agree between the partials of
//! one run, so that `merge` refuses partials of different runs. A model's part names its
//! checkpoint's files (every file the analysis reads — `*.safetensors`, `*.gguf`, `*.json` —
//! hashed whole, streamed; any other file in the folder, such as a trainer's optimizer
//! state, by its size and first MiB, and said so in its `hashed` field), its windows (count,
//! length, SHA-256 of every token id) and the SHA-256 of each shard's windows, which ties a
//! partial's state to the windows it claims to cover.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::run_spec::RunSpec;
use super::shard::Shard;
use asa_core::error::{Error, Result};

/// Bytes hashed of a file the analysis does not read (its size is recorded too).
const HEAD_BYTES: u64 = 1 << 20;
/// Bytes read at a time when a file is hashed.
const CHUNK: usize = 1 << 20;

/// The fingerprint of one model of a shard run: its label, its checkpoint's files (name,
/// size, SHA-256, and `hashed`: `whole` or `first MiB`), its windows (count, length,
/// SHA-256 of the token ids) and `shard_windows_sha256`, the SHA-256 of the windows of
/// each of `shard`'s `count` shards.
pub fn model_fingerprint(
    label: &str,
    path: &Path,
    windows: &[Vec<u32>],
    shard: &Shard,
) -> Result<Value> {
    let mut files = Vec::new();
    for file in checkpoint_files(path)? {
        let size = std::fs::metadata(&file)
            .map_err(|e| Error::io(&file, e))?
            .len();
        let whole = read_by_analysis(&file);
        let limit = if whole { u64::MAX } else { HEAD_BYTES };
        let sha256 = sha256_file(&file, limit)?;
        let name = file.file_name().map(|n| n.to_string_lossy().to_string());
        let hashed = if whole { "whole" } else { "first MiB" };
        files.push(json!({"file": name, "size": size, "sha256": sha256, "hashed": hashed}));
    }
    let per_shard: Vec<String> = (0..shard.count)
        .map(|index| {
            let units = Shard { index, ..*shard }.units(windows.len());
            windows_sha256(&windows[units])
        })
        .collect();
    Ok(json!({
        "model": label,
        "files": files,
        "windows": windows.len(),
        "seq_len": windows.first().map_or(0, Vec::len),
        "windows_sha256": windows_sha256(windows),
        "shard_windows_sha256": per_shard,
    }))
}

/// The files of the checkpoint at `path` (a folder's files, sorted, or the one file).
fn checkpoint_files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    entries.sort();
    Ok(entries)
}

/// Whether the analysis reads `file` (weights, configs, tokenizers): hashed whole.
fn read_by_analysis(file: &Path) -> bool {
    file.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["safetensors", "gguf", "json"].contains(&e.to_ascii_lowercase().as_str()))
}

/// The SHA-256 (hex) of the first `limit` bytes of `file`, read a chunk at a time.
pub fn sha256_file(file: &Path, limit: u64) -> Result<String> {
    let mut reader = std::fs::File::open(file)
        .map_err(|e| Error::io(file, e))?
        .take(limit);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(file, e)),
        }
    }
    Ok(hex(&hasher.finalize()))
}

/// The SHA-256 (hex) of `windows`' token ids, little-endian u32s in order.
pub fn windows_sha256(windows: &[Vec<u32>]) -> String {
    let mut ids = Sha256::new();
    for w in windows {
        for id in w {
            ids.update(id.to_le_bytes());
        }
    }
    hex(&ids.finalize())
}

/// The run's fingerprint: the tool's version, the analysis dtype, the [`RunSpec`] (the
/// settings that change the numbers; where the input files lie and how the run executes
/// are not in it) and each model's fingerprint (which hashes what the inputs hold).
pub fn run_fingerprint(spec: &RunSpec, dtype: &str, models: Vec<Value>) -> Value {
    json!({
        "asa_analyze_version": env!("CARGO_PKG_VERSION"),
        "dtype": dtype,
        "options": serde_json::to_value(spec).unwrap_or(Value::Null),
        "models": models,
    })
}

/// The first place where two fingerprints differ, as a path such as `options.seq_len` or
/// `models[0].files[2].sha256` (`at` is the path so far; `fingerprint` when the whole
/// values differ).
pub fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &here,
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}[{i}]"))),
        _ if a == b => None,
        _ if at.is_empty() => Some("fingerprint".to_string()),
        _ => Some(at.to_string()),
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_name_where_they_differ() {
        let a =
            json!({"options": {"seq_len": 16, "bins": 20}, "models": [{"files": [{"size": 1}]}]});
        let mut b = a.clone();
        assert_eq!(first_difference(&a, &b, ""), None);
        b["options"]["seq_len"] = json!(32);
        assert_eq!(
            first_difference(&a, &b, "").as_deref(),
            Some("options.seq_len")
        );
        let mut c = a.clone();
        c["models"][0]["files"][0]["size"] = json!(2);
        assert_eq!(
            first_difference(&a, &c, "").as_deref(),
            Some("models[0].files[0].size")
        );
        // a null fingerprint is named
        assert_eq!(
            first_difference(&a, &Value::Null, "").as_deref(),
            Some("fingerprint")
        );
    }

    #[test]
    fn a_file_is_hashed_whole_or_by_its_head() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("model.safetensors");
        // two chunks and a bit: a change past the first MiB changes the whole hash
        let mut bytes = vec![7u8; 2 * CHUNK + 5];
        std::fs::write(&file, &bytes).unwrap();
        let (whole, head) = (
            sha256_file(&file, u64::MAX).unwrap(),
            sha256_file(&file, HEAD_BYTES).unwrap(),
        );
        assert_eq!(whole, hex(&Sha256::digest(&bytes)));
        bytes[CHUNK + 3] = 8;
        std::fs::write(&file, &bytes).unwrap();
        assert_ne!(sha256_file(&file, u64::MAX).unwrap(), whole);
        assert_eq!(sha256_file(&file, HEAD_BYTES).unwrap(), head);
        assert!(read_by_analysis(&file));
        assert!(!read_by_analysis(&tmp.path().join("optimizer.pt")));
    }
}
