//! Helpers of asa-models' tests.

pub mod reference_files;
