//! Phi-3: the Llama layout with fused `qkv_proj` and `gate_up_proj`, no biases, partial
//! rotary (LongRoPE), Mistral's sliding window when `sliding_window` is set.

use super::{llama, mistral};
use crate::model::config::family::{Biases, Family};
use crate::model::config::RawConfig;
use crate::model::layout::{Layout, QkvLayout};

pub(crate) const FAMILY: Family = Family {
    name: "phi3",
    biases: no_bias,
    layout,
    window: mistral::WINDOW,
    ..llama::FAMILY
};

/// Phi-3's projections have no biases.
fn no_bias(_: &RawConfig) -> Biases {
    Biases::all(false)
}

fn layout(_: &RawConfig) -> Layout {
    Layout {
        qkv: QkvLayout::Fused,
        fused_gate_up: true,
        ..Layout::LLAMA
    }
}
