//! A GGUF file's model: the family that reads its `general.architecture` (the first in the
//! table whose GGUF rules name it), its tensors and metadata read with that family's rules
//! (`crate::gguf`), and the config.json mirror of its metadata resolved as a config.json is,
//! a refusal naming the file's own keys beside the config.json keys they become.

use std::path::Path;

use super::{Family, ModelConfig, RawConfig};
use crate::gguf::{GgufFile, GgufSettings};
use crate::gguf_rules::GgufRules;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::rope::inverse_frequencies;

/// GGUF architectures (`general.architecture`) the loader maps, sorted, for error messages.
pub fn supported_architectures() -> String {
    Family::gguf_architectures()
}

/// Opens the GGUF file `path` and resolves its model's config.
pub fn open_gguf(path: &Path) -> Result<(GgufFile, ModelConfig)> {
    let (gguf, settings) = GgufFile::open(path, &|arch| family_of(path, arch))?;
    let config =
        resolve(path, settings).map_err(|e| crate::gguf_keys::name_sources(e, &gguf.meta()))?;
    Ok((gguf, config))
}

/// The `model_type` and GGUF rules of the family reading architecture `arch`; an error
/// for an architecture the loader does not map.
fn family_of(path: &Path, arch: &str) -> Result<(&'static str, &'static GgufRules)> {
    let (family, rules) = Family::of_gguf(arch).ok_or_else(|| {
        let supported = supported_architectures();
        let problem = CheckpointProblem::unsupported("general.architecture", arch, supported);
        Error::checkpoint_problem(path, problem)
    })?;
    Ok((family.name, rules))
}

/// Resolves the config.json mirror as a config.json is, then checks that the resolved RoPE
/// reproduces the rope_freqs factors it was recovered from.
fn resolve(path: &Path, settings: GgufSettings) -> Result<ModelConfig> {
    let raw = RawConfig::from_value(settings.raw, path, "cannot read the metadata")?;
    let config = raw.resolve(path)?;
    if let Some(recovered) = &settings.recovered {
        let got = inverse_frequencies(&config.rope, config.head_dim);
        crate::gguf_rope::check_resolved(path, recovered, &got)?;
    }
    Ok(config)
}
