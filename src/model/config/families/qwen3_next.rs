//! Qwen3-Next: Gated DeltaNet layers (`linear_attn`) and gated attention layers (`q_proj`
//! holds each head's query and its output gate: the `gated` variant) by `layer_types`
//! (else every `full_attention_interval`-th layer, 4 by default, is attention),
//! zero-centred RMSNorms (1 + w) everywhere but the DeltaNet's gated norm, per-head QK-norm,
//! partial RoPE (`partial_rotary_factor` 0.25 by default), `head_dim` 256 by default, and
//! Qwen's experts with one shared expert behind a sigmoid gate.

use std::path::Path;

use super::qwen3_moe::{qwen_experts, QwenDefaults};
use super::{llama, qwen3};
use crate::error::{Error, Result};
use crate::model::config::family::{Family, Ropes};
use crate::model::config::RawConfig;
use crate::model::experts::{DenseSizes, ExpertNames, Experts, RawExperts};
use crate::model::layout::{Layout, NormKind};
use crate::model::mixers::{DeltaNetShape, Mixer};
use crate::model::sliding_window::checked_layer_types;

pub(crate) const FAMILY: Family = Family {
    name: "qwen3_next",
    default_head_dim: Some(256),
    check,
    default_max_position_embeddings: 32768,
    layout,
    rope,
    // no sliding window: layer_types names the mixers
    window: llama::FAMILY.window,
    mixers,
    experts,
    ..qwen3::FAMILY
};

/// The layer types Qwen3NextModel masks by.
const LAYER_TYPES: [&str; 2] = ["linear_attention", "full_attention"];

/// Qwen3-Next's norms are zero-centred: (1 + w).
fn layout(raw: &RawConfig) -> Layout {
    Layout {
        norm: NormKind::RmsPlusOne,
        ..(llama::FAMILY.layout)(raw)
    }
}

/// Qwen3NextConfig's `default_theta` 1e4 and partial rotary factor 0.25.
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((
        raw.resolve_rope_with_defaults(path, head_dim, 10_000.0, 0.25)?,
        None,
    ))
}

/// The Gated DeltaNet's sizes (Qwen3NextConfig's defaults: 16 key heads, 32 value heads,
/// both 128 wide, a convolution of 4).
fn delta_net(raw: &RawConfig) -> DeltaNetShape {
    let h = &raw.hybrid;
    DeltaNetShape {
        key_heads: h.linear_num_key_heads.unwrap_or(16),
        value_heads: h.linear_num_value_heads.unwrap_or(32),
        key_dim: h.linear_key_head_dim.unwrap_or(128),
        value_dim: h.linear_value_head_dim.unwrap_or(128),
        conv_kernel: h.linear_conv_kernel_dim.unwrap_or(4),
    }
}

/// Refuses DeltaNet sizes the layer cannot be viewed with.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let s = delta_net(raw);
    let sizes = [
        ("linear_num_key_heads", s.key_heads),
        ("linear_num_value_heads", s.value_heads),
        ("linear_key_head_dim", s.key_dim),
        ("linear_value_head_dim", s.value_dim),
        ("linear_conv_kernel_dim", s.conv_kernel),
        (
            "full_attention_interval",
            raw.hybrid.full_attention_interval.unwrap_or(4),
        ),
    ];
    if let Some((key, _)) = sizes.iter().find(|(_, size)| *size == 0) {
        return Err(Error::input(path, format!("{key} must be at least 1")));
    }
    if !s.value_heads.is_multiple_of(s.key_heads) {
        return Err(Error::input(
            path,
            format!(
                "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                s.value_heads, s.key_heads
            ),
        ));
    }
    Ok(())
}

/// `linear_attention` layers are Gated DeltaNet, `full_attention` ones attention: by
/// `layer_types`, else attention on every `full_attention_interval`-th layer.
fn mixers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<Vec<Mixer>> {
    let net = Mixer::GatedDeltaNet(delta_net(raw));
    let types = checked_layer_types(raw.layer_types.as_deref(), num_layers, &LAYER_TYPES, path)?;
    let interval = raw.hybrid.full_attention_interval.unwrap_or(4);
    Ok((0..num_layers)
        .map(|l| {
            let attention = match types {
                Some(types) => types[l] == "full_attention",
                None => (l + 1) % interval == 0,
            };
            if attention {
                Mixer::Attention
            } else {
                net
            }
        })
        .collect())
}

/// Qwen3NextConfig's defaults: 512 experts of 512, top 10, renormalised, a shared expert
/// of 512 (`shared_expert_intermediate_size`).
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let defaults = QwenDefaults {
        count: 512,
        top_k: 10,
        intermediate: 512,
        shared_intermediate: 512,
        renormalise: true,
    };
    qwen_experts(raw, dense, path, defaults, ExpertNames::QwenShared)
}
