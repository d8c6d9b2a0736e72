//! The resolution of a [`RawConfig`] into a [`ModelConfig`], as named steps: the family,
//! the sizes, what is not implemented, the RoPE, the variant settings, the norm, the
//! special tokens, the window, the experts and the family's scalars. What differs between
//! families comes from their [`Family`] (`super::families`), never from a `match` here.

use std::path::Path;

use serde_json::Value;

use super::family::{Biases, Family};
use super::raw::{RawAffine, RawConfig, RawScaleInvariant};
use super::{Architecture, ModelConfig, VariantSettings};
use crate::config::experts::{DenseSizes, RawExperts};
use crate::config::sliding_window::RawWindow;
use crate::experts::Experts;
use crate::mixers::Mixer;
use crate::sliding_window::SlidingWindow;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::attention::{
    Activation, AffineConfig, BetaLength, ScaleInvariantConfig, VariantKind,
};

/// More layers, or heads, than any model has (the deepest have a few hundred layers, the
/// widest a few hundred heads).
const MAX_COUNT: usize = 1 << 16;

/// The sizes of the model, checked.
struct Sizes {
    hidden: usize,
    intermediate: usize,
    layers: usize,
    vocab: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl RawConfig {
    /// Resolves the mirror; `path` names config.json in errors.
    pub fn resolve(self, path: &Path) -> Result<ModelConfig> {
        let architecture = self.architecture(path)?;
        let family = architecture.family();
        (family.keys)(&self, path)?;
        let s = self.sizes(path, family)?;
        let latent = (family.latent)(&self, path)?;
        // latent attention: one key/value head per head, q/k of nope + rope dims, RoPE on
        // the rope dims
        let (s, rope_dim) = match &latent {
            Some(l) => (
                Sizes {
                    kv_heads: s.heads,
                    head_dim: l.qk_dim(),
                    ..s
                },
                l.rope_dim,
            ),
            None => {
                let head_dim = s.head_dim;
                (s, head_dim)
            }
        };
        let (rope, rope_local) = (family.rope)(&self, path, rope_dim)?;
        let variant_settings = self.variant_settings(path)?;
        let rms_norm_eps = self.norm_eps(path, family)?;
        let (bos_token_id, eos_token_id) = self.special_tokens(path, s.vocab)?;
        let sliding_window = self.window(path, family, s.layers)?;
        let attention_layers = (family.attention_layers)(&self, s.layers, path)?;
        let mixers = self.mixers(path, family, s.layers)?;
        let multipliers = (family.multipliers)(&self, path)?;
        multipliers.check(path)?;
        let dense = DenseSizes {
            num_layers: s.layers,
            intermediate_size: s.intermediate,
        };
        let experts = self.experts(family, dense, path)?;
        let gemma = (family.scalars)(&self, path, s.hidden)?;
        let Biases {
            qkv: qkv_bias,
            o: o_bias,
        } = (family.biases)(&self);
        let config = ModelConfig {
            architecture,
            hidden_size: s.hidden,
            intermediate_size: s.intermediate,
            num_layers: s.layers,
            num_heads: s.heads,
            num_kv_heads: s.kv_heads,
            head_dim: s.head_dim,
            vocab_size: s.vocab,
            rms_norm_eps,
            max_position_embeddings: self
                .max_position_embeddings
                .unwrap_or(family.default_max_position_embeddings),
            tie_word_embeddings: self
                .tie_word_embeddings
                .unwrap_or(family.default_tie_word_embeddings),
            qkv_bias,
            o_bias,
            mlp_bias: family.mlp_bias || self.mlp_bias.unwrap_or(false),
            rope,
            rope_local,
            bos_token_id,
            eos_token_id,
            variant_settings,
            qk_norm: family.qk_norm,
            sliding_window,
            attention_layers,
            mixers,
            multipliers,
            latent,
            layout: (family.layout)(&self),
            experts,
            gemma,
            multimodal: false,
        };
        config.check_scales(path)?;
        Ok(config)
    }

    /// The family `model_type` names; unknown ones are errors listing the supported.
    fn architecture(&self, path: &Path) -> Result<Architecture> {
        let model_type = required(self.model_type.clone(), "model_type", path)?;
        Architecture::parse(&model_type).ok_or_else(|| {
            Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported(
                    "model_type",
                    &model_type,
                    Architecture::supported(),
                ),
            )
        })
    }

    /// Each layer's mixer, by the family's rule; a config without any attention layer is
    /// refused (there is nothing to analyse).
    fn mixers(&self, path: &Path, family: &Family, layers: usize) -> Result<Vec<Mixer>> {
        let mixers = (family.mixers)(self, layers, path)?;
        if !mixers.iter().any(|m| m.has_attention()) {
            let detail = "no layer has attention (every layer is another mixer)".to_string();
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::NoAttention { detail },
            ));
        }
        Ok(mixers)
    }

    /// The sizes, each required (or the family's default) and non-zero; what is not
    /// implemented is refused once the heads are known.
    fn sizes(&self, path: &Path, family: &Family) -> Result<Sizes> {
        let hidden = required(self.hidden_size, "hidden_size", path)?;
        let (heads, kv_heads, head_dim) = self.heads(path, family, hidden)?;
        self.check_implemented(path, family)?;
        let vocab = required(self.vocab_size, "vocab_size", path)?;
        let stated = (family.dense_intermediate)(self);
        let intermediate = match family.default_intermediate_per_hidden {
            Some(times) => stated.unwrap_or(times * hidden),
            None => required(stated, "intermediate_size", path)?,
        };
        let layers = required(self.num_hidden_layers, "num_hidden_layers", path)?;
        for (field, size) in [
            ("hidden_size", hidden),
            ("intermediate_size", intermediate),
            ("num_hidden_layers", layers),
            ("vocab_size", vocab),
            ("head_dim", head_dim),
            (
                "max_position_embeddings",
                self.max_position_embeddings.unwrap_or(1),
            ),
        ] {
            if size == 0 {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::out_of_range(field, size, "at least 1"),
                ));
            }
        }
        // a count past any model's sizes every layer's (and head's) structures before a
        // weight is read: 2^31 layers laid out 154 GB (found by the fuzz harness, issue 54)
        for (field, count) in [
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
        ] {
            if count > MAX_COUNT {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::out_of_range(
                        field,
                        count,
                        format!("at most {MAX_COUNT} (a damaged config?)"),
                    ),
                ));
            }
        }
        Ok(Sizes {
            hidden,
            intermediate,
            layers,
            vocab,
            heads,
            kv_heads,
            head_dim,
        })
    }

    /// Query heads, key/value heads and head dimension, checked against each other.
    fn heads(
        &self,
        path: &Path,
        family: &Family,
        hidden_size: usize,
    ) -> Result<(usize, usize, usize)> {
        let num_heads = required(self.num_attention_heads, "num_attention_heads", path)?;
        let num_kv_heads = match family.heads_only {
            true => num_heads,
            false => self.num_key_value_heads.unwrap_or(num_heads),
        };
        if num_heads == 0 || num_kv_heads == 0 {
            let (key, value) = match num_heads {
                0 => ("num_attention_heads", num_heads),
                _ => ("num_key_value_heads", num_kv_heads),
            };
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range(key, value, "at least 1"),
            ));
        }
        if num_heads % num_kv_heads != 0 {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::inconsistent(
                    &["num_attention_heads", "num_key_value_heads"],
                    format!("num_attention_heads {num_heads} is not a multiple of num_key_value_heads {num_kv_heads}"),
                ),
            ));
        }
        let head_dim = match self.head_dim.filter(|_| !family.heads_only) {
            Some(d) => d,
            None => match family.default_head_dim {
                Some(d) => d,
                None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
                None => {
                    return Err(Error::checkpoint_problem(
                        path,
                        CheckpointProblem::inconsistent(
                            &["hidden_size", "num_attention_heads"],
                            format!("hidden_size {hidden_size} is not divisible by num_attention_heads {num_heads} and head_dim is not given"),
                        ),
                    ))
                }
            },
        };
        Ok((num_heads, num_kv_heads, head_dim))
    }

    /// Refuses what the loader does not implement (never ignored).
    fn check_implemented(&self, path: &Path, family: &Family) -> Result<()> {
        (family.check)(self, path)?;
        if let Some(quant) = &self.quantization_config {
            let method = quant.get("quant_method").and_then(Value::as_str);
            if !(method == Some("mxfp4") && family.mxfp4_experts) {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::unsupported(
                        "quantization_config.quant_method",
                        method.unwrap_or("(missing)"),
                        "mxfp4 experts of gpt_oss; or a GGUF file",
                    ),
                ));
            }
        }
        if self.use_bidirectional_attention == Some(true) {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported(
                    "use_bidirectional_attention",
                    true,
                    "false: attention is causal",
                ),
            ));
        }
        // the MLP's activation: SwiGLU's silu, GPT-NeoX's exact GELU, GPT-2's tanh GELU
        let want = family.activation;
        if let Some(act) = (family.activation_key)(self).filter(|a| *a != want) {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported("hidden_act", act, want),
            )
            .with_note(format!("the MLP of {}", family.name)));
        }
        Ok(())
    }

    /// The declared variant and the blocks of the affine, scale-invariant and logn
    /// variants.
    fn variant_settings(&self, path: &Path) -> Result<VariantSettings> {
        let declared = match &self.attention_variant {
            None => None,
            Some(name) => Some(VariantKind::parse(name).ok_or_else(|| {
                Error::checkpoint_problem(
                    path,
                    CheckpointProblem::unsupported(
                        "attention_variant",
                        name,
                        VariantKind::supported(),
                    ),
                )
            })?),
        };
        let affine = resolve_affine(self.affine_scaled.as_ref(), path)?;
        let scale_invariant = resolve_scale_invariant(self.scale_invariant.as_ref(), path)?;
        let logn_scale = match self.logn.as_ref().and_then(|l| l.scale) {
            Some(s) if !s.is_finite() => {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::out_of_range("logn.scale", s, "a finite number"),
                ))
            }
            other => other,
        };
        Ok(VariantSettings {
            declared,
            affine,
            scale_invariant,
            logn_scale,
        })
    }

    /// The norm epsilon (the family's key and default), finite and >= 0.
    fn norm_eps(&self, path: &Path, family: &Family) -> Result<f64> {
        let rms_norm_eps = (family.norm_eps)(self);
        if !(rms_norm_eps.is_finite() && rms_norm_eps >= 0.0) {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range(
                    "rms_norm_eps",
                    rms_norm_eps,
                    "a finite number >= 0",
                ),
            ));
        }
        Ok(rms_norm_eps)
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
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::out_of_range(
                        field,
                        id,
                        format!("below vocab_size {vocab_size}"),
                    ),
                ));
            }
        }
        Ok((bos_token_id, eos_token_id))
    }

    /// The sliding window (`crate::sliding_window`) by the family's rule.
    pub(crate) fn window(
        &self,
        path: &Path,
        family: &Family,
        num_layers: usize,
    ) -> Result<Option<SlidingWindow>> {
        let raw = RawWindow {
            sliding_window: self.sliding_window.as_ref(),
            use_sliding_window: self.use_sliding_window,
            max_window_layers: self.max_window_layers,
            layer_types: self.layer_types.as_deref(),
            sliding_window_pattern: self.sliding_window_pattern,
        };
        crate::config::sliding_window::resolve(raw, &family.window, num_layers, path)
    }

    /// The experts of a mixture-of-experts family (`crate::experts`).
    fn experts(
        &self,
        family: &'static Family,
        dense: DenseSizes,
        path: &Path,
    ) -> Result<Option<Experts>> {
        let raw = RawExperts {
            config: self,
            num_local_experts: self.num_local_experts,
            num_experts: self.num_experts,
            num_experts_per_tok: self.num_experts_per_tok,
            norm_topk_prob: self.norm_topk_prob,
            moe_intermediate_size: self.moe_intermediate_size,
            intermediate_size: self.intermediate_size,
        };
        crate::config::experts::resolve(raw, Architecture(family), dense, path)
    }
}

fn required<T>(value: Option<T>, field: &str, path: &Path) -> Result<T> {
    value.ok_or_else(|| Error::checkpoint_problem(path, CheckpointProblem::missing_key(field)))
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
            Error::checkpoint_problem(
                path,
                CheckpointProblem::wrong_type(field, "a token id (an integer from 0)", one),
            )
        })
}

/// The `scale_invariant` block, when given.
fn resolve_scale_invariant(
    raw: Option<&RawScaleInvariant>,
    path: &Path,
) -> Result<Option<ScaleInvariantConfig>> {
    let Some(raw) = raw else { return Ok(None) };
    let mut cfg = ScaleInvariantConfig::default();
    if let Some(tau) = raw.tau {
        if tau.is_nan() || tau <= 0.0 {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range("scale_invariant.tau", tau, "> 0"),
            ));
        }
        cfg.tau = tau;
    }
    Ok(Some(cfg))
}

/// The `affine_scaled` block, when given.
fn resolve_affine(raw: Option<&RawAffine>, path: &Path) -> Result<Option<AffineConfig>> {
    let Some(raw) = raw else { return Ok(None) };
    let mut cfg = AffineConfig::default();
    if let Some(name) = &raw.activation {
        cfg.activation = match name.as_str() {
            "linear_clipping" => Activation::LinearClipping,
            "sigmoid" => Activation::Sigmoid,
            other => {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::unsupported(
                        "affine_scaled.activation",
                        other,
                        "linear_clipping, sigmoid",
                    ),
                ))
            }
        };
    }
    if let Some(name) = &raw.beta_length {
        cfg.beta_length = match name.as_str() {
            "full" => BetaLength::Full,
            "visible" => BetaLength::Visible,
            other => {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::unsupported(
                        "affine_scaled.beta_length",
                        other,
                        "full, visible",
                    ),
                ))
            }
        };
    }
    if let Some(m) = raw.momentum {
        cfg.momentum = m;
    }
    Ok(Some(cfg))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::RopeScaling;

    pub(crate) fn resolve(json: &str) -> Result<ModelConfig> {
        let raw: RawConfig = serde_json::from_str(json).unwrap();
        raw.resolve(Path::new("config.json"))
    }

    pub(crate) const BASE: &str = r#""model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100"#;

    /// Issue 54, found by the Python fuzz harness: `num_hidden_layers` 2^31 laid out every
    /// layer's structures (154 GB) before a weight was read, and the interpreter aborted.
    #[test]
    fn counts_past_any_model_are_refused_before_anything_is_laid_out() {
        let sizes = |layers: u64, heads: u64| {
            format!(
                r#"{{"model_type": "llama", "hidden_size": {heads}, "intermediate_size": 8,
                "num_hidden_layers": {layers}, "num_attention_heads": {heads},
                "num_key_value_heads": 1, "vocab_size": 10}}"#
            )
        };
        for (field, json) in [
            ("num_hidden_layers", sizes(1 << 31, 4)),
            ("num_attention_heads", sizes(2, 1 << 31)),
        ] {
            let err = resolve(&json).unwrap_err();
            let kind = asa_core::error::ErrorKind::Input(asa_core::error::InputKind::Checkpoint);
            assert_eq!(err.kind(), kind);
            assert_eq!(
                err.problem(),
                Some(&CheckpointProblem::out_of_range(
                    field,
                    2147483648u32,
                    "at most 65536 (a damaged config?)"
                ))
            );
        }
        resolve(&format!("{{{BASE}}}")).unwrap();
    }

    #[test]
    fn unknown_model_type_lists_supported() {
        let err = resolve(r#"{"model_type": "mamba"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mamba")
                && err.contains(
                    "gpt2, gpt_neox, gpt_oss, granitemoehybrid, lfm2, llama, llama4_text, mistral, mixtral, olmo2, olmo3, phi3, qwen2, qwen3"
                ),
            "{err}"
        );
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
        .unwrap_err();
        assert_eq!(
            err.problem(),
            Some(&CheckpointProblem::unsupported(
                "quantization_config.quant_method",
                "gptq",
                "mxfp4 experts of gpt_oss; or a GGUF file"
            ))
        );
    }

    #[test]
    fn scale_invariant_tau_defaults_to_10_and_must_be_positive() {
        let cfg = resolve(&format!(
            r#"{{{BASE}, "attention_variant": "scale_invariant"}}"#
        ))
        .unwrap();
        assert_eq!(
            cfg.variant_settings.declared,
            Some(VariantKind::ScaleInvariant)
        );
        assert_eq!(cfg.variant_settings.scale_invariant().tau, 10.0);
        let cfg = resolve(&format!(r#"{{{BASE}, "scale_invariant": {{"tau": 0.5}}}}"#)).unwrap();
        assert_eq!(cfg.variant_settings.scale_invariant().tau, 0.5);
        for tau in ["0", "-1", "0.0"] {
            let err = resolve(&format!(
                    r#"{{{BASE}, "attention_variant": "scale_invariant", "scale_invariant": {{"tau": {tau}}}}}"#
                ))
                .unwrap_err();
            assert_eq!(err.path(), Some(Path::new("config.json")));
            let problem = err.problem().unwrap();
            assert_eq!(
                (problem.name(), problem.key()),
                ("out_of_range", Some("scale_invariant.tau"))
            );
        }
    }

    #[test]
    fn qwen3_has_qk_norm_no_qwen2_bias_and_its_own_head_dim() {
        let qwen3 = BASE.replace(r#""llama""#, r#""qwen3""#);
        let cfg = resolve(&format!(r#"{{{qwen3}, "head_dim": 12}}"#)).unwrap();
        assert_eq!(cfg.architecture, Architecture::parse("qwen3").unwrap());
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
        assert_eq!(cfg.variant_settings.declared, Some(VariantKind::Logn));
        assert_eq!(cfg.variant_settings.logn_scale, Some(0.7));
    }

    #[test]
    fn the_running_variant_carries_its_blocks_settings_or_their_defaults() {
        use asa_engine::attention::Variant;
        let cfg = resolve(&format!(
            r#"{{{BASE}, "scale_invariant": {{"tau": 0.5}}, "logn": {{"scale": 0.7}}}}"#
        ))
        .unwrap();
        let settings = &cfg.variant_settings;
        for name in VariantKind::NAMES {
            let kind = VariantKind::parse(name).unwrap();
            assert_eq!(settings.variant(kind).kind(), kind, "{name}");
        }
        assert_eq!(settings.variant(VariantKind::Softmax), Variant::Softmax);
        assert_eq!(settings.variant(VariantKind::Softmax).affine(), None);
        assert_eq!(
            settings.variant(VariantKind::ScaleInvariant),
            Variant::ScaleInvariant(ScaleInvariantConfig { tau: 0.5 })
        );
        assert_eq!(
            settings.variant(VariantKind::Logn),
            Variant::Logn { scale: Some(0.7) }
        );
        // no affine_scaled block: its defaults
        let affine = settings.variant(VariantKind::AffineScaledGated);
        assert_eq!(affine.affine(), Some(&AffineConfig::default()));
        assert!(cfg.gemma.is_none());
    }

    #[test]
    fn sliding_windows_are_read_as_transformers_reads_them() {
        use asa_hooks::KeyWindow;
        let qwen = BASE.replace(r#""model_type": "llama""#, r#""model_type": "qwen2""#);
        assert_ne!(qwen, BASE);
        // Qwen2Config: sliding_window 4096 and max_window_layers 28 when absent
        let w = resolve(&format!(
            r#"{{{qwen}, "use_sliding_window": true, "max_window_layers": 0}}"#
        ))
        .unwrap()
        .sliding_window
        .unwrap();
        assert_eq!(w.size, 4096);
        let shallow = resolve(&format!(r#"{{{qwen}, "use_sliding_window": true}}"#)).unwrap();
        assert_eq!(shallow.sliding_window, None);
        // layer_types naming sliding layers without a window: transformers refuses it
        let layers = shallow.num_layers;
        let sliding = vec![r#""sliding_attention""#; layers].join(", ");
        let err = resolve(&format!(
            r#"{{{qwen}, "sliding_window": 8, "layer_types": [{sliding}]}}"#
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains("use_sliding_window is not true"), "{err}");
        // Qwen3-MoE: every layer (no max_window_layers); Mistral: 4096 when absent
        let moe = BASE.replace(r#""model_type": "llama""#, r#""model_type": "qwen3_moe""#);
        let w = resolve(&format!(
            r#"{{{moe}, "use_sliding_window": true, "max_window_layers": 1}}"#
        ))
        .unwrap()
        .sliding_window
        .unwrap();
        assert_eq!((w.size, w.layers), (4096, (0..layers).collect::<Vec<_>>()));
        let mistral = BASE.replace(r#""model_type": "llama""#, r#""model_type": "mistral""#);
        let w = resolve(&format!("{{{mistral}}}"))
            .unwrap()
            .sliding_window
            .unwrap();
        assert_eq!(w.size, 4096);
        let off = resolve(&format!(r#"{{{mistral}, "sliding_window": null}}"#)).unwrap();
        assert_eq!(off.sliding_window, None);
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
            .unwrap_err();
        assert_eq!(
            err.problem(),
            Some(&CheckpointProblem::unsupported(
                "layer_types",
                "chunked_attention",
                "full_attention, sliding_attention"
            ))
        );
    }
}
