//! The registry: every accumulator, one line each, with the metrics it computes. An
//! accumulator is built when any of its metrics is asked for; results, tables and the
//! `--metrics` names follow this list's order.

use super::accumulator::{Accumulator, Setup};
use super::{
    alpha_gate, distance, entropy, first_token, heatmap, key_received, max_logit, nll, qk_mean,
    sink_mass, weight_sum, Metric,
};

/// An accumulator's metrics and its constructor.
pub type Entry = (&'static [Metric], fn(&Setup) -> Box<dyn Accumulator>);

/// Every accumulator.
pub static REGISTRY: &[Entry] = &[
    (
        &[Metric::FIRST_TOKEN, Metric::SINK_RATE],
        first_token::build,
    ),
    (&[Metric::ENTROPY], entropy::build),
    (&[Metric::WEIGHT_SUM, Metric::HEAD_TOTAL], weight_sum::build),
    (&[Metric::QK_MEAN], qk_mean::build),
    (&[Metric::SINK_MASS], sink_mass::build),
    (&[Metric::ALPHA], alpha_gate::build_alpha),
    (&[Metric::GATE], alpha_gate::build_gate),
    (&[Metric::NLL], nll::build),
    (&[Metric::HEATMAP], heatmap::build_heatmap),
    (&[Metric::QUERY_PROFILE], heatmap::build_profile),
    (&[Metric::DISTANCE_PROFILE], distance::build),
    (&[Metric::MAX_LOGIT], max_logit::build),
    (&[Metric::KEY_RECEIVED], key_received::build),
];
