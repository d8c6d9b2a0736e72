//! Qwen2: the Llama layout with q/k/v biases (none on o), and a sliding window on the
//! layers `layer_types` (else `max_window_layers` onwards) name when `use_sliding_window`.

use super::llama;
use crate::config::family::{Biases, Family, GgufRules};
use crate::config::RawConfig;
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};

/// Qwen2Config's window (Qwen3 reads it alike): 4096 when `sliding_window` is absent.
pub(crate) const WINDOW: WindowRule = WindowRule {
    used: WindowUse::WhenEnabled,
    default_size: Some(4096),
    layers: WindowLayers::FromMaxWindowLayers,
};

pub(crate) const FAMILY: Family = Family {
    name: "qwen2",
    biases: qkv_bias,
    window: WINDOW,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `qwen2`: Llama's names, q and k not permuted.
const GGUF: GgufRules = llama::gguf_rules("qwen2");

fn qkv_bias(_: &RawConfig) -> Biases {
    Biases {
        qkv: true,
        o: false,
    }
}
