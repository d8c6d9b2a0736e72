//! Bad checkpoints refused by the library (SPEC section 7) with a typed problem naming the
//! file and the setting or tensor: broken files, GGUF settings that are NaN or zero, sizes
//! that would wrap, scales float32 cannot hold. What the command line prints for them is
//! tested in tests/it/checkpoint_errors.rs.

use std::fs;

use asa_core::checkpoint_problem::CheckpointProblem;

use crate::common::*;

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

/// A family's own key of the wrong type is refused naming it, whichever family's struct
/// reads it (LFM2's, Qwen3-Next's, Granite's, the Mamba-2 layers' of Falcon-H1, the
/// DeepSeek-style experts' of DeepSeek-V3 and GLM-4.5, Llama 4's, Gemma's, GPT-2's).
#[test]
fn a_familys_own_key_of_the_wrong_type_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    for (fixture, key, value) in [
        ("lfm2", "conv_L_cache", serde_json::json!("x")),
        ("qwen3_next", "linear_num_key_heads", serde_json::json!(-1)),
        (
            "granitemoehybrid",
            "position_embedding_type",
            serde_json::json!(3),
        ),
        ("falcon_h1", "mamba_n_heads", serde_json::json!(-2)),
        ("falcon_h1", "ssm_multipliers", serde_json::json!("x")),
        ("deepseek_v3", "n_group", serde_json::json!("x")),
        ("deepseek_v3", "kv_lora_rank", serde_json::json!(-5)),
        ("glm4_moe", "topk_method", serde_json::json!(3)),
        ("llama4_text", "moe_layers", serde_json::json!("x")),
        ("gemma2", "hidden_activation", serde_json::json!(3)),
        ("gpt2", "layer_norm_epsilon", serde_json::json!("x")),
    ] {
        let dir = tmp.path().join(format!("{fixture}_{key}"));
        copy_fixture(fixture, &dir);
        edit_config(&dir, |c| c[key] = value.clone());
        let err = open_error(&dir);
        assert!(
            err.contains("config.json: invalid config.json: field `") && err.contains(key),
            "{fixture} {key}: {err}"
        );
    }
}
