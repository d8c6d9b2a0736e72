//! The fused causal softmax of the GPU path, which also writes the probe's row table
//! (`cuda::softmax`); without the `cuda` feature there is none and the candle path runs.

use candle_core::Tensor;

use crate::error::Result;
use crate::probe::row_table::RowWants;

/// Weights in `raw`'s dtype and the row table of causal softmax(scale * raw) with optional
/// per-head sink logits, for raw q.k `[batch, heads, n, q_start + n]` on a GPU; `None`
/// where the kernel does not apply.
pub fn causal_softmax_rows(
    raw: &Tensor,
    scale: f32,
    q_start: usize,
    sinks: Option<&Tensor>,
    wants: &RowWants,
) -> Result<Option<(Tensor, Tensor)>> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::softmax::causal_softmax_rows(raw, scale, q_start, sinks, wants)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (raw, scale, q_start, sinks, wants);
        Ok(None)
    }
}
