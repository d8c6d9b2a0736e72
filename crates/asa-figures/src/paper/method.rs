//! The methods the paper compares, by the names a user gives them.

use asa_core::variant::VariantKind;

/// A method: an attention variant of SPEC section 3, or any name (Table 3's alpha
/// nonlinearities, say).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// A variant; the paper's `baseline` is [`VariantKind::Softmax`].
    Variant(VariantKind),
    /// A method of its own, by the name given.
    Other(String),
}

impl Method {
    /// The paper's baseline: softmax attention.
    pub const BASELINE: Method = Method::Variant(VariantKind::Softmax);

    /// Parses a method name: a variant's name (`softmax`, `affine_scaled`, ...; case, `-`,
    /// `+` and spaces aside) or one of the paper's: `baseline`, `asa`, `asa_gated`;
    /// anything else is a method of its own.
    pub fn parse(name: &str) -> Method {
        let normal = name.to_ascii_lowercase().replace(['-', '+', ' '], "_");
        let kind = match normal.as_str() {
            "baseline" => Some(VariantKind::Softmax),
            "asa" | "affine" => Some(VariantKind::AffineScaled),
            "asa_gated" | "asa__gated" | "affine_scaled__gated" => {
                Some(VariantKind::AffineScaledGated)
            }
            other => VariantKind::parse(other),
        };
        kind.map_or_else(|| Method::Other(name.to_string()), Method::Variant)
    }

    /// The key in tidy tables and manifests (`baseline`, `affine_scaled`, ...).
    pub fn key(&self) -> &str {
        match self {
            Method::Variant(VariantKind::Softmax) => "baseline",
            Method::Variant(kind) => kind.name(),
            Method::Other(name) => name,
        }
    }

    /// The name in the paper's tables.
    pub fn display(&self) -> &str {
        match self {
            Method::Variant(VariantKind::Softmax) => "Baseline",
            Method::Variant(kind) => kind.label(),
            Method::Other(name) => name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases() {
        let affine = Method::Variant(VariantKind::AffineScaled);
        assert_eq!(Method::parse("ASA"), affine);
        assert_eq!(
            Method::parse("asa+gated"),
            Method::Variant(VariantKind::AffineScaledGated)
        );
        assert_eq!(Method::parse("softmax"), Method::BASELINE);
        assert_eq!(Method::parse("Baseline").key(), "baseline");
        assert_eq!(
            Method::parse("sigmoid_alpha"),
            Method::Other("sigmoid_alpha".into())
        );
        assert_eq!(Method::parse("affine-scaled").display(), "Affine-Scaled");
        assert_eq!(
            Method::parse("asa_gated").display(),
            "Affine-Scaled + Gated"
        );
        assert_eq!(Method::parse("Off-by-one").key(), "off_by_one");
    }
}
