//! `--weight-map FILE` (SPEC section 3): a checkpoint whose tensors are named otherwise
//! than the conventions adapted without code changes. The file is a JSON object of
//! `"convention name pattern": "checkpoint name pattern"`, where `{name}` placeholders
//! stand for one dot-free part of a name and must appear on both sides, e.g.
//!
//! ```json
//! {"model.layers.{l}.self_attn.sinks": "blocks.{l}.attn.sink_logits",
//!  "model.embed_tokens.weight": "wte.weight"}
//! ```
//!
//! A stored tensor that matches a checkpoint pattern is known by the convention name;
//! every other tensor keeps its own name.

use std::path::{Path, PathBuf};

use regex::Regex;

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};

/// What is wrong with one name pattern of a weight map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// An empty pattern.
    #[error("empty name pattern")]
    Empty,
    /// A `{` with no `}` after it.
    #[error("unclosed `{{` in \"{pattern}\"")]
    Unclosed { pattern: String },
    /// A `}` with no `{` before it.
    #[error("unmatched `}}` in \"{pattern}\"")]
    Unmatched { pattern: String },
    /// A placeholder name that is not a regex group name.
    #[error("placeholder `{{{name}}}` in \"{pattern}\" must be a letter or _ followed by letters, digits or _")]
    BadName { name: String, pattern: String },
    /// The same placeholder twice in one pattern.
    #[error("placeholder `{{{name}}}` twice in \"{pattern}\"")]
    Twice { name: String, pattern: String },
}

/// The rules of a weight-map file (none: names are used as stored).
#[derive(Debug, Clone, Default)]
pub struct WeightMap {
    rules: Vec<Rule>,
    path: PathBuf,
}

/// One `convention <- checkpoint` pattern pair.
#[derive(Debug, Clone)]
struct Rule {
    /// Matches a stored name, capturing the placeholders.
    stored: Regex,
    /// The convention pattern, placeholders as `{name}`.
    convention: String,
    /// Placeholder names, as they appear in `convention`.
    placeholders: Vec<String>,
}

impl WeightMap {
    /// Reads and checks a weight-map file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = asa_core::input::read_text(path, asa_core::input::JSON_RECORD)?;
        Self::parse(&text, path)
    }

    /// The map of `--weight-map`, or none.
    pub fn from_option(path: Option<&Path>) -> Result<Self> {
        path.map_or_else(|| Ok(WeightMap::default()), Self::load)
    }

    /// Parses weight-map JSON read from `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let bad = |message: String| {
            let problem = CheckpointProblem::damaged(format!("weight map: {message}"));
            Error::checkpoint_problem(path, problem)
        };
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid(path, "weight map: not valid JSON", e).about(InputKind::Checkpoint)
        })?;
        let object = value.as_object().ok_or_else(|| {
            bad("expected a JSON object of \"convention name\": \"checkpoint name\"".into())
        })?;
        let mut rules = Vec::new();
        for (convention, stored) in object {
            let stored = stored
                .as_str()
                .ok_or_else(|| bad(format!("the value of \"{convention}\" is not a string")))?;
            let pattern = |e: PatternError| bad(e.to_string());
            let (conv_names, _) = split_pattern(convention).map_err(pattern)?;
            let (stored_names, regex) = split_pattern(stored).map_err(pattern)?;
            let (mut a, mut b) = (conv_names.clone(), stored_names);
            a.sort();
            b.sort();
            if a != b {
                return Err(bad(format!(
                    "\"{convention}\" and \"{stored}\" must use the same placeholders"
                )));
            }
            rules.push(Rule {
                stored: Regex::new(&regex).map_err(|e| {
                    let what = format!("weight map: \"{stored}\" is not a valid pattern");
                    Error::invalid(path, what, e).about(InputKind::Checkpoint)
                })?,
                convention: convention.clone(),
                placeholders: conv_names,
            });
        }
        Ok(WeightMap {
            rules,
            path: path.to_path_buf(),
        })
    }

    /// This map's rules, then `fallback`'s (a stored name matching both gets this map's
    /// convention name); errors name this map's file.
    pub fn or_else(mut self, fallback: &WeightMap) -> WeightMap {
        self.rules.extend(fallback.rules.iter().cloned());
        if self.path.as_os_str().is_empty() {
            self.path = fallback.path.clone();
        }
        self
    }

    /// Whether the map renames nothing.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The file the map was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The convention name of the stored tensor `stored`, when a rule matches it.
    pub fn convention_name(&self, stored: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| {
            let caps = rule.stored.captures(stored)?;
            let mut name = rule.convention.clone();
            for p in &rule.placeholders {
                name = name.replace(&format!("{{{p}}}"), &caps[p.as_str()]);
            }
            Some(name)
        })
    }
}

/// The placeholders of `pattern` in order and an anchored regex matching names of it.
fn split_pattern(pattern: &str) -> std::result::Result<(Vec<String>, String), PatternError> {
    if pattern.is_empty() {
        return Err(PatternError::Empty);
    }
    let mut names = Vec::new();
    let mut regex = String::from("^");
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        regex.push_str(&regex::escape(&rest[..open]));
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| PatternError::Unclosed {
                pattern: pattern.to_string(),
            })?;
        let name = &rest[open + 1..open + close];
        // a regex group name: a letter or _ first, then letters, digits or _
        let starts_well = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if !starts_well || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PatternError::BadName {
                name: name.to_string(),
                pattern: pattern.to_string(),
            });
        }
        if names.iter().any(|n| n == name) {
            return Err(PatternError::Twice {
                name: name.to_string(),
                pattern: pattern.to_string(),
            });
        }
        regex.push_str(&format!("(?P<{name}>[^.]+)"));
        names.push(name.to_string());
        rest = &rest[open + close + 1..];
    }
    if rest.contains('}') {
        return Err(PatternError::Unmatched {
            pattern: pattern.to_string(),
        });
    }
    regex.push_str(&regex::escape(rest));
    regex.push('$');
    Ok((names, regex))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(json: &str) -> Result<WeightMap> {
        WeightMap::parse(json, Path::new("map.json"))
    }

    #[test]
    fn patterns_rename_by_placeholder() {
        let m = map(
            r#"{"model.layers.{l}.self_attn.sinks": "blocks.{l}.attn.sink_logits",
                        "model.layers.{l}.mlp.{p}.weight": "h.{l}.ff.{p}.w",
                        "model.embed_tokens.weight": "wte.weight"}"#,
        )
        .unwrap();
        let name = |s: &str| m.convention_name(s);
        assert_eq!(
            name("blocks.12.attn.sink_logits").as_deref(),
            Some("model.layers.12.self_attn.sinks")
        );
        assert_eq!(
            name("h.3.ff.up_proj.w").as_deref(),
            Some("model.layers.3.mlp.up_proj.weight")
        );
        assert_eq!(
            name("wte.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        // placeholders take one dot-free part; literal dots are not wildcards
        assert_eq!(name("blocks.1.2.attn.sink_logits"), None);
        assert_eq!(name("wteXweight"), None);
        assert_eq!(name("lm_head.weight"), None);
    }

    #[test]
    fn bad_maps_are_named_errors() {
        for (json, says) in [
            ("[1, 2]", "JSON object"),
            ("{\"a\": 3}", "not a string"),
            ("{not json", "not valid JSON"),
            (r#"{"model.layers.{l}.x": "h.{n}.x"}"#, "same placeholders"),
            (r#"{"model.layers.{l.x": "h.{l}.x"}"#, "unclosed"),
            (r#"{"a.{l}.{l}": "b.{l}"}"#, "twice"),
            (r#"{"a}": "b"}"#, "unmatched"),
            (r#"{"": "b"}"#, "empty"),
            (
                r#"{"model.layers.{1}.x": "h.{1}.x"}"#,
                "must be a letter or _",
            ),
        ] {
            let err = map(json).unwrap_err().to_string();
            assert!(
                err.contains("map.json") && err.contains(says),
                "{json}: {err}"
            );
        }
    }

    #[test]
    fn pattern_messages_read_as_before() {
        for (pattern, says) in [
            ("", "empty name pattern"),
            ("a.{l", "unclosed `{` in \"a.{l\""),
            ("a}", "unmatched `}` in \"a}\""),
            (
                "a.{1}",
                "placeholder `{1}` in \"a.{1}\" must be a letter or _ followed by letters, digits or _",
            ),
            ("a.{l}.{l}", "placeholder `{l}` twice in \"a.{l}.{l}\""),
        ] {
            assert_eq!(split_pattern(pattern).unwrap_err().to_string(), says);
        }
    }
}
