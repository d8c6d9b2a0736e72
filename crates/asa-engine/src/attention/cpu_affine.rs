//! The Affine-Scaled step on CPU in one pass: a_ij = alpha_i p_ij + beta_i over a query
//! block's visible keys and 0 for the rest, written straight from the softmax. It replaces
//! `affine_weights`' three candle passes (scale, shift, mask) and its mask tensor where
//! candle's CPU backend computes in f32 without autograd; both give the same values.

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::variant::BetaLength;
use asa_core::error::Result;
use asa_kernels::cpu::host::with_cpu_f32;

/// beta_i = (alpha_ma - alpha_i) / N of query `i` (N = `seq_len`, or i + 1 for
/// `BetaLength::Visible`), rounded as the candle path rounds it: times 1/N for N = T
/// (candle's tensor / scalar), divided by i + 1 for `Visible`.
#[inline(always)]
pub(crate) fn beta(
    alpha: f32,
    alpha_ma: f32,
    i: usize,
    seq_len: usize,
    beta_length: BetaLength,
) -> f32 {
    let diff = alpha_ma - alpha;
    match beta_length {
        BetaLength::Full => diff * (1.0 / seq_len as f64) as f32,
        BetaLength::Visible => diff / (i + 1) as f32,
    }
}

/// The effective weight alpha p + beta of a visible key.
#[inline(always)]
pub(crate) fn affine_weight(alpha: f32, p: f32, beta: f32) -> f32 {
    alpha * p + beta
}

/// Effective weights `[b, h, n, q_start + n]` from the causal softmax `p` of the block
/// (f32, CPU), `alpha` `[b, h, n]` of its queries and `alpha_ma` `[h]`, with beta_i =
/// (alpha_ma - alpha_i) / N (N = `seq_len`, or i + 1 for `BetaLength::Visible`). `None`
/// where a tensor is not f32 on the CPU or takes part in autograd.
pub fn affine_rows(
    p: &Tensor,
    alpha: &Tensor,
    alpha_ma: &Tensor,
    q_start: usize,
    seq_len: usize,
    beta_length: BetaLength,
) -> Result<Option<Tensor>> {
    let (b, h, n, keys) = p.dims4()?;
    let on_cpu = |t: &Tensor| t.device().is_cpu() && !t.track_op();
    if keys != q_start + n || keys == 0 || !(on_cpu(p) && on_cpu(alpha) && on_cpu(alpha_ma)) {
        return Ok(None);
    }
    let (Ok(alpha), Ok(alpha_ma)) = (
        alpha.flatten_all().and_then(|a| a.to_vec1::<f32>()),
        alpha_ma.flatten_all().and_then(|a| a.to_vec1::<f32>()),
    ) else {
        return Ok(None);
    };
    let computed = with_cpu_f32(p, |data| {
        // every element is written below (visible keys, then 0 for the rest), so the block
        // is not zero-filled first
        let mut weights = Vec::with_capacity(data.len());
        weights.spare_capacity_mut()[..data.len()]
            .par_chunks_mut(keys)
            .zip(data.par_chunks(keys))
            .enumerate()
            .for_each(|(row, (out, p))| {
                let i = q_start + row % n;
                let a = alpha[row];
                let beta = beta(a, alpha_ma[(row / n) % h], i, seq_len, beta_length);
                let (visible, invisible) = out.split_at_mut(i + 1);
                for (o, &p) in visible.iter_mut().zip(p) {
                    o.write(affine_weight(a, p, beta));
                }
                for o in invisible {
                    o.write(0.0);
                }
            });
        // SAFETY: the loop above wrote all `data.len()` elements
        unsafe { weights.set_len(data.len()) };
        weights
    });
    match computed {
        Some(weights) => Ok(Some(Tensor::from_vec(
            weights,
            (b, h, n, keys),
            &Device::Cpu,
        )?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::affine_weights;
    use crate::attention::variant::{Activation, AffineConfig};
    use asa_hooks::blocks::visibility;

    #[test]
    fn equals_the_candle_path() {
        // 2 seqs, 3 heads, queries 5..9 of T = 12
        let (b, h, q_start, n, t) = (2, 3, 5, 4, 12);
        let keys = q_start + n;
        let p: Vec<f32> = (0..b * h * n * keys)
            .map(|k| {
                let (r, j) = (k / keys, k % keys);
                if j > q_start + r % n {
                    0.0
                } else {
                    ((k * 7919) % 97) as f32 / 97.0
                }
            })
            .collect();
        let p = Tensor::from_vec(p, (b, h, n, keys), &Device::Cpu).unwrap();
        let alpha: Vec<f32> = (0..b * h * n).map(|k| (k % 11) as f32 / 11.0).collect();
        let alpha = Tensor::from_vec(alpha, (b, h, n), &Device::Cpu).unwrap();
        let alpha_ma = Tensor::new(&[0.3f32, 0.9, 0.05], &Device::Cpu).unwrap();
        let visible = visibility(q_start, n, asa_hooks::KeyWindow::CAUSAL, &Device::Cpu).unwrap();
        for beta_length in [BetaLength::Full, BetaLength::Visible] {
            let cfg = AffineConfig {
                activation: Activation::LinearClipping,
                beta_length,
                ..AffineConfig::default()
            };
            let want = affine_weights(&p, &alpha, &alpha_ma, &visible, q_start, t, &cfg)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let got = affine_rows(&p, &alpha, &alpha_ma, q_start, t, beta_length)
                .unwrap()
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            // equal values (the candle path's masked zeros may be -0.0)
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(g == w, "{beta_length:?} [{k}]: {g} vs {w}");
            }
        }
    }
}
