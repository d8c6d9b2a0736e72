//! Phi-3: the Llama layout with fused `qkv_proj` and `gate_up_proj`, no biases, partial
//! rotary (LongRoPE), Mistral's sliding window when `sliding_window` is set.

use super::{llama, mistral};
use crate::config::family::{Biases, Family, GgufRules, NameTable};
use crate::config::RawConfig;
use crate::layout::{Layout, QkvLayout};

pub(crate) const FAMILY: Family = Family {
    name: "phi3",
    biases: no_bias,
    layout,
    window: mistral::WINDOW,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `phi3`: the fused q/k/v and gate/up projections.
const GGUF: GgufRules = GgufRules {
    blocks: &[
        &[("ffn_up", Some("mlp.gate_up_proj"))],
        GGUF_FUSED_QKV,
        llama::GGUF_BLOCKS,
    ],
    ..llama::gguf_rules("phi3")
};

/// A fused q/k/v projection and no gate (Phi-3, GPT-2, GPT-NeoX), as llama.cpp names it.
pub(crate) const GGUF_FUSED_QKV: NameTable = &[
    ("attn_qkv", Some("self_attn.qkv_proj")),
    ("attn_q", None),
    ("attn_k", None),
    ("attn_v", None),
    ("ffn_gate", None),
];

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
