//! Mistral: the Llama layout with a sliding window (`sliding_window`) on every layer,
//! whatever `layer_types` says (transformers builds one sliding mask for all layers).

use super::llama;
use crate::config::family::Family;
use crate::sliding_window::{WindowLayers, WindowRule, WindowUse};

/// A window on every layer when `sliding_window` is set (Mixtral and Phi-3 too; their
/// config classes default it to null).
pub(crate) const WINDOW: WindowRule = WindowRule {
    used: WindowUse::Always,
    default_size: None,
    layers: WindowLayers::All,
};

pub(crate) const FAMILY: Family = Family {
    name: "mistral",
    // MistralConfig's sliding_window defaults to 4096 (null turns it off)
    window: WindowRule {
        default_size: Some(4096),
        ..WINDOW
    },
    ..llama::FAMILY
};
