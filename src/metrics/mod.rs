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
use crate::probe::{BlockCtx, Hook, Probe};
use alpha_gate::{AlphaResult, AlphaStats, GateStats};
use distance::{Bands, DistanceProfile, DistanceResult};
use entropy::{row_entropy, Entropy, EntropyOf, EntropyResult};
use first_token::{FirstToken, SinkRate};
use heatmap::{Heatmap, HeatmapResult, QueryProfile, QueryProfileResult};
use layer_stat::{head_means, LayerStat};
use nll::{Nll, NllResult};
use qk_mean::{QkMean, QkResult};
use row_pass::{weight_rows, RowWants};
use rows::{to_host, RowAccumulator};
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

/// The probe that feeds every requested accumulator during one model's forward passes.
pub struct MetricProbe {
    opts: MetricOptions,
    seq_offset: usize,
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

    fn on_pattern(&mut self, ctx: &BlockCtx, a: &Tensor) -> Result<()> {
        let (layer, s0, q0, n) = (ctx.layer, self.seq_offset, ctx.q_start, ctx.q_len);
        let effective_entropy = self.opts.entropy_of == EntropyOf::Effective;
        let wants = RowWants {
            first: self.first.is_some(),
            sum: self.weight_sum.is_some(),
            entropy: self.entropy.is_some() && effective_entropy,
            bands: self
                .distance
                .as_ref()
                .map(DistanceProfile::ranges)
                .unwrap_or_default(),
        };
        if let Some(rows) = weight_rows(a, q0, &wants)? {
            if let Some(first) = &mut self.first {
                first.add(layer, s0, q0, n, &rows.first);
            }
            if let Some(ws) = &mut self.weight_sum {
                ws.add(layer, s0, q0, n, &rows.sum);
            }
            if let (Some(e), true) = (&mut self.entropy, effective_entropy) {
                e.add(layer, s0, q0, n, &rows.entropy);
            }
            if let Some(d) = &mut self.distance {
                d.add_rows(layer, s0, q0, n, &rows.bands);
            }
        } else {
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

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        let (layer, s0) = (ctx.layer, self.seq_offset);
        match hook {
            Hook::Pattern => self.on_pattern(ctx, xs)?,
            Hook::Softmax => {
                if let Some(e) = &mut self.entropy {
                    let wants = RowWants {
                        entropy: true,
                        ..RowWants::default()
                    };
                    let values = match weight_rows(xs, ctx.q_start, &wants)? {
                        Some(rows) => rows.entropy,
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
