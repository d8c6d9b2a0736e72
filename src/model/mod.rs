//! Checkpoints: config.json, weights, variant detection, and the decoder they build.

pub mod config;
mod decoder;
mod detect;
pub mod layers;
pub mod rope;
pub mod weights;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

pub use config::{Architecture, ModelConfig};
pub use decoder::Model;
pub use detect::{detect_variant, DetectedVariant};
pub use weights::WeightStore;

use crate::error::Result;

/// A checkpoint folder opened for analysis: config, weights, detected variant.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub variant: DetectedVariant,
    pub store: WeightStore,
}

impl Checkpoint {
    /// Opens `dir` (config.json + safetensors), weights cast to `dtype` on `device` when loaded.
    pub fn open(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        if !dir.is_dir() {
            return Err(crate::error::Error::input(
                dir,
                "not a checkpoint folder (no such directory)",
            ));
        }
        let config = ModelConfig::from_dir(dir)?;
        let store = WeightStore::open(dir, device, dtype)?;
        let variant = detect_variant(&config, &store);
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            config,
            variant,
            store,
        })
    }

    /// Builds the model (loads every tensor).
    pub fn load_model(&self) -> Result<Model> {
        Model::load(&self.store, &self.config, self.variant.kind)
    }

    /// Checks that every tensor the model needs exists with the right shape, reading no data.
    pub fn validate(self) -> Result<Self> {
        let Checkpoint {
            dir,
            config,
            variant,
            store,
        } = self;
        let store = store.shapes_only();
        Model::load(&store, &config, variant.kind)?;
        Ok(Checkpoint {
            dir,
            config,
            variant,
            store: store.with_data(),
        })
    }

    /// Parameters the variant adds to the plain architecture (the paper's "Delta Params").
    pub fn delta_params(&self) -> usize {
        let c = &self.config;
        let per_layer = match self.variant.kind {
            crate::attention::VariantKind::Sink => c.num_heads,
            crate::attention::VariantKind::AffineScaled => self.alpha_params(),
            crate::attention::VariantKind::Gated => c.num_heads * c.head_dim * c.hidden_size,
            crate::attention::VariantKind::AffineScaledGated => {
                self.alpha_params() + c.num_heads * c.head_dim * c.hidden_size
            }
            _ => 0,
        };
        per_layer * c.num_layers
    }

    fn alpha_params(&self) -> usize {
        let c = &self.config;
        let bias = self
            .store
            .contains("model.layers.0.self_attn.alpha_proj.bias");
        c.num_heads * c.hidden_size + if bias { c.num_heads } else { 0 }
    }

    /// Total stored parameters (buffers such as alpha_ma excluded).
    pub fn parameter_count(&self) -> usize {
        self.store
            .tensors()
            .iter()
            .filter(|(name, _, _)| !name.ends_with("alpha_ma"))
            .map(|(_, shape, _)| shape.iter().product::<usize>())
            .sum()
    }
}
