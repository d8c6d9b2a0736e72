//! GPT-OSS: learned attention sinks (`self_attn.sinks`), biases on q/k/v/o, sliding windows
//! on alternate layers, YaRN RoPE, and a mixture of clamped-SwiGLU experts with biases
//! (stacked, or MXFP4) routed by softmax over the top-k logits.
//!
//! llama.cpp's `gpt-oss` GGUF files (`convert_hf_to_gguf.py` GptOssModel,
//! `src/models/openai-moe.cpp`): no q/k permutation (NeoX pairs), the sinks as
//! `attn_sinks.weight`, the router `ffn_gate_inp` with its bias, `gate_up_proj` split into
//! `ffn_gate_exps` and `ffn_up_exps` (its even and odd columns, transposed to `[experts,
//! inter, hidden]`) and `down_proj` transposed into `ffn_down_exps`, each with its bias;
//! `attention.sliding_window`, the sliding layers by `attention.sliding_window_pattern`
//! (every other layer from the first when absent, as llama.cpp reads it), YaRN from the
//! `rope.scaling.*` keys (the correction range rounded, as ggml does: `truncate` true). The
//! clamped SwiGLU is not in the file: llama.cpp's graph fixes alpha 1.702 and limit 7, which
//! the file is read with (a checkpoint's other `swiglu_limit` is another model: the file
//! is what llama.cpp runs).

use std::path::Path;

use serde::Deserialize;

use super::llama;
use crate::config::experts::{f32_factor, DenseSizes, RawExperts};
use crate::config::family::{
    Assembled, Biases, Family, GgufRules, NameTable, Piece, Pieces, Ropes, StoredLayer,
};
use crate::config::raw::{own_keys_readable, positive};
use crate::config::RawConfig;
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::{swa_period, Dims, Meta, TensorFacts};
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::{ClampedGlu, Routing};

pub(crate) const FAMILY: Family = Family {
    name: "gpt_oss",
    keys: own_keys_readable::<GptOssKeys>,
    // GptOssConfig's defaults
    default_head_dim: Some(64),
    mxfp4_experts: true,
    biases: attention_bias,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 131_072,
    rope,
    window: WindowRule {
        used: WindowUse::Always,
        default_size: Some(128),
        layers: WindowLayers::EveryOther,
    },
    experts,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `gpt-oss`.
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_BLOCKS, llama::GGUF_BLOCKS],
    whole: &[&[("attn_sinks.weight", Some("self_attn.sinks"))]],
    assembled: &[Assembled::Custom {
        roles: &["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"],
        build: gguf_experts,
    }],
    config: gguf_config,
    ..llama::gguf_rules("gpt-oss")
};

/// The norm before the experts and the router.
const GGUF_BLOCKS: NameTable = &[
    ("post_attention_norm", Some("post_attention_layernorm")),
    ("ffn_gate_inp", Some("mlp.router")),
];

/// What llama.cpp's graph fixes for GPT-OSS's clamped SwiGLU (`llama-graph.cpp`,
/// `LLM_FFN_SWIGLU_OAI_MOE`): alpha and limit.
const LLAMA_CPP_SWIGLU: (f64, f64) = (1.702, 7.0);

/// Biases by the q projection's, the experts, the window and its layers, llama.cpp's
/// SwiGLU constants; refused: a sliding layers' RoPE base of their own (llama.cpp's gpt-oss
/// reads `rope.freq_base_swa`; this family has one base). (`expert_weights_scale` its
/// loader does not read, nor does this.)
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    dims: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    llama::attention_bias_from_q(meta, tensors, dims, raw)?;
    raw["num_local_experts"] = serde_json::json!(meta.usize_key("expert_count")?);
    raw["num_experts_per_tok"] = serde_json::json!(meta.usize_key("expert_used_count")?);
    raw["intermediate_size"] = serde_json::json!(meta.usize_key("expert_feed_forward_length")?);
    raw["sliding_window"] = serde_json::json!(meta.usize_key("attention.sliding_window")?);
    let layers = meta.trunk_layers()?;
    let sliding = meta
        .opt_swa_layers()?
        .unwrap_or_else(|| swa_period(2, layers));
    let types: Vec<&str> = sliding
        .iter()
        .map(|&s| match s {
            true => "sliding_attention",
            false => "full_attention",
        })
        .collect();
    raw["layer_types"] = serde_json::json!(types);
    let (alpha, limit) = LLAMA_CPP_SWIGLU;
    raw["swiglu_alpha"] = serde_json::json!(alpha);
    raw["swiglu_limit"] = serde_json::json!(limit);
    if let Some(base) = meta.opt_f64_key("rope.freq_base_swa")? {
        if base != dims.theta {
            let keys = [meta.key("rope.freq_base_swa"), meta.key("rope.freq_base")];
            return Err(Error::checkpoint_problem(
                meta.path,
                CheckpointProblem::unimplemented(
                    &[&keys[0], &keys[1]],
                    format!("{} {base} (a RoPE base of the sliding layers' own, beside {} {}) is not implemented for gpt-oss", keys[0], keys[1], dims.theta),
                ),
            ));
        }
    }
    Ok(())
}

/// `mlp.experts.gate_up_proj` `[experts, hidden, 2 inter]` (gate at even columns, up at
/// odd) from `ffn_gate_exps` and `ffn_up_exps` `[experts, inter, hidden]`, each transposed
/// and their columns interleaved; `down_proj` `[experts, inter, hidden]` from
/// `ffn_down_exps` transposed; the biases (`gate_up_proj_bias`, `down_proj_bias`) alike,
/// without the transposes.
fn gguf_experts(meta: &Meta, layer: &StoredLayer) -> Result<Vec<(String, Pieces)>> {
    let (l, kind) = (layer.layer, layer.kind);
    let stored = |role: &str| {
        layer.stored.get(role).ok_or_else(|| {
            let tensor = format!("blk.{l}.{role}.{kind}");
            let problem = CheckpointProblem::MissingTensor { tensor };
            Error::checkpoint_problem(meta.path, problem)
                .with_note("beside the other experts' tensors")
        })
    };
    let ((gate, gate_shape), (up, up_shape), (down, down_shape)) = (
        stored("ffn_gate_exps")?,
        stored("ffn_up_exps")?,
        stored("ffn_down_exps")?,
    );
    let is_weight = kind == "weight";
    let rank = if is_weight { 3 } else { 2 };
    for (name, shape) in [(gate, gate_shape), (up, up_shape), (down, down_shape)] {
        if shape.len() != rank {
            let detail = format!("has shape {shape:?}, expected {rank} dimensions");
            return Err(Error::checkpoint_problem(
                meta.path,
                CheckpointProblem::tensor_data(name, detail),
            ));
        }
    }
    if up_shape != gate_shape {
        let problem = CheckpointProblem::Shape {
            tensor: up.to_string(),
            expected: gate_shape.to_vec(),
            got: up_shape.to_vec(),
        };
        return Err(
            Error::checkpoint_problem(meta.path, problem).with_note(format!("that of {gate}"))
        );
    }
    // as the loader reads them: x W, [experts, in, out]
    let hf_shape = |shape: &[usize]| {
        let mut s = shape.to_vec();
        if is_weight {
            s.swap(1, 2);
        }
        s
    };
    let piece = |name: &str| Piece {
        transposed: is_weight,
        ..Piece::whole(name)
    };
    let mut gate_up_shape = hf_shape(gate_shape);
    let elements = gate_up_shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d));
    let last = gate_up_shape.len() - 1;
    let (Some(elements), Some(both)) = (elements, gate_up_shape[last].checked_mul(2)) else {
        let detail = format!("has shape {gate_shape:?}, past any size");
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::tensor_data(gate, detail),
        ));
    };
    gate_up_shape[last] = both;
    let gate_up = Pieces {
        pieces: vec![piece(gate), piece(up)],
        axis: last,
        groups: Some(elements),
        shape: gate_up_shape,
    };
    let down = Pieces {
        pieces: vec![piece(down)],
        axis: 0,
        groups: None,
        shape: hf_shape(down_shape),
    };
    let suffix = if is_weight { "" } else { "_bias" };
    let name = |what: &str| format!("model.layers.{l}.mlp.experts.{what}{suffix}");
    Ok(vec![
        (name("gate_up_proj"), gate_up),
        (name("down_proj"), down),
    ])
}

/// GptOssConfig's attention_bias defaults to true.
fn attention_bias(raw: &RawConfig) -> Biases {
    Biases::all(raw.attention_bias.unwrap_or(true))
}

fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

/// GPT-OSS's RoPE: as given, else GptOssConfig's defaults (theta 150000; YaRN factor 32
/// over 4096 positions, beta_fast 32, beta_slow 1, not truncated).
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    let given = [&raw.rope_parameters, &raw.rope_scaling]
        .iter()
        .any(|v| v.as_ref().is_some_and(|v| !v.is_null()));
    let default = serde_json::json!({
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": false,
        "original_max_position_embeddings": 4096,
    });
    let rope = RawConfig {
        rope_parameters: match given {
            true => raw.rope_parameters.clone(),
            false => Some(default),
        },
        rope_scaling: raw.rope_scaling.clone(),
        rope_theta: Some(raw.rope_theta.unwrap_or(150_000.0)),
        max_position_embeddings: raw.max_position_embeddings,
        original_max_position_embeddings: raw.original_max_position_embeddings,
        partial_rotary_factor: raw.partial_rotary_factor,
        ..RawConfig::default()
    }
    .resolve_rope(path, head_dim)?;
    Ok((rope, None))
}

/// The keys only GptOssConfig has: its experts' clamped SwiGLU.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GptOssKeys {
    swiglu_alpha: Option<f64>,
    swiglu_limit: Option<f64>,
}

/// The experts' clamp: alpha 1.702 and limit 7 unless the config says otherwise.
fn clamp(keys: GptOssKeys, path: &Path) -> Result<ClampedGlu> {
    Ok(ClampedGlu {
        alpha: f32_factor(keys.swiglu_alpha.unwrap_or(1.702), "swiglu_alpha", path)?,
        limit: positive(keys.swiglu_limit.unwrap_or(7.0), "swiglu_limit", path)?,
    })
}

/// GptOssConfig's defaults: 128 experts, top 4, alpha 1.702, limit 7.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let DenseSizes {
        num_layers,
        intermediate_size,
    } = dense;
    Ok(Some(Experts {
        count: raw.num_local_experts.or(raw.num_experts).unwrap_or(128),
        top_k: raw.num_experts_per_tok.unwrap_or(4),
        routing: Routing::TopKSoftmax,
        clamped: Some(clamp(raw.config.family_keys(path)?, path)?),
        intermediate: intermediate_size,
        layers: (0..num_layers).collect(),
        names: ExpertNames::GptOss,
        shared_intermediate: None,
    }))
}
