//! GPT-NeoX (Pythia): LayerNorm with biases, a fused per-head q/k/v projection, partial
//! rotary (`rotary_pct`), a parallel residual, a GELU MLP, biases everywhere.

use serde::Deserialize;
use serde_json::json;

use super::{gpt2, llama};
use crate::config::family::{Biases, Family, GgufRules, StoredTensor, Undo};
use crate::config::raw::own_keys_readable;
use crate::config::RawConfig;
use crate::gguf_config::{metadata_bool, Dims, Meta, TensorFacts};
use crate::layout::{Layout, MlpKind, NormKind, QkvLayout};
use asa_core::error::Result;

pub(crate) const FAMILY: Family = Family {
    name: "gpt_neox",
    keys: own_keys_readable::<NeoxKeys>,
    // GPTNeoXConfig has neither key/value heads nor head_dim: transformers ignores them
    heads_only: true,
    activation: "gelu",
    biases: attention_bias,
    mlp_bias: true,
    norm_eps: layer_norm_eps,
    layout,
    weight_names: &[
        ("model.embed_tokens.weight", "gpt_neox.embed_in.weight"),
        ("lm_head.weight", "embed_out.weight"),
        ("model.norm.{p}", "gpt_neox.final_layer_norm.{p}"),
        (
            "model.layers.{l}.input_layernorm.{p}",
            "gpt_neox.layers.{l}.input_layernorm.{p}",
        ),
        (
            "model.layers.{l}.post_attention_layernorm.{p}",
            "gpt_neox.layers.{l}.post_attention_layernorm.{p}",
        ),
        (
            "model.layers.{l}.self_attn.qkv_proj.{p}",
            "gpt_neox.layers.{l}.attention.query_key_value.{p}",
        ),
        (
            "model.layers.{l}.self_attn.o_proj.{p}",
            "gpt_neox.layers.{l}.attention.dense.{p}",
        ),
        (
            "model.layers.{l}.mlp.up_proj.{p}",
            "gpt_neox.layers.{l}.mlp.dense_h_to_4h.{p}",
        ),
        (
            "model.layers.{l}.mlp.down_proj.{p}",
            "gpt_neox.layers.{l}.mlp.dense_4h_to_h.{p}",
        ),
    ],
    // old files keep their causal-mask and RoPE buffers
    ignored_on_load: &[
        ".attention.bias",
        ".attention.masked_bias",
        ".attention.rotary_emb.inv_freq",
    ],
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `gptneox`: GPT-2's names but for the learned positions, the fused q/k/v
/// regrouped.
const GGUF: GgufRules = GgufRules {
    globals: &[gpt2::GGUF_NORM_BIAS, llama::GGUF_GLOBALS],
    blocks: gpt2::GGUF.blocks,
    undo: qkv_regrouped,
    config: gguf_config,
    ..llama::gguf_rules("gptneox")
};

/// GPTNeoXConfig's attention_bias defaults to true.
fn attention_bias(raw: &RawConfig) -> Biases {
    Biases::all(raw.attention_bias.unwrap_or(true))
}

fn layer_norm_eps(raw: &RawConfig) -> f64 {
    raw.layer_norm_eps.unwrap_or(1e-5)
}

/// The key only GPTNeoXConfig has.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NeoxKeys {
    use_parallel_residual: Option<bool>,
}

/// `use_parallel_residual` (default true).
fn layout(raw: &RawConfig) -> Layout {
    Layout {
        norm: NormKind::Layer,
        mlp: MlpKind::Gelu,
        qkv: QkvLayout::FusedPerHead,
        parallel_residual: raw.own::<NeoxKeys>().use_parallel_residual.unwrap_or(true),
        ..Layout::LLAMA
    }
}

/// llama.cpp's converter reorders HF's per-head `[q, k, v]` groups of `attn_qkv` into all q
/// rows, then k, then v (as for Bloom): regrouped per head.
fn qkv_regrouped(t: &StoredTensor) -> Undo {
    match t.module {
        Some("qkv_proj") => Undo::QkvGrouping(t.heads),
        _ => Undo::Nothing,
    }
}

/// GPT-NeoX's LayerNorm epsilon, GELU, biases (where `attn_qkv` has one) and
/// `use_parallel_residual` when the metadata says.
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    d: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    raw["layer_norm_eps"] = json!(d.eps);
    raw["hidden_act"] = json!("gelu");
    raw["attention_bias"] = json!(tensors.has_qkv_bias);
    if let Some(parallel) = metadata_bool(meta.content, &meta.key("use_parallel_residual")) {
        raw["use_parallel_residual"] = json!(parallel);
    }
    Ok(())
}
