//! Bad GGUF input on the command line (SPEC section 7): one line naming the file, exit 2,
//! nothing written, and the problem the library refuses it with. The GGUF files' numbers
//! are asa-analysis' `tests/library/real_model.rs`.

use crate::common;

use std::path::Path;

use asa_models::Checkpoint;
use candle_core::{DType, Device};
use common::*;
use serde_json::Value;

fn gguf_fixture(name: &str) -> std::path::PathBuf {
    fixtures().join("gguf").join(name)
}

#[test]
fn inspect_reports_gguf_tensor_types() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_cli(
        tmp.path(),
        &[
            "inspect",
            "--json",
            gguf_fixture("llama_gqa.gguf").to_str().unwrap(),
        ],
    );
    expect_success(&out);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["format"], "gguf");
    assert_eq!(json["gguf_tensor_types"]["F32"], 21, "{json}");
    assert_eq!(json["architecture"], "llama");
}

// ---------------------------------------------------------------------------------------
// Bad GGUF input (SPEC section 7)
// ---------------------------------------------------------------------------------------

fn inspect_error(path: &Path) -> String {
    let dir = path.parent().unwrap();
    let err = expect_error(&run_cli(dir, &["inspect", path.to_str().unwrap()]));
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "error does not name {name}: {err}");
    err
}

#[test]
fn truncated_gguf_is_one_line_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(gguf_fixture("llama_gqa.gguf")).unwrap();
    // tensor data cut short
    let path = tmp.path().join("cut.gguf");
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let err = inspect_error(&path);
    assert!(err.contains("truncated GGUF file"), "{err}");
    assert_eq!(open_problem(&path).name(), "damaged");
    // header cut short
    let path = tmp.path().join("header.gguf");
    std::fs::write(&path, &bytes[..200]).unwrap();
    let err = inspect_error(&path);
    assert!(err.contains("truncated"), "{err}");
    // not a GGUF at all
    let path = tmp.path().join("noise.gguf");
    std::fs::write(
        &path,
        b"this is not a model, just some text of no particular format",
    )
    .unwrap();
    let err = inspect_error(&path);
    assert!(err.contains("not a GGUF file"), "{err}");
}

#[test]
fn gguf_metadata_that_would_give_nan_is_refused() {
    // rope.freq_base 0 made every metric NaN; a NaN rms epsilon became JSON null and so
    // silently the default 1e-6 (both F32 values, patched in a copy of the qwen2 fixture)
    let tmp = tempfile::tempdir().unwrap();
    for (key, value, problem) in [
        (
            "qwen2.rope.freq_base",
            0f32,
            // the rule of the config.json key it becomes, the file's key named beside it
            asa_core::CheckpointProblem::out_of_range("rope_theta", 0, "a finite number > 0"),
        ),
        (
            "qwen2.attention.layer_norm_rms_epsilon",
            f32::NAN,
            asa_core::CheckpointProblem::out_of_range(
                "qwen2.attention.layer_norm_rms_epsilon",
                f32::NAN,
                "a finite number",
            ),
        ),
    ] {
        let path = common::gguf_with_f32("qwen2.gguf", key, value, tmp.path());
        let err = inspect_error(&path);
        assert!(err.contains(key), "{err}");
        assert_eq!(open_problem(&path), problem);
    }
}

/// The setting, value and supported values the bad fixture `name` is refused with, after
/// the command line refused it in one line naming the file.
fn unsupported(name: &str) -> (String, String, String) {
    let path = gguf_fixture(name);
    inspect_error(&path);
    match open_problem(&path) {
        asa_core::CheckpointProblem::Unsupported {
            key,
            value,
            supported,
        } => (key, value, supported),
        other => panic!("not an unsupported setting: {other:?}"),
    }
}

#[test]
fn unknown_gguf_architecture_is_named() {
    let (key, value, supported) = unsupported("bad/unknown_arch.gguf");
    assert_eq!(
        (key.as_str(), value.as_str()),
        ("general.architecture", "mamba")
    );
    assert!(
        supported.contains(
            "deepseek2, falcon-h1, gemma2, gemma3, glm4moe, gpt-oss, gpt2, gptneox, granitehybrid, lfm2, llama, llama4, olmo2, phi3, qwen2, qwen3, qwen3moe, qwen3next, smollm3"
        ),
        "{supported}"
    );
}

#[test]
fn unknown_gguf_tensor_type_is_named() {
    let (key, value, supported) = unsupported("bad/unknown_type.gguf");
    assert_eq!(
        (key.as_str(), value.as_str()),
        ("tensor type", "16 (IQ2_XXS)")
    );
    assert!(supported.contains("Q4_K"), "{supported}");
}

#[test]
fn gguf_without_tokenizer_cannot_tokenize_text() {
    // the library: the error names the file and points to --tokenizer
    let path = gguf_fixture("llama_gqa.gguf");
    let ckpt = Checkpoint::open(&path, &Device::Cpu, DType::F32).unwrap();
    assert!(ckpt.tokenizer_json().is_none());
    let err = ckpt.tokenizer().err().unwrap();
    assert_eq!(err.path(), Some(path.as_path()));
    let Some(asa_core::CheckpointProblem::MissingKey { key, detail }) = err.problem() else {
        panic!("not a missing key: {err}")
    };
    assert_eq!(key, "tokenizer.ggml.tokens");
    assert!(
        detail.contains("no tokenizer") && detail.contains("--tokenizer"),
        "{detail}"
    );
    // the command line: text corpus, exit 2, one line, nothing written
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("text.txt"),
        "Some text to tokenize. ".repeat(50),
    )
    .unwrap();
    let out = run_cli(
        tmp.path(),
        &[
            "analyze",
            path.to_str().unwrap(),
            "--corpus",
            "text.txt",
            "--seq-len",
            "8",
            "--num-seqs",
            "1",
            "--out",
            "out",
            "--quiet",
        ],
    );
    let err = expect_error(&out);
    assert!(
        err.contains("llama_gqa.gguf") && err.contains("tokenizer"),
        "{err}"
    );
    let out_dir = tmp.path().join("out");
    let left: Vec<_> = std::fs::read_dir(&out_dir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "partial output written: {left:?}");
}
