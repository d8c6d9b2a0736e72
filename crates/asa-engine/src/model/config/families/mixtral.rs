//! Mixtral: the Mistral layout with a mixture-of-experts MLP (`block_sparse_moe`, experts
//! `w1`/`w3`/`w2`) on every layer, the top-k probabilities renormalised.

use std::path::Path;

use super::mistral;
use crate::model::config::family::Family;
use crate::model::experts::{DenseSizes, ExpertNames, Experts, RawExperts};
use crate::nn::Routing;
use asa_core::error::Result;

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
