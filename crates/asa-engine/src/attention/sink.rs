//! Softmax with a virtual sink column: GPT-OSS sinks (per-head logit S_h) and off-by-one
//! (S = 0). As transformers' eager path: append S_h to the row, subtract the row maximum,
//! softmax, drop the extra column; the dropped share is the sink mass.

use candle_core::{DType, Tensor, D};

use asa_core::error::Result;

/// Weights `[b, h, n, k]` and sink mass `[b, h, n]` for masked scaled logits `scores`
/// `[b, h, n, k]` (-inf where invisible) and sink logits `sink` broadcastable to
/// `[b, h, n, 1]` (e.g. `[1, h, 1, 1]`).
pub fn softmax_with_sink(scores: &Tensor, sink: &Tensor) -> Result<(Tensor, Tensor)> {
    let sink = sink
        .to_dtype(DType::F32)?
        .broadcast_as(scores.dims4().map(|(b, h, n, _)| (b, h, n, 1))?)?;
    let row_max = scores.max_keepdim(D::Minus1)?.maximum(&sink)?;
    let exp = scores.broadcast_sub(&row_max)?.exp()?;
    let sink_exp = (sink - &row_max)?.exp()?;
    let denom = (exp.sum_keepdim(D::Minus1)? + &sink_exp)?;
    let weights = exp.broadcast_div(&denom)?;
    let sink_mass = (sink_exp / denom)?.squeeze(D::Minus1)?;
    Ok((weights, sink_mass))
}
