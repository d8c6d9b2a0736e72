//! The binary's integration tests (as ripgrep has them, one binary): a module per area, each
//! running the built `asa-analyze` (or checking the workspace: its layers, its docs) against
//! fixtures computed independently by the scripts in `tools/`. The library's own tests are
//! beside it (asa-analysis' `tests/library`, asa-models' `tests/conformance.rs`).

mod common;

mod block_map;
mod checkpoint_errors;
mod cli_metrics;
mod config_fixtures;
mod demo;
mod docs;
mod families;
mod figures;
mod fuzz;
mod gguf_refusals;
mod golden;
mod head_roles;
mod hostile_files;
mod hybrids;
mod layers;
mod logs;
mod reliability;
mod report;
mod schema;
mod shards;
mod streaming;
mod table_values;
mod tables;
mod train;
mod watch;
mod weight_map;
