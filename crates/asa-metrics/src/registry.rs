//! The registry: every accumulator, one line each, with the metrics it computes. An
//! accumulator is built when any of its metrics is asked for; results, tables and the
//! `--metrics` names follow this list's order.

use super::accumulator::{restore, Accumulator, Setup};
use super::{
    alpha_gate, distance, entropy, first_token, heatmap, key_received, max_logit, nll, qk_mean,
    sink_mass, weight_sum, Metric,
};
use super::{head_role, induction};

/// Makes an accumulator again from its saved state (a shard's partial result).
pub type Restore = fn(&[u8]) -> std::result::Result<Box<dyn Accumulator>, rmp_serde::decode::Error>;

/// An accumulator's metrics, its constructor and its restorer.
pub type Entry = (
    &'static [Metric],
    fn(&Setup) -> Box<dyn Accumulator>,
    Restore,
);

/// Every accumulator.
pub static REGISTRY: &[Entry] = &[
    (
        &[Metric::FIRST_TOKEN, Metric::SINK_RATE],
        first_token::build,
        restore::<first_token::FirstToken>,
    ),
    (
        &[Metric::ENTROPY],
        entropy::build,
        restore::<entropy::EntropyAcc>,
    ),
    (
        &[Metric::WEIGHT_SUM, Metric::HEAD_TOTAL],
        weight_sum::build,
        restore::<weight_sum::WeightSum>,
    ),
    (
        &[Metric::QK_MEAN],
        qk_mean::build,
        restore::<qk_mean::QkMean>,
    ),
    (
        &[Metric::SINK_MASS],
        sink_mass::build,
        restore::<sink_mass::SinkMass>,
    ),
    (
        &[Metric::ALPHA],
        alpha_gate::build_alpha,
        restore::<alpha_gate::AlphaStats>,
    ),
    (
        &[Metric::GATE],
        alpha_gate::build_gate,
        restore::<alpha_gate::GateStats>,
    ),
    (&[Metric::NLL], nll::build, restore::<nll::Nll>),
    (
        &[Metric::HEATMAP],
        heatmap::build_heatmap,
        restore::<heatmap::Heatmap>,
    ),
    (
        &[Metric::QUERY_PROFILE],
        heatmap::build_profile,
        restore::<heatmap::QueryProfile>,
    ),
    (
        &[Metric::DISTANCE_PROFILE],
        distance::build,
        restore::<distance::DistanceProfile>,
    ),
    (
        &[Metric::MAX_LOGIT],
        max_logit::build,
        restore::<max_logit::MaxLogit>,
    ),
    (
        &[Metric::KEY_RECEIVED],
        key_received::build,
        restore::<key_received::KeyReceived>,
    ),
    (
        &[Metric::INDUCTION_SCORE],
        induction::build,
        restore::<induction::InductionScore>,
    ),
    // after induction_score: head_role's finish reads its scores
    (
        &[Metric::HEAD_ROLE],
        head_role::build,
        restore::<head_role::HeadScores>,
    ),
    (
        &[Metric::BLOCK_MAP],
        super::block_map::build,
        restore::<super::block_map::BlockMap>,
    ),
];
