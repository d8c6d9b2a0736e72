//! Qwen3 dense: per-head q_norm / k_norm before RoPE, no q/k/v bias (Llama's
//! `attention_bias`), `head_dim` from config, Qwen2's sliding window.

use super::{llama, qwen2};
use crate::config::family::{Family, GgufRules, NameTable};

pub(crate) const FAMILY: Family = Family {
    name: "qwen3",
    // transformers' Qwen3Config default (it does not derive it from hidden / heads)
    default_head_dim: Some(128),
    qk_norm: true,
    window: qwen2::WINDOW,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `qwen3`: Llama's names and the QK-norm's.
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_QK_NORM, llama::GGUF_BLOCKS],
    ..llama::gguf_rules("qwen3")
};

/// The QK-norm (Qwen3, OLMo 2, Gemma 3), as llama.cpp names it.
pub(crate) const GGUF_QK_NORM: NameTable = &[
    ("attn_q_norm", Some("self_attn.q_norm")),
    ("attn_k_norm", Some("self_attn.k_norm")),
];
