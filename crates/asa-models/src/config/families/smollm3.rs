//! SmolLM3: the Llama layout with NoPE layers (`no_rope_layers`, 1 where a layer uses RoPE;
//! else every `no_rope_layer_interval`-th layer, 4 by default), tied embeddings and
//! `rope_theta` 2e6 by default; a sliding window on the layers `layer_types` names.
//!
//! llama.cpp's `smollm3` GGUF files: Llama's tensors, q/k permuted (`SmolLM3Model` is a
//! `LlamaModel` in `convert_hf_to_gguf.py`), no NoPE key: the loader sets
//! `n_no_rope_layer_step = 4` and the graph rotates where `(il + 1) % 4 != 0`
//! (`src/models/smollm3.cpp`), SmolLM3Config's `no_rope_layer_interval` 4; and no sliding
//! window (the graph builds one full-attention KV cache whatever the metadata says).

use std::path::Path;

use super::llama;
use crate::attention_layers::{no_rope_layers, AttentionLayers};
use crate::config::family::{Family, GgufRules, Ropes};
use crate::config::RawConfig;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

pub(crate) const FAMILY: Family = Family {
    name: "smollm3",
    check,
    default_max_position_embeddings: 32768,
    default_tie_word_embeddings: true,
    rope,
    // SmolLM3Model masks by layer_types whatever use_sliding_window says
    window: WindowRule {
        used: WindowUse::Always,
        default_size: None,
        layers: WindowLayers::Listed,
    },
    attention_layers,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `smollm3`: Llama's names and q/k permutation, and its fixed NoPE layers.
const GGUF: GgufRules = GgufRules {
    undo: llama::unpermute_qk,
    config: gguf_config,
    ..llama::gguf_rules("smollm3")
};

/// llama.cpp's `n_no_rope_layer_step` for `smollm3`, a constant of its loader (no metadata
/// key sets it): layer `il` is NoPE where `(il + 1) % 4 == 0`.
const GGUF_NO_ROPE_LAYER_STEP: usize = 4;

/// Llama's q/k/v bias from the tensors; every 4th layer NoPE as llama.cpp's loader fixes it;
/// no sliding window, which llama.cpp's `smollm3` graph never applies (an
/// `attention.sliding_window` key is ignored there, so here too).
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    dims: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    llama::attention_bias_from_q(meta, tensors, dims, raw)?;
    raw["no_rope_layer_interval"] = serde_json::json!(GGUF_NO_ROPE_LAYER_STEP);
    raw["use_sliding_window"] = serde_json::json!(false);
    raw["sliding_window"] = serde_json::Value::Null;
    Ok(())
}

/// SmolLM3Config derives sliding layers from the NoPE layers when `layer_types` is absent
/// and `use_sliding_window` is set: not implemented (a saved config lists them).
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let window = raw.sliding_window.as_ref().is_some_and(|w| !w.is_null());
    if raw.layer_types.is_none() && raw.use_sliding_window == Some(true) && window {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::unimplemented(
                &["use_sliding_window", "layer_types"],
                "use_sliding_window without layer_types is not implemented for smollm3 (SmolLM3Config derives the sliding layers from no_rope_layers): give layer_types",
            ),
        ));
    }
    Ok(())
}

/// SmolLM3Config's `default_theta` is 2e6.
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((raw.resolve_rope_with_theta(path, head_dim, 2e6)?, None))
}

/// The NoPE layers.
fn attention_layers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<AttentionLayers> {
    Ok(AttentionLayers {
        no_rope: no_rope_layers(
            raw.no_rope_layers.as_deref(),
            raw.no_rope_layer_interval,
            num_layers,
            path,
        )?,
        ..AttentionLayers::default()
    })
}
