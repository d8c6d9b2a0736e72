//! Cohere2 (Command R7B, Command A): one bias-free LayerNorm a layer read by attention and
//! MLP in parallel (`x + attn(ln(x)) + mlp(ln(x))`), SwiGLU, RoPE on interleaved pairs in
//! the sliding-window layers only (three of every four by `sliding_window_pattern`, else
//! `layer_types`; the full-attention layers are NoPE), head_dim = hidden / heads, tied
//! embeddings and the logits times `logit_scale` (0.0625 by default).
//!
//! llama.cpp's `cohere2` GGUF files (`convert_hf_to_gguf.py` Cohere2Model,
//! `src/models/cohere2.cpp`): Llama's tensor names without `ffn_norm` (one norm a layer),
//! q and k as stored (RoPE type NORM: interleaved pairs, as Cohere's), no output matrix (tied),
//! `logit_scale`, `attention.sliding_window`, `attention.layer_norm_epsilon`, and the
//! sliding layers by `attention.sliding_window_pattern` where written (else three of every
//! four, as llama.cpp reads it).

use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{gemma3, llama};
use crate::attention_layers::AttentionLayers;
use crate::config::family::{Family, GgufRules};
use crate::config::raw::own_keys_readable;
use crate::config::RawConfig;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::{Layout, NormKind};
use crate::multipliers::Multipliers;
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::RopePairs;

pub(crate) const FAMILY: Family = Family {
    name: "cohere2",
    keys: own_keys_readable::<Cohere2Keys>,
    check,
    norm_eps: layer_norm_eps,
    default_max_position_embeddings: 8192,
    default_tie_word_embeddings: true,
    layout,
    window: WindowRule {
        used: WindowUse::Always,
        default_size: Some(4096),
        layers: WindowLayers::AllButEvery(4),
    },
    attention_layers,
    multipliers,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// The keys only Cohere2Config has.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Cohere2Keys {
    logit_scale: Option<f64>,
}

/// Cohere2Config's default `logit_scale`.
const LOGIT_SCALE: f64 = 0.0625;

fn layer_norm_eps(raw: &RawConfig) -> f64 {
    raw.layer_norm_eps.unwrap_or(1e-5)
}

fn layout(_: &RawConfig) -> Layout {
    Layout {
        norm: NormKind::LayerNoBias,
        parallel_residual: true,
        shared_norm: true,
        rope_pairs: RopePairs::Interleaved,
        ..Layout::LLAMA
    }
}

/// Cohere2Config sets head_dim to hidden / heads whatever the config says: another value
/// (a hand-edited config) would be read differently here and there, so it is refused.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let (Some(hidden), Some(heads), Some(head_dim)) =
        (raw.hidden_size, raw.num_attention_heads, raw.head_dim)
    else {
        return Ok(());
    };
    match heads > 0 && head_dim * heads == hidden {
        true => Ok(()),
        false => Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["head_dim", "hidden_size", "num_attention_heads"],
                format!("head_dim {head_dim} is not hidden_size / num_attention_heads ({hidden} / {heads}), which cohere2 always uses"),
            ),
        )),
    }
}

/// RoPE in the sliding-window layers only: the full-attention layers are NoPE.
fn attention_layers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<AttentionLayers> {
    let sliding = raw
        .window(path, &FAMILY, num_layers)?
        .map(|w| w.layers)
        .unwrap_or_default();
    Ok(AttentionLayers {
        no_rope: (0..num_layers).filter(|l| !sliding.contains(l)).collect(),
        ..AttentionLayers::default()
    })
}

/// The logits times `logit_scale` (a number float32 holds: `Multipliers::check`).
fn multipliers(raw: &RawConfig, path: &Path) -> Result<Multipliers> {
    let keys: Cohere2Keys = raw.family_keys(path)?;
    Ok(Multipliers {
        logit_scale: Some(keys.logit_scale.unwrap_or(LOGIT_SCALE)),
        ..Multipliers::default()
    })
}

/// llama.cpp's `cohere2`: Llama's names, one norm a layer (`attn_norm`), nothing undone.
const GGUF: GgufRules = GgufRules {
    blocks: &[&[("ffn_norm", None)], llama::GGUF_BLOCKS],
    config: gguf_config,
    ..llama::gguf_rules("cohere2")
};

/// Cohere2Config's keys from the file: the LayerNorm's epsilon, `logit_scale` (which
/// llama.cpp requires too), and the sliding layers where `attention.sliding_window_pattern`
/// says.
fn gguf_config(meta: &Meta, _: &TensorFacts, d: &Dims, raw: &mut Value) -> Result<()> {
    raw["layer_norm_eps"] = json!(d.eps);
    let scale = meta.opt_f64_key("logit_scale")?.ok_or_else(|| {
        let problem = CheckpointProblem::missing_key(meta.key("logit_scale"));
        Error::checkpoint_problem(meta.path, problem)
    })?;
    raw["logit_scale"] = json!(scale);
    gemma3::gguf_layer_types(meta, raw)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::ModelConfig;

    const COHERE2: &str = r#""model_type": "cohere2", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 64"#;

    fn config(extra: &str) -> asa_core::error::Result<ModelConfig> {
        ModelConfig::from_json(&format!("{{{COHERE2}{extra}}}"), Path::new("config.json"))
    }

    #[test]
    fn every_fourth_layer_is_global_and_nope_and_the_logits_are_scaled() {
        let c = config("").unwrap();
        let window = c.sliding_window.as_ref().unwrap();
        assert_eq!(
            (window.size, window.layers.clone()),
            (4096, vec![0, 1, 2, 4, 5, 6])
        );
        assert_eq!(c.attention_layers.no_rope, vec![3, 7]);
        assert_eq!(c.multipliers.logit_scale, Some(0.0625));
        assert_eq!(c.head_dim, 8);
        let c = config(r#", "sliding_window_pattern": 2, "logit_scale": 0.5"#).unwrap();
        assert_eq!(c.attention_layers.no_rope, vec![1, 3, 5, 7]);
        assert_eq!(c.multipliers.logit_scale, Some(0.5));
    }

    #[test]
    fn a_bad_logit_scale_or_head_dim_is_refused_by_name() {
        let err = config(r#", "logit_scale": "big""#).unwrap_err().to_string();
        assert!(err.contains("field `logit_scale`"), "{err}");
        let err = config(r#", "logit_scale": 0"#).unwrap_err();
        let problem = err.problem().unwrap();
        assert_eq!(
            (problem.name(), problem.key()),
            ("out_of_range", Some("logit_scale"))
        );
        let err = config(r#", "head_dim": 16"#).unwrap_err();
        let problem = err.problem().unwrap();
        assert_eq!(
            problem.keys(),
            ["head_dim", "hidden_size", "num_attention_heads"]
        );
        assert!(
            problem
                .to_string()
                .contains("head_dim 16 is not hidden_size"),
            "{err}"
        );
    }
}
