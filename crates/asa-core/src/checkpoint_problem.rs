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
}

impl CheckpointProblem {
    /// The tensor the problem is about.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            CheckpointProblem::MissingTensor { tensor }
            | CheckpointProblem::Shape { tensor, .. } => Some(tensor),
        }
    }
}
