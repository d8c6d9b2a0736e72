//! The kernels: the CPU's ([`cpu`]: SIMD row passes, the bf16 GEMM, host views of tensors)
//! and, with the `cuda` feature, the GPU's (`cuda`), with the types both read and fill:
//! a layer's q, k and v and a query block ([`qkv`]), which keys a query sees ([`key_window`]), the row table of
//! per-query sums a kernel hands the probe ([`row_table`], its columns in [`row_columns`],
//! from which build.rs writes the CUDA header) and Affine-Scaled's N ([`beta_length`]).
//! Nothing here uses the layers above (attention, hooks, model): they call down into it.

pub mod beta_length;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod key_window;
pub mod qkv;
/// The row table's fixed columns and band limit, declared once for the library and the CUDA
/// header build.rs generates.
pub mod row_columns;
pub mod row_table;

pub use key_window::KeyWindow;

/// The largest head dimension the GPU's flash kernels take (`cuda::flash::MAX_HEAD_DIM`);
/// the attention plan sends larger heads elsewhere.
pub const GPU_FLASH_HEAD_DIM: usize = 256;
