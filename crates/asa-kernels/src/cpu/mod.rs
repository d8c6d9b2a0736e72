//! CPU kernels: zero-copy host views of candle tensors, vectorisable exp/ln, and the
//! dispatch that compiles a row kernel for AVX2 where the CPU has it. The fused passes
//! built on them (the causal softmax, the metric row pass) replace chains of candle
//! elementwise ops, each of which would read and write the whole block again.

pub mod bf16_elementwise;
pub mod bf16_gemm;
pub mod bf16_glu;
pub mod bf16_panels;
pub mod bf16_rms_norm;
pub mod bf16_row_tiles;
pub mod fast_math;
pub mod heap;
pub mod host;
pub mod simd;
