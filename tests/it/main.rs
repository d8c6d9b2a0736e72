//! The one integration-test binary (as ripgrep has it): a module per area, each running the
//! library or the built `asa-analyze` binary against fixtures computed independently by the
//! scripts in `tools/`. One binary links candle, polars and plotters once.

mod common;

mod block_map;
mod checkpoint_errors;
mod cli_metrics;
mod config_fixtures;
mod conformance;
mod converted_gguf;
mod corpus;
mod demo;
mod docs;
mod families;
mod figures;
mod fuzz;
mod golden;
mod head_roles;
mod hostile_files;
mod hybrids;
mod layers;
mod logs;
mod long_context;
mod long_sequences;
mod memory_model;
mod metrics;
mod metrics_bf16;
mod one_validation;
mod real_model;
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
