//! Tidy output tables: the table contract of SPEC section 6 lives here, and this is the
//! only module that imports polars. Tables are written atomically (temporary name, then
//! rename), as CSV or Parquet.

mod attention_tables;
mod interrupt;
mod reader;
mod table;
mod writer;

pub use attention_tables::{attention_tables, decade_bins, qk_series_table};
pub use reader::read_table;
pub use table::{Column, Table};
pub use writer::{write_table, Format, OutputDir};
