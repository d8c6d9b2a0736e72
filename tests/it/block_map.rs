//! Issue 39, item 1: `block_map`, the attention map at G x G blocks, against maps made here
//! from the fixtures' float64 attention weights (`tools/make_fixtures.py`'s
//! `layers.{l}.pattern` and, for sliding windows, `layers.{l}.visible`) with plain loops
//! over every (sequence, head, query, key): in f32 |x - y| <= 1e-6 + 1e-5 |y| (SPEC section
//! 4; times `f32_noise` for the two hybrids whose float32 forward is noisier in transformers
//! too); in bf16 at most twice torch's own bf16 error (SPEC section 12, FlashAttention's rule;
//! `tools/make_block_map_bf16_fixture.py`). Every fixture, on the flash tiles and on the
//! materialised blocks, G < T with uneven blocks and G = T; the kernels and block sizes
//! agree. Those checks run beside the library (crates/asa-analysis/tests/library/block_map.rs);
//! here: shards merge to the single run, and a bad `--map-size` is a one-line error.

use std::path::Path;

use asa_tables::{read_table, Column};

use crate::common::*;

/// `analyze` of the learned-sink fixture and GPT-OSS (a sliding window) over 7 windows of
/// 16 tokens, block_map at G = 6 beside first_token, CSV tables, with `extra` arguments.
fn analyze_cli(dir: &Path, extra: &[&str]) -> std::process::Output {
    let models = fixtures().join("models");
    let a = format!("a={}", models.join("sink").display());
    let b = format!("b={}", models.join("gpt_oss").display());
    let mut args = vec![
        "analyze",
        &a,
        &b,
        "--seq-len",
        "16",
        "--num-seqs",
        "7",
        "--metrics",
        "first_token,block_map",
        "--map-size",
        "6",
        "--format",
        "csv",
        "--quiet",
    ];
    args.extend(extra);
    run_cli(dir, &args)
}

#[test]
fn shards_merge_to_the_block_map_of_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    expect_success(&analyze_cli(dir, &["--out", "whole"]));
    // a large table: Parquet whatever --format says; the others follow --format
    assert!(dir.join("whole/block_map.parquet").is_file());
    assert!(!dir.join("whole/block_map.csv").exists());
    assert!(dir.join("whole/attention.csv").is_file());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("whole/run.json")).unwrap())
            .unwrap();
    assert_eq!(run["options"]["map_size"], 6, "{}", run["options"]);
    for k in 0..3 {
        let out = format!("p{k}");
        expect_success(&analyze_cli(
            dir,
            &["--shard", &format!("{k}/3"), "--out", &out],
        ));
    }
    expect_success(&run_cli(
        dir,
        &["merge", "p1", "p2", "p0", "--out", "merged", "--quiet"],
    ));
    let (got, want) = (
        read_table(&dir.join("merged/block_map.parquet")).unwrap(),
        read_table(&dir.join("whole/block_map.parquet")).unwrap(),
    );
    let names: Vec<&str> = want.columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["model", "layer", "head", "q_lo", "q_hi", "k_lo", "k_hi", "stat", "value"]
    );
    // 2 models x 2 layers x (4 heads + over heads) x cells x 2 stats; T = 16, G = 6:
    // blocks of 2, 3, 3, 2, 3, 3 positions, 21 causal cells (fewer in GPT-OSS's window)
    assert!(want.height() > 0 && want.height() <= 2 * 2 * 5 * 21 * 2);
    assert_eq!(got.height(), want.height());
    for ((name, x), (_, y)) in got.columns.iter().zip(&want.columns) {
        match (x, y) {
            (Column::Float(x), Column::Float(y)) => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    let (p, q) = (p.unwrap(), q.unwrap());
                    assert!(
                        (p - q).abs() <= 1e-12 * q.abs(),
                        "{name} row {i}: {p} vs {q}"
                    );
                }
            }
            (x, y) => assert_eq!(x, y, "{name}"),
        }
    }
}

#[test]
fn a_map_size_of_zero_is_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let args = [
        "analyze",
        &model,
        "--metrics",
        "block_map",
        "--map-size",
        "0",
        "--seq-len",
        "16",
        "--num-seqs",
        "1",
        "--out",
        "o",
    ];
    let err = expect_error(&run_cli(tmp.path(), &args));
    assert!(err.contains("--map-size must be at least 1"), "{err}");
    assert!(!tmp.path().join("o").exists());
}

/// Issue 54: `--map-size` without `block_map` among the metrics did nothing, silently.
#[test]
fn a_map_size_without_block_map_is_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let args = [
        "analyze",
        &model,
        "--metrics",
        "entropy",
        "--map-size",
        "64",
        "--seq-len",
        "16",
        "--num-seqs",
        "1",
        "--out",
        "o",
    ];
    let err = expect_error(&run_cli(tmp.path(), &args));
    assert!(
        err.contains("--map-size sets block_map's side: add block_map"),
        "{err}"
    );
    assert!(!tmp.path().join("o").exists());
}
