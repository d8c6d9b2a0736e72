//! Llama 4 (text, `llama4_text`): the Llama layout with RoPE on interleaved pairs (theta 5e5
//! by default), NoPE layers (`no_rope_layers`, else every `no_rope_layer_interval`-th),
//! chunked attention of `attention_chunk_size` positions on the layers `layer_types` names
//! `chunked_attention` (else the RoPE layers), temperature tuning of the NoPE layers'
//! queries (`attn_temperature_tuning`, `floor_scale`, `attn_scale`), an L2 QK-norm after RoPE
//! on the RoPE layers (`use_qk_norm`), and mixture-of-experts layers (`moe_layers`, else
//! every `interleave_moe_layer_step`-th) of `intermediate_size` with a shared expert, routed
//! by the sigmoid of the top-k logits on the experts' inputs; the dense layers' MLP is
//! `intermediate_size_mlp` (`feed_forward.*`).
//!
//! llama.cpp's `llama4` GGUF files (`convert_hf_to_gguf.py` Llama4Model,
//! `src/models/llama4.cpp`): q/k not permuted (llama.cpp's NORM RoPE is Llama 4's pairs);
//! `gate_up_proj` transposed and split into `ffn_gate_exps` / `ffn_up_exps`, `down_proj`
//! transposed, joined back; `feed_forward_length` the dense width and
//! `expert_feed_forward_length` the experts'; `interleave_moe_layer_step`. llama.cpp fixes
//! what the file does not say: chunks of 8192 on the RoPE layers, every 4th layer NoPE,
//! temperature tuning with floor 8192 and scale 0.1, QK-norm unless there are 128 experts,
//! Llama-3 rope_freqs computed with an original context of 8192; read the same here. A
//! `sliding_window` of 0 (llama.cpp's path for MobileLLM) is refused.

use std::path::Path;

use serde::Deserialize;

use super::llama;
use crate::attention_layers::{no_rope_layers, AttentionLayers, ChunkedLayers, TemperatureTuning};
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{Assembled, Family, GgufRules, Ropes};
use crate::config::raw::{own_keys_readable, present};
use crate::config::sliding_window::checked_layer_types;
use crate::config::{positive_or_null, RawConfig};
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::Layout;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::Routing;

/// The layer types Llama4TextConfig writes.
const LAYER_TYPES: [&str; 2] = ["full_attention", "chunked_attention"];

pub(crate) const FAMILY: Family = Family {
    name: "llama4_text",
    keys: own_keys_readable::<Llama4Keys>,
    dense_intermediate,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 4096 * 32,
    layout,
    rope,
    attention_layers,
    experts,
    gguf: Some(&GGUF),
    weight_names: &[
        (
            "model.layers.{l}.mlp.gate_proj.{p}",
            "model.layers.{l}.feed_forward.gate_proj.{p}",
        ),
        (
            "model.layers.{l}.mlp.up_proj.{p}",
            "model.layers.{l}.feed_forward.up_proj.{p}",
        ),
        (
            "model.layers.{l}.mlp.down_proj.{p}",
            "model.layers.{l}.feed_forward.down_proj.{p}",
        ),
    ],
    ..llama::FAMILY
};

/// llama.cpp's `llama4`.
const GGUF: GgufRules = GgufRules {
    blocks: &[
        &[
            ("ffn_gate_inp", Some("feed_forward.router")),
            (
                "ffn_gate_shexp",
                Some("feed_forward.shared_expert.gate_proj"),
            ),
            ("ffn_up_shexp", Some("feed_forward.shared_expert.up_proj")),
            (
                "ffn_down_shexp",
                Some("feed_forward.shared_expert.down_proj"),
            ),
        ],
        llama::GGUF_BLOCKS,
    ],
    assembled: &[
        Assembled::Join {
            hf: "feed_forward.experts.gate_up_proj",
            roles: &["ffn_gate_exps", "ffn_up_exps"],
            axis: 2,
            transposed: &["ffn_gate_exps", "ffn_up_exps"],
            merge_heads: false,
        },
        Assembled::Join {
            hf: "feed_forward.experts.down_proj",
            roles: &["ffn_down_exps"],
            axis: 0,
            transposed: &["ffn_down_exps"],
            merge_heads: false,
        },
    ],
    config: gguf_config,
    rope_freqs_original_context: Some(GGUF_FIXED.rope_freqs_original_context),
    ..llama::gguf_rules("llama4")
};

/// What llama.cpp's `llama4` loader fixes whatever the file says.
struct GgufFixed {
    chunk: usize,
    no_rope_step: usize,
    floor_scale: f64,
    attn_scale: f64,
    /// The expert count without QK-norm (Maverick's).
    no_qk_norm_experts: usize,
    /// The converter's `original_max_position_embeddings` for `rope_freqs` (it reads a
    /// top-level key Llama4TextConfig does not have, so its default).
    rope_freqs_original_context: usize,
}

const GGUF_FIXED: GgufFixed = GgufFixed {
    chunk: 8192,
    no_rope_step: 4,
    floor_scale: 8192.0,
    attn_scale: 0.1,
    no_qk_norm_experts: 128,
    rope_freqs_original_context: 8192,
};

/// The experts and widths from their keys, and what llama.cpp's loader fixes.
fn gguf_config(meta: &Meta, _: &TensorFacts, _: &Dims, raw: &mut serde_json::Value) -> Result<()> {
    if meta.opt_usize_key("attention.sliding_window")? == Some(0) {
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unsupported(
                meta.key("attention.sliding_window"),
                0,
                "a chunk size: llama.cpp's llama4 without chunked attention, for MobileLLM, is not implemented",
            ),
        ));
    }
    let experts = meta.usize_key("expert_count")?;
    let fixed = GGUF_FIXED;
    raw["sliding_window"] = serde_json::Value::Null;
    raw["attention_chunk_size"] = serde_json::json!(fixed.chunk);
    raw["no_rope_layer_interval"] = serde_json::json!(fixed.no_rope_step);
    raw["attn_temperature_tuning"] = serde_json::json!(true);
    raw["floor_scale"] = serde_json::json!(fixed.floor_scale);
    raw["attn_scale"] = serde_json::json!(fixed.attn_scale);
    raw["use_qk_norm"] = serde_json::json!(experts != fixed.no_qk_norm_experts);
    raw["num_local_experts"] = serde_json::json!(experts);
    raw["num_experts_per_tok"] = serde_json::json!(meta.usize_key("expert_used_count")?);
    raw["interleave_moe_layer_step"] =
        serde_json::json!(meta.usize_key("interleave_moe_layer_step")?);
    raw["intermediate_size_mlp"] = raw["intermediate_size"].clone();
    raw["intermediate_size"] = serde_json::json!(meta.usize_key("expert_feed_forward_length")?);
    if let Some(chunked) = meta.opt_swa_layers()? {
        let types: Vec<&str> = chunked
            .iter()
            .map(|&c| LAYER_TYPES[usize::from(c)])
            .collect();
        raw["layer_types"] = serde_json::json!(types);
    }
    Ok(())
}

/// The keys only Llama4TextConfig has: chunked attention, temperature tuning of the NoPE
/// layers, the L2 QK-norm, the dense MLP's size.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Llama4Keys {
    /// `null` (no chunks) is `Some(Value::Null)`, apart from absent (the class's default).
    #[serde(deserialize_with = "present")]
    attention_chunk_size: Option<serde_json::Value>,
    attn_temperature_tuning: Option<bool>,
    use_qk_norm: Option<bool>,
    intermediate_size_mlp: Option<usize>,
    moe_layers: Option<Vec<usize>>,
    interleave_moe_layer_step: Option<usize>,
}

/// Llama4TextConfig's `intermediate_size_mlp` (16384 by default).
fn dense_intermediate(raw: &RawConfig) -> Option<usize> {
    Some(
        raw.own::<Llama4Keys>()
            .intermediate_size_mlp
            .unwrap_or(16384),
    )
}

/// Llama4TextConfig's default is 1e-5.
fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

fn layout(_: &RawConfig) -> Layout {
    Layout {
        rope_pairs: asa_engine::nn::RopePairs::Interleaved,
        ..Layout::LLAMA
    }
}

/// `default_theta` 5e5.
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((
        raw.resolve_rope_with_theta(path, head_dim, 500_000.0)?,
        None,
    ))
}

/// The NoPE and chunked layers, temperature tuning and the L2 QK-norm.
fn attention_layers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<AttentionLayers> {
    let no_rope = no_rope_layers(
        raw.no_rope_layers.as_deref(),
        raw.no_rope_layer_interval,
        num_layers,
        path,
    )?;
    let keys: Llama4Keys = raw.family_keys(path)?;
    let chunked = chunked_layers(raw, &keys, &no_rope, num_layers, path)?;
    Ok(AttentionLayers {
        no_rope,
        chunked,
        temperature: temperature(raw, &keys, path)?,
        l2_qk_norm: keys.use_qk_norm.unwrap_or(true),
    })
}

/// The layers `layer_types` names `chunked_attention` (else, as Llama4TextConfig derives
/// them, the RoPE layers) with `attention_chunk_size` (8192 by default; null: none).
fn chunked_layers(
    raw: &RawConfig,
    keys: &Llama4Keys,
    no_rope: &[usize],
    num_layers: usize,
    path: &Path,
) -> Result<Option<ChunkedLayers>> {
    let key = keys.attention_chunk_size.as_ref();
    let size = positive_or_null(key, "attention_chunk_size", Some(8192), path)?;
    let types = checked_layer_types(raw.layer_types.as_deref(), num_layers, &LAYER_TYPES, path)?;
    let layers: Vec<usize> = match types {
        Some(types) => (0..num_layers)
            .filter(|&l| types[l] == "chunked_attention")
            .collect(),
        None => (0..num_layers)
            .filter(|l| size.is_some() && !no_rope.contains(l))
            .collect(),
    };
    match (size, layers.is_empty()) {
        (_, true) => Ok(None),
        (Some(size), false) => Ok(Some(ChunkedLayers { size, layers })),
        (None, false) => Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["layer_types", "attention_chunk_size"],
                "layer_types names chunked_attention layers but attention_chunk_size is null: there is no chunk to give them",
            ),
        )),
    }
}

/// The NoPE layers' temperature tuning (`attn_temperature_tuning`, on by default, with
/// `floor_scale` 8192 and `attn_scale` 0.1).
fn temperature(
    raw: &RawConfig,
    keys: &Llama4Keys,
    path: &Path,
) -> Result<Option<TemperatureTuning>> {
    if !keys.attn_temperature_tuning.unwrap_or(true) {
        return Ok(None);
    }
    let floor_scale = raw.floor_scale.unwrap_or(8192.0);
    let attn_scale = raw.attn_scale.unwrap_or(0.1);
    if !(floor_scale.is_finite() && floor_scale > 0.0 && attn_scale.is_finite()) {
        let problem = match floor_scale.is_finite() && floor_scale > 0.0 {
            false => {
                CheckpointProblem::out_of_range("floor_scale", floor_scale, "a finite number > 0")
            }
            true => CheckpointProblem::out_of_range("attn_scale", attn_scale, "a finite number"),
        };
        return Err(Error::checkpoint_problem(path, problem));
    }
    Ok(Some(TemperatureTuning {
        floor_scale,
        attn_scale,
    }))
}

/// Llama4TextConfig's defaults: 16 experts of `intermediate_size` (8192), 1 a token, on
/// every `interleave_moe_layer_step`-th layer (1) unless `moe_layers` lists them; a shared
/// expert of the same size.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let keys: Llama4Keys = raw.config.family_keys(path)?;
    let step = keys.interleave_moe_layer_step.unwrap_or(1);
    if step == 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("interleave_moe_layer_step", 0, "at least 1"),
        ));
    }
    let layers: Vec<usize> = match keys.moe_layers.as_deref() {
        Some(listed) => {
            if let Some(bad) = listed.iter().find(|&&l| l >= dense.num_layers) {
                let expected = format!("a layer below num_hidden_layers {}", dense.num_layers);
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::out_of_range("moe_layers", bad, expected),
                ));
            }
            (0..dense.num_layers)
                .filter(|l| listed.contains(l))
                .collect()
        }
        None => (step - 1..dense.num_layers).step_by(step).collect(),
    };
    let intermediate = raw.intermediate_size.unwrap_or(8192);
    Ok(Some(Experts {
        count: raw.num_local_experts.unwrap_or(16),
        top_k: raw.num_experts_per_tok.unwrap_or(1),
        routing: Routing::TopKSigmoidInput,
        clamped: None,
        intermediate,
        layers,
        names: ExpertNames::Llama4,
        shared_intermediate: Some(intermediate),
    }))
}
