//! What mixes positions in each decoder layer: softmax attention (every family's, and the
//! only mixer the probe and the metrics see), or a hybrid's other mixers, which carry the
//! hidden state on ([`crate::mixer`]). A family reads its layers' mixers from its config in
//! its own file (`super::config::Family::mixers`); the decoder loads them here.

use candle_core::Tensor;

use super::layers::{linear, ProjDims};
use super::weights::WeightStore;
use crate::error::Result;
use crate::mixer::ShortConv;

/// A short gated convolution's settings (LFM2's `conv` layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShortConvShape {
    /// The causal convolution's width (`conv_L_cache`).
    pub kernel: usize,
    /// Biases on the projections and the convolution (`conv_bias`).
    pub bias: bool,
}

/// The mixer of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Mixer {
    /// Softmax attention (`self_attn`).
    Attention,
    /// A short gated convolution (`conv`).
    ShortConv(ShortConvShape),
}

impl Mixer {
    /// The mixer in a word, as run.json's `layer_kinds` and `inspect` name it.
    pub fn name(self) -> &'static str {
        match self {
            Mixer::Attention => "attention",
            Mixer::ShortConv(_) => "short conv",
        }
    }
}

/// `n` attention layers: the mixers of every family without other mixers.
pub fn every_layer_attention(n: usize) -> Vec<Mixer> {
    vec![Mixer::Attention; n]
}

/// The decoder layers (0-based) whose mixer is attention, in order: the probe numbers
/// them 0, 1, ... (their attention ordinals) and the tables by these layers.
pub fn attention_layers(mixers: &[Mixer]) -> Vec<usize> {
    (0..mixers.len())
        .filter(|&l| mixers[l] == Mixer::Attention)
        .collect()
}

/// Layer `prefix`'s short convolution (`{prefix}.in_proj`, `{prefix}.conv`,
/// `{prefix}.out_proj`) for `hidden` channels.
pub fn load_short_conv(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    shape: ShortConvShape,
) -> Result<ShortConv> {
    let proj = |name: &str, out_dim: usize| {
        let dims = ProjDims {
            in_dim: hidden,
            out_dim,
        };
        linear(store, &format!("{prefix}.{name}"), dims, shape.bias)
    };
    let in_proj = proj("in_proj", 3 * hidden)?;
    let weight = store.get(&format!("{prefix}.conv.weight"), &[hidden, 1, shape.kernel])?;
    let bias: Option<Tensor> = match shape.bias {
        true => Some(store.get(&format!("{prefix}.conv.bias"), &[hidden])?),
        false => None,
    };
    let out_proj = proj("out_proj", hidden)?;
    ShortConv::new(in_proj, weight.squeeze(1)?, bias, out_proj)
}
