//! Gemma 3 (text): Gemma 2's layout with per-head QK-norm scaled by (1 + w), no soft-caps
//! by default (and no attention soft-cap at all, as transformers computes it), five sliding
//! layers to a global one, and separate RoPE parameters for the sliding and the global
//! layers.

use std::path::Path;

use serde_json::Value;

use super::gemma2;
use crate::error::Result;
use crate::model::config::family::{Family, Ropes};
use crate::model::config::{GemmaSettings, RawConfig};
use crate::model::rope::RopeConfig;
use crate::model::sliding_window::{WindowLayers, WindowRule};

pub(crate) const FAMILY: Family = Family {
    name: "gemma3_text",
    qk_norm: true,
    rope,
    window: WindowRule {
        // Gemma3TextConfig: every layer but each `sliding_window_pattern`-th
        layers: WindowLayers::AllButEvery(6),
        ..gemma2::FAMILY.window
    },
    scalars,
    ..gemma2::FAMILY
};

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

/// Gemma 3's RoPE: `rope_parameters` keyed by layer type (`full_attention`,
/// `sliding_attention`), or the legacy `rope_theta` (global, default 1e6),
/// `rope_local_base_freq` (sliding, default 1e4) and `rope_scaling` (global only), as
/// Gemma3TextConfig reads them. Returns (global, sliding).
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    let thetas = (
        raw.rope_theta.unwrap_or(1_000_000.0),
        raw.rope_local_base_freq.unwrap_or(10_000.0),
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
