//! The paper tables' reader of checkpoints ([`ModelCheckpoints`]): asa-figures asks through
//! the `CheckpointFacts` trait (asa-record), and this crate, which holds the model code,
//! answers with asa-models, so that the figures build without it.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use super::hub_cache::{self, HubModel};
use asa_core::error::{Error, Result};
use asa_models::Checkpoint;
use asa_record::checkpoint_facts::CheckpointFacts;

/// Checkpoints opened with asa-models (headers and shapes only), Hub ids through the local
/// cache as the metric commands take them.
pub struct ModelCheckpoints;

impl CheckpointFacts for ModelCheckpoints {
    fn variant(&self, spec: &Path) -> Result<(String, String)> {
        let ckpt = open_checkpoint(spec)?;
        Ok((
            ckpt.variant.kind.name().to_string(),
            ckpt.variant.source.to_string(),
        ))
    }

    fn parameters(&self, spec: &Path) -> Result<(usize, usize)> {
        let ckpt = open_checkpoint(spec)?;
        Ok((ckpt.parameter_count(), ckpt.delta_params()))
    }
}

/// A checkpoint path or Hub id, as the metric commands take it.
fn checkpoint_dir(spec: &Path) -> Result<PathBuf> {
    match hub_cache::resolve(spec)? {
        Some(HubModel::Checkpoint(dir)) => Ok(dir),
        Some(HubModel::Series(_)) => Err(Error::usage(format!(
            "{}: a table row takes one checkpoint (one revision)",
            spec.display()
        ))),
        None => Ok(spec.to_path_buf()),
    }
}

/// Opens a checkpoint (headers and shapes only).
fn open_checkpoint(spec: &Path) -> Result<Checkpoint> {
    Checkpoint::open(&checkpoint_dir(spec)?, &Device::Cpu, DType::F32)?.validate()
}
