//! Rotary position embeddings applied in Hugging Face's rotate-half convention, from
//! cos/sin tables of given inverse frequencies (`model::rope` derives them from config.json).

use candle_core::{DType, Device, Tensor};

use crate::error::Result;

/// cos/sin tables for positions `0..seq_len`, ready to apply.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    rot_dim: usize,
}

impl Rope {
    /// Tables for `seq_len` positions of the inverse frequencies `inv` (one per rotating
    /// pair), computed in f64 and cast to `dtype`; kept in f32 for bf16 and f16, whose
    /// rotation then runs in f32 and rounds once ([`Rope::apply`]).
    pub fn new(inv: &[f64], seq_len: usize, dtype: DType, device: &Device) -> Result<Self> {
        Self::scaled(inv, seq_len, 1.0, dtype, device)
    }

    /// [`Rope::new`] with cos and sin multiplied by `scale` (YaRN's attention factor).
    pub fn scaled(
        inv: &[f64],
        seq_len: usize,
        scale: f64,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let half = inv.len();
        let mut cos = Vec::with_capacity(seq_len * half);
        let mut sin = Vec::with_capacity(seq_len * half);
        for pos in 0..seq_len {
            for f in inv {
                let angle = pos as f64 * f;
                cos.push(angle.cos() * scale);
                sin.push(angle.sin() * scale);
            }
        }
        let dtype = match dtype {
            DType::BF16 | DType::F16 => DType::F32,
            other => other,
        };
        let cos = Tensor::from_vec(cos, (seq_len, half), device)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, (seq_len, half), device)?.to_dtype(dtype)?;
        Ok(Rope {
            cos,
            sin,
            rot_dim: 2 * half,
        })
    }

    /// Rotates `xs` `[batch, heads, seq, head_dim]`. The fused kernel has no backward pass,
    /// so when gradients are tracked (training) the rotate-half formula runs as tensor ops.
    /// bf16 and f16 values are rotated in f32 with the f32 tables and rounded once (torch
    /// rounds the tables to the half type and each product and sum).
    pub fn apply(&self, xs: &Tensor) -> Result<Tensor> {
        let (_, _, _, head_dim) = xs.dims4()?;
        if self.rot_dim == 0 {
            return Ok(xs.clone());
        }
        if xs.dtype() != self.cos.dtype() {
            let wide = self.apply(&xs.to_dtype(self.cos.dtype())?)?;
            return Ok(wide.to_dtype(xs.dtype())?);
        }
        let rope = |x: &Tensor| -> Result<Tensor> {
            Ok(if x.track_op() {
                candle_nn::rotary_emb::rope_slow(x, &self.cos, &self.sin)?
            } else {
                candle_nn::rotary_emb::rope(x, &self.cos, &self.sin)?
            })
        };
        if self.rot_dim == head_dim {
            return rope(&xs.contiguous()?);
        }
        let rot = xs.narrow(3, 0, self.rot_dim)?.contiguous()?;
        let pass = xs.narrow(3, self.rot_dim, head_dim - self.rot_dim)?;
        let rot = rope(&rot)?;
        Ok(Tensor::cat(&[&rot, &pass], 3)?)
    }
}
