//! `config.json` in two stages: a serde mirror of what checkpoints write ([`RawConfig`],
//! every field optional) resolved into a [`ModelConfig`] with no optional fields, where
//! every unsupported setting is an error naming the file and the value.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::attention::{Activation, AffineConfig, BetaLength, VariantKind};
use crate::error::{Error, Result};

/// Architectures the loader implements (`model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama family (SmolLM, TinyLlama, Llama 2/3), incl. GQA and llama3 RoPE.
    Llama,
    /// Qwen2: q/k/v biases.
    Qwen2,
}

impl Architecture {
    /// `model_type` values accepted, for error messages.
    pub const SUPPORTED: &'static str = "llama, qwen2";

    fn parse(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Architecture::Llama),
            "qwen2" => Some(Architecture::Qwen2),
            _ => None,
        }
    }

    /// The `model_type` string.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
        }
    }
}

/// How rotary frequencies are derived from `rope_theta`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "rope_type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Plain RoPE: inv_freq_k = theta^(-2k/d).
    Default,
    /// Llama-3 frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

/// Resolved rotary-embedding settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RopeConfig {
    /// Base of the frequencies.
    pub theta: f64,
    /// Frequency scaling rule.
    pub scaling: RopeScaling,
    /// HF `partial_rotary_factor`: the first `fraction * head_dim` dimensions rotate.
    pub partial_rotary_factor: f64,
}

/// A config.json resolved into the values the forward pass needs (no options left).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// Biases on q, k, v (Qwen2; Llama with `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on o_proj (Llama with `attention_bias`).
    pub o_bias: bool,
    /// Biases on the MLP projections (Llama `mlp_bias`).
    pub mlp_bias: bool,
    pub rope: RopeConfig,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// The variant named in config.json (`attention_variant`), if any; detection from the
    /// weights fills it in otherwise (see [`crate::model::detect_variant`]).
    pub declared_variant: Option<VariantKind>,
    /// Affine-Scaled settings (defaults when the block is absent).
    pub affine: AffineConfig,
}

/// Serde mirror of config.json: everything optional, unknown fields ignored.
#[derive(Debug, Deserialize, Default)]
pub struct RawConfig {
    pub model_type: Option<String>,
    pub hidden_size: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub vocab_size: Option<usize>,
    pub rms_norm_eps: Option<f64>,
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
    pub sliding_window: Option<Value>,
    pub layer_types: Option<Vec<String>>,
    pub hidden_act: Option<String>,
    pub attention_variant: Option<String>,
    pub affine_scaled: Option<RawAffine>,
}

/// The `affine_scaled` block of config.json.
#[derive(Debug, Deserialize, Default)]
pub struct RawAffine {
    pub activation: Option<String>,
    pub beta_length: Option<String>,
    pub momentum: Option<f64>,
}

impl ModelConfig {
    /// Reads and resolves `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::input(&path, "missing config.json"),
            _ => Error::io(&path, e),
        })?;
        let raw: RawConfig = serde_json::from_str(&text)
            .map_err(|e| Error::input(&path, format!("invalid config.json: {e}")))?;
        raw.resolve(&path)
    }
}

fn required<T>(value: Option<T>, field: &str, path: &Path) -> Result<T> {
    value.ok_or_else(|| Error::input(path, format!("missing field `{field}`")))
}

fn token_id(value: &Option<Value>) -> Option<u32> {
    match value {
        Some(Value::Number(n)) => n.as_u64().map(|v| v as u32),
        Some(Value::Array(items)) => items.first().and_then(|v| v.as_u64()).map(|v| v as u32),
        _ => None,
    }
}

fn float_field(obj: &Value, key: &str) -> Option<f64> {
    obj.get(key).and_then(Value::as_f64)
}

impl RawConfig {
    /// Resolves the mirror; `path` names config.json in errors.
    pub fn resolve(self, path: &Path) -> Result<ModelConfig> {
        let model_type = required(self.model_type.clone(), "model_type", path)?;
        let architecture = Architecture::parse(&model_type).ok_or_else(|| {
            Error::input(
                path,
                format!(
                    "unknown model_type `{model_type}` (supported: {})",
                    Architecture::SUPPORTED
                ),
            )
        })?;
        let hidden_size = required(self.hidden_size, "hidden_size", path)?;
        let num_heads = required(self.num_attention_heads, "num_attention_heads", path)?;
        let num_kv_heads = self.num_key_value_heads.unwrap_or(num_heads);
        if num_heads == 0 || num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(Error::input(
                path,
                format!("num_attention_heads {num_heads} is not a multiple of num_key_value_heads {num_kv_heads}"),
            ));
        }
        let head_dim = match self.head_dim {
            Some(d) => d,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(Error::input(
                    path,
                    format!("hidden_size {hidden_size} is not divisible by num_attention_heads {num_heads} and head_dim is not given"),
                ))
            }
        };
        if let Some(act) = &self.hidden_act {
            if act != "silu" {
                return Err(Error::input(
                    path,
                    format!("unsupported hidden_act `{act}` (supported: silu)"),
                ));
            }
        }
        if self.use_sliding_window == Some(true) {
            return Err(Error::input(
                path,
                "sliding-window attention (use_sliding_window: true) is not implemented",
            ));
        }
        if let Some(types) = &self.layer_types {
            if let Some(other) = types.iter().find(|t| t.as_str() != "full_attention") {
                return Err(Error::input(
                    path,
                    format!("layer type `{other}` is not implemented (only full_attention)"),
                ));
            }
        }
        let attention_bias = self.attention_bias.unwrap_or(false);
        let (qkv_bias, o_bias) = match architecture {
            Architecture::Llama => (attention_bias, attention_bias),
            Architecture::Qwen2 => (true, false),
        };
        let rope = self.resolve_rope(path)?;
        let declared_variant = match &self.attention_variant {
            None => None,
            Some(name) => Some(VariantKind::parse(name).ok_or_else(|| {
                Error::input(
                    path,
                    format!(
                        "unknown attention_variant `{name}` (supported: {})",
                        VariantKind::SUPPORTED
                    ),
                )
            })?),
        };
        let affine = resolve_affine(self.affine_scaled.as_ref(), path)?;
        Ok(ModelConfig {
            architecture,
            hidden_size,
            intermediate_size: required(self.intermediate_size, "intermediate_size", path)?,
            num_layers: required(self.num_hidden_layers, "num_hidden_layers", path)?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size: required(self.vocab_size, "vocab_size", path)?,
            rms_norm_eps: self.rms_norm_eps.unwrap_or(1e-6),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(2048),
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            qkv_bias,
            o_bias,
            mlp_bias: self.mlp_bias.unwrap_or(false),
            rope,
            bos_token_id: token_id(&self.bos_token_id),
            eos_token_id: token_id(&self.eos_token_id),
            declared_variant,
            affine,
        })
    }

    /// RoPE from transformers 5 `rope_parameters` or older `rope_theta` + `rope_scaling`.
    fn resolve_rope(&self, path: &Path) -> Result<RopeConfig> {
        let params = self.rope_parameters.as_ref().or(self.rope_scaling.as_ref());
        let params = params.filter(|v| !v.is_null());
        let theta = params
            .and_then(|p| float_field(p, "rope_theta"))
            .or(self.rope_theta)
            .unwrap_or(10000.0);
        let partial_rotary_factor = params
            .and_then(|p| float_field(p, "partial_rotary_factor"))
            .or(self.partial_rotary_factor)
            .unwrap_or(1.0);
        if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
            return Err(Error::input(
                path,
                format!("partial_rotary_factor {partial_rotary_factor} must be in (0, 1]"),
            ));
        }
        let rope_type = params
            .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let scaling = match rope_type {
            "default" => RopeScaling::Default,
            "llama3" => {
                let p = params.expect("rope_type came from params");
                let get = |key: &str| {
                    float_field(p, key).ok_or_else(|| {
                        Error::input(path, format!("llama3 rope scaling is missing `{key}`"))
                    })
                };
                RopeScaling::Llama3 {
                    factor: get("factor")?,
                    low_freq_factor: get("low_freq_factor")?,
                    high_freq_factor: get("high_freq_factor")?,
                    original_max_position_embeddings: get("original_max_position_embeddings")?,
                }
            }
            other => {
                return Err(Error::input(
                    path,
                    format!("rope_type `{other}` is not implemented (supported: default, llama3)"),
                ))
            }
        };
        Ok(RopeConfig {
            theta,
            scaling,
            partial_rotary_factor,
        })
    }
}

fn resolve_affine(raw: Option<&RawAffine>, path: &Path) -> Result<AffineConfig> {
    let mut cfg = AffineConfig::default();
    let Some(raw) = raw else { return Ok(cfg) };
    if let Some(name) = &raw.activation {
        cfg.activation = match name.as_str() {
            "linear_clipping" => Activation::LinearClipping,
            "sigmoid" => Activation::Sigmoid,
            other => {
                return Err(Error::input(
                    path,
                    format!("unknown affine_scaled.activation `{other}` (supported: linear_clipping, sigmoid)"),
                ))
            }
        };
    }
    if let Some(name) = &raw.beta_length {
        cfg.beta_length =
            match name.as_str() {
                "full" => BetaLength::Full,
                "visible" => BetaLength::Visible,
                other => return Err(Error::input(
                    path,
                    format!(
                        "unknown affine_scaled.beta_length `{other}` (supported: full, visible)"
                    ),
                )),
            };
    }
    if let Some(m) = raw.momentum {
        cfg.momentum = m;
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(json: &str) -> Result<ModelConfig> {
        let raw: RawConfig = serde_json::from_str(json).unwrap();
        raw.resolve(Path::new("config.json"))
    }

    const BASE: &str = r#""model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100"#;

    #[test]
    fn legacy_and_v5_rope_fields_resolve_alike() {
        let legacy = resolve(&format!(
            r#"{{{BASE}, "rope_theta": 500000.0, "rope_scaling": {{"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
        ))
        .unwrap();
        let v5 = resolve(&format!(
            r#"{{{BASE}, "rope_parameters": {{"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
        ))
        .unwrap();
        assert_eq!(legacy.rope, v5.rope);
        assert_eq!(v5.rope.theta, 500000.0);
        assert_eq!(v5.head_dim, 16); // 64 / 4
    }

    #[test]
    fn unimplemented_rope_types_are_errors() {
        for kind in ["yarn", "linear", "dynamic", "longrope"] {
            let err = resolve(&format!(
                r#"{{{BASE}, "rope_scaling": {{"rope_type": "{kind}", "factor": 2.0}}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains(kind) && err.contains("config.json"), "{err}");
        }
    }

    #[test]
    fn unknown_model_type_lists_supported() {
        let err = resolve(r#"{"model_type": "gpt2"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gpt2") && err.contains("llama, qwen2"),
            "{err}"
        );
    }

    #[test]
    fn sliding_window_is_an_error() {
        let err = resolve(&format!(r#"{{{BASE}, "use_sliding_window": true}}"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sliding"), "{err}");
    }
}
