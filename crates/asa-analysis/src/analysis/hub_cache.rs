//! Checkpoints named by Hugging Face Hub id and revision, resolved through the local
//! Hugging Face cache, offline as transformers with `HF_HUB_OFFLINE=1`:
//! `HuggingFaceTB/SmolLM2-135M` is the snapshot `refs/main` points to,
//! `EleutherAI/pythia-160m@step1000` the one `refs/step1000` points to (issue 25: Pythia and
//! OLMo publish their training steps as revisions), and
//! `EleutherAI/pythia-160m@step1000,step2000,step3000` a training series whose steps come
//! from the revision names. Nothing is downloaded: a model or revision missing from the
//! cache is an error that says how to fetch it. A path that exists is always a path.
//!
//! The cache is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`, laid
//! out as huggingface_hub lays it out: `models--{org}--{name}/refs/{revision}` holds a
//! commit hash, `snapshots/{hash}/` the files.
//!
//! A ref resolves only to a snapshot of its own repository's folder: its text (a regular
//! file of at most [`asa_core::input::HUB_REF`] bytes, surrounding whitespace trimmed) must be
//! a snapshot name, 1 to [`MAX_SNAPSHOT_NAME`] ASCII letters and digits (a commit hash: no
//! separator, no `..`, no absolute path), the folder `snapshots/{name}` must exist with a
//! config.json, and its canonical path must be `snapshots/{name}` of the repository folder's
//! canonical path (a snapshot, or `snapshots/`, that is a symbolic link elsewhere is
//! refused; a cache that is itself a link is fine). A ref that breaks a rule
//! is an error naming the ref file; a revision with no ref names a snapshot directly, under
//! the same rules.

use std::path::{Path, PathBuf};

use super::series::StepCheckpoint;
use asa_core::error::{Error, Result};

/// A model argument read as a Hub id.
#[derive(Debug, Clone, PartialEq)]
pub enum HubModel {
    /// One revision's snapshot folder.
    Checkpoint(PathBuf),
    /// Several revisions, as a training series sorted by step.
    Series(Vec<StepCheckpoint>),
}

/// `spec` resolved when it names a Hub model (`org/name@revision[,revision...]`) and is
/// not a path that exists; `None` for anything else.
pub fn resolve(spec: &Path) -> Result<Option<HubModel>> {
    let Some(text) = spec.to_str().filter(|_| !spec.exists()) else {
        return Ok(None);
    };
    // `org/name` alone is its main revision
    let (repo, revisions, pinned) = match text.split_once('@') {
        Some((repo, revisions)) => (repo, revisions, true),
        None => (text, "main", false),
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !s.starts_with('.')
    };
    match repo.split_once('/') {
        Some((org, name)) if plain(org) && plain(name) => {}
        _ => return Ok(None),
    }
    let revisions: Vec<&str> = revisions.split(',').map(str::trim).collect();
    if revisions.iter().any(|r| !plain(r)) {
        return Err(Error::usage(format!(
            "{text}: revisions are names like step1000 or commit hashes, separated by commas"
        )));
    }
    let root = cache_root();
    let folder = root.join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = |revision: &str| -> Result<PathBuf> {
        let dir = snapshot_dir(&folder, revision)?;
        match (dir, pinned) {
            (Some(dir), _) => Ok(dir),
            (None, true) => Err(Error::input(
                &folder,
                format!(
                    "{repo}@{revision} is not in the local Hugging Face cache (no \
                     refs/{revision} or snapshots/{revision} with a config.json); fetch it \
                     with `huggingface-cli download {repo} --revision {revision}`"
                ),
            )),
            (None, false) => Err(Error::input(
                spec,
                format!(
                    "no such checkpoint folder, and {repo} is not in the local Hugging Face \
                     cache {} either; fetch it with `huggingface-cli download {repo}`",
                    root.display()
                ),
            )),
        }
    };
    if let [revision] = revisions.as_slice() {
        return Ok(Some(HubModel::Checkpoint(snapshot(revision)?)));
    }
    let mut steps = Vec::new();
    for revision in &revisions {
        let step = step_of(revision).ok_or_else(|| {
            Error::usage(format!(
                "{text}: no training step in the revision name `{revision}` (expected e.g. step1000)"
            ))
        })?;
        if steps.iter().any(|s: &StepCheckpoint| s.step == step) {
            return Err(Error::usage(format!(
                "{text}: two revisions name step {step}"
            )));
        }
        steps.push(StepCheckpoint {
            step,
            dir: snapshot(revision)?,
        });
    }
    steps.sort_by_key(|s| s.step);
    Ok(Some(HubModel::Series(steps)))
}

/// The longest snapshot name: a SHA-256 commit id (a SHA-1 one, what the Hub uses, is 40).
pub const MAX_SNAPSHOT_NAME: usize = 64;

/// The snapshot folder of `revision` in the repository folder `folder` (see the module doc),
/// `None` when the cache does not hold it; an error when its ref breaks a rule.
fn snapshot_dir(folder: &Path, revision: &str) -> Result<Option<PathBuf>> {
    let ref_path = folder.join("refs").join(revision);
    let name = match asa_core::input::read_text(&ref_path, asa_core::input::HUB_REF) {
        Ok(text) => {
            let name = text.trim();
            if !is_snapshot_name(name) {
                return Err(refused_ref(&ref_path, name));
            }
            name.to_string()
        }
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            match is_snapshot_name(revision) {
                true => revision.to_string(),
                false => return Ok(None),
            }
        }
        Err(e) => return Err(e),
    };
    let snapshots = folder.join("snapshots");
    let dir = snapshots.join(&name);
    if !dir.join("config.json").is_file() {
        return Ok(None);
    }
    // a snapshot folder (or snapshots/) that is a link out of the repository's folder
    let inside = match (folder.canonicalize(), dir.canonicalize()) {
        (Ok(repo), Ok(real)) => real == repo.join("snapshots").join(&name),
        _ => false,
    };
    if !inside {
        return Err(Error::input(
            &dir,
            "leads out of the cache's snapshots/ folder (a symbolic link?); a Hub revision \
             resolves only to a snapshot inside the cache",
        ));
    }
    Ok(Some(dir))
}

/// A commit-hash-like snapshot name: 1 to [`MAX_SNAPSHOT_NAME`] ASCII letters and digits.
fn is_snapshot_name(name: &str) -> bool {
    (1..=MAX_SNAPSHOT_NAME).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The error of a ref whose text `held` is no snapshot name.
fn refused_ref(ref_path: &Path, held: &str) -> Error {
    let shown: String = held.chars().take(80).collect();
    let more = if shown.len() < held.len() { "..." } else { "" };
    Error::input(
        ref_path,
        format!(
            "holds `{shown}{more}`, no snapshot name: a ref resolves only to a snapshot inside the \
             cache, named by a commit hash (letters and digits, at most {MAX_SNAPSHOT_NAME})"
        ),
    )
}

/// The Hugging Face cache folder.
fn cache_root() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))
        .unwrap_or_else(|| PathBuf::from(".cache/huggingface/hub"))
}

/// The step a revision names: the number after `step` (Pythia's `step1000`, OLMo's
/// `stage1-step1000-tokens4B`), else its trailing number.
fn step_of(revision: &str) -> Option<u64> {
    let digits = |s: &str| -> Option<u64> {
        let n: String = s.chars().take_while(char::is_ascii_digit).collect();
        n.parse().ok()
    };
    if let Some(at) = revision.find("step") {
        return digits(&revision[at + 4..]);
    }
    let tail: String = revision
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    tail.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_come_from_pythia_and_olmo_revision_names() {
        assert_eq!(step_of("step1000"), Some(1000));
        assert_eq!(step_of("stage1-step1000-tokens4B"), Some(1000));
        assert_eq!(step_of("checkpoint-250"), Some(250));
        assert_eq!(step_of("main"), None);
    }

    /// A repository folder with `refs/main` holding `held` and a snapshot `abc123`.
    fn cache_with_ref(held: &str) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let folder = tmp.path().join("models--o--m");
        std::fs::create_dir_all(folder.join("refs")).unwrap();
        std::fs::create_dir_all(folder.join("snapshots/abc123")).unwrap();
        std::fs::write(folder.join("snapshots/abc123/config.json"), "{}").unwrap();
        std::fs::write(folder.join("refs/main"), held).unwrap();
        (tmp, folder)
    }

    #[test]
    fn refs_resolve_only_to_snapshots_inside_the_cache() {
        let (_tmp, folder) = cache_with_ref("abc123\n");
        let dir = snapshot_dir(&folder, "main").unwrap().unwrap();
        assert_eq!(dir, folder.join("snapshots/abc123"));
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("config.json"), "{}").unwrap();
        let absolute = outside.path().to_str().unwrap().to_string();
        for held in [
            absolute.as_str(),
            "../../x",
            "abc/123",
            "..",
            "a".repeat(65).as_str(),
        ] {
            let (_tmp, folder) = cache_with_ref(held);
            let err = snapshot_dir(&folder, "main").unwrap_err().to_string();
            assert!(err.contains("refs/main: holds `"), "{held}: {err}");
        }
        // a missing snapshot is not in the cache
        let (_tmp, folder) = cache_with_ref("def456");
        assert_eq!(snapshot_dir(&folder, "main").unwrap(), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_snapshot_linked_out_of_the_cache_is_refused() {
        let (_tmp, folder) = cache_with_ref("def456");
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("config.json"), "{}").unwrap();
        std::os::unix::fs::symlink(outside.path(), folder.join("snapshots/def456")).unwrap();
        let err = snapshot_dir(&folder, "main").unwrap_err().to_string();
        assert!(err.contains("leads out of the cache"), "{err}");
    }
}
