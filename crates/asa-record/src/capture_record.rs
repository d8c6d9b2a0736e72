//! What run.json records of a model captured through its own forward pass (`asa.capture`):
//! its class, the transformers version and each attention module (asa-analysis captures).

use serde::{Deserialize, Serialize};

/// One attention module of a captured model, as run.json names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedModule {
    /// Its qualified name in the model (`model.layers.3.self_attn`).
    pub name: String,
    /// 1-based: 1 + the first integer in its name (decoder numbering).
    pub layer: usize,
    /// The keys a query sees (`KeyWindow`'s words: causal, sliding window of w keys, ...).
    pub keys: String,
    /// Its logits' soft-cap, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub softcap: Option<f64>,
    /// It has learnable sink logits (`module.sinks`, GPT-OSS).
    pub sinks: bool,
}

/// What run.json records of a capture: the model's class, the transformers version, and
/// each attention module captured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureRecord {
    pub model_class: String,
    /// The stack captured in a model of several (`language_model`); none for one stack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<String>,
    pub transformers_version: String,
    /// Forward passes captured.
    pub forward_passes: usize,
    pub modules: Vec<CapturedModule>,
}
