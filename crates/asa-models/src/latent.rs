//! Loads a multi-head latent attention layer's projections
//! ([`asa_engine::attention::latent::LatentProjections`]) by DeepSeek's tensor names, every shape
//! checked: `q_a_proj` / `q_a_layernorm` / `q_b_proj` (or `q_proj` without `q_lora_rank`),
//! `kv_a_proj_with_mqa` / `kv_a_layernorm` / `kv_b_proj`; `attention_bias` adds biases to
//! `q_a_proj` and `kv_a_proj_with_mqa` (and o_proj), as transformers builds them.

use super::layers::{linear, rms_norm, ProjDims};
use super::weights::WeightStore;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::attention::latent::{LatentProjections, LatentQuery, LATENT_NORM_EPS};
use asa_engine::attention::AttentionShape;

/// The latent projections under `prefix` (`model.layers.{l}.self_attn`) of a layer of shape
/// `s` (whose `latent` sizes they are).
pub fn load(store: &WeightStore, prefix: &str, s: &AttentionShape) -> Result<LatentProjections> {
    let Some(shape) = s.latent else {
        return Err(Error::checkpoint_problem(
            store.any_file(),
            CheckpointProblem::MissingKey {
                key: "kv_lora_rank".into(),
                detail: "a latent attention layout without latent sizes".into(),
            },
        ));
    };
    if s.variant.kind().is_gated() {
        return Err(Error::checkpoint_problem(
            store.any_file(),
            CheckpointProblem::unimplemented(
                &["attention_variant", "kv_lora_rank"],
                "a gated variant reads its gate from q_proj, which latent attention does not have",
            ),
        ));
    }
    let proj = |name: &str, in_dim: usize, out_dim: usize, bias: bool| {
        linear(
            store,
            &format!("{prefix}.{name}"),
            ProjDims { in_dim, out_dim },
            bias,
        )
    };
    let norm =
        |name: &str, dim: usize| rms_norm(store, &format!("{prefix}.{name}"), dim, LATENT_NORM_EPS);
    let heads = s.heads;
    let query = match shape.q_rank {
        None => LatentQuery::Direct(proj("q_proj", s.hidden, heads * shape.qk_dim(), false)?),
        Some(rank) => LatentQuery::LowRank {
            down: proj("q_a_proj", s.hidden, rank, s.qkv_bias)?,
            norm: norm("q_a_layernorm", rank)?,
            up: proj("q_b_proj", rank, heads * shape.qk_dim(), false)?,
        },
    };
    let kv_rank = shape.kv_rank;
    Ok(LatentProjections {
        query,
        kv_down: proj(
            "kv_a_proj_with_mqa",
            s.hidden,
            kv_rank + shape.rope_dim,
            s.qkv_bias,
        )?,
        kv_norm: norm("kv_a_layernorm", kv_rank)?,
        kv_up: proj(
            "kv_b_proj",
            kv_rank,
            heads * (shape.nope_dim + shape.v_dim),
            false,
        )?,
        shape,
        heads,
    })
}
