//! Qwen3-Next: Gated DeltaNet layers (`linear_attn`) and gated attention layers (`q_proj`
//! holds each head's query and its output gate: the `gated` variant) by `layer_types`
//! (else every `full_attention_interval`-th layer, 4 by default, is attention),
//! zero-centred RMSNorms (1 + w) everywhere but the DeltaNet's gated norm, per-head QK-norm,
//! partial RoPE (`partial_rotary_factor` 0.25 by default), `head_dim` 256 by default, and
//! Qwen's experts with one shared expert behind a sigmoid gate.
//!
//! llama.cpp's `qwen3next` GGUF files (`convert_hf_to_gguf.py` Qwen3NextModel,
//! `src/models/qwen3next.cpp`): every zero-centred norm stored as 1 + w (the DeltaNet's
//! `linear_attn.norm` not); the DeltaNet's `in_proj_qkvz` split into `attn_qkv` (all q, all
//! k, all v) and `attn_gate` (z), regrouped per key head on load (an older file's whole
//! `ssm_in` read as it is); `A_log` as `ssm_a` = -exp(A_log); the conv squeezed; the
//! attention layers by `attention.recurrent_layers`, else every `full_attention_interval`-th
//! (4 when absent, as llama.cpp reads it); the DeltaNet's sizes as `ssm.*` keys; experts
//! stacked, renormalised (llama.cpp always renormalises); a layer without a router has the
//! dense MLP (`mlp_only_layers`, which llama.cpp's own loader does not accept).

use std::path::Path;

use serde::Deserialize;

use super::deepseek_v3::GGUF_STACKED_EXPERTS;
use super::qwen3_moe::{qwen_experts, qwen_gguf_experts, QwenDefaults, QwenMoeKeys};
use super::{llama, qwen3};
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{
    Assembled, Family, GgufRules, NameTable, Piece, Pieces, Ropes, StoredLayer, StoredTensor, Undo,
};
use crate::config::raw::own_keys_readable;
use crate::config::sliding_window::checked_layer_types;
use crate::config::RawConfig;
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::{Layout, NormKind};
use crate::mixers::{DeltaNetShape, Mixer};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

pub(crate) const FAMILY: Family = Family {
    name: "qwen3_next",
    keys,
    default_head_dim: Some(256),
    check,
    default_max_position_embeddings: 32768,
    layout,
    rope,
    // no sliding window: layer_types names the mixers
    window: llama::FAMILY.window,
    mixers,
    experts,
    gguf: Some(&GGUF),
    ..qwen3::FAMILY
};

/// llama.cpp's `qwen3next`.
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_BLOCKS, qwen3::GGUF_QK_NORM, llama::GGUF_BLOCKS],
    whole: &[&[
        ("ssm_a", Some("linear_attn.A_log")),
        ("ssm_dt.bias", Some("linear_attn.dt_bias")),
    ]],
    assembled: &[
        Assembled::Custom {
            roles: &["attn_qkv", "attn_gate"],
            build: delta_net_in_proj,
        },
        GGUF_STACKED_EXPERTS[0],
        GGUF_STACKED_EXPERTS[1],
        GGUF_STACKED_EXPERTS[2],
    ],
    undo: undo_gguf,
    config: gguf_config,
    ..llama::gguf_rules("qwen3next")
};

/// The norm after attention, the DeltaNet's tensors, the router and the shared expert.
const GGUF_BLOCKS: NameTable = &[
    ("post_attention_norm", Some("post_attention_layernorm")),
    ("ssm_in", Some("linear_attn.in_proj_qkvz")),
    ("ssm_ba", Some("linear_attn.in_proj_ba")),
    ("ssm_conv1d", Some("linear_attn.conv1d")),
    ("ssm_norm", Some("linear_attn.norm")),
    ("ssm_out", Some("linear_attn.out_proj")),
    ("ffn_gate_inp", Some("mlp.gate")),
    ("ffn_gate_inp_shexp", Some("mlp.shared_expert_gate")),
    ("ffn_gate_shexp", Some("mlp.shared_expert.gate_proj")),
    ("ffn_up_shexp", Some("mlp.shared_expert.up_proj")),
    ("ffn_down_shexp", Some("mlp.shared_expert.down_proj")),
];

/// Norms stored as 1 + w (all but the DeltaNet's), the conv squeezed, `A_log` stored as
/// -exp(A_log).
fn undo_gguf(t: &StoredTensor) -> Undo {
    let name = t.name;
    if name.ends_with("norm.weight") && !name.ends_with("linear_attn.norm.weight") {
        Undo::MinusOne
    } else if name.ends_with("linear_attn.conv1d.weight") && t.rank == 2 {
        Undo::Unsqueeze(1)
    } else if name.ends_with("linear_attn.A_log") {
        Undo::LogOfNegated
    } else {
        Undo::Nothing
    }
}

/// The DeltaNet's `in_proj_qkvz` from `attn_qkv` (all q rows, all k, all v) and
/// `attn_gate` (z): per key head, its q, k, v and z rows in turn, as transformers stores it.
fn delta_net_in_proj(meta: &Meta, layer: &StoredLayer) -> Result<Vec<(String, Pieces)>> {
    let (l, kind) = (layer.layer, layer.kind);
    let (Some((qkv, qkv_shape)), Some((gate, gate_shape))) =
        (layer.stored.get("attn_qkv"), layer.stored.get("attn_gate"))
    else {
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unimplemented(
                &[],
                format!("blk.{l}.attn_qkv.{kind} and blk.{l}.attn_gate.{kind} come together (the Gated DeltaNet's split in_proj_qkvz); a fused attention q/k/v is not implemented for qwen3next"),
            ),
        ));
    };
    let groups = meta.usize_key("ssm.group_count")?;
    let qk = crate::config::experts::checked_size(
        groups,
        meta.usize_key("ssm.state_size")?,
        &format!(
            "{} x {}",
            meta.key("ssm.group_count"),
            meta.key("ssm.state_size")
        ),
        meta.path,
    )?;
    let value = gate_shape.first().copied().unwrap_or(0);
    let rows = qkv_shape.first().copied().unwrap_or(0);
    let fits = qkv_shape.len() == 2
        && gate_shape.len() == 2
        && qkv_shape[1] == gate_shape[1]
        && qk.checked_mul(2).and_then(|x| x.checked_add(value)) == Some(rows)
        && groups > 0
        && value.is_multiple_of(groups);
    if !fits {
        let key = meta.key("ssm.group_count");
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::inconsistent(
                &[&key],
                format!("tensors {qkv} {qkv_shape:?} and {gate} {gate_shape:?} are not q, k, v of {groups} key heads ({key}) and their z"),
            ),
        ));
    }
    let part = |start: usize, end: usize| Piece {
        rows: Some((start, end)),
        ..Piece::whole(qkv)
    };
    let pieces = Pieces {
        pieces: vec![
            part(0, qk),
            part(qk, 2 * qk),
            part(2 * qk, rows),
            Piece::whole(gate),
        ],
        axis: 0,
        groups: Some(groups),
        shape: vec![rows + value, qkv_shape[1]],
    };
    Ok(vec![(
        format!("model.layers.{l}.linear_attn.in_proj_qkvz.{kind}"),
        pieces,
    )])
}

/// The layer types (`attention.recurrent_layers`, else `full_attention_interval`, 4 when
/// absent), the DeltaNet's sizes, the experts (renormalised; a layer without a router has
/// the dense MLP).
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    _: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    let layers = meta.trunk_layers()?;
    match meta.opt_layer_flags("attention.recurrent_layers")? {
        Some(recurrent) => {
            let types: Vec<&str> = recurrent
                .iter()
                .take(layers)
                .map(|&r| match r {
                    true => "linear_attention",
                    false => "full_attention",
                })
                .collect();
            raw["layer_types"] = serde_json::json!(types);
        }
        // the layers from the interval as config.json's are (checked there: at least 1)
        None => {
            if let Some(interval) = meta.opt_usize_key("full_attention_interval")? {
                raw["full_attention_interval"] = serde_json::json!(interval);
            }
        }
    }
    let value_heads = meta.usize_key("ssm.time_step_rank")?;
    let inner = meta.usize_key("ssm.inner_size")?;
    if value_heads == 0 || !inner.is_multiple_of(value_heads) {
        let keys = [meta.key("ssm.time_step_rank"), meta.key("ssm.inner_size")];
        let detail = format!("{} {value_heads} must divide {} {inner}", keys[0], keys[1]);
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::inconsistent(&[&keys[0], &keys[1]], detail),
        ));
    }
    raw["linear_num_key_heads"] = serde_json::json!(meta.usize_key("ssm.group_count")?);
    raw["linear_key_head_dim"] = serde_json::json!(meta.usize_key("ssm.state_size")?);
    raw["linear_num_value_heads"] = serde_json::json!(value_heads);
    raw["linear_value_head_dim"] = serde_json::json!(inner / value_heads);
    raw["linear_conv_kernel_dim"] = serde_json::json!(meta.usize_key("ssm.conv_kernel")?);
    raw["shared_expert_intermediate_size"] =
        serde_json::json!(meta.usize_key("expert_shared_feed_forward_length")?);
    qwen_gguf_experts(meta, tensors, raw)
}

/// The layer types Qwen3NextModel masks by.
const LAYER_TYPES: [&str; 2] = ["linear_attention", "full_attention"];

/// Qwen3-Next's norms are zero-centred: (1 + w).
fn layout(raw: &RawConfig) -> Layout {
    Layout {
        norm: NormKind::RmsPlusOne,
        ..(llama::FAMILY.layout)(raw)
    }
}

/// Qwen3NextConfig's `default_theta` 1e4 and partial rotary factor 0.25.
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    Ok((
        raw.resolve_rope_with_defaults(path, head_dim, 10_000.0, 0.25)?,
        None,
    ))
}

/// Its own keys and the Qwen MoE classes' ([`QwenMoeKeys`]), each read as its struct.
fn keys(raw: &RawConfig, path: &Path) -> Result<()> {
    own_keys_readable::<QwenMoeKeys>(raw, path)?;
    own_keys_readable::<Qwen3NextKeys>(raw, path)
}

/// The keys only Qwen3NextConfig has: the Gated DeltaNet's heads, sizes and convolution,
/// and the attention layers (else `layer_types`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Qwen3NextKeys {
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_conv_kernel_dim: Option<usize>,
    full_attention_interval: Option<usize>,
}

/// The Gated DeltaNet's sizes (Qwen3NextConfig's defaults: 16 key heads, 32 value heads,
/// both 128 wide, a convolution of 4).
fn delta_net(h: &Qwen3NextKeys) -> DeltaNetShape {
    DeltaNetShape {
        key_heads: h.linear_num_key_heads.unwrap_or(16),
        value_heads: h.linear_num_value_heads.unwrap_or(32),
        key_dim: h.linear_key_head_dim.unwrap_or(128),
        value_dim: h.linear_value_head_dim.unwrap_or(128),
        conv_kernel: h.linear_conv_kernel_dim.unwrap_or(4),
    }
}

/// Refuses DeltaNet sizes the layer cannot be viewed with.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let keys: Qwen3NextKeys = raw.family_keys(path)?;
    let s = delta_net(&keys);
    let sizes = [
        ("linear_num_key_heads", s.key_heads),
        ("linear_num_value_heads", s.value_heads),
        ("linear_key_head_dim", s.key_dim),
        ("linear_value_head_dim", s.value_dim),
        ("linear_conv_kernel_dim", s.conv_kernel),
        (
            "full_attention_interval",
            keys.full_attention_interval.unwrap_or(4),
        ),
    ];
    if let Some((key, _)) = sizes.iter().find(|(_, size)| *size == 0) {
        let problem = CheckpointProblem::out_of_range(*key, 0, "at least 1");
        return Err(Error::checkpoint_problem(path, problem));
    }
    if !s.value_heads.is_multiple_of(s.key_heads) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["linear_num_value_heads", "linear_num_key_heads"],
                format!(
                    "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                    s.value_heads, s.key_heads
                ),
            ),
        ));
    }
    Ok(())
}

/// `linear_attention` layers are Gated DeltaNet, `full_attention` ones attention: by
/// `layer_types`, else attention on every `full_attention_interval`-th layer.
fn mixers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<Vec<Mixer>> {
    let keys: Qwen3NextKeys = raw.family_keys(path)?;
    let net = Mixer::GatedDeltaNet(delta_net(&keys));
    let types = checked_layer_types(raw.layer_types.as_deref(), num_layers, &LAYER_TYPES, path)?;
    let interval = keys.full_attention_interval.unwrap_or(4);
    Ok((0..num_layers)
        .map(|l| {
            let attention = match types {
                Some(types) => types[l] == "full_attention",
                None => (l + 1) % interval == 0,
            };
            if attention {
                Mixer::Attention
            } else {
                net
            }
        })
        .collect())
}

/// Qwen3NextConfig's defaults: 512 experts of 512, top 10, renormalised, a shared expert
/// of 512 (`shared_expert_intermediate_size`).
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let defaults = QwenDefaults {
        count: 512,
        top_k: 10,
        intermediate: 512,
        shared_intermediate: 512,
        renormalise: true,
    };
    qwen_experts(raw, dense, path, defaults, ExpertNames::QwenShared)
}
