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

use std::path::{Path, PathBuf};

use super::series::StepCheckpoint;
use crate::error::{Error, Result};

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
        let by_ref = std::fs::read_to_string(folder.join("refs").join(revision))
            .ok()
            .map(|hash| hash.trim().to_string());
        let hash = by_ref.unwrap_or_else(|| revision.to_string());
        let dir = folder.join("snapshots").join(&hash);
        match (dir.join("config.json").is_file(), pinned) {
            (true, _) => Ok(dir),
            (false, true) => Err(Error::input(
                &folder,
                format!(
                    "{repo}@{revision} is not in the local Hugging Face cache (no \
                     refs/{revision} or snapshots/{revision} with a config.json); fetch it \
                     with `huggingface-cli download {repo} --revision {revision}`"
                ),
            )),
            (false, false) => Err(Error::input(
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
}
