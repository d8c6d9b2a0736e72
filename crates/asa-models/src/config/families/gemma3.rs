//! Gemma 3 (text): Gemma 2's layout with per-head QK-norm scaled by (1 + w), no soft-caps
//! by default (and no attention soft-cap at all, as transformers computes it), five sliding
//! layers to a global one, and separate RoPE parameters for the sliding and the global
//! layers.

use std::path::Path;

use candle_core::quantized::gguf_file::Value as GgufValue;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{gemma2, llama, qwen3};
use crate::config::family::{Family, GgufRules, Ropes};
use crate::config::raw::own_keys_readable;
use crate::config::{GemmaSettings, RawConfig};
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::sliding_window::{WindowLayers, WindowRule};
use asa_core::error::Result;
use asa_engine::nn::rope::RopeConfig;

pub(crate) const FAMILY: Family = Family {
    name: "gemma3_text",
    keys,
    qk_norm: true,
    rope,
    window: WindowRule {
        // Gemma3TextConfig: every layer but each `sliding_window_pattern`-th
        layers: WindowLayers::AllButEvery(6),
        ..gemma2::FAMILY.window
    },
    scalars,
    gguf: Some(&GGUF),
    ..gemma2::FAMILY
};

/// llama.cpp's `gemma3`: Gemma 2's and the QK-norm.
const GGUF: GgufRules = GgufRules {
    arch: "gemma3",
    blocks: &[
        qwen3::GGUF_QK_NORM,
        gemma2::GGUF_SANDWICH_NORMS,
        llama::GGUF_BLOCKS,
    ],
    config: gguf_config,
    ..gemma2::GGUF
};

/// Gemma 3 as llama.cpp reads it: Gemma 2's (the 27B model has 62 layers), the global
/// RoPE (`rope.freq_base`, linear scaling) in config.json's legacy form, the sliding
/// layers' (`rope.freq_base_swa`, else 10000) and `attention.sliding_window_pattern`.
fn gguf_config(meta: &Meta, _: &TensorFacts, d: &Dims, raw: &mut Value) -> Result<()> {
    gemma2::gemma_gguf_config(meta, d, raw, 62)?;
    // config.json's legacy form: rope_theta and rope_scaling for the global layers
    let rope = raw["rope_parameters"].take();
    raw["rope_theta"] = rope["rope_theta"].clone();
    if rope["rope_type"] == "linear" {
        raw["rope_scaling"] = json!({"rope_type": "linear", "factor": rope["factor"]});
    }
    if let Some(local) = meta.opt_f64_key("rope.freq_base_swa")? {
        raw["rope_local_base_freq"] = json!(local);
    }
    gguf_layer_types(meta, raw)
}

/// `attention.sliding_window_pattern`: one period (every n-th layer global), or a flag per
/// layer (true: sliding; booleans as the converter writes them, or 0 and 1).
pub(crate) fn gguf_layer_types(meta: &Meta, raw: &mut Value) -> Result<()> {
    let key = meta.key("attention.sliding_window_pattern");
    match meta.content.metadata.get(&key) {
        None => {}
        Some(GgufValue::Array(_)) => {
            let flags = meta
                .opt_layer_flags("attention.sliding_window_pattern")?
                .unwrap_or_default();
            let types: Vec<&str> = flags
                .iter()
                .map(|&sliding| match sliding {
                    true => "sliding_attention",
                    false => "full_attention",
                })
                .collect();
            raw["layer_types"] = json!(types);
        }
        Some(_) => {
            let pattern = meta.usize_key("attention.sliding_window_pattern")?;
            raw["sliding_window_pattern"] = json!(pattern);
        }
    }
    Ok(())
}

/// Gemma3TextConfig caps nothing by default, and its attention reads no soft-cap:
/// transformers 5.24's Gemma3Attention keeps `attn_logit_softcapping` but passes no
/// `softcap` to the attention function, so only `final_logit_softcapping` is applied.
fn scalars(raw: &RawConfig, path: &Path, hidden_size: usize) -> Result<Option<GemmaSettings>> {
    let defaults = gemma2::SoftCaps {
        attn: None,
        final_logits: None,
    };
    let settings = gemma2::gemma_scalars(raw, path, hidden_size, defaults)?;
    Ok(settings.map(|s| GemmaSettings {
        attn_logit_softcap: None,
        ..s
    }))
}

/// The key only Gemma3TextConfig has: the legacy theta of its sliding layers.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Gemma3Keys {
    rope_local_base_freq: Option<f64>,
}

/// Its own key and the Gemma classes' ([`gemma2::GemmaKeys`]), each read as its struct
/// says (a wrong type refused by name).
fn keys(raw: &RawConfig, path: &Path) -> Result<()> {
    own_keys_readable::<Gemma3Keys>(raw, path)?;
    own_keys_readable::<gemma2::GemmaKeys>(raw, path)
}

/// Gemma 3's RoPE: `rope_parameters` keyed by layer type (`full_attention`,
/// `sliding_attention`), or the legacy `rope_theta` (global, default 1e6),
/// `rope_local_base_freq` (sliding, default 1e4) and `rope_scaling` (global only), as
/// Gemma3TextConfig reads them. Returns (global, sliding).
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    let keys: Gemma3Keys = raw.family_keys(path)?;
    let thetas = (
        raw.rope_theta.unwrap_or(1_000_000.0),
        keys.rope_local_base_freq.unwrap_or(10_000.0),
    );
    typed_rope(raw, path, head_dim, thetas)
}

/// RoPE parameters keyed by layer type (`full_attention`, `sliding_attention`; each default
/// RoPE when absent, with `thetas` (global, sliding) where they name none), the legacy
/// `rope_scaling` laid over the global layers' (Gemma 3, OLMo 3). Returns (global, sliding).
pub(crate) fn typed_rope(
    raw: &RawConfig,
    path: &Path,
    head_dim: usize,
    thetas: (f64, f64),
) -> Result<Ropes> {
    let nested = |key: &str| {
        raw.rope_parameters
            .as_ref()
            .and_then(|p| p.get(key))
            .filter(|v| !v.is_null())
            .cloned()
    };
    let global = LayerRope {
        params: nested("full_attention"),
        legacy: raw.rope_scaling.as_ref(),
        theta: thetas.0,
    };
    let local = LayerRope {
        params: nested("sliding_attention"),
        legacy: None,
        theta: thetas.1,
    };
    Ok((
        global.resolve(raw, path, head_dim)?,
        Some(local.resolve(raw, path, head_dim)?),
    ))
}

/// One layer type's RoPE as the config gives it: its parameters (default RoPE when absent),
/// the legacy scaling's keys to lay over them, and the `theta` when they name none.
struct LayerRope<'a> {
    params: Option<Value>,
    legacy: Option<&'a Value>,
    theta: f64,
}

impl LayerRope<'_> {
    /// The resolved RoPE, with `raw`'s lengths and partial rotation.
    fn resolve(self, raw: &RawConfig, path: &Path, head_dim: usize) -> Result<RopeConfig> {
        let LayerRope {
            params,
            legacy,
            theta,
        } = self;
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
            max_position_embeddings: raw.max_position_embeddings,
            original_max_position_embeddings: raw.original_max_position_embeddings,
            partial_rotary_factor: raw.partial_rotary_factor,
            ..RawConfig::default()
        }
        .resolve_rope(path, head_dim)
    }
}
