//! Writing a checkpoint in Hugging Face layout: `config.json` (naming the variant),
//! `model.safetensors` (f32, parameters and the alpha_ma buffers), `tokenizer.json` and
//! `trainer_state.json` (`global_step`). The folder appears all at once (written under a
//! temporary name, then renamed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use serde_json::{json, Value};

use super::Trainer;
use asa_core::error::{Error, Result};

/// Writes `trainer`'s current weights to `dir` (replacing it), with `config` as config.json
/// and a copy of `tokenizer` (tokenizer.json).
pub fn save(trainer: &Trainer, config: &Value, tokenizer: &Path, dir: &Path) -> Result<PathBuf> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "checkpoint".into());
    let tmp = parent.join(format!(".{name}.tmp"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let tensors: HashMap<String, candle_core::Tensor> = trainer
        .tensors()?
        .into_iter()
        .map(|(n, t)| Ok((n, t.to_dtype(DType::F32)?.to_device(&Device::Cpu)?)))
        .collect::<Result<_>>()?;
    let weights = tmp.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights)
        .map_err(|e| Error::invalid(&weights, "cannot write weights", e))?;
    write_json(&tmp.join("config.json"), config)?;
    write_json(
        &tmp.join("trainer_state.json"),
        &json!({ "global_step": trainer.steps_done() }),
    )?;
    let tok = tmp.join("tokenizer.json");
    std::fs::copy(tokenizer, &tok).map_err(|e| Error::io(tokenizer, e))?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::rename(&tmp, dir).map_err(|e| Error::io(dir, e))?;
    Ok(dir.to_path_buf())
}

/// Writes pretty JSON.
pub fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("json");
    std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
}
