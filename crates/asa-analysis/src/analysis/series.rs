//! Training series: a folder of step checkpoints (`step-1000/`, `checkpoint-2000/`, ...);
//! the step comes from `trainer_state.json` (`global_step`) when present, else the folder
//! name's trailing number.

use std::path::{Path, PathBuf};

use asa_core::error::{Error, Result};

/// The largest step a series holds: its tables' step column is a signed 64-bit integer.
pub const MAX_STEP: u64 = i64::MAX as u64;

/// One checkpoint of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCheckpoint {
    pub step: u64,
    pub dir: PathBuf,
}

/// The step checkpoints inside `dir`, sorted by step, or `None` when `dir` is itself a
/// checkpoint (has config.json) or holds no step folders.
pub fn find_series(dir: &Path) -> Result<Option<Vec<StepCheckpoint>>> {
    if dir.join("config.json").is_file() || !dir.is_dir() {
        return Ok(None);
    }
    // (checkpoint, where its step came from, the folder it resolves to)
    let mut found: Vec<(StepCheckpoint, String, PathBuf)> = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if !path.join("config.json").is_file() {
            continue;
        }
        if let Some((step, source)) = step_of(&path)? {
            let real = path.canonicalize().unwrap_or_else(|_| path.clone());
            found.push((StepCheckpoint { step, dir: path }, source, real));
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    found.sort_by(|a, b| a.0.step.cmp(&b.0.step).then_with(|| a.0.dir.cmp(&b.0.dir)));
    // a link to another step folder (`latest -> checkpoint-1000`) is that folder
    found.dedup_by(|later, first| later.2 == first.2);
    if let Some(pair) = found.windows(2).find(|w| w[0].0.step == w[1].0.step) {
        let name = |(c, source, _): &(StepCheckpoint, String, PathBuf)| {
            format!("{} ({source})", c.dir.display())
        };
        return Err(Error::input(
            dir,
            format!(
                "two checkpoints claim step {}: {} and {}",
                pair[0].0.step,
                name(&pair[0]),
                name(&pair[1])
            ),
        ));
    }
    Ok(Some(found.into_iter().map(|f| f.0).collect()))
}

/// The step of a checkpoint folder and where it came from: `trainer_state.json`'s
/// `global_step`, else the folder name's trailing number (one too long for a step, say a
/// timestamp, makes it no step folder).
pub(crate) fn step_of(path: &Path) -> Result<Option<(u64, String)>> {
    let state = path.join("trainer_state.json");
    if state.is_file() {
        let text = asa_core::input::read_text(&state, asa_core::input::JSON_RECORD)?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::input(&state, format!("invalid JSON: {e}")))?;
        if let Some(step) = json.get("global_step").and_then(|v| v.as_u64()) {
            return checked_step(path, step, "global_step of trainer_state.json");
        }
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let digits: String = digits.chars().rev().collect();
    match digits.parse() {
        Ok(step) => checked_step(path, step, "folder name"),
        Err(_) => Ok(None),
    }
}

/// `step` from `source`, refused past [`MAX_STEP`].
fn checked_step(path: &Path, step: u64, source: &str) -> Result<Option<(u64, String)>> {
    if step > MAX_STEP {
        return Err(Error::input(
            path,
            format!("step {step} ({source}) is past the largest step a series holds ({MAX_STEP})"),
        ));
    }
    Ok(Some((step, source.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_checkpoints_of_one_step_are_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["step-100", "checkpoint-100"] {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("config.json"), "{}").unwrap();
        }
        let err = find_series(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("two checkpoints claim step 100")
                && err.contains("checkpoint-100 (folder name)"),
            "{err}"
        );
        // a link to a step folder is that folder, not a second step
        let linked = tmp.path().join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::fs::rename(tmp.path().join("step-100"), linked.join("step-100")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(linked.join("step-100"), linked.join("latest-100")).unwrap();
        let steps = find_series(&linked).unwrap().unwrap();
        assert_eq!(steps.len(), 1, "{steps:?}");
        // a trailing number too long for a step (a timestamp) is no step folder
        let stamp = linked.join("run-99999999999999999999999");
        std::fs::create_dir(&stamp).unwrap();
        std::fs::write(stamp.join("config.json"), "{}").unwrap();
        assert_eq!(find_series(&linked).unwrap().unwrap().len(), 1);
    }

    #[test]
    fn steps_come_from_names_or_trainer_state() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, state) in [
            ("step-2000", None),
            ("step-1000", None),
            ("checkpoint-x", Some(500)),
            ("notes", None),
        ] {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            if name != "notes" {
                std::fs::write(d.join("config.json"), "{}").unwrap();
            }
            if let Some(step) = state {
                std::fs::write(
                    d.join("trainer_state.json"),
                    format!("{{\"global_step\": {step}}}"),
                )
                .unwrap();
            }
        }
        let steps: Vec<u64> = find_series(tmp.path())
            .unwrap()
            .unwrap()
            .iter()
            .map(|s| s.step)
            .collect();
        assert_eq!(steps, vec![500, 1000, 2000]);
    }
}
