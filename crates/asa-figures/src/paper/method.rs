//! The methods the paper compares, by the names a user gives them.

/// A method: one of the paper's, or any name (Table 3's alpha nonlinearities, say).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    Baseline,
    Sink,
    AffineScaled,
    Gated,
    AffineScaledGated,
    Other(String),
}

impl Method {
    /// Parses a method name: `baseline` (or `softmax`), `sink`, `affine_scaled` (`asa`),
    /// `gated`, `affine_scaled_gated` (`asa_gated`); anything else is a method of its own.
    pub fn parse(name: &str) -> Method {
        match name
            .to_ascii_lowercase()
            .replace(['-', '+', ' '], "_")
            .as_str()
        {
            "baseline" | "softmax" => Method::Baseline,
            "sink" => Method::Sink,
            "affine_scaled" | "asa" | "affine" => Method::AffineScaled,
            "gated" => Method::Gated,
            "affine_scaled_gated" | "asa_gated" | "asa__gated" | "affine_scaled__gated" => {
                Method::AffineScaledGated
            }
            _ => Method::Other(name.to_string()),
        }
    }

    /// The key in tidy tables and manifests (`baseline`, `affine_scaled`, ...).
    pub fn key(&self) -> &str {
        match self {
            Method::Baseline => "baseline",
            Method::Sink => "sink",
            Method::AffineScaled => "affine_scaled",
            Method::Gated => "gated",
            Method::AffineScaledGated => "affine_scaled_gated",
            Method::Other(name) => name,
        }
    }

    /// The name in the paper's tables.
    pub fn display(&self) -> &str {
        match self {
            Method::Baseline => "Baseline",
            Method::Sink => "Sink",
            Method::AffineScaled => "Affine-Scaled",
            Method::Gated => "Gated",
            Method::AffineScaledGated => "Affine-Scaled + Gated",
            Method::Other(name) => name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        assert_eq!(Method::parse("ASA"), Method::AffineScaled);
        assert_eq!(Method::parse("asa+gated"), Method::AffineScaledGated);
        assert_eq!(Method::parse("softmax"), Method::Baseline);
        assert_eq!(
            Method::parse("sigmoid_alpha"),
            Method::Other("sigmoid_alpha".into())
        );
        assert_eq!(Method::parse("affine-scaled").display(), "Affine-Scaled");
    }
}
