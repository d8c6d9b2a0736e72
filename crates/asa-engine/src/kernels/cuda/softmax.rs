//! Launcher of the fused causal softmax (`softmax_rows_*` in kernels.cu): the GPU analogue
//! of `attention::cpu_softmax`, which also fills the block's row table, so the probe's
//! reductions cost no pass of their own and the maps never exist in f32.

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorageSlice, WrapErr};
use candle_core::{DType, Tensor};

use super::rows::{band_table, config, grouped, BandTable};
use super::{device_tensor, kernel, with_cuda_f32, with_cuda_storage};
use crate::kernels::row_table::RowWants;
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

#[cfg(test)]
mod tests {
    //! The fused softmax against the candle path (scale, mask, softmax or softmax with
    //! sink) and the CPU row pass of its weights. Needs a GPU: `cargo test --release
    //! --features cuda cuda_`.
    use super::*;
    use crate::attention::softmax_with_sink;
    use crate::hooks::blocks::{mask_invisible, visibility};
    use crate::hooks::row_pass::{qk_sums, weight_rows};
    use crate::kernels::row_table::split_table;
    use candle_core::{Device, D};

    fn host(t: &Tensor) -> Vec<f32> {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (k, (x, y)) in got.iter().zip(want).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}[{k}]: {x} vs {y}"
            );
        }
    }

    #[test]
    fn cuda_fused_softmax_equals_the_candle_path() {
        let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
        // rows of 301-305 keys (a warp per row: more keys than threads, and a tail) and of
        // 5,001-5,003 keys (a block per row)
        for (b, h, q_start, n) in [(2, 3, 300, 5), (1, 3, 5000, 3)] {
            fused_softmax_case(&gpu, b, h, q_start, n);
        }
    }

    fn fused_softmax_case(gpu: &Device, b: usize, h: usize, q_start: usize, n: usize) {
        let cpu = Device::Cpu;
        let keys = q_start + n;
        let data: Vec<f32> = (0..b * h * n * keys)
            .map(|k| ((k * 7919) % 1000) as f32 / 62.5 - 8.0)
            .collect();
        let scale = 0.37f32;
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: vec![(0, 1), (1, 10), (10, 100), (100, usize::MAX)],
            max_logit: false,
            key_blocks: None,
            key_sums_from: None,
        };
        let sink_logits = Tensor::new(&[0.5f32, -1.0, 9.0], &cpu)
            .unwrap()
            .reshape((1, h, 1, 1))
            .unwrap();
        for dtype in [DType::F32, DType::BF16] {
            for sink in [None, Some(&sink_logits)] {
                // the reference sees the raw values the kernel sees (rounded to `dtype`)
                let raw = Tensor::from_vec(data.clone(), (b, h, n, keys), &cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let raw32 = raw.to_dtype(DType::F32).unwrap();
                let visible =
                    visibility(q_start, n, crate::hooks::KeyWindow::CAUSAL, &cpu).unwrap();
                let scores = mask_invisible(&(&raw32 * scale as f64).unwrap(), &visible).unwrap();
                let (want_w, want_mass) = match sink {
                    Some(s) => {
                        let (w, m) = softmax_with_sink(&scores, s).unwrap();
                        (w, Some(m))
                    }
                    None => (candle_nn::ops::softmax(&scores, D::Minus1).unwrap(), None),
                };
                let causal = crate::hooks::KeyWindow::CAUSAL;
                let want_table = weight_rows(&want_w, q_start, causal, &wants)
                    .unwrap()
                    .unwrap();
                let want_rows = split_table(&want_table, &wants);
                let (qk, qk_abs) = qk_sums(&raw32, q_start, crate::hooks::KeyWindow::CAUSAL)
                    .unwrap()
                    .unwrap();

                let gpu_sink = sink.map(|s| s.to_device(gpu).unwrap());
                let (w, table) = causal_softmax_rows(
                    &raw.to_device(gpu).unwrap(),
                    scale,
                    q_start,
                    gpu_sink.as_ref(),
                    &wants,
                )
                .unwrap()
                .expect("the kernel applies to a contiguous block on the GPU");
                let what = format!("{dtype:?}, sink {}, {keys} keys", sink.is_some());
                assert_eq!(w.dtype(), dtype);
                // bf16 weights are the f32 weights rounded (8 bits of mantissa)
                let w_tol = if dtype == DType::F32 { 1e-6 } else { 4e-3 };
                close(
                    &host(&w),
                    &host(&want_w),
                    w_tol,
                    &format!("weights, {what}"),
                );
                let table = host(&table);
                let rows = split_table(&table, &wants);
                close(
                    &rows.first.to_vec(),
                    &want_rows.first.to_vec(),
                    1e-5,
                    &format!("first, {what}"),
                );
                close(
                    &rows.sum.to_vec(),
                    &want_rows.sum.to_vec(),
                    1e-5,
                    &format!("sum, {what}"),
                );
                close(
                    &rows.entropy.to_vec(),
                    &want_rows.entropy.to_vec(),
                    1e-5,
                    &format!("entropy, {what}"),
                );
                for (k, (g, c)) in rows.bands.iter().zip(&want_rows.bands).enumerate() {
                    close(&g.to_vec(), &c.to_vec(), 1e-5, &format!("band {k}, {what}"));
                }
                match &want_mass {
                    Some(m) => close(
                        &rows.sink_mass.to_vec(),
                        &host(m),
                        1e-5,
                        &format!("sink, {what}"),
                    ),
                    None => assert!(rows.sink_mass.iter().all(|v| v == 0.0)),
                }
                let sum: f64 = rows.qk_sum.iter().map(f64::from).sum();
                let abs: f64 = rows.qk_abs_sum.iter().map(f64::from).sum();
                assert!(
                    (sum - qk).abs() <= 1e-5 * qk_abs,
                    "{what}: qk {sum} vs {qk}"
                );
                assert!(
                    (abs - qk_abs).abs() <= 1e-6 * qk_abs,
                    "{what}: |qk| {abs} vs {qk_abs}"
                );
            }
        }
    }
}
