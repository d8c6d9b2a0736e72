//! GLM-4.5 (`glm4_moe`): the Llama layout with q/k/v biases by `attention_bias` (never on
//! o_proj), per-head QK-norm before RoPE where the checkpoint has it (`use_qk_norm`), partial
//! RoPE (`partial_rotary_factor` 0.5 by default: the first half of each head rotates,
//! halves split within it), and from layer `first_k_dense_replace` on a mixture of
//! `n_routed_experts` experts of `moe_intermediate_size` beside `n_shared_experts` shared
//! ones, routed as DeepSeek-V3 routes (sigmoid scores, a score-correction bias that only
//! chooses, group-limited top-k, renormalised by `norm_topk_prob`, times
//! `routed_scaling_factor`).

use std::path::Path;

use super::llama;
use crate::error::{Error, Result};
use crate::model::config::family::{Biases, Family, Ropes};
use crate::model::config::RawConfig;
use crate::model::experts::{DenseSizes, ExpertNames, Experts, RawExperts};
use crate::nn::Routing;

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
    deepseek_experts(raw, dense, path, DeepSeekDefaults::GLM4_MOE)
}

/// The class defaults of a DeepSeek-style mixture of experts.
pub(crate) struct DeepSeekDefaults {
    pub count: usize,
    pub top_k: usize,
    pub intermediate: usize,
    pub shared: usize,
    pub groups: usize,
    pub topk_group: usize,
    pub scaling: f64,
}

impl DeepSeekDefaults {
    const GLM4_MOE: DeepSeekDefaults = DeepSeekDefaults {
        count: 128,
        top_k: 8,
        intermediate: 1408,
        shared: 1,
        groups: 1,
        topk_group: 1,
        scaling: 1.0,
    };
}

/// DeepSeek-V3's and GLM-4.5's experts: dense layers before `first_k_dense_replace`, then
/// routed experts (`mlp.experts.{e}`) with shared ones (`mlp.shared_experts`, all of them one
/// MLP of `n_shared_experts` x `moe_intermediate_size`), group-limited sigmoid routing.
pub(crate) fn deepseek_experts(
    raw: &RawExperts,
    dense: DenseSizes,
    path: &Path,
    defaults: DeepSeekDefaults,
) -> Result<Option<Experts>> {
    for (key, value, implemented) in [
        ("topk_method", raw.topk_method, "noaux_tc"),
        ("scoring_func", raw.scoring_func, "sigmoid"),
    ] {
        if let Some(other) = value.filter(|v| *v != implemented) {
            return Err(Error::input(
                path,
                format!("{key} `{other}` is not implemented (supported: {implemented})"),
            ));
        }
    }
    let count = raw
        .n_routed_experts
        .or(raw.num_local_experts)
        .unwrap_or(defaults.count);
    let groups = raw.n_group.unwrap_or(defaults.groups);
    let topk_group = raw.topk_group.unwrap_or(defaults.topk_group);
    if groups == 0 || !count.is_multiple_of(groups) || topk_group == 0 || topk_group > groups {
        return Err(Error::input(
            path,
            format!("n_group {groups} must divide the {count} routed experts and topk_group {topk_group} be between 1 and n_group"),
        ));
    }
    // each group's score is the sum of its two best experts'
    if count / groups < 2 {
        return Err(Error::input(
            path,
            format!("n_group {groups} leaves fewer than 2 experts a group (transformers takes each group's top 2)"),
        ));
    }
    let scaling = crate::model::experts::finite(
        raw.routed_scaling_factor.unwrap_or(defaults.scaling),
        "routed_scaling_factor",
        path,
    )?;
    let intermediate = raw.moe_intermediate_size.unwrap_or(defaults.intermediate);
    let shared = raw.n_shared_experts.unwrap_or(defaults.shared);
    let first_moe = raw.first_k_dense_replace.unwrap_or(1);
    Ok(Some(Experts {
        count,
        top_k: raw.num_experts_per_tok.unwrap_or(defaults.top_k),
        routing: Routing::GroupLimitedSigmoid {
            groups,
            topk_group,
            renormalise: raw.norm_topk_prob.unwrap_or(true),
            scaling,
        },
        clamped: None,
        intermediate,
        layers: (first_moe..dense.num_layers).collect(),
        names: ExpertNames::DeepSeek,
        shared_intermediate: (shared > 0).then_some(shared * intermediate),
    }))
}
