//! LFM2's short gated convolution (`Lfm2ShortConv`): `in_proj` gives B, C and x (thirds of
//! its output, in that order); B x goes through a causal depthwise convolution; C gates
//! its output; `out_proj` maps it back.

use candle_core::{Tensor, D};

use super::CausalConv;
use crate::nn::Linear;
use asa_core::error::Result;

/// One layer's short convolution.
pub struct ShortConv {
    in_proj: Linear,
    conv: CausalConv,
    out_proj: Linear,
}

impl ShortConv {
    /// From `in_proj` `[3 hidden, hidden]`, the convolution's `weight` `[hidden, K]` and
    /// `bias`, and `out_proj`.
    pub fn new(
        in_proj: Linear,
        weight: Tensor,
        bias: Option<Tensor>,
        out_proj: Linear,
    ) -> Result<Self> {
        Ok(ShortConv {
            in_proj,
            conv: CausalConv::new(weight, bias)?,
            out_proj,
        })
    }

    /// The mixer's output for `xs` `[batch, T, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let bcx = self.in_proj.forward(xs)?;
        let hidden = bcx.dim(D::Minus1)? / 3;
        let third = |k: usize| bcx.narrow(D::Minus1, k * hidden, hidden);
        let (b, c, x) = (third(0)?, third(1)?, third(2)?);
        let conv = self.conv.forward(&(b * x)?)?;
        self.out_proj.forward(&(c * conv)?)
    }
}
