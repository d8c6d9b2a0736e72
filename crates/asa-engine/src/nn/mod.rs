//! The math of a decoder's building blocks (projections, norms, the MLP, RoPE tables),
//! built from tensors: below `model` (which loads them) and `attention` (which uses them).

mod layers;
mod linear;
pub mod rope;
mod scale;

pub use layers::{ClampedGlu, FeedForward, Mlp, MoeMlp, Norm, RmsNorm, Routing, SharedExpert};
pub use linear::Linear;
pub use rope::{Rope, RopePairs};
pub use scale::times;
