//! Issue 24: a fuzzing harness. Valid inputs (a checkpoint's config.json, its safetensors
//! header and index.json, a GGUF file's header, a corpus, a training log, an exported table,
//! and since issue 40 a Hugging Face cache's layout, a `tables` manifest and an
//! lm-eval-harness result file) are mutated by a fixed-seed generator, and the real binary
//! runs on each case. Every case
//! must end with exit 0 or 2 (never a signal, an abort or a panic), one line on stderr when
//! 2, no staging folder left, within a time limit and a memory cap. Issue 40 adds `merge` of
//! tampered partials (run.json values, the state file's bytes, files swapped between shards)
//! and `analyze` under hostile shard environments (Slurm and Kubernetes variables, flags).
//! Issue 54 adds `watch` run folders, `report` inputs and destinations and numeric options
//! at the edges of their types (`surfaces.rs`); the Python entry points have their own
//! harness (`python/tests/fuzz_entry_points.py`).
//!
//! `cargo test --release fuzz` runs the committed corpus (`tests/fixtures/fuzz/`, cases that
//! once failed) and `ASA_FUZZ_CASES` generated cases (default 720) from `ASA_FUZZ_SEED`
//! (default 24); `tools/fuzz.sh` runs longer with fresh seeds and saves any failing case to
//! the corpus.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{copy_fixture, fixtures};

mod surfaces;

/// Wall time one case may take.
const TIME_LIMIT: Duration = Duration::from_secs(30);
/// Address space one case may take (a mutated size must be refused, not allocated).
const MEMORY_CAP: u64 = 4 << 30;

/// The input kinds mutated, and the command each is run with.
#[derive(Debug, Clone, Copy)]
enum Target {
    Config,
    SafetensorsHeader,
    Index,
    Gguf,
    Corpus,
    Log,
    Table,
    Partial,
    ShardEnv,
    HubCache,
    /// A `tables` manifest (JSON) naming a checkpoint, a log, results and lm-eval files.
    Manifest,
    /// An lm-eval-harness result file read by `tables`.
    LmEval,
    /// A `watch --once` of a run folder of odd step names and damaged checkpoints.
    Watch,
    /// `report` of a damaged results folder into a hostile destination.
    Report,
    /// A numeric option of `analyze`, `spikes` or `grad-stats` at an edge of its type.
    Options,
}

const TARGETS: [Target; 15] = [
    Target::Config,
    Target::SafetensorsHeader,
    Target::Index,
    Target::Gguf,
    Target::Corpus,
    Target::Log,
    Target::Table,
    Target::Partial,
    Target::ShardEnv,
    Target::HubCache,
    Target::Manifest,
    Target::LmEval,
    Target::Watch,
    Target::Report,
    Target::Options,
];

/// The environment variables that name a shard (Slurm's and Kubernetes').
const SHARD_VARS: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
];

/// A case: its command line and the environment variables it runs with.
type Case = (Vec<String>, Vec<(String, String)>);

/// A mutation of bytes or JSON values, chosen by `rng`.
fn mutate_bytes(rng: &mut fastrand::Rng, bytes: &mut Vec<u8>, region: std::ops::Range<usize>) {
    let region = region.start.min(bytes.len())..region.end.min(bytes.len());
    if region.is_empty() {
        bytes.push(rng.u8(..));
        return;
    }
    match rng.u8(0..6) {
        // flip a few bytes
        0 => {
            for _ in 0..rng.usize(1..8) {
                let at = rng.usize(region.clone());
                bytes[at] = rng.u8(..);
            }
        }
        // a digit run becomes a huge or odd number
        1 => {
            let at = rng.usize(region.clone());
            let digits = [
                "0",
                "-1",
                "99999999999999999999",
                "4294967297",
                "1e308",
                "NaN",
            ];
            let text = digits[rng.usize(..digits.len())].as_bytes();
            bytes.splice(at..at, text.iter().copied());
        }
        // truncate
        2 => bytes.truncate(rng.usize(region.clone())),
        // remove a span
        3 => {
            let at = rng.usize(region.clone());
            let end = (at + rng.usize(1..64)).min(bytes.len());
            bytes.drain(at..end);
        }
        // duplicate a span
        4 => {
            let at = rng.usize(region.clone());
            let end = (at + rng.usize(1..64)).min(bytes.len());
            let span: Vec<u8> = bytes[at..end].to_vec();
            bytes.splice(at..at, span);
        }
        // a little-endian integer field set to an extreme
        _ => {
            let at = rng.usize(region.clone());
            let value: u64 = [0, 1, u32::MAX as u64, u64::MAX, 1 << 40][rng.usize(..5)];
            for (k, b) in value.to_le_bytes().iter().enumerate() {
                if let Some(slot) = bytes.get_mut(at + k) {
                    *slot = *b;
                }
            }
        }
    }
}

/// A JSON value replaced by one of another type or an extreme.
fn mutate_json(rng: &mut fastrand::Rng, value: &mut serde_json::Value) {
    use serde_json::{json, Value};
    let extremes = [
        json!(null),
        json!(0),
        json!(-1),
        json!(1e12),
        json!(1e308),
        json!("text"),
        json!([]),
        json!({}),
        json!(true),
        json!(4294967297u64),
        json!(0.5),
    ];
    match value {
        Value::Object(map) if !map.is_empty() => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = &keys[rng.usize(..keys.len())];
            if rng.bool() {
                mutate_json(rng, map.get_mut(key).unwrap());
            } else if rng.u8(0..4) == 0 {
                map.remove(key);
            } else {
                map.insert(key.clone(), extremes[rng.usize(..extremes.len())].clone());
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let at = rng.usize(..items.len());
            mutate_json(rng, &mut items[at]);
        }
        other => *other = extremes[rng.usize(..extremes.len())].clone(),
    }
}

/// Writes case `seed`'s input under `dir` and returns the command line (and environment)
/// to run there.
fn make_case(target: Target, seed: u64, dir: &Path) -> Case {
    let mut rng = fastrand::Rng::with_seed(seed);
    match target {
        Target::Partial => return (partial_case(&mut rng, dir), Vec::new()),
        Target::ShardEnv => return shard_env_case(&mut rng, dir),
        Target::Watch => return (surfaces::watch_case(&mut rng, dir), Vec::new()),
        Target::Report => return (surfaces::report_case(&mut rng, dir), Vec::new()),
        Target::Options => return (surfaces::options_case(&mut rng, dir), Vec::new()),
        _ => {}
    }
    (file_case(target, &mut rng, dir), Vec::new())
}

/// A case of a mutated input file (every target but the partials and the environment).
fn file_case(target: Target, rng: &mut fastrand::Rng, dir: &Path) -> Vec<String> {
    let ckpt = dir.join("ckpt");
    let out = dir.join("out").display().to_string();
    let analyze = |model: &str| -> Vec<String> {
        [
            "analyze",
            model,
            "--seq-len",
            "16",
            "--num-seqs",
            "2",
            "--quiet",
            "--out",
            &out,
        ]
        .map(String::from)
        .to_vec()
    };
    match target {
        Target::Config | Target::Index | Target::SafetensorsHeader => {
            copy_fixture("llama_gqa", &ckpt);
            match target {
                Target::Config => rewrite_json(&ckpt.join("config.json"), rng),
                Target::Index => rewrite_json(&ckpt.join("model.safetensors.index.json"), rng),
                _ => {
                    let shard = ckpt.join("model-00001-of-00003.safetensors");
                    let mut bytes = std::fs::read(&shard).unwrap();
                    let header = 8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
                    for _ in 0..rng.usize(1..4) {
                        mutate_bytes(rng, &mut bytes, 0..header);
                    }
                    std::fs::write(&shard, bytes).unwrap();
                }
            }
            let mut args = analyze(&ckpt.display().to_string());
            args.extend(["--corpus".into(), corpus_path().display().to_string()]);
            args
        }
        Target::Gguf => {
            let path = dir.join("model.gguf");
            let mut bytes = std::fs::read(fixtures().join("gguf/llama_gqa.gguf")).unwrap();
            let header = bytes.len().min(8192);
            for _ in 0..rng.usize(1..4) {
                mutate_bytes(rng, &mut bytes, 0..header);
            }
            std::fs::write(&path, bytes).unwrap();
            let command = if rng.bool() { "inspect" } else { "analyze" };
            match command {
                "inspect" => vec!["inspect".into(), path.display().to_string()],
                _ => analyze(&path.display().to_string()),
            }
        }
        Target::Corpus => {
            let path = dir.join(if rng.bool() {
                "corpus.txt"
            } else {
                "corpus.jsonl"
            });
            let mut bytes = std::fs::read(fixtures().join("corpus/tiny.jsonl")).unwrap();
            let len = bytes.len();
            for _ in 0..rng.usize(1..6) {
                mutate_bytes(rng, &mut bytes, 0..len);
            }
            std::fs::write(&path, bytes).unwrap();
            let model = fixtures().join("models/llama_gqa").display().to_string();
            let mut args = analyze(&model);
            args.extend(["--corpus".into(), path.display().to_string()]);
            args
        }
        Target::Log => {
            let path = dir.join("run.csv");
            let mut bytes = std::fs::read(fixtures().join("logs/noisy.csv")).unwrap();
            let len = bytes.len();
            for _ in 0..rng.usize(1..6) {
                mutate_bytes(rng, &mut bytes, 0..len);
            }
            std::fs::write(&path, bytes).unwrap();
            let command = ["spikes", "grad-stats", "curves"][rng.usize(..3)];
            [command, &path.display().to_string(), "--out", &out]
                .map(String::from)
                .to_vec()
        }
        Target::Partial | Target::ShardEnv | Target::Watch | Target::Report | Target::Options => {
            unreachable!("made by their own functions")
        }
        Target::Table => {
            let results = dir.join("results");
            std::fs::create_dir_all(&results).unwrap();
            let full = fixtures().join("tables/full");
            for entry in std::fs::read_dir(&full).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), results.join(entry.file_name())).unwrap();
            }
            let mut names: Vec<PathBuf> = std::fs::read_dir(&results)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "csv"))
                .collect();
            names.sort();
            let victim = &names[rng.usize(..names.len())];
            let mut bytes = std::fs::read(victim).unwrap();
            let len = bytes.len();
            for _ in 0..rng.usize(1..6) {
                mutate_bytes(rng, &mut bytes, 0..len);
            }
            std::fs::write(victim, bytes).unwrap();
            ["figures", &results.display().to_string(), "--out", &out]
                .map(String::from)
                .to_vec()
        }
        Target::HubCache => {
            hub_layout(rng, dir);
            let revision = ["", "@main", "@step1000", "@step1000,step2000"][rng.usize(..4)];
            analyze(&format!("org/tiny{revision}"))
        }
        Target::Manifest | Target::LmEval => paper_case(target, rng, dir, &out),
    }
}

/// A snapshot name of the cache cases: a short one or a Hub-like commit hash.
const HASHES: [&str; 2] = ["abc123", "0123456789abcdef0123456789abcdef01234567"];

/// A Hugging Face cache under `dir/hub` (each case runs with `HF_HUB_CACHE` there) holding
/// `org/tiny` (llama_gqa snapshots) with refs `main`, `step1000` and `step2000` that hold a
/// hash, or a hostile text, or are no file; beside the cache, `dir/outside` holds a valid
/// qwen2 checkpoint that no ref may reach ([`check_hub_case`]).
fn hub_layout(rng: &mut fastrand::Rng, dir: &Path) {
    let repo = dir.join("hub/models--org--tiny");
    let outside = dir.join("outside");
    copy_fixture("qwen2", &outside);
    for hash in HASHES {
        if rng.u8(0..5) != 0 {
            copy_fixture("llama_gqa", &repo.join("snapshots").join(hash));
        }
    }
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    let inside = repo.join("snapshots").join(HASHES[0]);
    for name in ["main", "step1000", "step2000"] {
        let path = repo.join("refs").join(name);
        let held: String = match rng.u8(0..16) {
            0 => outside.display().to_string(),
            1 => inside.display().to_string(),
            2 => "../../../outside".into(),
            3 => format!("../snapshots/{}", HASHES[0]),
            4 => "a".repeat(rng.usize(65..6000)),
            5 => String::new(),
            6 => format!("{}\0x", HASHES[0]),
            7 => "def456".into(),
            8 => format!("  {}\n\n", HASHES[1]),
            9 => {
                let _ = std::os::unix::fs::symlink(outside.join("config.json"), &path);
                continue;
            }
            10 => {
                std::fs::create_dir_all(&path).unwrap();
                continue;
            }
            11 => {
                let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
                // SAFETY: a valid NUL-terminated path
                unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
                continue;
            }
            12 => {
                let _ = std::os::unix::fs::symlink("/dev/zero", &path);
                continue;
            }
            13 => continue, // no ref: the revision names a snapshot itself
            _ => HASHES[rng.usize(..2)].into(),
        };
        std::fs::write(&path, held).unwrap();
    }
    // a snapshot, or the snapshots folder, that links out of the cache
    match rng.u8(0..6) {
        0 => {
            let _ = std::os::unix::fs::symlink(&outside, repo.join("snapshots/def456"));
        }
        1 => {
            let _ = std::fs::remove_dir_all(repo.join("snapshots"));
            std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
            copy_fixture("qwen2", &dir.join("elsewhere").join(HASHES[0]));
            let _ = std::os::unix::fs::symlink(dir.join("elsewhere"), repo.join("snapshots"));
        }
        _ => {}
    }
}

/// A cache case that ran analysed a snapshot of the cache (llama_gqa), never the qwen2
/// checkpoint a ref or link could lead to outside it.
fn check_hub_case(dir: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.join("out/run.json"))
        .map_err(|e| format!("exit 0 without run.json: {e}"))?;
    let run: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let models = run["models"].as_array().cloned().unwrap_or_default();
    match models.iter().find(|m| m["architecture"] != "llama") {
        Some(m) => Err(format!("loaded a checkpoint from outside the cache: {m}")),
        None => Ok(()),
    }
}

/// An empty folder `fuzz-<what>-<pid>` under cargo's test folder, for inputs analysed once
/// per test process that cases copy.
fn fresh_prepared_dir(what: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two shards (`p0`, `p1`) of one run, analysed once per test process, that partial cases
/// copy and tamper with.
fn prepared_partials() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = fresh_prepared_dir("partials");
        let model = fixtures().join("models/llama_gqa").display().to_string();
        for k in 0..2 {
            let (shard, out) = (format!("{k}/2"), format!("p{k}"));
            crate::common::expect_success(&crate::common::run_cli(
                &dir,
                &[
                    "analyze",
                    &model,
                    "--seq-len",
                    "16",
                    "--num-seqs",
                    "4",
                    "--shard",
                    &shard,
                    "--out",
                    &out,
                    "--quiet",
                ],
            ));
        }
        dir
    })
}

/// `merge` of the two prepared shards after one tampering: a run.json value, the state
/// file's bytes, a state or run.json taken from the other shard.
fn partial_case(rng: &mut fastrand::Rng, dir: &Path) -> Vec<String> {
    for k in 0..2 {
        let (from, to) = (
            prepared_partials().join(format!("p{k}")),
            dir.join(format!("p{k}")),
        );
        std::fs::create_dir_all(&to).unwrap();
        for name in ["partial.parquet", "run.json", "partial.complete"] {
            std::fs::copy(from.join(name), to.join(name)).unwrap();
        }
    }
    let k = rng.usize(..2);
    let (victim, other) = (dir.join(format!("p{k}")), dir.join(format!("p{}", 1 - k)));
    let parquet = victim.join("partial.parquet");
    match rng.u8(0..6) {
        0 | 1 => rewrite_json(&victim.join("run.json"), rng),
        2 => {
            let mut bytes = std::fs::read(&parquet).unwrap();
            let len = bytes.len();
            for _ in 0..rng.usize(1..4) {
                mutate_bytes(rng, &mut bytes, 0..len);
            }
            std::fs::write(&parquet, bytes).unwrap();
        }
        3 => {
            std::fs::copy(other.join("partial.parquet"), &parquet).unwrap();
        }
        4 => {
            std::fs::copy(other.join("run.json"), victim.join("run.json")).unwrap();
        }
        _ => {
            std::fs::copy(other.join("partial.parquet"), &parquet).unwrap();
            rewrite_json(&victim.join("run.json"), rng);
        }
    }
    let out = dir.join("out").display().to_string();
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend([dir.join("p0"), dir.join("p1")].map(|p| p.display().to_string()));
    args.extend(["--out".into(), out, "--quiet".into()]);
    if rng.u8(0..4) == 0 {
        args.push("--partial".into());
    }
    args
}

/// `analyze` under a hostile shard environment: Slurm's and Kubernetes' variables with
/// extreme, negative or malformed values, with or without `--shard` / `--shard-count`.
fn shard_env_case(rng: &mut fastrand::Rng, dir: &Path) -> Case {
    let values = [
        "0",
        "1",
        "2",
        "3",
        "4",
        "7",
        "-1",
        "x",
        "",
        " 2",
        "1000000000",
        "18446744073709551615",
        "18446744073709551616",
    ];
    let pick = |rng: &mut fastrand::Rng| values[rng.usize(..values.len())].to_string();
    let mut env = Vec::new();
    for name in SHARD_VARS {
        if rng.bool() {
            env.push((name.to_string(), pick(rng)));
        }
    }
    let model = fixtures().join("models/llama_gqa").display().to_string();
    let out = dir.join("out").display().to_string();
    let mut args: Vec<String> = [
        "analyze",
        &model,
        "--seq-len",
        "16",
        "--num-seqs",
        "4",
        "--quiet",
        "--out",
        &out,
    ]
    .map(String::from)
    .to_vec();
    match rng.u8(0..4) {
        0 => args.extend(["--shard".into(), format!("{}/{}", pick(rng), pick(rng))]),
        1 => args.extend(["--shard-count".into(), pick(rng)]),
        _ => {}
    }
    (args, env)
}

/// A `tables` case: a valid manifest (Table 1's baseline and Affine-Scaled runs with a
/// checkpoint, a log, `analyze` results and lm-eval files) with the manifest or one lm-eval
/// file mutated.
fn paper_case(target: Target, rng: &mut fastrand::Rng, dir: &Path, out: &str) -> Vec<String> {
    let fx = fixtures();
    let lm_eval = dir.join("asa.json");
    std::fs::copy(fx.join("lm_eval/asa.json"), &lm_eval).unwrap();
    let path = |p: PathBuf| p.display().to_string();
    let manifest = serde_json::json!({
        "loss_window": 3,
        "table3": ["linear_clipping", "sigmoid"],
        "run": [
            {"size": "1B", "method": "baseline", "checkpoint": path(fx.join("models/llama_gqa")),
             "log": path(fx.join("logs/hand.csv")), "results": path(fx.join("tables/full")),
             "model": "base", "lm_eval": path(fx.join("lm_eval/baseline.json"))},
            {"size": "1B", "method": "asa", "log": path(fx.join("logs/noisy.csv")),
             "results": path(fx.join("tables/full")), "model": "asa", "lm_eval": [path(lm_eval.clone())]},
        ],
    });
    let manifest_path = dir.join("paper.json");
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    match target {
        Target::Manifest => rewrite_json(&manifest_path, rng),
        // half the time in the `results` block, the numbers the tables report
        _ if rng.bool() => {
            let mut json: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&lm_eval).unwrap()).unwrap();
            for _ in 0..rng.usize(1..4) {
                mutate_json(rng, &mut json["results"]);
            }
            std::fs::write(&lm_eval, json.to_string()).unwrap();
        }
        _ => rewrite_json(&lm_eval, rng),
    }
    ["tables", "--manifest", &path(manifest_path), "--out", out]
        .map(String::from)
        .to_vec()
}

fn corpus_path() -> PathBuf {
    fixtures().join("corpus/tiny.txt")
}

/// Rewrites the JSON file `path` with one to three mutated values (or its bytes mutated,
/// when it is to stay no JSON at all).
fn rewrite_json(path: &Path, rng: &mut fastrand::Rng) {
    let text = std::fs::read_to_string(path).unwrap();
    if rng.u8(0..5) == 0 {
        let mut bytes = text.into_bytes();
        let len = bytes.len();
        mutate_bytes(rng, &mut bytes, 0..len);
        std::fs::write(path, bytes).unwrap();
        return;
    }
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    for _ in 0..rng.usize(1..4) {
        mutate_json(rng, &mut value);
    }
    std::fs::write(path, value.to_string()).unwrap();
}

/// A case's exit status (0 or 2), or what went wrong.
fn check_case(dir: &Path, (args, env): &Case) -> Result<i32, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
    for name in SHARD_VARS {
        child.env_remove(name);
    }
    child
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        // the cache cases' own cache, and no other case reads the user's
        .env("HF_HUB_CACHE", dir.join("hub"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::common::cap_address_space(&mut child, MEMORY_CAP);
    let started = Instant::now();
    let mut child = child.spawn().expect("binary runs");
    // drained as the case runs: a long message must not block the child on a full pipe
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        use std::io::Read;
        let _ = pipe.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {TIME_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = reader.join().unwrap();
    if stderr.len() > 2000 {
        return Err(format!("{} bytes on stderr", stderr.len()));
    }
    if let Some(signal) = status.signal() {
        return Err(format!("killed by signal {signal}: {stderr}"));
    }
    let code = status.code().unwrap_or(-1);
    match code {
        0 => {}
        2 => {
            if stderr.trim_end().lines().count() != 1 {
                return Err(format!("exit 2 without a one-line error: {stderr}"));
            }
        }
        other => return Err(format!("exit {other}: {stderr}")),
    }
    if stderr.contains("panicked") {
        return Err(format!("panic: {stderr}"));
    }
    let out = dir.join("out");
    if let Ok(entries) = std::fs::read_dir(&out) {
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().to_string();
            if name.starts_with(".asa-staging") {
                return Err(format!("staging folder {name} left behind"));
            }
        }
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.starts_with('.') && name.ends_with(".tmp") {
            return Err(format!("temporary file {name} left behind"));
        }
    }
    Ok(code)
}

/// The case numbers of the committed corpus: `tests/fixtures/fuzz/cases.txt`, lines
/// `target seed` of cases that once failed.
fn corpus() -> Vec<(Target, u64)> {
    let text = std::fs::read_to_string(fixtures().join("fuzz/cases.txt")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let target = parts.next()?;
            let seed = parts.next()?.parse().ok()?;
            let target = TARGETS.into_iter().find(|t| format!("{t:?}") == target)?;
            Some((target, seed))
        })
        .collect()
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn mutated_inputs_end_cleanly_with_exit_0_or_2() {
    let cases = env_number("ASA_FUZZ_CASES", 720);
    let seed = env_number("ASA_FUZZ_SEED", 24);
    let mut all: Vec<(Target, u64)> = corpus();
    let committed = all.len();
    for k in 0..cases {
        let target = TARGETS[(k % TARGETS.len() as u64) as usize];
        all.push((target, seed.wrapping_mul(1_000_003).wrapping_add(k)));
    }
    let (mut clean, mut refused, mut failures) = (0, 0, Vec::new());
    // failing cases not yet in the committed corpus (what ASA_FUZZ_REPORT gets)
    let mut new_failures = Vec::new();
    let tmp = tempfile::tempdir().unwrap();
    for (k, &(target, case_seed)) in all.iter().enumerate() {
        let dir = tmp.path().join(format!("case{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        let case = make_case(target, case_seed, &dir);
        let checked = match (target, check_case(&dir, &case)) {
            (Target::HubCache, Ok(0)) => check_hub_case(&dir).map(|_| 0),
            (Target::Report, Ok(code)) => surfaces::check_report_case(&dir).map(|_| code),
            (_, checked) => checked,
        };
        match checked {
            Ok(0) => clean += 1,
            Ok(_) => refused += 1,
            Err(problem) => {
                failures.push(format!("{target:?} {case_seed}: {problem}"));
                if k >= committed {
                    new_failures.push(format!("{target:?} {case_seed}"));
                }
                // ASA_FUZZ_SAVE=DIR keeps each failing case's files and command line
                if let Ok(save) = std::env::var("ASA_FUZZ_SAVE") {
                    let kept = Path::new(&save).join(format!("{target:?}-{case_seed}"));
                    let _ = std::fs::create_dir_all(&kept);
                    let _ = Command::new("cp").arg("-r").arg(&dir).arg(&kept).status();
                    let _ = std::fs::write(kept.join("args.txt"), case.0.join("\n"));
                    let env: Vec<String> = case.1.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    let _ = std::fs::write(kept.join("env.txt"), env.join("\n"));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!(
        "fuzz: {} cases ({} from the corpus), {clean} ran (exit 0), {refused} refused (exit 2), {} defects",
        all.len(),
        all.len() as u64 - cases,
        failures.len()
    );
    if let Ok(report) = std::env::var("ASA_FUZZ_REPORT") {
        std::fs::write(report, new_failures.join("\n")).unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
