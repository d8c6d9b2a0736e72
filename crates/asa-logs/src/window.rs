//! Step windows (`--steps`): `A..B` is half-open (A included, B not), `A..=B` includes B,
//! and either end may be left open (`500..`, `..=9000`). Steps are integers.

use std::fmt;
use std::str::FromStr;

/// A step window that does not parse, or holds no step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepWindowError {
    /// Not of the form `A..B`, `A..=B`, `A..` or `..B` (of integers, `k` allowed).
    #[error("invalid step window `{0}`: expected A..B (B excluded), A..=B, A.. or ..B")]
    Invalid(String),
    /// A window such as `5..5` or `9..2`.
    #[error("step window `{0}` holds no step")]
    Empty(String),
}

/// A range of training steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepWindow {
    /// First step included; `None`: no lower bound.
    pub start: Option<i64>,
    /// Upper bound; `None`: no upper bound.
    pub end: Option<i64>,
    /// Whether `end` itself is included (`A..=B`).
    pub inclusive: bool,
}

impl StepWindow {
    /// Every step.
    pub const ALL: StepWindow = StepWindow {
        start: None,
        end: None,
        inclusive: false,
    };

    /// The half-open window `start..end`.
    pub fn half_open(start: i64, end: i64) -> Self {
        StepWindow {
            start: Some(start),
            end: Some(end),
            inclusive: false,
        }
    }

    /// Whether `step` lies in the window.
    pub fn contains(&self, step: i64) -> bool {
        if self.start.is_some_and(|a| step < a) {
            return false;
        }
        match self.end {
            Some(b) if self.inclusive => step <= b,
            Some(b) => step < b,
            None => true,
        }
    }

    /// The exclusive upper bound as exported (`A..=B` becomes `B + 1`); `None` when open.
    pub fn end_exclusive(&self) -> Option<i64> {
        match self.end {
            Some(b) if self.inclusive => Some(b.saturating_add(1)),
            other => other,
        }
    }

    /// When a log whose first step is `first` starts after the window's start (a log from
    /// step 1 read with `0..500`), what the window then covers and the window that has its
    /// full width: e.g. "starts at step 1, so 0..500 covers 499 steps (1..=499); 1..501
    /// covers 500".
    pub fn late_start_note(&self, first: i64) -> Option<String> {
        let (Some(start), Some(end)) = (self.start, self.end_exclusive()) else {
            return None;
        };
        if first <= start || first >= end {
            return None;
        }
        let width = end - start;
        Some(format!(
            "starts at step {first}, so {self} covers {} steps ({first}..={}); {first}..{} covers {width}",
            end - first,
            end - 1,
            first + width
        ))
    }

    /// `steps 0..500`, or `all steps` for an unbounded window: for messages and captions.
    pub fn describe(&self) -> String {
        if *self == StepWindow::ALL {
            "all steps".into()
        } else {
            format!("steps {self}")
        }
    }

    /// True when no integer step can lie in the window (e.g. `5..5`).
    pub fn is_empty(&self) -> bool {
        match (self.start, self.end_exclusive()) {
            (Some(a), Some(b)) => b <= a,
            _ => false,
        }
    }
}

impl fmt::Display for StepWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start.is_none() && self.end.is_none() {
            return f.write_str("all");
        }
        if let Some(a) = self.start {
            write!(f, "{a}")?;
        }
        f.write_str(if self.inclusive { "..=" } else { ".." })?;
        if let Some(b) = self.end {
            write!(f, "{b}")?;
        }
        Ok(())
    }
}

impl FromStr for StepWindow {
    type Err = StepWindowError;

    /// Parses `A..B`, `A..=B`, `A..`, `..B`, `..=B` or `all`; `k` suffixes are allowed
    /// (`7k..9k` is `7000..9000`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("all") || s == ".." {
            return Ok(StepWindow::ALL);
        }
        let bad = || StepWindowError::Invalid(s.to_string());
        let (lo, hi, inclusive) = if let Some((lo, hi)) = s.split_once("..=") {
            (lo, hi, true)
        } else if let Some((lo, hi)) = s.split_once("..") {
            (lo, hi, false)
        } else {
            return Err(bad());
        };
        let parse = |t: &str| -> Result<Option<i64>, StepWindowError> {
            let t = t.trim();
            if t.is_empty() {
                return Ok(None);
            }
            let (digits, mult) = match t.strip_suffix(['k', 'K']) {
                Some(d) => (d, 1000),
                None => (t, 1),
            };
            digits
                .parse::<i64>()
                .ok()
                .and_then(|v| v.checked_mul(mult))
                .map(Some)
                .ok_or_else(bad)
        };
        let window = StepWindow {
            start: parse(lo)?,
            end: parse(hi)?,
            inclusive,
        };
        if inclusive && window.end.is_none() {
            return Err(bad());
        }
        if window.is_empty() {
            return Err(StepWindowError::Empty(s.to_string()));
        }
        Ok(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_from_step_1_read_from_0_is_one_step_short() {
        let w: StepWindow = "0..500".parse().unwrap();
        assert_eq!(
            w.late_start_note(1).unwrap(),
            "starts at step 1, so 0..500 covers 499 steps (1..=499); 1..501 covers 500"
        );
        assert_eq!(w.late_start_note(0), None);
        assert_eq!(StepWindow::ALL.late_start_note(1), None);
        let w: StepWindow = "0..=499".parse().unwrap();
        assert!(w.late_start_note(1).unwrap().contains("covers 499 steps"));
    }

    #[test]
    fn parses_half_open_and_closed() {
        let w: StepWindow = "0..500".parse().unwrap();
        assert!(w.contains(0) && w.contains(499) && !w.contains(500) && !w.contains(-1));
        assert_eq!(w.end_exclusive(), Some(500));
        let w: StepWindow = "7k..=9k".parse().unwrap();
        assert!(w.contains(7000) && w.contains(9000) && !w.contains(9001));
        assert_eq!(w.end_exclusive(), Some(9001));
        assert_eq!(w.to_string(), "7000..=9000");
    }

    #[test]
    fn open_ends() {
        let w: StepWindow = "500..".parse().unwrap();
        assert!(w.contains(i64::MAX) && !w.contains(499));
        assert_eq!(w.end_exclusive(), None);
        let w: StepWindow = "..10".parse().unwrap();
        assert!(w.contains(-5) && !w.contains(10));
        assert_eq!("all".parse::<StepWindow>().unwrap(), StepWindow::ALL);
    }

    #[test]
    fn rejects_nonsense() {
        for s in ["", "5", "a..b", "10..5", "5..5", "3..=2", "1..=", "1.5..2"] {
            assert!(s.parse::<StepWindow>().is_err(), "{s} should not parse");
        }
        assert!("5..=5".parse::<StepWindow>().is_ok());
        let says = |s: &str| s.parse::<StepWindow>().unwrap_err().to_string();
        assert_eq!(
            says(" 1..x "),
            "invalid step window `1..x`: expected A..B (B excluded), A..=B, A.. or ..B"
        );
        assert_eq!(says("10..5"), "step window `10..5` holds no step");
    }
}
