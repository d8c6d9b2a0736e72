//! Issue 52: hybrid models (LFM2's short convolutions beside attention layers). Their
//! numbers are checked against transformers' float64 forward by `metrics.rs` and the
//! other every-fixture tests, over their attention layers; here: every table numbers an
//! attention layer by its decoder layer, the other layers have no rows, run.json and
//! `inspect` name each layer's mixer, and `--layer` refuses a layer without attention.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::{
    analyze_briefly, assert_close, expect_error, expect_success, ids_corpus, model_dir,
    reference_metrics, run_cli,
};

/// `analyze` of fixture `name` on its reference ids into `dir/out` with `extra` options.
fn analyze(dir: &Path, name: &str, extra: &[&str]) -> std::process::Output {
    let corpus = ids_corpus(name, dir);
    let model = format!("{name}={}", model_dir(name).display());
    let mut args = vec![
        "analyze",
        &model,
        "--corpus",
        &corpus,
        "--seq-len",
        "20",
        "--num-seqs",
        "3",
        "--bos",
        "never",
        "--min-query",
        "1",
        "--quiet",
        "--out",
        "out",
    ];
    args.extend(extra);
    run_cli(dir, &args)
}

/// The (layer, value) of every row of `csv` with `metric` and `stat` in the first columns
/// model, metric, layer, head, stat, value, head empty.
fn layer_rows(csv: &str, metric: &str, stat: &str) -> Vec<(usize, f64)> {
    csv.lines()
        .skip(1)
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|c| c[1] == metric && c[3].is_empty() && c[4] == stat)
        .map(|c| (c[2].parse().unwrap(), c[5].parse().unwrap()))
        .collect()
}

/// The distinct values of column `column` of a CSV table.
fn column_values(csv: &str, column: &str) -> BTreeSet<String> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = header.iter().position(|c| *c == column).unwrap();
    lines
        .map(|l| l.split(',').nth(at).unwrap().to_string())
        .collect()
}

/// LFM2's attention layers are decoder layers 2 and 4: attention.csv has rows for them
/// alone, with the reference's values of the first and second attention layer; the
/// heatmap (the last attention layer by default) is layer 4's; run.json lists layers 1
/// and 3 as short convolutions and the kernels by decoder layer.
#[test]
fn lfm2_tables_number_attention_layers_by_their_decoder_layer() {
    let tmp = tempfile::tempdir().unwrap();
    expect_success(&analyze(tmp.path(), "lfm2", &[]));
    let want = reference_metrics("lfm2");
    let numbers: Vec<usize> = want["attention_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(numbers, [2, 4]);
    let out = tmp.path().join("out");
    let attention = std::fs::read_to_string(out.join("attention.csv")).unwrap();
    let layers: BTreeSet<String> = column_values(&attention, "layer");
    assert_eq!(layers, ["", "2", "4"].map(String::from).into());
    for metric in ["first_token", "entropy", "weight_sum"] {
        let rows = layer_rows(&attention, metric, "mean");
        assert_eq!(rows.len(), 2, "{metric}: {rows:?}");
        for (k, (layer, value)) in rows.into_iter().enumerate() {
            assert_eq!(layer, numbers[k], "{metric}");
            let y = want[metric]["mean"][k].as_f64().unwrap();
            assert_close(value, y, 1e-6, 1e-5, &format!("{metric} layer {layer}"));
        }
    }
    let heatmap = std::fs::read_to_string(out.join("heatmap.csv")).unwrap();
    assert_eq!(column_values(&heatmap, "layer"), ["4".to_string()].into());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let model = &run["models"][0];
    let kinds: Vec<(u64, &str)> = model["layer_kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["layer"].as_u64().unwrap(), k["mixer"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            (1, "short conv"),
            (2, "attention"),
            (3, "short conv"),
            (4, "attention")
        ]
    );
    let kernel_layers: BTreeSet<u64> = model["kernels"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|v| v.as_array().unwrap().iter().map(|l| l.as_u64().unwrap()))
        .collect();
    assert_eq!(kernel_layers, [2, 4].into());
}

/// `--layer` names a decoder layer: a short-convolution layer is refused naming its mixer
/// and the attention layers, and layer 2's heatmap is labelled 2.
#[test]
fn lfm2_layer_option_takes_decoder_layers_with_attention() {
    let tmp = tempfile::tempdir().unwrap();
    let err = expect_error(&analyze(tmp.path(), "lfm2", &["--layer", "3"]));
    assert!(
        err.contains("--layer 3") && err.contains("short conv") && err.contains("2, 4"),
        "{err}"
    );
    assert!(!tmp.path().join("out").exists());
    expect_success(&analyze(tmp.path(), "lfm2", &["--layer", "2"]));
    let heatmap = std::fs::read_to_string(tmp.path().join("out/heatmap.csv")).unwrap();
    assert_eq!(column_values(&heatmap, "layer"), ["2".to_string()].into());
}

/// `inspect` names each layer's mixer and LFM2's renamed tensors are all read.
#[test]
fn lfm2_inspect_names_each_layers_mixer() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("lfm2").display().to_string();
    let text = expect_success(&run_cli(tmp.path(), &["inspect", &model]));
    for says in [
        "layer kinds    1: short conv; 2: attention, RoPE, causal; 3: short conv; 4: attention, RoPE, causal",
        "unused         none",
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
}

/// Qwen3-Next's output gate is the gated attention of the paper: `gate` has a row per
/// (attention layer, head), numbered 2 and 4, with the reference's values.
#[test]
fn qwen3_next_gate_rows_are_its_attention_layers_with_the_reference_values() {
    let tmp = tempfile::tempdir().unwrap();
    expect_success(&analyze(
        tmp.path(),
        "qwen3_next",
        &["--metrics", "gate,first_token"],
    ));
    let want = reference_metrics("qwen3_next");
    let attention = std::fs::read_to_string(tmp.path().join("out/attention.csv")).unwrap();
    assert_eq!(
        column_values(&attention, "layer"),
        ["2", "4"].map(String::from).into()
    );
    let mut seen = 0;
    for line in attention.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        if c[1] != "gate" {
            continue;
        }
        let layer: usize = c[2].parse().unwrap();
        let head: usize = c[3].parse().unwrap();
        let k = [2, 4].iter().position(|&l| l == layer).unwrap();
        let y = want["gate"][k][head - 1].as_f64().unwrap();
        assert_close(
            c[5].parse().unwrap(),
            y,
            1e-6,
            1e-5,
            &format!("gate {layer}/{head}"),
        );
        seen += 1;
    }
    assert_eq!(seen, 8);
}

/// `inspect` of Qwen3-Next names its DeltaNet and attention layers, the gated variant
/// found in q_proj's rows, the shared expert and the partial RoPE.
#[test]
fn qwen3_next_inspect_names_its_layers_variant_and_experts() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("qwen3_next").display().to_string();
    let text = expect_success(&run_cli(tmp.path(), &["inspect", &model]));
    for says in [
        "layer kinds    1: gated deltanet; 2: attention, RoPE, causal; 3: gated deltanet; 4: attention, RoPE, causal",
        "variant        gated (weights: model.layers.1.self_attn.q_proj.weight",
        "a shared SwiGLU of 16",
        "partial_rotary_factor 0.5",
        "scaled by (1 + w)",
        "unused         none",
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
}

/// Settings the hybrid loaders do not implement are refused naming the key, never run.
#[test]
fn hybrid_settings_not_implemented_are_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    // (fixture, the key set, its value, the problem, the key it names)
    let cases: [(&str, &str, serde_json::Value, &str, Option<&str>); 13] = [
        (
            "lfm2",
            "layer_types",
            serde_json::json!(["conv", "sliding_attention", "conv", "full_attention"]),
            "unsupported",
            Some("layer_types"),
        ),
        (
            "lfm2",
            "conv_L_cache",
            0.into(),
            "out_of_range",
            Some("conv_L_cache"),
        ),
        (
            "lfm2",
            "tie_embedding",
            false.into(),
            "inconsistent",
            Some("tie_embedding"),
        ),
        (
            "lfm2",
            "partial_rotary_factor",
            0.5.into(),
            "unsupported",
            Some("partial_rotary_factor"),
        ),
        (
            "qwen3_next",
            "linear_num_value_heads",
            3.into(),
            "inconsistent",
            Some("linear_num_value_heads"),
        ),
        (
            "qwen3_next",
            "layer_types",
            serde_json::json!([
                "mamba",
                "full_attention",
                "linear_attention",
                "full_attention"
            ]),
            "unsupported",
            Some("layer_types"),
        ),
        (
            "granitemoehybrid",
            "layer_types",
            serde_json::Value::Null,
            "no_attention",
            None,
        ),
        (
            "granitemoehybrid",
            "num_local_experts",
            0.into(),
            "unsupported",
            Some("num_local_experts"),
        ),
        (
            "granitemoehybrid",
            "time_step_limit",
            serde_json::Value::Null,
            "wrong_type",
            Some("time_step_limit"),
        ),
        (
            "granitemoehybrid",
            "mamba_n_heads",
            3.into(),
            "inconsistent",
            Some("mamba_n_heads"),
        ),
        (
            "falcon_h1",
            "mamba_rms_norm",
            true.into(),
            "unsupported",
            Some("mamba_rms_norm"),
        ),
        (
            "falcon_h1",
            "ssm_multipliers",
            serde_json::json!([1.0, 2.0]),
            "wrong_type",
            Some("ssm_multipliers"),
        ),
        (
            "lfm2",
            "layer_types",
            serde_json::json!(["conv", "conv", "conv", "conv"]),
            "no_attention",
            None,
        ),
    ];
    for (k, (fixture, key, value, problem, named)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("case{k}"));
        crate::common::copy_fixture(fixture, &dir);
        crate::common::edit_config(&dir, |c| c[key] = value.clone());
        let err = expect_error(&run_cli(
            tmp.path(),
            &["inspect", &dir.display().to_string()],
        ));
        assert!(err.contains("config.json: "), "{key}: {err}");
        let refused = crate::common::open_problem(&dir);
        assert_eq!(
            (refused.name(), refused.key()),
            (problem, named),
            "{key}: {refused}"
        );
    }
}

/// Granite 4 hybrid: `inspect` names its Mamba and NoPE attention layers and every muP
/// multiplier; the hub's pre-transformers-5 layer names (`mamba`, `attention`, under
/// `layers_block_type`) give the same tables.
#[test]
fn granite_hybrid_names_its_layers_and_multipliers_and_reads_legacy_layer_names() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("granitemoehybrid").display().to_string();
    let text = expect_success(&run_cli(tmp.path(), &["inspect", &model]));
    for says in [
        "layer kinds    1: mamba2; 2: attention, NoPE, causal; 3: mamba2; 4: attention, NoPE, causal",
        "q.k x 0.45 (attention_multiplier); embeddings x 2.7 (embedding_multiplier); mixer and MLP outputs x 0.5 (residual_multiplier); next-token logits / 2.5 (logits_scaling)",
        "none: every attention layer is NoPE",
        "a mixture of 4 SwiGLU experts of 16, 2 a token (top-k logits, then softmax) and a shared SwiGLU of 16",
        "unused         none",
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
    let legacy = tmp.path().join("legacy");
    crate::common::copy_fixture("granitemoehybrid", &legacy);
    crate::common::edit_config(&legacy, |c| {
        let obj = c.as_object_mut().unwrap();
        obj.remove("layer_types");
        obj.insert(
            "layers_block_type".into(),
            serde_json::json!(["mamba", "attention", "mamba", "attention"]),
        );
    });
    let table = |dir: &Path| {
        let out = tmp.path().join("out");
        let _ = std::fs::remove_dir_all(&out);
        let model = format!("m={}", dir.display());
        expect_success(&analyze_briefly(tmp.path(), &model, "out", &[]));
        std::fs::read_to_string(out.join("attention.csv")).unwrap()
    };
    assert_eq!(table(&model_dir("granitemoehybrid")), table(&legacy));
}

/// Falcon-H1: every layer is attention beside a Mamba-2 mixer (so every layer has rows),
/// and `inspect` names each multiplier where it applies.
#[test]
fn falcon_h1_names_its_parallel_layers_and_multipliers() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("falcon_h1").display().to_string();
    let text = expect_success(&run_cli(tmp.path(), &["inspect", &model]));
    for says in [
        "layer kinds    1-3: attention + mamba2, RoPE, causal",
        "q.k / sqrt(8) (head_dim); embeddings x 1.7 (embedding_multiplier); attention input x 1.3 (attention_in_multiplier); keys x 1.9 (key_multiplier); attention output x 0.9 (attention_out_multiplier); Mamba input x 1.1 (ssm_in_multiplier); Mamba output x 0.6 (ssm_out_multiplier); MLP gate x 0.85 (mlp_multipliers[0]); MLP output x 1.15 (mlp_multipliers[1]); next-token logits x 0.7 (lm_head_multiplier); Mamba in_proj's z, x, B, C, dt x 0.8, 1.2, 1.4, 0.55, 1.6 (ssm_multipliers)",
        "unused         none",
    ] {
        assert!(text.contains(says), "{says}: {text}");
    }
    expect_success(&analyze(
        tmp.path(),
        "falcon_h1",
        &["--metrics", "first_token"],
    ));
    let attention = std::fs::read_to_string(tmp.path().join("out/attention.csv")).unwrap();
    assert_eq!(
        column_values(&attention, "layer"),
        ["1", "2", "3"].map(String::from).into()
    );
}
