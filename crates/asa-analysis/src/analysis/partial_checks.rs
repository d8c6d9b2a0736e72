//! What `merge` checks before it trusts a partial (SPEC section 8, issue 40): each run.json's
//! `partial` block within its own bounds (a shard count no larger than its lists and the
//! windows it splits, so nothing is allocated by a number read from the file); the partials
//! of one run, of one shard count, no shard twice and (a full merge) none missing; each
//! `partial.parquet` the very file its run.json records (SHA-256), saying of itself the same
//! run, shards and count, its models' fingerprints those of the run, each model's windows
//! exactly its shards' ranges with their tokens' SHA-256; and, across the states read, no
//! window range twice and none missing, whatever run.json claims.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::fingerprint::first_difference;
use super::partial::{Covered, Partial, PartialModel};
use super::record::PartialInfo;
use super::shard::{Shard, ShardSource};
use asa_core::error::{Error, Result};

/// Checks a run.json's `partial` block (`info`, read from `run_json`) on its own: written
/// by a version that ties the state to it, a fingerprint object with a list of models, a
/// shard count bounded by each model's per-shard hashes and windows, distinct shards below
/// the count.
pub fn check_info(run_json: &Path, info: &PartialInfo) -> Result<()> {
    let refuse = |message: String| Err(Error::input(run_json, message));
    if info.states_sha256.is_none() {
        return refuse(format!(
            "a partial result of an older asa-analyze (no partial.states_sha256 ties its partial.parquet to it, so what it holds cannot be checked): re-run the shard with asa-analyze {}",
            env!("CARGO_PKG_VERSION")
        ));
    }
    let models = match &info.fingerprint {
        Value::Object(o) => o.get("models").and_then(Value::as_array),
        other => {
            return refuse(format!(
                "partial.fingerprint is {}, not the run's fingerprint (an object)",
                kind(other)
            ))
        }
    };
    let Some(models) = models.filter(|m| !m.is_empty()) else {
        return refuse("partial.fingerprint.models is not a list of the run's models".into());
    };
    if info.count == 0 {
        return refuse("partial.count is 0: a run has at least one shard".into());
    }
    for (i, model) in models.iter().enumerate() {
        let field = format!("partial.fingerprint.models[{i}]");
        let hashes = model["shard_windows_sha256"].as_array().map_or(0, Vec::len);
        if hashes != info.count {
            return refuse(format!(
                "{field}.shard_windows_sha256 holds {hashes} hashes for partial.count {}",
                info.count
            ));
        }
        match model["windows"].as_u64() {
            Some(windows) if windows >= info.count as u64 => {}
            windows => {
                return refuse(format!(
                    "partial.count {} is more than the {} windows of {field}.windows: at most one shard per window",
                    info.count,
                    windows.map_or("(missing)".into(), |w| w.to_string())
                ))
            }
        }
    }
    let distinct = info.shards.windows(2).all(|w| w[0] < w[1]);
    if info.shards.is_empty() || !distinct || info.shards.iter().any(|&k| k >= info.count) {
        return refuse(format!(
            "partial.shards {} are not distinct shards in ascending order below partial.count {}",
            shown(&info.shards),
            info.count
        ));
    }
    Ok(())
}

/// A JSON value's kind, for a message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// At most the first 10 of `shards`, as `[0, 1, ...]`.
fn shown(shards: &[usize]) -> String {
    let first: Vec<String> = shards.iter().take(10).map(usize::to_string).collect();
    let more = if shards.len() > 10 { ", ..." } else { "" };
    format!("[{}{more}]", first.join(", "))
}

/// Checks that `partials` are of one run and cover no shard twice (and, when `complete`,
/// every shard), as their run.json say: the run's shard count and the shards covered.
pub fn check_partials(partials: &[Partial], complete: bool) -> Result<(usize, Vec<usize>)> {
    let first = partials
        .first()
        .ok_or_else(|| Error::usage("merge needs at least one partial result"))?;
    let mut owner: BTreeMap<usize, &Path> = BTreeMap::new();
    for p in partials {
        if p.info.count != first.info.count {
            return Err(Error::input(
                &p.dir,
                format!(
                    "a shard of {} shards, {} is of {}",
                    p.info.count,
                    first.dir.display(),
                    first.info.count
                ),
            ));
        }
        if let Some(field) = first_difference(&first.info.fingerprint, &p.info.fingerprint, "") {
            return Err(Error::input(
                &p.dir,
                format!(
                    "a partial result of another run than {}: the runs differ in {field}",
                    first.dir.display()
                ),
            ));
        }
        for &k in &p.info.shards {
            if let Some(other) = owner.insert(k, &p.dir) {
                return Err(Error::input(
                    &p.dir,
                    format!(
                        "shard {k} of {} is also in {}",
                        p.info.count,
                        other.display()
                    ),
                ));
            }
        }
    }
    let count = first.info.count;
    // shards are distinct and below the count: the missing ones are counted, not listed
    let missing = count - owner.len();
    if complete && missing > 0 {
        let some: Vec<usize> = (0..count)
            .filter(|k| !owner.contains_key(k))
            .take(10)
            .collect();
        let listed: Vec<String> = some.iter().map(usize::to_string).collect();
        let more = if missing > 10 { ", ..." } else { "" };
        return Err(Error::usage(format!(
            "shard{} {}{more} of {count} missing: merge needs every shard (or --partial for a merge of some)",
            if missing == 1 { "" } else { "s" },
            listed.join(", "),
        )));
    }
    Ok((count, owner.into_keys().collect()))
}

/// Checks the states read from `path` against their run.json's `info`: every row's
/// `identities` entry says the same shards, count and run; one state per model of the run,
/// each with the run's fingerprint of that model and exactly its shards' windows.
pub fn check_states(
    path: &Path,
    info: &PartialInfo,
    identities: &[Option<String>],
    models: &[PartialModel],
) -> Result<()> {
    let refuse = |message: String| Err(Error::input(path, message));
    let run_models = info.fingerprint["models"].as_array().map_or(0, Vec::len);
    if models.len() != run_models {
        return refuse(format!(
            "{} models' states where its run.json's fingerprint has {run_models}",
            models.len()
        ));
    }
    let want = info.identity();
    for identity in identities {
        let said: Option<PartialInfo> = identity
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok());
        let Some(said) = said else {
            return refuse("a row without a readable identity (run fingerprint, shards)".into());
        };
        if said.shards != want.shards || said.count != want.count {
            return refuse(format!(
                "holds shards {} of {} where its run.json says {} of {}: the folder's files were mixed; re-run the shard",
                shown(&said.shards),
                said.count,
                shown(&want.shards),
                want.count
            ));
        }
        if let Some(field) = first_difference(&want.fingerprint, &said.fingerprint, "") {
            return refuse(format!(
                "is the state of another run than its run.json's: they differ in {field}"
            ));
        }
    }
    for (k, model) in models.iter().enumerate() {
        check_model(path, info, &info.fingerprint["models"][k], model)?;
    }
    Ok(())
}

/// Checks one model's state: the run's fingerprint of the model (`fingerprint`), its
/// windows of `total` exactly the ranges of `info`'s shards, with their tokens' SHA-256.
fn check_model(
    path: &Path,
    info: &PartialInfo,
    fingerprint: &Value,
    model: &PartialModel,
) -> Result<()> {
    let refuse = |message: String| {
        Err(Error::input(
            path,
            format!("model {}: {message}", model.label),
        ))
    };
    if let Some(field) = first_difference(fingerprint, &model.fingerprint, "") {
        return refuse(format!(
            "its state's fingerprint differs from its run.json's in {field}"
        ));
    }
    if fingerprint["windows"].as_u64() != Some(model.total) {
        return refuse(format!(
            "its state counts {} windows where the run has {}",
            model.total, fingerprint["windows"]
        ));
    }
    let shards: Vec<usize> = model.covers.iter().map(|c| c.shard).collect();
    if shards != info.shards {
        return refuse(format!(
            "its state holds the windows of shards {} where its run.json says {}",
            shown(&shards),
            shown(&info.shards)
        ));
    }
    let total = usize::try_from(model.total).unwrap_or(usize::MAX);
    let mut windows = 0u64;
    for c in &model.covers {
        let want = Covered {
            sha256: fingerprint["shard_windows_sha256"][c.shard]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            ..Covered::range(&shard_of(c.shard, info.count), total)
        };
        if (c.start, c.end) != (want.start, want.end) {
            return refuse(format!(
                "its state holds windows {}..{} as shard {}, whose windows are {}..{} of {total}",
                c.start, c.end, c.shard, want.start, want.end
            ));
        }
        if c.sha256 != want.sha256 {
            return refuse(format!(
                "the windows {}..{} of its state are not the run's (their tokens' SHA-256 differs)",
                c.start, c.end
            ));
        }
        windows += c.end - c.start;
    }
    if windows != model.windows {
        return refuse(format!(
            "its state counts {} windows where its shards hold {windows}",
            model.windows
        ));
    }
    Ok(())
}

/// Shard `index` of `count`.
fn shard_of(index: usize, count: usize) -> Shard {
    Shard {
        index,
        count,
        source: ShardSource::Flag,
    }
}

/// The window ranges merged so far, per model (by its place in the states), with the
/// partial each came from: no range twice, and (a full merge) every shard's.
pub struct Coverage {
    count: usize,
    models: Vec<(String, BTreeMap<usize, PathBuf>)>,
}

impl Coverage {
    /// Nothing covered yet, of a run of `count` shards.
    pub fn new(count: usize) -> Coverage {
        Coverage {
            count,
            models: Vec::new(),
        }
    }

    /// Adds the windows of `model`, the `k`-th state of partial `dir`; refuses a range
    /// another partial holds.
    pub fn add(&mut self, k: usize, model: &PartialModel, dir: &Path) -> Result<()> {
        if self.models.len() <= k {
            self.models.push((model.label.clone(), BTreeMap::new()));
        }
        let Some((_, owner)) = self.models.get_mut(k) else {
            return Err(Error::input(dir, "its models are not in the run's order"));
        };
        for c in &model.covers {
            if let Some(other) = owner.insert(c.shard, dir.to_path_buf()) {
                return Err(Error::input(
                    dir,
                    format!(
                        "model {}: windows {}..{} (shard {} of {}) are also in {}",
                        model.label,
                        c.start,
                        c.end,
                        c.shard,
                        self.count,
                        other.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// When `complete`, checks that every model holds every shard's windows.
    pub fn check(&self, complete: bool) -> Result<()> {
        if !complete {
            return Ok(());
        }
        for (label, owner) in &self.models {
            if let Some(k) = (0..self.count).find(|k| !owner.contains_key(k)) {
                return Err(Error::usage(format!(
                    "model {label}: the windows of shard {k} of {} are in none of the partials: merge needs every shard",
                    self.count
                )));
            }
        }
        Ok(())
    }
}
