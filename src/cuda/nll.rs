//! Launcher of the next-token NLL kernel (`nll_rows_*` in kernels.cu): log-sum-exp and the
//! target's logit of every position in one pass over a logit block, read in the model's
//! dtype (no f32 copy of the logits).

use candle_core::cuda_backend::cudarc::driver::{
    CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, CudaStorageSlice, WrapErr};
use candle_core::{Device, Storage, Tensor};

use super::kernel;
use crate::error::Result;

/// Threads per row (`THREADS` in kernels.cu): vocabularies are long rows.
const THREADS: u32 = 256;

/// -log softmax(logits)[target] of each row of `logits` `[rows, vocab]` (f32, bf16 or f16,
/// contiguous, on a GPU) for its id in `targets` (`rows` ids, each < vocab); `None`
/// elsewhere.
pub fn nll_rows(logits: &Tensor, targets: &[u32]) -> Result<Option<Vec<f32>>> {
    let (rows, vocab) = logits.dims2()?;
    if rows == 0 || targets.len() != rows || targets.iter().any(|&t| t as usize >= vocab) {
        return Ok(None);
    }
    let Device::Cuda(dev) = logits.device() else {
        return Ok(None);
    };
    let (storage, layout) = logits.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Ok(None);
    };
    let Storage::Cuda(cuda) = &*storage else {
        return Ok(None);
    };
    let nll = match &cuda.slice {
        CudaStorageSlice::F32(s) => launch(dev, "nll_rows_f32", &s.slice(start..end), targets)?,
        CudaStorageSlice::BF16(s) => launch(dev, "nll_rows_bf16", &s.slice(start..end), targets)?,
        CudaStorageSlice::F16(s) => launch(dev, "nll_rows_f16", &s.slice(start..end), targets)?,
        _ => return Ok(None),
    };
    Ok(Some(nll))
}

/// Runs kernel `name` on `logits` (`targets.len()` rows) and copies the NLLs to the host.
fn launch<T: DeviceRepr>(
    dev: &CudaDevice,
    name: &str,
    logits: &CudaView<'_, T>,
    targets: &[u32],
) -> Result<Vec<f32>> {
    let rows = targets.len();
    let vocab = logits.len() / rows;
    let func = kernel(dev, name)?;
    let ids = dev.clone_htod(targets)?;
    let out = dev.alloc_zeros::<f32>(rows)?;
    let (rows_arg, vocab) = (rows as i32, vocab as i32);
    let stream = dev.cuda_stream();
    let mut args = stream.launch_builder(&func);
    args.arg(logits)
        .arg(&ids)
        .arg(&out)
        .arg(&rows_arg)
        .arg(&vocab);
    let config = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match the kernel's signature; `logits` holds rows x vocab
    // values, `ids` rows ids below vocab, `out` rows floats
    unsafe { args.launch(config) }.w()?;
    Ok(dev.clone_dtoh(&out)?)
}

#[cfg(test)]
mod tests {
    //! Against log-softmax + gather by candle on the CPU. Needs a GPU.
    use super::*;
    use candle_core::{DType, Device, D};

    #[test]
    fn cuda_nll_rows_equal_log_softmax() {
        let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
        let (rows, vocab) = (7, 50_000);
        let data: Vec<f32> = (0..rows * vocab)
            .map(|k| ((k * 7919) % 2003) as f32 / 100.0 - 10.0)
            .collect();
        let targets: Vec<u32> = (0..rows as u32).map(|r| r * 7001 % vocab as u32).collect();
        let cpu = Tensor::from_vec(data, (rows, vocab), &Device::Cpu).unwrap();
        let lsm = candle_nn::ops::log_softmax(&cpu, D::Minus1).unwrap();
        let ids = Tensor::from_vec(targets.clone(), (rows, 1), &Device::Cpu).unwrap();
        let want: Vec<f32> = lsm
            .gather(&ids, D::Minus1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let got = nll_rows(&cpu.to_device(&gpu).unwrap(), &targets)
            .unwrap()
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g + w).abs() <= 1e-5 * (1.0 + w.abs()), "{g} vs {}", -w);
        }
    }

    #[test]
    fn cuda_nll_rows_read_bf16_and_f16_logits_as_their_f32_values() {
        let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
        let (rows, vocab) = (5, 49_999);
        let data: Vec<f32> = (0..rows * vocab)
            .map(|k| ((k * 104_729) % 4001) as f32 / 200.0 - 10.0)
            .collect();
        let targets: Vec<u32> = (0..rows as u32).map(|r| r * 9973 % vocab as u32).collect();
        for dtype in [DType::BF16, DType::F16] {
            // the kernel on the rounded logits equals log-softmax of their exact f32 values
            let rounded = Tensor::from_vec(data.clone(), (rows, vocab), &Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let exact = rounded.to_dtype(DType::F32).unwrap();
            let lsm = candle_nn::ops::log_softmax(&exact, D::Minus1).unwrap();
            let ids = Tensor::from_vec(targets.clone(), (rows, 1), &Device::Cpu).unwrap();
            let want: Vec<f32> = lsm
                .gather(&ids, D::Minus1)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let got = nll_rows(&rounded.to_device(&gpu).unwrap(), &targets)
                .unwrap()
                .expect("the kernel takes bf16 and f16 logits");
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g + w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{dtype:?}: {g} vs {}",
                    -w
                );
            }
        }
    }
}
