//! `config.json` in two stages: a serde mirror of what checkpoints write ([`RawConfig`],
//! every field optional; `raw`) resolved into a [`ModelConfig`] with no optional fields
//! (`resolve`), where every unsupported setting is an error naming the file and the value.
//! What a `model_type` decides lives in one file per family (`families/`), each a
//! [`Family`] value listed in one table ([`families::FAMILIES`]); RoPE settings are
//! resolved in `rope` (the math, `asa_engine::nn::rope` and `asa_engine::nn::rope::scaling`,
//! reads no config).
//!
//! # Adding a family
//!
//! 1. Write `families/<model_type>.rs`: a doc line on what the family is, then
//!    `pub(crate) const FAMILY: Family = Family { name: "<model_type>", ..., ..llama::FAMILY }`
//!    naming only what differs from the family it starts from (Llama, or a closer one:
//!    `..mistral::FAMILY`), with the functions it needs beside it: its defaults (head_dim,
//!    norm epsilon, positions, tied embeddings), config-key aliases (`activation_key`,
//!    `norm_eps`), biases, layout, sliding-window rule, RoPE, experts, scalars, tensor
//!    names. The keys only this family's config class has are a struct in the same file,
//!    named by its `keys` rule (`keys: own_keys_readable::<TheKeys>`) and read with
//!    `raw.family_keys(path)` (or `raw.own()` in a rule without a path): the shared mirror
//!    (`raw.rs`) holds only keys several families read. `families/qwen3.rs` and
//!    `families/phi3.rs` are short examples; `families/cohere2.rs` one with keys of its
//!    own, `families/gemma3.rs` one with its own RoPE rules.
//! 2. Add `mod <model_type>;` and one line `<model_type>::FAMILY,` to the table in
//!    `families/mod.rs`.
//!
//! Nothing else names a family: the supported list in errors, `inspect`, the built-in
//! weight maps and the loader read the table. A new layout, MLP or norm kind (a new
//! [`Layout`](crate::layout::Layout) field) is a separate step. GGUF support is
//! the family's `gguf` rules (`family/gguf_rules.rs`: `..llama::gguf_rules("<llama.cpp
//! architecture>")` with what differs); a hybrid's other mixers are its `mixers`, each a
//! file of `asa_engine::mixer`.

pub(crate) mod experts;
mod families;
pub(crate) mod family;
mod from_gguf;
pub(crate) mod raw;
mod resolve;
mod rope;
mod scales;
pub(crate) mod sliding_window;
mod weight_names;

use std::path::Path;

use serde_json::Value;

pub(crate) use family::Family;
pub use from_gguf::{open_gguf, supported_architectures};
pub(crate) use raw::{float_field, positive_or_null};
pub use raw::{RawAffine, RawConfig, RawLogn, RawScaleInvariant};
pub use rope::p_rope_pairs;
pub use weight_names::{builtin_weight_map, ignored_on_load};

use super::attention_layers::AttentionLayers;
use super::experts::Experts;
use super::layout::Layout;
use super::sliding_window::SlidingWindow;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};
use asa_engine::attention::{AffineConfig, ScaleInvariantConfig, Variant, VariantKind};
pub use asa_engine::nn::rope::RopeConfig;
pub use asa_engine::nn::rope::{PRopeSpacing, RopeScaling};

/// An architecture the loader implements (`model_type`): one of [`families::FAMILIES`].
#[derive(Clone, Copy)]
pub struct Architecture(&'static Family);

impl Architecture {
    /// The family named `model_type`, if implemented.
    pub fn parse(name: &str) -> Option<Self> {
        families::FAMILIES
            .iter()
            .find(|f| f.name == name)
            .map(Architecture)
    }

    /// The `model_type` string.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// `model_type` values accepted, sorted, for error messages.
    pub fn supported() -> String {
        let mut names: Vec<&str> = families::FAMILIES.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.join(", ")
    }

    /// Its rules.
    pub(crate) fn family(self) -> &'static Family {
        self.0
    }
}

impl PartialEq for Architecture {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Architecture {}

impl std::fmt::Debug for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl serde::Serialize for Architecture {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name)
    }
}

/// What config.json says of the attention variant: the one it names, and the blocks of
/// the variants with settings, each `None` when absent (a plain config carries none). The
/// blocks are kept whichever variant is named: the variant that runs may come from the
/// weights or `--variant` (see [`crate::detect_variant`]); [`VariantSettings::variant`]
/// gives the one that runs, with its settings.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct VariantSettings {
    /// The variant named (`attention_variant`), if any; detection from the weights fills
    /// it in otherwise.
    pub declared: Option<VariantKind>,
    /// The `affine_scaled` block.
    pub affine: Option<AffineConfig>,
    /// The `scale_invariant` block.
    pub scale_invariant: Option<ScaleInvariantConfig>,
    /// logn: s_h for every head from `"logn": {"scale": s}`; a stored
    /// `self_attn.logn_scale` [heads] takes precedence.
    pub logn_scale: Option<f64>,
}

impl VariantSettings {
    /// Affine-Scaled settings (defaults when the block is absent).
    pub fn affine(&self) -> AffineConfig {
        self.affine.unwrap_or_default()
    }

    /// scale_invariant settings (tau 10 when the block is absent).
    pub fn scale_invariant(&self) -> ScaleInvariantConfig {
        self.scale_invariant.unwrap_or_default()
    }

    /// The variant `kind` with its settings from these blocks (defaults for an absent
    /// block), whichever variant config.json names.
    pub fn variant(&self, kind: VariantKind) -> Variant {
        match kind {
            VariantKind::Softmax => Variant::Softmax,
            VariantKind::OffByOne => Variant::OffByOne,
            VariantKind::Sink => Variant::Sink,
            VariantKind::Gated => Variant::Gated,
            VariantKind::AffineScaled => Variant::AffineScaled(self.affine()),
            VariantKind::AffineScaledGated => Variant::AffineScaledGated(self.affine()),
            VariantKind::ScaleInvariant => Variant::ScaleInvariant(self.scale_invariant()),
            VariantKind::Logn => Variant::Logn {
                scale: self.logn_scale,
            },
        }
    }
}

/// The settings of the Gemma families that other models lack.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GemmaSettings {
    /// q.k is scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2.
    pub query_pre_attn_scalar: f64,
    /// Attention logits soft-capped at cap tanh(s / cap) (Gemma 2).
    pub attn_logit_softcap: Option<f64>,
    /// Next-token logits soft-capped likewise (Gemma 2).
    pub final_logit_softcap: Option<f64>,
    /// Embeddings multiplied by this (sqrt(hidden_size)).
    pub embedding_scale: f64,
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
    /// The rotary settings of the sliding-window layers where they differ from `rope`
    /// (Gemma 3's `rope_parameters.sliding_attention`; `rope` is then the global layers').
    pub rope_local: Option<RopeConfig>,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// The attention variant config.json names, and the settings of the variants that
    /// have some (`attention_variant`, `affine_scaled`, `scale_invariant`, `logn`).
    pub variant_settings: VariantSettings,
    /// Per-head RMSNorm of queries and keys before RoPE is required (Qwen3). Other
    /// architectures use it when the weights have `self_attn.q_norm.weight`.
    pub qk_norm: bool,
    /// Sliding-window attention, when some layer uses it.
    pub sliding_window: Option<SlidingWindow>,
    /// NoPE and chunked layers, temperature tuning, L2 QK-norm.
    pub attention_layers: AttentionLayers,
    /// Each layer's mixer (`[layer]`): attention but in a hybrid's other layers.
    pub mixers: Vec<super::mixers::Mixer>,
    /// muP multipliers (Granite 4 hybrid, Falcon-H1).
    pub multipliers: super::multipliers::Multipliers,
    /// Multi-head latent attention's sizes (DeepSeek-V3): `head_dim` is then q/k's (nope +
    /// rope), one key/value head per head.
    pub latent: Option<asa_engine::attention::latent::LatentShape>,
    /// The norm, MLP, residual wiring and q/k/v projections of the architecture.
    pub layout: Layout,
    /// A mixture-of-experts MLP (Mixtral, Qwen3-MoE): its experts, routing and layers.
    pub experts: Option<Experts>,
    /// Gemma's query scale, soft-caps and embedding scale (the Gemma families only).
    pub gemma: Option<GemmaSettings>,
    /// The text model of a multimodal checkpoint (`super::multimodal`): its vision tower is
    /// not read.
    pub multimodal: bool,
}

/// The largest soft-cap the forward pass applies: a cap beyond the f32 range (config.json
/// may say 1e308) is the identity on every logit |s| < 1.4e35 in f32 (it changes s by a
/// relative (s / cap)^2 / 3 < 2^-24), as transformers computes it in float64; applied in
/// f32 it would be inf and make every logit NaN, so it is not applied (`inspect` says so).
pub const MAX_APPLIED_SOFTCAP: f64 = f32::MAX as f64;

/// `cap` when the forward pass applies it ([`MAX_APPLIED_SOFTCAP`]).
fn applied(cap: Option<f64>) -> Option<f64> {
    cap.filter(|&c| c <= MAX_APPLIED_SOFTCAP)
}

impl GemmaSettings {
    /// The attention soft-cap the forward pass applies (none beyond f32: the identity).
    pub fn applied_attn_softcap(&self) -> Option<f64> {
        applied(self.attn_logit_softcap)
    }

    /// The next-token soft-cap the forward pass applies (none beyond f32: the identity).
    pub fn applied_final_softcap(&self) -> Option<f64> {
        applied(self.final_logit_softcap)
    }
}

impl ModelConfig {
    /// The factor of q.k: Granite's `attention_multiplier`, query_pre_attn_scalar^-1/2
    /// (Gemma), latent attention's scale
    /// (DeepSeek: with YaRN's mscale^2), or head_dim^-1/2.
    pub fn query_scale(&self) -> f64 {
        if let Some(scale) = self.multipliers.attention_scale {
            return scale;
        }
        if let Some(latent) = &self.latent {
            return latent.softmax_scale;
        }
        1.0 / self
            .gemma
            .map_or(self.head_dim as f64, |g| g.query_pre_attn_scalar)
            .sqrt()
    }

    /// The attention logits' soft-cap as applied (Gemma 2; none beyond f32, the identity).
    pub fn attn_logit_softcap(&self) -> Option<f64> {
        self.gemma.and_then(|g| g.applied_attn_softcap())
    }

    /// The next-token logits' soft-cap as applied (Gemma 2; none beyond f32, the identity).
    pub fn final_logit_softcap(&self) -> Option<f64> {
        self.gemma.and_then(|g| g.applied_final_softcap())
    }

    /// Reads and resolves `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = asa_core::input::read_text(&path, asa_core::input::JSON_RECORD).map_err(
            |e| match e {
                Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    let problem = CheckpointProblem::MissingFile {
                        file: "config.json".into(),
                        detail: String::new(),
                    };
                    Error::checkpoint_problem(&path, problem)
                }
                e => e,
            },
        )?;
        Self::from_json(&text, &path)
    }

    /// Resolves the text of a config.json (`path` names it in errors: a file, or where an
    /// in-memory model's config came from).
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let raw = RawConfig::parse(text, path, "invalid config.json")?;
        if raw.model_type.as_deref() != Some("gemma3") {
            return raw.resolve(path);
        }
        // a multimodal checkpoint: its text model
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid(path, "invalid config.json", e).about(InputKind::Checkpoint)
        })?;
        let text = crate::multimodal::text_config(&value, path)?.unwrap_or(value);
        let raw = RawConfig::from_value(text, path, "invalid config.json text_config")?;
        Ok(ModelConfig {
            multimodal: true,
            ..raw.resolve(path)?
        })
    }

    /// What each decoder layer is (run.json's and `inspect`'s `layer_kinds`).
    pub fn layer_kinds(&self) -> Vec<super::attention_layers::LayerKind> {
        use super::attention_layers::LayerKind;
        let a = &self.attention_layers;
        (0..self.num_layers)
            .map(|l| match self.mixers[l] {
                m if m.has_attention() => {
                    let rope = a.rotates(l) && !self.layout.learned_positions;
                    let tuned = a.temperature_of(l).is_some();
                    LayerKind {
                        mixer: m.name().to_string(),
                        ..LayerKind::attention(
                            l,
                            m.name(),
                            self.key_window(l).describe(),
                            rope,
                            tuned,
                        )
                    }
                }
                other => LayerKind::other(l, other.name()),
            })
            .collect()
    }

    /// The decoder layers (0-based) with attention, in order (every layer but a hybrid's
    /// other mixers): the probe's layer k is the k-th of them.
    pub fn attention_layer_numbers(&self) -> Vec<usize> {
        super::mixers::attention_layers(&self.mixers)
    }

    /// The keys each query of layer `layer` (0-based) sees.
    pub fn key_window(&self, layer: usize) -> asa_hooks::KeyWindow {
        if let Some(size) = self.attention_layers.chunk_of(layer) {
            return asa_hooks::KeyWindow::chunked(size);
        }
        self.sliding_window
            .as_ref()
            .map_or(asa_hooks::KeyWindow::CAUSAL, |w| w.of_layer(layer))
    }
}
