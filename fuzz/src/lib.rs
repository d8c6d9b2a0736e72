//! What the fuzz targets share: a scratch folder of this process's own where each input is
//! written as the file a parser reads (every parser of asa-analyze reads files, opened and
//! checked as the CLI opens them), and the fixtures the targets build their folders from.
//!
//! A target's oracle is the parser's contract: return (`Ok` or an `Err`), never panic,
//! abort, hang or run out of memory (libFuzzer's `-rss_limit_mb`, `-timeout`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's scratch folder (under the temporary folder, made once, when the first
/// input is written).
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // as the binary does: a panic of a third-party reader that asa-analyze catches
        // (`read_guarded`: polars' Parquet footer parser) is its error, not printed; every
        // other panic still reaches libFuzzer's hook (installed before the first input)
        asa_tables::damaged::quiet_guarded_panics();
        let dir = std::env::temp_dir().join(format!("asa-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}

/// `bytes` written as `name` in the scratch folder (replacing what was there).
pub fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("scratch subfolder");
    }
    std::fs::write(&path, bytes).expect("scratch file");
    path
}

/// The repository's test fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// Fixture `from` (relative to the fixtures) copied to `to` in the scratch folder, once.
pub fn fixture_once(from: &str, to: &str) -> PathBuf {
    let path = scratch().join(to);
    if !path.exists() {
        let bytes = std::fs::read(fixtures().join(from)).expect("fixture");
        write(to, &bytes);
    }
    path
}

/// `data` cut in two: a first part whose length its first two bytes give (little-endian,
/// at most the rest), and the rest (two files of one input: a run.json and its table).
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    if data.len() < 2 {
        return (data, &[]);
    }
    let n = (u16::from_le_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
    data[2..].split_at(n)
}

/// The two-part input [`split`] cuts into `a` and `b` (how seeds are made).
pub fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let n = u16::try_from(a.len()).expect("first part under 64 KiB");
    let mut out = n.to_le_bytes().to_vec();
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

/// Opens the checkpoint at `path` as `analyze` does (CPU, f32), loads its model and its
/// tokenizer: every header, metadata key, tensor table entry and family rule it reads.
pub fn open_checkpoint(path: &Path) {
    use asa_models::Checkpoint;
    let Ok(checkpoint) = Checkpoint::open(path, &candle_core::Device::Cpu, candle_core::DType::F32)
    else {
        return;
    };
    let _ = checkpoint.tokenizer();
    let _ = checkpoint.load_model();
}

/// A table input: the first byte picks a declared schema (`asa_tables::schema::SCHEMAS`,
/// one past them: none), the rest is the file `table.{ext}`.
pub fn read_table_input(data: &[u8], ext: &str) {
    use asa_tables::schema::SCHEMAS;
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let path = write(&format!("table.{ext}"), body);
    let _ = match SCHEMAS.get(pick as usize % (SCHEMAS.len() + 1)) {
        Some(schema) => asa_tables::read_declared(&path, schema),
        None => asa_tables::read_table(&path),
    };
}

/// A training log `name` holding `data`, read for the metrics `spikes` reads by default
/// and the loss (by their aliases too).
pub fn read_log_input(name: &str, data: &[u8]) {
    let path = write(name, data);
    let request = asa_logs::LogRequest {
        metrics: vec!["grad_norm".into(), "loss".into()],
        step_column: None,
    };
    let target = match name.starts_with("tb/") {
        true => path.parent().unwrap().to_path_buf(),
        false => path,
    };
    let _ = asa_logs::read_log(&target, &request);
}
