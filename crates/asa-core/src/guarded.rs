//! Third-party readers that panic on a damaged file (polars' Parquet footer parser unwraps a
//! missing column chunk field: found by the fuzz harness, issue 54; the tokenizers crate
//! `expect`s a decoder it cannot read: found by the coverage-guided fuzzing, issue 65) are
//! run here: their panic becomes the caller's error naming the file, and its message is not
//! printed (one line, exit 2).

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

thread_local! {
    /// Whether a panic on this thread is caught and reported by [`catch_panic`].
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

/// Guarded reads in flight: polars reads a table's columns on its own pool (threads named
/// `polars-N`), whose panics reach the reader's thread and are reported there.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Runs `read`; a panic inside it is the error `damaged()` makes.
pub fn catch_panic<T>(
    read: impl FnOnce() -> Result<T>,
    damaged: impl FnOnce() -> Error,
) -> Result<T> {
    let before = GUARDED.with(|g| g.replace(true));
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(read));
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    GUARDED.with(|g| g.set(before));
    outcome.unwrap_or_else(|_| Err(damaged()))
}

/// Keeps the process's panic hook from printing the panics [`catch_panic`] catches (the
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
    fn a_panicking_reader_is_the_callers_error() {
        let got: Result<()> = catch_panic(
            || panic!("unwrap on None"),
            || Error::input(std::path::Path::new("t.json"), "damaged"),
        );
        assert_eq!(got.unwrap_err().to_string(), "t.json: damaged");
        let fine = catch_panic(|| Ok(3), || unreachable!()).unwrap();
        assert_eq!(fine, 3);
    }
}
