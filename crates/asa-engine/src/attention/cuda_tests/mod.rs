//! The GPU's kernels (`asa_kernels::cuda`) against this crate's CPU attention on the same
//! inputs: they live here, above both. Need a GPU: `cargo test --release --features cuda cuda_`.

mod flash;
mod softmax;
