//! The attention variants of SPEC section 3 with their settings. Their names are
//! [`VariantKind`], declared once in asa-core.

use serde::Serialize;

pub use asa_core::variant::VariantKind;
pub use asa_kernels::beta_length::BetaLength;

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
