//! Attention: one eager, query-blocked path shared by every architecture, variant and
//! device. One file per variant's math; `layer` holds the loop that feeds the probe.

mod affine_scaled;
mod core;
pub(crate) mod cpu_affine;
mod cpu_kept_weights;
pub mod cpu_softmax;
#[cfg(all(test, feature = "cuda"))]
mod cuda_tests;
pub mod flash;
mod fused_softmax;
mod gated;
pub mod latent;
mod layer;
mod logn;
pub mod plan;
mod scale_invariant;
mod sink;
pub mod temperature;
mod variant;
mod wide_qkv;

pub use affine_scaled::{activate, affine_weights};
pub use core::AttentionCore;
pub use layer::{Attention, AttentionShape, AttentionWeights, QkvProjections};
pub use logn::logn_logits;
pub use scale_invariant::{distance_coefficients, reversed_coefficients, DistanceTable};
pub use sink::softmax_with_sink;
pub use variant::{
    Activation, AffineConfig, BetaLength, ScaleInvariantConfig, Variant, VariantKind,
};
