//! How Affine-Scaled attention counts N in beta (SPEC section 2): the CPU's tiles and the
//! GPU's kernels both read it.

use serde::Serialize;

/// N in beta = (alpha_ma - alpha) / N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BetaLength {
    /// N = T, the analysed window length.
    #[default]
    Full,
    /// N = i + 1, the keys query i sees.
    Visible,
}
