//! Input files opened as regular files and read with a size cap suited to their kind.
//!
//! Every file a user hands us (run.json, lm-eval results, manifests, config.json, a Hub
//! cache's `refs/main`, checkpoints, corpora, logs, tables) is opened here: without blocking
//! (`O_NONBLOCK`, so a FIFO in a file's place does not wait for a writer), then checked with
//! `fstat` on the open descriptor (no race with a rename), and refused unless it is a
//! regular file: a FIFO, a device (`/dev/zero`), a socket or a folder gets one line naming
//! the file and what it is. A file read whole ([`read_bytes`], [`read_text`]) is also
//! refused when its length passes its kind's [`Cap`], before any byte is read, and the read
//! itself stops one byte past the cap (a file that grows while it is read is refused too).
//! Streamed inputs (text corpora, logs, safetensors and GGUF files) take only the open
//! ([`open`]): their readers hold bounded pieces.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The most bytes one kind of input may hold when it is read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    /// What the file is, for the error: "JSON record", "Hub ref", ...
    pub kind: &'static str,
    /// Bytes, inclusive.
    pub bytes: u64,
}

const MIB: u64 = 1 << 20;

/// A JSON or TOML record: run.json, an lm-eval results file, a `tables` manifest, config.json,
/// a weight map, `model.safetensors.index.json`, `trainer_state.json`, `train.json`
/// (the largest real ones are a few MiB: an index of a 400-shard checkpoint is ~2 MiB).
pub const JSON_RECORD: Cap = Cap {
    kind: "JSON or TOML record",
    bytes: 64 * MIB,
};

/// A Hub cache ref (`refs/main`, `refs/step1000`): one commit hash (40 hex digits).
pub const HUB_REF: Cap = Cap {
    kind: "Hub ref",
    bytes: 4 << 10,
};

/// A corpus of token ids read whole (`.npy`, `.json` lists): 2^28 ids (the most any run
/// takes, `analysis::run`'s token limit) as int64, plus a header.
pub const TOKEN_IDS: Cap = Cap {
    kind: "token-id corpus",
    bytes: 2 << 30,
};

/// A tokenizer.json (the largest of the Hub's, Gemma 3's, are ~33 MiB).
pub const TOKENIZER: Cap = Cap {
    kind: "tokenizer.json",
    bytes: 256 * MIB,
};

/// A text file read whole (a training corpus of `train`, a JSON-list training log).
pub const TEXT: Cap = Cap {
    kind: "text file",
    bytes: 1 << 30,
};

/// Opens `path` for reading as a regular file: a FIFO, device, socket or folder is refused
/// (one line naming the file and its type) without blocking.
pub fn open(path: &Path) -> Result<File> {
    let file = open_nonblocking(path)?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::input(
            path,
            format!(
                "is {}, not a regular file; give a file",
                kind_of(&meta.file_type())
            ),
        ));
    }
    Ok(file)
}

/// The bytes of `path`, a regular file of at most `cap.bytes` bytes.
pub fn read_bytes(path: &Path, cap: Cap) -> Result<Vec<u8>> {
    let file = open(path)?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > cap.bytes {
        return Err(too_large(path, cap, len));
    }
    let mut bytes = Vec::new();
    crate::out_of_memory::fallible(|| bytes.try_reserve_exact(len as usize))
        .map_err(|_| Error::input(path, format!("{len} bytes do not fit in memory")))?;
    file.take(cap.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > cap.bytes {
        return Err(too_large(path, cap, bytes.len() as u64));
    }
    Ok(bytes)
}

/// The text of `path`, a regular UTF-8 file of at most `cap.bytes` bytes.
pub fn read_text(path: &Path, cap: Cap) -> Result<String> {
    let bytes = read_bytes(path, cap)?;
    String::from_utf8(bytes).map_err(|e| Error::invalid(path, "not UTF-8 text", e))
}

/// `path` opened with `O_NONBLOCK` where there is one (opening a FIFO for reading then
/// returns at once; a regular file reads as usual).
fn open_nonblocking(path: &Path) -> Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    #[cfg(not(unix))]
    {
        // no O_NONBLOCK: the type is checked before the open
        if let Ok(meta) = std::fs::metadata(path) {
            if !meta.is_file() {
                return Err(Error::input(path, "is not a regular file; give a file"));
            }
        }
    }
    options.open(path).map_err(|e| Error::io(path, e))
}

/// "a FIFO", "a folder", ... for an error.
fn kind_of(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

fn too_large(path: &Path, cap: Cap, len: u64) -> Error {
    Error::input(
        path,
        format!(
            "{len} bytes or more, past the {} bytes a {} may hold",
            cap.bytes, cap.kind
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_within_its_cap_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(read_text(&path, JSON_RECORD).unwrap(), "{}");
    }

    #[test]
    fn a_file_past_its_cap_is_refused_naming_the_kind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("main");
        std::fs::write(&path, vec![b'a'; 5000]).unwrap();
        let err = read_text(&path, HUB_REF).unwrap_err().to_string();
        assert!(err.contains("past the 4096 bytes a Hub ref"), "{err}");
    }

    #[test]
    fn folders_devices_and_fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let err = open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is a folder, not a regular file"), "{err}");
        #[cfg(unix)]
        {
            let err = read_bytes(Path::new("/dev/zero"), JSON_RECORD).unwrap_err();
            assert!(err.to_string().contains("a character device"), "{err}");
            let fifo = dir.path().join("fifo");
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            let err = read_text(&fifo, JSON_RECORD).unwrap_err().to_string();
            assert!(err.contains("is a FIFO"), "{err}");
        }
    }
}
