//! The raw file format: a serde mirror of config.json ([`RawConfig`], every field optional,
//! unknown fields ignored), and the readers of single fields that resolution shares.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};

/// Serde mirror of config.json: everything optional, unknown fields ignored.
#[derive(Debug, Deserialize, Default)]
pub struct RawConfig {
    pub model_type: Option<String>,
    #[serde(alias = "n_embd")]
    pub hidden_size: Option<usize>,
    #[serde(alias = "n_inner")]
    pub intermediate_size: Option<usize>,
    #[serde(alias = "n_layer")]
    pub num_hidden_layers: Option<usize>,
    #[serde(alias = "n_head")]
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub vocab_size: Option<usize>,
    pub rms_norm_eps: Option<f64>,
    #[serde(alias = "n_positions")]
    pub max_position_embeddings: Option<usize>,
    pub tie_word_embeddings: Option<bool>,
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub rope_theta: Option<f64>,
    pub rope_scaling: Option<Value>,
    pub rope_parameters: Option<Value>,
    pub partial_rotary_factor: Option<f64>,
    pub bos_token_id: Option<Value>,
    pub eos_token_id: Option<Value>,
    pub use_sliding_window: Option<bool>,
    /// `null` (no window) is `Some(Value::Null)`, apart from absent (the class's default).
    #[serde(default, deserialize_with = "present")]
    pub sliding_window: Option<Value>,
    pub max_window_layers: Option<usize>,
    /// The pretraining length outside the rope parameters (Phi-3), preferred by YaRN.
    pub original_max_position_embeddings: Option<usize>,
    /// Gemma's bidirectional (non-causal) attention, which the kernels do not compute.
    pub use_bidirectional_attention: Option<bool>,
    /// How the weights are quantized (only GPT-OSS's MXFP4 experts are read).
    pub quantization_config: Option<Value>,
    /// Gemma 3 and Cohere2: one global layer every `sliding_window_pattern` layers.
    pub sliding_window_pattern: Option<usize>,
    pub layer_norm_eps: Option<f64>,
    pub num_local_experts: Option<usize>,
    pub num_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub moe_intermediate_size: Option<usize>,
    /// GPT-NeoX's legacy names of `partial_rotary_factor` and `rope_theta`.
    pub rotary_pct: Option<f64>,
    pub rotary_emb_base: Option<f64>,
    #[serde(alias = "layers_block_type")]
    pub layer_types: Option<Vec<String>>,
    pub hidden_act: Option<String>,
    /// NoPE layers (SmolLM3, Llama 4): 1 where a layer uses RoPE, 0 where it does not, or
    /// every `no_rope_layer_interval`-th layer.
    pub no_rope_layers: Option<Vec<i64>>,
    pub no_rope_layer_interval: Option<usize>,
    /// Llama 4: the temperature tuning's scales (read by the scale checks too).
    pub floor_scale: Option<f64>,
    pub attn_scale: Option<f64>,
    pub attention_variant: Option<String>,
    pub affine_scaled: Option<RawAffine>,
    pub scale_invariant: Option<RawScaleInvariant>,
    pub logn: Option<RawLogn>,
    /// The config as written, from which a family reads the keys only it has into a struct
    /// in its own file (`RawConfig::family_keys`); `null` where none was kept.
    #[serde(skip)]
    pub json: Value,
}

impl RawConfig {
    /// A config.json's `text` read (`what` says what in errors): the shared keys into the
    /// mirror, the whole JSON kept for the families' own keys.
    pub(crate) fn parse(text: &str, path: &Path, what: &str) -> Result<Self> {
        let mut raw: RawConfig =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
                .map_err(|e| field_error(path, what, e))?;
        raw.json = serde_json::from_str(text)
            .map_err(|e| Error::invalid(path, what, e).about(InputKind::Checkpoint))?;
        Ok(raw)
    }

    /// A config's JSON `value` read, as [`RawConfig::parse`].
    pub(crate) fn from_value(value: Value, path: &Path, what: &str) -> Result<Self> {
        let mut raw: RawConfig =
            serde_path_to_error::deserialize(&value).map_err(|e| field_error(path, what, e))?;
        raw.json = value;
        Ok(raw)
    }

    /// The keys only one family has, read from the kept JSON into that family's struct
    /// (absent keys its `#[serde(default)]`s; a wrong type refused naming the field).
    pub(crate) fn family_keys<T: serde::de::DeserializeOwned>(&self, path: &Path) -> Result<T> {
        let empty = Value::Object(Default::default());
        let json = match self.json.is_object() {
            true => &self.json,
            false => &empty,
        };
        serde_path_to_error::deserialize(json)
            .map_err(|e| field_error(path, "invalid config.json", e))
    }

    /// The family's own keys where a rule has no path for errors: resolution has read them
    /// already ([`own_keys_readable`], the family's `keys`), so a wrong type was refused
    /// before any rule runs.
    pub(crate) fn own<T: serde::de::DeserializeOwned + Default>(&self) -> T {
        self.family_keys(Path::new("config.json"))
            .unwrap_or_default()
    }
}

/// Checks that a config's keys of family struct `T` read (a family's `keys` rule): run by
/// resolution first, so that [`RawConfig::own`] never meets a wrong type.
pub(crate) fn own_keys_readable<T: serde::de::DeserializeOwned>(
    raw: &RawConfig,
    path: &Path,
) -> Result<()> {
    raw.family_keys::<T>(path).map(drop)
}

/// The keys of a family that has none of its own.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct NoOwnKeys {}

/// A field that is there, `null` included: serde reads a `null` into an `Option` as `None`,
/// the same as an absent key, where transformers' config classes tell them apart (a
/// `sliding_window` or soft-cap of `null` is none; an absent one the class's default).
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The `scale_invariant` block of config.json.
#[derive(Debug, Deserialize, Default)]
pub struct RawScaleInvariant {
    pub tau: Option<f64>,
}

/// The `logn` block of config.json.
#[derive(Debug, Deserialize, Default)]
pub struct RawLogn {
    pub scale: Option<f64>,
}

/// The `affine_scaled` block of config.json.
#[derive(Debug, Deserialize, Default)]
pub struct RawAffine {
    pub activation: Option<String>,
    pub beta_length: Option<String>,
    pub momentum: Option<f64>,
}

/// A config that cannot be read, naming the field at fault (e.g. "invalid config.json:
/// field `hidden_size`: invalid type: string \"64\", expected usize at line 1 column 205").
pub(crate) fn field_error(
    path: &Path,
    what: &str,
    error: serde_path_to_error::Error<serde_json::Error>,
) -> Error {
    let field = error.path().to_string();
    let inner = error.into_inner();
    match field.as_str() {
        "." => Error::invalid(path, what, inner).about(InputKind::Checkpoint),
        _ => Error::invalid(path, format!("{what}: field `{field}`"), inner)
            .about(InputKind::Checkpoint),
    }
}

/// `obj[key]` as a number: `None` when absent or null, an error naming `{object}.{key}`
/// for another type (`object`: the key `obj` is read from, `rope_parameters`).
pub(crate) fn float_field(
    obj: &Value,
    object: &str,
    key: &str,
    path: &Path,
) -> Result<Option<f64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            let key = format!("{object}.{key}");
            Error::checkpoint_problem(path, CheckpointProblem::wrong_type(key, "a number", v))
        }),
    }
}

/// `key`'s value `value` as a positive integer: `None` when null, `default` when absent
/// (the config class's), an error naming the key for anything else.
pub(crate) fn positive_or_null(
    value: Option<&Value>,
    key: &str,
    default: Option<usize>,
    path: &Path,
) -> Result<Option<usize>> {
    match value {
        None => Ok(default),
        Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(size) if size >= 1 => Ok(Some(size as usize)),
            _ => Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range(key, v, "a positive integer or null"),
            )),
        },
    }
}

/// `value` when it is a finite number > 0, else an error naming `key`.
pub(crate) fn positive(value: f64, key: &str, path: &Path) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range(key, value, "a finite number > 0"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use asa_core::checkpoint_problem::CheckpointProblem;
    use std::path::Path;

    use serde::Deserialize;

    use super::RawConfig;

    /// A family's own keys, as one declares them in its file.
    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct OwnKeys {
        logit_scale: Option<f64>,
    }

    #[test]
    fn a_family_reads_its_own_keys_from_the_kept_json() {
        let path = Path::new("config.json");
        let parse = |text: &str| RawConfig::parse(text, path, "invalid config.json").unwrap();
        let raw = parse(r#"{"model_type": "x", "logit_scale": 0.5}"#);
        let own: OwnKeys = raw.family_keys(path).unwrap();
        assert_eq!(own.logit_scale, Some(0.5));
        let from_value =
            RawConfig::from_value(raw.json.clone(), path, "invalid config.json").unwrap();
        let own: OwnKeys = from_value.family_keys(path).unwrap();
        assert_eq!(own.logit_scale, Some(0.5));
        // absent, or no JSON kept: the struct's defaults
        let own: OwnKeys = parse("{}").family_keys(path).unwrap();
        assert_eq!(own.logit_scale, None);
        let own: OwnKeys = RawConfig::default().family_keys(path).unwrap();
        assert_eq!(own.logit_scale, None);
        let err = parse(r#"{"logit_scale": "big"}"#)
            .family_keys::<OwnKeys>(path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.json") && err.contains("field `logit_scale`"),
            "{err}"
        );
    }

    #[test]
    fn a_family_key_of_the_wrong_type_is_refused_by_name_whatever_rule_reads_it() {
        use crate::config::ModelConfig;
        let sizes = r#""hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 64"#;
        // read by rules with no path for errors (layout, the dense MLP's size, the
        // activation) and by rules with one: each refused before resolution goes on
        for (family, key) in [
            ("gpt_neox", r#""use_parallel_residual": "yes""#),
            ("deepseek_v3", r#""rope_interleave": 3"#),
            ("llama4_text", r#""intermediate_size_mlp": -1"#),
            ("gpt2", r#""activation_function": 5"#),
            ("gemma3_text", r#""rope_local_base_freq": "high""#),
            ("gemma2", r#""query_pre_attn_scalar": "big""#),
            ("gpt_oss", r#""swiglu_limit": "x""#),
            ("qwen3_moe", r#""decoder_sparse_step": "2""#),
            ("qwen3_next", r#""mlp_only_layers": 1"#),
            // Gemma 3 reads the Gemma classes' keys too
            ("gemma3_text", r#""query_pre_attn_scalar": "big""#),
            ("cohere2", r#""logit_scale": [1]"#),
        ] {
            let json = format!(r#"{{"model_type": "{family}", {sizes}, {key}}}"#);
            let err = ModelConfig::from_json(&json, Path::new("config.json"))
                .unwrap_err()
                .to_string();
            let name = key.split('"').nth(1).unwrap();
            assert!(err.contains(&format!("field `{name}`")), "{family}: {err}");
        }
        // a number or null by its rule (null, no chunks, is apart from absent)
        let json =
            format!(r#"{{"model_type": "llama4_text", {sizes}, "attention_chunk_size": "x"}}"#);
        let err = ModelConfig::from_json(&json, Path::new("config.json")).unwrap_err();
        assert_eq!(
            err.problem(),
            Some(&CheckpointProblem::out_of_range(
                "attention_chunk_size",
                "\"x\"",
                "a positive integer or null"
            ))
        );
    }
}
