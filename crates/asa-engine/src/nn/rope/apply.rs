//! Rotary position embeddings applied in Hugging Face's rotate-half convention (or on
//! interleaved pairs: Llama 4's complex rotation, DeepSeek's de-interleaving one), from
//! cos/sin tables of given inverse frequencies (`super::frequencies` derives them from
//! config.json).

use candle_core::{DType, Device, Tensor};

use asa_core::error::Result;

/// Which dimensions of the rotating part form the pairs a frequency turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RopePairs {
    /// Pair k is dims (k, k + d/2) (rotate-half: Llama and most families).
    #[default]
    Halves,
    /// Pair k is dims (2k, 2k + 1), rotated in place (Llama 4's `view_as_complex`).
    Interleaved,
    /// Pair k is dims (2k, 2k + 1), written back de-interleaved: the rotated even dims, then
    /// the rotated odd ones (DeepSeek's `apply_rotary_pos_emb_interleave`).
    Deinterleaved,
}

/// cos/sin tables for positions `0..seq_len`, ready to apply.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    rot_dim: usize,
    pairs: RopePairs,
    /// The last `rot_dim` dims rotate (DeepSeek's MLA: [nope, rope]) rather than the first.
    rotate_last: bool,
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
            pairs: RopePairs::Halves,
            rotate_last: false,
        })
    }

    /// The same tables turning `pairs`, on the last dims of a head when `rotate_last`.
    pub fn arranged(self, pairs: RopePairs, rotate_last: bool) -> Self {
        Rope {
            pairs,
            rotate_last,
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
        if xs.dtype() == DType::BF16 && self.cos.dtype() == DType::F32 {
            // widened and rounded in vector registers (candle's casts' bits)
            let wide = self.apply(&asa_kernels::cpu::bf16_elementwise::to_f32(xs)?)?;
            return asa_kernels::cpu::bf16_elementwise::to_bf16(&wide);
        }
        if xs.dtype() != self.cos.dtype() {
            let wide = self.apply(&xs.to_dtype(self.cos.dtype())?)?;
            return Ok(wide.to_dtype(xs.dtype())?);
        }
        let rope = |x: &Tensor| -> Result<Tensor> {
            use candle_nn::rotary_emb::{rope, rope_i, rope_i_slow, rope_slow};
            let (cos, sin) = (&self.cos, &self.sin);
            let x = match self.pairs {
                // [x0, x1, x2, x3, ...] -> [x0, x2, ..., x1, x3, ...], then rotate-half
                RopePairs::Deinterleaved => {
                    let (b, h, t, d) = x.dims4()?;
                    x.reshape((b, h, t, d / 2, 2))?
                        .transpose(3, 4)?
                        .reshape((b, h, t, d))?
                }
                _ => x.contiguous()?,
            };
            let interleaved = self.pairs == RopePairs::Interleaved;
            Ok(match (x.track_op(), interleaved) {
                (true, false) => rope_slow(&x, cos, sin)?,
                (false, false) => rope(&x, cos, sin)?,
                (true, true) => rope_i_slow(&x, cos, sin)?,
                (false, true) => rope_i(&x, cos, sin)?,
            })
        };
        if self.rot_dim == head_dim {
            return rope(xs);
        }
        let pass_dim = head_dim - self.rot_dim;
        Ok(match self.rotate_last {
            false => {
                let rot = rope(&xs.narrow(3, 0, self.rot_dim)?)?;
                Tensor::cat(&[&rot, &xs.narrow(3, self.rot_dim, pass_dim)?], 3)?
            }
            true => {
                let rot = rope(&xs.narrow(3, pass_dim, self.rot_dim)?)?;
                Tensor::cat(&[&xs.narrow(3, 0, pass_dim)?, &rot], 3)?
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each arrangement against its formula, by hand: one head of 6 dims whose last 4 (or
    /// first 4) rotate at frequencies 1 and 0.1, at positions 0..3.
    #[test]
    fn every_pair_arrangement_turns_the_dims_its_family_turns() {
        let inv = [1.0, 0.1];
        let (t, d) = (3, 6);
        let x: Vec<f32> = (0..t * d).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
        let xs = Tensor::from_vec(x.clone(), (1, 1, t, d), &Device::Cpu).unwrap();
        let turn = |a: f32, b: f32, pos: usize, k: usize| {
            let angle = pos as f64 * inv[k];
            let (c, s) = (angle.cos() as f32, angle.sin() as f32);
            (a * c - b * s, b * c + a * s)
        };
        for (pairs, last) in [
            (RopePairs::Halves, false),
            (RopePairs::Interleaved, false),
            (RopePairs::Deinterleaved, true),
        ] {
            let rope = Rope::new(&inv, t, DType::F32, &Device::Cpu)
                .unwrap()
                .arranged(pairs, last);
            let got = rope.apply(&xs).unwrap().flatten_all().unwrap();
            let got = got.to_vec1::<f32>().unwrap();
            for pos in 0..t {
                let row = &x[pos * d..(pos + 1) * d];
                let start = if last { 2 } else { 0 };
                let r = &row[start..start + 4];
                let mut want = row.to_vec();
                let out = &mut want[start..start + 4];
                match pairs {
                    // (k, k + 2)
                    RopePairs::Halves => {
                        for k in 0..2 {
                            (out[k], out[k + 2]) = turn(r[k], r[k + 2], pos, k);
                        }
                    }
                    // (2k, 2k + 1) in place
                    RopePairs::Interleaved => {
                        for k in 0..2 {
                            (out[2 * k], out[2 * k + 1]) = turn(r[2 * k], r[2 * k + 1], pos, k);
                        }
                    }
                    // transformers: cat(q1 cos - q2 sin, q2 cos + q1 sin), q1 = q[0::2]
                    RopePairs::Deinterleaved => {
                        for k in 0..2 {
                            (out[k], out[k + 2]) = turn(r[2 * k], r[2 * k + 1], pos, k);
                        }
                    }
                }
                for (i, (g, w)) in got[pos * d..(pos + 1) * d].iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() < 1e-6,
                        "{pairs:?} pos {pos} dim {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}
