//! Gemma 3 (text): Gemma 2's layout with per-head QK-norm scaled by (1 + w), no soft-caps
//! by default, five sliding layers to a global one, and separate RoPE parameters for the
//! sliding and the global layers.

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

/// Gemma3TextConfig caps nothing by default.
fn scalars(raw: &RawConfig, path: &Path, hidden_size: usize) -> Result<Option<GemmaSettings>> {
    gemma2::gemma_scalars(raw, path, hidden_size, (None, None))
}

/// Gemma 3's RoPE: `rope_parameters` keyed by layer type (`full_attention`,
/// `sliding_attention`), or the legacy `rope_theta` (global, default 1e6),
/// `rope_local_base_freq` (sliding, default 1e4) and `rope_scaling` (global only), as
/// Gemma3TextConfig reads them. Returns (global, sliding).
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    let nested = |key: &str| {
        raw.rope_parameters
            .as_ref()
            .and_then(|p| p.get(key))
            .filter(|v| !v.is_null())
            .cloned()
    };
    let global = one(
        raw,
        (nested("full_attention"), raw.rope_scaling.as_ref()),
        raw.rope_theta.unwrap_or(1_000_000.0),
        (path, head_dim),
    )?;
    let local = one(
        raw,
        (nested("sliding_attention"), None),
        raw.rope_local_base_freq.unwrap_or(10_000.0),
        (path, head_dim),
    )?;
    Ok((global, Some(local)))
}

/// One layer type's RoPE: its parameters (default RoPE when absent), the legacy scaling's
/// keys over them, and `theta` when they name none.
fn one(
    raw: &RawConfig,
    (params, legacy): (Option<Value>, Option<&Value>),
    theta: f64,
    (path, head_dim): (&Path, usize),
) -> Result<RopeConfig> {
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
