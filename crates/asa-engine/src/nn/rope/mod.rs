//! Rotary position embeddings, their math in one place: the inverse frequencies of a
//! [`RopeConfig`] (`frequencies`: default RoPE, Llama-3's scaling, partial and p-RoPE),
//! the other scalings transformers computes (`scaling`: linear, dynamic NTK, YaRN,
//! LongRoPE) and the rotation of q and k by cos/sin tables (`apply`). Reading the settings
//! lives beside each format: config.json's keys in `model::config::rope`, the factors a GGUF
//! file stores in `model::gguf_rope`.

mod apply;
mod frequencies;
pub mod scaling;

pub use apply::{Rope, RopePairs};
pub use frequencies::{
    describe, inverse_frequencies, inverse_frequencies_for, rope_tables, rotary_dim, rotated_dims,
    RopeConfig,
};
pub use scaling::{PRopeSpacing, RopeScaling};
