//! Metric names: which column or tag a `--metric` request means. An exact name wins;
//! otherwise the common aliases are recognised (`train/grad_norm`, `gradient_norm`,
//! `train_loss`, ...) by comparing canonical forms, and more than one alias match is an
//! ambiguity the user resolves by naming the column exactly.

/// The canonical metric names with alias groups.
const ALIASES: &[(&str, &[&str])] = &[
    (
        "grad_norm",
        &[
            "grad_norm",
            "gradient_norm",
            "gradnorm",
            "grad_l2_norm",
            "global_grad_norm",
            "total_grad_norm",
        ],
    ),
    ("loss", &["loss", "lm_loss", "training_loss"]),
];

/// Prefixes that mark a training-time metric and are ignored when matching aliases.
const TRAIN_PREFIXES: &[&str] = &["train/", "train.", "train_", "training/", "trainer/"];

/// Names recognised as the step column or key, in order of preference.
pub const STEP_NAMES: &[&str] = &[
    "step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "iteration",
    "iter",
    "_step",
];

/// Lower-cased, `-`/space/`.` turned into `_`/`/`, a training prefix stripped, and
/// synonyms mapped to their group's name: `Train/Gradient-Norm` -> `grad_norm`.
pub fn canonical(name: &str) -> String {
    let mut s: String = name
        .trim()
        .chars()
        .map(|c| match c {
            '-' | ' ' => '_',
            '.' => '/',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    if s.starts_with("training_") {
        // `training_loss` is a synonym, not a prefix.
    } else if let Some(p) = TRAIN_PREFIXES.iter().find(|p| s.starts_with(**p)) {
        s = s[p.len()..].to_string();
    }
    for (group, names) in ALIASES {
        if names.contains(&s.as_str()) {
            return group.to_string();
        }
    }
    s
}

/// The name a requested metric is reported under: its alias group (`train/loss` ->
/// `loss`), else the request as given.
pub fn display_name(request: &str) -> String {
    let c = canonical(request);
    if ALIASES.iter().any(|(g, _)| *g == c) {
        c
    } else {
        request.to_string()
    }
}

/// The aliases shown in a "metric not found" message.
pub fn alias_hint(request: &str) -> Option<String> {
    let c = canonical(request);
    ALIASES.iter().find(|(g, _)| *g == c).map(|(_, names)| {
        let mut all: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        all.push(format!("train/{c}"));
        all.join(", ")
    })
}

/// How a column name matched a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MatchKind {
    /// Same canonical form (an alias).
    Alias,
    /// Byte-for-byte the requested name (or with `.` for `/`).
    Exact,
}

/// Whether column `name` answers `request`, and how.
pub fn match_kind(request: &str, name: &str) -> Option<MatchKind> {
    if name == request || name == request.replace('.', "/") {
        Some(MatchKind::Exact)
    } else if canonical(name) == canonical(request) {
        Some(MatchKind::Alias)
    } else {
        None
    }
}

/// Picks the column for `request` among `names`: an exact match, else the only alias
/// match. `Err` lists the alias matches when several tie.
pub fn resolve<'a, I>(request: &str, names: I) -> Result<Option<&'a str>, Vec<&'a str>>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(MatchKind, Vec<&'a str>)> = None;
    for name in names {
        let Some(kind) = match_kind(request, name) else {
            continue;
        };
        match &mut best {
            Some((k, v)) if *k == kind => v.push(name),
            Some((k, _)) if *k > kind => {}
            _ => best = Some((kind, vec![name])),
        }
    }
    match best {
        None => Ok(None),
        Some((_, v)) if v.len() == 1 => Ok(Some(v[0])),
        Some((_, v)) => Err(v),
    }
}

/// The step column among `names`, by [`STEP_NAMES`] order (case-insensitive), or the
/// one the user named.
pub fn find_step<'a, I>(names: I, wanted: Option<&str>) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str> + Clone,
{
    if let Some(w) = wanted {
        return names.into_iter().find(|n| *n == w);
    }
    STEP_NAMES.iter().find_map(|s| {
        names
            .clone()
            .into_iter()
            .find(|n| n.eq_ignore_ascii_case(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_share_a_canonical_form() {
        for n in [
            "grad_norm",
            "train/grad_norm",
            "gradient_norm",
            "Train/Gradient-Norm",
            "train.grad_norm",
            "train_grad_norm",
        ] {
            assert_eq!(canonical(n), "grad_norm", "{n}");
        }
        for n in ["loss", "train/loss", "train_loss", "training_loss"] {
            assert_eq!(canonical(n), "loss", "{n}");
        }
        assert_eq!(canonical("eval/loss"), "eval/loss");
        assert_eq!(display_name("train/loss"), "loss");
        assert_eq!(display_name("eval/loss"), "eval/loss");
    }

    #[test]
    fn exact_beats_alias_and_ties_are_reported() {
        let cols = ["step", "loss", "train/loss", "eval/loss"];
        assert_eq!(resolve("loss", cols), Ok(Some("loss")));
        assert_eq!(resolve("train/loss", cols), Ok(Some("train/loss")));
        assert_eq!(resolve("train_loss", cols), Err(vec!["loss", "train/loss"]));
        assert_eq!(resolve("grad_norm", cols), Ok(None));
        assert_eq!(
            resolve("grad_norm", ["train/grad_norm"]),
            Ok(Some("train/grad_norm"))
        );
    }

    #[test]
    fn step_column() {
        assert_eq!(find_step(["Step", "a - loss"], None), Some("Step"));
        assert_eq!(
            find_step(["_step", "trainer/global_step"], None),
            Some("trainer/global_step")
        );
        assert_eq!(find_step(["it", "loss"], Some("it")), Some("it"));
        assert_eq!(find_step(["loss"], None), None);
    }
}
