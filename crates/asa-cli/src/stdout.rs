//! Everything the CLI prints on stdout goes through here. A failed write is an error
//! ([`Error::Stdout`]), never a panic; `asa_cli::main` exits 0 quietly when the cause is a
//! closed pipe (`asa-analyze spikes ... | head`), as ripgrep does. Rust ignores SIGPIPE,
//! so such a write returns `EPIPE` (`io::ErrorKind::BrokenPipe`).

use std::io::{self, Write};

use asa_core::error::{Error, Result};

/// Runs `write` on stdout, locked and buffered, then flushes: one block of output appears
/// at once, and a write that fails stops `write` with the error.
pub fn with_stdout(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    write(&mut out)
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

/// Prints `text` as it is (give it its final newline).
pub fn print(text: &str) -> Result<()> {
    with_stdout(|out| out.write_all(text.as_bytes()))
}

/// Prints `value` as pretty JSON and a newline.
pub fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::failed("cannot encode JSON output", e))?;
    text.push('\n');
    print(&text)
}
