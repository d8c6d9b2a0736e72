//! The crate's one error type. Every error a user can cause names the file (or option)
//! and the problem in one line; the binary prints it as `asa-analyze: {err}` and exits 2
//! (`asa_cli::main`).
//!
//! Errors keep their cause: a failure inside a library we call (serde_json, polars,
//! tokenizers, candle, csv, safetensors, ...) becomes [`Error::Invalid`] (a file to name)
//! or [`Error::Failed`] (none), with our words for the operation in `what` and the
//! library's error kept as `#[source]`, so callers can inspect or downcast it.
//!
//! The rule for `Display` and the source chain: **`Display` of every variant includes its
//! direct cause, on one line** (`{path}: {what}: {cause}`), because library users and
//! tests call `to_string()` and must not lose the cause. `source()` still returns that
//! cause. Whoever prints the whole chain ([`Error::report`], used by `asa_cli::main`) therefore
//! starts from `Display` and appends only deeper causes whose text is not already in the
//! line, so nothing is said twice.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};

use crate::checkpoint_problem::CheckpointProblem;

/// A library's error kept as the cause of ours.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong in asa-analyze.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A user-supplied file is missing, malformed or inconsistent (our own words, no
    /// underlying error); `kind` says which input it is.
    #[error("{}: {message}", path.display())]
    Input {
        kind: InputKind,
        path: PathBuf,
        message: String,
    },
    /// A checkpoint's problem as a value ([`CheckpointProblem`]: the message is made from
    /// it); its kind is [`InputKind::Checkpoint`].
    #[error("{}: {problem}{}", path.display(), note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default())]
    Checkpoint {
        path: PathBuf,
        problem: CheckpointProblem,
        /// What the caller adds in words (what needs the tensor).
        note: Option<String>,
    },
    /// A library could not read, parse or write `path`: `what` says which operation,
    /// `source` is the library's error.
    #[error("{}: {what}: {}", path.display(), one_line(source))]
    Invalid {
        kind: InputKind,
        path: PathBuf,
        what: String,
        #[source]
        source: BoxError,
    },
    /// A library call with no file to name failed (training a tokenizer, encoding JSON).
    #[error("{what}: {}", one_line(source))]
    Failed {
        what: String,
        #[source]
        source: BoxError,
    },
    /// A command-line option or combination of options is invalid; `option` names the one
    /// at fault (`--seq-len`, or a Python keyword), when one is, and the message follows it.
    #[error("{}{message}", option.as_ref().map(|o| format!("{o} ")).unwrap_or_default())]
    Usage {
        option: Option<String>,
        message: String,
    },
    /// Reading or writing a file failed at the OS level.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing to stdout failed; a closed pipe (`| head`) is not reported
    /// ([`Error::is_broken_pipe`]).
    #[error("cannot write to stdout: {0}")]
    Stdout(#[source] std::io::Error),
    /// The run was stopped from outside: its cancel token (`asa_analysis`'s `CancelToken`) was cancelled
    /// (a signal in the CLI, Ctrl-C or `CancelToken.cancel()` in Python).
    #[error("interrupted")]
    Interrupted,
    /// A tensor operation failed (a bug or an unsupported device operation).
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

/// Which input an [`Error::Input`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A checkpoint: config.json, safetensors, GGUF, tokenizer files, a model in memory.
    Checkpoint,
    /// A corpus: text, JSONL or token ids.
    Corpus,
    /// A results table (CSV or Parquet) read back.
    Table,
    /// A training log (CSV, JSONL, TensorBoard events).
    TrainingLog,
    /// Any other file: a partial result, a manifest, an output destination, ...
    File,
}

/// What an error is about, for callers and tests to match instead of its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A user's input file ([`Error::Input`], and a library's refusal of one:
    /// [`Error::Invalid`], kind [`InputKind::File`]).
    Input(InputKind),
    /// An option or a combination of options ([`Error::Usage`]).
    Usage,
    /// The OS failed a read or write ([`Error::Io`], [`Error::Stdout`]).
    Io,
    /// The run was cancelled ([`Error::Interrupted`]).
    Cancelled,
    /// A library call with no file to name, or a tensor operation ([`Error::Failed`],
    /// [`Error::Candle`]).
    Internal,
}

/// Result with the crate's error.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A problem with a user file that is none of the kinds below (a partial result, a
    /// manifest, an output destination), e.g. `Error::input("run/manifest.json", "no runs")`.
    pub fn input(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Self::of_kind(InputKind::File, path, message)
    }

    /// The checkpoint at `path` has `problem`, e.g. `Error::checkpoint_problem("ckpt/config.json",
    /// CheckpointProblem::missing_key("hidden_size"))`: a checkpoint's problems are typed
    /// (there is no constructor from words), so callers and tests match the variant.
    pub fn checkpoint_problem(path: impl AsRef<Path>, problem: CheckpointProblem) -> Self {
        Error::Checkpoint {
            path: path.as_ref().to_path_buf(),
            problem,
            note: None,
        }
    }

    /// The same error with `note` added in parentheses, where it is a checkpoint problem.
    pub fn with_note(self, note: impl Into<String>) -> Self {
        match self {
            Error::Checkpoint { path, problem, .. } => Error::Checkpoint {
                path,
                problem,
                note: Some(note.into()),
            },
            other => other,
        }
    }

    /// The checkpoint problem the error is, if it is one.
    pub fn problem(&self) -> Option<&CheckpointProblem> {
        match self {
            Error::Checkpoint { problem, .. } => Some(problem),
            _ => None,
        }
    }

    /// A problem with a corpus.
    pub fn corpus(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Self::of_kind(InputKind::Corpus, path, message)
    }

    /// A problem with a results table read back.
    pub fn table(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Self::of_kind(InputKind::Table, path, message)
    }

    /// A problem with a training log.
    pub fn training_log(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Self::of_kind(InputKind::TrainingLog, path, message)
    }

    fn of_kind(kind: InputKind, path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Input {
            kind,
            path: path.as_ref().to_path_buf(),
            message: message.into(),
        }
    }

    /// What the error is about.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Input { kind, .. } => ErrorKind::Input(*kind),
            Error::Checkpoint { .. } => ErrorKind::Input(InputKind::Checkpoint),
            Error::Invalid { kind, .. } => ErrorKind::Input(*kind),
            Error::Usage { .. } => ErrorKind::Usage,
            Error::Io { .. } | Error::Stdout(_) => ErrorKind::Io,
            Error::Interrupted => ErrorKind::Cancelled,
            Error::Failed { .. } | Error::Candle(_) => ErrorKind::Internal,
        }
    }

    /// A library failed on `path`, e.g. `Error::invalid(path, "invalid config.json", e)`
    /// for a serde_json error `e`; shown as `{path}: invalid config.json: {e}`. Its kind is
    /// [`InputKind::File`] until [`Error::about`] names the input.
    pub fn invalid(
        path: impl AsRef<Path>,
        what: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Invalid {
            kind: InputKind::File,
            path: path.as_ref().to_path_buf(),
            what: what.into(),
            source: source.into(),
        }
    }

    /// The same error, about an input of `kind`, e.g.
    /// `Error::invalid(path, "invalid config.json", e).about(InputKind::Checkpoint)`; errors
    /// that are not about an input file are returned as they are.
    pub fn about(self, kind: InputKind) -> Self {
        match self {
            Error::Input { path, message, .. } => Error::Input {
                kind,
                path,
                message,
            },
            Error::Invalid {
                path, what, source, ..
            } => Error::Invalid {
                kind,
                path,
                what,
                source,
            },
            Error::Checkpoint { .. } if kind != InputKind::Checkpoint => {
                let message = self.to_string();
                let path = self.path().map(Path::to_path_buf).unwrap_or_default();
                let message = message
                    .strip_prefix(&format!("{}: ", path.display()))
                    .unwrap_or(&message)
                    .to_string();
                Error::Input {
                    kind,
                    path,
                    message,
                }
            }
            other => other,
        }
    }

    /// A library call with no file to name failed, e.g.
    /// `Error::failed("tokenizer training failed", e)`; shown as `{what}: {e}`.
    pub fn failed(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Failed {
            what: what.into(),
            source: source.into(),
        }
    }

    /// An invalid combination of options, or a problem no one option is at fault for.
    pub fn usage(message: impl Into<String>) -> Self {
        Error::Usage {
            option: None,
            message: message.into(),
        }
    }

    /// An invalid value of `option`, e.g. `Error::option("--steps", "must be at least 1")`,
    /// shown as `--steps must be at least 1`.
    pub fn option(option: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Usage {
            option: Some(option.into()),
            message: message.into(),
        }
    }

    /// The file an error is about: the input refused, or the file the OS failed on.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Input { path, .. }
            | Error::Checkpoint { path, .. }
            | Error::Invalid { path, .. }
            | Error::Io { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The option an error is about ([`Error::option`]), if any.
    pub fn option_name(&self) -> Option<&str> {
        match self {
            Error::Usage { option, .. } => option.as_deref(),
            _ => None,
        }
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

    /// The whole error on one line: `Display` (which holds the direct cause), then every
    /// deeper cause of the `source()` chain whose text the line does not already hold,
    /// joined with ": "; whitespace runs (newlines too) become one space.
    pub fn report(&self) -> String {
        let mut line = one_line(self);
        let mut cause = self.source();
        while let Some(c) = cause {
            let text = one_line(c);
            if !text.is_empty() && !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = c.source();
        }
        line
    }

    /// Whether a closed pipe caused this error (an [`std::io::ErrorKind::BrokenPipe`]
    /// anywhere in the source chain): `asa-analyze ... | head` exits 0 quietly on it.
    pub fn is_broken_pipe(&self) -> bool {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(self);
        while let Some(c) = cause {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return true;
                }
            }
            cause = c.source();
        }
        false
    }
}

/// `message` on one line: runs of whitespace (newlines included) become one space.
pub(crate) fn one_line(message: impl std::fmt::Display) -> String {
    let joined = message
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    printable(&joined)
}

/// Characters shown at most of one message (a name read from a damaged binary file can be
/// any length).
const MESSAGE_CHARS: usize = 400;

/// `text` safe for a terminal: control characters and the replacement characters of
/// invalid UTF-8 (bytes of a binary file) escaped, cut once [`MESSAGE_CHARS`] characters
/// are shown.
pub fn printable(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.chars().count() >= MESSAGE_CHARS {
            out.push_str("...");
            break;
        }
        match c {
            c if c.is_control() || c == char::REPLACEMENT_CHARACTER => {
                out.push_str(&c.escape_unicode().to_string())
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each constructor gives its kind, and the words stay the one line they were.
    #[test]
    fn each_error_says_what_it_is_about() {
        let file = Path::new("x/config.json");
        for (err, kind) in [
            (Error::corpus(file, "m"), InputKind::Corpus),
            (Error::table(file, "m"), InputKind::Table),
            (Error::training_log(file, "m"), InputKind::TrainingLog),
            (Error::input(file, "m"), InputKind::File),
        ] {
            assert_eq!(err.kind(), ErrorKind::Input(kind));
            assert_eq!(err.to_string(), "x/config.json: m");
        }
        let problem = crate::CheckpointProblem::missing_key("hidden_size");
        let err = Error::checkpoint_problem(file, problem.clone());
        assert_eq!(err.kind(), ErrorKind::Input(InputKind::Checkpoint));
        assert_eq!(err.problem(), Some(&problem));
        assert_eq!(err.to_string(), "x/config.json: hidden_size is missing");
        assert_eq!(Error::usage("--bins").kind(), ErrorKind::Usage);
        assert_eq!(Error::Interrupted.kind(), ErrorKind::Cancelled);
        let io = std::io::Error::other("disk");
        assert_eq!(Error::io(file, io).kind(), ErrorKind::Io);
    }

    /// A cause that has a cause of its own, and says only its own part.
    #[derive(Debug, thiserror::Error)]
    #[error("outer\ncause")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn bytes_of_a_binary_file_are_escaped_and_cut() {
        let shown = one_line(format!(
            "tensor '{}\u{1b}[2J{}' has 9 dims",
            "\u{fffd}",
            "x".repeat(1000)
        ));
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{fffd}'),
            "{shown}"
        );
        assert!(
            shown.contains("\\u{1b}") && shown.ends_with("..."),
            "{shown}"
        );
        assert!(shown.chars().count() < 450);
    }

    #[test]
    fn invalid_keeps_its_cause_and_shows_it() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let shown = json.to_string();
        let err = Error::invalid("ckpt/config.json", "invalid config.json", json);
        assert_eq!(
            err.to_string(),
            format!("ckpt/config.json: invalid config.json: {shown}")
        );
        let source = err.source().expect("the cause is kept");
        assert!(source.downcast_ref::<serde_json::Error>().is_some());
        // the printer says the cause once
        assert_eq!(err.report(), err.to_string());
    }

    #[test]
    fn report_adds_deeper_causes_once_on_one_line() {
        let io = std::io::Error::other("disk on fire");
        let err = Error::invalid("a.csv", "cannot write table", Outer(io));
        assert_eq!(err.to_string(), "a.csv: cannot write table: outer cause");
        assert_eq!(
            err.report(),
            "a.csv: cannot write table: outer cause: disk on fire"
        );
        // a cause whose Display already holds its own cause is not repeated
        let io = std::io::Error::other("disk on fire");
        let err = Error::io("a.csv", io);
        assert_eq!(err.report(), "a.csv: disk on fire");
    }

    #[test]
    fn broken_pipe_is_found_anywhere_in_the_chain() {
        let pipe = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(Error::Stdout(pipe()).is_broken_pipe());
        assert!(Error::invalid("x", "cannot write", Outer(pipe())).is_broken_pipe());
        assert!(!Error::Stdout(std::io::Error::other("full")).is_broken_pipe());
        assert!(!Error::usage("bad").is_broken_pipe());
    }
}
