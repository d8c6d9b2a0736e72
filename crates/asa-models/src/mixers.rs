//! What mixes positions in each decoder layer: softmax attention (every family's, and the
//! only mixer the probe and the metrics see), or a hybrid's other mixers, which carry the
//! hidden state on ([`asa_engine::mixer`]). A family reads its layers' mixers from its config in
//! its own file (`crate::config::Family::mixers`); the decoder loads them
//! (`crate::mixer_loaders`).

pub use asa_engine::mixer::{DeltaNetShape, Mamba2Shape};

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
    /// Gated DeltaNet (`linear_attn`, Qwen3-Next).
    GatedDeltaNet(DeltaNetShape),
    /// Mamba-2 (`mamba`, Granite 4 hybrid).
    Mamba2(Mamba2Shape),
    /// Attention and Mamba-2 side by side on the same input, their outputs summed
    /// (Falcon-H1).
    AttentionAndMamba2(Mamba2Shape),
}

impl Mixer {
    /// The mixer in a word, as run.json's `layer_kinds` and `inspect` name it.
    pub fn name(self) -> &'static str {
        match self {
            Mixer::Attention => "attention",
            Mixer::ShortConv(_) => "short conv",
            Mixer::GatedDeltaNet(_) => "gated deltanet",
            Mixer::Mamba2(_) => "mamba2",
            Mixer::AttentionAndMamba2(_) => "attention + mamba2",
        }
    }

    /// Whether the layer has softmax attention (what the probe sees).
    pub fn has_attention(self) -> bool {
        matches!(self, Mixer::Attention | Mixer::AttentionAndMamba2(_))
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
        .filter(|&l| mixers[l].has_attention())
        .collect()
}
