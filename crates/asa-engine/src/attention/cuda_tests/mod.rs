//! The GPU's kernels (`asa_kernels::cuda`) against this crate's CPU attention on the same
//! inputs: they live here, above both. Need a GPU: `cargo test --release --features cuda cuda_`.

mod flash;
mod softmax;

use candle_core::{DType, Tensor};

/// A device tensor's values on the host, in f32.
fn host(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}
