//! [`ProbeKind`]: the built-in probe a run's windows are (`--probe`), as run.json records
//! it (asa-analysis builds its windows).

use std::fmt;

use asa_core::parse_error::ParseError;

/// A built-in probe that replaces the corpus (`--probe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// BOS, L random ids, the same L ids again.
    Induction,
}

impl ProbeKind {
    /// The names `--probe` takes.
    pub const NAMES: [&'static str; 1] = ["induction"];
}

impl std::str::FromStr for ProbeKind {
    type Err = ParseError;

    /// The probe named as in the CLI ([`ProbeKind::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        match s {
            "induction" => Ok(ProbeKind::Induction),
            _ => Err(ParseError::unknown("probe", s, &ProbeKind::NAMES)),
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Induction => "induction",
        })
    }
}
