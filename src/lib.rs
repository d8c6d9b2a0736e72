//! asa-analyze: attention analysis for transformer checkpoints, built around Affine-Scaled
//! Attention (arXiv 2602.23057) and the variants it is compared with.
//!
//! Layers: [`model`] loads checkpoints and runs the forward pass, [`attention`] holds the
//! one blocked attention path and every variant's math, [`hooks`] is the hook interface (the `Probe` trait),
//! [`export`] writes tidy tables, [`cli`] is the command line.

pub mod analysis;
pub mod attention;
pub mod cli;
pub mod corpus;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
pub mod export;
pub mod hooks;
pub mod input;
pub mod metrics;
pub mod mixer;
pub mod model;
pub mod nn;
pub mod paper;
pub mod parse_error;
pub mod plot;
pub mod profile;
pub mod report;
pub mod results;
pub mod stats;
pub mod train;

pub use error::{Error, Result};
