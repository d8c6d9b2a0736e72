//! Tidy tables (SPEC section 6): CSV and Parquet written through polars and read back with
//! their stated counts checked, output folders staged and committed whole. The one crate
//! that depends on polars.

pub mod export;
