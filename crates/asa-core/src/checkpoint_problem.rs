//! What is wrong with a checkpoint, typed ([`CheckpointProblem`]): the message is made from
//! the fields, so a test or a caller (Python's `CheckpointError.tensor`, `.key`, `.problem`)
//! matches the variant and reads the tensor, key or shapes instead of parsing words.

/// A checkpoint's problem, as a value; [`crate::Error::Checkpoint`] names the file.
///
/// A setting (`key`) is a config.json key (dotted inside an object: `rope_parameters.factor`)
/// or a GGUF metadata key (`llama.block_count`), as the file spells it.
///
/// Its name ([`CheckpointProblem::name`], the variant's in snake case) comes with the variant
/// (strum's derives), and so does the list of them all, [`CheckpointProblem::NAMES`].
#[derive(
    Debug, Clone, PartialEq, Eq, thiserror::Error, strum::IntoStaticStr, strum::VariantNames,
)]
#[strum(serialize_all = "snake_case")]
pub enum CheckpointProblem {
    /// The path is not a checkpoint this tool reads (not a folder or a .gguf file, or a
    /// folder of several .gguf files), said in `detail`.
    #[error("{detail}")]
    NotACheckpoint { detail: String },
    /// A file the checkpoint needs is not there (`config.json`, the weights, a shard).
    #[error("{file} is missing{}", why(detail))]
    MissingFile { file: String, detail: String },
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
    /// A tensor's stored data cannot be read as the model needs it (its dtype, its bytes,
    /// values outside what it may hold), said in `detail`.
    #[error("tensor {tensor}: {detail}")]
    TensorData { tensor: String, detail: String },
    /// Stored tensors the config does not use (layers past `num_hidden_layers`, another
    /// variant's weights): what they change would be lost without a word.
    #[error("{} stored weights are not used by the config ({}); --ignore-unused-weights analyses it anyway", tensors.len(), first_few(tensors))]
    UnusedTensors { tensors: Vec<String> },
    /// A setting the model needs is absent.
    #[error("{key} is missing{}", why(detail))]
    MissingKey { key: String, detail: String },
    /// A setting holds a value of another type than it must (`expected` in words).
    #[error("{key} must be {expected}, got {got}")]
    WrongType {
        key: String,
        expected: String,
        got: String,
    },
    /// A setting's value is outside what the model allows (`expected` in words: `at least
    /// 1`, `in (0, 1]`).
    #[error("{key} {value} must be {expected}")]
    OutOfRange {
        key: String,
        value: String,
        expected: String,
    },
    /// Settings (or settings and tensors) that contradict each other, said in `detail`.
    #[error("{detail}")]
    Inconsistent { keys: Vec<String>, detail: String },
    /// A setting (`key`: a config key, a GGUF metadata key) has a value the loader does not
    /// implement; `supported` lists those it does, in words.
    #[error("{key} `{value}` is not implemented (supported: {supported})")]
    Unsupported {
        key: String,
        value: String,
        supported: String,
    },
    /// A combination of settings or tensors the loader does not implement (each value may
    /// be implemented alone), said in `detail`.
    #[error("{detail}")]
    Unimplemented { keys: Vec<String>, detail: String },
    /// Every layer is another mixer than attention: there is nothing to analyse.
    #[error("{detail}: there is no attention to analyse")]
    NoAttention { detail: String },
    /// A file is not a well-formed file of its format (a GGUF header, a weight map, a
    /// tokenizer), said in `detail`.
    #[error("{detail}")]
    Damaged { detail: String },
    /// The forward pass of finite weights gives NaN or infinite activations from `at` on.
    #[error("activations are NaN or infinite from {at} on, from finite weights: its settings overflow (--allow-nonfinite analyses it anyway, its metrics NaN)")]
    NonFinite { at: String },
}

/// The first three of `names`, then `...` where there are more.
fn first_few(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
    let more = if names.len() > 3 { ", ..." } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// ` ({detail})` where there is one.
fn why(detail: &str) -> String {
    match detail.is_empty() {
        true => String::new(),
        false => format!(" ({detail})"),
    }
}

impl CheckpointProblem {
    /// Every problem's name, in the order of the variants.
    pub const NAMES: &'static [&'static str] = <CheckpointProblem as strum::VariantNames>::VARIANTS;

    /// The variant's name in snake case (`missing_tensor`, `out_of_range`): what Python's
    /// `CheckpointError.problem` holds.
    pub fn name(&self) -> &'static str {
        self.into()
    }

    /// The tensor the problem is about.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            CheckpointProblem::MissingTensor { tensor }
            | CheckpointProblem::Shape { tensor, .. }
            | CheckpointProblem::TensorData { tensor, .. } => Some(tensor),
            CheckpointProblem::UnusedTensors { tensors } => tensors.first().map(String::as_str),
            _ => None,
        }
    }

    /// The setting the problem is about (a config or metadata key); the first one named
    /// where settings contradict each other.
    pub fn key(&self) -> Option<&str> {
        match self {
            CheckpointProblem::MissingKey { key, .. }
            | CheckpointProblem::WrongType { key, .. }
            | CheckpointProblem::OutOfRange { key, .. }
            | CheckpointProblem::Unsupported { key, .. } => Some(key),
            CheckpointProblem::Inconsistent { keys, .. }
            | CheckpointProblem::Unimplemented { keys, .. } => keys.first().map(String::as_str),
            _ => None,
        }
    }

    /// Every setting the problem names (one, or those that contradict each other).
    pub fn keys(&self) -> Vec<&str> {
        match self {
            CheckpointProblem::Inconsistent { keys, .. }
            | CheckpointProblem::Unimplemented { keys, .. } => {
                keys.iter().map(String::as_str).collect()
            }
            _ => self.key().into_iter().collect(),
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

    /// `key` is absent.
    pub fn missing_key(key: impl Into<String>) -> Self {
        CheckpointProblem::MissingKey {
            key: key.into(),
            detail: String::new(),
        }
    }

    /// `key` holds `got`, not a value of the type `expected` says.
    pub fn wrong_type(
        key: impl Into<String>,
        expected: impl Into<String>,
        got: impl std::fmt::Display,
    ) -> Self {
        CheckpointProblem::WrongType {
            key: key.into(),
            expected: expected.into(),
            got: got.to_string(),
        }
    }

    /// `key` holds `value`, outside what `expected` says.
    pub fn out_of_range(
        key: impl Into<String>,
        value: impl std::fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        CheckpointProblem::OutOfRange {
            key: key.into(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    /// `keys` contradict each other, as `detail` says.
    pub fn inconsistent(keys: &[&str], detail: impl Into<String>) -> Self {
        CheckpointProblem::Inconsistent {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            detail: detail.into(),
        }
    }

    /// `keys` together are not implemented, as `detail` says.
    pub fn unimplemented(keys: &[&str], detail: impl Into<String>) -> Self {
        CheckpointProblem::Unimplemented {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            detail: detail.into(),
        }
    }

    /// Tensor `tensor`'s data is not what the model can read, as `detail` says.
    pub fn tensor_data(tensor: impl Into<String>, detail: impl Into<String>) -> Self {
        CheckpointProblem::TensorData {
            tensor: tensor.into(),
            detail: detail.into(),
        }
    }

    /// The file is not well formed, as `detail` says.
    pub fn damaged(detail: impl Into<String>) -> Self {
        CheckpointProblem::Damaged {
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_made_from_the_fields() {
        let cases = [
            (
                CheckpointProblem::out_of_range("num_hidden_layers", 0, "at least 1"),
                "num_hidden_layers 0 must be at least 1",
            ),
            (
                CheckpointProblem::wrong_type("rope_theta", "a number", "\"x\""),
                "rope_theta must be a number, got \"x\"",
            ),
            (
                CheckpointProblem::missing_key("hidden_size"),
                "hidden_size is missing",
            ),
            (
                CheckpointProblem::MissingFile {
                    file: "config.json".into(),
                    detail: "the model's settings".into(),
                },
                "config.json is missing (the model's settings)",
            ),
            (
                CheckpointProblem::NoAttention {
                    detail: "every layer is a Mamba layer".into(),
                },
                "every layer is a Mamba layer: there is no attention to analyse",
            ),
        ];
        for (problem, says) in cases {
            assert_eq!(problem.to_string(), says);
        }
    }

    #[test]
    fn the_key_and_tensor_are_read_from_the_variant() {
        let both = CheckpointProblem::inconsistent(
            &["num_attention_heads", "num_key_value_heads"],
            "num_attention_heads 6 is not a multiple of num_key_value_heads 4",
        );
        assert_eq!(both.key(), Some("num_attention_heads"));
        assert_eq!(both.keys(), ["num_attention_heads", "num_key_value_heads"]);
        assert_eq!(both.name(), "inconsistent");
        let data = CheckpointProblem::tensor_data("w", "dtype I32");
        assert_eq!((data.tensor(), data.key()), (Some("w"), None));
        assert_eq!(
            CheckpointProblem::missing_key("llama.block_count").keys(),
            ["llama.block_count"]
        );
    }

    #[test]
    fn every_problem_has_its_snake_case_name_in_the_list() {
        let names = CheckpointProblem::NAMES;
        assert_eq!(names.len(), 15);
        assert_eq!(names[0], "not_a_checkpoint");
        assert!(names.contains(&"non_finite") && names.contains(&"out_of_range"));
        let problems = [
            CheckpointProblem::missing_key("k"),
            CheckpointProblem::out_of_range("k", 0, "at least 1"),
            CheckpointProblem::tensor_data("w", "dtype I32"),
        ];
        for problem in problems {
            assert!(names.contains(&problem.name()), "{}", problem.name());
        }
        assert_eq!(CheckpointProblem::missing_key("k").name(), "missing_key");
    }
}
