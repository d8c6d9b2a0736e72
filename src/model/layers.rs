//! Loads the building blocks of [`crate::nn`] from a [`WeightStore`] by their checkpoint
//! names, checking every shape.

use super::weights::WeightStore;
use crate::error::Result;
use crate::nn::{Linear, Mlp, RmsNorm};

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

/// `{prefix}.weight` `[dim]`.
pub fn rms_norm(store: &WeightStore, prefix: &str, dim: usize, eps: f64) -> Result<RmsNorm> {
    Ok(RmsNorm::new(
        store.get(&format!("{prefix}.weight"), &[dim])?,
        eps,
    ))
}

/// `{prefix}.{gate,up,down}_proj`.
pub fn mlp(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    intermediate: usize,
    bias: bool,
) -> Result<Mlp> {
    let proj = |name: &str, from: usize, to: usize| {
        linear(store, &format!("{prefix}.{name}"), from, to, bias)
    };
    Ok(Mlp::new(
        proj("gate_proj", hidden, intermediate)?,
        proj("up_proj", hidden, intermediate)?,
        proj("down_proj", intermediate, hidden)?,
    ))
}
