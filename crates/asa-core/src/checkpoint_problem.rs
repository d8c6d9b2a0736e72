//! What is wrong with a checkpoint, typed ([`CheckpointProblem`]): the message is made from
//! the fields, so a test or a caller (Python's `CheckpointError.tensor`) matches the variant
//! and reads the tensor, key or shapes instead of parsing words.

/// A checkpoint's problem, as a value; [`crate::Error::Checkpoint`] names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointProblem {
    /// A tensor the model needs is not stored (`tensor` as the checkpoint names it, with
    /// its GGUF name where the file is GGUF).
    #[error("tensor {tensor} is missing")]
    MissingTensor { tensor: String },
    /// A tensor is stored with another shape than the config implies.
    #[error("tensor {tensor} has shape {got:?}, expected {expected:?}")]
    Shape {
        tensor: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// A setting (`key`: a config key, a GGUF metadata key) has a value the loader does not
    /// implement; `supported` lists those it does, in words.
    #[error("{key} `{value}` is not implemented (supported: {supported})")]
    Unsupported {
        key: String,
        value: String,
        supported: String,
    },
}

impl CheckpointProblem {
    /// The tensor the problem is about.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            CheckpointProblem::MissingTensor { tensor }
            | CheckpointProblem::Shape { tensor, .. } => Some(tensor),
            CheckpointProblem::Unsupported { .. } => None,
        }
    }

    /// The setting the problem is about (a config or metadata key).
    pub fn key(&self) -> Option<&str> {
        match self {
            CheckpointProblem::Unsupported { key, .. } => Some(key),
            _ => None,
        }
    }

    /// `key` set to `value`, which is not one of `supported`.
    pub fn unsupported(
        key: impl Into<String>,
        value: impl std::fmt::Display,
        supported: impl Into<String>,
    ) -> Self {
        CheckpointProblem::Unsupported {
            key: key.into(),
            value: value.to_string(),
            supported: supported.into(),
        }
    }
}
