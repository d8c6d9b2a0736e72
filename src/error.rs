//! The crate's one error type. Every error a user can cause names the file (or option)
//! and the problem in one line; the binary prints it as `asa-analyze: {err}` and exits 2.

use std::path::{Path, PathBuf};

/// Everything that can go wrong in asa-analyze.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A user-supplied file is missing, malformed or inconsistent.
    #[error("{}: {message}", path.display())]
    Input { path: PathBuf, message: String },
    /// A command-line option or combination of options is invalid.
    #[error("{0}")]
    Usage(String),
    /// Reading or writing a file failed at the OS level.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A tensor operation failed (a bug or an unsupported device operation).
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Result with the crate's error.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A problem with a user file, e.g. `Error::input("ckpt/config.json", "missing field hidden_size")`.
    pub fn input(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Input {
            path: path.as_ref().to_path_buf(),
            message: message.into(),
        }
    }

    /// An invalid option value.
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage(message.into())
    }

    /// `path`, given with `option`, is missing or is not a regular file (a folder, a device).
    pub fn not_a_file(path: impl AsRef<Path>, option: &str) -> Self {
        let path = path.as_ref();
        let why = match path.exists() {
            true => "not a regular file",
            false => "no such file",
        };
        Error::input(path, format!("{why} ({option})"))
    }

    /// An I/O failure on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
}
