//! Affine-Scaled Attention: a_ij = alpha_i * p_ij + beta_i on visible keys, with
//! alpha_i = phi(w . x_i) per head and beta_i = (alpha_ma - alpha_i) / N.

use candle_core::{DType, Tensor};

use super::variant::{Activation, AffineConfig, BetaLength};
use asa_core::error::Result;

/// phi applied elementwise: linear clipping clamp(0.1x + 0.5, 0, 1), or sigmoid.
pub fn activate(xs: &Tensor, activation: Activation) -> Result<Tensor> {
    Ok(match activation {
        Activation::LinearClipping => xs.affine(0.1, 0.5)?.clamp(0f32, 1f32)?,
        Activation::Sigmoid => candle_nn::ops::sigmoid(xs)?,
    })
}

/// Effective weights `[b, h, n, k]` of one query block.
///
/// `p`: softmax `[b, h, n, k]` (zeros where invisible); `alpha`: `[b, h, n]` for the block's
/// queries; `alpha_ma`: `[h]`; `visible`: `[n, k]` 0/1; `q_start`: first query index;
/// `seq_len`: T (N for `beta_length: full`).
pub fn affine_weights(
    p: &Tensor,
    alpha: &Tensor,
    alpha_ma: &Tensor,
    visible: &Tensor,
    q_start: usize,
    seq_len: usize,
    cfg: &AffineConfig,
) -> Result<Tensor> {
    let (_, heads, n, _) = p.dims4()?;
    let alpha = alpha.to_dtype(DType::F32)?.unsqueeze(3)?; // [b, h, n, 1]
    let alpha_ma = alpha_ma.to_dtype(DType::F32)?.reshape((1, heads, 1, 1))?;
    let diff = alpha_ma.broadcast_sub(&alpha)?;
    let beta = match cfg.beta_length {
        BetaLength::Full => (diff / seq_len as f64)?,
        BetaLength::Visible => {
            let lengths: Vec<f32> = (0..n).map(|r| (q_start + r + 1) as f32).collect();
            let lengths = Tensor::from_vec(lengths, (1, 1, n, 1), p.device())?;
            diff.broadcast_div(&lengths)?
        }
    };
    let scaled = p.broadcast_mul(&alpha)?;
    Ok(scaled
        .broadcast_add(&beta)?
        .broadcast_mul(&visible.unsqueeze(0)?.unsqueeze(0)?)?)
}
