//! Qwen3 dense: per-head q_norm / k_norm before RoPE, no q/k/v bias (Llama's
//! `attention_bias`), `head_dim` from config, Qwen2's sliding window.

use super::{llama, qwen2};
use crate::model::config::family::Family;

pub(crate) const FAMILY: Family = Family {
    name: "qwen3",
    // transformers' Qwen3Config default (it does not derive it from hidden / heads)
    default_head_dim: Some(128),
    qk_norm: true,
    window: qwen2::WINDOW,
    ..llama::FAMILY
};
