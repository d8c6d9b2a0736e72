//! GGUF files written by llama.cpp's own converter (`convert_hf_to_gguf.py` of the llama.cpp
//! vendored in the llama-cpp-python 0.3.36 sdist, `tools/make_converted_gguf_fixtures.py`)
//! from the tiny transformers checkpoints: each gives the checkpoint's float64 logits,
//! attention patterns and metrics, as the checkpoint folder does (issue 65 item 5).

use std::path::PathBuf;

use crate::common::{fixtures, GGUF_MODELS};
use crate::reference_check::check_gguf_file;

fn converted(name: &str) -> PathBuf {
    crate::common::fixtures()
        .join("gguf/converted")
        .join(format!("{name}.gguf"))
}

macro_rules! converted_gguf_tests {
    ($($test:ident: $name:literal,)*) => {$(
        #[test]
        fn $test() {
            check_gguf_file(&converted($name), $name);
        }
    )*};
}

converted_gguf_tests! {
    llama_gqa_as_converted: "llama_gqa",
    qwen2_as_converted: "qwen2",
    mistral_as_converted: "mistral",
    mixtral_as_converted: "mixtral",
    olmo2_as_converted: "olmo2",
    olmo3_as_converted: "olmo3",
    qwen3_as_converted: "qwen3",
    smollm3_as_converted: "smollm3",
    deepseek_v3_as_converted: "deepseek_v3",
    granitemoehybrid_as_converted: "granitemoehybrid",
    lfm2_as_converted: "lfm2",
    falcon_h1_as_converted: "falcon_h1",
    gemma2_like_2b_as_converted: "gemma2_like_2b",
    gemma3_like_1b_as_converted: "gemma3_like_1b",
    phi3_as_converted: "phi3",
    gpt_neox_as_converted: "gpt_neox",
    glm4_moe_as_converted: "glm4_moe",
    qwen3_moe_like_30b_as_converted: "qwen3_moe_like_30b",
    qwen3_next_like_80b_as_converted: "qwen3_next_like_80b",
    gpt2_like_124m_as_converted: "gpt2_like_124m",
    cohere2_as_converted: "cohere2",
}

/// Files that are another model than their checkpoint, where the converter leaves out what
/// llama.cpp then fixes: each gives the float64 reference of the model llama.cpp runs from
/// it (`tools/make_llama_cpp_fixtures.py`, `tools/make_gguf_2026_fixtures.py`), not the
/// checkpoint's.
macro_rules! as_llama_cpp_runs_tests {
    ($($test:ident: $name:literal => $reference:literal,)*) => {$(
        #[test]
        fn $test() {
            check_gguf_file(&converted($name), $reference);
        }
    )*};
}

as_llama_cpp_runs_tests! {
    // chunks of 8192, floor 8192, scale 0.1 (the checkpoint's 8, 4, 0.5 not written)
    llama4_text_as_converted_is_the_model_llama_cpp_runs: "llama4_text" => "llama4_text_gguf",
    // SwiGLU limit 7 (the checkpoint's 1 not written), YaRN's correction range rounded
    gpt_oss_as_converted_is_the_model_llama_cpp_runs: "gpt_oss" => "gpt_oss_gguf",
    // no window (`use_sliding_window` not written; llama.cpp's qwen2 has none)
    qwen2_window_as_converted_is_the_model_llama_cpp_runs: "qwen2_window" => "qwen2_window_gguf",
    // q.k by head_dim^-1/2 below 27B (the checkpoint's `query_pre_attn_scalar` 12 not written)
    gemma2_as_converted_is_the_model_llama_cpp_runs: "gemma2" => "gemma2_gguf",
    // as Gemma 2's, and every 6th layer global (no sliding pattern written)
    gemma3_as_converted_is_the_model_llama_cpp_runs: "gemma3" => "gemma3_gguf",
}

/// What the converter writes that is not the checkpoint's model is refused, naming the
/// file and what does not fit: GPT-2's `feed_forward_length` (4 x n_embd, the checkpoint's
/// `n_inner` ignored) against its tensors.
#[test]
fn converted_files_that_are_not_their_model_are_refused_naming_the_file() {
    for (name, words) in [(
        "gpt2",
        "tensor model.layers.0.mlp.up_proj.weight (GGUF blk.0.ffn_up.weight) has shape [32, 64], expected [32, 128]",
    )] {
        let path = converted(name);
        let err = asa_models::Checkpoint::open(
            &path,
            &candle_core::Device::Cpu,
            candle_core::DType::F32,
        )
        .and_then(asa_models::Checkpoint::validate)
        .err()
        .unwrap_or_else(|| panic!("{name}: opened"))
        .to_string();
        assert!(err.contains(words) && err.contains(&path.display().to_string()), "{name}: {err}");
    }
}

/// GPT-OSS's and Qwen3-MoE's keys as llama.cpp's loaders read them: GPT-OSS's sliding layers
/// every other layer from the first when the file names none, else from
/// `attention.sliding_window_pattern` (flags, or a period whose last layer is full); a RoPE
/// base of the sliding layers' own (`rope.freq_base_swa`, which llama.cpp's gpt-oss reads and
/// this family does not have) refused naming the key; Qwen3-MoE's experts' width required,
/// named; each refusal naming the file.
#[test]
fn gpt_oss_and_qwen3moe_keys_are_read_as_llama_cpp_reads_them() {
    use asa_models::Checkpoint;
    use candle_core::quantized::gguf_file::Value;
    use candle_core::{DType, Device};
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("converted")).unwrap();
    let windowed = |path: &std::path::Path| {
        let ckpt = Checkpoint::open(path, &Device::Cpu, DType::F32).unwrap();
        let window = ckpt.config.sliding_window.unwrap();
        (window.size, window.layers)
    };
    assert_eq!(windowed(&converted("gpt_oss")), (6, vec![0]));
    let pattern = |value: Value| {
        crate::common::gguf_with_metadata(
            "converted/gpt_oss.gguf",
            vec![("gpt-oss.attention.sliding_window_pattern", value)],
            tmp.path(),
        )
    };
    let flags = Value::Array(vec![Value::Bool(false), Value::Bool(true)]);
    assert_eq!(windowed(&pattern(flags)), (6, vec![1]));
    assert_eq!(windowed(&pattern(Value::U32(0))), (6, vec![0, 1]));
    let path = crate::common::gguf_with_metadata(
        "converted/gpt_oss.gguf",
        vec![("gpt-oss.rope.freq_base_swa", Value::F32(10000.0))],
        tmp.path(),
    );
    let err = crate::common::open_error(&path);
    assert!(err.contains(&path.display().to_string()), "{err}");
    let problem =
        crate::common::expect_problem(&path, "unimplemented", "gpt-oss.rope.freq_base_swa");
    assert_eq!(
        problem.keys(),
        ["gpt-oss.rope.freq_base_swa", "gpt-oss.rope.freq_base"]
    );
    // the converter's file without the experts' width
    let path = crate::common::gguf_without(
        "converted/qwen3_moe_like_30b.gguf",
        "qwen3moe.expert_feed_forward_length",
        tmp.path(),
    );
    let err = crate::common::open_error(&path);
    assert!(err.contains(&path.display().to_string()), "{err}");
    crate::common::expect_problem(&path, "missing_key", "qwen3moe.expert_feed_forward_length");
}

#[test]
fn gguf_embedding_and_head_rows_are_the_rows_of_the_whole_matrix() {
    // issue 41: rows of a GGUF matrix read alone (only their quantized blocks) equal the
    // same rows of the matrix dequantized whole, at the start, middle and end
    for name in GGUF_MODELS {
        let path = fixtures().join("gguf").join(format!("{name}.gguf"));
        let (gguf, _) = asa_models::config::open_gguf(&path).unwrap();
        for tensor in ["model.embed_tokens.weight", "lm_head.weight"] {
            if !gguf.contains(tensor) {
                continue;
            }
            assert!(gguf.reads_rows(tensor), "{name}: {tensor}");
            let whole = gguf.load(tensor).unwrap();
            let rows = whole.dim(0).unwrap();
            for range in [0..1, 3..17, rows - 5..rows, 0..rows] {
                let part = gguf.load_rows(tensor, range.clone()).unwrap().unwrap();
                let want = whole.narrow(0, range.start, range.len()).unwrap();
                let (a, b) = (
                    part.to_vec2::<f32>().unwrap(),
                    want.to_vec2::<f32>().unwrap(),
                );
                assert_eq!(a, b, "{name}: {tensor} rows {range:?}");
            }
            assert!(
                gguf.load_rows(tensor, rows - 1..rows + 1).is_err(),
                "{name}"
            );
        }
        // a transposed GPT-2 projection is not read by rows
        if name == "gpt2" {
            assert!(!gguf.reads_rows("model.layers.0.mlp.up_proj.weight"));
        }
    }
}

/// A Cohere2 file without `cohere2.logit_scale` (which llama.cpp requires too) is refused
/// naming the key; `attention.sliding_window_pattern`, where a file has it, sets which layers
/// are sliding (and RoPE), the others global NoPE layers, as llama.cpp reads it.
#[test]
fn cohere2_files_need_their_logit_scale_and_follow_their_window_pattern() {
    use candle_core::quantized::gguf_file::Value;
    use candle_core::{DType, Device};
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("converted")).unwrap();
    let name = "converted/cohere2.gguf";
    let without = crate::common::gguf_without(name, "cohere2.logit_scale", tmp.path());
    let problem = crate::common::open_problem(&without);
    assert_eq!(
        (problem.name(), problem.key()),
        ("missing_key", Some("cohere2.logit_scale")),
        "{problem}"
    );
    let flags = [true, false, true, false].map(Value::Bool).to_vec();
    let pattern = vec![(
        "cohere2.attention.sliding_window_pattern",
        Value::Array(flags),
    )];
    let path = crate::common::gguf_with_metadata(name, pattern, tmp.path());
    let checkpoint = asa_models::Checkpoint::open(&path, &Device::Cpu, DType::F32).unwrap();
    let config = &checkpoint.config;
    assert_eq!(config.sliding_window.as_ref().unwrap().layers, [0, 2]);
    assert_eq!(config.attention_layers.no_rope, [1, 3]);
}
