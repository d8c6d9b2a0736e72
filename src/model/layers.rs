//! Small building blocks loaded from a [`WeightStore`]: linear projections, RMSNorm, the
//! SwiGLU MLP.

use candle_core::{Module, Tensor};

use super::weights::WeightStore;
use crate::error::Result;

/// `y = x W^T (+ b)`, weights `[out, in]`.
pub struct Linear {
    inner: candle_nn::Linear,
}

impl Linear {
    /// Loads `{prefix}.weight` `[out, in]` and, when `bias`, `{prefix}.bias` `[out]`.
    pub fn load(
        store: &WeightStore,
        prefix: &str,
        in_dim: usize,
        out_dim: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = store.get(&format!("{prefix}.weight"), &[out_dim, in_dim])?;
        let bias = if bias {
            Some(store.get(&format!("{prefix}.bias"), &[out_dim])?)
        } else {
            None
        };
        Ok(Linear {
            inner: candle_nn::Linear::new(weight, bias),
        })
    }

    /// A projection from an already-loaded weight (e.g. tied embeddings).
    pub fn from_weight(weight: Tensor) -> Self {
        Linear {
            inner: candle_nn::Linear::new(weight, None),
        }
    }

    /// Applies the projection to `[..., in]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(self.inner.forward(xs)?)
    }
}

/// Root-mean-square normalisation with a learned scale.
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    /// Loads `{prefix}.weight` `[dim]`.
    pub fn load(store: &WeightStore, prefix: &str, dim: usize, eps: f64) -> Result<Self> {
        Ok(RmsNorm {
            weight: store.get(&format!("{prefix}.weight"), &[dim])?,
            eps: eps as f32,
        })
    }

    /// Normalises the last dimension. The fused kernel has no backward pass, so when
    /// gradients are tracked (training) the same formula runs as differentiable tensor ops.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        if xs.track_op() || self.weight.track_op() {
            return Ok(candle_nn::ops::rms_norm_slow(xs, &self.weight, self.eps)?);
        }
        Ok(candle_nn::ops::rms_norm(
            &xs.contiguous()?,
            &self.weight,
            self.eps,
        )?)
    }
}

/// SwiGLU MLP: `down(silu(gate(x)) * up(x))`.
pub struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

impl Mlp {
    /// Loads `{prefix}.{gate,up,down}_proj`.
    pub fn load(
        store: &WeightStore,
        prefix: &str,
        hidden: usize,
        intermediate: usize,
        bias: bool,
    ) -> Result<Self> {
        Ok(Mlp {
            gate_proj: Linear::load(
                store,
                &format!("{prefix}.gate_proj"),
                hidden,
                intermediate,
                bias,
            )?,
            up_proj: Linear::load(
                store,
                &format!("{prefix}.up_proj"),
                hidden,
                intermediate,
                bias,
            )?,
            down_proj: Linear::load(
                store,
                &format!("{prefix}.down_proj"),
                intermediate,
                hidden,
                bias,
            )?,
        })
    }

    /// Applies the MLP to `[batch, seq, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let gate = candle_nn::ops::silu(&self.gate_proj.forward(xs)?)?;
        let up = self.up_proj.forward(xs)?;
        self.down_proj.forward(&(gate * up)?)
    }
}
