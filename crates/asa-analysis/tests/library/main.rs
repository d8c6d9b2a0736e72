//! The library's tests beside it: a module per area, each running asa-analysis and the layers
//! below (the models, the metrics) against fixtures computed independently by the scripts in
//! `tools/` (the repository's `tests/fixtures`). What runs the built binary is the root
//! package's `tests/it`. One binary links candle once.

mod common;

mod block_map;
mod cancel;
mod checkpoint_problems;
mod config_cases;
mod conformance;
mod converted_gguf;
mod corpus;
mod induction;
mod long_context;
mod long_sequences;
mod memory_model;
mod metrics;
mod metrics_bf16;
mod one_validation;
mod real_model;
mod reference_check;
mod train;
mod weight_map;
