//! The `sink` fixture with other tensor names, and the weight map that names them back: for
//! the `--weight-map` tests of the library and of the command line.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};

use super::copy_fixture;

pub const MAP: &str = r#"{
    "model.layers.{l}.self_attn.sinks": "blocks.{l}.attn.sink_logits",
    "model.layers.{l}.self_attn.{p}.weight": "blocks.{l}.attn.{p}.w",
    "model.embed_tokens.weight": "wte.weight"
}"#;

/// The tensor names of `MAP`'s right-hand side, for a conventionally named tensor.
fn foreign_name(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    match parts.as_slice() {
        ["model", "layers", l, "self_attn", "sinks"] => format!("blocks.{l}.attn.sink_logits"),
        ["model", "layers", l, "self_attn", p, "weight"] => format!("blocks.{l}.attn.{p}.w"),
        ["model", "embed_tokens", "weight"] => "wte.weight".to_string(),
        _ => name.to_string(),
    }
}

/// The `sink` fixture with its sinks, attention projections and embedding renamed.
pub fn renamed_sink_fixture(dir: &Path) {
    copy_fixture("sink", dir);
    let file = dir.join("model.safetensors");
    let tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let renamed: HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(name, t)| (foreign_name(&name), t))
        .collect();
    assert!(renamed.contains_key("blocks.1.attn.sink_logits"));
    assert!(renamed.contains_key("blocks.0.attn.q_proj.w"));
    candle_core::safetensors::save(&renamed, &file).unwrap();
}
