//! OLMo 2: the Llama layout with norms after attention and MLP (none before) and QK-norm
//! over the whole q and k projections.

use super::llama;
use crate::model::config::family::Family;
use crate::model::config::RawConfig;
use crate::model::layout::Layout;

pub(crate) const FAMILY: Family = Family {
    name: "olmo2",
    norm_eps: rms_norm_eps,
    qk_norm: true,
    layout,
    ..llama::FAMILY
};

/// Olmo2Config's default is 1e-5.
fn rms_norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

fn layout(_: &RawConfig) -> Layout {
    Layout {
        post_norm: true,
        qk_norm_whole: true,
        ..Layout::LLAMA
    }
}
