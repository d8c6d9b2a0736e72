//! GLM-4.5 (`glm4_moe`): the Llama layout with q/k/v biases by `attention_bias` (never on
//! o_proj), per-head QK-norm before RoPE where the checkpoint has it (`use_qk_norm`), partial
//! RoPE (`partial_rotary_factor` 0.5 by default: the first half of each head rotates,
//! halves split within it), and from layer `first_k_dense_replace` on a mixture of
//! `n_routed_experts` experts of `moe_intermediate_size` beside `n_shared_experts` shared
//! ones, routed as DeepSeek-V3 routes (sigmoid scores, a score-correction bias that only
//! chooses, group-limited top-k, renormalised by `norm_topk_prob`, times
//! `routed_scaling_factor`).
//!
//! llama.cpp's `glm4moe` GGUF files (`convert_hf_to_gguf.py` Glm4MoeModel,
//! `src/models/glm4-moe.cpp`): no q/k permutation (NeoX pairs on the first
//! `rope.dimension_count` dims), `post_attention_norm` for the MLP's norm, QK-norm and q/k/v
//! biases known only by their tensors, experts stacked, the routing keys as DeepSeek's
//! ([`deepseek_moe_gguf_keys`]); `block_count` counts the multi-token-prediction layer
//! (`nextn_predict_layers`), which is skipped.

use std::path::Path;

use super::deepseek_v3::{
    deepseek_experts, deepseek_moe_gguf_keys, DeepSeekDefaults, DeepseekMoeKeys, GGUF_MOE_BLOCKS,
    GGUF_MOE_WHOLE, GGUF_STACKED_EXPERTS,
};
use super::{llama, qwen3};
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{Biases, Family, GgufRules, Ropes};
use crate::config::raw::own_keys_readable;
use crate::config::RawConfig;
use crate::experts::Experts;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use asa_core::error::Result;

pub(crate) const FAMILY: Family = Family {
    name: "glm4_moe",
    keys: own_keys_readable::<DeepseekMoeKeys>,
    biases,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 131072,
    rope,
    experts,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `glm4moe`.
const GGUF: GgufRules = GgufRules {
    blocks: &[
        &[("post_attention_norm", Some("post_attention_layernorm"))],
        qwen3::GGUF_QK_NORM,
        GGUF_MOE_BLOCKS,
        llama::GGUF_BLOCKS,
    ],
    whole: &[GGUF_MOE_WHOLE],
    assembled: GGUF_STACKED_EXPERTS,
    config: gguf_config,
    ..llama::gguf_rules("glm4moe")
};

/// QK-norm and q/k/v biases by their tensors, the routing keys (sigmoid when absent, as
/// llama.cpp reads `glm4moe`).
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    _: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    raw["use_qk_norm"] = serde_json::json!(tensors.any_ends_with("self_attn.q_norm.weight"));
    raw["attention_bias"] = serde_json::json!(tensors.has_q_bias);
    deepseek_moe_gguf_keys(meta, raw, true)
}

/// q/k/v biases as `attention_bias` says; o_proj never has one.
fn biases(raw: &RawConfig) -> Biases {
    Biases {
        qkv: raw.attention_bias.unwrap_or(false),
        o: false,
    }
}

/// Glm4MoeConfig's default is 1e-5.
fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

/// `partial_rotary_factor` 0.5 unless the config gives one.
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((
        raw.resolve_rope_with_defaults(path, head_dim, 10000.0, 0.5)?,
        None,
    ))
}

/// Glm4MoeConfig's defaults: 128 experts of 1408, 8 a token, 1 shared, 1 group, scale 1,
/// layers from 1 on.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let defaults = DeepSeekDefaults {
        count: 128,
        top_k: 8,
        intermediate: 1408,
        shared: 1,
        groups: 1,
        topk_group: 1,
        scaling: 1.0,
        first_dense: 1,
    };
    deepseek_experts(raw, dense, path, defaults)
}
