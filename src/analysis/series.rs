//! Training series: a folder of step checkpoints (`step-1000/`, `checkpoint-2000/`, ...);
//! the step comes from `trainer_state.json` (`global_step`) when present, else the folder
//! name's trailing number.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

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
    let mut steps = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if !path.join("config.json").is_file() {
            continue;
        }
        if let Some(step) = step_of(&path)? {
            steps.push(StepCheckpoint { step, dir: path });
        }
    }
    if steps.is_empty() {
        return Ok(None);
    }
    steps.sort_by(|a, b| a.step.cmp(&b.step).then_with(|| a.dir.cmp(&b.dir)));
    if let Some(pair) = steps.windows(2).find(|w| w[0].step == w[1].step) {
        return Err(Error::input(
            dir,
            format!(
                "two checkpoints claim step {}: {} and {}",
                pair[0].step,
                pair[0].dir.display(),
                pair[1].dir.display()
            ),
        ));
    }
    Ok(Some(steps))
}

fn step_of(path: &Path) -> Result<Option<u64>> {
    let state = path.join("trainer_state.json");
    if state.is_file() {
        let text = std::fs::read_to_string(&state).map_err(|e| Error::io(&state, e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::input(&state, format!("invalid JSON: {e}")))?;
        if let Some(step) = json.get("global_step").and_then(|v| v.as_u64()) {
            return Ok(Some(step));
        }
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let digits: String = name
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if digits.is_empty() {
        return Ok(None);
    }
    let digits: String = digits.chars().rev().collect();
    digits.parse().map(Some).map_err(|_| {
        Error::input(
            path,
            format!("step {digits} in the folder name is out of range"),
        )
    })
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
        assert!(err.contains("two checkpoints claim step 100"), "{err}");
        let big = tmp.path().join("big").join("step-99999999999999999999999");
        std::fs::create_dir_all(&big).unwrap();
        std::fs::write(big.join("config.json"), "{}").unwrap();
        let err = find_series(&tmp.path().join("big"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("out of range"), "{err}");
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
