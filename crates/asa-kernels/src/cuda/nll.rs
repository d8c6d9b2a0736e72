//! Launcher of the next-token NLL kernel (`nll_rows_*` in kernels.cu): log-sum-exp and the
//! target's logit of every position in one pass over a logit block, read in the model's
//! dtype (no f32 copy of the logits).

use candle_core::cuda_backend::cudarc::driver::{
    CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, CudaStorageSlice, WrapErr};
use candle_core::Tensor;

use super::{kernel, with_cuda_storage};
use asa_core::error::Result;

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
    with_cuda_storage(logits, |dev, slice, range| {
        Ok(Some(match slice {
            CudaStorageSlice::F32(s) => launch(dev, "nll_rows_f32", &s.slice(range), targets)?,
            CudaStorageSlice::BF16(s) => launch(dev, "nll_rows_bf16", &s.slice(range), targets)?,
            CudaStorageSlice::F16(s) => launch(dev, "nll_rows_f16", &s.slice(range), targets)?,
            _ => return Ok(None),
        }))
    })
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

    /// `nll_rows` of `logits` (CPU, any float dtype) on `gpu` equals -log-softmax of their
    /// exact f32 values at `targets`.
    fn check(gpu: &Device, logits: &Tensor, targets: &[u32]) {
        let rows = targets.len();
        let exact = logits.to_dtype(DType::F32).unwrap();
        let lsm = candle_nn::ops::log_softmax(&exact, D::Minus1).unwrap();
        let ids = Tensor::from_vec(targets.to_vec(), (rows, 1), &Device::Cpu).unwrap();
        let want: Vec<f32> = lsm
            .gather(&ids, D::Minus1)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let got = nll_rows(&logits.to_device(gpu).unwrap(), targets)
            .unwrap()
            .expect("the kernel takes f32, bf16 and f16 logits");
        let dtype = logits.dtype();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g + w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{dtype:?}: {g} vs {}",
                -w
            );
        }
    }

    /// `rows` x `vocab` logits in [-10, 10) and a target per row.
    fn logits(rows: usize, vocab: usize, step: usize) -> (Tensor, Vec<u32>) {
        let data: Vec<f32> = (0..rows * vocab)
            .map(|k| ((k * step) % 2003) as f32 / 100.0 - 10.0)
            .collect();
        let targets = (0..rows as u32).map(|r| r * 7001 % vocab as u32).collect();
        let cpu = Tensor::from_vec(data, (rows, vocab), &Device::Cpu).unwrap();
        (cpu, targets)
    }

    #[test]
    fn cuda_nll_rows_equal_log_softmax() {
        let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
        let (cpu, targets) = logits(7, 50_000, 7919);
        check(&gpu, &cpu, &targets);
    }

    #[test]
    fn cuda_nll_rows_read_bf16_and_f16_logits_as_their_f32_values() {
        let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
        let (cpu, targets) = logits(5, 49_999, 104_729);
        for dtype in [DType::BF16, DType::F16] {
            check(&gpu, &cpu.to_dtype(dtype).unwrap(), &targets);
        }
    }
}
