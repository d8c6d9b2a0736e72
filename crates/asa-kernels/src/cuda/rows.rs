//! Launchers of the row kernels: the GPU side of [`crate::hooks::row_pass`], same tables.

use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, Storage, Tensor};

use super::{kernel, with_cuda_f32};
use crate::row_table::{RowWants, MAX_BANDS};
use asa_core::error::Result;

/// Threads per launched block (`THREADS` in kernels.cu).
const THREADS: u32 = 256;

/// Rows of up to this many keys get one warp each; longer rows a whole block, so that
/// enough loads are in flight when rows are few.
const WARP_ROW_KEYS: usize = 4096;

/// Distance ranges `[lo, hi)` of one call, passed to the kernel by value (no copy to the
/// device, which would wait for the queue).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct BandTable {
    lo: [u32; MAX_BANDS],
    hi: [u32; MAX_BANDS],
}

// SAFETY: plain old data, laid out as `struct BandTable` in kernels.cu
unsafe impl DeviceRepr for BandTable {}

/// The row table `[rows, wants.width()]` f32 (`kernels::row_table`; no sink or q.k columns)
/// of causal `weights` `[batch, head, n, q_start + n]` on a CUDA device (f32, contiguous),
/// left on the device; `None` where the candle reductions must run.
pub fn weight_table(weights: &Tensor, q_start: usize, wants: &RowWants) -> Result<Option<Tensor>> {
    let (b, h, n, keys) = weights.dims4()?;
    let nbands = wants.bands.len();
    let rows = b * h * n;
    let width = wants.width();
    if rows == 0 {
        return Ok(None);
    }
    let Some(bands) = band_table(wants) else {
        return Ok(None);
    };
    with_cuda_f32(weights, |dev, data| {
        let func = kernel(dev, &grouped("weight_rows_f32", keys))?;
        let out = dev.alloc_zeros::<f32>(rows * width)?;
        let (rows_arg, n, q_start) = (rows as i32, n as i32, q_start as i32);
        let (keys_arg, width_arg) = (keys as i32, width as i32);
        let (want_entropy, nbands) = (i32::from(wants.entropy), nbands as i32);
        let stream = dev.cuda_stream();
        let mut launch = stream.launch_builder(&func);
        launch
            .arg(data)
            .arg(&out)
            .arg(&rows_arg)
            .arg(&n)
            .arg(&keys_arg)
            .arg(&q_start)
            .arg(&width_arg)
            .arg(&want_entropy)
            .arg(&bands)
            .arg(&nbands);
        // SAFETY: the arguments match the kernel's signature; `data` holds rows x keys
        // floats and `out` rows x width, the kernel reads and writes inside them
        unsafe { launch.launch(config(rows, keys)) }.w()?;
        let storage = CudaStorage::wrap_cuda_slice(out, dev.clone());
        Ok(Tensor::from_storage(
            Storage::Cuda(storage),
            (rows, width),
            BackpropOp::none(),
            false,
        ))
    })
}

/// Per-row sum and absolute sum `[rows, 2]` of raw causal q.k `[batch, head, n, q_start + n]`
/// on a CUDA device (f32, contiguous); `None` where the candle reductions must run.
pub fn qk_table(raw: &Tensor, q_start: usize) -> Result<Option<Vec<f64>>> {
    let (b, h, n, keys) = raw.dims4()?;
    let rows = b * h * n;
    if rows == 0 {
        return Ok(None);
    }
    with_cuda_f32(raw, |dev, data| {
        let func = kernel(dev, &grouped("qk_rows_f32", keys))?;
        let out = dev.alloc_zeros::<f64>(rows * 2)?;
        let (rows_arg, n, q_start) = (rows as i32, n as i32, q_start as i32);
        let keys_arg = keys as i32;
        let stream = dev.cuda_stream();
        let mut launch = stream.launch_builder(&func);
        launch.arg(data).arg(&out).arg(&rows_arg).arg(&n);
        launch.arg(&keys_arg).arg(&q_start);
        // SAFETY: as in `weight_table`: `out` holds rows x 2 doubles
        unsafe { launch.launch(config(rows, keys)) }.w()?;
        Ok(dev.clone_dtoh(&out)?)
    })
}

/// The distance ranges of `wants` as kernel arguments; `None` for more than the kernels
/// hold.
pub(super) fn band_table(wants: &RowWants) -> Option<BandTable> {
    if wants.bands.len() > MAX_BANDS {
        return None;
    }
    let mut bands = BandTable {
        lo: [0; MAX_BANDS],
        hi: [0; MAX_BANDS],
    };
    for (k, &(lo, hi)) in wants.bands.iter().enumerate() {
        // u32::MAX stands for an open upper end (no distance reaches it)
        bands.lo[k] = lo.min(u32::MAX as usize) as u32;
        bands.hi[k] = hi.min(u32::MAX as usize) as u32;
    }
    Some(bands)
}

/// Threads per row for rows of `keys` keys: a warp, or a whole block for long rows.
fn group(keys: usize) -> u32 {
    if keys <= WARP_ROW_KEYS {
        32
    } else {
        THREADS
    }
}

/// The kernel `base` compiled for the thread group of rows of `keys` keys.
pub(super) fn grouped(base: &str, keys: usize) -> String {
    format!("{base}_g{}", group(keys))
}

/// Blocks of `THREADS` threads covering `rows` rows of `keys` keys.
pub(super) fn config(rows: usize, keys: usize) -> LaunchConfig {
    let rows_per_block = (THREADS / group(keys)) as usize;
    LaunchConfig {
        grid_dim: (rows.div_ceil(rows_per_block) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
