//! Tidy output tables: the table contract of SPEC section 6 lives here, and this is the
//! only module that imports polars. Tables are written atomically (temporary name, then
//! rename), as CSV or Parquet.

mod table;
mod writer;

pub use table::{Column, Table};
pub use writer::{write_table, Format, OutputDir};
