//! The engine: checkpoints and model families ([`model`]), their layers ([`nn`], [`mixer`]),
//! the one blocked attention path with every variant's math ([`attention`]), the interface a
//! probe reads attention through ([`hooks`]), and under them all the kernels ([`kernels`]:
//! the CPU's and, with the `cuda` feature, the GPU's, with the types both share). Nothing
//! here knows about metrics, tables or runs: those crates sit above this one.
//!
//! Within the crate the modules are layered too, each using only those below it:
//! `kernels` < `nn` < `hooks` < `attention` < `mixer` < `model` (`device` beside `kernels`).

pub mod attention;
pub mod device;
pub mod hooks;
pub mod kernels;
pub mod mixer;
pub mod model;
pub mod nn;
