//!
//! Tidy output tables: the one crate that imports polars (asa-metrics' `tables` and the log
//! commands build the tables of SPEC section 6; this crate writes and reads them). Tables are written atomically (temporary name, then
//! rename), as CSV or Parquet.

pub mod damaged;
mod parquet_claims;
mod reader;
mod rows;
pub mod schema;
mod staging_watch;
mod table;
mod writer;

pub use reader::{read_declared, read_table};
pub use rows::{for_each_row, Cell};
pub use schema::{ColumnKind, ColumnSpec, SchemaError, TableSchema};
pub use staging_watch::StagingWatch;
pub use table::{Column, Table};
pub use writer::{to_frame, write_table, FolderLock, Format, OutputDir};
