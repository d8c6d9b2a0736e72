//! Llama (SmolLM, TinyLlama, Llama 2/3), incl. GQA and llama3 RoPE: the reference the
//! other families start from (`..llama::FAMILY`).

use std::path::Path;

use crate::attention_layers::AttentionLayers;
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::gguf_rules::{no_config_keys, nothing_undone};
use crate::config::family::{Biases, Family, GgufRules, NameTable, Ropes, StoredTensor, Undo};
use crate::config::raw::{own_keys_readable, NoOwnKeys};
use crate::config::{GemmaSettings, RawConfig};
use crate::experts::Experts;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::Layout;
use crate::mixers::{every_layer_attention, Mixer};
use crate::multipliers::Multipliers;
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::error::Result;
use asa_engine::attention::latent::LatentShape;

pub(crate) const FAMILY: Family = Family {
    name: "llama",
    heads_only: false,
    default_head_dim: None,
    default_intermediate_per_hidden: None,
    dense_intermediate: intermediate_size,
    activation: "silu",
    activation_key: hidden_act,
    keys: own_keys_readable::<NoOwnKeys>,
    check: nothing_to_check,
    mxfp4_experts: false,
    biases: attention_bias,
    mlp_bias: false,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 2048,
    default_tie_word_embeddings: false,
    qk_norm: false,
    layout,
    rope,
    window: WindowRule {
        used: WindowUse::Never,
        default_size: None,
        layers: WindowLayers::FromMaxWindowLayers,
    },
    attention_layers: every_layer_alike,
    mixers: attention_only,
    experts: dense,
    latent: no_latent,
    multipliers: no_multipliers,
    scalars: no_scalars,
    weight_names: &[],
    ignored_on_load: &[],
    gguf: Some(&GGUF),
};

fn intermediate_size(raw: &RawConfig) -> Option<usize> {
    raw.intermediate_size
}

pub(crate) fn hidden_act(raw: &RawConfig) -> Option<&str> {
    raw.hidden_act.as_deref()
}

fn nothing_to_check(_: &RawConfig, _: &Path) -> Result<()> {
    Ok(())
}

/// q/k/v and o biases as `attention_bias` says (none by default).
fn attention_bias(raw: &RawConfig) -> Biases {
    Biases::all(raw.attention_bias.unwrap_or(false))
}

fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-6)
}

fn layout(_: &RawConfig) -> Layout {
    Layout::LLAMA
}

/// One RoPE for every layer, as the config gives it.
pub(crate) fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((raw.resolve_rope(path, head_dim)?, None))
}

/// Every layer rotates and sees every earlier key (or the window's).
fn every_layer_alike(_: &RawConfig, _: usize, _: &Path) -> Result<AttentionLayers> {
    Ok(AttentionLayers::default())
}

/// Attention in every layer.
fn attention_only(_: &RawConfig, num_layers: usize, _: &Path) -> Result<Vec<Mixer>> {
    Ok(every_layer_attention(num_layers))
}

fn dense(_: &RawExperts, _: DenseSizes, _: &Path) -> Result<Option<Experts>> {
    Ok(None)
}

fn no_latent(_: &RawConfig, _: &Path) -> Result<Option<LatentShape>> {
    Ok(None)
}

fn no_multipliers(_: &RawConfig, _: &Path) -> Result<Multipliers> {
    Ok(Multipliers::default())
}

fn no_scalars(_: &RawConfig, _: &Path, _: usize) -> Result<Option<GemmaSettings>> {
    Ok(None)
}

/// llama.cpp's names of the tensors outside the blocks (`convert_hf_to_gguf.py`).
pub(crate) const GGUF_GLOBALS: NameTable = &[
    ("token_embd.weight", Some("model.embed_tokens.weight")),
    ("output_norm.weight", Some("model.norm.weight")),
    ("output.weight", Some("lm_head.weight")),
];

/// llama.cpp's names of a Llama block's tensors, by role.
pub(crate) const GGUF_BLOCKS: NameTable = &[
    ("attn_norm", Some("input_layernorm")),
    ("attn_q", Some("self_attn.q_proj")),
    ("attn_k", Some("self_attn.k_proj")),
    ("attn_v", Some("self_attn.v_proj")),
    ("attn_output", Some("self_attn.o_proj")),
    ("ffn_norm", Some("post_attention_layernorm")),
    ("ffn_gate", Some("mlp.gate_proj")),
    ("ffn_up", Some("mlp.up_proj")),
    ("ffn_down", Some("mlp.down_proj")),
];

/// GGUF architecture `arch` read as llama.cpp's Llama names, with nothing to undo and no
/// config.json keys beyond Llama's: what the other families' GGUF rules start from.
pub(crate) const fn gguf_rules(arch: &'static str) -> GgufRules {
    GgufRules {
        arch,
        globals: &[GGUF_GLOBALS],
        blocks: &[GGUF_BLOCKS],
        whole: &[],
        assembled: &[],
        undo: nothing_undone,
        config: no_config_keys,
        rope_freqs_original_context: None,
    }
}

/// llama.cpp's `llama`: q and k rows permuted, q/k/v biases where `attn_q` has one; with
/// experts, Mixtral (`mixtral::gguf_keys`).
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_BLOCKS, super::mixtral::GGUF_ROUTER],
    assembled: super::mixtral::GGUF_EXPERTS,
    undo: unpermute_qk,
    config: llama_gguf_config,
    ..gguf_rules("llama")
};

/// `attention_bias` from the q projection; a file with experts is Mixtral.
fn llama_gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    dims: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    attention_bias_from_q(meta, tensors, dims, raw)?;
    super::mixtral::gguf_keys(meta, raw)
}

/// llama.cpp permutes the rows of the llama q and k projections (weights and biases) so
/// that its interleaved RoPE matches HF's rotate-half: q with `head_count`, k with
/// `head_count_kv`.
pub(crate) fn unpermute_qk(t: &StoredTensor) -> Undo {
    match t.module {
        Some("q_proj") => Undo::Permutation(t.heads),
        Some("k_proj") => Undo::Permutation(t.kv_heads),
        _ => Undo::Nothing,
    }
}

/// `attention_bias` when the first block's q projection has a bias.
pub(crate) fn attention_bias_from_q(
    _: &Meta,
    tensors: &TensorFacts,
    _: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    raw["attention_bias"] = serde_json::json!(tensors.has_q_bias);
    Ok(())
}
