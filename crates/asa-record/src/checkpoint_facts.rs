//! What the paper's tables read of a checkpoint (its attention variant, its parameters), from
//! whoever holds the model code: asa-analysis' `ModelCheckpoints` answers with asa-models,
//! so that the figures, which ask, build without it (a family's edit rebuilds no figure).

use std::path::Path;

use asa_core::error::Result;

/// A reader of checkpoints for the tables; `spec` is a checkpoint folder, GGUF file or Hub id.
pub trait CheckpointFacts {
    /// The checkpoint's attention variant by name (`affine_scaled`) and where it was read
    /// (`config.json attention_variant`).
    fn variant(&self, spec: &Path) -> Result<(String, String)>;

    /// Its stored parameters, and those its variant adds.
    fn parameters(&self, spec: &Path) -> Result<(usize, usize)>;
}
