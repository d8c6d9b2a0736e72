//! The mixers of hybrid models that are not softmax attention (LFM2's short convolutions,
//! Qwen3-Next's Gated DeltaNet, the Mamba-2 layers of Granite 4 and Falcon-H1):
//! they carry the hidden state on exactly as transformers' own torch code computes it, and
//! no probe sees them. Below `model` (which loads them), beside `attention`.

mod causal_conv;
mod gated_delta_net;
mod mamba2;
mod short_conv;

pub use causal_conv::CausalConv;
pub use gated_delta_net::{DeltaNetShape, GatedDeltaNet};
pub use mamba2::{Mamba2, Mamba2Gate, Mamba2Shape};
pub use short_conv::ShortConv;
