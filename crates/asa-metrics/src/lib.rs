//! The attention metrics (SPEC section 4): each metric's accumulator, reduced on the device
//! from what the engine's hooks show it, the registry that names them, and their tables.

pub mod metrics;
