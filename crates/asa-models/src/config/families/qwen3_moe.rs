//! Qwen3-MoE: Qwen3's attention (but `head_dim` from hidden / heads when absent) with a
//! mixture-of-experts MLP (`mlp.gate`, experts `gate_proj`/`up_proj`/`down_proj` of
//! `moe_intermediate_size`) on the layers `decoder_sparse_step` and `mlp_only_layers` pick,
//! renormalised only with `norm_topk_prob`, and with `use_sliding_window` a window on every
//! layer (Qwen3MoeConfig has neither `max_window_layers` nor `layer_types`: its model builds
//! one sliding mask for all layers; `sliding_window` 4096 when absent).
//!
//! llama.cpp's `qwen3moe` GGUF files (`convert_hf_to_gguf.py` Qwen3MoeModel,
//! `src/models/qwen3moe.cpp`): Qwen3's names and QK-norm, the router `ffn_gate_inp`, the
//! experts stacked (`ffn_{gate,up,down}_exps`, `expert_feed_forward_length` wide), the top-k
//! always renormalised (llama.cpp's graph does, whatever the checkpoint's `norm_topk_prob`:
//! the Hub's Qwen3-MoE models set it); a layer without a router has the dense MLP
//! (`mlp_only_layers`, which neither the converter nor llama.cpp's loader accepts).

use std::path::Path;

use serde::Deserialize;

use super::deepseek_v3::GGUF_STACKED_EXPERTS;
use super::{llama, qwen3};
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{Family, GgufRules};
use crate::config::raw::own_keys_readable;
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::Routing;

pub(crate) const FAMILY: Family = Family {
    name: "qwen3_moe",
    keys: own_keys_readable::<QwenMoeKeys>,
    default_head_dim: None,
    window: WindowRule {
        used: WindowUse::WhenEnabled,
        default_size: Some(4096),
        layers: WindowLayers::All,
    },
    experts,
    gguf: Some(&GGUF),
    ..qwen3::FAMILY
};

/// llama.cpp's `qwen3moe`.
const GGUF: GgufRules = GgufRules {
    blocks: &[
        &[("ffn_gate_inp", Some("mlp.gate"))],
        qwen3::GGUF_QK_NORM,
        llama::GGUF_BLOCKS,
    ],
    assembled: GGUF_STACKED_EXPERTS,
    config: gguf_config,
    ..llama::gguf_rules("qwen3moe")
};

/// The experts' count, width and top-k, renormalised as llama.cpp runs them, on the layers
/// with a router.
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    _: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    qwen_gguf_experts(meta, tensors, raw)
}

/// Qwen's expert keys from llama.cpp's (Qwen3-MoE, Qwen3-Next): `expert_count`,
/// `expert_used_count`, `expert_feed_forward_length`, the top-k renormalised (llama.cpp's
/// graphs always do), and the layers without a router dense.
pub(crate) fn qwen_gguf_experts(
    meta: &Meta,
    tensors: &TensorFacts,
    raw: &mut serde_json::Value,
) -> Result<()> {
    let layers = meta.trunk_layers()?;
    raw["num_experts"] = serde_json::json!(meta.usize_key("expert_count")?);
    raw["num_experts_per_tok"] = serde_json::json!(meta.usize_key("expert_used_count")?);
    raw["moe_intermediate_size"] = serde_json::json!(meta.usize_key("expert_feed_forward_length")?);
    raw["norm_topk_prob"] = serde_json::json!(true);
    raw["decoder_sparse_step"] = serde_json::json!(1);
    let dense: Vec<usize> = (0..layers)
        .filter(|l| {
            !tensors
                .names
                .contains(&format!("model.layers.{l}.mlp.gate.weight"))
        })
        .collect();
    raw["mlp_only_layers"] = serde_json::json!(dense);
    Ok(())
}

/// Qwen3MoeConfig's defaults: 128 experts, top 8, 768, step 1, no renormalising.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let defaults = QwenDefaults {
        count: 128,
        top_k: 8,
        intermediate: 768,
        shared_intermediate: 0,
        renormalise: false,
    };
    qwen_experts(raw, dense, path, defaults, ExpertNames::Qwen)
}

/// The keys only the Qwen MoE config classes have (Qwen3-MoE's, Qwen3-Next's): the layers
/// with experts, and the shared expert's width.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct QwenMoeKeys {
    decoder_sparse_step: Option<usize>,
    mlp_only_layers: Option<Vec<usize>>,
    shared_expert_intermediate_size: Option<usize>,
}

/// A Qwen config class's defaults for its experts.
pub(crate) struct QwenDefaults {
    pub count: usize,
    pub top_k: usize,
    pub intermediate: usize,
    /// `shared_expert_intermediate_size` when absent (where the names have a shared expert).
    pub shared_intermediate: usize,
    pub renormalise: bool,
}

/// Qwen's experts (softmax top-k, renormalised by `norm_topk_prob`) on the layers
/// `decoder_sparse_step` and `mlp_only_layers` pick, stored as `names` says, with a shared
/// expert of `shared_expert_intermediate_size` where the names have one.
pub(crate) fn qwen_experts(
    raw: &RawExperts,
    dense: DenseSizes,
    path: &Path,
    defaults: QwenDefaults,
    names: ExpertNames,
) -> Result<Option<Experts>> {
    let num_layers = dense.num_layers;
    let keys: QwenMoeKeys = raw.config.family_keys(path)?;
    let step = keys.decoder_sparse_step.unwrap_or(1);
    if step == 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("decoder_sparse_step", 0, "at least 1"),
        ));
    }
    let dense = keys.mlp_only_layers.as_deref().unwrap_or(&[]);
    let count = raw
        .num_experts
        .or(raw.num_local_experts)
        .unwrap_or(defaults.count);
    let shared_intermediate = match names.shared() {
        Some(_) => Some(
            keys.shared_expert_intermediate_size
                .unwrap_or(defaults.shared_intermediate),
        ),
        None => None,
    };
    Ok(Some(Experts {
        count,
        top_k: raw.num_experts_per_tok.unwrap_or(defaults.top_k),
        routing: Routing::SoftmaxTopK {
            renormalise: raw.norm_topk_prob.unwrap_or(defaults.renormalise),
        },
        clamped: None,
        intermediate: raw.moe_intermediate_size.unwrap_or(defaults.intermediate),
        layers: (0..num_layers)
            .filter(|l| !dense.contains(l) && count > 0 && (l + 1) % step == 0)
            .collect(),
        names,
        shared_intermediate,
    }))
}
