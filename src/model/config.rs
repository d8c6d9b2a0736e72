//! `config.json` in two stages: a serde mirror of what checkpoints write ([`RawConfig`],
//! every field optional) resolved into a [`ModelConfig`] with no optional fields, where
//! every unsupported setting is an error naming the file and the value.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::experts::{Experts, RawExperts};
use super::layout::Layout;
use super::sliding_window::{RawWindow, SlidingWindow};
use crate::attention::{Activation, AffineConfig, BetaLength, ScaleInvariantConfig, VariantKind};
use crate::error::{Error, Result};

/// Architectures the loader implements (`model_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama family (SmolLM, TinyLlama, Llama 2/3), incl. GQA and llama3 RoPE.
    Llama,
    /// Qwen2: q/k/v biases.
    Qwen2,
    /// Qwen3 dense: per-head q_norm / k_norm before RoPE, no q/k/v bias, `head_dim` from config.
    Qwen3,
    /// Mistral: the Llama layout with a sliding window on every layer (`sliding_window`).
    Mistral,
    /// Mixtral: the Mistral layout with a mixture-of-experts MLP (`block_sparse_moe`).
    Mixtral,
    /// Qwen3-MoE: Qwen3's attention with a mixture-of-experts MLP (`mlp.experts`) on the
    /// layers `decoder_sparse_step` and `mlp_only_layers` pick.
    #[serde(rename = "qwen3_moe")]
    Qwen3Moe,
    /// Gemma 2: RMSNorm scaled by (1 + w) before and after attention and MLP, a tanh-GELU
    /// GeGLU, embeddings times sqrt(hidden), q.k scaled by `query_pre_attn_scalar`^-1/2,
    /// attention and final logits soft-capped, sliding windows on alternate layers.
    Gemma2,
    /// Gemma 3 (text): Gemma 2's layout with per-head QK-norm scaled by (1 + w), no
    /// soft-caps by default, five sliding layers to a global one, and separate RoPE
    /// parameters for the sliding and the global layers.
    #[serde(rename = "gemma3_text")]
    Gemma3Text,
    /// GPT-2: learned absolute positions (`wpe`), LayerNorm with biases, Conv1D weights
    /// (`[in, out]`), a fused `c_attn`, the tanh-GELU MLP, tied embeddings.
    Gpt2,
    /// Phi-3: the Llama layout with fused `qkv_proj` and `gate_up_proj`, partial rotary, a
    /// sliding window when `sliding_window` is set.
    Phi3,
    /// OLMo 2: the Llama layout with norms after attention and MLP (none before) and
    /// QK-norm over the whole q and k projections.
    Olmo2,
    /// GPT-OSS: learned attention sinks (`self_attn.sinks`), biases on q/k/v/o, sliding
    /// windows on alternate layers, YaRN RoPE, and a mixture of clamped-SwiGLU experts with
    /// biases (stacked, or MXFP4) routed by softmax over the top-k logits.
    #[serde(rename = "gpt_oss")]
    GptOss,
    /// GPT-NeoX (Pythia): LayerNorm with biases, a fused per-head q/k/v projection, partial
    /// rotary (`rotary_pct`), a parallel residual, a GELU MLP, biases everywhere.
    GptNeox,
}

impl Architecture {
    /// `model_type` values accepted, for error messages.
    pub const SUPPORTED: &'static str =
        "gemma2, gemma3_text, gpt2, gpt_neox, gpt_oss, llama, mistral, mixtral, olmo2, phi3, qwen2, qwen3, qwen3_moe";

    fn parse(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Architecture::Llama),
            "qwen2" => Some(Architecture::Qwen2),
            "qwen3" => Some(Architecture::Qwen3),
            "mistral" => Some(Architecture::Mistral),
            "gpt_neox" => Some(Architecture::GptNeox),
            "olmo2" => Some(Architecture::Olmo2),
            "phi3" => Some(Architecture::Phi3),
            "gpt2" => Some(Architecture::Gpt2),
            "mixtral" => Some(Architecture::Mixtral),
            "qwen3_moe" => Some(Architecture::Qwen3Moe),
            "gemma2" => Some(Architecture::Gemma2),
            "gemma3_text" => Some(Architecture::Gemma3Text),
            "gpt_oss" => Some(Architecture::GptOss),
            _ => None,
        }
    }

    /// The `model_type` string.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Mistral => "mistral",
            Architecture::GptNeox => "gpt_neox",
            Architecture::Olmo2 => "olmo2",
            Architecture::Phi3 => "phi3",
            Architecture::Gpt2 => "gpt2",
            Architecture::Mixtral => "mixtral",
            Architecture::Qwen3Moe => "qwen3_moe",
            Architecture::Gemma2 => "gemma2",
            Architecture::Gemma3Text => "gemma3_text",
            Architecture::GptOss => "gpt_oss",
        }
    }
}

/// How p-RoPE spaces the frequencies of its rotating pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PRopeSpacing {
    /// Barbero et al. 2024: pair k keeps RoPE's own rope_theta^(-2k/d).
    Rope,
    /// The scale-invariant paper's modded-nanogpt code: rope_theta^(-k/(n-1)), from 1 down
    /// to 1/rope_theta (1 when n = 1).
    Log,
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
    /// Linear position interpolation: every inv_freq divided by `factor`.
    Linear { factor: f64 },
    /// Dynamic NTK: past `max_position_embeddings` tokens the base grows with the run's
    /// length T, theta' = theta (factor T / max - (factor - 1))^(d / (d - 2)).
    Dynamic {
        factor: f64,
        max_position_embeddings: f64,
    },
    /// YaRN: interpolated and extrapolated frequencies blended by a linear ramp between the
    /// correction dimensions of `beta_fast` and `beta_slow`, and cos/sin scaled by
    /// `attention_factor` (resolved from `mscale` / `mscale_all_dim` / `factor` as
    /// transformers does).
    Yarn {
        factor: f64,
        attention_factor: f64,
        beta_fast: f64,
        beta_slow: f64,
        original_max_position_embeddings: f64,
        truncate: bool,
    },
    /// LongRoPE (Phi-3 long-context): inv_freq_k = theta^(-2k/d) / f_k with f the
    /// `long_factor` list when the run is longer than `original_max_position_embeddings`,
    /// else `short_factor`; cos/sin times `attention_factor` (default
    /// sqrt(1 + ln(factor) / ln(original))).
    LongRope {
        long_factor: Vec<f64>,
        short_factor: Vec<f64>,
        original_max_position_embeddings: f64,
        attention_factor: f64,
    },
    /// p-RoPE (`rope_type: p_rope`): the first `rotating_pairs` = floor(p * d / 2) frequency
    /// pairs of each head rotate, the other d/2 - n have frequency 0. Not HF's
    /// `partial_rotary_factor` (which drops trailing dimensions, not frequencies).
    PRope {
        p: f64,
        spacing: PRopeSpacing,
        /// n = floor(p * head_dim / 2) >= 1.
        rotating_pairs: usize,
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
    /// Per-head RMSNorm of queries and keys before RoPE is required (Qwen3). Other
    /// architectures use it when the weights have `self_attn.q_norm.weight`.
    pub qk_norm: bool,
    /// scale_invariant settings (tau 10 when the block is absent).
    pub scale_invariant: ScaleInvariantConfig,
    /// logn: s_h for every head from `"logn": {"scale": s}`; a stored
    /// `self_attn.logn_scale` [heads] takes precedence.
    pub logn_scale: Option<f64>,
    /// Sliding-window attention, when some layer uses it.
    pub sliding_window: Option<SlidingWindow>,
    /// The norm, MLP, residual wiring and q/k/v projections of the architecture.
    pub layout: Layout,
    /// A mixture-of-experts MLP (Mixtral, Qwen3-MoE): its experts, routing and layers.
    pub experts: Option<Experts>,
    /// q.k is scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2 (Gemma).
    pub query_pre_attn_scalar: Option<f64>,
    /// Attention logits soft-capped at cap tanh(s / cap) (Gemma 2).
    pub attn_logit_softcap: Option<f64>,
    /// Next-token logits soft-capped likewise (Gemma 2).
    pub final_logit_softcap: Option<f64>,
    /// Embeddings multiplied by this (Gemma: sqrt(hidden_size)).
    pub embedding_scale: Option<f64>,
    /// The rotary settings of the sliding-window layers where they differ from `rope`
    /// (Gemma 3's `rope_parameters.sliding_attention`; `rope` is then the global layers').
    pub rope_local: Option<RopeConfig>,
    /// The text model of a multimodal checkpoint (`super::multimodal`): its vision tower is
    /// not read.
    pub multimodal: bool,
}

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
    pub sliding_window: Option<Value>,
    pub max_window_layers: Option<usize>,
    /// The pretraining length outside the rope parameters (Phi-3), preferred by YaRN.
    pub original_max_position_embeddings: Option<usize>,
    /// Gemma's attention scale, soft-caps (null: none) and MLP activation.
    pub query_pre_attn_scalar: Option<f64>,
    pub attn_logit_softcapping: Option<Value>,
    pub final_logit_softcapping: Option<Value>,
    pub hidden_activation: Option<String>,
    /// Gemma's bidirectional (non-causal) attention, which the kernels do not compute.
    pub use_bidirectional_attention: Option<bool>,
    /// How the weights are quantized (only GPT-OSS's MXFP4 experts are read).
    pub quantization_config: Option<Value>,
    /// Gemma 3: one global layer every `sliding_window_pattern` layers, and the legacy
    /// theta of its sliding layers.
    pub sliding_window_pattern: Option<usize>,
    pub rope_local_base_freq: Option<f64>,
    pub layer_norm_eps: Option<f64>,
    pub num_local_experts: Option<usize>,
    pub num_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub swiglu_alpha: Option<f64>,
    pub swiglu_limit: Option<f64>,
    pub norm_topk_prob: Option<bool>,
    pub moe_intermediate_size: Option<usize>,
    pub decoder_sparse_step: Option<usize>,
    pub mlp_only_layers: Option<Vec<usize>>,
    /// GPT-2's names of the norm epsilon and the MLP activation, and its attention options.
    pub layer_norm_epsilon: Option<f64>,
    pub activation_function: Option<String>,
    pub scale_attn_weights: Option<bool>,
    pub scale_attn_by_inverse_layer_idx: Option<bool>,
    pub reorder_and_upcast_attn: Option<bool>,
    pub use_parallel_residual: Option<bool>,
    /// GPT-NeoX's legacy names of `partial_rotary_factor` and `rope_theta`.
    pub rotary_pct: Option<f64>,
    pub rotary_emb_base: Option<f64>,
    pub layer_types: Option<Vec<String>>,
    pub hidden_act: Option<String>,
    pub attention_variant: Option<String>,
    pub affine_scaled: Option<RawAffine>,
    pub scale_invariant: Option<RawScaleInvariant>,
    pub logn: Option<RawLogn>,
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

impl ModelConfig {
    /// The factor of q.k: query_pre_attn_scalar^-1/2 (Gemma) or head_dim^-1/2.
    pub fn query_scale(&self) -> f64 {
        1.0 / self
            .query_pre_attn_scalar
            .unwrap_or(self.head_dim as f64)
            .sqrt()
    }

    /// Reads and resolves `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::input(&path, "missing config.json"),
            _ => Error::io(&path, e),
        })?;
        let raw: RawConfig =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text))
                .map_err(|e| field_error(&path, "invalid config.json", e))?;
        if raw.model_type.as_deref() != Some("gemma3") {
            return raw.resolve(&path);
        }
        // a multimodal checkpoint: its text model
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| Error::invalid(&path, "invalid config.json", e))?;
        let text = super::multimodal::text_config(&value, &path)?.unwrap_or(value);
        let raw: RawConfig = serde_path_to_error::deserialize(text)
            .map_err(|e| field_error(&path, "invalid config.json text_config", e))?;
        Ok(ModelConfig {
            multimodal: true,
            ..raw.resolve(&path)?
        })
    }

    /// The keys each query of layer `layer` (0-based) sees.
    pub fn key_window(&self, layer: usize) -> crate::probe::KeyWindow {
        self.sliding_window
            .as_ref()
            .map_or(crate::probe::KeyWindow::CAUSAL, |w| w.of_layer(layer))
    }
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
        "." => Error::invalid(path, what, inner),
        _ => Error::invalid(path, format!("{what}: field `{field}`"), inner),
    }
}

fn required<T>(value: Option<T>, field: &str, path: &Path) -> Result<T> {
    value.ok_or_else(|| Error::input(path, format!("missing field `{field}`")))
}

/// A special token id field: a non-negative integer, a list of them (the first counts), or
/// null / absent.
fn token_id(value: &Option<Value>, field: &str, path: &Path) -> Result<Option<u32>> {
    let one = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => match items.first() {
            None => return Ok(None),
            Some(first) => first,
        },
        Some(v) => v,
    };
    one.as_u64()
        .and_then(|id| u32::try_from(id).ok())
        .map(Some)
        .ok_or_else(|| {
            Error::input(
                path,
                format!("{field} must be a token id (an integer from 0), got {one}"),
            )
        })
}

/// `obj[key]` as a number: `None` when absent or null, an error for another type.
pub(crate) fn float_field(obj: &Value, key: &str, path: &Path) -> Result<Option<f64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| Error::input(path, format!("`{key}` must be a number, got {v}"))),
    }
}

/// `value` when it is a finite number > 0, else an error naming `what`.
pub(crate) fn positive(value: f64, what: &str, path: &Path) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(Error::input(
            path,
            format!("{what} {value} must be a finite number > 0"),
        ))
    }
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
        let (num_heads, num_kv_heads, head_dim) = self.heads(path, architecture, hidden_size)?;
        self.check_implemented(path, architecture)?;
        let attention_bias = self.attention_bias.unwrap_or(false);
        let (qkv_bias, o_bias) = match architecture {
            Architecture::Llama
            | Architecture::Qwen3
            | Architecture::Qwen3Moe
            | Architecture::Gemma2
            | Architecture::Gemma3Text
            | Architecture::Mistral
            | Architecture::Mixtral
            | Architecture::Olmo2 => (attention_bias, attention_bias),
            // GPTNeoXConfig's and GptOssConfig's attention_bias default to true
            Architecture::GptNeox | Architecture::GptOss => {
                let bias = self.attention_bias.unwrap_or(true);
                (bias, bias)
            }
            Architecture::Qwen2 => (true, false),
            // Phi-3's projections have no biases
            Architecture::Phi3 => (false, false),
            Architecture::Gpt2 => (true, true),
        };
        let vocab_size = required(self.vocab_size, "vocab_size", path)?;
        // GPT2Config: n_inner null means 4 * n_embd
        let intermediate_size = match architecture {
            Architecture::Gpt2 => self.intermediate_size.unwrap_or(4 * hidden_size),
            _ => required(self.intermediate_size, "intermediate_size", path)?,
        };
        let num_layers = required(self.num_hidden_layers, "num_hidden_layers", path)?;
        for (field, size) in [
            ("hidden_size", hidden_size),
            ("intermediate_size", intermediate_size),
            ("num_hidden_layers", num_layers),
            ("vocab_size", vocab_size),
            ("head_dim", head_dim),
        ] {
            if size == 0 {
                return Err(Error::input(path, format!("{field} must be at least 1")));
            }
        }
        let (rope, rope_local) = match architecture {
            Architecture::Gemma3Text => {
                let (global, local) = self.gemma3_ropes(path, head_dim)?;
                (global, Some(local))
            }
            Architecture::GptOss => (self.gpt_oss_rope(path, head_dim)?, None),
            _ => (self.resolve_rope(path, head_dim)?, None),
        };
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
        let scale_invariant = resolve_scale_invariant(self.scale_invariant.as_ref(), path)?;
        let logn_scale = match self.logn.as_ref().and_then(|l| l.scale) {
            Some(s) if !s.is_finite() => {
                return Err(Error::input(
                    path,
                    format!("logn.scale {s} must be a finite number"),
                ))
            }
            other => other,
        };
        let rms_norm_eps = match architecture {
            Architecture::GptNeox => self.layer_norm_eps.unwrap_or(1e-5),
            Architecture::Gpt2 => self.layer_norm_epsilon.unwrap_or(1e-5),
            // Olmo2Config's and GptOssConfig's default
            Architecture::Olmo2 | Architecture::GptOss => self.rms_norm_eps.unwrap_or(1e-5),
            _ => self.rms_norm_eps.unwrap_or(1e-6),
        };
        if !(rms_norm_eps.is_finite() && rms_norm_eps >= 0.0) {
            return Err(Error::input(
                path,
                format!("rms_norm_eps {rms_norm_eps} must be a finite number >= 0"),
            ));
        }
        let (bos_token_id, eos_token_id) = self.special_tokens(path, vocab_size)?;
        let sliding_window = super::sliding_window::resolve(
            RawWindow {
                sliding_window: self.sliding_window.as_ref(),
                use_sliding_window: self.use_sliding_window,
                max_window_layers: self.max_window_layers,
                layer_types: self.layer_types.as_deref(),
                sliding_window_pattern: self.sliding_window_pattern,
            },
            architecture,
            num_layers,
            path,
        )?;
        Ok(ModelConfig {
            architecture,
            hidden_size,
            intermediate_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            rms_norm_eps,
            max_position_embeddings: self.max_position_embeddings.unwrap_or(match architecture {
                Architecture::GptOss => 131_072,
                _ => 2048,
            }),
            // GPT2Config ties them unless told otherwise
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(matches!(
                architecture,
                Architecture::Gpt2 | Architecture::Gemma2 | Architecture::Gemma3Text
            )),
            qkv_bias,
            o_bias,
            mlp_bias: matches!(architecture, Architecture::GptNeox | Architecture::Gpt2)
                || self.mlp_bias.unwrap_or(false),
            rope,
            bos_token_id,
            eos_token_id,
            declared_variant,
            affine,
            qk_norm: matches!(
                architecture,
                Architecture::Qwen3
                    | Architecture::Qwen3Moe
                    | Architecture::Olmo2
                    | Architecture::Gemma3Text
            ),
            scale_invariant,
            logn_scale,
            sliding_window,
            layout: Layout::of(architecture, self.use_parallel_residual.unwrap_or(true)),
            experts: self.experts(architecture, (num_layers, intermediate_size), path)?,
            query_pre_attn_scalar: match architecture {
                Architecture::Gemma2 | Architecture::Gemma3Text => Some(positive(
                    self.query_pre_attn_scalar.unwrap_or(256.0),
                    "query_pre_attn_scalar",
                    path,
                )?),
                _ => None,
            },
            attn_logit_softcap: self.softcap(
                architecture,
                (
                    "attn_logit_softcapping",
                    self.attn_logit_softcapping.as_ref(),
                    50.0,
                ),
                path,
            )?,
            final_logit_softcap: self.softcap(
                architecture,
                (
                    "final_logit_softcapping",
                    self.final_logit_softcapping.as_ref(),
                    30.0,
                ),
                path,
            )?,
            embedding_scale: matches!(
                architecture,
                Architecture::Gemma2 | Architecture::Gemma3Text
            )
            .then(|| (hidden_size as f64).sqrt()),
            rope_local,
            multimodal: false,
        })
    }

    /// Gemma 3's RoPE: `rope_parameters` keyed by layer type (`full_attention`,
    /// `sliding_attention`), or the legacy `rope_theta` (global, default 1e6),
    /// `rope_local_base_freq` (sliding, default 1e4) and `rope_scaling` (global only), as
    /// Gemma3TextConfig reads them. Returns (global, sliding).
    fn gemma3_ropes(&self, path: &Path, head_dim: usize) -> Result<(RopeConfig, RopeConfig)> {
        let nested = |key: &str| {
            self.rope_parameters
                .as_ref()
                .and_then(|p| p.get(key))
                .filter(|v| !v.is_null())
                .cloned()
        };
        let one = |params: Option<Value>, legacy: Option<&Value>, theta: f64| {
            let mut params = params.unwrap_or_else(|| serde_json::json!({"rope_type": "default"}));
            if let Some(Value::Object(legacy)) = legacy {
                for (k, v) in legacy {
                    params[k] = v.clone();
                }
            }
            if params.get("rope_theta").is_none_or(Value::is_null) {
                params["rope_theta"] = serde_json::json!(theta);
            }
            RawConfig {
                rope_parameters: Some(params),
                max_position_embeddings: self.max_position_embeddings,
                original_max_position_embeddings: self.original_max_position_embeddings,
                partial_rotary_factor: self.partial_rotary_factor,
                ..RawConfig::default()
            }
            .resolve_rope(path, head_dim)
        };
        let global = one(
            nested("full_attention"),
            self.rope_scaling.as_ref(),
            self.rope_theta.unwrap_or(1_000_000.0),
        )?;
        let local = one(
            nested("sliding_attention"),
            None,
            self.rope_local_base_freq.unwrap_or(10_000.0),
        )?;
        Ok((global, local))
    }

    /// GPT-OSS's RoPE: as given, else GptOssConfig's defaults (theta 150000; YaRN factor 32
    /// over 4096 positions, beta_fast 32, beta_slow 1, not truncated).
    fn gpt_oss_rope(&self, path: &Path, head_dim: usize) -> Result<RopeConfig> {
        let given = [&self.rope_parameters, &self.rope_scaling]
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
        RawConfig {
            rope_parameters: match given {
                true => self.rope_parameters.clone(),
                false => Some(default),
            },
            rope_scaling: self.rope_scaling.clone(),
            rope_theta: Some(self.rope_theta.unwrap_or(150_000.0)),
            max_position_embeddings: self.max_position_embeddings,
            original_max_position_embeddings: self.original_max_position_embeddings,
            partial_rotary_factor: self.partial_rotary_factor,
            ..RawConfig::default()
        }
        .resolve_rope(path, head_dim)
    }

    /// Gemma 2's soft-cap `key`: its default when absent, none when null.
    fn softcap(
        &self,
        architecture: Architecture,
        (key, value, default): (&str, Option<&Value>, f64),
        path: &Path,
    ) -> Result<Option<f64>> {
        if !matches!(
            architecture,
            Architecture::Gemma2 | Architecture::Gemma3Text
        ) {
            return Ok(None);
        }
        match value {
            // Gemma3TextConfig caps nothing by default
            None if architecture == Architecture::Gemma3Text => Ok(None),
            None => Ok(Some(default)),
            Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(cap) => Ok(Some(positive(cap, key, path)?)),
                None => Err(Error::input(
                    path,
                    format!("{key} must be a number or null, got {v}"),
                )),
            },
        }
    }

    /// The experts of a mixture-of-experts architecture (`super::experts`).
    fn experts(
        &self,
        architecture: Architecture,
        (num_layers, intermediate_size): (usize, usize),
        path: &Path,
    ) -> Result<Option<Experts>> {
        let raw = RawExperts {
            num_local_experts: self.num_local_experts,
            num_experts: self.num_experts,
            num_experts_per_tok: self.num_experts_per_tok,
            norm_topk_prob: self.norm_topk_prob,
            moe_intermediate_size: self.moe_intermediate_size,
            decoder_sparse_step: self.decoder_sparse_step,
            mlp_only_layers: self.mlp_only_layers.as_deref(),
            swiglu_alpha: self.swiglu_alpha,
            swiglu_limit: self.swiglu_limit,
        };
        super::experts::resolve(raw, architecture, (num_layers, intermediate_size), path)
    }

    /// Query heads, key/value heads and head dimension, checked against each other.
    fn heads(
        &self,
        path: &Path,
        architecture: Architecture,
        hidden_size: usize,
    ) -> Result<(usize, usize, usize)> {
        let num_heads = required(self.num_attention_heads, "num_attention_heads", path)?;
        // GPTNeoXConfig has neither key/value heads nor head_dim: transformers ignores them
        let neox = architecture == Architecture::GptNeox;
        let num_kv_heads = match neox {
            true => num_heads,
            false => self.num_key_value_heads.unwrap_or(num_heads),
        };
        if num_heads == 0 || num_kv_heads == 0 {
            return Err(Error::input(
                path,
                format!("num_attention_heads {num_heads} and num_key_value_heads {num_kv_heads} must be at least 1"),
            ));
        }
        if num_heads % num_kv_heads != 0 {
            return Err(Error::input(
                path,
                format!("num_attention_heads {num_heads} is not a multiple of num_key_value_heads {num_kv_heads}"),
            ));
        }
        let head_dim = match self.head_dim.filter(|_| !neox) {
            Some(d) => d,
            // transformers' Qwen3Config default (it does not derive it from hidden / heads)
            None if architecture == Architecture::Qwen3 => 128,
            // Gemma2Config's default
            None if matches!(architecture, Architecture::Gemma2 | Architecture::Gemma3Text) => {
                256
            }
            // GptOssConfig's default
            None if architecture == Architecture::GptOss => 64,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(Error::input(
                    path,
                    format!("hidden_size {hidden_size} is not divisible by num_attention_heads {num_heads} and head_dim is not given"),
                ))
            }
        };
        Ok((num_heads, num_kv_heads, head_dim))
    }

    /// Refuses what the loader does not implement (never ignored).
    fn check_implemented(&self, path: &Path, architecture: Architecture) -> Result<()> {
        // the MLP's activation: SwiGLU's silu, GPT-NeoX's exact GELU, GPT-2's tanh GELU
        let (want, given) = match architecture {
            Architecture::GptNeox => ("gelu", self.hidden_act.as_deref()),
            Architecture::Gpt2 => ("gelu_new", self.activation_function.as_deref()),
            Architecture::Gemma2 | Architecture::Gemma3Text => (
                "gelu_pytorch_tanh",
                self.hidden_activation
                    .as_deref()
                    .or(self.hidden_act.as_deref()),
            ),
            _ => ("silu", self.hidden_act.as_deref()),
        };
        if architecture == Architecture::Gpt2 {
            for (key, value, works) in [
                ("scale_attn_weights", self.scale_attn_weights, true),
                (
                    "scale_attn_by_inverse_layer_idx",
                    self.scale_attn_by_inverse_layer_idx,
                    false,
                ),
                (
                    "reorder_and_upcast_attn",
                    self.reorder_and_upcast_attn,
                    false,
                ),
            ] {
                if value.is_some_and(|v| v != works) {
                    return Err(Error::input(
                        path,
                        format!("{key}: {} is not implemented (only {works})", !works),
                    ));
                }
            }
        }
        if let Some(quant) = &self.quantization_config {
            let method = quant.get("quant_method").and_then(Value::as_str);
            if !(method == Some("mxfp4") && architecture == Architecture::GptOss) {
                return Err(Error::input(
                    path,
                    format!(
                        "quantization_config with quant_method {} is not implemented (supported: mxfp4 experts of gpt_oss; or a GGUF file)",
                        method.map_or_else(|| "missing".to_string(), |m| format!("`{m}`"))
                    ),
                ));
            }
        }
        if self.use_bidirectional_attention == Some(true) {
            return Err(Error::input(
                path,
                "use_bidirectional_attention: true is not implemented (attention is causal)",
            ));
        }
        if let Some(act) = given.filter(|a| *a != want) {
            return Err(Error::input(
                path,
                format!(
                    "unsupported hidden_act `{act}` for {} (supported: {want})",
                    architecture.name()
                ),
            ));
        }
        Ok(())
    }

    /// BOS and EOS ids, each inside the vocabulary.
    fn special_tokens(&self, path: &Path, vocab_size: usize) -> Result<(Option<u32>, Option<u32>)> {
        let bos_token_id = token_id(&self.bos_token_id, "bos_token_id", path)?;
        let eos_token_id = token_id(&self.eos_token_id, "eos_token_id", path)?;
        for (field, id) in [
            ("bos_token_id", bos_token_id),
            ("eos_token_id", eos_token_id),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= vocab_size) {
                return Err(Error::input(
                    path,
                    format!("{field} {id} is out of range for vocab_size {vocab_size}"),
                ));
            }
        }
        Ok((bos_token_id, eos_token_id))
    }

    /// RoPE from transformers 5 `rope_parameters` or older `rope_theta` + `rope_scaling`.
    fn resolve_rope(&self, path: &Path, head_dim: usize) -> Result<RopeConfig> {
        // a string or a number here would otherwise be read as "no scaling" without a word
        for (key, value) in [
            ("rope_parameters", &self.rope_parameters),
            ("rope_scaling", &self.rope_scaling),
        ] {
            if let Some(v) = value.as_ref().filter(|v| !v.is_null() && !v.is_object()) {
                return Err(Error::input(
                    path,
                    format!("{key} must be an object (or null), got {v}"),
                ));
            }
        }
        // both given: a key they share must agree (which one transformers would read is a
        // guess otherwise)
        if let (Some(Value::Object(new)), Some(Value::Object(old))) =
            (&self.rope_parameters, &self.rope_scaling)
        {
            if let Some(key) = new
                .keys()
                .find(|k| old.get(*k).is_some_and(|v| v != &new[*k]))
            {
                return Err(Error::input(
                    path,
                    format!("rope_parameters and the legacy rope_scaling disagree on `{key}`; keep one of them"),
                ));
            }
        }
        let params = self.rope_parameters.as_ref().or(self.rope_scaling.as_ref());
        let params = params.filter(|v| !v.is_null());
        let field = |key: &str| -> Result<Option<f64>> {
            params.map_or(Ok(None), |p| float_field(p, key, path))
        };
        let theta = field("rope_theta")?
            .or(self.rope_theta)
            .or(self.rotary_emb_base)
            .unwrap_or(10000.0);
        let theta = positive(theta, "rope_theta", path)?;
        let partial_rotary_factor = field("partial_rotary_factor")?
            .or(self.partial_rotary_factor)
            .or(self.rotary_pct)
            .unwrap_or(1.0);
        if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
            return Err(Error::input(
                path,
                format!("partial_rotary_factor {partial_rotary_factor} must be in (0, 1]"),
            ));
        }
        if super::rope::rotated_dims(head_dim, partial_rotary_factor) == 0 {
            return Err(Error::input(
                path,
                format!("partial_rotary_factor {partial_rotary_factor} of head_dim {head_dim} rotates no dimension pair"),
            ));
        }
        let rope_type = match params.and_then(|p| p.get("rope_type").or_else(|| p.get("type"))) {
            None | Some(Value::Null) => "default",
            Some(Value::String(t)) => t.as_str(),
            Some(other) => {
                return Err(Error::input(
                    path,
                    format!("rope_type must be a string, got {other}"),
                ))
            }
        };
        let scaling = match rope_type {
            "default" => RopeScaling::Default,
            "llama3" => {
                let p = params.expect("rope_type came from params");
                let get = |key: &str| {
                    let value = float_field(p, key, path)?.ok_or_else(|| {
                        Error::input(path, format!("llama3 rope scaling is missing `{key}`"))
                    })?;
                    positive(value, &format!("llama3 rope scaling `{key}`"), path)
                };
                RopeScaling::Llama3 {
                    factor: get("factor")?,
                    low_freq_factor: get("low_freq_factor")?,
                    high_freq_factor: get("high_freq_factor")?,
                    original_max_position_embeddings: get("original_max_position_embeddings")?,
                }
            }
            "p_rope" => {
                let p = params.expect("rope_type came from params");
                resolve_p_rope(p, head_dim, partial_rotary_factor, path)?
            }
            "linear" | "dynamic" | "yarn" | "longrope" => {
                let p = params.expect("rope_type came from params");
                let max = self.max_position_embeddings.unwrap_or(2048) as f64;
                let original = self.original_max_position_embeddings.map(|o| o as f64);
                let pairs = super::rope::rotated_dims(head_dim, partial_rotary_factor) / 2;
                super::rope_scaling::resolve(rope_type, p, (max, original, pairs), path)?
            }
            other => {
                let supported = "default, linear, dynamic, yarn, longrope, llama3, p_rope";
                let message =
                    format!("rope_type `{other}` is not implemented (supported: {supported})");
                return Err(Error::input(path, message));
            }
        };
        Ok(RopeConfig {
            theta,
            scaling,
            partial_rotary_factor,
        })
    }
}

/// p-RoPE's `p` and `spacing` (SPEC section 2), checked: p in (0, 1], n = floor(p d/2) >= 1.
fn resolve_p_rope(
    params: &Value,
    head_dim: usize,
    partial_rotary_factor: f64,
    path: &Path,
) -> Result<RopeScaling> {
    let p = match params.get("p") {
        None => return Err(Error::input(path, "p_rope rope parameters are missing `p`")),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| Error::input(path, format!("p_rope `p` must be a number, got {v}")))?,
    };
    if !(p > 0.0 && p <= 1.0) {
        return Err(Error::input(
            path,
            format!("p_rope p = {p} must be in (0, 1]"),
        ));
    }
    let rotating_pairs = p_rope_pairs(p, head_dim);
    if rotating_pairs == 0 {
        return Err(Error::input(
            path,
            format!(
                "p_rope p = {p} rotates no frequency pair: n = floor({p} * {head_dim} / 2) = 0 (head_dim {head_dim})"
            ),
        ));
    }
    let spacing = match params.get("spacing") {
        None => PRopeSpacing::Rope,
        Some(v) => match v.as_str() {
            Some("rope") => PRopeSpacing::Rope,
            Some("log") => PRopeSpacing::Log,
            _ => {
                return Err(Error::input(
                    path,
                    format!("unknown p_rope spacing {v} (supported: rope, log)"),
                ))
            }
        },
    };
    if partial_rotary_factor != 1.0 {
        return Err(Error::input(
            path,
            format!(
                "p_rope cannot be combined with partial_rotary_factor {partial_rotary_factor} (two different rules for which dimensions rotate)"
            ),
        ));
    }
    Ok(RopeScaling::PRope {
        p,
        spacing,
        rotating_pairs,
    })
}

/// n = floor(p * head_dim / 2), the p-RoPE pairs that rotate. A product within 1e-9 below
/// an integer counts as that integer (p = 0.29, d/2 = 100 gives 29, not 28.999...).
pub fn p_rope_pairs(p: f64, head_dim: usize) -> usize {
    (p * (head_dim / 2) as f64 + 1e-9).floor() as usize
}

fn resolve_scale_invariant(
    raw: Option<&RawScaleInvariant>,
    path: &Path,
) -> Result<ScaleInvariantConfig> {
    let mut cfg = ScaleInvariantConfig::default();
    if let Some(tau) = raw.and_then(|r| r.tau) {
        if !(tau > 0.0) {
            return Err(Error::input(
                path,
                format!("scale_invariant.tau = {tau} must be > 0"),
            ));
        }
        cfg.tau = tau;
    }
    Ok(cfg)
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
        cfg.beta_length = match name.as_str() {
            "full" => BetaLength::Full,
            "visible" => BetaLength::Visible,
            other => {
                return Err(Error::input(
                    path,
                    format!(
                        "unknown affine_scaled.beta_length `{other}` (supported: full, visible)"
                    ),
                ))
            }
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
        for kind in ["proportional", "mrope"] {
            let err = resolve(&format!(
                r#"{{{BASE}, "rope_scaling": {{"rope_type": "{kind}", "factor": 2.0}}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains(kind) && err.contains("config.json"), "{err}");
        }
    }

    #[test]
    fn scaled_rope_types_are_read_as_transformers_reads_them() {
        let rope = |params: &str| {
            resolve(&format!(r#"{{{BASE}, "rope_scaling": {{{params}}}}}"#)).map(|c| c.rope.scaling)
        };
        assert_eq!(
            rope(r#""rope_type": "linear", "factor": 4.0"#).unwrap(),
            RopeScaling::Linear { factor: 4.0 }
        );
        // dynamic NTK grows from the config's max_position_embeddings (2048 when absent)
        assert_eq!(
            rope(r#""type": "dynamic", "factor": 2.0"#).unwrap(),
            RopeScaling::Dynamic {
                factor: 2.0,
                max_position_embeddings: 2048.0
            }
        );
        // YaRN: attention factor 0.1 ln(factor) + 1, or the mscale ratio when both are given
        let RopeScaling::Yarn {
            attention_factor, ..
        } = rope(r#""rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512"#)
            .unwrap()
        else {
            panic!("not yarn")
        };
        assert!((attention_factor - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
        let RopeScaling::Yarn {
            attention_factor, ..
        } = rope(r#""rope_type": "yarn", "factor": 4.0, "mscale": 0.5, "mscale_all_dim": 1.0"#)
            .unwrap()
        else {
            panic!("not yarn")
        };
        let m = |s: f64| 0.1 * s * 4f64.ln() + 1.0;
        assert!((attention_factor - m(0.5) / m(1.0)).abs() < 1e-15);
        for (params, want) in [
            (
                r#""rope_type": "linear""#,
                "linear rope scaling is missing `factor`",
            ),
            (
                r#""rope_type": "dynamic", "factor": 0.5"#,
                "`factor` 0.5 must be a number >= 1",
            ),
            (
                r#""rope_type": "yarn", "factor": 2.0, "truncate": 1"#,
                "yarn `truncate` must be true or false",
            ),
        ] {
            let err = rope(params).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn unknown_model_type_lists_supported() {
        let err = resolve(r#"{"model_type": "mamba"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mamba")
                && err.contains(
                    "gpt2, gpt_neox, gpt_oss, llama, mistral, mixtral, olmo2, phi3, qwen2, qwen3"
                ),
            "{err}"
        );
    }

    fn p_rope(params: &str) -> Result<ModelConfig> {
        resolve(&format!(
            r#"{{{BASE}, "rope_parameters": {{"rope_type": "p_rope", "rope_theta": 1024, {params}}}}}"#
        ))
    }

    #[test]
    fn p_rope_resolves_pairs_and_spacing() {
        // head_dim 16: p = 0.5 gives n = floor(0.5 * 16 / 2) = 4
        let cfg = resolve(&format!(
            r#"{{{BASE}, "head_dim": 16, "rope_parameters": {{"rope_type": "p_rope", "p": 0.5,
            "rope_theta": 1024, "spacing": "log"}}}}"#
        ))
        .unwrap();
        assert_eq!(
            cfg.rope.scaling,
            RopeScaling::PRope {
                p: 0.5,
                spacing: PRopeSpacing::Log,
                rotating_pairs: 4
            }
        );
        assert_eq!(cfg.rope.theta, 1024.0);
        assert_eq!(cfg.rope.partial_rotary_factor, 1.0);
        // spacing defaults to rope; head_dim 16 (64 / 4): p = 0.3 gives floor(2.4) = 2
        let cfg = p_rope(r#""p": 0.3"#).unwrap();
        assert_eq!(
            cfg.rope.scaling,
            RopeScaling::PRope {
                p: 0.3,
                spacing: PRopeSpacing::Rope,
                rotating_pairs: 2
            }
        );
        // floor(p d/2) on the intended integer: 0.29 * 100 = 28.999999999999996 in f64
        assert_eq!(p_rope_pairs(0.29, 200), 29);
    }

    #[test]
    fn bad_p_rope_settings_name_the_value() {
        for (params, needle) in [
            (r#""p": 0"#, "p = 0 must be in (0, 1]"),
            (r#""p": 1.5"#, "p = 1.5 must be in (0, 1]"),
            (r#""p": -0.5"#, "p = -0.5"),
            (r#""p": 0.1"#, "n = floor(0.1 * 16 / 2) = 0"),
            (r#""p": 0.5, "spacing": "linear""#, r#"spacing "linear""#),
            (r#""spacing": "log""#, "missing `p`"),
            (r#""p": "half""#, r#"got "half""#),
        ] {
            let err = p_rope(params).unwrap_err().to_string();
            assert!(
                err.starts_with("config.json: ") && err.contains(needle),
                "{params}: {err}"
            );
        }
        let err = resolve(&format!(
            r#"{{{BASE}, "partial_rotary_factor": 0.5, "rope_parameters": {{"rope_type": "p_rope",
            "p": 0.5}}}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("partial_rotary_factor 0.5"), "{err}");
    }

    #[test]
    fn partial_rotary_factor_stays_apart_from_p_rope() {
        let cfg = resolve(&format!(r#"{{{BASE}, "partial_rotary_factor": 0.5}}"#)).unwrap();
        assert_eq!(cfg.rope.scaling, RopeScaling::Default);
        assert_eq!(cfg.rope.partial_rotary_factor, 0.5);
    }

    #[test]
    fn gpt_oss_takes_its_config_class_defaults() {
        // GptOssConfig: head_dim 64, biases, eps 1e-5, YaRN (32 over 4096, not truncated)
        // on theta 150000, a window of 128 on even layers, 128 experts of top 4
        let c = resolve(
            r#"{"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
                "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
                "vocab_size": 100}"#,
        )
        .unwrap();
        assert_eq!(c.head_dim, 64);
        assert!(c.qkv_bias && c.o_bias);
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert_eq!(c.rope.theta, 150_000.0);
        let RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            truncate,
            beta_fast,
            beta_slow,
            ..
        } = c.rope.scaling
        else {
            panic!("not yarn: {:?}", c.rope.scaling)
        };
        assert_eq!(
            (factor, original_max_position_embeddings, truncate),
            (32.0, 4096.0, false)
        );
        assert_eq!((beta_fast, beta_slow), (32.0, 1.0));
        let window = c.sliding_window.unwrap();
        assert_eq!((window.size, window.layers), (128, vec![0, 2]));
        let experts = c.experts.unwrap();
        assert_eq!((experts.count, experts.top_k), (128, 4));
        // a given rope_scaling (the released configs' legacy field) is read as given
        let c = resolve(
            r#"{"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 32,
                "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 100,
                "rope_theta": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}"#,
        )
        .unwrap();
        assert_eq!(c.rope.theta, 10_000.0);
        assert_eq!(c.rope.scaling, RopeScaling::Linear { factor: 2.0 });
        // quantized weights other than GPT-OSS's MXFP4 experts are refused by name
        let err = resolve(&format!(
            "{{{BASE}, \"quantization_config\": {{\"quant_method\": \"gptq\", \"bits\": 4}}}}"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("quantization_config with quant_method `gptq` is not implemented"),
            "{err}"
        );
    }

    #[test]
    fn scale_invariant_tau_defaults_to_10_and_must_be_positive() {
        let cfg = resolve(&format!(
            r#"{{{BASE}, "attention_variant": "scale_invariant"}}"#
        ))
        .unwrap();
        assert_eq!(cfg.declared_variant, Some(VariantKind::ScaleInvariant));
        assert_eq!(cfg.scale_invariant.tau, 10.0);
        let cfg = resolve(&format!(r#"{{{BASE}, "scale_invariant": {{"tau": 0.5}}}}"#)).unwrap();
        assert_eq!(cfg.scale_invariant.tau, 0.5);
        for tau in ["0", "-1", "0.0"] {
            let err = resolve(&format!(
                r#"{{{BASE}, "attention_variant": "scale_invariant", "scale_invariant": {{"tau": {tau}}}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert!(
                err.starts_with("config.json: ")
                    && err.contains("scale_invariant.tau = ")
                    && err.contains("must be > 0"),
                "{err}"
            );
        }
    }

    #[test]
    fn qwen3_has_qk_norm_no_qwen2_bias_and_its_own_head_dim() {
        let qwen3 = BASE.replace(r#""llama""#, r#""qwen3""#);
        let cfg = resolve(&format!(r#"{{{qwen3}, "head_dim": 12}}"#)).unwrap();
        assert_eq!(cfg.architecture, Architecture::Qwen3);
        assert!(cfg.qk_norm && !cfg.qkv_bias && !cfg.o_bias);
        assert_eq!(cfg.head_dim, 12); // not 64 / 4
                                      // without head_dim, transformers' Qwen3Config default
        let cfg = resolve(&format!(r#"{{{qwen3}}}"#)).unwrap();
        assert_eq!(cfg.head_dim, 128);
        let cfg = resolve(&format!(r#"{{{BASE}}}"#)).unwrap();
        assert!(!cfg.qk_norm);
    }

    #[test]
    fn logn_scale_from_config() {
        let cfg = resolve(&format!(
            r#"{{{BASE}, "attention_variant": "logn", "logn": {{"scale": 0.7}}}}"#
        ))
        .unwrap();
        assert_eq!(cfg.declared_variant, Some(VariantKind::Logn));
        assert_eq!(cfg.logn_scale, Some(0.7));
    }

    #[test]
    fn sliding_windows_are_read_as_transformers_reads_them() {
        use crate::probe::KeyWindow;
        let qwen = BASE.replace(r#""model_type": "llama""#, r#""model_type": "qwen2""#);
        assert_ne!(qwen, BASE);
        let err = resolve(&format!(r#"{{{qwen}, "use_sliding_window": true}}"#))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sliding_window is not set"), "{err}");
        // Qwen2Config: layers from max_window_layers on slide; without use_sliding_window none
        let w = resolve(&format!(
            r#"{{{qwen}, "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 1}}"#
        ))
        .unwrap()
        .sliding_window
        .unwrap();
        assert_eq!((w.size, w.layers.clone()), (8, vec![1]));
        let none = resolve(&format!(r#"{{{qwen}, "sliding_window": 8}}"#)).unwrap();
        assert_eq!(none.sliding_window, None);
        // Mistral: every layer, even where layer_types says full attention (MistralModel
        // builds one sliding mask for all layers); Llama has no window
        let mistral = BASE.replace(r#""model_type": "llama""#, r#""model_type": "mistral""#);
        let w = resolve(&format!(r#"{{{mistral}, "sliding_window": 4096}}"#))
            .unwrap()
            .sliding_window
            .unwrap();
        let layers = w.layers.len();
        assert_eq!(w.layers, (0..layers).collect::<Vec<_>>());
        assert_eq!(w.of_layer(0), KeyWindow::sliding(4096));
        let types = vec![r#""full_attention""#; layers].join(", ");
        let typed = resolve(&format!(
            r#"{{{mistral}, "sliding_window": 4096, "layer_types": [{types}]}}"#
        ))
        .unwrap()
        .sliding_window
        .unwrap();
        assert_eq!(typed, w);
        let llama = resolve(&format!(r#"{{{BASE}, "sliding_window": 8}}"#)).unwrap();
        assert_eq!(llama.sliding_window, None);
        let err = resolve(&format!(
            r#"{{{mistral}, "sliding_window": 8, "layer_types": ["chunked_attention", "full_attention"]}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("layer type `chunked_attention`"), "{err}");
    }
}
