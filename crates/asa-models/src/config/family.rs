//! [`Family`]: everything one `model_type` decides, as constants and function pointers, so
//! that resolution ([`super::resolve`]) reads a family's rules from one value instead of
//! matching on the architecture. Each family fills one in, in its own file under
//! `families/`; [`super::families::FAMILIES`] lists them. How a family reads GGUF files is
//! one more such value, [`GgufRules`] (`gguf`).

pub(crate) mod gguf_rules;

use std::path::Path;

use super::raw::RawConfig;
use super::GemmaSettings;
use crate::attention_layers::AttentionLayers;
use crate::config::experts::{DenseSizes, RawExperts};
use crate::experts::Experts;
use crate::layout::Layout;
use crate::mixers::Mixer;
use crate::multipliers::Multipliers;
use crate::sliding_window::WindowRule;
use asa_core::error::Result;
use asa_engine::attention::latent::LatentShape;
use asa_engine::nn::rope::RopeConfig;
pub(crate) use gguf_rules::{
    Assembled, GgufRules, NameTable, Piece, Pieces, StoredLayer, StoredTensor, Undo,
};

/// The RoPE of the layers, and of the sliding-window layers where it differs (Gemma 3).
pub(crate) type Ropes = (RopeConfig, Option<RopeConfig>);

/// A mixture-of-experts MLP from the config and the model's dense sizes; `None` when dense.
pub(crate) type ExpertsFn = fn(&RawExperts, DenseSizes, &Path) -> Result<Option<Experts>>;

/// Which attention projections carry biases: q/k/v, and o.
#[derive(Debug, Clone, Copy)]
pub struct Biases {
    pub qkv: bool,
    pub o: bool,
}

impl Biases {
    /// The same on q/k/v and o.
    pub const fn all(bias: bool) -> Self {
        Biases { qkv: bias, o: bias }
    }
}

/// A family's rules (its transformers config class's defaults and its modeling code's
/// layout), read by [`RawConfig::resolve`].
pub struct Family {
    /// `model_type`.
    pub name: &'static str,
    /// The config has neither `num_key_value_heads` nor `head_dim` (GPT-NeoX: transformers
    /// ignores them; one key/value head per head, head_dim = hidden / heads).
    pub heads_only: bool,
    /// `head_dim` when absent (the config class's default), else hidden / heads.
    pub default_head_dim: Option<usize>,
    /// `intermediate_size` when absent, as a multiple of hidden_size (GPT-2's `n_inner`
    /// null); required when `None`.
    pub default_intermediate_per_hidden: Option<usize>,
    /// The dense MLP's size as the config states it (`intermediate_size`; Llama 4's
    /// `intermediate_size_mlp`, its experts taking `intermediate_size`).
    pub dense_intermediate: fn(&RawConfig) -> Option<usize>,
    /// The one MLP activation implemented, and the config key naming it.
    pub activation: &'static str,
    pub activation_key: fn(&RawConfig) -> Option<&str>,
    /// Reads the keys only this family has (its struct, in its own file), refusing a wrong
    /// type by name before any rule reads them (`own_keys_readable::<TheKeys>`).
    pub keys: fn(&RawConfig, &Path) -> Result<()>,
    /// Refuses the family's settings the loader does not implement (after the sizes).
    pub check: fn(&RawConfig, &Path) -> Result<()>,
    /// MXFP4-quantized experts (`quantization_config`) are read.
    pub mxfp4_experts: bool,
    /// The attention projections' biases.
    pub biases: fn(&RawConfig) -> Biases,
    /// Biases on the MLP whatever `mlp_bias` says.
    pub mlp_bias: bool,
    /// The norm epsilon (from the family's key, with its default).
    pub norm_eps: fn(&RawConfig) -> f64,
    pub default_max_position_embeddings: usize,
    pub default_tie_word_embeddings: bool,
    /// Per-head (or, by the layout, whole-projection) QK-norm is required.
    pub qk_norm: bool,
    pub layout: fn(&RawConfig) -> Layout,
    pub rope: fn(&RawConfig, &Path, usize) -> Result<Ropes>,
    pub window: WindowRule,
    /// NoPE, chunked layers and the other per-layer attention settings beyond the window,
    /// from the config and the number of layers.
    pub attention_layers: fn(&RawConfig, usize, &Path) -> Result<AttentionLayers>,
    /// Each layer's mixer (attention in every layer but a hybrid's), from the config and
    /// the number of layers.
    pub mixers: fn(&RawConfig, usize, &Path) -> Result<Vec<Mixer>>,
    pub experts: ExpertsFn,
    /// Multi-head latent attention's sizes (DeepSeek-V3), from the config; `None` for q/k/v
    /// heads of `head_dim`.
    pub latent: fn(&RawConfig, &Path) -> Result<Option<LatentShape>>,
    /// The muP multipliers (Granite 4 hybrid, Falcon-H1; none for the others).
    pub multipliers: fn(&RawConfig, &Path) -> Result<Multipliers>,
    /// Gemma's attention scale, soft-caps and embedding scale, from hidden_size (none for
    /// the other families).
    pub scalars: fn(&RawConfig, &Path, usize) -> Result<Option<GemmaSettings>>,
    /// The checkpoint's tensor names as the loader's (`crate::config::builtin_weight_map`):
    /// (convention, stored), `{l}` a layer, `{p}` weight or bias, `{b}` an optional base
    /// model prefix (`transformer.`).
    pub weight_names: &'static [(&'static str, &'static str)],
    /// Endings of stored names transformers skips on load (old buffers).
    pub ignored_on_load: &'static [&'static str],
    /// How llama.cpp's GGUF files of the family are read; `None` when they are not.
    /// Families spread from this one inherit them; the first family in the table with
    /// rules for an architecture reads its files ([`Family::of_gguf`]).
    pub gguf: Option<&'static GgufRules>,
}
