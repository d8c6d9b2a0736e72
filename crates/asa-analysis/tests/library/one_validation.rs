//! Issue 65 item 1: a model is validated once, on the description its file resolves to,
//! whatever the file. Each rule is broken the same way in a config.json and in the GGUF
//! metadata the converter writes for it; both are refused by the same rule (the same
//! problem about the same config.json key), the GGUF refusal naming the file's own key
//! beside it.

use crate::common::*;
use candle_core::quantized::gguf_file::Value as Meta;
use serde_json::{json, Value};

/// One rule broken in both files: the HF fixture and its change, the GGUF fixture and
/// its metadata value, the problem both refusals are (`CheckpointProblem::name`).
struct Case {
    hf: &'static str,
    change: fn(&mut Value),
    gguf: &'static str,
    key: &'static str,
    value: Meta,
    refused: &'static str,
}

/// `rope_parameters.{key}` (and a top-level copy, as transformers 5 saves both forms).
fn rope(c: &mut Value, key: &str, v: Value) {
    c[key] = v.clone();
    if let Some(p) = c["rope_parameters"].as_object_mut() {
        p.insert(key.into(), v);
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            hf: "qwen3",
            change: |c| c["hidden_size"] = json!(0),
            gguf: "qwen3.gguf",
            key: "qwen3.embedding_length",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| c["num_hidden_layers"] = json!(0),
            gguf: "qwen3.gguf",
            key: "qwen3.block_count",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| c["intermediate_size"] = json!(0),
            gguf: "qwen3.gguf",
            key: "qwen3.feed_forward_length",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| c["num_attention_heads"] = json!(0),
            gguf: "qwen3.gguf",
            key: "qwen3.attention.head_count",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| c["num_key_value_heads"] = json!(3),
            gguf: "qwen3.gguf",
            key: "qwen3.attention.head_count_kv",
            value: Meta::U32(3),
            refused: "inconsistent",
        },
        Case {
            hf: "qwen3",
            change: |c| c["head_dim"] = json!(0),
            gguf: "qwen3.gguf",
            key: "qwen3.attention.key_length",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| c["max_position_embeddings"] = json!(0),
            gguf: "qwen3.gguf",
            key: "qwen3.context_length",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| rope(c, "rope_theta", json!(-1.0)),
            gguf: "qwen3.gguf",
            key: "qwen3.rope.freq_base",
            value: Meta::F32(-1.0),
            refused: "out_of_range",
        },
        Case {
            hf: "qwen3",
            change: |c| c["rms_norm_eps"] = json!(-1.0),
            gguf: "qwen3.gguf",
            key: "qwen3.attention.layer_norm_rms_epsilon",
            value: Meta::F32(-1.0),
            refused: "out_of_range",
        },
        // 24 of a head's 12 dimensions
        Case {
            hf: "qwen3",
            change: |c| rope(c, "partial_rotary_factor", json!(2.0)),
            gguf: "qwen3.gguf",
            key: "qwen3.rope.dimension_count",
            value: Meta::U32(24),
            refused: "out_of_range",
        },
        // 3 of a head's 8 dimensions: no whole pairs
        Case {
            hf: "qwen3_next",
            change: |c| rope(c, "partial_rotary_factor", json!(0.375)),
            gguf: "qwen3_next.gguf",
            key: "qwen3next.rope.dimension_count",
            value: Meta::U32(3),
            refused: "inconsistent",
        },
        Case {
            hf: "glm4_moe",
            change: |c| rope(c, "partial_rotary_factor", json!(0.375)),
            gguf: "glm4_moe.gguf",
            key: "glm4moe.rope.dimension_count",
            value: Meta::U32(3),
            refused: "inconsistent",
        },
        Case {
            hf: "deepseek_v3",
            change: |c| c["qk_rope_head_dim"] = json!(3),
            gguf: "deepseek_v3.gguf",
            key: "deepseek2.rope.dimension_count",
            value: Meta::U32(3),
            refused: "inconsistent",
        },
        Case {
            hf: "granitemoehybrid",
            change: |c| c["logits_scaling"] = json!(0.0),
            gguf: "granitemoehybrid.gguf",
            key: "granitehybrid.logit_scale",
            value: Meta::F32(0.0),
            refused: "out_of_range",
        },
        Case {
            hf: "granitemoehybrid",
            change: |c| c["embedding_multiplier"] = json!(-2.0),
            gguf: "granitemoehybrid.gguf",
            key: "granitehybrid.embedding_scale",
            value: Meta::F32(-2.0),
            refused: "out_of_range",
        },
        Case {
            hf: "granitemoehybrid",
            change: |c| c["attention_multiplier"] = json!(1e-39),
            gguf: "granitemoehybrid.gguf",
            key: "granitehybrid.attention.scale",
            value: Meta::F32(1e-39),
            refused: "out_of_range",
        },
        Case {
            hf: "deepseek_v3",
            change: |c| c["routed_scaling_factor"] = json!(1e-39),
            gguf: "deepseek_v3.gguf",
            key: "deepseek2.expert_weights_scale",
            value: Meta::F32(1e-39),
            refused: "out_of_range",
        },
        Case {
            hf: "deepseek_v3",
            change: |c| rope(c, "mscale_all_dim", json!(3e38)),
            gguf: "deepseek_v3.gguf",
            key: "deepseek2.rope.scaling.yarn_log_multiplier",
            value: Meta::F32(3e37),
            refused: "out_of_range",
        },
        Case {
            hf: "deepseek_v3",
            change: |c| c["num_experts_per_tok"] = json!(5),
            gguf: "deepseek_v3.gguf",
            key: "deepseek2.expert_used_count",
            value: Meta::U32(5),
            refused: "out_of_range",
        },
        Case {
            hf: "mixtral",
            change: |c| c["num_experts_per_tok"] = json!(0),
            gguf: "converted/mixtral.gguf",
            key: "llama.expert_used_count",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
        Case {
            hf: "olmo3",
            change: |c| c["sliding_window"] = json!(0),
            gguf: "converted/olmo3.gguf",
            key: "olmo2.attention.sliding_window",
            value: Meta::U32(0),
            refused: "out_of_range",
        },
    ]
}

#[test]
fn a_rule_broken_in_config_json_or_in_gguf_metadata_gets_one_refusal() {
    let mut failures = Vec::new();
    for case in cases() {
        let tmp = tempfile::tempdir().unwrap();
        copy_fixture(case.hf, tmp.path());
        edit_config(tmp.path(), case.change);
        let hf = open_problem(tmp.path());
        std::fs::create_dir_all(tmp.path().join("converted")).unwrap();
        let file = gguf_with_metadata(case.gguf, vec![(case.key, case.value.clone())], tmp.path());
        let gguf = open_error(&file);
        // the file's keys the rule's config.json keys come from, this one among them
        let named = gguf
            .split_once("(in this file: metadata ")
            .is_some_and(|(_, keys)| keys.contains(case.key));
        // the same rule's refusal: the same problem about the same key (the values may
        // differ in their last digits, or in sizes the converter derives)
        let from_gguf = open_problem(&file);
        let ok = hf.name() == case.refused
            && (from_gguf.name(), from_gguf.key()) == (hf.name(), hf.key())
            && named
            && gguf.contains(case.gguf.rsplit('/').next().unwrap());
        if !ok {
            failures.push(format!(
                "{} / {}:\n  config.json: {hf}\n  gguf: {gguf}",
                case.hf, case.key
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
