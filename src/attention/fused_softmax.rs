//! The fused causal softmax that also writes the probe's row table, where there is one for
//! the block's device: the CPU's (`cpu_softmax`, f32) or, with the `cuda` feature, the
//! GPU's (`cuda::softmax`). Elsewhere the candle path runs.

use candle_core::Tensor;

use super::cpu_softmax;
use crate::error::Result;
use crate::probe::row_table::RowWants;

/// Weights in `raw`'s dtype and the row table of causal softmax(scale * raw) with optional
/// per-head sink logits (`sink_logits` `[1, heads, 1, 1]` f32; on the CPU their host copy
/// `host_sinks`), for raw q.k `[batch, heads, n, q_start + n]`; `None` where no kernel
/// applies.
pub fn causal_softmax_rows(
    raw: &Tensor,
    scale: f32,
    q_start: usize,
    (sink_logits, host_sinks): (Option<&Tensor>, Option<&[f32]>),
    wants: &RowWants,
) -> Result<Option<(Tensor, Tensor)>> {
    if raw.device().is_cpu() {
        if sink_logits.is_some() && host_sinks.is_none() {
            return Ok(None);
        }
        return cpu_softmax::causal_softmax_rows(raw, scale, q_start, host_sinks, wants);
    }
    #[cfg(feature = "cuda")]
    {
        crate::cuda::softmax::causal_softmax_rows(raw, scale, q_start, sink_logits, wants)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(None)
    }
}
