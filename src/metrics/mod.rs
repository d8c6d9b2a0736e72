//! Attention metrics (SPEC section 4), each an accumulator fed block by block by
//! [`MetricProbe`]. Reductions run on the device; only per-row values (one per sequence,
//! head and query) and small corners leave it, and are pooled in f64 on the host.

pub mod alpha_gate;
pub mod distance;
pub mod entropy;
pub mod first_token;
pub mod heatmap;
pub mod layer_stat;
pub mod nll;
pub mod qk_mean;
pub mod row_pass;
pub mod rows;
pub mod summary;
pub mod weight_sum;

use std::collections::BTreeSet;

use candle_core::{DType, Tensor, D};

use crate::error::Result;
use crate::probe::row_table::{split_table, RowWants, BANDS, ENTROPY, FIRST, SUM};
use crate::probe::{BlockCtx, Hook, Probe};
use crate::profile::phase;
use alpha_gate::{AlphaResult, AlphaStats, GateStats};
use distance::{Bands, DistanceProfile, DistanceResult};
use entropy::{row_entropy, Entropy, EntropyOf, EntropyResult};
use first_token::{FirstToken, SinkRate};
use heatmap::{Heatmap, HeatmapResult, QueryProfile, QueryProfileResult};
use layer_stat::{head_means, LayerStat};
use nll::{Nll, NllResult};
use qk_mean::{visible_pairs, QkMean, QkResult};
use row_pass::{weight_rows, weight_table_on_device};
use rows::{pool_rows, to_host, RowAccumulator};
use weight_sum::{WeightSum, WeightSumResult};

/// A metric of SPEC section 4.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
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
}

impl Metric {
    /// Every metric (what `analyze` computes).
    pub const ALL: [Metric; 13] = [
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
    ];
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
}

/// A block's row table left on the GPU until the layer ends (one copy to the host per
/// layer instead of one wait per block).
struct DeviceRows {
    /// `[rows, width]` f32.
    table: Tensor,
    seq_offset: usize,
    q_start: usize,
    n: usize,
    /// Whether the fused softmax filled the table: its q.k columns hold the raw q.k sums,
    /// and with `has_sink` its sink column the sink mass.
    fused: bool,
    has_sink: bool,
}

/// The probe that feeds every requested accumulator during one model's forward passes.
pub struct MetricProbe {
    opts: MetricOptions,
    seq_offset: usize,
    /// Row tables of the pattern and of the softmax still on the device.
    pending_pattern: Vec<DeviceRows>,
    pending_softmax: Vec<DeviceRows>,
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
}

impl MetricProbe {
    /// Accumulators for a model with `layers` x `heads`, over `windows` (all sequences of the run).
    pub fn new(opts: MetricOptions, layers: usize, heads: usize, windows: &[Vec<u32>]) -> Self {
        let seqs = windows.len();
        let m = |metric| opts.metrics.contains(&metric);
        let q = opts.min_query;
        MetricProbe {
            seq_offset: 0,
            pending_pattern: Vec::new(),
            pending_softmax: Vec::new(),
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
            opts,
        }
    }

    /// The next forward pass covers sequences `offset ..`.
    pub fn set_batch_offset(&mut self, offset: usize) {
        self.seq_offset = offset;
    }

    /// Results; `alpha_ma` `[layer][head]` is the stored buffer (affine variants), and
    /// `has_sink` says whether the variant sends mass to no token.
    pub fn finish(&self, alpha_ma: Option<Vec<Vec<f64>>>, has_sink: bool) -> ModelMetrics {
        let m = |metric| self.opts.metrics.contains(&metric);
        ModelMetrics {
            first_token: self
                .first
                .as_ref()
                .filter(|_| m(Metric::FirstToken))
                .map(FirstToken::first_token),
            weight_sum: self.weight_sum.as_ref().map(|w| w.finish(self.opts.bins)),
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
        }
    }

    fn wants_pattern(&self, layer: usize) -> bool {
        self.first.is_some()
            || self.weight_sum.is_some()
            || (self.entropy.is_some() && self.opts.entropy_of == EntropyOf::Effective)
            || self.distance.is_some()
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
        if let Some(table) = weight_table_on_device(a, q0, &wants)? {
            self.pending_pattern.push(DeviceRows {
                table,
                seq_offset: s0,
                q_start: q0,
                n,
                fused: false,
                has_sink: false,
            });
        } else if let Some(table) = weight_rows(a, q0, &wants)? {
            self.add_pattern_table(layer, s0, q0, n, &table, &wants);
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

    /// Adds the pattern's row table (laid out for `wants`) of queries `q0 .. q0 + n` of
    /// sequences `s0 ..`: every wanted column pooled per (sequence, head) in one pass.
    fn add_pattern_table(
        &mut self,
        layer: usize,
        s0: usize,
        q0: usize,
        n: usize,
        table: &[f32],
        wants: &RowWants,
    ) {
        let width = wants.width();
        // every accumulator counts the queries >= min_query
        let counted = self.opts.min_query.saturating_sub(q0).min(n)..n;
        let mut cols: Vec<usize> = [
            (wants.first, FIRST),
            (wants.sum, SUM),
            (wants.entropy, ENTROPY),
        ]
        .into_iter()
        .filter_map(|(want, c)| want.then_some(c))
        .collect();
        let first_band = cols.len();
        cols.extend(BANDS..width);
        let pools = pool_rows(table, width, n, counted.clone(), &cols);
        let pools_of = |c: usize| cols.iter().position(|&k| k == c).map(|k| &pools[k]);
        if let (Some(first), Some(counted_pools)) = (&mut self.first, pools_of(FIRST)) {
            let early = pool_rows(table, width, n, 0..counted.start, &[FIRST]);
            first.add_pools(layer, s0, counted_pools, &early[0]);
        }
        if let (Some(ws), Some(sums)) = (&mut self.weight_sum, pools_of(SUM)) {
            let column = split_table(table, wants).sum;
            ws.add_pools(layer, s0, q0, n, sums, column);
        }
        if let (Some(e), Some(entropy)) = (&mut self.entropy, pools_of(ENTROPY)) {
            e.add_pools(layer, s0, entropy);
        }
        if let Some(d) = &mut self.distance {
            d.add_pools(layer, s0, &pools[first_band..]);
        }
    }

    /// Copies the row tables of `layer` still on the device to the host, one copy for each
    /// hook, and adds them.
    fn flush_device_rows(&mut self, layer: usize) -> Result<()> {
        let _p = phase("metrics: row tables to host");
        let pattern = std::mem::take(&mut self.pending_pattern);
        let wants = self.pattern_wants();
        let host = pull_tables(&pattern)?;
        for (block, table) in pattern.iter().zip(host.chunks()) {
            let (s0, q0, n) = (block.seq_offset, block.q_start, block.n);
            self.add_pattern_table(layer, s0, q0, n, table, &wants);
            if !block.fused {
                continue;
            }
            let rows = split_table(table, &wants);
            if let Some(qk) = &mut self.qk {
                // per-row sums pooled in f64, in row order
                let sum = rows.qk_sum.iter().map(f64::from).sum();
                let abs_sum = rows.qk_abs_sum.iter().map(f64::from).sum();
                let heads_x_batch = rows.qk_sum.len() / n.max(1);
                qk.add_sums(layer, sum, abs_sum, heads_x_batch * visible_pairs(q0, n));
            }
            if let (Some(acc), true) = (&mut self.sink_mass, block.has_sink) {
                acc.add(layer, s0, q0, n, rows.sink_mass);
            }
        }
        let softmax = std::mem::take(&mut self.pending_softmax);
        let host = pull_tables(&softmax)?;
        for (block, table) in softmax.iter().zip(host.chunks()) {
            if let Some(e) = &mut self.entropy {
                let rows = split_table(table, &Self::softmax_wants());
                e.add(
                    layer,
                    block.seq_offset,
                    block.q_start,
                    block.n,
                    rows.entropy,
                );
            }
        }
        Ok(())
    }
}

/// Device row tables of one width copied to the host in one transfer, read in place.
struct HostTables {
    data: Vec<f32>,
    /// Values of each block's table, in order.
    lens: Vec<usize>,
}

impl HostTables {
    /// Each block's table.
    fn chunks(&self) -> impl Iterator<Item = &[f32]> {
        self.lens.iter().scan(0, |offset, &len| {
            let table = &self.data[*offset..*offset + len];
            *offset += len;
            Some(table)
        })
    }
}

/// The host copy of the row tables of `blocks`.
fn pull_tables(blocks: &[DeviceRows]) -> Result<HostTables> {
    let lens = blocks.iter().map(|b| b.table.elem_count()).collect();
    let data = if blocks.is_empty() {
        Vec::new()
    } else {
        let tables: Vec<&Tensor> = blocks.iter().map(|b| &b.table).collect();
        Tensor::cat(&tables, 0)?.flatten_all()?.to_vec1::<f32>()?
    };
    Ok(HostTables { data, lens })
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
            Hook::Alpha => self.alpha.is_some(),
            Hook::Gate => self.gate.is_some(),
            Hook::Logits => self.nll.is_some(),
            _ => false,
        }
    }

    fn on_layer_end(&mut self, layer: usize) -> Result<()> {
        self.flush_device_rows(layer)
    }

    fn row_request(&self, layer: usize) -> Option<RowWants> {
        let softmax_entropy = self.entropy.is_some() && self.opts.entropy_of == EntropyOf::Softmax;
        let maps =
            layer == self.opts.heatmap_layer && (self.heatmap.is_some() || self.profile.is_some());
        (!softmax_entropy && !maps).then(|| self.pattern_wants())
    }

    fn on_row_table(&mut self, ctx: &BlockCtx, table: &Tensor, has_sink: bool) -> Result<()> {
        self.pending_pattern.push(DeviceRows {
            table: table.clone(),
            seq_offset: self.seq_offset,
            q_start: ctx.q_start,
            n: ctx.q_len,
            fused: true,
            has_sink,
        });
        Ok(())
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        let (layer, s0) = (ctx.layer, self.seq_offset);
        match hook {
            Hook::Pattern => self.on_pattern(ctx, xs)?,
            Hook::Softmax if self.entropy.is_some() => {
                let wants = Self::softmax_wants();
                if let Some(table) = weight_table_on_device(xs, ctx.q_start, &wants)? {
                    self.pending_softmax.push(DeviceRows {
                        table,
                        seq_offset: s0,
                        q_start: ctx.q_start,
                        n: ctx.q_len,
                        fused: false,
                        has_sink: false,
                    });
                } else if let Some(e) = &mut self.entropy {
                    let values = match weight_rows(xs, ctx.q_start, &wants)? {
                        Some(table) => split_table(&table, &wants).entropy.to_vec(),
                        None => to_host(&row_entropy(xs)?)?,
                    };
                    e.add(layer, s0, ctx.q_start, ctx.q_len, &values);
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
