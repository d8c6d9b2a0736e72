//! Launcher of the next-token NLL kernel (`nll_rows_f32` in kernels.cu): log-sum-exp and
//! the target's logit of every position in one pass over a logit block.

use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::Tensor;

use super::{kernel, with_cuda_f32};
use crate::error::Result;

/// Threads per row (`THREADS` in kernels.cu): vocabularies are long rows.
const THREADS: u32 = 256;

/// -log softmax(logits)[target] of each row of `logits` `[rows, vocab]` (f32, contiguous,
/// on a GPU) for its id in `targets` (`rows` ids, each < vocab); `None` elsewhere.
pub fn nll_rows(logits: &Tensor, targets: &[u32]) -> Result<Option<Vec<f32>>> {
    let (rows, vocab) = logits.dims2()?;
    if rows == 0 || targets.len() != rows || targets.iter().any(|&t| t as usize >= vocab) {
        return Ok(None);
    }
    with_cuda_f32(logits, |dev, data| {
        let func = kernel(dev, "nll_rows_f32")?;
        let ids = dev.clone_htod(targets)?;
        let out = dev.alloc_zeros::<f32>(rows)?;
        let (rows_arg, vocab) = (rows as i32, vocab as i32);
        let stream = dev.cuda_stream();
        let mut launch = stream.launch_builder(&func);
        launch
            .arg(data)
            .arg(&ids)
            .arg(&out)
            .arg(&rows_arg)
            .arg(&vocab);
        let config = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the arguments match the kernel's signature; `data` holds rows x vocab
        // floats, `ids` rows ids below vocab, `out` rows floats
        unsafe { launch.launch(config) }.w()?;
        Ok(dev.clone_dtoh(&out)?)
    })
}

#[cfg(test)]
mod tests {
    //! Against log-softmax + gather by candle on the CPU. Needs a GPU.
    use super::*;
    use candle_core::{Device, D};

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
}
