//! The attention variants of SPEC section 3: their names, settings, and the rule that
//! turns one block of scaled logits into effective weights a_ij.

use asa_core::parse_error::ParseError;
use serde::Serialize;

pub use asa_kernels::beta_length::BetaLength;

/// The attention variant of a checkpoint (`attention_variant` in config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
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
    /// Names accepted in config.json and by `--variant`.
    pub const NAMES: [&'static str; 8] = [
        "softmax",
        "off_by_one",
        "sink",
        "gated",
        "affine_scaled",
        "affine_scaled_gated",
        "scale_invariant",
        "logn",
    ];

    /// Names accepted in config.json, for error messages.
    pub const SUPPORTED: &'static str =
        "softmax, off_by_one, sink, gated, affine_scaled, affine_scaled_gated, scale_invariant, logn";

    /// Parses a config.json name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "softmax" => VariantKind::Softmax,
            "off_by_one" => VariantKind::OffByOne,
            "sink" => VariantKind::Sink,
            "gated" => VariantKind::Gated,
            "affine_scaled" => VariantKind::AffineScaled,
            "affine_scaled_gated" => VariantKind::AffineScaledGated,
            "scale_invariant" => VariantKind::ScaleInvariant,
            "logn" => VariantKind::Logn,
            _ => return None,
        })
    }

    /// The config.json name.
    pub fn name(self) -> &'static str {
        match self {
            VariantKind::Softmax => "softmax",
            VariantKind::OffByOne => "off_by_one",
            VariantKind::Sink => "sink",
            VariantKind::Gated => "gated",
            VariantKind::AffineScaled => "affine_scaled",
            VariantKind::AffineScaledGated => "affine_scaled_gated",
            VariantKind::ScaleInvariant => "scale_invariant",
            VariantKind::Logn => "logn",
        }
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

impl std::str::FromStr for VariantKind {
    type Err = ParseError;

    /// A variant by its config.json name ([`VariantKind::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        VariantKind::parse(s).ok_or_else(|| ParseError::Unknown {
            what: "attention variant",
            given: s.to_string(),
            choices: VariantKind::SUPPORTED.to_string(),
        })
    }
}

/// The attention variant a model runs, with the settings of the variants that have some
/// (a plain softmax layer carries none). [`VariantKind`] is its name; config.json's blocks
/// become one with `crate::model::config::VariantSettings::variant`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Variant {
    /// a = softmax(s).
    Softmax,
    /// a = exp(s) / (sum exp(s) + 1).
    OffByOne,
    /// GPT-OSS learnable per-head sink logit.
    Sink,
    /// softmax, output gated by sigmoid(g) per head dimension.
    Gated,
    /// a = alpha * softmax + beta on visible keys.
    AffineScaled(AffineConfig),
    /// affine_scaled weights with a gated output.
    AffineScaledGated(AffineConfig),
    /// softmax over a_t s + m_t, t = i - j.
    ScaleInvariant(ScaleInvariantConfig),
    /// softmax over s * s_h * ln(i + 1); `scale`: s_h for every head from config.json, used
    /// when no `self_attn.logn_scale` is stored.
    Logn { scale: Option<f64> },
}

impl Variant {
    /// Its name.
    pub fn kind(&self) -> VariantKind {
        match self {
            Variant::Softmax => VariantKind::Softmax,
            Variant::OffByOne => VariantKind::OffByOne,
            Variant::Sink => VariantKind::Sink,
            Variant::Gated => VariantKind::Gated,
            Variant::AffineScaled(_) => VariantKind::AffineScaled,
            Variant::AffineScaledGated(_) => VariantKind::AffineScaledGated,
            Variant::ScaleInvariant(_) => VariantKind::ScaleInvariant,
            Variant::Logn { .. } => VariantKind::Logn,
        }
    }

    /// The Affine-Scaled settings (the affine variants only).
    pub fn affine(&self) -> Option<&AffineConfig> {
        match self {
            Variant::AffineScaled(affine) | Variant::AffineScaledGated(affine) => Some(affine),
            _ => None,
        }
    }
}

/// phi in alpha = phi(w . x).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// 0 for x <= -5, 0.1x + 0.5 between, 1 for x >= 5.
    #[default]
    LinearClipping,
    /// 1 / (1 + exp(-x)).
    Sigmoid,
}

/// The `affine_scaled` block of config.json.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AffineConfig {
    pub activation: Activation,
    pub beta_length: BetaLength,
    /// rho of the alpha_ma moving average (training only).
    pub momentum: f64,
}

impl Default for AffineConfig {
    fn default() -> Self {
        AffineConfig {
            activation: Activation::LinearClipping,
            beta_length: BetaLength::Full,
            momentum: 0.9,
        }
    }
}

/// The `scale_invariant` block of config.json.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleInvariantConfig {
    /// tau in a_t = sqrt(1 + 2 ln(1 + t / tau)), m_t = -2 ln(1 + t / tau); > 0.
    pub tau: f64,
}

impl Default for ScaleInvariantConfig {
    /// tau = 10, the paper's best of 0.01..100.
    fn default() -> Self {
        ScaleInvariantConfig { tau: 10.0 }
    }
}
