//! Third-party readers that panic on a damaged file (polars' Parquet footer parser unwraps a
//! missing column chunk field: found by the fuzz harness, issue 54) are run here: their panic
//! becomes an error naming the file, and its message is not printed (one line, exit 2).

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use asa_core::error::{Error, Result};

thread_local! {
    /// Whether a panic on this thread is caught and reported by [`read_guarded`].
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// Guarded reads in flight: polars reads a table's columns on its own pool (threads named
/// `polars-N`), whose panics reach the reader's thread and are reported there.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Runs `read` of `path`; a panic inside it is the error "`what`: the file is damaged".
pub fn read_guarded<T>(path: &Path, what: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    let before = GUARDED.with(|g| g.replace(true));
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(read));
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    GUARDED.with(|g| g.set(before));
    outcome.unwrap_or_else(|_| {
        Err(Error::table(
            path,
            format!("{what}: the file is damaged (its reader could not parse it)"),
        ))
    })
}

/// Keeps the process's panic hook from printing the panics [`read_guarded`] catches (the
/// binary's, and the Python extension's, call it once at start); every other panic is
/// printed as before.
pub fn quiet_guarded_panics() {
    let printed = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let polars_worker = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("polars"));
        let guarded =
            GUARDED.with(|g| g.get()) || (polars_worker && IN_FLIGHT.load(Ordering::SeqCst) > 0);
        if !guarded {
            printed(info)
        }
    }));
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
