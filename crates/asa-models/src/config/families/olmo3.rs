//! OLMo 3: OLMo 2's layout (norms after attention and MLP, QK-norm over the whole q and k
//! projections) with sliding-window layers by `layer_types` (else three sliding layers to
//! a full one, Olmo3Config's rule; window 4096 by default) and RoPE parameters keyed by
//! layer type (`rope_theta` 5e5 by default).

use std::path::Path;

use super::{gemma3, olmo2};
use crate::config::family::{Family, Ropes};
use crate::config::RawConfig;
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};
use asa_core::error::Result;

pub(crate) const FAMILY: Family = Family {
    name: "olmo3",
    rope,
    window: WindowRule {
        used: WindowUse::Always,
        default_size: Some(4096),
        layers: WindowLayers::AllButEvery(4),
    },
    ..olmo2::FAMILY
};

/// Olmo3Config: both layer types default to `rope_theta` (5e5).
fn rope(raw: &RawConfig, path: &Path, head_dim: usize) -> Result<Ropes> {
    let theta = raw.rope_theta.unwrap_or(500_000.0);
    gemma3::typed_rope(raw, path, head_dim, (theta, theta))
}
