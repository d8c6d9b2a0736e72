//! The engine: the layers a model is built from ([`nn`], the hybrid models' [`mixer`]s) and
//! the one blocked attention path with every variant's math ([`attention`]), on the kernels
//! (`asa-kernels`) and the probe interface (`asa-hooks`) below it; [`device`] is the device
//! and dtype choice. Nothing here knows about checkpoints or families (`asa-models`), nor
//! about metrics, tables or runs: those crates sit above this one.
//!
//! Within the crate the modules are layered too, each using only those below it:
//! `nn` < `attention` < `mixer` (`device` beside them).

pub mod attention;
pub mod device;
pub mod mixer;
pub mod nn;
