//! DeepSeek-V3 (`deepseek_v3`; Kimi K2 is this architecture): multi-head latent attention
//! (`asa_engine::attention::latent`: low-rank q with its norm, one compressed kv latent with a
//! rotary key shared by the heads, q.k over nope + rope dims) with RoPE on interleaved pairs
//! written back de-interleaved (`rope_interleave`, true by default), the softmax scale
//! times YaRN's mscale^2 where the rope parameters have `mscale_all_dim`, and from layer
//! `first_k_dense_replace` (3) on a mixture of routed experts with shared ones, routed by
//! sigmoid scores, a score-correction bias that only chooses and group-limited top-k
//! (`noaux_tc`), renormalised and scaled (GLM-4.5 routes the same way).
//!
//! llama.cpp's `deepseek2` GGUF files (`convert_hf_to_gguf.py` DeepseekV2Model,
//! `src/models/deepseek2.cpp`): `kv_b_proj` split per head into `attn_k_b` (transposed) and
//! `attn_v_b`, joined back (an old file's whole `attn_kv_b` read as it is); the head sizes as
//! `key_length_mla` / `value_length_mla` (`head_count_kv` 1 and `key_length` r + rope are
//! MLA's absorbed shapes); RoPE on consecutive pairs, no permutation (`rope_interleave`);
//! YaRN's `mscale_all_dim` as `yarn_log_multiplier` / 0.1, `mscale` equal to it as llama.cpp
//! assumes; experts stacked, routing keys as GLM's, where `expert_gating_func` must say
//! sigmoid (absent, llama.cpp routes `deepseek2` by softmax).

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::llama;
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{Assembled, Biases, Family, GgufRules, NameTable, Ropes};
use crate::config::raw::{own_keys_readable, present};
use crate::config::{float_field, positive_or_null, RawConfig};
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::{metadata_bool, Dims, Meta, TensorFacts};
use crate::layout::{Layout, QkvLayout};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::attention::latent::LatentShape;
use asa_engine::nn::{RopePairs, Routing};

pub(crate) const FAMILY: Family = Family {
    name: "deepseek_v3",
    keys,
    biases,
    norm_eps: rms_norm_eps,
    default_max_position_embeddings: 4096,
    layout,
    rope,
    experts,
    latent,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `deepseek2`.
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_MLA_BLOCKS, GGUF_MOE_BLOCKS, llama::GGUF_BLOCKS],
    whole: &[GGUF_MOE_WHOLE],
    assembled: &[
        Assembled::Join {
            hf: "self_attn.kv_b_proj.{kind}",
            roles: &["attn_k_b", "attn_v_b"],
            axis: 1,
            transposed: &["attn_k_b"],
            merge_heads: true,
        },
        GGUF_STACKED_EXPERTS[0],
        GGUF_STACKED_EXPERTS[1],
        GGUF_STACKED_EXPERTS[2],
    ],
    config: gguf_config,
    ..llama::gguf_rules("deepseek2")
};

/// Multi-head latent attention's tensors.
const GGUF_MLA_BLOCKS: NameTable = &[
    ("attn_q_a", Some("self_attn.q_a_proj")),
    ("attn_q_a_norm", Some("self_attn.q_a_layernorm")),
    ("attn_q_b", Some("self_attn.q_b_proj")),
    ("attn_kv_a_mqa", Some("self_attn.kv_a_proj_with_mqa")),
    ("attn_kv_a_norm", Some("self_attn.kv_a_layernorm")),
    ("attn_kv_b", Some("self_attn.kv_b_proj")),
];

/// The latent shapes from the MLA keys, every head its own key-value head, RoPE on
/// interleaved pairs, YaRN's mscale, the routing keys.
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    dims: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    let rope_dim = dims.rot_dim;
    let kv_rank = meta.usize_key("attention.kv_lora_rank")?;
    // a file from before the kv_b split states the head sizes as key_length / value_length
    let qk_dim = meta
        .opt_usize_key("attention.key_length_mla")?
        .unwrap_or(dims.head_dim);
    let v_dim = match meta.opt_usize_key("attention.value_length_mla")? {
        Some(v) => v,
        None => meta
            .opt_usize_key("attention.value_length")?
            .unwrap_or(dims.head_dim),
    };
    let Some(nope_dim) = qk_dim.checked_sub(rope_dim) else {
        let keys = [
            meta.key("attention.key_length_mla"),
            meta.key("rope.dimension_count"),
        ];
        let detail = format!(
            "{} {qk_dim} is smaller than {} {rope_dim}",
            keys[0], keys[1]
        );
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::inconsistent(&[&keys[0], &keys[1]], detail),
        ));
    };
    raw["q_lora_rank"] = serde_json::json!(meta.opt_usize_key("attention.q_lora_rank")?);
    raw["kv_lora_rank"] = serde_json::json!(kv_rank);
    raw["qk_rope_head_dim"] = serde_json::json!(rope_dim);
    raw["qk_nope_head_dim"] = serde_json::json!(nope_dim);
    raw["v_head_dim"] = serde_json::json!(v_dim);
    raw["head_dim"] = serde_json::json!(rope_dim);
    raw["partial_rotary_factor"] = serde_json::Value::Null;
    raw["num_key_value_heads"] = serde_json::json!(dims.heads);
    raw["rope_interleave"] = serde_json::json!(true);
    raw["attention_bias"] = serde_json::json!(tensors.any_ends_with("self_attn.q_a_proj.bias"));
    if let Some(log_multiplier) = meta.opt_f64_key("rope.scaling.yarn_log_multiplier")? {
        // llama.cpp divides it by 0.1 again (TAG_DEEPSEEK2_YARN_LOG_MUL_FIX) and takes
        // mscale equal to mscale_all_dim
        let all_dim = log_multiplier / 0.1;
        raw["rope_parameters"]["mscale_all_dim"] = serde_json::json!(all_dim);
        raw["rope_parameters"]["mscale"] = serde_json::json!(all_dim);
    }
    deepseek_moe_gguf_keys(meta, raw, false)
}

/// `attention_bias` puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj.
fn biases(raw: &RawConfig) -> Biases {
    Biases::all(raw.attention_bias.unwrap_or(false))
}

/// DeepseekV3Config's default is 1e-6.
fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-6)
}

/// The keys only DeepseekV3Config has: multi-head latent attention's ranks (`q_lora_rank`
/// null is one `q_proj`), head sizes and RoPE pairs.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DeepseekKeys {
    #[serde(deserialize_with = "present")]
    q_lora_rank: Option<Value>,
    kv_lora_rank: Option<usize>,
    qk_nope_head_dim: Option<usize>,
    qk_rope_head_dim: Option<usize>,
    v_head_dim: Option<usize>,
    rope_interleave: Option<bool>,
}

/// Its own keys and the DeepSeek-style experts' ([`DeepseekMoeKeys`]), each read as its
/// struct.
fn keys(raw: &RawConfig, path: &Path) -> Result<()> {
    own_keys_readable::<DeepseekKeys>(raw, path)?;
    own_keys_readable::<DeepseekMoeKeys>(raw, path)
}

/// The keys of the DeepSeek-style experts (DeepseekV3Config's, Glm4MoeConfig's): routed and
/// shared experts, group-limited top-k, the routed weights' factor, the dense layers before
/// the first MoE layer, and the routing's method and scores.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct DeepseekMoeKeys {
    n_routed_experts: Option<usize>,
    n_shared_experts: Option<usize>,
    n_group: Option<usize>,
    topk_group: Option<usize>,
    routed_scaling_factor: Option<f64>,
    first_k_dense_replace: Option<usize>,
    topk_method: Option<String>,
    scoring_func: Option<String>,
}

fn layout(raw: &RawConfig) -> Layout {
    Layout {
        qkv: QkvLayout::Latent,
        rope_pairs: match raw.own::<DeepseekKeys>().rope_interleave.unwrap_or(true) {
            true => RopePairs::Deinterleaved,
            false => RopePairs::Halves,
        },
        ..Layout::LLAMA
    }
}

/// The RoPE of the rope dims (`head_dim` here is `qk_rope_head_dim`).
fn rope(raw: &RawConfig, path: &Path, rope_dim: usize) -> Result<Ropes> {
    llama::rope(raw, path, rope_dim)
}

/// DeepseekV3Config's defaults: q rank 1536, kv rank 512, nope 128, rope 64, v 128.
fn latent(raw: &RawConfig, path: &Path) -> Result<Option<LatentShape>> {
    let keys: DeepseekKeys = raw.family_keys(path)?;
    let q_rank = positive_or_null(keys.q_lora_rank.as_ref(), "q_lora_rank", Some(1536), path)?;
    let kv_rank = keys.kv_lora_rank.unwrap_or(512);
    let nope_dim = keys.qk_nope_head_dim.unwrap_or(128);
    let rope_dim = keys.qk_rope_head_dim.unwrap_or(64);
    let v_dim = keys.v_head_dim.unwrap_or(128);
    for (key, value) in [
        ("kv_lora_rank", kv_rank),
        ("qk_rope_head_dim", rope_dim),
        ("v_head_dim", v_dim),
    ] {
        if value == 0 {
            let problem = CheckpointProblem::out_of_range(key, value, "at least 1");
            return Err(Error::checkpoint_problem(path, problem));
        }
    }
    if rope_dim % 2 != 0 || v_dim > nope_dim + rope_dim {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim"],
                format!("qk_rope_head_dim {rope_dim} must be even and v_head_dim {v_dim} at most qk_nope_head_dim + qk_rope_head_dim ({})", nope_dim + rope_dim),
            ),
        ));
    }
    let scale = ((nope_dim + rope_dim) as f64).powf(-0.5) * yarn_softmax_mscale(raw, path)?;
    Ok(Some(LatentShape {
        q_rank,
        kv_rank,
        nope_dim,
        rope_dim,
        v_dim,
        softmax_scale: scale,
    }))
}

/// transformers' `yarn_apply_mscale`: with a RoPE type other than default and a non-zero
/// `mscale_all_dim`, the softmax scale is multiplied by mscale^2, mscale = 0.1
/// mscale_all_dim ln(factor) + 1 (1 for factor <= 1); else 1.
fn yarn_softmax_mscale(raw: &RawConfig, path: &Path) -> Result<f64> {
    let params = raw.rope_parameters.as_ref().or(raw.rope_scaling.as_ref());
    let Some(params) = params.filter(|p| p.is_object()) else {
        return Ok(1.0);
    };
    let rope_type = params
        .get("rope_type")
        .or_else(|| params.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let all_dim = float_field(params, "rope_parameters", "mscale_all_dim", path)?.unwrap_or(0.0);
    if rope_type == "default" || all_dim == 0.0 {
        return Ok(1.0);
    }
    let factor = float_field(params, "rope_parameters", "factor", path)?.ok_or_else(|| {
        let problem = CheckpointProblem::MissingKey {
            key: "rope_parameters.factor".into(),
            detail: "rope_parameters has mscale_all_dim".into(),
        };
        Error::checkpoint_problem(path, problem)
    })?;
    let mscale = match factor <= 1.0 {
        true => 1.0,
        false => 0.1 * all_dim * factor.ln() + 1.0,
    };
    Ok(mscale * mscale)
}

/// DeepseekV3Config's defaults: 256 experts of 2048, 8 a token, 1 shared, 8 groups of which
/// 4 are kept, scale 2.5, dense layers 1-3.
fn experts(raw: &RawExperts, dense: DenseSizes, path: &Path) -> Result<Option<Experts>> {
    let defaults = DeepSeekDefaults {
        count: 256,
        top_k: 8,
        intermediate: 2048,
        shared: 1,
        groups: 8,
        topk_group: 4,
        scaling: 2.5,
        first_dense: 3,
    };
    deepseek_experts(raw, dense, path, defaults)
}

/// The class defaults of a DeepSeek-style mixture of experts.
pub(crate) struct DeepSeekDefaults {
    pub count: usize,
    pub top_k: usize,
    pub intermediate: usize,
    pub shared: usize,
    pub groups: usize,
    pub topk_group: usize,
    pub scaling: f64,
    /// `first_k_dense_replace`.
    pub first_dense: usize,
}

/// DeepSeek-V3's and GLM-4.5's experts: dense layers before `first_k_dense_replace`, then
/// routed experts (`mlp.experts.{e}`) with shared ones (`mlp.shared_experts`, all of them one
/// MLP of `n_shared_experts` x `moe_intermediate_size`), group-limited sigmoid routing.
pub(crate) fn deepseek_experts(
    raw: &RawExperts,
    dense: DenseSizes,
    path: &Path,
    defaults: DeepSeekDefaults,
) -> Result<Option<Experts>> {
    let keys: DeepseekMoeKeys = raw.config.family_keys(path)?;
    for (key, value, implemented) in [
        ("topk_method", keys.topk_method.as_deref(), "noaux_tc"),
        ("scoring_func", keys.scoring_func.as_deref(), "sigmoid"),
    ] {
        if let Some(other) = value.filter(|v| *v != implemented) {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported(key, other, implemented),
            ));
        }
    }
    let count = keys
        .n_routed_experts
        .or(raw.num_local_experts)
        .unwrap_or(defaults.count);
    let groups = keys.n_group.unwrap_or(defaults.groups);
    let topk_group = keys.topk_group.unwrap_or(defaults.topk_group);
    if groups == 0 || !count.is_multiple_of(groups) || topk_group == 0 || topk_group > groups {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["n_group", "n_routed_experts", "topk_group"],
                format!("n_group {groups} must divide the {count} routed experts and topk_group {topk_group} be between 1 and n_group"),
            ),
        ));
    }
    // each group's score is the sum of its two best experts'
    if count / groups < 2 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["n_group", "n_routed_experts"],
                format!("n_group {groups} leaves fewer than 2 experts a group (transformers takes each group's top 2)"),
            ),
        ));
    }
    let scaling = crate::config::experts::f32_factor(
        keys.routed_scaling_factor.unwrap_or(defaults.scaling),
        "routed_scaling_factor",
        path,
    )?;
    let intermediate = raw.moe_intermediate_size.unwrap_or(defaults.intermediate);
    let shared = keys.n_shared_experts.unwrap_or(defaults.shared);
    let first_moe = keys.first_k_dense_replace.unwrap_or(defaults.first_dense);
    let shared_width = crate::config::experts::checked_size(
        shared,
        intermediate,
        "n_shared_experts x moe_intermediate_size",
        path,
    )?;
    Ok(Some(Experts {
        count,
        top_k: raw.num_experts_per_tok.unwrap_or(defaults.top_k),
        routing: Routing::GroupLimitedSigmoid {
            groups,
            topk_group,
            renormalise: raw.norm_topk_prob.unwrap_or(true),
            scaling,
        },
        clamped: None,
        intermediate,
        layers: (first_moe..dense.num_layers).collect(),
        names: ExpertNames::DeepSeek,
        shared_intermediate: (shared > 0).then_some(shared_width),
    }))
}

/// llama.cpp's names of a DeepSeek-style MoE block's router and shared experts (DeepSeek-V3,
/// GLM-4.5); the routed experts are stacked ([`GGUF_STACKED_EXPERTS`]).
pub(crate) const GGUF_MOE_BLOCKS: NameTable = &[
    ("ffn_gate_inp", Some("mlp.gate")),
    ("ffn_gate_shexp", Some("mlp.shared_experts.gate_proj")),
    ("ffn_up_shexp", Some("mlp.shared_experts.up_proj")),
    ("ffn_down_shexp", Some("mlp.shared_experts.down_proj")),
];

/// The score-correction bias, `exp_probs_b.bias` (an HF tensor without `.bias`).
pub(crate) const GGUF_MOE_WHOLE: NameTable =
    &[("exp_probs_b.bias", Some("mlp.gate.e_score_correction_bias"))];

/// Experts `mlp.experts.{e}` stacked in `ffn_{gate,up,down}_exps` (Qwen, DeepSeek, GLM).
pub(crate) const GGUF_STACKED_EXPERTS: &[Assembled] = &[
    Assembled::PerExpert {
        role: "ffn_gate_exps",
        prefix: "mlp.experts",
        suffix: "gate_proj",
    },
    Assembled::PerExpert {
        role: "ffn_up_exps",
        prefix: "mlp.experts",
        suffix: "up_proj",
    },
    Assembled::PerExpert {
        role: "ffn_down_exps",
        prefix: "mlp.experts",
        suffix: "down_proj",
    },
];

/// llama.cpp's `expert_gating_func` for sigmoid scores.
const GGUF_SIGMOID_GATING: usize = 2;

/// DeepSeek-style routing from llama.cpp's keys: experts, shared experts, their width, the
/// dense layers before them, groups, the scale and renormalisation (absent: llama.cpp's
/// 1 and false). `expert_gating_func` must say sigmoid (2); where it is absent, llama.cpp
/// reads sigmoid for some architectures (`absent_is_sigmoid`) and softmax for others.
pub(crate) fn deepseek_moe_gguf_keys(
    meta: &Meta,
    raw: &mut serde_json::Value,
    absent_is_sigmoid: bool,
) -> Result<()> {
    let gating = meta.opt_usize_key("expert_gating_func")?;
    if gating.map_or(!absent_is_sigmoid, |g| g != GGUF_SIGMOID_GATING) {
        let what = gating.map_or("absent (softmax, as llama.cpp reads it)".to_string(), |g| {
            g.to_string()
        });
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unsupported(
                meta.key("expert_gating_func"),
                what,
                "2 (sigmoid scores, as transformers routes this family)",
            ),
        ));
    }
    raw["n_routed_experts"] = serde_json::json!(meta.usize_key("expert_count")?);
    raw["num_experts_per_tok"] = serde_json::json!(meta.usize_key("expert_used_count")?);
    raw["n_shared_experts"] =
        serde_json::json!(meta.opt_usize_key("expert_shared_count")?.unwrap_or(0));
    raw["moe_intermediate_size"] = serde_json::json!(meta.usize_key("expert_feed_forward_length")?);
    raw["first_k_dense_replace"] = serde_json::json!(meta
        .opt_usize_key("leading_dense_block_count")?
        .unwrap_or(0));
    raw["n_group"] = serde_json::json!(meta.opt_usize_key("expert_group_count")?.unwrap_or(1));
    raw["topk_group"] =
        serde_json::json!(meta.opt_usize_key("expert_group_used_count")?.unwrap_or(1));
    // present: the file's (as config.json's routed_scaling_factor is read); absent: 1
    let scale = meta.opt_f64_key("expert_weights_scale")?;
    raw["routed_scaling_factor"] = serde_json::json!(scale.unwrap_or(1.0));
    let norm = metadata_bool(meta.content, &meta.key("expert_weights_norm")).unwrap_or(false);
    raw["norm_topk_prob"] = serde_json::json!(norm);
    Ok(())
}
