//! Sliding-window attention as transformers configures it (Mistral's and Phi-3's `sliding_window`,
//! Qwen2/Qwen3's `use_sliding_window` with `max_window_layers` or `layer_types`): query i
//! of a windowed layer sees the keys j with i - j < size (transformers'
//! `sliding_window_overlay`: `kv_idx > q_idx - sliding_window`).
//!
//! Mistral, Mixtral and Phi-3 slide on every layer whatever `layer_types` says (their
//! transformers models build one sliding mask for all layers); Qwen2/Qwen3 slide on the
//! layers their `layer_types` (or `max_window_layers`) name. The kernels mask by
//! [`KeyWindow`]; a window at least as long as the sequence changes nothing.

use std::path::Path;

use serde_json::Value;

use super::config::Architecture;
use crate::error::{Error, Result};
use crate::probe::KeyWindow;

/// The layer types `layer_types` may name.
const LAYER_TYPES: &str = "full_attention, sliding_attention";

/// A sliding window and the layers that use it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SlidingWindow {
    /// Keys a query sees, itself included.
    pub size: usize,
    /// The windowed layers, 0-based.
    pub layers: Vec<usize>,
}

/// The raw config fields a window is read from.
pub(crate) struct RawWindow<'a> {
    pub sliding_window: Option<&'a Value>,
    pub use_sliding_window: Option<bool>,
    pub max_window_layers: Option<usize>,
    pub layer_types: Option<&'a [String]>,
    pub sliding_window_pattern: Option<usize>,
}

impl SlidingWindow {
    /// The keys each query of layer `layer` (0-based) sees.
    pub fn of_layer(&self, layer: usize) -> KeyWindow {
        match self.layers.contains(&layer) {
            true => KeyWindow::sliding(self.size),
            false => KeyWindow::CAUSAL,
        }
    }

    /// The windowed layers, 1-based, e.g. "1-2" or "2, 4".
    pub fn describe_layers(&self) -> String {
        let first = self.layers.first().copied().unwrap_or(0);
        let contiguous = self.layers.iter().enumerate().all(|(k, &l)| l == first + k);
        match (contiguous, self.layers.len()) {
            (true, 1) => format!("{}", first + 1),
            (true, n) => format!("{}-{}", first + 1, first + n),
            _ => self
                .layers
                .iter()
                .map(|l| (l + 1).to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The window of a config, as transformers reads it for `architecture`; `None` when every
/// layer attends to all earlier keys.
pub(crate) fn resolve(
    raw: RawWindow<'_>,
    architecture: Architecture,
    num_layers: usize,
    path: &Path,
) -> Result<Option<SlidingWindow>> {
    let types = match raw.layer_types {
        None => None,
        Some(types) => {
            if types.len() != num_layers {
                return Err(Error::input(
                    path,
                    format!(
                        "layer_types has {} entries for num_hidden_layers {num_layers}",
                        types.len()
                    ),
                ));
            }
            if let Some(other) = types
                .iter()
                .find(|t| !matches!(t.as_str(), "full_attention" | "sliding_attention"))
            {
                return Err(Error::input(
                    path,
                    format!("layer type `{other}` is not implemented (supported: {LAYER_TYPES})"),
                ));
            }
            Some(types)
        }
    };
    // transformers drops the window of a Qwen config without use_sliding_window, and Llama
    // has none
    let used = match architecture {
        Architecture::Mistral | Architecture::Phi3 | Architecture::Mixtral => true,
        Architecture::Qwen2 | Architecture::Qwen3 | Architecture::Qwen3Moe => {
            raw.use_sliding_window == Some(true)
        }
        Architecture::Gemma2 | Architecture::Gemma3Text | Architecture::GptOss => true,
        Architecture::Llama | Architecture::GptNeox | Architecture::Olmo2 | Architecture::Gpt2 => {
            false
        }
    };
    let size = match raw.sliding_window {
        // Gemma2Config's default
        None if matches!(
            architecture,
            Architecture::Gemma2 | Architecture::Gemma3Text
        ) =>
        {
            Some(4096)
        }
        // GptOssConfig's default
        None if architecture == Architecture::GptOss => Some(128),
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(size) if size >= 1 => Some(size as usize),
            _ => {
                return Err(Error::input(
                    path,
                    format!("sliding_window {v} must be a positive integer or null"),
                ))
            }
        },
    };
    let Some(size) = size.filter(|_| used) else {
        if raw.use_sliding_window == Some(true) && used {
            return Err(Error::input(
                path,
                "use_sliding_window is true but sliding_window is not set",
            ));
        }
        return Ok(None);
    };
    let layers: Vec<usize> = match (types, architecture) {
        // one sliding mask for every layer, layer_types or not
        (_, Architecture::Mistral | Architecture::Phi3 | Architecture::Mixtral) => {
            (0..num_layers).collect()
        }
        (Some(types), _) => (0..num_layers)
            .filter(|&l| types[l] == "sliding_attention")
            .collect(),
        // Gemma2Config and GptOssConfig: layer i slides when i is even
        (None, Architecture::Gemma2 | Architecture::GptOss) => (0..num_layers).step_by(2).collect(),
        // Gemma3TextConfig: every layer but each `sliding_window_pattern`-th (default 6)
        (None, Architecture::Gemma3Text) => {
            let pattern = raw.sliding_window_pattern.unwrap_or(6).max(1);
            (0..num_layers).filter(|l| (l + 1) % pattern != 0).collect()
        }
        // Qwen2Config: layer i slides when i >= max_window_layers
        (None, _) => (raw.max_window_layers.unwrap_or(num_layers)..num_layers).collect(),
    };
    Ok((!layers.is_empty()).then_some(SlidingWindow { size, layers }))
}
