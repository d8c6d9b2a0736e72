//! The engine: checkpoints and model families ([`model`]), their layers ([`nn`], [`mixer`]),
//! the CPU kernels ([`cpu`]) and, with the `cuda` feature, the GPU ones (`cuda`), the one
//! blocked attention path with every variant's math ([`attention`]), and the interface a
//! probe reads attention through ([`hooks`]). Nothing here knows about metrics, tables or
//! runs: those crates sit above this one.

pub mod attention;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod hooks;
pub mod mixer;
pub mod model;
pub mod nn;
