//! Gemma 2: RMSNorm scaled by (1 + w) before and after attention and MLP, a tanh-GELU
//! GeGLU, embeddings times sqrt(hidden), q.k scaled by `query_pre_attn_scalar`^-1/2,
//! attention and final logits soft-capped, sliding windows on alternate layers.

use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use super::llama;
use crate::config::family::{Family, GgufRules, NameTable, StoredTensor, Undo};
use crate::config::raw::{own_keys_readable, positive, present};
use crate::config::{GemmaSettings, RawConfig};
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::layout::{Layout, MlpKind, NormKind};
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

pub(crate) const FAMILY: Family = Family {
    name: "gemma2",
    keys: own_keys_readable::<GemmaKeys>,
    // Gemma2Config's defaults
    default_head_dim: Some(256),
    activation: "gelu_pytorch_tanh",
    activation_key: hidden_activation,
    default_tie_word_embeddings: true,
    layout,
    window: WindowRule {
        used: WindowUse::Always,
        default_size: Some(4096),
        layers: WindowLayers::EveryOther,
    },
    scalars,
    gguf: Some(&GGUF),
    ..llama::FAMILY
};

/// llama.cpp's `gemma2`: the norms before and after attention and MLP, every norm's scale
/// stored as 1 + w.
pub(crate) const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_SANDWICH_NORMS, llama::GGUF_BLOCKS],
    undo: norm_minus_one,
    config: gguf_config,
    ..llama::gguf_rules("gemma2")
};

/// Gemma's norms around attention and MLP (Gemma 2, Gemma 3), as llama.cpp names them.
pub(crate) const GGUF_SANDWICH_NORMS: NameTable = &[
    ("post_attention_norm", Some("post_attention_layernorm")),
    ("ffn_norm", Some("pre_feedforward_layernorm")),
    ("post_ffw_norm", Some("post_feedforward_layernorm")),
];

/// `hidden_activation` (a string, or absent or null: resolution has read [`GemmaKeys`]),
/// else `hidden_act`.
pub(crate) fn hidden_activation(raw: &RawConfig) -> Option<&str> {
    raw.json
        .get("hidden_activation")
        .and_then(Value::as_str)
        .or(raw.hidden_act.as_deref())
}

pub(crate) fn layout(_: &RawConfig) -> Layout {
    Layout {
        norm: NormKind::RmsPlusOne,
        mlp: MlpKind::GeGluTanh,
        sandwich: true,
        ..Layout::LLAMA
    }
}

/// Gemma2Config's soft-caps: 50 (attention) and 30 (final logits) when absent.
fn scalars(raw: &RawConfig, path: &Path, hidden_size: usize) -> Result<Option<GemmaSettings>> {
    let defaults = SoftCaps {
        attn: Some(50.0),
        final_logits: Some(30.0),
    };
    gemma_scalars(raw, path, hidden_size, defaults)
}

/// llama.cpp's converter adds Gemma's offset to every norm's scale (stored 1 + w): 1 is
/// subtracted again, as transformers' Gemma2TensorProcessor does.
fn norm_minus_one(t: &StoredTensor) -> Undo {
    match t.name.ends_with("norm.weight") {
        true => Undo::MinusOne,
        false => Undo::Nothing,
    }
}

/// Gemma 2 as llama.cpp reads it (the 27B model has 46 layers).
fn gguf_config(meta: &Meta, _: &TensorFacts, d: &Dims, raw: &mut Value) -> Result<()> {
    gemma_gguf_config(meta, d, raw, 46)
}

/// Gemma 2/3 as llama.cpp reads them: the tanh-GELU, q.k scaled by head_dim^-1/2 except in
/// the 27B models (`large_layers` layers: hidden / heads), the soft-caps the metadata gives.
pub(crate) fn gemma_gguf_config(
    meta: &Meta,
    d: &Dims,
    raw: &mut Value,
    large_layers: usize,
) -> Result<()> {
    raw["hidden_act"] = Value::Null;
    raw["hidden_activation"] = json!("gelu_pytorch_tanh");
    let layers = meta.usize_key("block_count")?;
    raw["query_pre_attn_scalar"] = json!(match layers == large_layers {
        true => d.hidden / d.heads.max(1),
        false => d.head_dim,
    });
    for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(cap) = meta.opt_f64_key(key)? {
            raw[key] = json!(cap);
        }
    }
    Ok(())
}

/// The keys only the Gemma config classes have: the MLP's activation, the attention scale,
/// and the soft-caps of the attention logits and of the final logits (`null`: none, apart
/// from absent: the class's default).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct GemmaKeys {
    hidden_activation: Option<String>,
    query_pre_attn_scalar: Option<f64>,
    #[serde(deserialize_with = "present")]
    attn_logit_softcapping: Option<Value>,
    #[serde(deserialize_with = "present")]
    final_logit_softcapping: Option<Value>,
}

/// A config class's default soft-caps: of the attention logits and of the final logits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SoftCaps {
    pub attn: Option<f64>,
    pub final_logits: Option<f64>,
}

/// Gemma's scalars: query_pre_attn_scalar (default 256), the soft-caps (`defaults` when
/// absent, none when null) and the embedding scale sqrt(hidden_size).
pub(crate) fn gemma_scalars(
    raw: &RawConfig,
    path: &Path,
    hidden_size: usize,
    defaults: SoftCaps,
) -> Result<Option<GemmaSettings>> {
    let keys: GemmaKeys = raw.family_keys(path)?;
    let scalar = positive(
        keys.query_pre_attn_scalar.unwrap_or(256.0),
        "query_pre_attn_scalar",
        path,
    )?;
    // q.k is scaled by scalar^-1/2 in f32: a scalar so small that it overflows would make
    // every logit inf (transformers, in float64, gives a one-hot softmax instead)
    if 1.0 / scalar.sqrt() > f32::MAX as f64 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range(
                "query_pre_attn_scalar",
                format!("{scalar:e}"),
                "large enough that its q.k scale (scalar^-1/2) fits float32",
            ),
        ));
    }
    Ok(Some(GemmaSettings {
        query_pre_attn_scalar: scalar,
        attn_logit_softcap: softcap(
            "attn_logit_softcapping",
            keys.attn_logit_softcapping.as_ref(),
            defaults.attn,
            path,
        )?,
        final_logit_softcap: softcap(
            "final_logit_softcapping",
            keys.final_logit_softcapping.as_ref(),
            defaults.final_logits,
            path,
        )?,
        embedding_scale: (hidden_size as f64).sqrt(),
    }))
}

/// The soft-cap `key`: `default` when absent, none when null.
fn softcap(
    key: &str,
    value: Option<&Value>,
    default: Option<f64>,
    path: &Path,
) -> Result<Option<f64>> {
    match value {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(cap) => Ok(Some(positive(cap, key, path)?)),
            None => Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::wrong_type(key, "a number or null", v),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::ModelConfig;

    const GEMMA: &str = r#""model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": 100"#;

    fn config(extra: &str) -> asa_core::error::Result<ModelConfig> {
        ModelConfig::from_json(&format!("{{{GEMMA}, {extra}}}"), Path::new("config.json"))
    }

    #[test]
    fn softcaps_beyond_f32_are_the_identity_and_tiny_scalars_are_refused() {
        let c =
            config(r#""attn_logit_softcapping": 1e308, "final_logit_softcapping": 3e38"#).unwrap();
        // kept as written (run.json), applied only within f32
        assert_eq!(c.gemma.unwrap().attn_logit_softcap, Some(1e308));
        assert_eq!(c.attn_logit_softcap(), None);
        assert_eq!(c.final_logit_softcap(), Some(3e38));
        let err = config(r#""query_pre_attn_scalar": 1e-300"#).unwrap_err();
        let problem = err.problem().unwrap();
        assert_eq!(
            (problem.name(), problem.key()),
            ("out_of_range", Some("query_pre_attn_scalar"))
        );
    }
}
