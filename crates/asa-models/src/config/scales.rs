//! The scale factors a resolved config implies, checked once whatever file it came from
//! (config.json or GGUF metadata): each must be a number the float32 forward pass holds,
//! finite and not 0, or the model could only compute inf, NaN or 0 from it.

use std::path::Path;

use super::ModelConfig;
use crate::config::experts::f32_factor;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::rope::scaling::attention_factor;

impl ModelConfig {
    /// The q.k scale (head dims, `query_pre_attn_scalar`, `attention_multiplier`, YaRN's
    /// mscale^2 of latent attention), the rotary attention factor of each RoPE (YaRN's
    /// `attention_factor` or mscale / mscale_all_dim, LongRoPE's) and Llama 4's temperature
    /// at the longest position, each within f32's normal range; refused naming the keys
    /// they come from and `path`.
    pub(crate) fn check_scales(&self, path: &Path) -> Result<()> {
        f32_factor(self.query_scale(), &self.query_scale_source(), path)?;
        for rope in std::iter::once(&self.rope).chain(self.rope_local.as_ref()) {
            f32_factor(
                attention_factor(&rope.scaling),
                "the rotary attention factor (rope_parameters `attention_factor`, or `mscale` / `mscale_all_dim`)",
                path,
            )?;
        }
        if let Some(t) = self.attention_layers.temperature {
            // 0 is a valid attn_scale (no tuning); past f32 the query is inf
            if t.attn_scale != 0.0 {
                f32_factor(t.attn_scale, "attn_scale", path)?;
            }
            // the query's factor at the longest position, in f32 as the model computes it
            let last = self.max_position_embeddings.max(1) - 1;
            let factor = t.factor(last);
            if !factor.is_finite() {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::inconsistent(
                        &["attn_scale", "floor_scale", "max_position_embeddings"],
                        format!(
                            "attn_scale {} and floor_scale {} make the query's temperature {factor} at position {last}: the model could only compute inf or NaN",
                            t.attn_scale, t.floor_scale
                        ),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The config keys the q.k scale is made of.
    fn query_scale_source(&self) -> String {
        let what = match (&self.multipliers.attention_scale, &self.latent, &self.gemma) {
            (Some(_), ..) => "attention_multiplier",
            (None, Some(_), _) => "qk_nope_head_dim, qk_rope_head_dim and YaRN's mscale^2 (rope_parameters `mscale_all_dim`, `factor`)",
            (None, None, Some(_)) => "query_pre_attn_scalar^-1/2",
            (None, None, None) => "head_dim^-1/2",
        };
        format!("the q.k scale (from {what})")
    }
}
