//! Loads an attention layer's tensors from a checkpoint into [`crate::attention::Attention`]
//! (the math lives there): projections, QK-norm, sinks, Affine-Scaled alpha, LogN scales.

use candle_core::{DType, Tensor};

use super::layers::{linear, rms_norm};
use super::weights::WeightStore;
use crate::attention::{Attention, AttentionShape, AttentionWeights, VariantKind};
use crate::error::{Error, Result};

/// Loads the attention layer under `prefix` (e.g. `model.layers.3.self_attn`), every
/// tensor's presence and shape checked.
pub fn load_attention(
    store: &WeightStore,
    prefix: &str,
    shape: AttentionShape,
) -> Result<Attention> {
    let s = &shape;
    let q_out = if s.variant.is_gated() { 2 } else { 1 } * s.heads * s.head_dim;
    let kv_out = s.kv_heads * s.head_dim;
    let q_proj = linear(
        store,
        &format!("{prefix}.q_proj"),
        s.hidden,
        q_out,
        s.qkv_bias,
    )?;
    let k_proj = linear(
        store,
        &format!("{prefix}.k_proj"),
        s.hidden,
        kv_out,
        s.qkv_bias,
    )?;
    let v_proj = linear(
        store,
        &format!("{prefix}.v_proj"),
        s.hidden,
        kv_out,
        s.qkv_bias,
    )?;
    let o_proj = linear(
        store,
        &format!("{prefix}.o_proj"),
        s.heads * s.head_dim,
        s.hidden,
        s.o_bias,
    )?;
    let sink_logits = match s.variant {
        VariantKind::Sink => Some(
            store
                .get_as(&format!("{prefix}.sinks"), &[s.heads], DType::F32)?
                .reshape((1, s.heads, 1, 1))?,
        ),
        VariantKind::OffByOne => Some(Tensor::zeros(
            (1, s.heads, 1, 1),
            DType::F32,
            store.device(),
        )?),
        _ => None,
    };
    let (q_norm, k_norm) = if s.qk_norm || store.contains(&format!("{prefix}.q_norm.weight")) {
        let norm = |name: &str| {
            rms_norm(
                store,
                &format!("{prefix}.{name}"),
                s.head_dim,
                s.rms_norm_eps,
            )
        };
        (Some(norm("q_norm")?), Some(norm("k_norm")?))
    } else {
        (None, None)
    };
    let logn_scale = match s.variant {
        VariantKind::Logn => Some(load_logn_scale(store, prefix, s)?),
        _ => None,
    };
    let (alpha_proj, alpha_ma) = if s.variant.is_affine() {
        let bias = store.contains(&format!("{prefix}.alpha_proj.bias"));
        (
            Some(linear(
                store,
                &format!("{prefix}.alpha_proj"),
                s.hidden,
                s.heads,
                bias,
            )?),
            Some(store.get_as(&format!("{prefix}.alpha_ma"), &[s.heads], DType::F32)?),
        )
    } else {
        (None, None)
    };
    let weights = AttentionWeights {
        q_proj,
        k_proj,
        v_proj,
        o_proj,
        q_norm,
        k_norm,
        sink_logits,
        alpha_proj,
        alpha_ma,
        logn_scale,
    };
    Ok(Attention::new(weights, shape))
}

/// s_h `[1, heads, 1, 1]` f32 of a logn layer: the stored `{prefix}.logn_scale` [heads], else
/// config.json's `logn.scale` for every head.
fn load_logn_scale(store: &WeightStore, prefix: &str, s: &AttentionShape) -> Result<Tensor> {
    let name = format!("{prefix}.logn_scale");
    let scale = match s.logn_scale {
        Some(value) if !store.contains(&name) => {
            Tensor::full(value as f32, s.heads, store.device())?
        }
        _ => store
            .get_as(&name, &[s.heads], DType::F32)
            .map_err(|err| match err {
                Error::Input { path, message } => Error::Input {
                    path,
                    message: format!(
                        "{message} (logn needs it, or \"logn\": {{\"scale\": s}} in config.json)"
                    ),
                },
                other => other,
            })?,
    };
    Ok(scale.reshape((1, s.heads, 1, 1))?)
}
