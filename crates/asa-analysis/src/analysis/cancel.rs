//! Stopping a run from outside it. A [`CancelToken`] is cloned into the run (the pattern of
//! tokio-util's `CancellationToken`); whoever owns the process sets it (the CLI on SIGINT,
//! the Python binding when `Python::check_signals` reports Ctrl-C, a user's own `cancel()`),
//! and the forward passes look at it after every query block: the run then returns
//! [`Error::Interrupted`] and writes nothing. Each run has its own token, so cancelling one
//! of two runs in one process leaves the other to finish.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use asa_core::error::{Error, Result};

/// A flag shared by the run and whoever may stop it; clones share the flag.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token nobody has cancelled yet.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Asks the run holding this token (or a clone) to stop at its next query block.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or a clone.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// [`Error::Interrupted`] once the token is cancelled.
    pub fn check(&self) -> Result<()> {
        match self.is_cancelled() {
            true => Err(Error::Interrupted),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_the_flag_and_another_token_does_not() {
        let token = CancelToken::new();
        let clone = token.clone();
        let other = CancelToken::new();
        assert!(clone.check().is_ok());
        token.cancel();
        assert!(clone.is_cancelled());
        assert!(matches!(clone.check(), Err(Error::Interrupted)));
        assert!(!other.is_cancelled() && other.check().is_ok());
    }
}
