//! The base every other crate of asa-analyze stands on: the one error type and its kinds,
//! parse errors of option values, reading user files with a size limit, the memory the host
//! still lets the process take, running out of it, per-phase timing, the robust statistics
//! (median, MAD, moments) that metrics and training logs share, and the names of the
//! attention variants.

pub mod checkpoint_problem;
pub mod error;
pub mod guarded;
pub mod host_memory;
pub mod input;
pub mod out_of_memory;
pub mod parse_error;
pub mod profile;
pub mod robust;
pub mod run_facts;
pub mod variant;

pub use checkpoint_problem::CheckpointProblem;
pub use error::{Error, ErrorKind, InputKind, Result};
pub use variant::VariantKind;
