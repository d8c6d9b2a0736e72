//! A tokenizer.json read as every command reads one: capped (`asa_core::input::TOKENIZER`),
//! and parsed with the tokenizers crate's panics on a damaged file caught
//! ([`asa_core::guarded`]: it `expect`s a decoder it cannot read).

use std::path::Path;

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};
use tokenizers::Tokenizer;

/// The tokenizer in `path`; a damaged file is an error naming it.
pub fn read_tokenizer(path: &Path) -> Result<Tokenizer> {
    let bytes = asa_core::input::read_bytes(path, asa_core::input::TOKENIZER)?;
    asa_core::guarded::catch_panic(
        || {
            Tokenizer::from_bytes(bytes).map_err(|e| {
                Error::invalid(path, "invalid tokenizer.json", e).about(InputKind::Checkpoint)
            })
        },
        || {
            Error::checkpoint_problem(
                path,
                CheckpointProblem::damaged(
                    "invalid tokenizer.json: the file is damaged (its reader could not parse it)",
                ),
            )
        },
    )
}
