//! Granite 4 hybrid (`granitemoehybrid`): Mamba-2 layers and attention layers by
//! `layer_types` (`linear_attention`/`mamba`, `full_attention`/`attention`), attention
//! without RoPE unless `position_embedding_type` is `rope`, muP multipliers (embeddings,
//! both residual branches, the softmax scale `attention_multiplier`, logits divided by
//! `logits_scaling`), and in every layer experts (the top-k logits softmaxed) plus a shared
//! MLP, stored under the hub's names (`block_sparse_moe.input_linear`, `shared_mlp`).
//!
//! llama.cpp's `granitehybrid` GGUF files (`convert_hf_to_gguf.py` GraniteHybridModel,
//! `src/models/granite-hybrid.cpp`): `attention.head_count_kv` per layer, 0 on the Mamba
//! layers; the multipliers as `embedding_scale`, `residual_scale`, `attention.scale` (absent:
//! llama.cpp's 1/sqrt(head_dim)) and `logit_scale`; RoPE only where
//! `rope.scaling.finetuned` (absent: true, as llama.cpp reads it); q/k permuted as Llama's;
//! `input_linear` split into `ffn_gate_exps` and `ffn_up_exps`, the shared MLP into
//! `ffn_gate_shexp` and `ffn_up_shexp`; Mamba-2 as [`GGUF_MAMBA2_BLOCKS`] says.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::llama;
use crate::attention_layers::AttentionLayers;
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{Assembled, Family, GgufRules, NameTable, StoredTensor, Undo};
use crate::config::raw::{own_keys_readable, positive, present};
use crate::config::sliding_window::checked_layer_types;
use crate::config::RawConfig;
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::{metadata_bool, Dims, Meta, TensorFacts};
use crate::mixers::{Mamba2Shape, Mixer};
use crate::multipliers::Multipliers;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::mixer::Mamba2Gate;
use asa_engine::nn::Routing;

pub(crate) const FAMILY: Family = Family {
    name: "granitemoehybrid",
    keys,
    check,
    attention_layers,
    mixers,
    multipliers,
    experts,
    gguf: Some(&GGUF),
    weight_names: &[
        (
            "model.layers.{l}.mlp.gate.weight",
            "model.layers.{l}.block_sparse_moe.router.layer.weight",
        ),
        (
            "model.layers.{l}.mlp.gate.weight",
            "model.layers.{l}.block_sparse_moe.router.weight",
        ),
        (
            "model.layers.{l}.mlp.experts.gate_up_proj",
            "model.layers.{l}.block_sparse_moe.input_linear.weight",
        ),
        (
            "model.layers.{l}.mlp.experts.gate_up_proj",
            "model.layers.{l}.block_sparse_moe.experts.gate_up_proj",
        ),
        (
            "model.layers.{l}.mlp.experts.down_proj",
            "model.layers.{l}.block_sparse_moe.output_linear.weight",
        ),
        (
            "model.layers.{l}.mlp.experts.down_proj",
            "model.layers.{l}.block_sparse_moe.experts.down_proj",
        ),
        (
            "model.layers.{l}.mlp.shared_expert.gate_up_proj.{p}",
            "model.layers.{l}.shared_mlp.input_linear.{p}",
        ),
        (
            "model.layers.{l}.mlp.shared_expert.down_proj.{p}",
            "model.layers.{l}.shared_mlp.output_linear.{p}",
        ),
    ],
    ..llama::FAMILY
};

/// The layer types GraniteMoeHybridModel builds, and their names before transformers 5.
const LAYER_TYPES: [&str; 4] = ["linear_attention", "full_attention", "mamba", "attention"];

/// Refuses what is not a hybrid with experts: no attention layer (the class's default
/// layer_types), no experts (only the shared MLP: not implemented).
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    if raw.layer_types.is_none() {
        let detail =
            "layer_types is absent, so every granitemoehybrid layer is a Mamba layer".to_string();
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::NoAttention { detail },
        ));
    }
    if raw.num_local_experts.unwrap_or(8) == 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::unsupported(
                "num_local_experts",
                0,
                "at least 1: the shared MLP alone is not implemented for granitemoehybrid",
            ),
        ));
    }
    Ok(())
}

/// NoPE attention unless `position_embedding_type` is `rope`.
fn attention_layers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<AttentionLayers> {
    let keys: GraniteHybridKeys = raw.family_keys(path)?;
    let rope = keys.position_embedding_type.as_deref() == Some("rope");
    Ok(AttentionLayers {
        no_rope: match rope {
            true => Vec::new(),
            false => (0..num_layers).collect(),
        },
        ..AttentionLayers::default()
    })
}

/// Mamba layers where `layer_types` says `linear_attention` (or `mamba`).
fn mixers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<Vec<Mixer>> {
    let mamba = Mixer::Mamba2(mamba2_shape(raw, Mamba2Gate::ThenGroupNorm, None, path)?);
    let types = checked_layer_types(raw.layer_types.as_deref(), num_layers, &LAYER_TYPES, path)?;
    let types = types.unwrap_or_default();
    Ok(types
        .iter()
        .map(|t| match t.as_str() {
            "linear_attention" | "mamba" => mamba,
            _ => Mixer::Attention,
        })
        .collect())
}

/// The keys only GraniteMoeHybridConfig has: its muP multipliers, its attention layers' RoPE
/// (`"rope"`; else NoPE) and its shared MLP's width.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GraniteHybridKeys {
    embedding_multiplier: Option<f64>,
    residual_multiplier: Option<f64>,
    attention_multiplier: Option<f64>,
    logits_scaling: Option<f64>,
    position_embedding_type: Option<String>,
    shared_intermediate_size: Option<usize>,
}

/// Its own keys and the Mamba-2 layers' ([`Mamba2Keys`]), each read as its struct.
fn keys(raw: &RawConfig, path: &Path) -> Result<()> {
    own_keys_readable::<GraniteHybridKeys>(raw, path)?;
    own_keys_readable::<Mamba2Keys>(raw, path)
}

/// The Mamba-2 layers' keys (GraniteMoeHybridConfig's, FalconH1Config's): heads, head size
/// (`"auto"`: inner / heads), state, groups, convolution, inner size (`mamba_expand` x
/// hidden; `mamba_d_ssm` first), biases, dt's clamp (`[min, max]`, an infinity written as
/// `{"__float__": "Infinity"}`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Mamba2Keys {
    mamba_n_heads: Option<usize>,
    mamba_d_head: Option<Value>,
    mamba_d_state: Option<usize>,
    mamba_n_groups: Option<usize>,
    mamba_d_conv: Option<usize>,
    mamba_expand: Option<f64>,
    #[serde(deserialize_with = "present")]
    mamba_d_ssm: Option<Value>,
    mamba_conv_bias: Option<bool>,
    mamba_proj_bias: Option<bool>,
    projectors_bias: Option<bool>,
    #[serde(deserialize_with = "present")]
    time_step_limit: Option<Value>,
}

/// The Mamba-2 layers' sizes: `mamba_n_heads` (128) heads of `mamba_d_head` (`"auto"`:
/// the inner size / heads), `mamba_d_state` (256), `mamba_n_groups` (1), `mamba_d_conv`
/// (4), an inner size of `mamba_d_ssm` (absent: `d_ssm`, the class's default; null or no
/// default: `mamba_expand` (2) x hidden), biases
/// by `mamba_conv_bias` (true) and `mamba_proj_bias` (false; Falcon-H1's out_proj by
/// `projectors_bias`), dt clamped to `time_step_limit` ((0, inf)).
pub(crate) fn mamba2_shape(
    raw: &RawConfig,
    gate: Mamba2Gate,
    d_ssm: Option<usize>,
    path: &Path,
) -> Result<Mamba2Shape> {
    let h: Mamba2Keys = raw.family_keys(path)?;
    let hidden = raw.hidden_size.unwrap_or(0);
    let inner = match &h.mamba_d_ssm {
        Some(Value::Number(n)) => n.as_u64().map(|n| n as usize),
        None => d_ssm,
        Some(Value::Null) => None,
        Some(other) => {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::wrong_type("mamba_d_ssm", "an integer or null", other),
            ))
        }
    };
    let inner = inner.unwrap_or((h.mamba_expand.unwrap_or(2.0) * hidden as f64) as usize);
    let heads = h.mamba_n_heads.unwrap_or(128);
    let head_dim = match &h.mamba_d_head {
        None => None,
        Some(Value::String(s)) if s == "auto" => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            Error::checkpoint_problem(
                path,
                CheckpointProblem::wrong_type("mamba_d_head", "an integer or \"auto\"", v),
            )
        })? as usize),
    };
    let groups = h.mamba_n_groups.unwrap_or(1);
    if heads == 0 || groups == 0 || !inner.is_multiple_of(heads) || !heads.is_multiple_of(groups) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["mamba_n_heads", "mamba_d_ssm", "mamba_n_groups"],
                format!("mamba_n_heads {heads} must divide the Mamba inner size {inner} and be a multiple of mamba_n_groups {groups}"),
            ),
        ));
    }
    let head_dim = head_dim.unwrap_or(inner / heads);
    if head_dim.checked_mul(heads) != Some(inner) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["mamba_d_head", "mamba_n_heads", "mamba_d_ssm"],
                format!("mamba_d_head {head_dim} x mamba_n_heads {heads} is not the Mamba inner size {inner}"),
            ),
        ));
    }
    let (dt_min, dt_max) = time_step_limit(h.time_step_limit.as_ref(), path)?;
    let out_bias = match gate {
        Mamba2Gate::ThenGroupNorm => h.mamba_proj_bias,
        Mamba2Gate::Only => h.projectors_bias,
    };
    Ok(Mamba2Shape {
        heads,
        head_dim,
        state: h.mamba_d_state.unwrap_or(256),
        groups,
        conv_kernel: h.mamba_d_conv.unwrap_or(4).max(1),
        conv_bias: h.mamba_conv_bias.unwrap_or(true),
        in_bias: h.mamba_proj_bias.unwrap_or(false),
        out_bias: out_bias.unwrap_or(false),
        dt_min,
        dt_max,
        gate,
    })
}

/// `time_step_limit`: `[min, max]`, each a number or transformers' tagged non-finite
/// float (`{"__float__": "Infinity"}`); (0, inf) when absent.
fn time_step_limit(value: Option<&Value>, path: &Path) -> Result<(f64, f64)> {
    let Some(value) = value else {
        return Ok((0.0, f64::INFINITY));
    };
    let bound = |v: &Value| -> Option<f64> {
        match v {
            Value::Number(n) => n.as_f64(),
            Value::Object(o) => match o.get("__float__")?.as_str()? {
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                _ => None,
            },
            _ => None,
        }
    };
    match value.as_array().map(|a| a.as_slice()) {
        Some([lo, hi]) => match (bound(lo), bound(hi)) {
            (Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
            _ => Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range("time_step_limit", value, "[min, max]"),
            )),
        },
        _ => Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::wrong_type(
                "time_step_limit",
                "[min, max] (transformers cannot clamp dt by another value)",
                value,
            ),
        )),
    }
}

/// GraniteMoeHybridConfig's multipliers, 1 by default (the softmax scale too).
fn multipliers(raw: &RawConfig, path: &Path) -> Result<Multipliers> {
    let h: GraniteHybridKeys = raw.family_keys(path)?;
    // each 1 when absent, else a finite number > 0
    let multiplier =
        |v: Option<f64>, key: &str| Ok::<_, Error>(Some(positive(v.unwrap_or(1.0), key, path)?));
    Ok(Multipliers {
        embedding: multiplier(h.embedding_multiplier, "embedding_multiplier")?,
        residual: multiplier(h.residual_multiplier, "residual_multiplier")?,
        attention_scale: multiplier(h.attention_multiplier, "attention_multiplier")?,
        logits_divisor: multiplier(h.logits_scaling, "logits_scaling")?,
        ..Multipliers::default()
    })
}

/// GraniteMoeHybridConfig's defaults: 8 experts of `intermediate_size` (11008), top 2,
/// the top-k logits softmaxed, a shared MLP of `shared_intermediate_size` (1024), in every
/// layer.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let keys: GraniteHybridKeys = raw.config.family_keys(path)?;
    Ok(Some(Experts {
        count: raw.num_local_experts.unwrap_or(8),
        top_k: raw.num_experts_per_tok.unwrap_or(2),
        routing: Routing::TopKSoftmax,
        clamped: None,
        intermediate: raw.intermediate_size.unwrap_or(11008),
        layers: (0..dense.num_layers).collect(),
        names: ExpertNames::Granite,
        shared_intermediate: Some(keys.shared_intermediate_size.unwrap_or(1024)),
    }))
}

/// llama.cpp's `granitehybrid`.
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_MOE_BLOCKS, GGUF_MAMBA2_BLOCKS, llama::GGUF_BLOCKS],
    whole: &[GGUF_MAMBA2_WHOLE],
    assembled: &[
        Assembled::Join {
            hf: "mlp.experts.gate_up_proj",
            roles: &["ffn_gate_exps", "ffn_up_exps"],
            axis: 1,
            transposed: &[],
            merge_heads: false,
        },
        Assembled::Join {
            hf: "mlp.experts.down_proj",
            roles: &["ffn_down_exps"],
            axis: 0,
            transposed: &[],
            merge_heads: false,
        },
        Assembled::Join {
            hf: "mlp.shared_expert.gate_up_proj.{kind}",
            roles: &["ffn_gate_shexp", "ffn_up_shexp"],
            axis: 0,
            transposed: &[],
            merge_heads: false,
        },
    ],
    undo: undo_granite,
    config: gguf_config,
    ..llama::gguf_rules("granitehybrid")
};

/// The router and the shared MLP's down projection.
const GGUF_MOE_BLOCKS: NameTable = &[
    ("ffn_gate_inp", Some("mlp.gate")),
    ("ffn_down_shexp", Some("mlp.shared_expert.down_proj")),
];

/// llama.cpp's Mamba-2 tensors (`Mamba2Model` in `convert_hf_to_gguf.py`), by role.
pub(crate) const GGUF_MAMBA2_BLOCKS: NameTable = &[
    ("ssm_in", Some("mamba.in_proj")),
    ("ssm_conv1d", Some("mamba.conv1d")),
    ("ssm_norm", Some("mamba.norm")),
    ("ssm_out", Some("mamba.out_proj")),
];

/// Mamba-2's tensors named whole: `A` and `D` without `.weight`, and `dt_bias` stored as
/// `ssm_dt.bias`.
pub(crate) const GGUF_MAMBA2_WHOLE: NameTable = &[
    ("ssm_a", Some("mamba.A_log")),
    ("ssm_d", Some("mamba.D")),
    ("ssm_dt.bias", Some("mamba.dt_bias")),
];

/// What the Mamba-2 converter changed: the conv weight squeezed, `A_log` stored as
/// `-exp(A_log)` `[heads, 1]`, `D` as `[heads, 1]`, the norm as `[groups, inner / groups]`.
pub(crate) fn undo_mamba2(t: &StoredTensor) -> Undo {
    let name = t.name;
    if name.ends_with("mamba.conv1d.weight") && t.rank == 2 {
        Undo::Unsqueeze(1)
    } else if name.ends_with("mamba.A_log") {
        Undo::LogOfNegated
    } else if name.ends_with("mamba.D") || name.ends_with("mamba.norm.weight") {
        Undo::Flatten
    } else {
        Undo::Nothing
    }
}

/// Granite's Mamba-2 tensors and Llama's q/k permutation.
fn undo_granite(t: &StoredTensor) -> Undo {
    match undo_mamba2(t) {
        Undo::Nothing => llama::unpermute_qk(t),
        undo => undo,
    }
}

/// The Mamba-2 sizes from the `ssm.*` keys (the inner size as `mamba_d_ssm`), its conv
/// biases where the file has them; no projection biases (llama.cpp has none).
pub(crate) fn mamba2_gguf_keys(
    meta: &Meta,
    tensors: &TensorFacts,
    raw: &mut serde_json::Value,
) -> Result<()> {
    let inner = meta.usize_key("ssm.inner_size")?;
    let heads = meta.usize_key("ssm.time_step_rank")?;
    if heads == 0 || !inner.is_multiple_of(heads) {
        let keys = [meta.key("ssm.time_step_rank"), meta.key("ssm.inner_size")];
        let detail = format!("{} {heads} must divide {} {inner}", keys[0], keys[1]);
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::inconsistent(&[&keys[0], &keys[1]], detail),
        ));
    }
    raw["mamba_d_ssm"] = serde_json::json!(inner);
    raw["mamba_n_heads"] = serde_json::json!(heads);
    raw["mamba_d_head"] = serde_json::json!(inner / heads);
    raw["mamba_d_state"] = serde_json::json!(meta.usize_key("ssm.state_size")?);
    raw["mamba_n_groups"] = serde_json::json!(meta.usize_key("ssm.group_count")?);
    raw["mamba_d_conv"] = serde_json::json!(meta.usize_key("ssm.conv_kernel")?);
    raw["mamba_conv_bias"] = serde_json::json!(tensors.any_ends_with("mamba.conv1d.bias"));
    raw["mamba_proj_bias"] = serde_json::json!(false);
    Ok(())
}

/// The layer types from the per-layer key-value head counts (0: a Mamba layer), the
/// multipliers, RoPE or NoPE, the experts and the Mamba-2 sizes.
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    dims: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    let layers = meta.usize_key("block_count")?;
    let kv_heads = meta
        .opt_per_layer_key("attention.head_count_kv")?
        .unwrap_or_else(|| vec![dims.kv_heads; layers]);
    if let Some(other) = kv_heads.iter().find(|&&n| n != 0 && n != dims.kv_heads) {
        let key = meta.key("attention.head_count_kv");
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unimplemented(
                &[&key],
                format!("{key} gives attention layers {} and {other} key-value heads: GraniteMoeHybridConfig has one count", dims.kv_heads),
            ),
        ));
    }
    let types: Vec<&str> = kv_heads
        .iter()
        .map(|&n| {
            if n == 0 {
                "linear_attention"
            } else {
                "full_attention"
            }
        })
        .collect();
    raw["layer_types"] = serde_json::json!(types);
    // llama.cpp's converter writes each multiplier only when the config sets it: a present
    // one is the model's (checked by the resolve, as config.json's: 0 would zero its branch)
    let scale = |key: &str| meta.opt_f64_key(key);
    raw["embedding_multiplier"] = serde_json::json!(scale("embedding_scale")?.unwrap_or(1.0));
    raw["residual_multiplier"] = serde_json::json!(scale("residual_scale")?.unwrap_or(1.0));
    raw["logits_scaling"] = serde_json::json!(scale("logit_scale")?.unwrap_or(1.0));
    let default_scale = 1.0 / (dims.head_dim as f64).sqrt();
    raw["attention_multiplier"] =
        serde_json::json!(scale("attention.scale")?.unwrap_or(default_scale));
    let rope = metadata_bool(meta.content, &meta.key("rope.scaling.finetuned")).unwrap_or(true);
    raw["position_embedding_type"] = serde_json::json!(if rope { "rope" } else { "nope" });
    raw["num_local_experts"] = serde_json::json!(meta.opt_usize_key("expert_count")?.unwrap_or(0));
    raw["num_experts_per_tok"] = serde_json::json!(meta.usize_key("expert_used_count")?);
    let shared = meta.opt_usize_key("expert_shared_feed_forward_length")?;
    raw["shared_intermediate_size"] = serde_json::json!(
        shared.unwrap_or(raw["intermediate_size"].as_u64().unwrap_or(0) as usize)
    );
    mamba2_gguf_keys(meta, tensors, raw)
}
