//! The math of a decoder's building blocks (projections, norms, the MLP, RoPE tables),
//! built from tensors: below `model` (which loads them) and `attention` (which uses them).

mod layers;
mod rope;

pub use layers::{FeedForward, Linear, Mlp, MoeMlp, Norm, RmsNorm};
pub use rope::Rope;
