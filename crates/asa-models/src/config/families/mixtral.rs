//! Mixtral: the Mistral layout with a mixture-of-experts MLP (`block_sparse_moe`, experts
//! `w1`/`w3`/`w2`) on every layer, the top-k probabilities renormalised. llama.cpp's
//! converter writes it as its `llama` architecture with `expert_count` and
//! `expert_used_count`, the router `ffn_gate_inp` and the experts stacked
//! (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`): such a file is read as Mixtral
//! (llama.cpp routes it by the softmax of the router's logits, the top k renormalised, as
//! MixtralSparseMoeBlock does).

use std::path::Path;

use serde_json::json;

use super::mistral;
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::family::{Assembled, Family, NameTable};
use crate::experts::{ExpertNames, Experts};
use crate::gguf_config::Meta;
use asa_core::error::Result;
use asa_engine::nn::Routing;

pub(crate) const FAMILY: Family = Family {
    name: "mixtral",
    // MixtralConfig's sliding_window defaults to null, not Mistral's 4096
    window: mistral::WINDOW,
    experts,
    // a transformers 5 model in memory keeps the router and its fused experts under `mlp`
    weight_names: &[
        (
            "model.layers.{l}.block_sparse_moe.gate.{p}",
            "model.layers.{l}.mlp.gate.{p}",
        ),
        (
            "model.layers.{l}.block_sparse_moe.experts.{w}",
            "model.layers.{l}.mlp.experts.{w}",
        ),
    ],
    ..mistral::FAMILY
};

/// The router of a `llama` GGUF file with experts.
pub(crate) const GGUF_ROUTER: NameTable = &[("ffn_gate_inp", Some("block_sparse_moe.gate"))];

/// The stacked experts of a `llama` GGUF file, each expert its own `w1` / `w3` / `w2`.
pub(crate) const GGUF_EXPERTS: &[Assembled] = &[
    Assembled::PerExpert {
        role: "ffn_gate_exps",
        prefix: "block_sparse_moe.experts",
        suffix: "w1",
    },
    Assembled::PerExpert {
        role: "ffn_up_exps",
        prefix: "block_sparse_moe.experts",
        suffix: "w3",
    },
    Assembled::PerExpert {
        role: "ffn_down_exps",
        prefix: "block_sparse_moe.experts",
        suffix: "w2",
    },
];

/// A `llama` GGUF file with `expert_count` is Mixtral: its experts and how many a token
/// takes (`expert_used_count`, required with them).
pub(crate) fn gguf_keys(meta: &Meta, raw: &mut serde_json::Value) -> Result<()> {
    let Some(experts) = meta.opt_usize_key("expert_count")? else {
        return Ok(());
    };
    raw["model_type"] = json!("mixtral");
    raw["num_local_experts"] = json!(experts);
    raw["num_experts_per_tok"] = json!(meta.usize_key("expert_used_count")?);
    Ok(())
}

/// MixtralConfig's defaults: 8 experts, top 2.
fn experts(raw: &RawExperts, dense: DenseSizes, _: &Path) -> Result<Option<Experts>> {
    let DenseSizes {
        num_layers,
        intermediate_size,
    } = dense;
    Ok(Some(Experts {
        count: raw.num_local_experts.unwrap_or(8),
        top_k: raw.num_experts_per_tok.unwrap_or(2),
        routing: Routing::SoftmaxTopK { renormalise: true },
        clamped: None,
        intermediate: intermediate_size,
        layers: (0..num_layers).collect(),
        names: ExpertNames::Mixtral,
        shared_intermediate: None,
    }))
}
