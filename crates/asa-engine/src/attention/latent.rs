//! Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): queries through a low-rank
//! projection with its own RMSNorm (or one projection), keys and values from one compressed
//! latent per token (`kv_a_proj_with_mqa`: the latent and one rotary key shared by every
//! head; the latent RMS-normalised and expanded by `kv_b_proj` into each head's non-rotary
//! key and value). Each head's q and k are `[nope, rope]`: q.k = q_nope.k_nope +
//! q_rope.k_rope; RoPE turns the last `rope_dim` dims (`crate::nn::Rope`). The math is
//! transformers' `DeepseekV3Attention`.

use candle_core::Tensor;

use crate::nn::{Linear, RmsNorm};
use asa_core::error::Result;

/// The epsilon of the latent RMSNorms: `DeepseekV3RMSNorm`'s default, which transformers
/// builds `q_a_layernorm` and `kv_a_layernorm` with (not `rms_norm_eps`).
pub const LATENT_NORM_EPS: f64 = 1e-6;

/// The sizes of a latent attention layer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatentShape {
    /// The queries' rank (`q_lora_rank`); `None`: one `q_proj`.
    pub q_rank: Option<usize>,
    /// The keys' and values' latent (`kv_lora_rank`).
    pub kv_rank: usize,
    /// Each head's non-rotary and rotary q/k dims (`qk_nope_head_dim`, `qk_rope_head_dim`).
    pub nope_dim: usize,
    pub rope_dim: usize,
    /// Each head's value (`v_head_dim`).
    pub v_dim: usize,
    /// The softmax scale: (nope + rope)^-1/2, times YaRN's mscale^2 where the config has
    /// `mscale_all_dim` (`yarn_apply_mscale`).
    pub softmax_scale: f64,
}

impl LatentShape {
    /// Each head's q and k dims.
    pub fn qk_dim(&self) -> usize {
        self.nope_dim + self.rope_dim
    }
}

/// How the queries are made.
pub enum LatentQuery {
    /// `q_proj` `[heads * qk, hidden]`.
    Direct(Linear),
    /// `q_b_proj(q_a_layernorm(q_a_proj(x)))`.
    LowRank {
        down: Linear,
        norm: RmsNorm,
        up: Linear,
    },
}

/// A latent attention layer's projections (o_proj aside).
pub struct LatentProjections {
    pub query: LatentQuery,
    /// `kv_a_proj_with_mqa` `[kv_rank + rope_dim, hidden]`: the latent, then the rotary key.
    pub kv_down: Linear,
    pub kv_norm: RmsNorm,
    /// `kv_b_proj` `[heads * (nope + v), kv_rank]`: per head the non-rotary key, then the value.
    pub kv_up: Linear,
    pub shape: LatentShape,
    pub heads: usize,
}

impl LatentProjections {
    /// q `[b, t, heads, qk]`, k `[b, t, heads, qk]` (before RoPE: the rotary key shared by
    /// every head in the last `rope_dim` dims) and v `[b, t, heads, qk]` (each head's value
    /// in its first `v_dim` dims, zeros after: the kernels take one head dim; the output is
    /// narrowed back) of `xs` `[b, t, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let LatentShape {
            kv_rank,
            nope_dim,
            rope_dim,
            v_dim,
            ..
        } = self.shape;
        let (b, t, _) = xs.dims3()?;
        let h = self.heads;
        let q = match &self.query {
            LatentQuery::Direct(q_proj) => q_proj.forward(xs)?,
            LatentQuery::LowRank { down, norm, up } => {
                up.forward(&norm.forward(&down.forward(xs)?)?)?
            }
        };
        let q = q.reshape((b, t, h, self.shape.qk_dim()))?;
        let compressed = self.kv_down.forward(xs)?;
        let latent = self
            .kv_norm
            .forward(&compressed.narrow(2, 0, kv_rank)?.contiguous()?)?;
        let k_rope = compressed
            .narrow(2, kv_rank, rope_dim)?
            .reshape((b, t, 1, rope_dim))?
            .broadcast_as((b, t, h, rope_dim))?;
        let kv = self
            .kv_up
            .forward(&latent)?
            .reshape((b, t, h, nope_dim + v_dim))?;
        let k = Tensor::cat(&[&kv.narrow(3, 0, nope_dim)?, &k_rope.contiguous()?], 3)?;
        let v = kv.narrow(3, nope_dim, v_dim)?;
        // the loader refuses v_dim > qk_dim
        let pad = self.shape.qk_dim() - v_dim;
        let v = match pad {
            0 => v.contiguous()?,
            _ => {
                let zeros = Tensor::zeros((b, t, h, pad), v.dtype(), v.device())?;
                Tensor::cat(&[&v, &zeros], 3)?
            }
        };
        Ok((q, k, v))
    }
}
