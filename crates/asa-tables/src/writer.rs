//! Writing tables with polars, atomically: every file of a run is staged in a hidden
//! folder inside `--out` and renamed into place only when the whole run succeeded.

use asa_core::parse_error::ParseError;
use std::fs;
use std::path::{Path, PathBuf};

use polars::prelude::{CsvWriter, DataFrame, NamedFrom, ParquetWriter, SerWriter, Series};

use super::staging_watch::StagingWatch;
use super::table::{Column, Table};
use asa_core::error::{Error, Result};

/// Output file format (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Comma-separated values with a header.
    #[default]
    Csv,
    /// Apache Parquet.
    Parquet,
}

impl std::str::FromStr for Format {
    type Err = ParseError;

    /// The table format named as in the CLI and the tables ([`Format::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        serde_json::from_value(serde_json::Value::String(s.to_string()))
            .map_err(|_| ParseError::unknown("table format", s, &Format::NAMES))
    }
}

impl Format {
    /// The names `--format` takes.
    pub const NAMES: [&'static str; 2] = ["csv", "parquet"];

    /// File extension without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }
}

/// `table` as a polars DataFrame (the Python package hands it over through Arrow).
pub fn to_frame(table: &Table) -> Result<DataFrame> {
    let columns = table
        .columns
        .iter()
        .map(|(name, col)| {
            let series = match col {
                Column::Str(v) => Series::new(name.as_str().into(), v.as_slice()),
                Column::Int(v) => Series::new(name.as_str().into(), v.as_slice()),
                Column::Float(v) => Series::new(name.as_str().into(), v.as_slice()),
                Column::Bytes(v) => {
                    let bytes: Vec<Option<&[u8]>> = v.iter().map(|b| b.as_deref()).collect();
                    Series::new(name.as_str().into(), bytes.as_slice())
                }
            };
            series.into()
        })
        .collect::<Vec<_>>();
    DataFrame::new(table.height(), columns)
        .map_err(|e| Error::failed(format!("table {}", table.name), e))
}

/// Writes `table` to `path` in `format` (not atomic by itself; see [`OutputDir`]).
pub fn write_table(table: &Table, path: &Path, format: Format) -> Result<()> {
    let mut frame = to_frame(table)?;
    let file = fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let result = match format {
        Format::Csv => CsvWriter::new(file).include_header(true).finish(&mut frame),
        Format::Parquet => ParquetWriter::new(file).finish(&mut frame).map(|_| ()),
    };
    result.map_err(|e| Error::invalid(path, "cannot write table", e))
}

/// An output folder whose files appear all at once, or not at all.
///
/// Files are written into a hidden staging folder inside the target; [`OutputDir::commit`]
/// renames them into place. Dropping an uncommitted `OutputDir` removes the staging folder,
/// and the folders `create` made for it where they are still empty.
pub struct OutputDir {
    target: PathBuf,
    /// The outermost folder `create` made (`target` or a parent), if it made any.
    made: Option<PathBuf>,
    staging: PathBuf,
    format: Format,
    /// Staged entries in commit order: a file name, or a folder that replaces its namesake.
    files: Vec<Staged>,
    committed: bool,
    /// The target folder opened and locked (an advisory lock) for as long as this lives.
    _lock: Option<fs::File>,
    /// Who removes the staging folder if the process ends by a signal.
    watch: StagingWatch,
}

/// One entry of the staging folder, moved into the target on commit.
struct Staged {
    /// Path relative to the staging folder and the target.
    name: String,
    /// A folder that replaces an existing folder of its name (a file never replaces a folder).
    folder: bool,
}

impl OutputDir {
    /// Creates `target` (and parents) and a fresh staging folder inside it, registered with
    /// `watch` until it is committed or dropped (a failed or cancelled run drops it: the
    /// staging folder, and the folders made for it, are removed).
    pub fn create(target: &Path, format: Format, watch: &StagingWatch) -> Result<Self> {
        Self::create_with(target, format, watch, None)
    }

    /// [`OutputDir::create`] under a lock the caller already holds on `target` (a `watch`
    /// holds its folder for its whole life, across the steps it commits).
    pub fn create_held(
        target: &Path,
        format: Format,
        watch: &StagingWatch,
        held: &FolderLock,
    ) -> Result<Self> {
        Self::create_with(target, format, watch, Some(held))
    }

    /// This folder's lock, to hold beyond it ([`OutputDir::create_held`]).
    pub fn lock(&self) -> Result<FolderLock> {
        let file = match &self._lock {
            Some(f) => Some(f.try_clone().map_err(|e| Error::io(&self.target, e))?),
            None => None,
        };
        Ok(FolderLock(file))
    }

    fn create_with(
        target: &Path,
        format: Format,
        watch: &StagingWatch,
        held: Option<&FolderLock>,
    ) -> Result<Self> {
        if target.exists() && !target.is_dir() {
            return Err(Error::input(
                target,
                "the output folder is a file; name a folder with --out",
            ));
        }
        let made = target
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .last()
            .map(Path::to_path_buf);
        fs::create_dir_all(target).map_err(|e| Error::io(target, e))?;
        let lock = match held {
            // the same open file: dropping this copy keeps the holder's lock
            Some(FolderLock(Some(file))) => {
                Some(file.try_clone().map_err(|e| Error::io(target, e))?)
            }
            Some(FolderLock(None)) => None,
            None => lock_folder(target)?,
        };
        remove_stale_staging(target);
        let staging = target.join(staging_name(&host_name(), std::process::id()));
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
        }
        watch.create_registered(&staging, made.as_deref(), target, || {
            fs::create_dir(&staging).map_err(|e| Error::io(target, e))
        })?;
        Ok(OutputDir {
            target: target.to_path_buf(),
            made,
            staging,
            format,
            files: Vec::new(),
            committed: false,
            _lock: lock,
            watch: watch.clone(),
        })
    }

    /// The final folder.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The table format of this folder.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The watch this folder is registered with (a folder made beside it shares it).
    pub fn watch(&self) -> &StagingWatch {
        &self.watch
    }

    /// The hidden folder files are staged in until [`commit`](Self::commit).
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Stages a table as `<name>.<ext>` (Parquet for a table declared so, whatever the
    /// folder's format: `schema::TableSchema::parquet_only`).
    pub fn write(&mut self, table: &Table) -> Result<()> {
        let format = match super::schema::schema(&table.name) {
            Some(s) if s.parquet_only() => Format::Parquet,
            _ => self.format,
        };
        let file = format!("{}.{}", table.name, format.extension());
        write_table(table, &self.staging.join(&file), format)?;
        self.push(file, false);
        Ok(())
    }

    /// Stages an arbitrary file (e.g. `run.json`, a Markdown table) with its bytes.
    pub fn write_bytes(&mut self, file: &str, bytes: &[u8]) -> Result<()> {
        let path = self.staging.join(file);
        if let Some(parent) = path.parent() {
            create_inside(&self.staging, parent)?;
        }
        fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
        self.push(file.to_string(), false);
        Ok(())
    }

    /// Path inside the staging folder for a file a caller writes itself (e.g. a figure);
    /// the file is moved into place on commit.
    pub fn staged_path(&mut self, file: &str) -> Result<PathBuf> {
        let path = self.staging.join(file);
        if let Some(parent) = path.parent() {
            create_inside(&self.staging, parent)?;
        }
        self.push(file.to_string(), false);
        Ok(path)
    }

    /// A folder inside the staging folder that the caller fills (e.g. `checkpoints`); on
    /// commit it replaces a folder of the same name in the target, whole.
    pub fn staged_folder(&mut self, name: &str) -> Result<PathBuf> {
        let path = self.staging.join(name);
        create_inside(&self.staging, &path)?;
        self.push(name.to_string(), true);
        Ok(path)
    }

    /// Where a staged entry lands on commit.
    pub fn final_path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    fn push(&mut self, name: String, folder: bool) {
        self.files.retain(|s| s.name != name);
        self.files.push(Staged { name, folder });
    }

    /// Checks that every staged entry can be moved into place, before any is: a folder in
    /// the way of a file, or a file in the way of a folder, fails the commit with nothing
    /// moved.
    fn check_targets(&self) -> Result<()> {
        for entry in &self.files {
            let to = self.target.join(&entry.name);
            let mut dir = to.parent();
            while let Some(d) = dir {
                if d == self.target {
                    break;
                }
                if d.exists() && !d.is_dir() {
                    return Err(Error::input(d, "is a file where the output needs a folder"));
                }
                dir = d.parent();
            }
            if entry.folder && to.exists() && !to.is_dir() {
                return Err(Error::input(
                    &to,
                    "is a file where the output needs a folder",
                ));
            }
            if !entry.folder && to.is_dir() {
                return Err(Error::input(
                    &to,
                    "is a folder where the output needs a file; move it away",
                ));
            }
        }
        Ok(())
    }

    /// Moves every staged file into the target folder; returns their final paths.
    /// Nothing is moved when any entry could not be (see `check_targets`).
    pub fn commit(mut self) -> Result<Vec<PathBuf>> {
        self.check_targets()?;
        let watch = self.watch.clone();
        let mut commit = watch.begin_commit();
        let mut done = Vec::new();
        for entry in &self.files {
            let from = self.staging.join(&entry.name);
            let to = self.target.join(&entry.name);
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            if entry.folder && to.is_dir() {
                fs::remove_dir_all(&to).map_err(|e| Error::io(&to, e))?;
            }
            fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
            done.push(to);
        }
        self.committed = true;
        commit.done(&self.staging);
        drop(commit);
        let _ = fs::remove_dir_all(&self.staging);
        Ok(done)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            self.watch.unregister(&self.staging);
            remove_uncommitted(&self.staging, self.made.as_deref(), &self.target);
        }
    }
}

/// Start of a staging folder's name; the host and process id follow.
const STAGING_PREFIX: &str = ".asa-staging-";

/// `.asa-staging-<host>-<pid>`: the host, so that a run on another machine sharing the
/// folder (a cluster's network file system) is never taken for a dead process here.
fn staging_name(host: &str, pid: u32) -> String {
    format!("{STAGING_PREFIX}{host}-{pid}")
}

/// This machine's name, reduced to characters safe in a file name.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    #[cfg(unix)]
    // SAFETY: gethostname writes at most buf.len() bytes into buf
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    #[cfg(not(unix))]
    let ok = false;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..len])
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if ok && !name.is_empty() {
        name
    } else {
        "host".into()
    }
}

/// An advisory lock on an output folder, held while it lives: one writer a folder.
#[derive(Debug)]
pub struct FolderLock(Option<fs::File>);

impl FolderLock {
    /// Locks the existing folder `target`, or refuses naming the process that holds it.
    pub fn acquire(target: &Path) -> Result<FolderLock> {
        Ok(FolderLock(lock_folder(target)?))
    }
}

/// Locks `target` for this run (an advisory lock on the folder itself: no file is left
/// behind); a folder another live run holds is refused, naming that run's pid. `None` where
/// the file system has no locks.
fn lock_folder(target: &Path) -> Result<Option<fs::File>> {
    let folder = fs::File::open(target).map_err(|e| Error::io(target, e))?;
    match folder.try_lock() {
        Ok(()) => Ok(Some(folder)),
        Err(fs::TryLockError::WouldBlock) => {
            let other = lock_holder(target)
                .or_else(|| other_runs(target).first().copied())
                .map(|pid| format!(" (pid {pid})"))
                .unwrap_or_default();
            Err(Error::input(
                target,
                format!("another asa-analyze run{other} is writing to this output folder; wait for it or choose another --out"),
            ))
        }
        Err(fs::TryLockError::Error(_)) => Ok(None),
    }
}

/// The pid holding a `flock` on the folder `target`, from Linux's `/proc/locks` (a lock is
/// held between a watch's steps, when it stages nothing).
fn lock_holder(target: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;

    let inode = fs::metadata(target).ok()?.ino();
    let locks = fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 20149 fe:00:10267375 0 EOF"
        let (kind, pid, file) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let on_target = file.rsplit(':').next()?.parse::<u64>().ok()? == inode;
        let pid: u32 = pid.parse().ok()?;
        (*kind == "FLOCK" && on_target && pid != std::process::id()).then_some(pid)
    })
}

/// The pids of the live runs of this machine staging files in `target`, other than this one.
fn other_runs(target: &Path) -> Vec<u32> {
    let prefix = format!("{STAGING_PREFIX}{}-", host_name());
    let Ok(entries) = fs::read_dir(target) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_prefix(&prefix)?.parse::<u32>().ok()
        })
        .filter(|&pid| pid != std::process::id() && process_alive(pid))
        .collect()
}

/// Folders inside an output folder that hold staging folders of their own: `figures/`, where
/// `figures --out OUT/figures` stages (and `--figures` staged before its figures joined the
/// tables' commit).
const NESTED_OUTPUTS: [&str; 1] = ["figures"];

/// Removes staging folders in `target`, and in its [`NESTED_OUTPUTS`], that this machine's
/// processes left when they were killed before they could clean up (SIGKILL, a power cut);
/// a live run's folder, and other machines' folders, are left alone.
fn remove_stale_staging(target: &Path) {
    remove_stale_staging_in(target);
    for nested in NESTED_OUTPUTS {
        remove_stale_staging_in(&target.join(nested));
    }
}

/// [`remove_stale_staging`] of the one folder `target`.
fn remove_stale_staging_in(target: &Path) {
    let Ok(entries) = fs::read_dir(target) else {
        return;
    };
    let host = host_name();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STAGING_PREFIX))
            .and_then(|rest| rest.strip_prefix(host.as_str()))
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true
}

/// Removes a staging folder and the folders made for it that are empty (innermost first;
/// `remove_dir` leaves a folder that is not empty).
pub(super) fn remove_uncommitted(staging: &Path, made: Option<&Path>, target: &Path) {
    let _ = fs::remove_dir_all(staging);
    if let Some(made) = made {
        for dir in target.ancestors() {
            if fs::remove_dir(dir).is_err() || dir == made {
                break;
            }
        }
    }
}

/// Creates `dir`, a folder inside `staging`, and the folders between, one at a time; never
/// `staging` itself. Once a signal's removal took the staging folder, a writer thread still
/// running (a figure being drawn) fails here instead of making it again (`create_dir_all`
/// did, and left `.asa-staging-*/figures/` behind a SIGTERM).
fn create_inside(staging: &Path, dir: &Path) -> Result<()> {
    let inside = dir.strip_prefix(staging).unwrap_or(Path::new(""));
    let mut at = staging.to_path_buf();
    for part in inside.components() {
        at.push(part);
        match fs::create_dir(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && at.is_dir() => {}
            Err(e) => return Err(Error::io(&at, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(target: &Path, files: &[&str]) -> OutputDir {
        let mut out = OutputDir::create(target, Format::Csv, &StagingWatch::new()).unwrap();
        for f in files {
            out.write_bytes(f, f.as_bytes()).unwrap();
        }
        out
    }

    /// Issue 54: a staging folder is made and registered as one step. While a signal's
    /// cleanup holds the watch, no staging folder can appear (it used to be made, then
    /// registered: a signal in between left it behind).
    #[test]
    fn no_staging_folder_appears_while_a_signal_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        std::fs::create_dir_all(&target).unwrap();
        let watch = StagingWatch::new();
        let cleanup = watch.remove_all();
        let writer = {
            let (target, watch) = (target.clone(), watch.clone());
            std::thread::spawn(move || OutputDir::create(&target, Format::Csv, &watch).map(|_| ()))
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        let staged: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
        assert!(
            staged.is_empty(),
            "a staging folder appeared during cleanup"
        );
        drop(cleanup);
        writer.join().unwrap().unwrap();
    }

    /// A figure thread still drawing after a signal removed the staging folder gets an
    /// error for its file, and never makes the staging folder again (`create_dir_all` did:
    /// SIGTERM left `.asa-staging-*/figures/fig11_clipping.svg`).
    #[test]
    fn a_removed_staging_folder_is_never_made_again_by_a_late_writer() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let mut out = stage(&target, &["a.csv"]);
        out.staged_path("figures/early.svg").unwrap();
        assert!(out.staging().join("figures").is_dir());
        let staging = out.staging().to_path_buf();
        std::fs::remove_dir_all(&staging).unwrap();
        assert!(out.staged_path("figures/late.svg").is_err());
        assert!(out.write_bytes("more/b.json", b"{}").is_err());
        assert!(out.staged_folder("checkpoints").is_err());
        assert!(!staging.exists(), "the staging folder was made again");
    }

    #[test]
    fn a_folder_in_the_way_fails_the_commit_before_anything_moves() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        std::fs::create_dir_all(target.join("b.csv")).unwrap();
        let out = stage(&target, &["a.csv", "b.csv", "c.csv"]);
        let err = out.commit().unwrap_err().to_string();
        assert!(err.contains("b.csv: is a folder"), "{err}");
        assert!(
            !target.join("a.csv").exists(),
            "a.csv moved before the clash"
        );
        let left: Vec<_> = std::fs::read_dir(&target).unwrap().collect();
        assert_eq!(left.len(), 1, "only the folder in the way is left");
    }

    #[test]
    fn a_file_in_the_way_of_a_subfolder_fails_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("figures"), "x").unwrap();
        let out = stage(&target, &["a.csv", "figures/fig1.svg"]);
        assert!(out.commit().is_err());
        assert!(!target.join("a.csv").exists());
    }

    #[test]
    fn a_dead_process_staging_folder_is_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        // Linux pids stop at 2^22 (pid_max's ceiling); pid 1 (init) always runs; the same
        // dead pid on another machine may be a live run there
        let host = host_name();
        let (dead, alive, elsewhere) = (
            target.join(staging_name(&host, (1 << 22) + 1)),
            target.join(staging_name(&host, 1)),
            target.join(staging_name("other-node", (1 << 22) + 1)),
        );
        std::fs::create_dir_all(dead.join("checkpoints")).unwrap();
        std::fs::create_dir_all(&alive).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let out = stage(&target, &["a.csv"]);
        assert!(!dead.exists(), "stale staging folder kept");
        assert!(alive.exists(), "a live process's staging folder removed");
        assert!(
            elsewhere.exists(),
            "another machine's staging folder removed"
        );
        out.commit().unwrap();
    }

    #[test]
    fn a_staged_folder_replaces_its_namesake_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        std::fs::create_dir_all(target.join("checkpoints/step-9")).unwrap();
        let mut out = OutputDir::create(&target, Format::Csv, &StagingWatch::new()).unwrap();
        let ckpts = out.staged_folder("checkpoints").unwrap();
        std::fs::create_dir(ckpts.join("step-1")).unwrap();
        assert_eq!(out.final_path("checkpoints"), target.join("checkpoints"));
        out.commit().unwrap();
        assert!(target.join("checkpoints/step-1").is_dir());
        assert!(!target.join("checkpoints/step-9").exists());
        let hidden = std::fs::read_dir(&target)
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with('.'));
        assert!(!hidden, "staging folder left behind");
    }
}
