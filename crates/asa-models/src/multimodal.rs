//! The text model of a multimodal checkpoint: Gemma 3 (`model_type` gemma3,
//! Gemma3ForConditionalGeneration), whose `text_config` is a gemma3_text config written
//! without the values equal to Gemma3TextConfig's defaults, and whose language model's
//! tensors are stored under `language_model.model.` (as `save_pretrained` writes them) or
//! `model.language_model.` (transformers' module names). Its vision tower and projector are
//! not read; the attention analysed is the text model's, on text input.

use std::path::Path;

use serde_json::{json, Value};

use super::weight_map::WeightMap;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

/// The `model_type`s read this way.
const WRAPPERS: [&str; 1] = ["gemma3"];

/// Gemma3TextConfig's defaults for what a nested `text_config` omits.
fn gemma3_text_defaults() -> Value {
    json!({
        "vocab_size": 262_208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131_072,
        "rms_norm_eps": 1e-6,
        "query_pre_attn_scalar": 256,
        "sliding_window": 4096,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "pad_token_id": 0,
    })
}

/// The text model's config of a multimodal config.json (`None` for any other): its
/// `text_config` as a gemma3_text config, Gemma3TextConfig's defaults where it is silent,
/// the top level's `tie_word_embeddings` (default true) and special tokens when it has none.
pub fn text_config(config: &Value, path: &Path) -> Result<Option<Value>> {
    let model_type = config.get("model_type").and_then(Value::as_str);
    if !model_type.is_some_and(|t| WRAPPERS.contains(&t)) {
        return Ok(None);
    }
    let Some(Value::Object(text)) = config.get("text_config") else {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::MissingKey {
                key: "text_config".into(),
                detail: "model_type gemma3 (multimodal) needs its text model's object".into(),
            },
        ));
    };
    let mut text = text.clone();
    if let Some(t) = text.get("model_type").and_then(Value::as_str) {
        if t != "gemma3_text" {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported("text_config.model_type", t, "gemma3_text"),
            ));
        }
    }
    text.insert("model_type".into(), json!("gemma3_text"));
    for key in [
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ] {
        if let (false, Some(v)) = (text.contains_key(key), config.get(key)) {
            text.insert(key.into(), v.clone());
        }
    }
    text.entry("tie_word_embeddings").or_insert(json!(true));
    if let Value::Object(defaults) = gemma3_text_defaults() {
        for (key, value) in defaults {
            text.entry(key).or_insert(value);
        }
    }
    Ok(Some(Value::Object(text)))
}

/// The stored names of the language model's tensors (both prefixes) as the loader's.
pub fn weight_map() -> WeightMap {
    let mut maps = Vec::new();
    for prefix in ["language_model.model.", "model.language_model."] {
        for rest in [
            "embed_tokens.weight",
            "norm.weight",
            "layers.{l}.{a}.{p}",
            "layers.{l}.{a}.{b}.{p}",
        ] {
            maps.push(json!({ format!("model.{rest}"): format!("{prefix}{rest}") }));
        }
    }
    maps.push(json!({"lm_head.weight": "language_model.lm_head.weight"}));
    maps.into_iter()
        .map(|m| {
            WeightMap::parse(&m.to_string(), Path::new("the built-in multimodal names"))
                .expect("the built-in multimodal weight map is valid")
        })
        .fold(WeightMap::default(), |all, one| all.or_else(&one))
}

/// Whether a stored tensor belongs to the vision side (not read, not "unused").
pub fn is_vision_weight(name: &str) -> bool {
    ["vision_tower.", "multi_modal_projector."]
        .iter()
        .any(|p| name.starts_with(p) || name.starts_with(&format!("model.{p}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_text_config_takes_gemma3_text_defaults() {
        let path = Path::new("config.json");
        let config = json!({
            "model_type": "gemma3",
            "eos_token_id": [1, 106],
            "text_config": {"hidden_size": 2560, "num_hidden_layers": 34, "sliding_window": 1024},
        });
        let text = text_config(&config, path).unwrap().unwrap();
        assert_eq!(text["model_type"], "gemma3_text");
        assert_eq!(text["hidden_size"], 2560);
        assert_eq!(text["sliding_window"], 1024);
        assert_eq!(text["head_dim"], 256);
        assert_eq!(text["vocab_size"], 262_208);
        assert_eq!(text["eos_token_id"], json!([1, 106]));
        assert_eq!(text["tie_word_embeddings"], true);
        assert!(text_config(&json!({"model_type": "llama"}), path)
            .unwrap()
            .is_none());
        let err = text_config(&json!({"model_type": "gemma3"}), path).unwrap_err();
        assert_eq!(err.problem().and_then(|p| p.key()), Some("text_config"));
        assert_eq!(err.problem().map(|p| p.name()), Some("missing_key"));
        assert!(is_vision_weight(
            "vision_tower.vision_model.post_layernorm.weight"
        ));
        assert!(is_vision_weight(
            "model.multi_modal_projector.mm_input_projection_weight"
        ));
        assert!(!is_vision_weight("language_model.model.norm.weight"));
    }
}
