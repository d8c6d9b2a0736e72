//! The names a family's checkpoints give their tensors, as the loader reads them: its
//! built-in weight map (`Family::weight_names`) and the stored names transformers skips.

use super::Architecture;
use crate::weight_map::WeightMap;

/// The tensor names of `architecture`'s checkpoints as the names the loader reads (the
/// Llama conventions, `self_attn.qkv_proj` for a fused projection): a built-in weight
/// map, empty for the Llama layout.
pub fn builtin_weight_map(architecture: Architecture) -> WeightMap {
    let rules = expand_base_prefix(architecture.family().weight_names);
    // one map a rule: a JSON object cannot hold one convention name twice
    let mut maps = Vec::new();
    for (convention, stored) in &rules {
        let json = serde_json::json!({ convention: stored }).to_string();
        let what = format!("the built-in {} names", architecture.name());
        maps.push(
            WeightMap::parse(&json, std::path::Path::new(&what))
                .expect("the built-in weight maps are valid"),
        );
    }
    maps.into_iter()
        .fold(WeightMap::default(), |all, one| all.or_else(&one))
}

/// `{b}`: each rule twice, with the base model's prefix (`transformer.`) and without.
fn expand_base_prefix(rules: &[(&str, &str)]) -> Vec<(String, String)> {
    rules
        .iter()
        .flat_map(|(c, s)| match s.contains("{b}") {
            true => vec![
                (c.to_string(), s.replace("{b}", "transformer.")),
                (c.to_string(), s.replace("{b}", "")),
            ],
            false => vec![(c.to_string(), s.to_string())],
        })
        .collect()
}

/// Endings of stored names transformers skips on load for `architecture` (old GPT-NeoX
/// files keep their causal-mask and RoPE buffers): not weights the config leaves unused.
pub fn ignored_on_load(architecture: Architecture) -> &'static [&'static str] {
    architecture.family().ignored_on_load
}
