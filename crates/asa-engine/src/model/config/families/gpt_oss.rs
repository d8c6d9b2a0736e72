//! GPT-OSS: learned attention sinks (`self_attn.sinks`), biases on q/k/v/o, sliding windows
//! on alternate layers, YaRN RoPE, and a mixture of clamped-SwiGLU experts with biases
//! (stacked, or MXFP4) routed by softmax over the top-k logits.

use std::path::Path;

use super::llama;
use crate::model::config::family::{Biases, Family, Ropes};
use crate::model::config::raw::positive;
use crate::model::config::RawConfig;
use crate::model::experts::{f32_factor, DenseSizes, ExpertNames, Experts, RawExperts};
use crate::model::sliding_window::{WindowLayers, WindowRule, WindowUse};
use crate::nn::{ClampedGlu, Routing};
use asa_core::error::Result;

pub(crate) const FAMILY: Family = Family {
    name: "gpt_oss",
    // GptOssConfig's defaults
    default_head_dim: Some(64),
    mxfp4_experts: true,
    biases: attention_bias,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 131_072,
    rope,
    window: WindowRule {
        used: WindowUse::Always,
        default_size: Some(128),
        layers: WindowLayers::EveryOther,
    },
    experts,
    ..llama::FAMILY
};

/// GptOssConfig's attention_bias defaults to true.
fn attention_bias(raw: &RawConfig) -> Biases {
    Biases::all(raw.attention_bias.unwrap_or(true))
}

fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

/// GPT-OSS's RoPE: as given, else GptOssConfig's defaults (theta 150000; YaRN factor 32
/// over 4096 positions, beta_fast 32, beta_slow 1, not truncated).
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    let given = [&raw.rope_parameters, &raw.rope_scaling]
        .iter()
        .any(|v| v.as_ref().is_some_and(|v| !v.is_null()));
    let default = serde_json::json!({
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": false,
        "original_max_position_embeddings": 4096,
    });
    let rope = RawConfig {
        rope_parameters: match given {
            true => raw.rope_parameters.clone(),
            false => Some(default),
        },
        rope_scaling: raw.rope_scaling.clone(),
        rope_theta: Some(raw.rope_theta.unwrap_or(150_000.0)),
        max_position_embeddings: raw.max_position_embeddings,
        original_max_position_embeddings: raw.original_max_position_embeddings,
        partial_rotary_factor: raw.partial_rotary_factor,
        ..RawConfig::default()
    }
    .resolve_rope(path, head_dim)?;
    Ok((rope, None))
}

/// GptOssConfig's defaults: 128 experts, top 4, alpha 1.702, limit 7.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let DenseSizes {
        num_layers,
        intermediate_size,
    } = dense;
    Ok(Some(Experts {
        count: raw.num_local_experts.or(raw.num_experts).unwrap_or(128),
        top_k: raw.num_experts_per_tok.unwrap_or(4),
        routing: Routing::TopKSoftmax,
        clamped: Some(ClampedGlu {
            alpha: f32_factor(raw.swiglu_alpha.unwrap_or(1.702), "swiglu_alpha", path)?,
            limit: positive(raw.swiglu_limit.unwrap_or(7.0), "swiglu_limit", path)?,
        }),
        intermediate: intermediate_size,
        layers: (0..num_layers).collect(),
        names: ExpertNames::GptOss,
        shared_intermediate: None,
    }))
}
