//! GLM-4.5 (`glm4_moe`): the Llama layout with q/k/v biases by `attention_bias` (never on
//! o_proj), per-head QK-norm before RoPE where the checkpoint has it (`use_qk_norm`), partial
//! RoPE (`partial_rotary_factor` 0.5 by default: the first half of each head rotates,
//! halves split within it), and from layer `first_k_dense_replace` on a mixture of
//! `n_routed_experts` experts of `moe_intermediate_size` beside `n_shared_experts` shared
//! ones, routed as DeepSeek-V3 routes (sigmoid scores, a score-correction bias that only
//! chooses, group-limited top-k, renormalised by `norm_topk_prob`, times
//! `routed_scaling_factor`).

use std::path::Path;

use super::deepseek_v3::{deepseek_experts, DeepSeekDefaults};
use super::llama;
use crate::error::Result;
use crate::model::config::family::{Biases, Family, Ropes};
use crate::model::config::RawConfig;
use crate::model::experts::{DenseSizes, Experts, RawExperts};

pub(crate) const FAMILY: Family = Family {
    name: "glm4_moe",
    biases,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 131072,
    rope,
    experts,
    ..llama::FAMILY
};

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
