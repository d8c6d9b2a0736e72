//! The window of a config, read as transformers reads it for a family's [`WindowRule`]
//! (`sliding_window`, `use_sliding_window`, `max_window_layers`, `layer_types`,
//! `sliding_window_pattern`), and the check of `layer_types` the families share.

use std::path::Path;

use serde_json::Value;

use crate::sliding_window::{SlidingWindow, WindowLayers, WindowRule, WindowUse};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

/// The layer types `layer_types` may name.
const LAYER_TYPES: [&str; 2] = ["full_attention", "sliding_attention"];

/// The raw config fields a window is read from.
pub(crate) struct RawWindow<'a> {
    pub sliding_window: Option<&'a Value>,
    pub use_sliding_window: Option<bool>,
    pub max_window_layers: Option<usize>,
    pub layer_types: Option<&'a [String]>,
    pub sliding_window_pattern: Option<usize>,
}

/// The window of a config, as transformers reads it for a family with `rule`; `None` when
/// every layer attends to all earlier keys. `layer_types` naming sliding layers of a config
/// without a window (`use_sliding_window` false, `sliding_window` null), or absent where the
/// config class derives sliding layers (Gemma 2/3, GPT-OSS) with `sliding_window` null, is
/// refused: transformers has no window to build their mask with and refuses it too.
pub(crate) fn resolve(
    raw: RawWindow<'_>,
    rule: &WindowRule,
    num_layers: usize,
    path: &Path,
) -> Result<Option<SlidingWindow>> {
    let types = match rule.used {
        // Llama: transformers reads neither the window nor the layer types
        WindowUse::Never => return Ok(None),
        _ => checked_layer_types(raw.layer_types, num_layers, &LAYER_TYPES, path)?,
    };
    let used = match rule.used {
        WindowUse::WhenEnabled => raw.use_sliding_window == Some(true),
        _ => true,
    };
    let Some(size) = size(raw.sliding_window, rule, path)?.filter(|_| used) else {
        // without layer_types, Gemma 2/3 and GPT-OSS derive sliding layers whatever the window
        let derived = types.is_none()
            && used
            && matches!(
                rule.layers,
                WindowLayers::EveryOther | WindowLayers::AllButEvery(_)
            )
            && num_layers > 0;
        if derived {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::inconsistent(
                    &["sliding_window", "layer_types"],
                    "sliding_window is null but layer_types is absent, so the config class makes some layers sliding layers by its rule: there is no window to give them (transformers refuses it too); set layer_types or a window",
                ),
            ));
        }
        let sliding = types.is_some_and(|t| t.iter().any(|t| t == "sliding_attention"));
        if sliding && rule.layers != WindowLayers::All {
            let why = match used {
                true => "sliding_window is null",
                false => "use_sliding_window is not true",
            };
            let other = match used {
                true => "sliding_window",
                false => "use_sliding_window",
            };
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::inconsistent(
                    &["layer_types", other],
                    format!("layer_types names sliding_attention layers but {why}: there is no window to give them"),
                ),
            ));
        }
        return Ok(None);
    };
    let layers = windowed_layers(&raw, rule, types, num_layers);
    Ok((!layers.is_empty()).then_some(SlidingWindow { size, layers }))
}

/// The layers a window of `rule` slides on (0-based).
fn windowed_layers(
    raw: &RawWindow<'_>,
    rule: &WindowRule,
    types: Option<&[String]>,
    num_layers: usize,
) -> Vec<usize> {
    match (types, rule.layers) {
        // one sliding mask for every layer, layer_types or not
        (_, WindowLayers::All) => (0..num_layers).collect(),
        (Some(types), _) => (0..num_layers)
            .filter(|&l| types[l] == "sliding_attention")
            .collect(),
        (None, WindowLayers::EveryOther) => (0..num_layers).step_by(2).collect(),
        (None, WindowLayers::Listed) => Vec::new(),
        (None, WindowLayers::AllButEvery(default)) => {
            let pattern = raw.sliding_window_pattern.unwrap_or(default).max(1);
            (0..num_layers).filter(|l| (l + 1) % pattern != 0).collect()
        }
        // Qwen2Config's max_window_layers defaults to 28
        (None, WindowLayers::FromMaxWindowLayers) => {
            (raw.max_window_layers.unwrap_or(28)..num_layers).collect()
        }
    }
}

/// `layer_types`, checked: one of the `supported` types per layer.
pub(crate) fn checked_layer_types<'a>(
    types: Option<&'a [String]>,
    num_layers: usize,
    supported: &[&str],
    path: &Path,
) -> Result<Option<&'a [String]>> {
    let Some(types) = types else { return Ok(None) };
    if types.len() != num_layers {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["layer_types", "num_hidden_layers"],
                format!(
                    "layer_types has {} entries for num_hidden_layers {num_layers}",
                    types.len()
                ),
            ),
        ));
    }
    if let Some(other) = types.iter().find(|t| !supported.contains(&t.as_str())) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::unsupported("layer_types", other, supported.join(", ")),
        ));
    }
    Ok(Some(types))
}

/// `sliding_window`: a positive integer, none when null, the family's default when absent.
fn size(value: Option<&Value>, rule: &WindowRule, path: &Path) -> Result<Option<usize>> {
    super::positive_or_null(value, "sliding_window", rule.default_size, path)
}
