//! Sliding-window attention as transformers configures it (Mistral's, Mixtral's and Phi-3's
//! `sliding_window`, Qwen2/Qwen3's `use_sliding_window` with `max_window_layers` or
//! `layer_types`, Qwen3-MoE's `use_sliding_window`): query i of a windowed layer sees the keys
//! j with i - j < size (transformers' `sliding_window_overlay`: `kv_idx > q_idx - sliding_window`).
//!
//! Mistral, Mixtral, Phi-3 and Qwen3-MoE slide on every layer whatever `layer_types` says
//! (their transformers models build one sliding mask for all layers; Qwen3MoeConfig has no
//! `max_window_layers`); Qwen2/Qwen3, Gemma and GPT-OSS slide on the layers their
//! `layer_types` (or the config class's rule) name. The kernels mask by [`KeyWindow`]; a
//! window at least as long as the sequence changes nothing. A config's window is read by
//! `config::sliding_window` with its family's [`WindowRule`].

use asa_hooks::KeyWindow;

/// A sliding window and the layers that use it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SlidingWindow {
    /// Keys a query sees, itself included.
    pub size: usize,
    /// The windowed layers, 0-based.
    pub layers: Vec<usize>,
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

/// Whether a family's layers slide at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowUse {
    /// No window, whatever the config says (Llama: transformers has none).
    Never,
    /// When `sliding_window` is set (Mistral, Gemma).
    Always,
    /// When `use_sliding_window` is true too (transformers drops the window of a Qwen config
    /// without it; `sliding_window` absent is then the config class's default, 4096).
    WhenEnabled,
}

/// Which layers slide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowLayers {
    /// Every layer, whatever `layer_types` says (one sliding mask for all layers: Mistral,
    /// Mixtral, Phi-3, Qwen3-MoE).
    All,
    /// Those `layer_types` names, else layer i when i >= `max_window_layers` (Qwen2Config;
    /// 28 when absent).
    FromMaxWindowLayers,
    /// Those `layer_types` names, else layer i when i is even (Gemma2Config, GptOssConfig).
    EveryOther,
    /// Those `layer_types` names, else every layer but each `sliding_window_pattern`-th,
    /// this one when absent (Gemma3TextConfig, Olmo3Config's 4).
    AllButEvery(usize),
    /// Those `layer_types` names, none without them (SmolLM3: its family refuses a window
    /// it would derive otherwise).
    Listed,
}

/// A family's window rules (`crate::config::Family::window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRule {
    pub used: WindowUse,
    /// The window when `sliding_window` is absent (the config class's default).
    pub default_size: Option<usize>,
    pub layers: WindowLayers,
}
