//! Loads the building blocks of [`crate::nn`] from a [`WeightStore`] by their checkpoint
//! names, checking every shape.

use super::experts::Experts;
use super::layout::{MlpKind, NormKind};
use super::weights::WeightStore;
use crate::error::Result;
use crate::nn::{Linear, Mlp, MoeMlp, Norm, RmsNorm};

/// `{prefix}.weight` `[out, in]` and, when `bias`, `{prefix}.bias` `[out]`.
pub fn linear(
    store: &WeightStore,
    prefix: &str,
    in_dim: usize,
    out_dim: usize,
    bias: bool,
) -> Result<Linear> {
    let weight = store.get(&format!("{prefix}.weight"), &[out_dim, in_dim])?;
    let bias = if bias {
        Some(store.get(&format!("{prefix}.bias"), &[out_dim])?)
    } else {
        None
    };
    Ok(Linear::new(weight, bias))
}

/// The weight `name` as `[out, in]`: stored so, or stored `[in, out]` (GPT-2's Conv1D,
/// `conv1d`) and transposed.
pub fn weight_matrix(
    store: &WeightStore,
    name: &str,
    (out_dim, in_dim): (usize, usize),
    conv1d: bool,
) -> Result<candle_core::Tensor> {
    Ok(match conv1d {
        false => store.get(name, &[out_dim, in_dim])?,
        true => store.get(name, &[in_dim, out_dim])?.t()?.contiguous()?,
    })
}

/// A projection `{prefix}.weight` (see [`weight_matrix`]) and, when `bias`, `{prefix}.bias`.
pub fn projection(
    store: &WeightStore,
    prefix: &str,
    (in_dim, out_dim): (usize, usize),
    bias: bool,
    conv1d: bool,
) -> Result<Linear> {
    let weight = weight_matrix(
        store,
        &format!("{prefix}.weight"),
        (out_dim, in_dim),
        conv1d,
    )?;
    let bias = match bias {
        true => Some(store.get(&format!("{prefix}.bias"), &[out_dim])?),
        false => None,
    };
    Ok(Linear::new(weight, bias))
}

/// `{prefix}.weight` `[dim]`.
pub fn rms_norm(store: &WeightStore, prefix: &str, dim: usize, eps: f64) -> Result<RmsNorm> {
    Ok(RmsNorm::new(
        store.get(&format!("{prefix}.weight"), &[dim])?,
        eps,
    ))
}

/// A layer's norm `{prefix}.weight` `[dim]` (and `{prefix}.bias` for LayerNorm).
pub fn norm(
    store: &WeightStore,
    prefix: &str,
    dim: usize,
    eps: f64,
    kind: NormKind,
) -> Result<Norm> {
    Ok(match kind {
        NormKind::Rms => Norm::Rms(rms_norm(store, prefix, dim, eps)?),
        // (1 + w) in the weights' dtype, as Gemma's norm computes it
        NormKind::RmsPlusOne => Norm::Rms(RmsNorm::new(
            (store.get(&format!("{prefix}.weight"), &[dim])? + 1.0)?,
            eps,
        )),
        NormKind::Layer => Norm::layer(
            store.get(&format!("{prefix}.weight"), &[dim])?,
            store.get(&format!("{prefix}.bias"), &[dim])?,
            eps,
        ),
    })
}

/// `{prefix}.{gate,up,down}_proj` (SwiGLU; gate and up as one `gate_up_proj`, gate rows
/// first, when `fused_gate_up`) or `{prefix}.{up,down}_proj` (GELU).
pub fn mlp(
    store: &WeightStore,
    prefix: &str,
    (hidden, intermediate): (usize, usize),
    bias: bool,
    (kind, fused_gate_up, conv1d): (MlpKind, bool, bool),
) -> Result<Mlp> {
    let proj = |name: &str, from: usize, to: usize| {
        projection(store, &format!("{prefix}.{name}"), (from, to), bias, conv1d)
    };
    if kind == MlpKind::SwiGlu && fused_gate_up {
        let both = proj("gate_up_proj", hidden, 2 * intermediate)?;
        let (gate, up) = both.split_rows(intermediate)?;
        return Ok(Mlp::new(gate, up, proj("down_proj", intermediate, hidden)?));
    }
    // read in the order of the names, so that a shape error names the first
    let gate = match kind {
        MlpKind::SwiGlu | MlpKind::GeGluTanh => Some(proj("gate_proj", hidden, intermediate)?),
        MlpKind::Gelu | MlpKind::GeluTanh => None,
    };
    let up = proj("up_proj", hidden, intermediate)?;
    let down = proj("down_proj", intermediate, hidden)?;
    Ok(match gate {
        Some(gate) if kind == MlpKind::GeGluTanh => Mlp::geglu(gate, up, down),
        Some(gate) => Mlp::new(gate, up, down),
        None => Mlp::gelu(up, down, kind == MlpKind::GeluTanh),
    })
}

/// Mixtral's `{prefix}.gate` router `[experts, hidden]` and `{prefix}.experts.{e}.w1` (gate),
/// `w3` (up), `w2` (down).
pub fn moe_mlp(
    store: &WeightStore,
    layer_prefix: &str,
    hidden: usize,
    experts: &Experts,
) -> Result<MoeMlp> {
    let prefix = format!("{layer_prefix}.{}", experts.names.block());
    let router = linear(
        store,
        &format!("{prefix}.gate"),
        hidden,
        experts.count,
        false,
    )?;
    let [gate, up, down] = experts.names.projections();
    let intermediate = experts.intermediate;
    let experts_mlp = (0..experts.count)
        .map(|e| {
            let proj = |name: &str, from: usize, to: usize| {
                linear(
                    store,
                    &format!("{prefix}.experts.{e}.{name}"),
                    from,
                    to,
                    false,
                )
            };
            Ok(Mlp::new(
                proj(gate, hidden, intermediate)?,
                proj(up, hidden, intermediate)?,
                proj(down, intermediate, hidden)?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(MoeMlp::new(
        router,
        experts_mlp,
        (experts.top_k, experts.renormalise),
    ))
}
