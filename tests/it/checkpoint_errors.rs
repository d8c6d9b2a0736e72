//! Bad checkpoints (SPEC section 7): one line naming the file and the problem, exit 2.

use crate::common;

use std::fs;

use asa_core::checkpoint_problem::CheckpointProblem;
use common::*;

#[test]
fn missing_config_json() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    fs::remove_file(tmp.path().join("config.json")).unwrap();
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(err.contains("config.json is missing"), "{err}");
    let CheckpointProblem::MissingFile { file, .. } = open_problem(tmp.path()) else {
        panic!("not a missing file")
    };
    assert_eq!(file, "config.json");
}

#[test]
fn unknown_model_type_lists_supported_types() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    edit_config(tmp.path(), |c| c["model_type"] = "mamba".into());
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(err.contains("config.json"), "{err}");
    let CheckpointProblem::Unsupported {
        key,
        value,
        supported,
    } = open_problem(tmp.path())
    else {
        panic!("not an unsupported setting")
    };
    assert_eq!((key.as_str(), value.as_str()), ("model_type", "mamba"));
    assert!(
        supported.contains(
            "gpt2, gpt_neox, gpt_oss, granitemoehybrid, lfm2, llama, llama4_text, mistral, mixtral, olmo2, olmo3, phi3, qwen2, qwen3"
        ),
        "{supported}"
    );
}

#[test]
fn unknown_variant_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    edit_config(tmp.path(), |c| c["attention_variant"] = "magic".into());
    expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    let problem = open_problem(tmp.path());
    assert_eq!(problem.key(), Some("attention_variant"));
    assert!(
        matches!(&problem, CheckpointProblem::Unsupported { value, supported, .. }
            if value == "magic" && supported.contains("affine_scaled")),
        "{problem:?}"
    );
}

#[test]
fn missing_tensor_is_named() {
    // the sink fixture declared as affine_scaled lacks alpha_proj
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("sink", tmp.path());
    edit_config(tmp.path(), |c| {
        c["attention_variant"] = "affine_scaled".into()
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.layers.0.self_attn.alpha_proj.weight is missing"),
        "{err}"
    );
    let tensor = "model.layers.0.self_attn.alpha_proj.weight";
    expect_problem(tmp.path(), "missing_tensor", tensor);
}

#[test]
fn wrong_shape_names_both_shapes() {
    // claiming 8 heads of dim 4 makes k_proj [16, 32] expected where [16, 32] is stored... so
    // change intermediate_size instead: gate_proj is stored [64, 32]
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    edit_config(tmp.path(), |c| c["intermediate_size"] = 48.into());
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.layers.0.mlp.gate_proj.weight has shape [64, 32], expected [48, 32]")
            && err.contains("model.safetensors"),
        "{err}"
    );
}

/// Issue 66 item 5: a missing tensor and a wrong shape are typed problems, the message made
/// from their fields: a caller matches the variant and reads the tensor and the shapes
/// (the CLI's lines above are the same words).
#[test]
fn missing_tensors_and_wrong_shapes_are_typed_problems() {
    use asa_core::error::{ErrorKind, InputKind};
    let load = |dir: &std::path::Path| {
        asa_models::Checkpoint::open(dir, &candle_core::Device::Cpu, candle_core::DType::F32)
            .and_then(asa_models::Checkpoint::validate)
            .err()
            .expect("refused")
    };
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("sink", tmp.path());
    edit_config(tmp.path(), |c| {
        c["attention_variant"] = "affine_scaled".into()
    });
    let err = load(tmp.path());
    assert_eq!(
        err.problem(),
        Some(&CheckpointProblem::MissingTensor {
            tensor: "model.layers.0.self_attn.alpha_proj.weight".into()
        })
    );
    assert_eq!(err.kind(), ErrorKind::Input(InputKind::Checkpoint));
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    edit_config(tmp.path(), |c| c["intermediate_size"] = 48.into());
    let err = load(tmp.path());
    assert_eq!(
        err.problem(),
        Some(&CheckpointProblem::Shape {
            tensor: "model.layers.0.mlp.gate_proj.weight".into(),
            expected: vec![48, 32],
            got: vec![64, 32],
        })
    );
    assert_eq!(
        err.path().unwrap().file_name().unwrap(),
        "model.safetensors"
    );
    // GGUF: the tensor as the loader names it, with the file's own name
    let path = fixtures().join("gguf/converted/gpt2.gguf");
    let err = load(&path);
    assert!(
        matches!(err.problem(), Some(CheckpointProblem::Shape { tensor, expected, got })
            if tensor == "model.layers.0.mlp.up_proj.weight (GGUF blk.0.ffn_up.weight)"
                && expected == &[32, 128] && got == &[32, 64]),
        "{err}"
    );
    // a caller's note keeps the type (logn's scale)
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    edit_config(tmp.path(), |c| c["attention_variant"] = "logn".into());
    let err = load(tmp.path());
    assert_eq!(
        err.problem().and_then(CheckpointProblem::tensor),
        Some("model.layers.0.self_attn.logn_scale")
    );
}

#[test]
fn truncated_safetensors() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    let path = tmp.path().join("model.safetensors");
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.safetensors") && err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn missing_shard_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama_gqa", tmp.path());
    fs::remove_file(tmp.path().join("model-00002-of-00003.safetensors")).unwrap();
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.safetensors.index.json: ")
            && err.contains("model-00002-of-00003.safetensors is missing"),
        "{err}"
    );
    let CheckpointProblem::MissingFile { file, .. } = open_problem(tmp.path()) else {
        panic!("not a missing file")
    };
    assert!(file.ends_with("model-00002-of-00003.safetensors"), "{file}");
}

#[test]
fn unimplemented_rope_type_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama_gqa", tmp.path());
    edit_config(tmp.path(), |c| {
        c["rope_parameters"]["rope_type"] = "longrope".into()
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("config.json") && err.contains("longrope"),
        "{err}"
    );
    // longrope is read: the llama3 fixture has none of its factors
    let problem = expect_problem(tmp.path(), "missing_key", "rope_parameters.long_factor");
    assert!(
        problem
            .to_string()
            .contains("longrope rope scaling needs it"),
        "{problem}"
    );
}

#[test]
fn inspect_reports_variant_detection_and_delta_params() {
    let out = run_cli(&fixtures(), &["inspect", "models/sink"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("sink (weights: model.layers.0.self_attn.sinks)"),
        "{text}"
    );
    // 2 layers x 4 heads of sink logits
    assert!(text.contains("delta params   8 "), "{text}");
    let out = run_cli(
        &fixtures(),
        &["inspect", "models/affine_scaled_gated", "--json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // per layer: alpha_proj 4 x 32 + bias 4, gate rows 4 x 8 x 32 = 132 + 1024; x 2 layers
    assert_eq!(json["delta_parameters"], 2 * (132 + 1024));
}

#[test]
fn config_values_that_give_nan_metrics_or_bad_ids_are_errors() {
    use serde_json::json;
    // (the config edit, the problem, the key it names)
    let cases: Vec<(&str, serde_json::Value, &str, &str)> = vec![
        // rms_norm_eps < 0 made every norm NaN (exit 0 with NaN tables)
        ("rms_norm_eps", json!(-1.0), "out_of_range", "rms_norm_eps"),
        // a BOS id past the vocabulary was reported without naming config.json
        (
            "bos_token_id",
            json!(100_000),
            "out_of_range",
            "bos_token_id",
        ),
        (
            "eos_token_id",
            json!([100_000, 1]),
            "out_of_range",
            "eos_token_id",
        ),
        // 2^32 + 1 used to wrap around to id 1; -1 and "1" were dropped without a word
        (
            "bos_token_id",
            json!(4_294_967_297u64),
            "wrong_type",
            "bos_token_id",
        ),
        ("bos_token_id", json!(-1), "wrong_type", "bos_token_id"),
        ("eos_token_id", json!("1"), "wrong_type", "eos_token_id"),
        // sizes of 0 gave NaN tables (and layer numbers that wrapped around)
        (
            "num_hidden_layers",
            json!(0),
            "out_of_range",
            "num_hidden_layers",
        ),
        (
            "intermediate_size",
            json!(0),
            "out_of_range",
            "intermediate_size",
        ),
        ("head_dim", json!(0), "out_of_range", "head_dim"),
        (
            "num_attention_heads",
            json!(0),
            "out_of_range",
            "num_attention_heads",
        ),
        // RoPE values that gave NaN everywhere, or were ignored
        (
            "rope_parameters/rope_theta",
            json!(0.0),
            "out_of_range",
            "rope_theta",
        ),
        (
            "rope_parameters/rope_theta",
            json!(-10000.0),
            "out_of_range",
            "rope_theta",
        ),
        (
            "rope_parameters/rope_theta",
            json!("500000"),
            "wrong_type",
            "rope_parameters.rope_theta",
        ),
        (
            "rope_parameters/factor",
            json!(0.0),
            "out_of_range",
            "rope_parameters.factor",
        ),
        (
            "rope_parameters/factor",
            json!("8"),
            "wrong_type",
            "rope_parameters.factor",
        ),
        (
            "rope_parameters/rope_type",
            json!(3),
            "wrong_type",
            "rope_parameters.rope_type",
        ),
        (
            "partial_rotary_factor",
            json!(0.1),
            "inconsistent",
            "partial_rotary_factor",
        ),
    ];
    for (field, value, problem, key) in cases {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture("llama_gqa", tmp.path());
        edit_config(tmp.path(), |c| match field.split_once('/') {
            Some((outer, inner)) => c[outer][inner] = value.clone(),
            None => c[field] = value.clone(),
        });
        for args in [&["inspect", "."][..], &["entropy", ".", "--out", "res"][..]] {
            let err = expect_error(&run_cli(tmp.path(), args));
            assert!(
                err.contains("config.json: ") && err.contains(key),
                "{args:?}: {err}"
            );
            assert!(!tmp.path().join("res").exists());
        }
        expect_problem(tmp.path(), problem, key);
    }
    // the values are said as they were given
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama_gqa", tmp.path());
    edit_config(tmp.path(), |c| c["bos_token_id"] = json!(-1));
    assert_eq!(
        open_problem(tmp.path()),
        CheckpointProblem::wrong_type("bos_token_id", "a token id (an integer from 0)", -1)
    );
}

#[test]
fn a_tensor_in_two_shards_is_an_error_not_a_silent_pick() {
    // a stale file listed in the index held every tensor again; whichever came last won
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama_gqa", tmp.path());
    fs::copy(
        model_dir("affine_scaled").join("model.safetensors"),
        tmp.path().join("model-00000-stale.safetensors"),
    )
    .unwrap();
    let index = tmp.path().join("model.safetensors.index.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&index).unwrap()).unwrap();
    json["weight_map"]["model.norm.weight"] = "model-00000-stale.safetensors".into();
    fs::write(&index, json.to_string()).unwrap();
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.safetensors.index.json: tensor ")
            && err.contains("is stored twice, in ")
            && err.contains("model-00000-stale.safetensors"),
        "{err}"
    );
    let problem = expect_problem(tmp.path(), "tensor_data", "model.norm.weight");
    assert!(
        problem
            .to_string()
            .contains("model-00000-stale.safetensors"),
        "{problem}"
    );
}

#[test]
fn a_missing_tensor_of_a_sharded_checkpoint_names_the_index() {
    // it named whichever shard came first
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama_gqa", tmp.path());
    edit_config(tmp.path(), |c| c["attention_variant"] = "sink".into());
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains(
            "model.safetensors.index.json: tensor model.layers.0.self_attn.sinks is missing"
        ),
        "{err}"
    );
    expect_problem(
        tmp.path(),
        "missing_tensor",
        "model.layers.0.self_attn.sinks",
    );
}

#[test]
fn integer_weights_are_refused_not_cast() {
    // an I32 q_proj (same bytes as F32) was cast to float and gave qk_mean -8e7 with exit 0
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("affine_scaled", tmp.path());
    let path = tmp.path().join("model.safetensors");
    let mut bytes = fs::read(&path).unwrap();
    let key = br#""model.layers.0.self_attn.q_proj.weight":{"dtype":"F32""#;
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    let dtype_at = at + key.len() - 4;
    bytes[dtype_at..dtype_at + 3].copy_from_slice(b"I32");
    fs::write(&path, &bytes).unwrap();
    for args in [&["inspect", "."][..], &["entropy", ".", "--out", "res"][..]] {
        let err = expect_error(&run_cli(tmp.path(), args));
        assert!(err.contains("model.safetensors: tensor "), "{err}");
        assert!(!tmp.path().join("res").exists());
    }
    let tensor = "model.layers.0.self_attn.q_proj.weight";
    let problem = expect_problem(tmp.path(), "tensor_data", tensor);
    assert!(problem.to_string().contains("has dtype I32"), "{problem}");
}

#[test]
fn weights_the_declared_variant_leaves_unused_are_noted() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("affine_scaled", tmp.path());
    edit_config(tmp.path(), |c| c["attention_variant"] = "softmax".into());
    let stdout = expect_success(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        stdout.contains(
            "config.json declares softmax; it does not use model.layers.0.self_attn.alpha_proj.weight (the weights point to affine_scaled)"
        ),
        "{stdout}"
    );
    // gated over Affine-Scaled + gated weights reads the gate rows: only alpha_proj is unused
    let both = tempfile::tempdir().unwrap();
    copy_fixture("affine_scaled_gated", both.path());
    edit_config(both.path(), |c| c["attention_variant"] = "gated".into());
    let stdout = expect_success(&run_cli(both.path(), &["inspect", "."]));
    assert!(
        stdout.contains(
            "declares gated; it does not use model.layers.0.self_attn.alpha_proj.weight ("
        ) && !stdout.contains("gate rows"),
        "{stdout}"
    );
    // analysing them is refused (issue 24: the weights would change nothing without a
    // word) unless asked for, and then noted
    let args = ["entropy", ".", "--seq-len", "16", "--num-seqs", "1"];
    let err = expect_error(&run_cli(tmp.path(), &args));
    assert!(err.contains("not used by the config"), "{err}");
    let CheckpointProblem::UnusedTensors { tensors } = open_problem(tmp.path()) else {
        panic!("not unused tensors")
    };
    assert!(
        tensors.contains(&"model.layers.0.self_attn.alpha_proj.weight".to_string())
            && tensors.iter().all(|t| t.contains(".self_attn.alpha_")),
        "{tensors:?}"
    );
    let mut ignoring = args.to_vec();
    ignoring.push("--ignore-unused-weights");
    let out = run_cli(tmp.path(), &ignoring);
    expect_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("note: ") && stderr.contains("config.json declares softmax"),
        "{stderr}"
    );
}

// ---- issue 10: scale_invariant, logn, p-RoPE, Qwen3 ----

#[test]
fn scale_invariant_tau_must_be_positive() {
    for tau in [0.0, -2.5] {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture("scale_invariant", tmp.path());
        edit_config(tmp.path(), |c| c["scale_invariant"]["tau"] = tau.into());
        let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
        assert!(err.contains("config.json: scale_invariant.tau"), "{err}");
        assert_eq!(
            open_problem(tmp.path()),
            CheckpointProblem::out_of_range("scale_invariant.tau", tau, "> 0")
        );
    }
}

#[test]
fn bad_p_rope_parameters_name_the_value() {
    // the scale_invariant fixture has head_dim 16: p = 0.1 rotates floor(0.8) = 0 pairs
    for p in [1.5, 0.0] {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture("scale_invariant", tmp.path());
        edit_config(tmp.path(), |c| c["rope_parameters"]["p"] = p.into());
        let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
        assert!(err.contains("config.json: rope_parameters.p"), "{err}");
        assert_eq!(
            open_problem(tmp.path()),
            CheckpointProblem::out_of_range("rope_parameters.p", p, "in (0, 1]")
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("scale_invariant", tmp.path());
    edit_config(tmp.path(), |c| c["rope_parameters"]["p"] = 0.1.into());
    expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    let problem = expect_problem(tmp.path(), "inconsistent", "head_dim");
    assert_eq!(problem.keys(), ["rope_parameters.p", "head_dim"]);
    assert!(
        problem.to_string().contains("n = floor(0.1 * 16 / 2) = 0"),
        "{problem}"
    );
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("scale_invariant", tmp.path());
    edit_config(tmp.path(), |c| {
        c["rope_parameters"]["spacing"] = "linear".into()
    });
    expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert_eq!(
        open_problem(tmp.path()),
        CheckpointProblem::unsupported("rope_parameters.spacing", "linear", "rope, log")
    );
}

#[test]
fn unimplemented_rope_types_are_errors() {
    for kind in ["proportional", "mrope", "su"] {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture("qwen3", tmp.path());
        edit_config(tmp.path(), |c| {
            c["rope_parameters"]["rope_type"] = kind.into();
            c["rope_parameters"]["factor"] = 2.0.into();
        });
        let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
        assert!(err.contains("config.json: rope_type"), "{err}");
        let problem = expect_problem(tmp.path(), "unsupported", "rope_type");
        assert!(matches!(&problem, CheckpointProblem::Unsupported { value, .. } if value == kind));
    }
}

#[test]
fn qwen3_without_q_norm_is_a_missing_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen3", tmp.path());
    let path = tmp.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    tensors.remove("model.layers.0.self_attn.q_norm.weight");
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.safetensors")
            && err.contains("tensor model.layers.0.self_attn.q_norm.weight is missing"),
        "{err}"
    );
    expect_problem(
        tmp.path(),
        "missing_tensor",
        "model.layers.0.self_attn.q_norm.weight",
    );
}

#[test]
fn logn_without_scale_names_both_sources() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2", tmp.path());
    edit_config(tmp.path(), |c| c["attention_variant"] = "logn".into());
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "."]));
    assert!(
        err.contains("model.layers.0.self_attn.logn_scale is missing")
            && err.contains("\"logn\": {\"scale\": s} in config.json"),
        "{err}"
    );
    expect_problem(
        tmp.path(),
        "missing_tensor",
        "model.layers.0.self_attn.logn_scale",
    );
}

#[test]
fn inspect_names_qwen3_p_rope_and_logn_detection() {
    let out = run_cli(&fixtures(), &["inspect", "models/scale_invariant"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("architecture   qwen3"), "{text}");
    assert!(
        text.contains("scale_invariant (config.json attention_variant)"),
        "{text}"
    );
    // p-RoPE in words (issue 22): how many frequency pairs rotate, not partial_rotary_factor
    assert!(
        text.contains(
            "rope           p-RoPE, p = 0.5, log spacing, 4 of 8 pairs rotate, theta 1024"
        ),
        "{text}"
    );
    assert!(!text.contains("partial_rotary_factor"), "{text}");

    let out = run_cli(&fixtures(), &["inspect", "models/qwen3", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["architecture"], "qwen3");
    assert_eq!(json["head_dim"], 12); // hidden 32 / 4 heads would be 8

    // HF partial_rotary_factor: the first half of each head's dims rotate, frequencies kept
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen3", tmp.path());
    edit_config(tmp.path(), |c| c["partial_rotary_factor"] = 0.5.into());
    let out = run_cli(tmp.path(), &["inspect", "."]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("RoPE, theta 10000, partial_rotary_factor 0.5 (6 of 12 dims rotate)"),
        "{text}"
    );

    // logn detected from its weights when config.json does not name it
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("logn", tmp.path());
    edit_config(tmp.path(), |c| {
        c.as_object_mut().unwrap().remove("attention_variant");
    });
    let out = run_cli(tmp.path(), &["inspect", "."]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("logn (weights: model.layers.0.self_attn.logn_scale)"),
        "{text}"
    );
}

/// Issue 22: `inspect` is text for people: no Rust Debug formatting (`Name { field: ... }`)
/// in the output of any model fixture; `--json` keeps the RoPE settings as values.
#[test]
fn inspect_prints_no_rust_debug_text() {
    let debug = regex::Regex::new(r"\w+ \{ \w+:").unwrap();
    let models = fs::read_dir(fixtures().join("models")).unwrap();
    for entry in models {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = expect_success(&run_cli(&fixtures(), &["inspect", path.to_str().unwrap()]));
        assert!(!debug.is_match(&text), "{name}:\n{text}");
        assert!(text.contains("rope           "), "{name}:\n{text}");
    }
    let out = run_cli(
        &fixtures(),
        &["inspect", "models/scale_invariant", "--json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rope = &json["rope"];
    assert_eq!(rope["theta"], 1024.0);
    assert_eq!(rope["scaling"]["rope_type"], "p_rope");
    assert_eq!(rope["scaling"]["spacing"], "log");
    assert_eq!(rope["scaling"]["rotating_pairs"], 4);
}

#[test]
fn logn_delta_params_count_the_stored_scales() {
    let out = run_cli(&fixtures(), &["inspect", "models/logn", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 2 layers x 4 heads of logn_scale
    assert_eq!(json["delta_parameters"], 8);
}

#[test]
fn a_diverged_checkpoint_with_nan_weights_is_analysed_not_a_crash() {
    // a training run that blew up: NaN in one q_proj weight makes every later value NaN;
    // refused by default (tests/it/reliability.rs), analysed with --allow-nonfinite: the run
    // must finish, report NaN and still draw the figures (no panic, exit 0)
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    copy_fixture("llama_gqa", &ckpt);
    let name = "model.layers.0.self_attn.q_proj.weight";
    let index: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(ckpt.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let shard = ckpt.join(index["weight_map"][name].as_str().unwrap());
    let mut tensors = candle_core::safetensors::load(&shard, &candle_core::Device::Cpu).unwrap();
    let w = &tensors[name];
    let mut values = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[0] = f32::NAN;
    let poisoned = candle_core::Tensor::from_vec(values, w.shape(), w.device()).unwrap();
    tensors.insert(name.to_string(), poisoned);
    candle_core::safetensors::save(&tensors, &shard).unwrap();

    let out = run_cli(
        tmp.path(),
        &[
            "analyze",
            "ckpt",
            "--seq-len",
            "16",
            "--num-seqs",
            "2",
            "--out",
            "res",
            "--quiet",
            "--allow-nonfinite",
        ],
    );
    expect_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("nan"), "{stdout}");
    let figs = run_cli(tmp.path(), &["figures", "res", "--out", "figs", "--quiet"]);
    expect_success(&figs);
}

/// Issue 25: a run longer than a sliding window runs with the window (the metrics tests
/// compare it with transformers' own sliding mask) and `inspect` says so; Affine-Scaled
/// attention with a window (whose beta has no defined N) and a layer type the loader does
/// not know are refused naming them, never run as full attention.
#[test]
fn sliding_windows_run_and_what_they_cannot_be_combined_with_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("mistral", &tmp.path().join("m"));
    let args = [
        "analyze",
        "m",
        "--seq-len",
        "32",
        "--num-seqs",
        "1",
        "--quiet",
        "--out",
        "res",
    ];
    expect_success(&run_cli(tmp.path(), &args));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "m"]));
    assert!(
        inspect.contains("sliding window of 20 keys on layers 1-2"),
        "{inspect}"
    );
    edit_config(&tmp.path().join("m"), |c| {
        c["attention_variant"] = serde_json::json!("affine_scaled")
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "m"]));
    assert!(
        err.contains(
            "affine_scaled attention with a sliding window (layers 1-2) is not implemented"
        ),
        "{err}"
    );
    let problem = expect_problem(&tmp.path().join("m"), "unimplemented", "sliding_window");
    assert_eq!(problem.keys(), ["attention_variant", "sliding_window"]);
    edit_config(&tmp.path().join("m"), |c| {
        c.as_object_mut().unwrap().remove("attention_variant");
    });
    edit_config(&tmp.path().join("m"), |c| {
        c["layer_types"] = serde_json::json!(["sliding_attention", "chunked_attention"])
    });
    expect_error(&run_cli(tmp.path(), &["inspect", "m"]));
    assert!(matches!(
        open_problem(&tmp.path().join("m")),
        CheckpointProblem::Unsupported { key, value, .. }
            if key == "layer_types" && value == "chunked_attention"
    ));
}

/// Every way a checkpoint can be broken is an error of kind `Input(Checkpoint)` naming the
/// file at fault, whether our own check refused it or a library (serde_json, safetensors,
/// the GGUF reader) did: the kind and the path are fields, not words to search for.
#[test]
fn broken_checkpoints_are_checkpoint_errors_naming_the_file() {
    use asa_analysis::analysis::inspect::open;
    use asa_core::error::{ErrorKind, InputKind};
    type Damage = fn(&std::path::Path);
    // (fixture, what is broken, how, the file named, the problem: None where a parser refused)
    let cases: [(&str, &str, Damage, &str, Option<&str>); 9] = [
        (
            "qwen2",
            "missing config.json",
            |d| fs::remove_file(d.join("config.json")).unwrap(),
            "config.json",
            Some("missing_file"),
        ),
        (
            "qwen2",
            "config.json not JSON",
            |d| fs::write(d.join("config.json"), "{").unwrap(),
            "config.json",
            None,
        ),
        (
            "qwen2",
            "a field of the wrong type",
            |d| edit_config(d, |c| c["hidden_size"] = "wide".into()),
            "config.json",
            None,
        ),
        (
            "qwen2",
            "unknown model_type",
            |d| edit_config(d, |c| c["model_type"] = "mamba".into()),
            "config.json",
            Some("unsupported"),
        ),
        (
            "qwen2",
            "a tensor of the wrong shape",
            |d| edit_config(d, |c| c["intermediate_size"] = 48.into()),
            "model.safetensors",
            Some("shape"),
        ),
        (
            "qwen2",
            "truncated safetensors",
            |d| {
                let path = d.join("model.safetensors");
                let bytes = fs::read(&path).unwrap();
                fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            },
            "model.safetensors",
            None,
        ),
        (
            "qwen2",
            "safetensors header not JSON",
            |d| {
                let path = d.join("model.safetensors");
                let mut bytes = fs::read(&path).unwrap();
                bytes[8] = b'#';
                fs::write(&path, &bytes).unwrap();
            },
            "model.safetensors",
            None,
        ),
        (
            "llama_gqa",
            "a missing shard",
            |d| fs::remove_file(d.join("model-00002-of-00003.safetensors")).unwrap(),
            "model.safetensors.index.json", // the index names the shard it lacks
            Some("missing_file"),
        ),
        (
            "llama_gqa",
            "an index that is not JSON",
            |d| fs::write(d.join("model.safetensors.index.json"), "[").unwrap(),
            "model.safetensors.index.json",
            None,
        ),
    ];
    for (fixture, what, damage, file, problem) in cases {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture(fixture, tmp.path());
        damage(tmp.path());
        let err = match open(tmp.path(), None) {
            Ok(_) => panic!("{what}: opened"),
            Err(err) => err,
        };
        assert_eq!(
            err.kind(),
            ErrorKind::Input(InputKind::Checkpoint),
            "{what}: {err}"
        );
        let path = err
            .path()
            .unwrap_or_else(|| panic!("{what}: no file named: {err:?}"));
        assert_eq!(path.file_name().unwrap(), file, "{what}: {err}");
        assert_eq!(err.problem().map(|p| p.name()), problem, "{what}: {err}");
    }
    // a GGUF file that is not one
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("model.gguf");
    fs::write(&gguf, b"GGUF but not really a GGUF file at all").unwrap();
    let err = open(&gguf, None).err().expect("a damaged GGUF opened");
    assert_eq!(err.kind(), ErrorKind::Input(InputKind::Checkpoint), "{err}");
}

#[test]
fn gguf_settings_that_are_nan_or_zero_are_refused_naming_the_key_not_defaulted() {
    // issue 65, item 2: a present value is the model's; NaN never becomes the default
    use asa_core::error::{ErrorKind, InputKind};
    use asa_models::Checkpoint;
    use candle_core::{DType, Device};
    let cases = [
        // (the file, its key, the value, the key named, what the value must be): a value
        // that is no number is the file's key's; one outside its range, the rule's
        (
            "granitemoehybrid.gguf",
            "granitehybrid.attention.scale",
            f32::NAN,
            "granitehybrid.attention.scale",
            "a finite number",
        ),
        (
            "granitemoehybrid.gguf",
            "granitehybrid.logit_scale",
            0.0,
            "logits_scaling",
            "a finite number > 0",
        ),
        (
            "granitemoehybrid.gguf",
            "granitehybrid.embedding_scale",
            f32::INFINITY,
            "granitehybrid.embedding_scale",
            "a finite number",
        ),
        (
            "deepseek_v3.gguf",
            "deepseek2.expert_weights_scale",
            f32::NAN,
            "deepseek2.expert_weights_scale",
            "a finite number",
        ),
    ];
    for (name, stored, value, key, expected) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let path = gguf_with_f32(name, stored, value, tmp.path());
        let err = Checkpoint::open(&path, &Device::Cpu, DType::F32)
            .err()
            .unwrap_or_else(|| panic!("{stored} = {value} opened"));
        assert!(err.to_string().contains(stored), "{err}");
        assert_eq!(
            err.problem(),
            Some(&CheckpointProblem::out_of_range(key, value, expected)),
            "{err}"
        );
        assert_eq!(err.kind(), ErrorKind::Input(InputKind::Checkpoint), "{err}");
        assert_eq!(err.path(), Some(path.as_path()), "{err}");
    }
    // the fixture itself opens: the patch is what is refused
    let tmp = tempfile::tempdir().unwrap();
    let same = gguf_with_f32(
        "granitemoehybrid.gguf",
        "granitehybrid.logit_scale",
        2.5,
        tmp.path(),
    );
    Checkpoint::open(&same, &Device::Cpu, DType::F32).unwrap();
}

#[test]
fn a_layer_mask_holding_other_than_flags_is_refused_naming_the_key() {
    // issue 65 items 5 and 8: Qwen3-Next's `attention.recurrent_layers` is read as the
    // converter writes it (booleans: the fixture) or as 0 and 1; an array of u8 holding 2 is
    // refused naming the key, never read as "not 0"
    use asa_models::Checkpoint;
    use candle_core::{DType, Device};
    let key = "qwen3next.attention.recurrent_layers";
    let mut bytes = fs::read(fixtures().join("gguf").join("qwen3_next.gguf")).unwrap();
    let at = bytes
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap()
        + key.len();
    // value type array (9), element type bool (7), 4 elements, then one byte each
    assert_eq!(bytes[at..at + 8], [9, 0, 0, 0, 7, 0, 0, 0]);
    assert_eq!(bytes[at + 8..at + 16], 4u64.to_le_bytes());
    let tmp = tempfile::tempdir().unwrap();
    let mut write = |elements: u8, third: u8| {
        bytes[at + 4] = elements;
        bytes[at + 16 + 2] = third;
        let path = tmp
            .path()
            .join(format!("qwen3_next_{elements}_{third}.gguf"));
        fs::write(&path, &bytes).unwrap();
        path
    };
    // u8 0 and 1: the same layers as the booleans
    Checkpoint::open(&write(0, 1), &Device::Cpu, DType::F32).unwrap();
    let path = write(0, 2);
    let err = Checkpoint::open(&path, &Device::Cpu, DType::F32)
        .err()
        .expect("a mask holding 2 opened");
    assert_eq!(
        err.problem(),
        Some(&CheckpointProblem::wrong_type(
            key,
            "booleans (or 0 and 1)",
            "u8 2"
        ))
    );
    assert_eq!(err.path(), Some(path.as_path()));
}

#[test]
fn a_header_block_count_past_the_tensor_table_is_refused_before_anything_is_sized() {
    // issue 65 item 1: a 130 KB file whose block_count is 2^28 took 4.6 s and 2 GB before its
    // refusal; 2^31 and 2^32 - 1 ran out of memory blaming --seq-len. Now: at once, naming
    // the key, the count the tensor table holds and the file
    use asa_models::Checkpoint;
    use candle_core::{DType, Device};
    for (name, key, held) in [
        (
            "llama4_text_gguf.gguf",
            "llama4.block_count",
            "4 (blk.0 .. blk.3)",
        ),
        (
            "granitemoehybrid.gguf",
            "granitehybrid.block_count",
            "4 (blk.0 .. blk.3)",
        ),
        ("glm4_moe.gguf", "glm4moe.block_count", "4 (blk.0 .. blk.3)"),
    ] {
        for count in [1u32 << 28, 1 << 31, u32::MAX] {
            let tmp = tempfile::tempdir().unwrap();
            let path = gguf_with_u32(name, key, count, tmp.path());
            let err = Checkpoint::open(&path, &Device::Cpu, DType::F32)
                .err()
                .unwrap_or_else(|| panic!("{key} {count} opened"));
            let detail = format!("metadata {key} {count} but the tensor table holds {held}");
            assert_eq!(
                err.problem(),
                Some(&CheckpointProblem::inconsistent(&[key], detail))
            );
            assert_eq!(err.path(), Some(path.as_path()));
        }
    }
}

#[test]
fn a_product_of_config_sizes_that_would_wrap_is_refused_naming_them() {
    // issue 65 item 4: n_shared_experts 2^60 + 1 times moe_intermediate_size 16 wrapped to 16
    // in the release build and the model ran
    use asa_models::Checkpoint;
    use candle_core::{DType, Device};
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("deepseek_v3", tmp.path());
    edit_config(tmp.path(), |c| {
        c["n_shared_experts"] = serde_json::json!((1u64 << 60) + 1)
    });
    let err = Checkpoint::open(tmp.path(), &Device::Cpu, DType::F32)
        .err()
        .expect("a wrapping product opened");
    let Some(CheckpointProblem::OutOfRange { key, value, .. }) = err.problem() else {
        panic!("not out of range: {err}")
    };
    assert_eq!(key, "n_shared_experts x moe_intermediate_size");
    assert!(value.starts_with("1152921504606846977 x "), "{value}");
}

#[test]
fn a_llama4_gguf_names_its_chunked_layers_as_llama_cpp_reads_them() {
    // issue 65 item 5: llama.cpp's llama4 reads `attention.sliding_window_pattern` (a flag
    // per layer, or a period whose last layer is full); a file that has it is read by it,
    // never by the default (3 chunked, 1 full)
    use asa_models::Checkpoint;
    use candle_core::quantized::gguf_file::Value;
    use candle_core::{DType, Device};
    let key = "llama4.attention.sliding_window_pattern";
    let layers = |extra: Vec<(&str, Value)>| {
        let tmp = tempfile::tempdir().unwrap();
        let path = gguf_with_metadata("llama4_text_gguf.gguf", extra, tmp.path());
        let ckpt = Checkpoint::open(&path, &Device::Cpu, DType::F32).unwrap();
        let chunked = ckpt.config.attention_layers.chunked.clone().unwrap();
        (chunked.size, chunked.layers)
    };
    let flags = |f: [bool; 4]| Value::Array(f.iter().map(|&b| Value::Bool(b)).collect());
    assert_eq!(layers(vec![]), (8192, vec![0, 1, 2]));
    assert_eq!(
        layers(vec![(key, flags([true, false, true, false]))]),
        (8192, vec![0, 2])
    );
    assert_eq!(layers(vec![(key, Value::U32(2))]), (8192, vec![0, 2]));
    let tmp = tempfile::tempdir().unwrap();
    let bad = gguf_with_metadata(
        "llama4_text_gguf.gguf",
        vec![(
            key,
            Value::Array(vec![Value::U8(1), Value::U8(2), Value::U8(0), Value::U8(0)]),
        )],
        tmp.path(),
    );
    let err = Checkpoint::open(&bad, &Device::Cpu, DType::F32)
        .err()
        .expect("a pattern holding 2 opened");
    assert_eq!(
        err.problem(),
        Some(&CheckpointProblem::wrong_type(
            key,
            "booleans (or 0 and 1)",
            "u8 2"
        ))
    );
}

#[test]
fn scale_factors_float32_cannot_hold_are_refused_before_any_layer_runs() {
    // issue 65 item 3: finite in the config, inf (or 0) in the model's float32 arithmetic,
    // each refused naming its key when the checkpoint opens
    use asa_models::Checkpoint;
    use candle_core::{DType, Device};
    for (name, key, value) in [
        ("granitemoehybrid", "attention_multiplier", 1e300),
        ("granitemoehybrid", "embedding_multiplier", 1e-300),
        ("falcon_h1", "key_multiplier", 1e300),
        ("deepseek_v3", "routed_scaling_factor", 1e308),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture(name, tmp.path());
        edit_config(tmp.path(), |c| c[key] = serde_json::json!(value));
        let err = Checkpoint::open(tmp.path(), &Device::Cpu, DType::F32)
            .err()
            .unwrap_or_else(|| panic!("{name}: {key} {value} opened"));
        let Some(CheckpointProblem::OutOfRange {
            key: named,
            value: shown,
            expected,
        }) = err.problem()
        else {
            panic!("{name}: not out of range: {err}")
        };
        assert_eq!(
            (named.as_str(), shown.as_str()),
            (key, value.to_string().as_str())
        );
        assert!(
            expected.starts_with("within what float32 holds"),
            "{expected}"
        );
    }
}

#[test]
fn scales_a_config_implies_are_checked_once_whatever_the_file() {
    // issue 65 item 3: YaRN's mscale^2 in DeepSeek's q.k scale, its rotary attention factor
    // and Llama 4's attn_scale, finite in the file and inf or 0 in float32, are refused when
    // the checkpoint opens, naming the keys; one check on the resolved description, so the
    // GGUF file's yarn_log_multiplier (mscale_all_dim / 10) gets the config's refusal
    let e = std::f64::consts::E;
    let cases: [(&str, serde_json::Value, &str); 5] = [
        // mscale 0.1 * 3e38 * ln 4 + 1 ~ 4e37: its square is inf in f32
        (
            "deepseek_v3",
            serde_json::json!({"mscale_all_dim": 3e38, "mscale": 3e38}),
            "the q.k scale",
        ),
        // factor e, mscale_all_dim -10: mscale 0.1 * -10 * 1 + 1 = 0, a q.k scale of 0
        (
            "deepseek_v3",
            serde_json::json!({"factor": e, "mscale_all_dim": -10.0, "mscale": 1.0}),
            "`factor`))",
        ),
        // mscale 1e300 over mscale_all_dim 1: cos and sin times 1.2e299
        (
            "deepseek_v3",
            serde_json::json!({"mscale": 1e300}),
            "the rotary attention factor",
        ),
        ("llama4_text", serde_json::json!(1e308), "attn_scale"),
        ("llama4_text", serde_json::json!(-1e300), "attn_scale"),
    ];
    for (name, change, says) in cases {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture(name, tmp.path());
        edit_config(tmp.path(), |c| match name {
            "llama4_text" => c["attn_scale"] = change.clone(),
            _ => {
                for (k, v) in change.as_object().unwrap() {
                    c["rope_parameters"][k] = v.clone();
                }
            }
        });
        let CheckpointProblem::OutOfRange { key, expected, .. } = open_problem(tmp.path()) else {
            panic!("{name} {change}: not out of range")
        };
        assert!(key.contains(says), "{name} {change}: {key}");
        assert!(
            expected.starts_with("within what float32 holds"),
            "{expected}"
        );
    }
    // the same damage in the converter's GGUF file: yarn_log_multiplier 3e37 is
    // mscale_all_dim 3e38
    let tmp = tempfile::tempdir().unwrap();
    let gguf = gguf_with_f32(
        "deepseek_v3.gguf",
        "deepseek2.rope.scaling.yarn_log_multiplier",
        3e37,
        tmp.path(),
    );
    let err = open_error(&gguf);
    assert!(err.contains("rope.scaling.yarn_log_multiplier"), "{err}");
    assert!(err.contains("deepseek_v3.gguf"), "{err}");
    let CheckpointProblem::OutOfRange { key, .. } = open_problem(&gguf) else {
        panic!("not out of range: {err}")
    };
    assert!(
        key.starts_with("the q.k scale (from qk_nope_head_dim"),
        "{key}"
    );
}
