//! The attention variants of SPEC section 3 by name: the one list of them. Every crate that
//! treats variants differently matches on [`VariantKind`] (the engine's logit rule, the
//! models' settings and detection, training's parameters, the figures' colours), so a new
//! variant is added here and the compiler names each place that must learn it.

use serde::Serialize;

use crate::parse_error::ParseError;

/// The attention variant of a checkpoint (`attention_variant` in config.json).
///
/// Its names come with the variants (strum's derives): [`VariantKind::name`], the list
/// [`VariantKind::NAMES`] and every variant, [`VariantKind::ALL`], in the order of SPEC
/// section 3.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    strum::IntoStaticStr,
    strum::VariantNames,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum VariantKind {
    /// a = softmax(s).
    Softmax,
    /// a = exp(s) / (sum exp(s) + 1).
    OffByOne,
    /// GPT-OSS learnable per-head sink logit.
    Sink,
    /// softmax, output gated by sigmoid(g) per head dimension.
    Gated,
    /// a = alpha * softmax + beta on visible keys.
    AffineScaled,
    /// affine_scaled weights with a gated output.
    AffineScaledGated,
    /// softmax over a_t s + m_t, t = i - j (Anson, Wang, Aitchison, arXiv 2505.17083).
    ScaleInvariant,
    /// softmax over s * s_h * ln(i + 1) (LogN / Scalable-Softmax).
    Logn,
}

impl VariantKind {
    /// Every variant, in the order of SPEC section 3.
    pub const ALL: &'static [VariantKind] = <VariantKind as strum::VariantArray>::VARIANTS;

    /// Names accepted in config.json and by `--variant`, in the order of [`VariantKind::ALL`].
    pub const NAMES: &'static [&'static str] = <VariantKind as strum::VariantNames>::VARIANTS;

    /// The config.json name.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The name in a table or legend written for people ("Affine-Scaled + Gated").
    pub const fn label(self) -> &'static str {
        match self {
            VariantKind::Softmax => "Softmax",
            VariantKind::OffByOne => "Off-by-one",
            VariantKind::Sink => "Sink",
            VariantKind::Gated => "Gated",
            VariantKind::AffineScaled => "Affine-Scaled",
            VariantKind::AffineScaledGated => "Affine-Scaled + Gated",
            VariantKind::ScaleInvariant => "Scale-invariant",
            VariantKind::Logn => "LogN",
        }
    }

    /// Parses a config.json name.
    pub fn parse(name: &str) -> Option<Self> {
        VariantKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.name() == name)
    }

    /// The names accepted, for messages: "softmax, off_by_one, ...".
    pub fn supported() -> String {
        VariantKind::NAMES.join(", ")
    }

    /// Whether the output is multiplied by sigmoid(gate) before o_proj.
    pub fn is_gated(self) -> bool {
        matches!(self, VariantKind::Gated | VariantKind::AffineScaledGated)
    }

    /// Whether weights are alpha * softmax + beta.
    pub fn is_affine(self) -> bool {
        matches!(
            self,
            VariantKind::AffineScaled | VariantKind::AffineScaledGated
        )
    }

    /// Whether every query's weights sum to 1 by construction (a plain softmax over the real
    /// keys: softmax, gated, scale_invariant, logn), so weight sums differ from 1 only by
    /// float rounding.
    pub fn weights_sum_to_one(self) -> bool {
        !self.has_sink_mass() && !self.is_affine()
    }

    /// Whether part of each row's mass goes to no token (sink, off_by_one).
    pub fn has_sink_mass(self) -> bool {
        matches!(self, VariantKind::Sink | VariantKind::OffByOne)
    }
}

impl std::fmt::Display for VariantKind {
    /// The config.json name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for VariantKind {
    type Err = ParseError;

    /// A variant by its config.json name ([`VariantKind::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        VariantKind::parse(s)
            .ok_or_else(|| ParseError::unknown("attention variant", s, VariantKind::NAMES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_variant() {
        for &kind in VariantKind::ALL {
            assert_eq!(VariantKind::parse(kind.name()), Some(kind));
            assert_eq!(kind.name().parse::<VariantKind>(), Ok(kind));
        }
        assert_eq!(VariantKind::parse("Softmax"), None);
    }

    #[test]
    fn the_names_are_spec_sections_and_the_serialized_ones() {
        assert_eq!(
            VariantKind::supported(),
            "softmax, off_by_one, sink, gated, affine_scaled, affine_scaled_gated, \
             scale_invariant, logn"
        );
        for &kind in VariantKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.name()));
        }
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let err = "softmax2".parse::<VariantKind>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown attention variant `softmax2` (one of softmax, off_by_one, sink, gated, \
             affine_scaled, affine_scaled_gated, scale_invariant, logn)"
        );
    }

    #[test]
    fn sink_mass_affine_and_plain_softmax_split_the_variants() {
        let plain: Vec<_> = VariantKind::ALL
            .iter()
            .copied()
            .filter(|k| k.weights_sum_to_one())
            .collect();
        use VariantKind::*;
        assert_eq!(plain, [Softmax, Gated, ScaleInvariant, Logn]);
        assert!(AffineScaledGated.is_gated() && AffineScaledGated.is_affine());
        assert!(!Sink.is_affine() && Sink.has_sink_mass() && OffByOne.has_sink_mass());
    }
}
