//! A Parquet read guarded against polars' panics on a damaged file
//! ([`asa_core::guarded`]): the panic is the error "`what`: the file is damaged".

use std::path::Path;

use asa_core::error::{Error, Result};
pub use asa_core::guarded::quiet_guarded_panics;

/// Runs `read` of `path`; a panic inside it is the error "`what`: the file is damaged".
pub fn read_guarded<T>(path: &Path, what: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    asa_core::guarded::catch_panic(read, || {
        Error::table(
            path,
            format!("{what}: the file is damaged (its reader could not parse it)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_reader_is_an_error_naming_the_file() {
        let got: Result<()> =
            read_guarded(Path::new("t.parquet"), "cannot read Parquet table", || {
                panic!("unwrap on None")
            });
        let said = got.unwrap_err().to_string();
        assert!(
            said.contains("t.parquet") && said.contains("damaged"),
            "{said}"
        );
        let fine = read_guarded(Path::new("t.parquet"), "x", || Ok(3)).unwrap();
        assert_eq!(fine, 3);
    }
}
