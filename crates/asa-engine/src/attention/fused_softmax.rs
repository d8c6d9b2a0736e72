//! The fused causal softmax that also writes the probe's row table, where there is one for
//! the block's device: the CPU's (`cpu_softmax`, f32) or, with the `cuda` feature, the
//! GPU's (`cuda::softmax`). Elsewhere the candle path runs.

use candle_core::Tensor;

use super::cpu_softmax;
use asa_core::error::Result;
use asa_kernels::row_table::RowWants;

/// A layer's per-head sink logits, both forms: the tensor `[1, heads, 1, 1]` (f32) the GPU
/// reads and the host copy `[heads]` the CPU reads (both `None` without sinks).
#[derive(Debug, Clone, Copy)]
pub struct SinkLogits<'a> {
    pub tensor: Option<&'a Tensor>,
    pub host: Option<&'a [f32]>,
}

/// Weights in `raw`'s dtype and the row table of causal softmax(scale * raw) with optional
/// per-head `sinks`, for raw q.k `[batch, heads, n, q_start + n]`; `None` where no kernel
/// applies (on the CPU, sinks without their host copy).
pub fn causal_softmax_rows(
    raw: &Tensor,
    scale: f32,
    q_start: usize,
    sinks: SinkLogits,
    wants: &RowWants,
) -> Result<Option<(Tensor, Tensor)>> {
    if raw.device().is_cpu() {
        if sinks.tensor.is_some() && sinks.host.is_none() {
            return Ok(None);
        }
        return cpu_softmax::causal_softmax_rows(raw, scale, q_start, sinks.host, wants);
    }
    #[cfg(feature = "cuda")]
    {
        asa_kernels::cuda::softmax::causal_softmax_rows(raw, scale, q_start, sinks.tensor, wants)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(None)
    }
}
