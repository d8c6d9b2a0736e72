//! OLMo 2: the Llama layout with norms after attention and MLP (none before) and QK-norm
//! over the whole q and k projections.

use super::{llama, qwen3};
use crate::model::config::family::{Family, GgufRules};
use crate::model::config::RawConfig;
use crate::model::layout::Layout;

pub(crate) const FAMILY: Family = Family {
    name: "olmo2",
    norm_eps: rms_norm_eps,
    qk_norm: true,
    layout,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `olmo2`: the QK-norm, norms after attention and MLP and none before.
const GGUF: GgufRules = GgufRules {
    blocks: &[
        qwen3::GGUF_QK_NORM,
        &[
            ("post_attention_norm", Some("post_attention_layernorm")),
            ("post_ffw_norm", Some("post_feedforward_layernorm")),
            ("attn_norm", None),
            ("ffn_norm", None),
        ],
        llama::GGUF_BLOCKS,
    ],
    ..llama::gguf_rules("olmo2")
};

/// Olmo2Config's default is 1e-5.
fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

fn layout(_: &RawConfig) -> Layout {
    Layout {
        post_norm: true,
        qk_norm_whole: true,
        ..Layout::LLAMA
    }
}
