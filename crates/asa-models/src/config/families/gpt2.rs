//! GPT-2: learned absolute positions (`wpe`), LayerNorm with biases, Conv1D weights
//! (`[in, out]`), a fused `c_attn`, the tanh-GELU MLP (`gelu_new`), tied embeddings.

use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{llama, phi3};
use crate::config::family::{Biases, Family, GgufRules, NameTable, StoredTensor, Undo};
use crate::config::raw::own_keys_readable;
use crate::config::RawConfig;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::{Layout, MlpKind, NormKind, QkvLayout};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

pub(crate) const FAMILY: Family = Family {
    name: "gpt2",
    // GPT2Config: n_inner null means 4 * n_embd
    default_intermediate_per_hidden: Some(4),
    activation: "gelu_new",
    activation_key: activation_function,
    keys: own_keys_readable::<Gpt2Keys>,
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
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `gpt2`: learned positions, the final LayerNorm's bias, the fused q/k/v,
/// Conv1D weights stored `[out, in]`.
pub(crate) const GGUF: GgufRules = GgufRules {
    globals: &[
        &[("position_embd.weight", Some("model.embed_positions.weight"))],
        GGUF_NORM_BIAS,
        llama::GGUF_GLOBALS,
    ],
    blocks: &[phi3::GGUF_FUSED_QKV, llama::GGUF_BLOCKS],
    undo: transposed_conv1d,
    config: gguf_config,
    ..llama::gguf_rules("gpt2")
};

/// The final LayerNorm's bias (GPT-2, GPT-NeoX), as llama.cpp names it.
pub(crate) const GGUF_NORM_BIAS: NameTable = &[("output_norm.bias", Some("model.norm.bias"))];

/// The keys only GPT2Config has: the MLP activation, the norm epsilon's name and the
/// attention options.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Gpt2Keys {
    activation_function: Option<String>,
    layer_norm_epsilon: Option<f64>,
    scale_attn_weights: Option<bool>,
    scale_attn_by_inverse_layer_idx: Option<bool>,
    reorder_and_upcast_attn: Option<bool>,
}

/// `activation_function` (a string, or absent: resolution has read [`Gpt2Keys`]).
fn activation_function(raw: &RawConfig) -> Option<&str> {
    raw.json.get("activation_function").and_then(Value::as_str)
}

/// GPT-2's attention options: only the plain scaled attention is implemented.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let keys: Gpt2Keys = raw.family_keys(path)?;
    for (key, value, works) in [
        ("scale_attn_weights", keys.scale_attn_weights, true),
        (
            "scale_attn_by_inverse_layer_idx",
            keys.scale_attn_by_inverse_layer_idx,
            false,
        ),
        (
            "reorder_and_upcast_attn",
            keys.reorder_and_upcast_attn,
            false,
        ),
    ] {
        if value.is_some_and(|v| v != works) {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported(key, !works, works.to_string()),
            ));
        }
    }
    Ok(())
}

fn all_biases(_: &RawConfig) -> Biases {
    Biases::all(true)
}

fn layer_norm_epsilon(raw: &RawConfig) -> f64 {
    raw.own::<Gpt2Keys>().layer_norm_epsilon.unwrap_or(1e-5)
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

/// llama.cpp stores the Conv1D weights transposed (`[out, in]`): transposed back.
fn transposed_conv1d(t: &StoredTensor) -> Undo {
    match t.module {
        Some("qkv_proj" | "o_proj" | "up_proj" | "down_proj")
            if t.name.ends_with(".weight") && t.rank == 2 =>
        {
            Undo::Transpose
        }
        _ => Undo::Nothing,
    }
}

/// GPT-2's LayerNorm epsilon and its activation (`activation_function`, default
/// `gelu_new`).
fn gguf_config(_: &Meta, _: &TensorFacts, d: &Dims, raw: &mut serde_json::Value) -> Result<()> {
    raw["layer_norm_epsilon"] = json!(d.eps);
    raw["hidden_act"] = serde_json::Value::Null;
    Ok(())
}
