//! Issue 25: model families beyond the Llama layout, as their checkpoints are found in the
//! wild. The numbers of each family's fixture are checked against transformers' own float64
//! forward pass by `metrics.rs` and `conformance.rs` (every fixture); here: the configs and
//! files older checkpoints have, and what is refused.

use candle_core::Device;

use crate::common::{
    analyze_briefly, copy_fixture, edit_config, expect_error, expect_problem, expect_success,
    open_problem, run_cli,
};
use asa_core::checkpoint_problem::CheckpointProblem;

/// The attention table of an `analyze` run of checkpoint folder `name` in `dir`.
fn attention_table(dir: &std::path::Path, name: &str) -> String {
    let out = format!("{name}-out");
    expect_success(&analyze_briefly(dir, name, &out, &[]));
    let table = std::fs::read_to_string(dir.join(out).join("attention.csv")).unwrap();
    // the model label is the folder name
    table.replace(&format!("\n{name},"), "\nMODEL,")
}

/// Pythia's config.json predates `rope_parameters` (`rotary_pct`, `rotary_emb_base`) and its
/// files keep the causal-mask and RoPE buffers transformers skips on load: the same numbers
/// as the fixture, and the buffers are not "unused weights".
#[test]
fn gpt_neox_as_pythia_ships_it_legacy_rope_fields_and_mask_buffers() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gpt_neox", &tmp.path().join("neox"));
    copy_fixture("gpt_neox", &tmp.path().join("pythia"));
    let pythia = tmp.path().join("pythia");
    edit_config(&pythia, |c| {
        let obj = c.as_object_mut().unwrap();
        obj.remove("rope_parameters");
        obj.insert("rotary_pct".into(), 0.5.into());
        obj.insert("rotary_emb_base".into(), 10000.into());
    });
    let file = pythia.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let mask =
        candle_core::Tensor::ones((1, 1, 64, 64), candle_core::DType::U8, &Device::Cpu).unwrap();
    for l in 0..2 {
        tensors.insert(format!("gpt_neox.layers.{l}.attention.bias"), mask.clone());
        tensors.insert(
            format!("gpt_neox.layers.{l}.attention.masked_bias"),
            candle_core::Tensor::new(-1e9f32, &Device::Cpu).unwrap(),
        );
    }
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "pythia"]));
    for says in [
        "gpt_neox",
        "LayerNorm with biases, fused per-head q/k/v, GELU MLP, parallel residual",
        "partial_rotary_factor 0.5",
        "unused         none",
    ] {
        assert!(inspect.contains(says), "{says}: {inspect}");
    }
    assert_eq!(
        attention_table(tmp.path(), "pythia"),
        attention_table(tmp.path(), "neox")
    );
}

/// A GPT-NeoX config whose MLP activation is not the exact GELU (`gelu_new`, a tanh
/// approximation) is refused naming it, never run with the wrong activation. Keys
/// GPTNeoXConfig does not have (`num_key_value_heads`, `head_dim`) are ignored, as
/// transformers ignores them.
#[test]
fn gpt_neox_features_not_implemented_are_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gpt_neox", &tmp.path().join("neox"));
    edit_config(&tmp.path().join("neox"), |c| {
        c["hidden_act"] = "gelu_new".into()
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "neox"]));
    assert!(err.contains("(the MLP of gpt_neox)"), "{err}");
    assert_eq!(
        crate::common::open_problem(&tmp.path().join("neox")),
        asa_core::checkpoint_problem::CheckpointProblem::unsupported(
            "hidden_act",
            "gelu_new",
            "gelu"
        )
    );
    edit_config(&tmp.path().join("neox"), |c| {
        c["hidden_act"] = "gelu".into();
        c["num_key_value_heads"] = 2.into();
        c["head_dim"] = 16.into();
    });
    copy_fixture("gpt_neox", &tmp.path().join("plain"));
    assert_eq!(
        attention_table(tmp.path(), "neox"),
        attention_table(tmp.path(), "plain")
    );
}

/// Phi-3's long-context checkpoints scale RoPE with `longrope` (per-frequency factor lists,
/// checked against transformers by the `phi3_longrope` fixture): a factor list of the wrong
/// length is refused naming it. The fused `gate_up_proj` must hold gate and up: a wrong
/// intermediate size is named.
#[test]
fn phi3_longrope_and_a_wrong_fused_size_are_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("phi3", &tmp.path().join("phi3"));
    edit_config(&tmp.path().join("phi3"), |c| {
        c["rope_parameters"] = serde_json::json!({
            "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
            "long_factor": [1.0, 1.0, 2.0], "short_factor": [1.0, 1.0],
            "original_max_position_embeddings": 32
        })
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "phi3"]));
    assert!(err.contains("phi3/config.json: "), "{err}");
    let problem = expect_problem(&tmp.path().join("phi3"), "inconsistent", "head_dim");
    assert_eq!(problem.keys(), ["rope_parameters.long_factor", "head_dim"]);
    assert!(problem
        .to_string()
        .contains("3 factors for 2 rotating frequency pairs"));
    copy_fixture("phi3", &tmp.path().join("wide"));
    edit_config(&tmp.path().join("wide"), |c| {
        c["intermediate_size"] = 48.into()
    });
    expect_error(&run_cli(tmp.path(), &["inspect", "wide"]));
    assert_eq!(
        open_problem(&tmp.path().join("wide")),
        CheckpointProblem::Shape {
            tensor: "model.layers.0.mlp.gate_up_proj.weight".into(),
            expected: vec![96, 32],
            got: vec![128, 32],
        }
    );
}

/// GPT-2 as openai-community/gpt2 ships it: tensor names without the `transformer.`
/// prefix and the causal-mask buffers `attn.bias` / `attn.masked_bias` (skipped, as
/// transformers skips them) give the fixture's numbers. A run past the learned positions,
/// and attention options not implemented, are refused naming them.
#[test]
fn gpt2_as_openai_ships_it_and_what_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gpt2", &tmp.path().join("gpt2"));
    copy_fixture("gpt2", &tmp.path().join("openai"));
    let file = tmp.path().join("openai/model.safetensors");
    let tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let mut renamed: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(name, t)| (name.trim_start_matches("transformer.").to_string(), t))
        .collect();
    let mask =
        candle_core::Tensor::ones((1, 1, 64, 64), candle_core::DType::U8, &Device::Cpu).unwrap();
    for l in 0..2 {
        renamed.insert(format!("h.{l}.attn.bias"), mask.clone());
        renamed.insert(
            format!("h.{l}.attn.masked_bias"),
            candle_core::Tensor::new(-1e4f32, &Device::Cpu).unwrap(),
        );
    }
    candle_core::safetensors::save(&renamed, &file).unwrap();
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "openai"]));
    assert!(inspect.contains("unused         none"), "{inspect}");
    assert_eq!(
        attention_table(tmp.path(), "openai"),
        attention_table(tmp.path(), "gpt2")
    );
    let long = [
        "analyze",
        "gpt2",
        "--seq-len",
        "65",
        "--num-seqs",
        "1",
        "--quiet",
        "--out",
        "r",
    ];
    let err = expect_error(&run_cli(tmp.path(), &long));
    assert!(
        err.contains("--seq-len 65 is longer than gpt2's 64 learned positions"),
        "{err}"
    );
    edit_config(&tmp.path().join("gpt2"), |c| {
        c["scale_attn_by_inverse_layer_idx"] = true.into()
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "gpt2"]));
    assert!(err.contains("gpt2/config.json: "), "{err}");
    assert_eq!(
        open_problem(&tmp.path().join("gpt2")),
        CheckpointProblem::unsupported("scale_attn_by_inverse_layer_idx", true, "false")
    );
}

/// Pythia's training steps are Hub revisions: `org/name@step1000,step2000` resolves each
/// revision through the local Hugging Face cache (`refs/{revision}` -> `snapshots/{hash}`)
/// and gives the QK^T series of a folder series of the same checkpoints, labelled by the
/// repository; one revision is one checkpoint; a revision not in the cache is
/// refused saying how to fetch it. A Hub id alone is its `main` revision, for `analyze` and
/// `inspect`; one in no folder and no cache is refused saying both.
#[test]
fn hub_revisions_from_the_local_cache_give_the_qk_series() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("hub/models--EleutherAI--pythia-tiny");
    for (step, hash, fixture) in [(1000, "aaa111", "llama_gqa"), (2000, "bbb222", "qwen2")] {
        copy_fixture(fixture, &repo.join("snapshots").join(hash));
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join(format!("refs/step{step}")), hash).unwrap();
    }
    let run = |spec: &str, out: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
            .current_dir(tmp.path())
            .env("HF_HUB_CACHE", tmp.path().join("hub"))
            .args([
                "qk",
                spec,
                "--seq-len",
                "20",
                "--num-seqs",
                "3",
                "--quiet",
                "--out",
                out,
            ])
            .output()
            .unwrap()
    };
    expect_success(&run("EleutherAI/pythia-tiny@step2000,step1000", "series"));
    let table = std::fs::read_to_string(tmp.path().join("series/qk_series.csv")).unwrap();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{table}");
    for (row, step) in rows.iter().zip(["1000", "2000"]) {
        assert_eq!(
            (row[0], row[1]),
            ("EleutherAI/pythia-tiny", step),
            "{table}"
        );
    }
    // the numbers: those of a folder series of the same checkpoints (checked against the
    // float64 references by cli_metrics' training_series_gives_the_qk_curve)
    let folder = tmp.path().join("run");
    copy_fixture("llama_gqa", &folder.join("step-1000"));
    copy_fixture("qwen2", &folder.join("step-2000"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .current_dir(tmp.path())
        .args([
            "qk",
            "run",
            "--seq-len",
            "20",
            "--num-seqs",
            "3",
            "--quiet",
            "--out",
            "folder",
        ])
        .output()
        .unwrap();
    expect_success(&out);
    let by_folder = std::fs::read_to_string(tmp.path().join("folder/qk_series.csv")).unwrap();
    assert_eq!(table.replace("EleutherAI/pythia-tiny", "run"), by_folder);
    expect_success(&run("EleutherAI/pythia-tiny@step1000", "one"));
    let err = expect_error(&run("EleutherAI/pythia-tiny@step3000", "missing"));
    assert!(
        err.contains("EleutherAI/pythia-tiny@step3000 is not in the local Hugging Face cache")
            && err.contains("huggingface-cli download EleutherAI/pythia-tiny --revision step3000"),
        "{err}"
    );

    // a Hub id alone is its main revision, for `analyze` and `inspect` alike
    std::fs::write(repo.join("refs/main"), "bbb222").unwrap();
    expect_success(&run("EleutherAI/pythia-tiny", "main"));
    let main = std::fs::read_to_string(tmp.path().join("main/attention.csv")).unwrap();
    assert!(main.contains("\nEleutherAI/pythia-tiny,qk_mean,"), "{main}");
    let inspect = |spec: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
            .current_dir(tmp.path())
            .env("HF_HUB_CACHE", tmp.path().join("hub"))
            .args(["inspect", spec])
            .output()
            .unwrap()
    };
    let text = expect_success(&inspect("EleutherAI/pythia-tiny"));
    assert!(text.contains("architecture   qwen2"), "{text}");
    let text = expect_success(&inspect("EleutherAI/pythia-tiny@step1000"));
    assert!(text.contains("architecture   llama"), "{text}");
    let err = expect_error(&inspect("nobody/nothing"));
    assert!(
        err.contains(
            "no such checkpoint folder, and nobody/nothing is not in the local Hugging Face cache"
        ) && err.contains("huggingface-cli download nobody/nothing"),
        "{err}"
    );
}

/// A sliding-window layer's first-token rows are over the queries that still see the first
/// token, and attention.csv says which share that is (layer 2 of `qwen2_window`: queries 1-5
/// of the 15 counted ones in 16 tokens, window 6); the causal layer 1 has no such row.
#[test]
fn the_attention_table_says_which_queries_a_window_left_for_first_token() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen2_window", &tmp.path().join("w"));
    let table = attention_table(tmp.path(), "w");
    let shares: Vec<&str> = table
        .lines()
        .filter(|l| l.contains(",visible_share,"))
        .collect();
    assert_eq!(shares.len(), 1, "{table}");
    let cells: Vec<&str> = shares[0].split(',').collect();
    assert_eq!(
        &cells[..5],
        ["MODEL", "first_token", "2", "", "visible_share"]
    );
    let share: f64 = cells[5].parse().unwrap();
    assert!((share - 5.0 / 15.0).abs() < 1e-12, "{share}");
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "w"]));
    assert!(
        inspect.contains("sliding window of 6 keys on layers 2"),
        "{inspect}"
    );
}

/// Qwen3-MoE: `inspect` names the experts, their routing (not renormalised without
/// `norm_topk_prob`) and the layers that have them; the numbers are checked against
/// transformers by `metrics.rs` and `conformance.rs`. A checkpoint missing an expert is
/// refused naming the tensor.
#[test]
fn qwen3_moe_names_its_experts_and_their_layers() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("qwen3_moe", &tmp.path().join("q"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "q"]));
    assert!(
        inspect.contains(
            "a mixture of 4 SwiGLU experts of 24, 2 a token (softmax, top-k, not renormalised) on layers 2 (dense elsewhere)"
        ),
        "{inspect}"
    );
    edit_config(&tmp.path().join("q"), |c| {
        c["mlp_only_layers"] = serde_json::json!([])
    });
    expect_error(&run_cli(tmp.path(), &["inspect", "q"]));
    expect_problem(
        &tmp.path().join("q"),
        "missing_tensor",
        "model.layers.0.mlp.gate.weight",
    );
}

/// The RoPE scalings of `modeling_rope_utils` (their numbers are checked against
/// transformers by `metrics.rs` and `conformance.rs` on the rope_* fixtures): `inspect`
/// names each with its parameters.
#[test]
fn scaled_rope_is_named_by_inspect() {
    for (name, want) in [
        ("rope_linear", "linearly scaled RoPE (factor 4)"),
        (
            "phi3_longrope",
            "LongRoPE (long factors past 16 tokens, short ones up to it; attention factor 1.224745)",
        ),
        ("rope_dynamic", "dynamic NTK RoPE (factor 2; the base grows past 16 tokens)"),
        (
            "rope_yarn",
            "YaRN RoPE (factor 4, original_max_position_embeddings 16, beta_fast 32, beta_slow 1, attention factor 1.138629)",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture(name, &tmp.path().join("m"));
        let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "m"]));
        assert!(inspect.contains(want), "{name}: {inspect}");
    }
}

/// Gemma 2 (its numbers are checked against transformers by `metrics.rs` and
/// `conformance.rs`): `inspect` names the sandwich norms, the query scale, both soft-caps,
/// the embedding scale and the alternating windows; attention.csv has the capped maxima
/// beside the raw ones; soft-capping beside a variant whose logit rule would replace it, and
/// bidirectional attention, are refused.
#[test]
fn gemma2_names_what_is_special_and_reports_capped_maxima() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gemma2", &tmp.path().join("g"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "g"]));
    for want in [
        "sandwich-norm (before and after attention and MLP) RMSNorm scaled by (1 + w)",
        "tanh-GELU GeGLU MLP",
        "q.k / sqrt(12) (query_pre_attn_scalar), soft-capped at 2.5",
        "embeddings times 5.656854; next-token logits soft-capped at 3",
        "sliding window of 6 keys on layers 1",
    ] {
        assert!(inspect.contains(want), "{want}: {inspect}");
    }
    let table = attention_table(tmp.path(), "g");
    let capped = table
        .lines()
        .filter(|l| l.starts_with("MODEL,max_logit_capped,"))
        .count();
    // per layer and per (layer, head): 2 x (1 + 4)
    assert_eq!(capped, 10, "{table}");
    edit_config(&tmp.path().join("g"), |c| {
        c["attention_variant"] = serde_json::json!("scale_invariant")
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "g"]));
    assert!(
        err.contains("scale_invariant attention with logit soft-capping is not implemented"),
        "{err}"
    );
    let problem = expect_problem(&tmp.path().join("g"), "unimplemented", "attention_variant");
    assert_eq!(
        problem.keys(),
        ["attention_variant", "attn_logit_softcapping"]
    );
    edit_config(&tmp.path().join("g"), |c| {
        c.as_object_mut().unwrap().remove("attention_variant");
        c["use_bidirectional_attention"] = serde_json::json!(true);
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "g"]));
    assert!(err.contains("use_bidirectional_attention"), "{err}");
    expect_problem(
        &tmp.path().join("g"),
        "unsupported",
        "use_bidirectional_attention",
    );
}

/// Gemma 3 (text; its numbers are checked against transformers by `metrics.rs` and
/// `conformance.rs`, which fail when the sliding layers rotate with the global layers'
/// RoPE): `inspect` names each layer type's RoPE, and no soft-cap by default.
#[test]
fn gemma3_names_the_rope_of_each_layer_type() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gemma3", &tmp.path().join("g"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "g"]));
    for want in [
        "global layers: linearly scaled RoPE (factor 2), theta 1000000; sliding-window layers: RoPE, theta 10000",
        "q.k / sqrt(12) (query_pre_attn_scalar); embeddings times 5.656854",
        "sliding window of 6 keys on layers 1",
    ] {
        assert!(inspect.contains(want), "{want}: {inspect}");
    }
    assert!(!inspect.contains("soft-capped"), "{inspect}");
}

/// GPT-OSS: `inspect` names the learned sinks, the window on alternate layers, YaRN on theta
/// 150000 and the clamped-SwiGLU experts with their routing (the numbers are checked
/// against transformers by `metrics.rs` and `conformance.rs`). The released checkpoints keep
/// their experts in MXFP4: `gpt_oss_mxfp4` is the fixture's model with the experts packed
/// so (transformers loads it to the same logits), and gives the fixture's reference logits
/// and the same tables bit for bit, with the same parameter count.
#[test]
fn gpt_oss_names_its_sinks_windows_and_experts_and_reads_mxfp4() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gpt_oss", &tmp.path().join("g"));
    copy_fixture("gpt_oss_mxfp4", &tmp.path().join("m"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "g"]));
    for want in [
        "architecture   gpt_oss",
        "variant        sink (weights: model.layers.0.self_attn.sinks)",
        "sliding window of 6 keys on layers 1 ",
        "YaRN RoPE (factor 32, original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, attention factor 1.346574, not truncated), theta 150000",
        "a mixture of 4 clamped SwiGLU (alpha 1.702, limit 1) experts with biases of 32, 2 a token (top-k logits, then softmax)",
    ] {
        assert!(inspect.contains(want), "{want}\n{inspect}");
    }
    let quantized = expect_success(&run_cli(tmp.path(), &["inspect", "m"]));
    let line = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .map(str::to_string)
    };
    assert_eq!(line(&quantized, "parameters"), line(&inspect, "parameters"));
    assert!(quantized.contains("u8 x8"), "{quantized}");

    let refs = crate::common::reference("gpt_oss");
    let ids = refs["input_ids"].to_dtype(candle_core::DType::U32).unwrap();
    let ckpt =
        asa_models::Checkpoint::open(&tmp.path().join("m"), &Device::Cpu, candle_core::DType::F32)
            .unwrap();
    let mut probe = asa_hooks::CaptureProbe::new(&[asa_hooks::Hook::Logits]);
    ckpt.load_model()
        .unwrap()
        .forward(&ids, 64, &mut probe)
        .unwrap();
    let logits = probe.get(asa_hooks::Hook::Logits, 2).unwrap().unwrap();
    let d = crate::common::max_abs_diff(&logits, &refs["logits"]);
    assert!(d < 1e-5, "MXFP4 logits differ from the reference by {d:e}");
    assert_eq!(
        attention_table(tmp.path(), "m"),
        attention_table(tmp.path(), "g")
    );

    // other quantization methods are refused by name
    edit_config(&tmp.path().join("m"), |c| {
        c["quantization_config"]["quant_method"] = serde_json::json!("awq")
    });
    expect_error(&run_cli(tmp.path(), &["inspect", "m"]));
    assert!(matches!(
        crate::common::open_problem(&tmp.path().join("m")),
        asa_core::checkpoint_problem::CheckpointProblem::Unsupported { key, value, .. }
            if key == "quantization_config.quant_method" && value == "awq"
    ));
}

/// Gemma 3's multimodal checkpoints (`model_type` gemma3, Gemma3ForConditionalGeneration:
/// the text model's config nested in `text_config`, its tensors under
/// `language_model.model.`, a vision tower beside it): the text model is analysed, the
/// vision tensors are neither read nor "unused" nor counted, and the numbers are those of
/// the same text weights as a plain gemma3_text checkpoint (transformers gives them the same
/// logits). The module names transformers uses in memory (`model.language_model.`) are read
/// too.
#[test]
fn gemma3_multimodal_checkpoints_give_their_text_model() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("gemma3", &tmp.path().join("t"));
    copy_fixture("gemma3_multimodal", &tmp.path().join("m"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "m"]));
    for want in [
        "gemma3_text (the text model of a multimodal checkpoint; its vision tower is not read)",
        "unused         none",
        "sliding window of 6 keys on layers 1 ",
    ] {
        assert!(inspect.contains(want), "{want}\n{inspect}");
    }
    let text = expect_success(&run_cli(tmp.path(), &["inspect", "t"]));
    let line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("parameters"))
            .map(str::to_string)
    };
    assert_eq!(line(&inspect), line(&text));
    let table = attention_table(tmp.path(), "t");
    assert_eq!(attention_table(tmp.path(), "m"), table);

    // the same tensors under transformers' module names
    let file = tmp.path().join("m").join("model.safetensors");
    let tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let renamed: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(
            |(name, t)| match name.strip_prefix("language_model.model.") {
                Some(rest) => (format!("model.language_model.{rest}"), t),
                None => (format!("model.{name}"), t),
            },
        )
        .collect();
    assert!(renamed.contains_key("model.language_model.layers.0.self_attn.q_proj.weight"));
    assert!(renamed.contains_key("model.vision_tower.post_layernorm.weight"));
    candle_core::safetensors::save(&renamed, &file).unwrap();
    assert_eq!(attention_table(tmp.path(), "m"), table);

    edit_config(&tmp.path().join("m"), |c| {
        c.as_object_mut().unwrap().remove("text_config");
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "m"]));
    assert!(
        err.contains("m/config.json: text_config is missing"),
        "{err}"
    );
    expect_problem(&tmp.path().join("m"), "missing_key", "text_config");
}

/// Issue 52: Llama 4's chunked, NoPE and temperature-tuned layers and SmolLM3's NoPE layer
/// are named by `inspect` and run.json layer by layer (1-based, as the tables), and a layer
/// type the family does not implement is refused naming it.
#[test]
fn llama4_and_smollm3_name_each_layers_kind() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama4_text", &tmp.path().join("l4"));
    copy_fixture("smollm3", &tmp.path().join("smol"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "l4"]));
    for says in [
        "1-3: attention, RoPE, chunks of 8 positions; 4: attention, NoPE, causal, temperature-tuned queries",
        "chunks of 8 positions on layers 1, 2, 3",
        "RoPE on interleaved pairs",
        "a mixture of 4 SwiGLU experts of 16, 2 a token (top-k logits, sigmoid weights on the experts' inputs) and a shared SwiGLU of 16 on layers 2, 4",
    ] {
        assert!(inspect.contains(says), "{says}: {inspect}");
    }
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "smol"]));
    assert!(
        inspect.contains("1-3: attention, RoPE, causal; 4: attention, NoPE, causal"),
        "{inspect}"
    );
    expect_success(&run_cli(
        tmp.path(),
        &[
            "analyze",
            "l4",
            "--seq-len",
            "20",
            "--num-seqs",
            "1",
            "--quiet",
            "--out",
            "res",
        ],
    ));
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("res/run.json")).unwrap())
            .unwrap();
    let kinds = &run["models"][0]["layer_kinds"];
    assert_eq!(kinds[0]["keys"], "chunks of 8 positions", "{kinds}");
    assert_eq!(kinds[3]["rope"], false, "{kinds}");
    assert_eq!(kinds[3]["layer"], 4, "{kinds}");
    // a sliding layer is not a Llama 4 layer type; a chunked layer needs a chunk size
    edit_config(&tmp.path().join("l4"), |c| {
        c["layer_types"][1] = "sliding_attention".into();
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "l4"]));
    assert!(err.contains("l4/config.json: "), "{err}");
    assert!(matches!(
        open_problem(&tmp.path().join("l4")),
        CheckpointProblem::Unsupported { key, value, .. }
            if key == "layer_types" && value == "sliding_attention"
    ));
    edit_config(&tmp.path().join("l4"), |c| {
        c["layer_types"][1] = "chunked_attention".into();
        c["attention_chunk_size"] = serde_json::Value::Null;
    });
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "l4"]));
    assert!(err.contains("attention_chunk_size is null"), "{err}");
    let problem = expect_problem(
        &tmp.path().join("l4"),
        "inconsistent",
        "attention_chunk_size",
    );
    assert_eq!(problem.keys(), ["layer_types", "attention_chunk_size"]);
}

/// Issue 52: GLM-4.5's experts are named by `inspect`, and routing settings the loader does
/// not implement are refused naming the key.
#[test]
fn glm4_moe_names_its_routing_and_refuses_what_it_does_not_implement() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("glm4_moe", &tmp.path().join("glm"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "glm"]));
    for says in [
        "a mixture of 4 SwiGLU experts of 16, 2 a token (sigmoid scores, group-limited top-k with a score-correction bias) and a shared SwiGLU of 16 on layers 2, 3 (dense elsewhere)",
        "partial_rotary_factor 0.5 (4 of 8 dims rotate)",
    ] {
        assert!(inspect.contains(says), "{says}: {inspect}");
    }
    // (the key set, its value, the problem, the detail's words where it has one)
    for (key, value, problem, says) in [
        (
            "scoring_func",
            serde_json::json!("softmax"),
            "unsupported",
            "",
        ),
        (
            "topk_method",
            serde_json::json!("greedy"),
            "unsupported",
            "",
        ),
        (
            "n_group",
            serde_json::json!(3),
            "inconsistent",
            "must divide the 4 routed experts",
        ),
        (
            "n_group",
            serde_json::json!(4),
            "inconsistent",
            "fewer than 2 experts a group",
        ),
    ] {
        copy_fixture("glm4_moe", &tmp.path().join("bad"));
        edit_config(&tmp.path().join("bad"), |c| c[key] = value.clone());
        let err = expect_error(&run_cli(tmp.path(), &["inspect", "bad"]));
        assert!(err.contains("bad/config.json: "), "{key}: {err}");
        let refused = expect_problem(&tmp.path().join("bad"), problem, key);
        assert!(refused.to_string().contains(says), "{refused}");
        std::fs::remove_dir_all(tmp.path().join("bad")).unwrap();
    }
}

/// Issue 52: DeepSeek-V3's latent attention is named by `inspect` with its softmax scale
/// (12^-1/2 times YaRN's mscale^2 = 0.3742607, as transformers' `yarn_apply_mscale`), and
/// sizes the loader cannot run are refused naming the key.
#[test]
fn deepseek_v3_names_its_latent_attention_and_refuses_what_it_cannot_run() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("deepseek_v3", &tmp.path().join("ds"));
    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "ds"]));
    for says in [
        "multi-head latent attention (low-rank q, one compressed kv latent)",
        "RoPE on interleaved pairs written back de-interleaved",
        "q.k x 0.3742607 (latent attention: q.k = q_nope.k_nope + q_rope.k_rope over 8 + 4 dims",
        "values of 6 dims",
        "and a shared SwiGLU of 16 on layers 2, 3 (dense elsewhere)",
    ] {
        assert!(inspect.contains(says), "{says}: {inspect}");
    }
    // (the key set, its value, the problem, what it is about)
    for (key, value, problem, about) in [
        (
            "v_head_dim",
            serde_json::json!(13),
            "inconsistent",
            "v_head_dim",
        ),
        (
            "qk_rope_head_dim",
            serde_json::json!(3),
            "inconsistent",
            "qk_rope_head_dim",
        ),
        (
            "kv_lora_rank",
            serde_json::json!(0),
            "out_of_range",
            "kv_lora_rank",
        ),
        // one q_proj instead of the low-rank pair: this checkpoint has none
        (
            "q_lora_rank",
            serde_json::Value::Null,
            "missing_tensor",
            "model.layers.0.self_attn.q_proj.weight",
        ),
    ] {
        copy_fixture("deepseek_v3", &tmp.path().join("bad"));
        edit_config(&tmp.path().join("bad"), |c| c[key] = value.clone());
        let err = expect_error(&run_cli(tmp.path(), &["inspect", "bad"]));
        assert!(err.contains("bad/"), "{key}: {err}");
        expect_problem(&tmp.path().join("bad"), problem, about);
        std::fs::remove_dir_all(tmp.path().join("bad")).unwrap();
    }
}

/// Issue 52: a transformers 5 model in memory keeps the experts of Mixtral, Qwen3-MoE,
/// GLM-4.5 and DeepSeek-V3 fused (`mlp.experts.gate_up_proj` `[experts, 2 * inter, hidden]`,
/// gate rows first, and `down_proj` `[experts, hidden, inter]`; Mixtral's router and experts
/// under `mlp`), which is what `asa.analyze(model)` hands over: the same tables as the
/// per-expert files `save_pretrained` writes.
#[test]
fn fused_experts_as_transformers_holds_them_give_the_per_expert_tables() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["mixtral", "qwen3_moe", "glm4_moe", "deepseek_v3"] {
        copy_fixture(name, &tmp.path().join(name));
        let fused = format!("{name}_fused");
        copy_fixture(name, &tmp.path().join(&fused));
        let dir = tmp.path().join(&fused);
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .unwrap();
        let mut tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
        let (block, [gate, up, down]) = match name {
            "mixtral" => ("block_sparse_moe", ["w1", "w3", "w2"]),
            _ => ("mlp", ["gate_proj", "up_proj", "down_proj"]),
        };
        for l in 0..3 {
            let prefix = format!("model.layers.{l}.{block}");
            #[allow(clippy::type_complexity)]
            let take =
                |t: &mut std::collections::HashMap<String, candle_core::Tensor>,
                 e: usize,
                 p: &str| { t.remove(&format!("{prefix}.experts.{e}.{p}.weight")) };
            let mut gate_up = Vec::new();
            let mut downs = Vec::new();
            for e in 0.. {
                let Some(g) = take(&mut tensors, e, gate) else {
                    break;
                };
                let u = take(&mut tensors, e, up).unwrap();
                gate_up.push(candle_core::Tensor::cat(&[g, u], 0).unwrap());
                downs.push(take(&mut tensors, e, down).unwrap());
            }
            if gate_up.is_empty() {
                continue;
            }
            let memory = format!("model.layers.{l}.mlp");
            tensors.insert(
                format!("{memory}.experts.gate_up_proj"),
                candle_core::Tensor::stack(&gate_up, 0).unwrap(),
            );
            tensors.insert(
                format!("{memory}.experts.down_proj"),
                candle_core::Tensor::stack(&downs, 0).unwrap(),
            );
            if let Some(router) = tensors.remove(&format!("{prefix}.gate.weight")) {
                tensors.insert(format!("{memory}.gate.weight"), router);
            }
        }
        // every per-expert tensor became a fused one
        assert!(
            tensors
                .keys()
                .any(|k| k.ends_with("mlp.experts.gate_up_proj"))
                && !tensors.keys().any(|k| k.contains(".experts.0.")),
            "{name}: {:?}",
            tensors.keys().collect::<Vec<_>>()
        );
        candle_core::safetensors::save(&tensors, &file).unwrap();
        assert_eq!(
            attention_table(tmp.path(), &fused),
            attention_table(tmp.path(), name),
            "{name}"
        );
    }
}

/// A gated variant on latent attention has no q_proj to read its gate from: refused, never
/// run without the gate.
#[test]
fn a_gated_variant_on_latent_attention_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("deepseek_v3", &tmp.path().join("ds"));
    let out = run_cli(
        tmp.path(),
        &[
            "analyze",
            "ds",
            "--variant",
            "gated",
            "--seq-len",
            "16",
            "--num-seqs",
            "1",
            "--out",
            "res",
        ],
    );
    let err = expect_error(&out);
    assert!(err.contains("ds"), "{err}");
    assert!(!tmp.path().join("res").exists());
    let gated = Some(asa_engine::attention::VariantKind::Gated);
    let problem = crate::common::run_problem_as(&tmp.path().join("ds"), gated);
    assert_eq!(problem.keys(), ["attention_variant", "kv_lora_rank"]);
    assert!(
        problem.to_string().contains("latent attention"),
        "{problem}"
    );
}
