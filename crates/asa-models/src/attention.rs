//! Loads an attention layer's tensors from a checkpoint into [`asa_engine::attention::Attention`]
//! (the math lives there): projections, QK-norm, sinks, Affine-Scaled alpha, LogN scales.

use candle_core::{DType, Tensor};

use super::layers::{linear, projection, rms_norm, weight_matrix, ProjDims};
use super::layout::{Layout, QkvLayout};
use super::weights::WeightStore;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::attention::{Attention, AttentionShape, AttentionWeights, QkvProjections, Variant};
use asa_engine::nn::{Linear, RmsNorm};

/// Loads the attention layer under `prefix` (e.g. `model.layers.3.self_attn`), every
/// tensor's presence and shape checked; q, k and v stored as the layout's `qkv` says, every
/// projection `[in, out]` where it says `conv1d`.
pub fn load_attention(
    store: &WeightStore,
    prefix: &str,
    shape: AttentionShape,
    layout: &Layout,
) -> Result<Attention> {
    let s = &shape;
    let conv1d = layout.conv1d;
    let separate = |(q_proj, k_proj, v_proj)| QkvProjections::Separate {
        q_proj,
        k_proj,
        v_proj,
    };
    let qkv = match layout.qkv {
        QkvLayout::FusedPerHead => separate(split_qkv_per_head(store, prefix, s)?),
        QkvLayout::Fused => separate(split_qkv(store, prefix, s, conv1d)?),
        QkvLayout::Separate => separate(separate_qkv(store, prefix, s)?),
        QkvLayout::Latent => QkvProjections::Latent(super::latent::load(store, prefix, s)?),
    };
    let v_dim = s.latent.map_or(s.head_dim, |l| l.v_dim);
    let o_proj = projection(
        store,
        &format!("{prefix}.o_proj"),
        ProjDims {
            in_dim: s.heads * v_dim,
            out_dim: s.hidden,
        },
        s.o_bias,
        conv1d,
    )?;
    let sink_logits = load_sink_logits(store, prefix, s)?;
    let norms = load_qk_norms(store, prefix, s)?;
    let logn_scale = match s.variant {
        Variant::Logn { scale } => Some(load_logn_scale(store, prefix, s.heads, scale)?),
        _ => None,
    };
    let alpha = load_alpha(store, prefix, s)?;
    let weights = AttentionWeights {
        qkv,
        o_proj,
        q_norm: norms.q,
        k_norm: norms.k,
        sink_logits,
        alpha_proj: alpha.proj,
        alpha_ma: alpha.ma,
        logn_scale,
    };
    Ok(Attention::new(weights, shape))
}

/// The QK-norm scales of a layer (both or neither).
struct QkNorms {
    q: Option<RmsNorm>,
    k: Option<RmsNorm>,
}

/// Affine-Scaled's alpha projection and the moving average of its output (both or neither).
struct Alpha {
    proj: Option<Linear>,
    ma: Option<Tensor>,
}

/// q, k and v from the separate `{prefix}.q_proj`, `k_proj` and `v_proj` (q twice as wide
/// for a gated variant: the gate's rows follow).
fn separate_qkv(
    store: &WeightStore,
    prefix: &str,
    s: &AttentionShape,
) -> Result<(Linear, Linear, Linear)> {
    let q_out = if s.variant.kind().is_gated() { 2 } else { 1 } * s.heads * s.head_dim;
    let kv_out = s.kv_heads * s.head_dim;
    let proj = |name: &str, out: usize| {
        linear(
            store,
            &format!("{prefix}.{name}"),
            ProjDims {
                in_dim: s.hidden,
                out_dim: out,
            },
            s.qkv_bias,
        )
    };
    Ok((
        proj("q_proj", q_out)?,
        proj("k_proj", kv_out)?,
        proj("v_proj", kv_out)?,
    ))
}

/// The sink logits `[1, heads, 1, 1]` f32: the stored `{prefix}.sinks` of a sink layer,
/// zeros for off-by-one, none for the other variants.
fn load_sink_logits(
    store: &WeightStore,
    prefix: &str,
    s: &AttentionShape,
) -> Result<Option<Tensor>> {
    Ok(match s.variant {
        Variant::Sink => Some(
            store
                .get_as(&format!("{prefix}.sinks"), &[s.heads], DType::F32)?
                .reshape((1, s.heads, 1, 1))?,
        ),
        Variant::OffByOne => Some(Tensor::zeros(
            (1, s.heads, 1, 1),
            DType::F32,
            store.device(),
        )?),
        _ => None,
    })
}

/// `{prefix}.q_norm` and `k_norm` when the config asks for QK-norm or the checkpoint has
/// `q_norm.weight`.
fn load_qk_norms(store: &WeightStore, prefix: &str, s: &AttentionShape) -> Result<QkNorms> {
    if s.l2_qk_norm {
        // Llama4TextL2Norm: no stored scale
        let ones = || Tensor::ones(s.head_dim, store.dtype(), store.device());
        return Ok(QkNorms {
            q: Some(RmsNorm::new(ones()?, s.rms_norm_eps)),
            k: Some(RmsNorm::new(ones()?, s.rms_norm_eps)),
        });
    }
    if !(s.qk_norm || store.contains(&format!("{prefix}.q_norm.weight"))) {
        return Ok(QkNorms { q: None, k: None });
    }
    // per head [head_dim], or over the whole projection [heads * head_dim] (OLMo 2)
    let (q_dim, k_dim) = match s.qk_norm_whole {
        true => (s.heads * s.head_dim, s.kv_heads * s.head_dim),
        false => (s.head_dim, s.head_dim),
    };
    let norm = |name: &str, dim: usize| -> Result<RmsNorm> {
        let norm = rms_norm(store, &format!("{prefix}.{name}"), dim, s.rms_norm_eps)?;
        // Gemma 3 stores its QK-norm scales as offsets from 1
        Ok(match s.qk_norm_plus_one {
            true => norm.plus_one(),
            false => norm,
        })
    };
    Ok(QkNorms {
        q: Some(norm("q_norm", q_dim)?),
        k: Some(norm("k_norm", k_dim)?),
    })
}

/// `{prefix}.alpha_proj` (its bias if stored) and `{prefix}.alpha_ma` of an Affine-Scaled
/// layer.
fn load_alpha(store: &WeightStore, prefix: &str, s: &AttentionShape) -> Result<Alpha> {
    if s.variant.affine().is_none() {
        return Ok(Alpha {
            proj: None,
            ma: None,
        });
    }
    let bias = store.contains(&format!("{prefix}.alpha_proj.bias"));
    Ok(Alpha {
        proj: Some(linear(
            store,
            &format!("{prefix}.alpha_proj"),
            ProjDims {
                in_dim: s.hidden,
                out_dim: s.heads,
            },
            bias,
        )?),
        ma: Some(store.get_as(&format!("{prefix}.alpha_ma"), &[s.heads], DType::F32)?),
    })
}

/// s_h `[1, heads, 1, 1]` f32 of a logn layer: the stored `{prefix}.logn_scale` [heads], else
/// config.json's `logn.scale` (`config_scale`) for every head.
fn load_logn_scale(
    store: &WeightStore,
    prefix: &str,
    heads: usize,
    config_scale: Option<f64>,
) -> Result<Tensor> {
    let name = format!("{prefix}.logn_scale");
    let scale = match config_scale {
        Some(value) if !store.contains(&name) => Tensor::full(value as f32, heads, store.device())?,
        _ => store.get_as(&name, &[heads], DType::F32).map_err(|err| {
            err.with_note("logn needs it, or \"logn\": {\"scale\": s} in config.json")
        })?,
    };
    Ok(scale.reshape((1, heads, 1, 1))?)
}

/// q, k and v from the fused `{prefix}.qkv_proj` `[heads * 3 * head_dim, hidden]` (and its
/// bias) whose rows are `[q, k, v]` head by head, as transformers' GPT-NeoX views them
/// (`view(..., heads, 3 * head_dim)` then `chunk(3)`).
fn split_qkv_per_head(
    store: &WeightStore,
    prefix: &str,
    s: &AttentionShape,
) -> Result<(Linear, Linear, Linear)> {
    if s.kv_heads != s.heads || s.variant.kind().is_gated() {
        return Err(Error::checkpoint_problem(
            store.any_file(),
            CheckpointProblem::unimplemented(
                &["num_key_value_heads", "attention_variant"],
                "a fused per-head q/k/v projection needs as many key/value heads as query heads and no gate",
            ),
        ));
    }
    let (h, d) = (s.heads, s.head_dim);
    let weight = store.get(&format!("{prefix}.qkv_proj.weight"), &[h * 3 * d, s.hidden])?;
    let weight = weight.reshape((h, 3, d, s.hidden))?;
    let bias = match s.qkv_bias {
        true => Some(
            store
                .get(&format!("{prefix}.qkv_proj.bias"), &[h * 3 * d])?
                .reshape((h, 3, d))?,
        ),
        false => None,
    };
    let part = |k: usize| -> Result<Linear> {
        let w = weight
            .narrow(1, k, 1)?
            .reshape((h * d, s.hidden))?
            .contiguous()?;
        let b = match &bias {
            Some(b) => Some(b.narrow(1, k, 1)?.reshape(h * d)?.contiguous()?),
            None => None,
        };
        Ok(Linear::new(w, b))
    };
    Ok((part(0)?, part(1)?, part(2)?))
}

/// q, k and v from the fused `{prefix}.qkv_proj` `[(heads + 2 kv_heads) * head_dim, hidden]`
/// whose rows are all of q, then k, then v (Phi-3: `qkv[..., :query_pos]`, ...; GPT-2's
/// `c_attn` stored `[hidden, 3 * hidden]`, `conv1d`, split the same way).
fn split_qkv(
    store: &WeightStore,
    prefix: &str,
    s: &AttentionShape,
    conv1d: bool,
) -> Result<(Linear, Linear, Linear)> {
    if s.variant.kind().is_gated() {
        return Err(Error::checkpoint_problem(
            store.any_file(),
            CheckpointProblem::unimplemented(
                &["attention_variant"],
                "a fused q/k/v projection cannot carry a gated query",
            ),
        ));
    }
    let (q, kv) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let rows = q + 2 * kv;
    let weight = weight_matrix(
        store,
        &format!("{prefix}.qkv_proj.weight"),
        ProjDims {
            in_dim: s.hidden,
            out_dim: rows,
        },
        conv1d,
    )?;
    let bias = match s.qkv_bias {
        true => Some(store.get(&format!("{prefix}.qkv_proj.bias"), &[rows])?),
        false => None,
    };
    let part = |start: usize, len: usize| -> Result<Linear> {
        let b = match &bias {
            Some(b) => Some(b.narrow(0, start, len)?.contiguous()?),
            None => None,
        };
        Ok(Linear::new(weight.narrow(0, start, len)?.contiguous()?, b))
    };
    Ok((part(0, q)?, part(q, kv)?, part(q + kv, kv)?))
}
