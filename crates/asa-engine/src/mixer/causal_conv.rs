//! A causal depthwise convolution over time: each channel convolved with its own kernel of
//! width K over the positions up to its own (zeros before the first), as transformers'
//! `causal_conv1d_fn` fallback computes it (`F.conv1d` with K - 1 positions of padding,
//! the first T outputs kept).

use candle_core::{DType, Tensor, D};

use asa_core::error::{Error, Result};

/// Per channel c: `y[t, c] = bias[c] + sum_k w[c, k] x[t - (K - 1) + k, c]`.
pub struct CausalConv {
    /// `[channels, K]`, f32.
    weight: Tensor,
    /// `[channels]`, f32.
    bias: Option<Tensor>,
}

impl CausalConv {
    /// A convolution of `weight` `[channels, K]` and `bias` `[channels]`.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let (_, k) = weight.dims2()?;
        if k == 0 {
            return Err(Error::usage("a causal convolution of width 0"));
        }
        Ok(CausalConv {
            weight: weight.to_dtype(DType::F32)?,
            bias: bias.map(|b| b.to_dtype(DType::F32)).transpose()?,
        })
    }

    /// `xs` `[batch, T, channels]` convolved (in f32, returned in `xs`'s dtype).
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let (_, t, _) = xs.dims3()?;
        let k = self.weight.dim(1)?;
        let padded = xs.to_dtype(DType::F32)?.pad_with_zeros(1, k - 1, 0)?;
        let mut out = match &self.bias {
            Some(bias) => bias
                .reshape((1, 1, ()))?
                .broadcast_as(padded.narrow(1, 0, t)?.shape())?
                .contiguous()?,
            None => Tensor::zeros(padded.narrow(1, 0, t)?.shape(), DType::F32, xs.device())?,
        };
        for j in 0..k {
            let tap = self.weight.narrow(D::Minus1, j, 1)?.squeeze(D::Minus1)?;
            out = (out
                + padded
                    .narrow(1, j, t)?
                    .broadcast_mul(&tap.reshape((1, 1, ()))?)?)?;
        }
        Ok(out.to_dtype(xs.dtype())?)
    }
}
