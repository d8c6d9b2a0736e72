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
