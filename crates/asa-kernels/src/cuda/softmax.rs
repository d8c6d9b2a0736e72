//! Launcher of the fused causal softmax (`softmax_rows_*` in kernels.cu): the GPU analogue
//! of `attention::cpu_softmax`, which also fills the block's row table, so the probe's
//! reductions cost no pass of their own and the maps never exist in f32.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorageSlice, WrapErr};
use candle_core::{DType, Tensor};

use super::rows::{band_table, config, grouped, BandTable};
use super::{device_tensor, kernel, with_cuda_f32, with_cuda_storage};
use crate::row_table::RowWants;
use asa_core::error::Result;

/// Shapes and settings of one launch.
struct Launch {
    name: String,
    rows: usize,
    n: i32,
    heads: i32,
    keys: i32,
    q_start: i32,
    scale: f32,
    width: i32,
    want_entropy: i32,
    bands: BandTable,
    nbands: i32,
}

/// Causal softmax of raw q.k `raw` `[batch, heads, n, q_start + n]` (contiguous, f32, bf16
/// or f16, on a GPU) times `scale`, with the per-head sink logits `sinks` (`[heads]` values,
/// f32) in the denominator when given. Returns the weights in `raw`'s dtype (0 for
/// invisible keys) and the row table `[rows, wants.width()]` f32 of the f32 weights with the
/// sink mass and the raw q.k sums; `None` where the kernel does not apply (other devices,
/// dtypes, layouts, too many bands), and the candle path must run.
pub fn causal_softmax_rows(
    raw: &Tensor,
    scale: f32,
    q_start: usize,
    sinks: Option<&Tensor>,
    wants: &RowWants,
) -> Result<Option<(Tensor, Tensor)>> {
    let (b, heads, n, keys) = raw.dims4()?;
    let Some(bands) = band_table(wants) else {
        return Ok(None);
    };
    if keys != q_start + n || keys == 0 || n == 0 {
        return Ok(None);
    }
    let launch = |name| Launch {
        name,
        rows: b * heads * n,
        n: n as i32,
        heads: heads as i32,
        keys: keys as i32,
        q_start: q_start as i32,
        scale,
        width: wants.width() as i32,
        want_entropy: i32::from(wants.entropy),
        bands,
        nbands: wants.bands.len() as i32,
    };
    let shape = (b, heads, n, keys);
    let run = |sinks: Option<&CudaView<'_, f32>>| {
        with_cuda_storage(raw, |dev, slice, range| {
            Ok(Some(match slice {
                CudaStorageSlice::F32(s) => {
                    let l = launch(grouped("softmax_rows_f32", keys));
                    fused(dev, &s.slice(range), sinks, &l, shape)?
                }
                CudaStorageSlice::BF16(s) => {
                    let l = launch(grouped("softmax_rows_bf16", keys));
                    fused(dev, &s.slice(range), sinks, &l, shape)?
                }
                CudaStorageSlice::F16(s) => {
                    let l = launch(grouped("softmax_rows_f16", keys));
                    fused(dev, &s.slice(range), sinks, &l, shape)?
                }
                _ => return Ok(None),
            }))
        })
    };
    match sinks {
        Some(sinks) if sinks.dtype() == DType::F32 => {
            let sinks = sinks.flatten_all()?;
            Ok(with_cuda_f32(&sinks, |_, view| run(Some(view)))?.flatten())
        }
        Some(_) => Ok(None),
        None => run(None),
    }
}

/// Runs the kernel of `launch` on `raw` (and `sinks`); the weights `[shape]` in `T` and the
/// row table.
fn fused<T: DeviceRepr + CudaDType>(
    dev: &CudaDevice,
    raw: &CudaView<'_, T>,
    sinks: Option<&CudaView<'_, f32>>,
    launch: &Launch,
    shape: (usize, usize, usize, usize),
) -> Result<(Tensor, Tensor)> {
    let func = kernel(dev, &launch.name)?;
    let elements = launch.rows * launch.keys as usize;
    // SAFETY: the kernel writes every element of every row (0 past the visible keys)
    let weights: CudaSlice<T> = unsafe { dev.alloc::<T>(elements)? };
    let table = dev.alloc_zeros::<f32>(launch.rows * launch.width as usize)?;
    let has_sink = i32::from(sinks.is_some());
    let stream = dev.cuda_stream();
    let rows = launch.rows as i32;
    let mut args = stream.launch_builder(&func);
    args.arg(raw).arg(&weights).arg(&table).arg(&rows);
    args.arg(&launch.n)
        .arg(&launch.heads)
        .arg(&launch.keys)
        .arg(&launch.q_start);
    args.arg(&launch.scale);
    match sinks {
        Some(sinks) => args.arg(sinks),
        // never read without a sink, but the argument must be a valid pointer
        None => args.arg(&table),
    };
    args.arg(&has_sink)
        .arg(&launch.width)
        .arg(&launch.want_entropy);
    args.arg(&launch.bands).arg(&launch.nbands);
    // SAFETY: the arguments match the kernel's signature; `raw` and `weights` hold rows x
    // keys elements, `table` rows x width floats, `sinks` one float per head
    unsafe { args.launch(config(launch.rows, launch.keys as usize)) }.w()?;
    let weights = device_tensor(weights, dev, shape);
    let table = device_tensor(table, dev, (launch.rows, launch.width as usize));
    Ok((weights, table))
}
