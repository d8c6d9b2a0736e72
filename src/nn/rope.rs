//! Rotary position embeddings applied in Hugging Face's rotate-half convention (or on
//! interleaved pairs, Llama 4's complex rotation), from cos/sin tables of given inverse
//! frequencies (`model::rope` derives them from config.json).

use candle_core::{DType, Device, Tensor};

use crate::error::Result;

/// cos/sin tables for positions `0..seq_len`, ready to apply.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    rot_dim: usize,
    /// Pair k is dims (2k, 2k + 1) (Llama 4's `view_as_complex`) rather than (k, k + d/2).
    interleaved: bool,
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
            interleaved: false,
        })
    }

    /// The same tables rotating interleaved pairs (dims 2k and 2k + 1) when `interleaved`.
    pub fn with_interleaved_pairs(self, interleaved: bool) -> Self {
        Rope {
            interleaved,
            ..self
        }
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
            use candle_nn::rotary_emb::{rope, rope_i, rope_i_slow, rope_slow};
            let (cos, sin) = (&self.cos, &self.sin);
            Ok(match (x.track_op(), self.interleaved) {
                (true, false) => rope_slow(x, cos, sin)?,
                (false, false) => rope(x, cos, sin)?,
                (true, true) => rope_i_slow(x, cos, sin)?,
                (false, true) => rope_i(x, cos, sin)?,
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
