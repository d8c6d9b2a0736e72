//! The fixture checkpoints and their float64 references (`tools/make_*fixtures.py` wrote
//! them into the repository's `tests/fixtures/`): shared by asa-models' tests and the
//! repository's `tests/it` (which includes this file), one list of fixtures for both.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

/// The repository's `tests/fixtures`, found above the crate being tested.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|dir| dir.join("tests/fixtures"))
        .find(|dir| dir.join("models").is_dir())
        .expect("the repository's tests/fixtures")
}

/// The GGUF fixtures that are whole models (the tokenizer-only file left out).
pub const GGUF_MODELS: [&str; 9] = [
    "llama_gqa",
    "qwen2",
    "qwen3",
    "olmo2",
    "phi3",
    "gpt2",
    "gpt_neox",
    "gemma2_like_2b",
    "gemma3_like_1b",
];

/// Every model fixture with float64 references (`tools/make_fixtures.py` and the scripts beside it).
pub const MODEL_FIXTURES: [&str; 41] = [
    "llama_gqa",
    "qwen2",
    "mistral",
    "gpt_neox",
    "olmo2",
    "phi3",
    "gpt2",
    "mixtral",
    "qwen2_window",
    "qwen3_moe",
    "rope_linear",
    "rope_dynamic",
    "rope_yarn",
    "gemma2",
    "phi3_longrope",
    "gemma3",
    "gpt_oss",
    "gemma2_like_2b",
    "gemma3_like_1b",
    "off_by_one",
    "sink",
    "gated",
    "affine_scaled",
    "affine_scaled_sigmoid_visible",
    "affine_scaled_gated",
    "qwen3",
    "scale_invariant",
    "logn",
    "smollm3",
    "olmo3",
    "llama4_text",
    "glm4_moe",
    "deepseek_v3",
    "lfm2",
    "qwen3_next",
    "granitemoehybrid",
    "falcon_h1",
    "qwen3_moe_like_30b",
    "qwen3_next_like_80b",
    "gpt2_like_124m",
    "cohere2",
];

/// How much noisier transformers' own float32 forward of fixture `name` is than a plain
/// fixture's (logits within 1e-5 of float64): Qwen3-Next's float32 logits are 1.1e-5 to
/// 1.3e-5 from float64 (two Gated DeltaNet layers, zero-centred norms), Falcon-H1's 7.6e-6
/// (Mamba-2 beside attention, ten multipliers up to 1.9), as `tools/make_hybrid_fixtures.py`
/// and `tools/make_mamba2_fixtures.py` print; Gemma 2's soft-capped logits at q.k scale
/// head_dim^-1/2 (`gemma2_gguf`, the converted file as llama.cpp runs it) 7.8e-6 in
/// transformers' float32, 7.1e-6 in llama.cpp's, 1.2e-5 here. The f32 bounds on single values (logits,
/// weights, q, k, block-map cells) are widened by this factor for them; averaged metrics are
/// not.
pub fn f32_noise(name: &str) -> f64 {
    match name {
        "qwen3_next" | "qwen3_next_like_80b" => 5.0,
        "falcon_h1" | "gemma2_gguf" => 2.0,
        _ => 1.0,
    }
}

pub fn model_dir(name: &str) -> PathBuf {
    fixtures().join("models").join(name)
}

/// The float64 reference tensors of a fixture.
pub fn reference(name: &str) -> HashMap<String, Tensor> {
    let path = fixtures()
        .join("reference")
        .join(format!("{name}.safetensors"));
    candle_core::safetensors::load(&path, &Device::Cpu).expect("reference tensors load")
}

/// Max |a - b| over two tensors of the same shape (compared in f64).
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    let a = a
        .to_dtype(candle_core::DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let b = b
        .to_dtype(candle_core::DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    a.iter()
        .zip(&b)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() })
        .fold(0.0, f64::max)
}

/// The layers of a reference (`layers.{l}.pattern` for l = 0, 1, ...): 2 for most fixtures.
pub fn reference_layers(refs: &HashMap<String, Tensor>) -> usize {
    (0..)
        .take_while(|l| refs.contains_key(&format!("layers.{l}.pattern")))
        .count()
}
