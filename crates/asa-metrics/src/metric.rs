//! [`Metric`]: the name of a metric of SPEC section 4, as `--metrics` and the tables spell
//! it. Each metric's file defines its constant (`Metric::MAX_LOGIT`); the registry lists
//! them ([`super::registry::REGISTRY`]), so the names known are the registry's.

use asa_core::parse_error::ParseError;
use std::sync::LazyLock;

use super::registry::REGISTRY;

/// A metric of SPEC section 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Metric {
    name: &'static str,
    /// Computed by `analyze` unless `--metrics` names others.
    by_default: bool,
}

static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    REGISTRY
        .iter()
        .flat_map(|entry| entry.0)
        .map(|m| m.name)
        .collect()
});

impl Metric {
    /// A metric `analyze` computes unless `--metrics` names others.
    pub const fn by_default(name: &'static str) -> Self {
        Metric {
            name,
            by_default: true,
        }
    }

    /// A metric computed only when asked for by name (it costs more than the others).
    pub const fn on_request(name: &'static str) -> Self {
        Metric {
            name,
            by_default: false,
        }
    }

    /// Its name, as in the CLI and the tables.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// Every metric's name, in registry order.
    pub fn names() -> &'static [&'static str] {
        &NAMES
    }

    /// Every metric `analyze` computes unless `--metrics` names others.
    pub fn defaults() -> Vec<Metric> {
        Self::every().filter(|m| m.by_default).collect()
    }

    /// Every metric of the registry.
    pub fn every() -> impl Iterator<Item = Metric> {
        REGISTRY.iter().flat_map(|entry| entry.0.iter().copied())
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl serde::Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
    }
}

impl<'de> serde::Deserialize<'de> for Metric {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for Metric {
    type Err = ParseError;

    /// The metric named as in the CLI and the tables ([`Metric::names`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        Self::every()
            .find(|m| m.name == s)
            .ok_or_else(|| ParseError::unknown("metric", s, &NAMES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        let names = Metric::names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        for name in names {
            assert_eq!(name.parse::<Metric>().unwrap().name(), *name);
        }
        assert!("nope"
            .parse::<Metric>()
            .unwrap_err()
            .to_string()
            .contains("max_logit"));
        assert!(!Metric::defaults().contains(&Metric::KEY_RECEIVED));
    }
}
