//! OLMo 2: the Llama layout with norms after attention and MLP (none before) and QK-norm
//! over the whole q and k projections.

use serde_json::{json, Value};

use super::{gemma3, llama, qwen3};
use crate::config::family::{Family, GgufRules};
use crate::config::RawConfig;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::Layout;
use asa_core::error::Result;

pub(crate) const FAMILY: Family = Family {
    name: "olmo2",
    norm_eps: rms_norm_eps,
    qk_norm: true,
    layout,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `olmo2`: the QK-norm, norms after attention and MLP and none before. OLMo 3
/// is written as `olmo2` too, with its sliding window ([`gguf_config`]).
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
    config: gguf_config,
    ..llama::gguf_rules("olmo2")
};

/// llama.cpp's converter writes OLMo 3 as `olmo2` with `attention.sliding_window` and
/// `attention.sliding_window_pattern` (a flag per layer, true: sliding): such a file is
/// OLMo 3 (`model_type` olmo3, its `layer_types` from the flags, the window), never OLMo 2
/// with the window dropped. Its RoPE: the file's for the full layers (as Olmo3Config's
/// `rope_parameters` keyed by layer type, a scaling applying to the full layers) and the
/// file's base frequency, unscaled, for the sliding ones.
fn gguf_config(meta: &Meta, _: &TensorFacts, _: &Dims, raw: &mut Value) -> Result<()> {
    if meta.opt_usize_key("attention.sliding_window")?.is_none() {
        return Ok(());
    }
    raw["model_type"] = json!("olmo3");
    gemma3::gguf_layer_types(meta, raw)?;
    let full = raw["rope_parameters"].take();
    let sliding = json!({"rope_type": "default", "rope_theta": full["rope_theta"].clone()});
    raw["rope_theta"] = full["rope_theta"].clone();
    raw["rope_parameters"] = json!({"full_attention": full, "sliding_attention": sliding});
    Ok(())
}

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
