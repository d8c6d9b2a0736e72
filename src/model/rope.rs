//! Rotary position embeddings in Hugging Face's rotate-half convention: default RoPE,
//! Llama-3 frequency scaling, and `partial_rotary_factor` (only the first fraction of
//! each head's dimensions rotates).

use candle_core::{DType, Device, Tensor};

use super::config::{RopeConfig, RopeScaling};
use crate::error::Result;

/// The inverse frequencies theta_k of one head, `rot_dim / 2` values (before scaling).
pub fn inverse_frequencies(rope: &RopeConfig, head_dim: usize) -> Vec<f64> {
    let rot_dim = rotary_dim(rope, head_dim);
    let base: Vec<f64> = (0..rot_dim / 2)
        .map(|k| 1.0 / rope.theta.powf((2 * k) as f64 / rot_dim as f64))
        .collect();
    match rope.scaling {
        RopeScaling::Default => base,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => {
            let low_freq_wavelen = old / low_freq_factor;
            let high_freq_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_freq_wavelen {
                        f
                    } else if wavelen > low_freq_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

/// How many leading dimensions of a head rotate (`int(head_dim * partial_rotary_factor)`).
pub fn rotary_dim(rope: &RopeConfig, head_dim: usize) -> usize {
    let d = (head_dim as f64 * rope.partial_rotary_factor) as usize;
    d - d % 2
}

/// cos/sin tables for positions `0..seq_len`, ready to apply.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    rot_dim: usize,
}

impl Rope {
    /// Tables for `seq_len` positions, computed in f64 and cast to `dtype`.
    pub fn new(
        rope: &RopeConfig,
        head_dim: usize,
        seq_len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let inv = inverse_frequencies(rope, head_dim);
        let half = inv.len();
        let mut cos = Vec::with_capacity(seq_len * half);
        let mut sin = Vec::with_capacity(seq_len * half);
        for pos in 0..seq_len {
            for f in &inv {
                let angle = pos as f64 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        let cos = Tensor::from_vec(cos, (seq_len, half), device)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, (seq_len, half), device)?.to_dtype(dtype)?;
        Ok(Rope {
            cos,
            sin,
            rot_dim: 2 * half,
        })
    }

    /// Rotates `xs` `[batch, heads, seq, head_dim]`.
    pub fn apply(&self, xs: &Tensor) -> Result<Tensor> {
        let (_, _, _, head_dim) = xs.dims4()?;
        if self.rot_dim == 0 {
            return Ok(xs.clone());
        }
        if self.rot_dim == head_dim {
            return Ok(candle_nn::rotary_emb::rope(
                &xs.contiguous()?,
                &self.cos,
                &self.sin,
            )?);
        }
        let rot = xs.narrow(3, 0, self.rot_dim)?.contiguous()?;
        let pass = xs.narrow(3, self.rot_dim, head_dim - self.rot_dim)?;
        let rot = candle_nn::rotary_emb::rope(&rot, &self.cos, &self.sin)?;
        Ok(Tensor::cat(&[&rot, &pass], 3)?)
    }
}
