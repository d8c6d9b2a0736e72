//! GPT-2: learned absolute positions (`wpe`), LayerNorm with biases, Conv1D weights
//! (`[in, out]`), a fused `c_attn`, the tanh-GELU MLP (`gelu_new`), tied embeddings.

use std::path::Path;

use super::llama;
use crate::error::{Error, Result};
use crate::model::config::family::{Biases, Family};
use crate::model::config::RawConfig;
use crate::model::layout::{Layout, MlpKind, NormKind, QkvLayout};

pub(crate) const FAMILY: Family = Family {
    name: "gpt2",
    // GPT2Config: n_inner null means 4 * n_embd
    default_intermediate_per_hidden: Some(4),
    activation: "gelu_new",
    activation_key: activation_function,
    check,
    biases: all_biases,
    mlp_bias: true,
    norm_eps: layer_norm_epsilon,
    // GPT2Config ties them unless told otherwise
    default_tie_word_embeddings: true,
    layout,
    // GPT-2 files name the base model `transformer.` or nothing (openai-community/gpt2)
    weight_names: &[
        ("model.embed_tokens.weight", "{b}wte.weight"),
        ("model.embed_positions.weight", "{b}wpe.weight"),
        ("model.norm.{p}", "{b}ln_f.{p}"),
        ("model.layers.{l}.input_layernorm.{p}", "{b}h.{l}.ln_1.{p}"),
        (
            "model.layers.{l}.post_attention_layernorm.{p}",
            "{b}h.{l}.ln_2.{p}",
        ),
        (
            "model.layers.{l}.self_attn.qkv_proj.{p}",
            "{b}h.{l}.attn.c_attn.{p}",
        ),
        (
            "model.layers.{l}.self_attn.o_proj.{p}",
            "{b}h.{l}.attn.c_proj.{p}",
        ),
        ("model.layers.{l}.mlp.up_proj.{p}", "{b}h.{l}.mlp.c_fc.{p}"),
        (
            "model.layers.{l}.mlp.down_proj.{p}",
            "{b}h.{l}.mlp.c_proj.{p}",
        ),
    ],
    ignored_on_load: &[".attn.bias", ".attn.masked_bias"],
    ..llama::FAMILY
};

fn activation_function(raw: &RawConfig) -> Option<&str> {
    raw.activation_function.as_deref()
}

/// GPT-2's attention options: only the plain scaled attention is implemented.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    for (key, value, works) in [
        ("scale_attn_weights", raw.scale_attn_weights, true),
        (
            "scale_attn_by_inverse_layer_idx",
            raw.scale_attn_by_inverse_layer_idx,
            false,
        ),
        (
            "reorder_and_upcast_attn",
            raw.reorder_and_upcast_attn,
            false,
        ),
    ] {
        if value.is_some_and(|v| v != works) {
            return Err(Error::input(
                path,
                format!("{key}: {} is not implemented (only {works})", !works),
            ));
        }
    }
    Ok(())
}

fn all_biases(_: &RawConfig) -> Biases {
    Biases::all(true)
}

fn layer_norm_epsilon(raw: &RawConfig) -> f64 {
    raw.layer_norm_epsilon.unwrap_or(1e-5)
}

fn layout(_: &RawConfig) -> Layout {
    Layout {
        norm: NormKind::Layer,
        mlp: MlpKind::GeluTanh,
        qkv: QkvLayout::Fused,
        learned_positions: true,
        conv1d: true,
        ..Layout::LLAMA
    }
}
