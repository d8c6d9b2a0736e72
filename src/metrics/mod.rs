//! Attention metrics (SPEC section 4), each an accumulator fed block by block by
//! [`MetricProbe`]. Reductions run on the device; only per-row values (one per sequence,
//! head and query) and small corners leave it, and are pooled in f64 on the host.
//!
//! Every accumulator implements [`merge::Merge`] exactly: sums and counts per (layer,
//! sequence, head) add, pooled values for quantiles are kept and concatenated, maxima take
//! the larger. [`MetricProbe::merge`] folds the probes of disjoint parts of a run into the
//! run's probe (`analysis::accumulate` / `analysis::finish`).
//!
//! Adding a metric (how `max_logit` and `key_received` were added):
//! 1. `metrics/<name>.rs`: the accumulator (`new`, `add` from a row-table column or a block
//!    tensor, `impl Merge`, `finish` -> a serde result struct), with a unit test by hand.
//! 2. Here: a [`Metric`] variant (in [`Metric::ALL`] when `analyze` computes it by default),
//!    a field of [`MetricProbe`] and [`ModelMetrics`], and its lines in `new`, `finish`,
//!    `merge` and the routing: a row-table column (`pattern_wants` and the readers of row
//!    tables) or a hook (`wants` and `on_tensor`).
//! 3. A kernel column when the metric is a new per-row sum (`probe::row_table`, the flash
//!    tiles' `write_line`), or a hook pushed by `attention::layer` where blocks materialise.
//! 4. `metrics/tables.rs`: its rows (SPEC section 6), and a command in `cli/`.
//! 5. A float64 reference in `tools/` and a test against it (`tests/it/metrics.rs`).

pub mod alpha_gate;
pub mod block_pools;
pub mod distance;
pub mod entropy;
pub mod first_token;
pub mod heatmap;
pub mod key_received;
pub mod layer_stat;
pub mod max_logit;
pub mod merge;
pub mod nll;
pub mod qk_mean;
pub mod rows;
pub mod summary;
pub mod tables;
pub mod weight_sum;

use std::collections::{BTreeMap, BTreeSet};

use candle_core::{DType, Tensor, D};

use crate::cpu::host::with_cpu_f32;
use crate::error::Result;
use crate::probe::row_pass::{weight_rows, weight_table_on_device};
use crate::probe::row_table::Column;
use crate::probe::row_table::{
    RowWants, BANDS, ENTROPY, FIRST, QK_ABS_SUM, QK_SUM, SINK_MASS, SUM,
};
use crate::probe::{BlockCtx, Hook, Kernel, Probe};
use crate::profile::phase;
use alpha_gate::{AlphaResult, AlphaStats, GateStats};
use block_pools::{pool_host, pool_on_device, BlockPools, PoolShape};
use distance::{Bands, DistanceProfile, DistanceResult};
use entropy::{row_entropy, Entropy, EntropyOf, EntropyResult};
use first_token::{FirstToken, SinkRate};
use heatmap::{Heatmap, HeatmapResult, QueryProfile, QueryProfileResult};
use key_received::{KeyReceived, KeyReceivedResult};
use layer_stat::{head_means, LayerStat};
use max_logit::{MaxLogit, MaxLogitResult};
use merge::Merge;
use nll::{Nll, NllResult};
use qk_mean::{visible_pairs, QkMean, QkResult};
use rows::{to_host, RowAccumulator};
pub use tables::{attention_tables, decade_bins, qk_series_table};
use weight_sum::{WeightSum, WeightSumResult};

/// A metric of SPEC section 4.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    FirstToken,
    WeightSum,
    Entropy,
    QkMean,
    HeadTotal,
    Heatmap,
    QueryProfile,
    SinkMass,
    Alpha,
    Gate,
    Nll,
    SinkRate,
    DistanceProfile,
    MaxLogit,
    KeyReceived,
}

impl Metric {
    /// Every metric's name, as `--metrics` and the tables spell it.
    pub const NAMES: [&'static str; 15] = [
        "first_token",
        "weight_sum",
        "entropy",
        "qk_mean",
        "head_total",
        "heatmap",
        "query_profile",
        "sink_mass",
        "alpha",
        "gate",
        "nll",
        "sink_rate",
        "distance_profile",
        "max_logit",
        "key_received",
    ];

    /// Every metric `analyze` computes unless `--metrics` names others: all but
    /// key_received, which reads every block's weights (per-key sums are column sums, which
    /// the flash tiles never hold), so it is computed when asked for by name.
    pub const ALL: [Metric; 14] = [
        Metric::FirstToken,
        Metric::WeightSum,
        Metric::Entropy,
        Metric::QkMean,
        Metric::HeadTotal,
        Metric::Heatmap,
        Metric::QueryProfile,
        Metric::SinkMass,
        Metric::Alpha,
        Metric::Gate,
        Metric::Nll,
        Metric::SinkRate,
        Metric::DistanceProfile,
        Metric::MaxLogit,
    ];
}

impl std::str::FromStr for Metric {
    type Err = String;

    /// The metric named as in the CLI and the tables ([`Metric::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string()))
            .map_err(|_| format!("unknown metric `{s}` (one of {})", Metric::NAMES.join(", ")))
    }
}

/// What to compute and how (resolved: layers 0-based and clipped, sizes clipped to T).
#[derive(Debug, Clone, serde::Serialize)]
pub struct MetricOptions {
    pub metrics: BTreeSet<Metric>,
    /// Queries i < min_query are left out of query averages.
    pub min_query: usize,
    /// Heatmap and query-profile layer, 0-based.
    pub heatmap_layer: usize,
    /// Heatmap side, <= T.
    pub heatmap_size: usize,
    /// Query of the profile, 0-based, < T.
    pub profile_query: usize,
    /// Weight-sum histogram bins.
    pub bins: usize,
    /// Sink-rate threshold.
    pub sink_eps: f64,
    pub bands: Bands,
    pub entropy_of: EntropyOf,
}

/// Everything computed for one model; a metric not asked for (or not applicable to the
/// variant) is `None`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ModelMetrics {
    pub first_token: Option<LayerStat>,
    pub weight_sum: Option<WeightSumResult>,
    pub entropy: Option<EntropyResult>,
    pub qk: Option<QkResult>,
    pub heatmap: Option<HeatmapResult>,
    pub query_profile: Option<QueryProfileResult>,
    /// `[layer][head]`.
    pub sink_mass: Option<Vec<Vec<f64>>>,
    pub alpha: Option<AlphaResult>,
    /// `[layer][head]`.
    pub gate: Option<Vec<Vec<f64>>>,
    pub nll: Option<NllResult>,
    pub sink_rate: Option<SinkRate>,
    pub distance: Option<DistanceResult>,
    pub max_logit: Option<MaxLogitResult>,
    pub key_received: Option<KeyReceivedResult>,
    /// The kernel that computed each layer (0-based), for run.json and `--verbose`.
    #[serde(skip)]
    pub kernels: BTreeMap<usize, Kernel>,
}

/// What the metrics need to know of a model's attention variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VariantTraits {
    /// Mass can go to no token (sink, off_by_one): sink_mass is reported.
    pub has_sink_mass: bool,
    /// Every row's weights sum to 1 by construction (the weight-sum histogram is a constant).
    pub weights_sum_to_one: bool,
}

/// What a row table held.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TableSource {
    /// The pattern's reductions; `fused`: filled by the fused softmax, so its q.k columns
    /// hold the raw q.k sums and, with `has_sink`, its sink column the sink mass.
    Pattern { fused: bool, has_sink: bool },
    /// The plain softmax's entropy (`--entropy-of softmax`).
    Softmax,
}

/// A block's sums left on the GPU until the layer ends (one copy to the host per layer
/// instead of one wait per block).
struct DevicePools {
    /// Flat f64 sums ([`pool_on_device`]).
    sums: Tensor,
    /// The row table, copied only when it holds a NaN.
    table: Tensor,
    shape: PoolShape,
    seq_offset: usize,
    q_start: usize,
    source: TableSource,
}

/// The probe that feeds every requested accumulator during one model's forward passes.
pub struct MetricProbe {
    opts: MetricOptions,
    seq_offset: usize,
    heads: usize,
    /// Pools of row tables still on the device, in block order.
    pending: Vec<DevicePools>,
    first: Option<FirstToken>,
    weight_sum: Option<WeightSum>,
    entropy: Option<Entropy>,
    qk: Option<QkMean>,
    heatmap: Option<Heatmap>,
    profile: Option<QueryProfile>,
    sink_mass: Option<RowAccumulator>,
    alpha: Option<AlphaStats>,
    gate: Option<GateStats>,
    nll: Option<Nll>,
    distance: Option<DistanceProfile>,
    max_logit: Option<MaxLogit>,
    key_received: Option<KeyReceived>,
    kernels: BTreeMap<usize, Kernel>,
}

impl MetricProbe {
    /// Accumulators for a model with `layers` x `heads`, over `windows` (all sequences of the run).
    pub fn new(opts: MetricOptions, layers: usize, heads: usize, windows: &[Vec<u32>]) -> Self {
        let seqs = windows.len();
        let seq_len = windows.first().map_or(0, Vec::len);
        let m = |metric| opts.metrics.contains(&metric);
        let q = opts.min_query;
        MetricProbe {
            seq_offset: 0,
            heads,
            pending: Vec::new(),
            first: (m(Metric::FirstToken) || m(Metric::SinkRate))
                .then(|| FirstToken::new(layers, seqs, heads, q)),
            weight_sum: (m(Metric::WeightSum) || m(Metric::HeadTotal))
                .then(|| WeightSum::new(layers, seqs, heads, q)),
            entropy: m(Metric::Entropy).then(|| Entropy::new(layers, seqs, heads, q)),
            qk: m(Metric::QkMean).then(|| QkMean::new(layers)),
            heatmap: m(Metric::Heatmap)
                .then(|| Heatmap::new(opts.heatmap_layer, opts.heatmap_size)),
            profile: m(Metric::QueryProfile)
                .then(|| QueryProfile::new(opts.heatmap_layer, opts.profile_query)),
            sink_mass: m(Metric::SinkMass).then(|| RowAccumulator::new(layers, seqs, heads, q)),
            alpha: m(Metric::Alpha).then(|| AlphaStats::new(layers, heads, q)),
            gate: m(Metric::Gate).then(|| GateStats::new(layers, heads, q)),
            nll: m(Metric::Nll).then(|| Nll::new(windows)),
            distance: m(Metric::DistanceProfile)
                .then(|| DistanceProfile::new(opts.bands.clone(), layers, seqs, heads, q)),
            max_logit: m(Metric::MaxLogit).then(|| MaxLogit::new(layers, heads, q)),
            key_received: m(Metric::KeyReceived)
                .then(|| KeyReceived::new(layers, heads, seq_len, q)),
            kernels: BTreeMap::new(),
            opts,
        }
    }

    /// The next forward pass covers sequences `offset ..`.
    pub fn set_batch_offset(&mut self, offset: usize) {
        self.seq_offset = offset;
    }

    /// Results of a model whose variant has `traits`; `alpha_ma` `[layer][head]` is the
    /// stored buffer (affine variants).
    pub fn finish(&self, alpha_ma: Option<Vec<Vec<f64>>>, kind: VariantTraits) -> ModelMetrics {
        let m = |metric| self.opts.metrics.contains(&metric);
        let has_sink = kind.has_sink_mass;
        let bins = self.opts.bins;
        ModelMetrics {
            first_token: self
                .first
                .as_ref()
                .filter(|_| m(Metric::FirstToken))
                .map(FirstToken::first_token),
            weight_sum: self
                .weight_sum
                .as_ref()
                .map(|w| w.finish(bins, kind.weights_sum_to_one)),
            entropy: self.entropy.as_ref().map(Entropy::finish),
            qk: self.qk.as_ref().map(QkMean::finish),
            heatmap: self.heatmap.as_ref().map(Heatmap::finish),
            query_profile: self.profile.as_ref().map(QueryProfile::finish),
            sink_mass: self.sink_mass.as_ref().filter(|_| has_sink).map(head_means),
            alpha: match (&self.alpha, alpha_ma) {
                (Some(a), Some(ma)) => Some(a.finish(ma)),
                _ => None,
            },
            gate: self
                .gate
                .as_ref()
                .filter(|g| g.has_data())
                .map(GateStats::finish),
            nll: self.nll.as_ref().map(Nll::finish),
            sink_rate: self
                .first
                .as_ref()
                .filter(|_| m(Metric::SinkRate))
                .map(|f| f.sink_rate(self.opts.sink_eps)),
            distance: self.distance.as_ref().map(DistanceProfile::finish),
            max_logit: self.max_logit.as_ref().map(MaxLogit::finish),
            key_received: self.key_received.as_ref().map(KeyReceived::finish),
            kernels: self.kernels.clone(),
        }
    }

    /// Folds in `other`, a probe of the same model and options that saw other windows of
    /// the same run (each window in exactly one of them): afterwards this probe finishes to
    /// the tables of one probe that saw them all ([`merge`]).
    pub fn merge(&mut self, other: &MetricProbe) {
        self.first.merge(&other.first);
        self.weight_sum.merge(&other.weight_sum);
        self.entropy.merge(&other.entropy);
        self.qk.merge(&other.qk);
        self.heatmap.merge(&other.heatmap);
        self.profile.merge(&other.profile);
        self.sink_mass.merge(&other.sink_mass);
        self.alpha.merge(&other.alpha);
        self.gate.merge(&other.gate);
        self.nll.merge(&other.nll);
        self.distance.merge(&other.distance);
        self.max_logit.merge(&other.max_logit);
        self.key_received.merge(&other.key_received);
        self.kernels
            .extend(other.kernels.iter().map(|(&l, &k)| (l, k)));
    }

    fn wants_pattern(&self, layer: usize) -> bool {
        self.first.is_some()
            || self.weight_sum.is_some()
            || (self.entropy.is_some() && self.opts.entropy_of == EntropyOf::Effective)
            || self.distance.is_some()
            || self.key_received.is_some()
            || (layer == self.opts.heatmap_layer
                && (self.heatmap.is_some() || self.profile.is_some()))
    }

    /// The per-row reductions of the pattern hook.
    fn pattern_wants(&self) -> RowWants {
        RowWants {
            first: self.first.is_some(),
            sum: self.weight_sum.is_some(),
            entropy: self.entropy.is_some() && self.opts.entropy_of == EntropyOf::Effective,
            bands: self
                .distance
                .as_ref()
                .map(DistanceProfile::ranges)
                .unwrap_or_default(),
            max_logit: self.max_logit.is_some(),
        }
    }

    /// The per-row reductions of the softmax hook.
    fn softmax_wants() -> RowWants {
        RowWants {
            entropy: true,
            ..RowWants::default()
        }
    }

    fn on_pattern(&mut self, ctx: &BlockCtx, a: &Tensor) -> Result<()> {
        let (layer, s0, q0, n) = (ctx.layer, self.seq_offset, ctx.q_start, ctx.q_len);
        let wants = self.pattern_wants();
        let source = TableSource::Pattern {
            fused: false,
            has_sink: false,
        };
        if let Some(table) = weight_table_on_device(a, q0, &wants)? {
            self.pool_on_device(&table, ctx, source)?;
        } else if let Some(table) = weight_rows(a, q0, &wants)? {
            let shape = self.pool_shape(ctx, table.len(), wants.width());
            self.add_block((layer, s0, q0, n), &pool_host(&table, &shape), source);
        } else {
            let effective_entropy = wants.entropy;
            if let Some(first) = &mut self.first {
                let col = to_host(&a.narrow(D::Minus1, 0, 1)?.squeeze(D::Minus1)?)?;
                first.add(layer, s0, q0, n, &col);
            }
            if let Some(ws) = &mut self.weight_sum {
                ws.add(layer, s0, q0, n, &to_host(&a.sum(D::Minus1)?)?);
            }
            if let (Some(e), true) = (&mut self.entropy, effective_entropy) {
                e.add(layer, s0, q0, n, &to_host(&row_entropy(a)?)?);
            }
            if let Some(d) = &mut self.distance {
                d.add(layer, s0, q0, a)?;
            }
        }
        if let Some(k) = &mut self.key_received {
            k.add(layer, q0, a)?;
        }
        if layer == self.opts.heatmap_layer {
            if let Some(h) = &mut self.heatmap {
                h.add(q0, a)?;
            }
            if let Some(p) = &mut self.profile {
                p.add(q0, a)?;
            }
        }
        Ok(())
    }

    /// The pool shape of a row table of `values` values, `width` columns, for block `ctx`.
    fn pool_shape(&self, ctx: &BlockCtx, values: usize, width: usize) -> PoolShape {
        let n = ctx.q_len;
        PoolShape {
            batch: values / (width * self.heads * n).max(1),
            heads: self.heads,
            n,
            // every accumulator counts the queries >= min_query
            skip: self.opts.min_query.saturating_sub(ctx.q_start).min(n),
            width,
        }
    }

    /// Sums a row table `[rows, width]` on its device and keeps the sums there until the
    /// layer ends.
    fn pool_on_device(
        &mut self,
        table: &Tensor,
        ctx: &BlockCtx,
        source: TableSource,
    ) -> Result<()> {
        let _p = phase("metrics: pool row tables");
        let shape = self.pool_shape(ctx, table.elem_count(), table.dim(1)?);
        self.pending.push(DevicePools {
            sums: pool_on_device(table, &shape)?,
            table: table.clone(),
            shape,
            seq_offset: self.seq_offset,
            q_start: ctx.q_start,
            source,
        });
        Ok(())
    }

    /// Adds a block's pools, of queries `q0 .. q0 + n` of sequences `s0 ..`, to the
    /// accumulators of what its table held.
    fn add_block(
        &mut self,
        (layer, s0, q0, n): (usize, usize, usize, usize),
        pools: &BlockPools,
        source: TableSource,
    ) {
        let (fused, has_sink) = match source {
            TableSource::Softmax => {
                if let Some(e) = &mut self.entropy {
                    e.add_pools(layer, s0, &pools.counted[ENTROPY]);
                }
                return;
            }
            TableSource::Pattern { fused, has_sink } => (fused, has_sink),
        };
        let wants = self.pattern_wants();
        if let (Some(first), true) = (&mut self.first, wants.first) {
            first.add_pools(layer, s0, &pools.counted[FIRST], &pools.early[FIRST]);
        }
        if let (Some(ws), true) = (&mut self.weight_sum, wants.sum) {
            ws.add_pools(layer, s0, &pools.counted[SUM], &pools.query_means);
        }
        if let (Some(e), true) = (&mut self.entropy, wants.entropy) {
            e.add_pools(layer, s0, &pools.counted[ENTROPY]);
        }
        if let Some(d) = &mut self.distance {
            d.add_pools(layer, s0, &pools.counted[BANDS..wants.bands_end()]);
        }
        if !fused {
            return;
        }
        if let Some(qk) = &mut self.qk {
            let pairs = pools.counted[QK_SUM].len() * visible_pairs(q0, n);
            qk.add_sums(layer, pools.total(QK_SUM), pools.total(QK_ABS_SUM), pairs);
        }
        if let (Some(acc), true) = (&mut self.sink_mass, has_sink) {
            acc.add_pools(layer, s0, &pools.counted[SINK_MASS]);
        }
    }

    /// Copies the sums of `layer` still on the device to the host in one transfer and adds
    /// their pools (a block with a NaN is pooled from its table on the host).
    fn flush_device_pools(&mut self, layer: usize) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return Ok(());
        }
        let _p = phase("metrics: pools to host");
        let parts: Vec<&Tensor> = pending.iter().map(|b| &b.sums).collect();
        let host = Tensor::cat(&parts, 0)?.to_vec1::<f64>()?;
        let mut offset = 0;
        for block in &pending {
            let len = block.shape.flat_len();
            // non-finite sums: the block is pooled from its table on the host
            let pools = match BlockPools::from_sums(&host[offset..offset + len], &block.shape) {
                Some(pools) => pools,
                None => pool_host(&to_host(&block.table)?, &block.shape),
            };
            offset += len;
            let at = (layer, block.seq_offset, block.q_start, block.shape.n);
            self.add_block(at, &pools, block.source);
            let fused = matches!(block.source, TableSource::Pattern { fused: true, .. });
            let column = self.pattern_wants().max_logit_column();
            if let (Some(m), Some(c), true) = (&mut self.max_logit, column, fused) {
                let maxima = to_host(&block.table.narrow(1, c, 1)?)?;
                m.add(layer, block.q_start, block.shape.n, &maxima);
            }
        }
        Ok(())
    }
}

impl Probe for MetricProbe {
    fn wants(&self, hook: Hook, layer: usize) -> bool {
        match hook {
            Hook::Pattern => self.wants_pattern(layer),
            Hook::Softmax => self.entropy.is_some() && self.opts.entropy_of == EntropyOf::Softmax,
            Hook::Qk => self.qk.is_some(),
            Hook::SinkMass => {
                self.sink_mass.is_some()
                    || (self.profile.is_some() && layer == self.opts.heatmap_layer)
            }
            Hook::MaxLogit => self.max_logit.is_some(),
            Hook::Alpha => self.alpha.is_some(),
            Hook::Gate => self.gate.is_some(),
            Hook::Logits => self.nll.is_some(),
            _ => false,
        }
    }

    fn on_kernel(&mut self, layer: usize, kernel: Kernel) {
        self.kernels.insert(layer, kernel);
    }

    fn on_layer_end(&mut self, layer: usize) -> Result<()> {
        self.flush_device_pools(layer)
    }

    fn row_request(&self, layer: usize) -> Option<RowWants> {
        // no table where no metric reads one (e.g. `--metrics nll`): the plain softmax runs
        let read = self.wants_pattern(layer)
            || self.wants(Hook::Qk, layer)
            || self.wants(Hook::SinkMass, layer)
            || self.wants(Hook::MaxLogit, layer);
        let softmax_entropy = self.entropy.is_some() && self.opts.entropy_of == EntropyOf::Softmax;
        let maps =
            layer == self.opts.heatmap_layer && (self.heatmap.is_some() || self.profile.is_some());
        // per-key sums need the weights themselves
        let maps = maps || self.key_received.is_some();
        (read && !softmax_entropy && !maps).then(|| self.pattern_wants())
    }

    fn on_row_table(&mut self, ctx: &BlockCtx, table: &Tensor, has_sink: bool) -> Result<()> {
        let source = TableSource::Pattern {
            fused: true,
            has_sink,
        };
        // a host table (the CPU's fused softmax) is pooled at once, in place
        let shape = self.pool_shape(ctx, table.elem_count(), table.dim(1)?);
        let column = self.pattern_wants().max_logit_column();
        let max_logit = &mut self.max_logit;
        let pooled = with_cpu_f32(table, |data| {
            if let (Some(m), Some(c)) = (max_logit, column) {
                let maxima = Column::of_table(data, shape.width, c);
                m.add(ctx.layer, ctx.q_start, ctx.q_len, maxima);
            }
            pool_host(data, &shape)
        });
        match pooled {
            Some(pools) => {
                let at = (ctx.layer, self.seq_offset, ctx.q_start, ctx.q_len);
                self.add_block(at, &pools, source);
                Ok(())
            }
            None => self.pool_on_device(table, ctx, source),
        }
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        let (layer, s0) = (ctx.layer, self.seq_offset);
        match hook {
            Hook::Pattern => self.on_pattern(ctx, xs)?,
            Hook::Softmax if self.entropy.is_some() => {
                let wants = Self::softmax_wants();
                if let Some(table) = weight_table_on_device(xs, ctx.q_start, &wants)? {
                    self.pool_on_device(&table, ctx, TableSource::Softmax)?;
                } else if let Some(table) = weight_rows(xs, ctx.q_start, &wants)? {
                    let shape = self.pool_shape(ctx, table.len(), wants.width());
                    let pools = pool_host(&table, &shape);
                    let at = (layer, s0, ctx.q_start, ctx.q_len);
                    self.add_block(at, &pools, TableSource::Softmax);
                } else if let Some(e) = &mut self.entropy {
                    e.add(
                        layer,
                        s0,
                        ctx.q_start,
                        ctx.q_len,
                        &to_host(&row_entropy(xs)?)?,
                    );
                }
            }
            Hook::Qk => {
                if let Some(qk) = &mut self.qk {
                    qk.add(layer, xs, ctx.q_start)?;
                }
            }
            Hook::SinkMass => {
                if let Some(acc) = &mut self.sink_mass {
                    acc.add(layer, s0, ctx.q_start, ctx.q_len, &to_host(xs)?);
                }
                if layer == self.opts.heatmap_layer {
                    if let Some(p) = &mut self.profile {
                        p.add_sink_mass(ctx.q_start, xs)?;
                    }
                }
            }
            Hook::MaxLogit => {
                if let Some(m) = &mut self.max_logit {
                    m.add(layer, ctx.q_start, ctx.q_len, &to_host(xs)?);
                }
            }
            Hook::Alpha => {
                if let Some(a) = &mut self.alpha {
                    a.add(layer, ctx.seq_len, &to_host(xs)?);
                }
            }
            Hook::Gate => {
                if let Some(g) = &mut self.gate {
                    // [batch, T, heads * d] -> mean over d -> [batch, T, heads]
                    let (b, t, hd) = xs.dims3()?;
                    let heads = g.heads();
                    let means = xs.reshape((b, t, heads, hd / heads))?.mean(D::Minus1)?;
                    g.add(layer, t, &to_host(&means.to_dtype(DType::F32)?)?);
                }
            }
            Hook::Logits => {
                if let Some(nll) = &mut self.nll {
                    nll.add(s0, ctx.q_start, xs)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The GPU path of the probe (row tables pooled by candle ops on their device, pools
    //! copied at the layer's end) run on the CPU against the host path (tables pooled on
    //! the host as they come).
    use super::*;
    use crate::probe::blocks::query_blocks;
    use candle_core::Device;
    use serde_json::Value;

    /// Causal weights `[b, h, n, q0 + n]` of queries `q0 ..`: each row's visible keys get
    /// positive weights summing to 1, a few rows slightly off (as affine weights are) and a
    /// few negative (no entropy: NaN, which the GPU path pools on the host).
    fn weights(b: usize, h: usize, q0: usize, n: usize) -> Tensor {
        let keys = q0 + n;
        let mut data = Vec::new();
        for s in 0..b * h {
            for r in 0..n {
                let i = q0 + r;
                let raw: Vec<f32> = (0..keys)
                    .map(|j| {
                        if j <= i {
                            1.0 + ((s * 7 + r * 3 + j * 5) % 11) as f32
                        } else {
                            0.0
                        }
                    })
                    .collect();
                let total: f32 = raw.iter().sum();
                let scale = match (s + r) % 5 {
                    0 => 1.1,
                    _ if (s * 5 + r) % 13 == 4 => -1.0,
                    _ => 1.0,
                };
                data.extend(raw.iter().map(|v| v / total * scale));
            }
        }
        Tensor::from_vec(data, (b, h, n, keys), &Device::Cpu).unwrap()
    }

    /// `a` and `b` are the same JSON up to 1e-12 in every number (NaN equal to NaN).
    fn assert_close(a: &Value, b: &Value, path: &str) {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                assert!(
                    (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                    "{path}: {x} vs {y}"
                );
            }
            (Value::Array(x), Value::Array(y)) => {
                assert_eq!(x.len(), y.len(), "{path}");
                for (k, (x, y)) in x.iter().zip(y).enumerate() {
                    assert_close(x, y, &format!("{path}[{k}]"));
                }
            }
            (Value::Object(x), Value::Object(y)) => {
                assert_eq!(x.len(), y.len(), "{path}");
                for (k, x) in x {
                    assert_close(x, &y[k], &format!("{path}.{k}"));
                }
            }
            _ => assert_eq!(a, b, "{path}"),
        }
    }

    #[test]
    fn pools_made_on_the_device_give_the_metrics_of_the_host_path() {
        let (b, h, t, block) = (2, 3, 23, 7);
        let metrics = [
            Metric::FirstToken,
            Metric::WeightSum,
            Metric::Entropy,
            Metric::HeadTotal,
            Metric::SinkRate,
            Metric::DistanceProfile,
            Metric::QkMean,
            Metric::SinkMass,
        ];
        let opts = MetricOptions {
            metrics: metrics.into_iter().collect(),
            min_query: 2,
            heatmap_layer: 5,
            heatmap_size: t,
            profile_query: t - 1,
            bins: 7,
            sink_eps: 0.1,
            bands: Bands::decades(t),
            entropy_of: EntropyOf::Effective,
        };
        let windows = vec![vec![0u32; t]; 2 * b];
        let mut host = MetricProbe::new(opts.clone(), 1, h, &windows);
        let mut device = MetricProbe::new(opts, 1, h, &windows);
        let wants = device.row_request(0).expect("row tables");
        let width = wants.width();
        // two batches of b sequences
        for batch in 0..2 {
            host.set_batch_offset(batch * b);
            device.set_batch_offset(batch * b);
            for (q0, n) in query_blocks(t, block) {
                let w = weights(b, h, q0 + batch, n)
                    .narrow(3, batch, q0 + n)
                    .unwrap();
                let w = w.contiguous().unwrap();
                let ctx = BlockCtx {
                    layer: 0,
                    q_start: q0,
                    q_len: n,
                    seq_len: t,
                };
                host.on_tensor(Hook::Pattern, &ctx, &w).unwrap();
                // the table the fused softmax hands over: its q.k and sink columns by hand
                let mut table = weight_rows(&w, q0, &wants).unwrap().unwrap();
                for cell in table.chunks_mut(width) {
                    cell[SINK_MASS] = 0.25;
                    cell[QK_SUM] = 1.0;
                    cell[QK_ABS_SUM] = 2.0;
                }
                let rows = table.len() / width;
                let table = Tensor::from_vec(table, (rows, width), &Device::Cpu).unwrap();
                // what on_row_table does with a table on a GPU
                let source = TableSource::Pattern {
                    fused: true,
                    has_sink: true,
                };
                device.pool_on_device(&table, &ctx, source).unwrap();
            }
            host.on_layer_end(0).unwrap();
            device.on_layer_end(0).unwrap();
        }
        let sink = VariantTraits {
            has_sink_mass: true,
            weights_sum_to_one: false,
        };
        let (from_host, from_device) = (host.finish(None, sink), device.finish(None, sink));
        let json = |m: &ModelMetrics| {
            let mut v = serde_json::to_value(m).unwrap();
            // only the device path saw q.k and sink columns
            v.as_object_mut().unwrap().remove("qk");
            v.as_object_mut().unwrap().remove("sink_mass");
            v
        };
        assert!(from_device.first_token.is_some() && from_device.distance.is_some());
        assert!(from_device.entropy.as_ref().unwrap().nan_count > 0);
        assert_close(&json(&from_device), &json(&from_host), "metrics");
        // q.k: every row sums 1 and 2 over its i + 1 visible keys, so the mean over pairs
        // is sum_i 1 / sum_i (i + 1) = 2 / (t + 1)
        let qk = from_device.qk.unwrap();
        assert!(
            (qk.mean - 2.0 / (t as f64 + 1.0)).abs() < 1e-12,
            "{}",
            qk.mean
        );
        assert!((qk.abs_mean - 4.0 / (t as f64 + 1.0)).abs() < 1e-12);
        for per_head in from_device.sink_mass.unwrap() {
            assert!(per_head.iter().all(|&m| (m - 0.25).abs() < 1e-12));
        }
    }
}
