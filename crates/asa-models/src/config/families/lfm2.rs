//! LFM2 (Liquid AI): a hybrid of short gated convolutions (`conv` layers) and attention
//! layers (`full_attention`) by `layer_types` (else `full_attn_idxs`; else every layer
//! attention), the Llama layout under other names (`operator_norm`, `ffn_norm`,
//! `feed_forward.w1/w3/w2`, `out_proj`, `q_layernorm`, and the final norm
//! `embedding_norm`), per-head QK-norm, `norm_eps`, `rope_theta` 1e6 by default, tied
//! embeddings, and an MLP width of its own rule (`block_auto_adjust_ff_dim`).
//!
//! llama.cpp's `lfm2` GGUF files (`convert_hf_to_gguf.py` LFM2Model, `src/models/lfm2.cpp`):
//! `attention.head_count_kv` per layer, 0 on the convolution layers (the loader's only
//! sign of them); the conv weight squeezed to `[channels, kernel]`; `shortconv.l_cache`;
//! `feed_forward_length` the width after LFM2's rule; the final norm `token_embd_norm`;
//! no q/k permutation. A sliding window (written only for the audio tokenizer) is refused.

use std::path::Path;

use serde::Deserialize;

use super::{llama, qwen3};
use crate::config::family::{Family, GgufRules, NameTable, Ropes, StoredTensor, Undo};
use crate::config::raw::own_keys_readable;
use crate::config::sliding_window::checked_layer_types;
use crate::config::RawConfig;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::mixers::{Mixer, ShortConvShape};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

pub(crate) const FAMILY: Family = Family {
    name: "lfm2",
    keys: own_keys_readable::<Lfm2Keys>,
    dense_intermediate,
    activation_key: no_activation_key,
    check,
    norm_eps,
    default_max_position_embeddings: 128_000,
    default_tie_word_embeddings: true,
    qk_norm: true,
    rope,
    mixers,
    gguf: Some(&GGUF),
    weight_names: &[
        ("model.norm.{p}", "model.embedding_norm.{p}"),
        (
            "model.layers.{l}.input_layernorm.{p}",
            "model.layers.{l}.operator_norm.{p}",
        ),
        (
            "model.layers.{l}.post_attention_layernorm.{p}",
            "model.layers.{l}.ffn_norm.{p}",
        ),
        (
            "model.layers.{l}.self_attn.o_proj.{p}",
            "model.layers.{l}.self_attn.out_proj.{p}",
        ),
        (
            "model.layers.{l}.self_attn.q_norm.{p}",
            "model.layers.{l}.self_attn.q_layernorm.{p}",
        ),
        (
            "model.layers.{l}.self_attn.k_norm.{p}",
            "model.layers.{l}.self_attn.k_layernorm.{p}",
        ),
        (
            "model.layers.{l}.mlp.gate_proj.{p}",
            "model.layers.{l}.feed_forward.w1.{p}",
        ),
        (
            "model.layers.{l}.mlp.up_proj.{p}",
            "model.layers.{l}.feed_forward.w3.{p}",
        ),
        (
            "model.layers.{l}.mlp.down_proj.{p}",
            "model.layers.{l}.feed_forward.w2.{p}",
        ),
    ],
    ..llama::FAMILY
};

/// The keys only Lfm2Config has: its norm epsilon's key, the short convolution's width and
/// biases, the MLP width rule, the attention layers (else `layer_types`), and the legacy
/// names of `tie_word_embeddings` and `intermediate_size`, which win over them.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Lfm2Keys {
    norm_eps: Option<f64>,
    #[serde(rename = "conv_L_cache")]
    conv_l_cache: Option<usize>,
    conv_bias: Option<bool>,
    block_auto_adjust_ff_dim: Option<bool>,
    block_ffn_dim_multiplier: Option<f64>,
    block_multiple_of: Option<usize>,
    full_attn_idxs: Option<Vec<usize>>,
    tie_embedding: Option<bool>,
    block_ff_dim: Option<usize>,
}

/// The layer types Lfm2Model masks by.
const LAYER_TYPES: [&str; 2] = ["full_attention", "conv"];

/// `Lfm2MLP`'s width: `intermediate_size` (or the legacy `block_ff_dim`), and when
/// `block_auto_adjust_ff_dim` (default true) two thirds of it, times
/// `block_ffn_dim_multiplier` (default 1; none: not), rounded up to a multiple of
/// `block_multiple_of` (256), each step truncated as Python's `int` of a float.
fn dense_intermediate(raw: &RawConfig) -> Option<usize> {
    let h: Lfm2Keys = raw.own();
    let stated = h.block_ff_dim.or(raw.intermediate_size)?;
    if !h.block_auto_adjust_ff_dim.unwrap_or(true) {
        return Some(stated);
    }
    let width = (2.0 * stated as f64 / 3.0) as usize;
    // an explicit null multiplier skips the rounding, as the config class's None does
    match h.block_ffn_dim_multiplier.or(Some(1.0)) {
        Some(multiplier) => {
            let width = (multiplier * width as f64) as usize;
            let of = h.block_multiple_of.unwrap_or(256).max(1);
            Some(width.div_ceil(of) * of)
        }
        None => Some(width),
    }
}

/// LFM2's MLP is SiLU whatever the config says (it has no activation key).
fn no_activation_key(_: &RawConfig) -> Option<&str> {
    None
}

fn norm_eps(raw: &RawConfig) -> f64 {
    raw.own::<Lfm2Keys>().norm_eps.unwrap_or(1e-5)
}

/// Refuses what Lfm2Config would read otherwise than this loader: a legacy
/// `tie_embedding` against `tie_word_embeddings`, a partial RoPE (Lfm2RotaryEmbedding
/// rotates every dimension whatever it says), a width rule that does not give a size.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let h: Lfm2Keys = raw.family_keys(path)?;
    if let Some(tie) = h.tie_embedding {
        if tie != raw.tie_word_embeddings.unwrap_or(true) {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::inconsistent(
                    &["tie_embedding", "tie_word_embeddings"],
                    "tie_embedding and tie_word_embeddings disagree (Lfm2Config reads the legacy tie_embedding): not implemented",
                ),
            ));
        }
    }
    if raw.partial_rotary_factor.is_some_and(|f| f != 1.0) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::unsupported(
                "partial_rotary_factor",
                raw.partial_rotary_factor.unwrap_or(1.0),
                "1: Lfm2RotaryEmbedding rotates every dimension",
            ),
        ));
    }
    if h.block_multiple_of == Some(0)
        || h.block_ffn_dim_multiplier
            .is_some_and(|m| !(m.is_finite() && m > 0.0))
    {
        let problem = match h.block_multiple_of {
            Some(0) => CheckpointProblem::out_of_range("block_multiple_of", 0, "at least 1"),
            _ => CheckpointProblem::out_of_range(
                "block_ffn_dim_multiplier",
                h.block_ffn_dim_multiplier.unwrap_or(f64::NAN),
                "a finite number > 0",
            ),
        };
        return Err(Error::checkpoint_problem(path, problem));
    }
    if h.conv_l_cache == Some(0) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("conv_L_cache", 0, "at least 1"),
        ));
    }
    Ok(())
}

/// Lfm2Config's `default_theta` is 1e6.
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((raw.resolve_rope_with_theta(path, head_dim, 1e6)?, None))
}

/// `conv` layers are short convolutions (`conv_L_cache` wide, 3 by default; biases by
/// `conv_bias`), the others attention: by `layer_types`, else `full_attn_idxs`.
fn mixers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<Vec<Mixer>> {
    let h: Lfm2Keys = raw.family_keys(path)?;
    let conv = Mixer::ShortConv(ShortConvShape {
        kernel: h.conv_l_cache.unwrap_or(3),
        bias: h.conv_bias.unwrap_or(false),
    });
    let types = checked_layer_types(raw.layer_types.as_deref(), num_layers, &LAYER_TYPES, path)?;
    let attention: Vec<bool> = match (types, &h.full_attn_idxs) {
        (Some(types), _) => types.iter().map(|t| t == "full_attention").collect(),
        (None, Some(idxs)) => (0..num_layers).map(|l| idxs.contains(&l)).collect(),
        (None, None) => vec![true; num_layers],
    };
    Ok(attention
        .into_iter()
        .map(|a| if a { Mixer::Attention } else { conv })
        .collect())
}

/// llama.cpp's `lfm2`: Llama's names, QK-norm, the short convolutions, the final norm as
/// `token_embd_norm`.
const GGUF: GgufRules = GgufRules {
    globals: &[
        &[("token_embd_norm.weight", Some("model.norm.weight"))],
        llama::GGUF_GLOBALS,
    ],
    blocks: &[GGUF_SHORT_CONV, qwen3::GGUF_QK_NORM, llama::GGUF_BLOCKS],
    undo: unsqueeze_conv,
    config: gguf_config,
    ..llama::gguf_rules("lfm2")
};

/// The short convolution's tensors.
const GGUF_SHORT_CONV: NameTable = &[
    ("shortconv.in_proj", Some("conv.in_proj")),
    ("shortconv.conv", Some("conv.conv")),
    ("shortconv.out_proj", Some("conv.out_proj")),
];

/// The conv weight `[channels, 1, kernel]` is stored squeezed.
fn unsqueeze_conv(t: &StoredTensor) -> Undo {
    match (t.module, t.rank) {
        (Some("conv"), 2) => Undo::Unsqueeze(1),
        _ => Undo::Nothing,
    }
}

/// The layers' mixers from the per-layer key-value head counts (0: a convolution layer,
/// whose kernel is `shortconv.l_cache`), the width as written, `norm_eps`.
fn gguf_config(
    meta: &Meta,
    _: &TensorFacts,
    dims: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    if meta.opt_usize_key("attention.sliding_window")?.is_some() {
        let key = meta.key("attention.sliding_window");
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unimplemented(
                &[&key],
                format!("{key} (a sliding window on every attention layer) is not implemented for lfm2: Lfm2Model has none"),
            ),
        ));
    }
    let kv_heads = meta
        .opt_per_layer_key("attention.head_count_kv")?
        .unwrap_or_else(|| {
            vec![dims.kv_heads; raw["num_hidden_layers"].as_u64().unwrap_or(0) as usize]
        });
    if let Some(other) = kv_heads.iter().find(|&&n| n != 0 && n != dims.kv_heads) {
        let key = meta.key("attention.head_count_kv");
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unimplemented(
                &[&key],
                format!("{key} gives attention layers {} and {other} key-value heads: Lfm2Config has one count", dims.kv_heads),
            ),
        ));
    }
    let types: Vec<&str> = kv_heads
        .iter()
        .map(|&n| if n == 0 { "conv" } else { "full_attention" })
        .collect();
    raw["layer_types"] = serde_json::json!(types);
    raw["conv_L_cache"] = serde_json::json!(meta.usize_key("shortconv.l_cache")?);
    raw["conv_bias"] = serde_json::json!(false);
    raw["block_auto_adjust_ff_dim"] = serde_json::json!(false);
    raw["norm_eps"] = serde_json::json!(dims.eps);
    Ok(())
}
