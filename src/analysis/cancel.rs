//! Stopping a run from outside it (Python's Ctrl-C, which the interpreter sees only while
//! it holds the GIL): [`request`] raises a flag that the forward passes look at after every
//! query block; the run then returns [`Error::Interrupted`] and writes nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks the run in progress to stop at its next query block.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Forgets an earlier request (a new run starts).
pub fn clear() {
    REQUESTED.store(false, Ordering::SeqCst);
}

/// [`Error::Interrupted`] once a stop was requested.
pub fn check() -> Result<()> {
    match REQUESTED.load(Ordering::SeqCst) {
        true => Err(Error::Interrupted),
        false => Ok(()),
    }
}
