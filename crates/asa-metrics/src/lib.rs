//! Attention metrics (SPEC section 4). Each metric is an [`Accumulator`] in a file of its
//! own, listed in [`registry::REGISTRY`]; [`MetricProbe`] asks the kernels for what the
//! accumulators need, hands each of them the same [`Event`]s whichever kernel computed a
//! block, and finishes them into [`ModelMetrics`], whose results write the SPEC section 6
//! tables. Reductions run on the device; only per-row values (one per sequence, head and
//! query) and small corners leave it, and are pooled in f64 on the host.
//!
//! Every accumulator merges exactly ([`merge::Merge`]): sums and counts per (layer,
//! sequence, head) add, pooled values for quantiles are kept and concatenated, maxima take
//! the larger. [`MetricProbe::merge`] folds the probes of disjoint parts of a run into the
//! run's probe (`analysis::accumulate` / `analysis::finish`).
//!
//! Adding a metric is one file and one registry line (as `max_logit.rs` and
//! `key_received.rs` were added):
//! 1. `src/<name>.rs` holds:
//!    - its name: `impl Metric { pub const NAME: Metric = Metric::by_default("name"); }`
//!      (or `Metric::on_request` when it costs more than the others);
//!    - the accumulator, with `impl Merge` (exact) and `impl Accumulator`: `needs` says
//!      what it reads ([`Needs`]: row-table columns, q.k or sink sums, the block's weights,
//!      a once-per-layer tensor), `block` reads those fields of each [`BlockEvent`] (the
//!      same whichever kernel ran: never ask which) and `tensor` each [`TensorEvent`] it
//!      asked for (each has a default that takes nothing), `finish` inserts a result into
//!      [`ModelMetrics`];
//!    - the result (`serde::Serialize`) with `impl MetricResult`: its rows of the section 6
//!      tables ([`tables::TableRows`]);
//!    - `pub fn build(setup: &Setup) -> Box<dyn Accumulator>`, and a unit test by hand.
//! 2. `src/registry.rs`: the line `(&[Metric::NAME], name::build)`.
//!
//! `--metrics name`, the tables, run.json, `analysis::Run` and the merge of parts then know
//! it. A command of its own is a line in `asa-cli/src/lib.rs`; its test against a float64 reference
//! (a script in `tools/`, its output under `tests/fixtures/`) goes in `crates/asa-analysis/tests/library/metrics.rs`.
//! Only a metric that needs a per-row sum no kernel computes yet also touches the kernels: a
//! row-table column (a variant of `asa_kernels::row_columns::RowColumn`, from which build.rs
//! writes the CUDA header; filled by the row pass, the flash tiles and the CUDA kernels). A
//! new table is one declaration in asa-tables' `schema.rs`, which its writer, `figures` and the
//! Python frames use.

pub mod accumulator;
pub mod alpha_gate;
pub mod block_map;
pub mod block_pools;
pub mod distance;
pub mod entropy;
pub mod first_token;
pub mod head_role;
pub mod heatmap;
pub mod induction;
pub mod key_received;
pub mod layer_stat;
pub mod max_logit;
pub mod merge;
mod metric;
mod metric_probe;
pub mod nll;
pub mod qk_mean;
pub mod registry;
pub mod results;
pub mod rows;
pub mod sink_mass;
pub mod summary;
pub mod tables;
pub mod weight_sum;

use std::collections::BTreeSet;

pub use accumulator::{
    Accumulator, BlockEvent, Event, FinishCtx, KeyBlockRows, Needs, QkSums, Rows, Setup,
    TensorEvent, Weights,
};
pub use metric::Metric;
pub use metric_probe::{MetricProbe, ModelAttention, ProbeState, RestoreError};
pub use results::{MetricResult, ModelMetrics, PerHead};
pub use tables::{attention_tables, decade_bins, qk_series_table};

use distance::Bands;
use entropy::EntropyOf;

/// What to compute and how (resolved: layers 0-based and clipped, sizes clipped to T).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MetricOptions {
    pub metrics: BTreeSet<Metric>,
    /// Queries i < min_query are left out of query averages.
    pub min_query: usize,
    /// Heatmap and query-profile layer, 0-based.
    pub heatmap_layer: usize,
    /// Heatmap side, <= T.
    pub heatmap_size: usize,
    /// block_map side G (query and key blocks), <= T.
    pub map_size: usize,
    /// Query of the profile, 0-based, < T.
    pub profile_query: usize,
    /// Weight-sum histogram bins.
    pub bins: usize,
    /// Sink-rate threshold.
    pub sink_eps: f64,
    pub bands: Bands,
    pub entropy_of: EntropyOf,
    /// L, each copy's length, of the induction probe (`--probe induction`) the windows
    /// are; `None`: windows of `2L + 1` tokens are taken as such a probe by induction_score.
    #[serde(default)]
    pub induction_len: Option<usize>,
    /// The head-role thresholds (`--role-*`).
    #[serde(default)]
    pub roles: head_role::RoleThresholds,
}

/// What the metrics need to know of a model's attention variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VariantTraits {
    /// Mass can go to no token (sink, off_by_one): sink_mass is reported.
    pub has_sink_mass: bool,
    /// Every row's weights sum to 1 by construction (the weight-sum histogram is a constant).
    pub weights_sum_to_one: bool,
}
