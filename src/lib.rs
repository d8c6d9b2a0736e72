//! asa-analyze: attention analysis for transformer checkpoints, built around Affine-Scaled
//! Attention (arXiv 2602.23057) and the variants it is compared with.
//!
//! This crate is the command line ([`cli`]) and the one place that names every layer; each
//! layer is a crate of its own (docs/architecture.md), re-exported here under its module
//! names so that `asa_analyze::model`, `asa_analyze::metrics`, ... read as one library:
//!
//! - `asa-core`: [`error`], [`checkpoint_problem`], [`input`], [`parse_error`], [`profile`], [`host_memory`], [`robust`];
//! - `asa-kernels`: [`kernels`] (CPU, and CUDA with the `cuda` feature); `asa-hooks`: [`hooks`];
//! - `asa-engine`: [`nn`], [`attention`], [`mixer`], [`device`]; `asa-models`: [`model`];
//! - `asa-tables`: [`export`]; `asa-logs`: [`stats`]; `asa-metrics`: [`metrics`];
//! - `asa-record`: run.json as types (`analysis::record`, `analysis::shard`);
//! - `asa-analysis`: [`analysis`], [`corpus`], [`train`];
//! - `asa-figures`: [`plot`], [`paper`], [`report`].

pub mod cli;
pub mod results;

pub use asa_analysis::{analysis, corpus, train};
pub use asa_core::{
    checkpoint_problem, error, host_memory, input, out_of_memory, parse_error, profile, robust,
};
pub use asa_engine::{attention, device, mixer, nn};
pub use asa_figures::{paper, plot, report};
pub use asa_hooks as hooks;
pub use asa_kernels as kernels;
pub use asa_logs as stats;
pub use asa_metrics as metrics;
pub use asa_models as model;
pub use asa_tables as export;

pub use error::{Error, Result};
