//! A model computed elsewhere analysed through its attention calls: a transformers model's
//! own forward pass hands each attention module's q, k and v (after its projections, norms
//! and RoPE) to [`Capture::attend`], which computes the output with the same kernels as a
//! checkpoint's layers ([`AttentionCore`]) while the metric probe pools their row tables.
//! No `[T, T]` map is held. Forward passes pool like the windows of a run: each call of a
//! module already seen in the current pass starts the next pass, whose sequences follow.

use std::time::Instant;

use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use super::capture_spans::{groups, Group, Span};
use super::record::ModelRecord;
use super::run::metric_options_at;
use super::{kernel_layers, ModelResult, RunOutput, RunSpec};
use asa_core::error::{Error, Result};
use asa_engine::attention::{AttentionCore, AttentionShape, Variant};
use asa_hooks::{BlockCtx, Kernel, KeyWindow, Probe};
use asa_kernels::row_table::RowWants;
use asa_metrics::{
    Metric, MetricOptions, MetricProbe, ModelAttention, ModelMetrics, VariantTraits,
};
use asa_models::attention_layers::LayerKind;

/// Queries per block of a captured layer (the materialised kernels hold heads x block x T
/// weights; the flash tiles hold none).
const CAPTURE_BLOCK: usize = 256;

pub use asa_record::capture_record::{CaptureRecord, CapturedModule};

/// An attention module the capture computes: its place and what it is told.
#[derive(Debug, Clone)]
pub struct CaptureLayer {
    pub name: String,
    /// 0-based decoder layer.
    pub number: usize,
    pub window: KeyWindow,
    pub softcap: Option<f64>,
    pub sinks: bool,
}

/// A block computed outside the engine, as [`Capture::block`] takes it.
pub struct ExternalBlock {
    pub table: Tensor,
    pub key_sums: Option<Tensor>,
    pub pattern: Option<Tensor>,
    pub sink_mass: Option<Tensor>,
}

/// One attention call: q `[b, heads, t, d]`, k `[b, kv, t, d]` and v `[b, kv, t, d']`
/// (d' <= d: multi-head latent attention's values are narrower; f32 or bf16), the
/// factor of q.k, the sink logits `[heads]` (f32) of a module with sinks, and in a padded
/// batch each sequence's tokens (none: every position of every sequence).
pub struct AttentionCall {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
    pub scale: f64,
    pub sinks: Option<Tensor>,
    pub spans: Option<Vec<Span>>,
}

/// A call whose blocks come from elsewhere, open: its module, its groups of sequences, the
/// group whose blocks come now and its next query.
struct OpenCall {
    layer: usize,
    groups: Vec<Group>,
    group: usize,
    next: usize,
}

/// The metric probe of a capture and where its sequences stand, from the first call on.
struct Pool {
    opts: MetricOptions,
    probe: MetricProbe,
    /// Positions a sequence may hold (the first pass's length, or the capture's
    /// [`Capture::set_length`]); a padded sequence holds fewer.
    t: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// Sequences the probe has room for.
    room: usize,
    /// The current pass's first sequence over every rank ([`Placement`]), this rank's
    /// first sequence in it, and its batch (the same on every rank).
    global: usize,
    offset: usize,
    batch: usize,
    placement: Placement,
    /// The modules the current pass has called.
    called: Vec<bool>,
    passes: usize,
    dtype: DType,
    /// A call whose blocks come from elsewhere.
    open: Option<OpenCall>,
    /// The sequences of the other ranks' states merged in.
    merged: usize,
    /// This process's tokens (padding left out) and its shortest sequence.
    tokens: usize,
    shortest: usize,
}

/// Where a process's sequences go among those of the processes that train one model
/// (data parallel): in each forward pass, rank r's batch of b sequences follows those of
/// ranks 0 .. r, so the ranks' pooled states merge exactly ([`Capture::merge_state`]) into
/// the state of one process that saw every rank's batch of the pass, rank after rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub rank: usize,
    pub world: usize,
}

impl Default for Placement {
    fn default() -> Self {
        Placement { rank: 0, world: 1 }
    }
}

/// What [`Capture::state`] writes: the pooled probe's exact state, sized for every rank's
/// sequences, and what must agree to merge it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CaptureState {
    probe: asa_metrics::ProbeState,
    seqs: usize,
    t: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    layers: Vec<String>,
}

/// A capture: the attention modules of one model and the metrics pooled over its calls.
pub struct Capture {
    spec: RunSpec,
    layers: Vec<CaptureLayer>,
    stack: Option<String>,
    /// Positions a sequence may hold, when set before the first call.
    length: Option<usize>,
    placement: Placement,
    pool: Option<Pool>,
    started: Instant,
}

impl Capture {
    /// A capture of `layers` (in layer order) of the model's `stack` (none: its only one)
    /// with the metrics and settings of `spec`. Refused: no layer, two modules of one layer
    /// number, a metric an attention call cannot give (nll needs the logits;
    /// induction_score the built-in probe).
    pub fn new(spec: RunSpec, layers: Vec<CaptureLayer>, stack: Option<String>) -> Result<Self> {
        if layers.is_empty() {
            return Err(Error::usage(
                "the model has no attention module the capture can compute",
            ));
        }
        for (i, a) in layers.iter().enumerate() {
            if let Some(b) = layers[..i].iter().find(|b| b.number == a.number) {
                return Err(Error::usage(format!(
                    "attention modules {} and {} both number as layer {} of one stack",
                    b.name,
                    a.name,
                    a.number + 1
                )));
            }
        }
        for metric in [Metric::NLL, Metric::INDUCTION_SCORE] {
            if spec.metrics.contains(&metric) {
                return Err(Error::option(
                    "metrics",
                    format!("{metric} is not computed from attention calls (the CLI's analyze computes it)"),
                ));
            }
        }
        Ok(Capture {
            spec,
            layers,
            stack,
            length: None,
            placement: Placement::default(),
            pool: None,
            started: Instant::now(),
        })
    }

    /// Sets the positions a sequence may hold (every pass's sequences at most `len`
    /// tokens; without it, the first pass's length). Before the first call.
    pub fn set_length(&mut self, len: usize) -> Result<()> {
        if len == 0 {
            return Err(Error::option("seq_len", "must be at least 1"));
        }
        if self.pool.is_some() {
            return Err(Error::usage(
                "a capture's length is set before its first attention call",
            ));
        }
        self.length = Some(len);
        Ok(())
    }

    /// Places this process's sequences among those of `placement.world` data-parallel
    /// processes (before the first call; refused after it, or for a rank past the world).
    pub fn place(&mut self, placement: Placement) -> Result<()> {
        if placement.world == 0 || placement.rank >= placement.world {
            return Err(Error::usage(format!(
                "rank {} of a world of {}",
                placement.rank, placement.world
            )));
        }
        if self.pool.is_some() {
            return Err(Error::usage(
                "a capture is placed before its first attention call",
            ));
        }
        self.placement = placement;
        Ok(())
    }

    /// The pooled state, exact, for [`Capture::merge_state`] on another process (bytes:
    /// MessagePack). Refused before any call.
    pub fn state(&self) -> Result<Vec<u8>> {
        let pool = self
            .pool
            .as_ref()
            .ok_or_else(|| Error::usage("nothing was captured yet"))?;
        let seqs = pool.seqs();
        let mut exact = layer_probe(&self.layers, &pool.opts, pool.heads, pool.t, seqs);
        exact.merge(&pool.probe);
        let state = CaptureState {
            probe: exact.state()?,
            seqs,
            t: pool.t,
            heads: pool.heads,
            kv_heads: pool.kv_heads,
            head_dim: pool.head_dim,
            layers: self.layers.iter().map(|l| l.name.clone()).collect(),
        };
        rmp_serde::to_vec(&state).map_err(|e| Error::usage(format!("a capture's state: {e}")))
    }

    /// Folds in the [`Capture::state`] of another rank of the same model, the same passes
    /// and batches: afterwards this capture's result is that of one process that saw every
    /// rank's sequences. Refused: a state of other modules, lengths or heads, or none yet.
    pub fn merge_state(&mut self, bytes: &[u8]) -> Result<()> {
        let theirs: CaptureState = rmp_serde::from_slice(bytes)
            .map_err(|e| Error::usage(format!("a capture's state does not decode: {e}")))?;
        let names: Vec<String> = self.layers.iter().map(|l| l.name.clone()).collect();
        let layers = self.layers.clone();
        let pool = self.pool_mut()?;
        let ours = (names, pool.t, pool.heads, pool.kv_heads, pool.head_dim);
        let other = (
            theirs.layers,
            theirs.t,
            theirs.heads,
            theirs.kv_heads,
            theirs.head_dim,
        );
        if ours != other {
            return Err(Error::usage(format!(
                "a capture's state of modules {:?}, {} tokens, {} heads over {} of {} dims does not merge into one of {:?}, {} tokens, {} heads over {} of {} dims",
                other.0, other.1, other.2, other.3, other.4, ours.0, ours.1, ours.2, ours.3, ours.4
            )));
        }
        let restored = MetricProbe::restore(theirs.probe)
            .map_err(|e| Error::usage(format!("a capture's state: {e}")))?;
        pool.grow(&layers, theirs.seqs)?;
        pool.probe.merge(&restored);
        pool.merged = pool.merged.max(theirs.seqs);
        Ok(())
    }

    /// The run options that apply to a capture (`RUN_OPTIONS`' names): those of the metrics'
    /// reduction. The others are about windows a capture does not make (corpus, probe,
    /// sequences, batches, seed), the weights it does not load, or the device the model's
    /// own forward pass runs on; `seq_len` is the capture's own (the most tokens a sequence
    /// holds, default the first pass's).
    pub const OPTIONS: [&'static str; 14] = [
        "metrics",
        "min_query",
        "layer",
        "size",
        "map_size",
        "profile_query",
        "bins",
        "sink_eps",
        "bands",
        "entropy_of",
        "role_sink",
        "role_local_window",
        "role_local",
        "role_prev",
    ];

    /// The metrics a capture computes by default: the CLI's set without nll.
    pub fn default_metrics() -> std::collections::BTreeSet<Metric> {
        let mut metrics: std::collections::BTreeSet<Metric> =
            Metric::defaults().into_iter().collect();
        metrics.remove(&Metric::NLL);
        metrics
    }

    /// The output `[b, heads, t, d']` (the dtype of q; d' the values' dims) of module
    /// `layer` (its index in the capture's layers) for `call`, its row tables pooled.
    pub fn attend(&mut self, layer: usize, call: AttentionCall) -> Result<Tensor> {
        let (b, heads, t, d) = call.q.dims4()?;
        let (kb, kv, kt, kd) = call.k.dims4()?;
        let (vb, vkv, vt, vd) = call.v.dims4()?;
        let module = self.module(layer)?;
        if (vb, vkv, vt) != (kb, kv, kt) || vd > d || kb != b || kt != t || kd != d {
            return Err(Error::usage(format!(
                "{}: q {:?}, k {:?} and v {:?} do not fit (q [b, heads, t, d], k [b, kv, t, d], v [b, kv, t, d'] with d' <= d)",
                module.name,
                call.q.dims(),
                call.k.dims(),
                call.v.dims()
            )));
        }
        if module.window.sees_later() {
            return Err(Error::usage(format!(
                "{}: a bidirectional layer goes through the torch path (the tiles are causal)",
                module.name
            )));
        }
        let groups = self.enter_call(
            layer,
            [b, heads, t, d],
            kv,
            call.q.dtype(),
            call.spans.as_deref(),
        )?;
        let module = &self.layers[layer];
        let mut shape = call_shape(module, [heads, kv, d], call.scale);
        let sinks = match call.sinks {
            Some(s) => Some(s.to_dtype(DType::F32)?.reshape((1, heads, 1, 1))?),
            None => None,
        };
        let window = module.window;
        let pool = self.pool_mut()?;
        // values narrower than q and k (multi-head latent attention's): zeros after their
        // dims, as a checkpoint's latent layers pad them, and the output narrowed back
        let v = match vd < d {
            true => call.v.pad_with_zeros(3, 0, d - vd)?,
            false => call.v,
        };
        let mut outputs = Vec::with_capacity(groups.len());
        for g in &groups {
            // a group's sequences and their positions, re-based to 0
            let part = |x: &Tensor| -> Result<Tensor> {
                Ok(x.narrow(0, g.first, g.count)?
                    .narrow(2, g.start, g.len)?
                    .contiguous()?)
            };
            shape.window = window.for_length(g.len);
            let core = AttentionCore::new(shape.clone(), sinks.clone(), None, None);
            pool.probe.set_batch_offset(pool.offset + g.first);
            let out = core.attend(
                part(&call.q)?,
                part(&call.k)?,
                part(&v)?,
                layer,
                CAPTURE_BLOCK,
                &mut pool.probe,
            )?;
            let out = match vd < d {
                true => out.narrow(3, 0, vd)?,
                false => out,
            };
            // padded positions: zeros (the caller computes their rows as the model would)
            outputs.push(match (g.start, g.len) == (0, t) {
                true => out,
                false => out.pad_with_zeros(2, g.start, t - g.start - g.len)?,
            });
        }
        let out = match outputs.len() {
            1 => outputs.pop().expect("one group"),
            _ => Tensor::cat(&outputs, 0)?,
        };
        Ok(out.contiguous()?)
    }

    /// The start of a call of module `layer` whose blocks are computed elsewhere (torch on
    /// the model's device): q `[b, heads, t, d]` (`dims`) over `kv` key heads, its
    /// sequences' `spans` in a padded batch. Returns the row table each block must come
    /// with, the queries whose weights are read ([`MetricProbe::external_wants`]) and the
    /// groups of sequences, whose blocks go in turn to [`Capture::block`] (each group's
    /// positions re-based to 0); [`Capture::end_blocks`] ends the call.
    pub fn begin_blocks(
        &mut self,
        layer: usize,
        dims: [usize; 4],
        kv: usize,
        dtype: DType,
        spans: Option<&[Span]>,
    ) -> Result<(RowWants, Vec<std::ops::Range<usize>>, Vec<Group>)> {
        let groups = self.enter_call(layer, dims, kv, dtype, spans)?;
        let pool = self.pool_mut()?;
        pool.probe.on_kernel(layer, Kernel::TorchBlocks);
        pool.open = Some(OpenCall {
            layer,
            groups: groups.clone(),
            group: 0,
            next: 0,
        });
        let (wants, rows) = pool.probe.external_wants(layer);
        Ok((wants, rows, groups))
    }

    /// The block of queries `q_start .. q_start + n` of group `group` of the call
    /// [`Capture::begin_blocks`] opened (groups and blocks in order, each query once), all
    /// f32 on the host: its row table `[count * heads * n, width]`, its key sums
    /// `[count, heads, keys]` where asked, and where it holds a query whose weights are
    /// read, its weights `[count, heads, n, keys]` and sink mass `[count, heads, n]`;
    /// `count` the group's sequences, `keys` the layer's [`KeyWindow::block_keys`] over the
    /// group's length.
    pub fn block(
        &mut self,
        layer: usize,
        group: usize,
        q_start: usize,
        n: usize,
        block: ExternalBlock,
    ) -> Result<()> {
        let name = self.module(layer)?.name.clone();
        let window = self.layers[layer].window;
        let pool = self.pool_mut()?;
        let g = match &pool.open {
            Some(open)
                if open.layer == layer
                    && open.group == group
                    && open.next == q_start
                    && n > 0
                    && q_start + n <= open.groups[group].len =>
            {
                open.groups[group]
            }
            open => {
                let (expected, of) = open.as_ref().map_or((0, 0), |o| {
                    (o.next, o.groups.get(o.group).map_or(0, |g| g.len))
                });
                return Err(Error::usage(format!(
                    "{name}: a block of queries {q_start}..{} of group {group} where the call expects queries from {expected} of {of} of group {}",
                    q_start + n,
                    open.as_ref().map_or(0, |o| o.group)
                )));
            }
        };
        let window = window.for_length(g.len);
        let (b, heads) = (g.count, pool.heads);
        let keys = window.block_keys(q_start, n);
        let (wants, _) = pool.probe.external_wants(layer);
        check_block(&name, &block, [b, heads, n, keys], wants.width())?;
        let ctx = BlockCtx {
            layer,
            q_start,
            q_len: n,
            seq_len: g.len,
            window,
        };
        let ExternalBlock {
            table,
            key_sums,
            pattern,
            sink_mass,
        } = &block;
        pool.probe.set_batch_offset(pool.offset + g.first);
        pool.probe.external_block(
            &ctx,
            table,
            key_sums.as_ref(),
            pattern.as_ref(),
            sink_mass.as_ref(),
        )?;
        if let Some(open) = pool.open.as_mut() {
            open.next = q_start + n;
            if open.next == g.len {
                (open.group, open.next) = (open.group + 1, 0);
            }
        }
        Ok(())
    }

    /// The end of the call [`Capture::begin_blocks`] opened (every query of every group
    /// seen).
    pub fn end_blocks(&mut self, layer: usize) -> Result<()> {
        let name = self.module(layer)?.name.clone();
        let pool = self.pool_mut()?;
        match &pool.open {
            Some(open) if open.layer == layer && open.group == open.groups.len() => {}
            _ => {
                return Err(Error::usage(format!(
                    "{name}: the call ended before its last query block"
                )))
            }
        }
        pool.open = None;
        pool.probe.on_layer_end(layer)
    }

    /// Module `layer` (its index among the capture's layers).
    fn module(&self, layer: usize) -> Result<&CaptureLayer> {
        self.layers.get(layer).ok_or_else(|| {
            Error::usage(format!(
                "attention call of layer index {layer}: the capture has {} modules",
                self.layers.len()
            ))
        })
    }

    fn pool_mut(&mut self) -> Result<&mut Pool> {
        self.pool
            .as_mut()
            .ok_or_else(|| Error::usage("no attention call has been captured yet"))
    }

    /// A call of module `layer` with q of `dims` `[b, heads, t, d]` over `kv` key heads and
    /// its sequences' `spans`: its shape checked, the pool made at the first call, the call
    /// placed in its pass. Returns its groups of sequences.
    fn enter_call(
        &mut self,
        layer: usize,
        dims: [usize; 4],
        kv: usize,
        dtype: DType,
        spans: Option<&[Span]>,
    ) -> Result<Vec<Group>> {
        let [b, heads, t, d] = dims;
        let module = self.module(layer)?;
        if kv == 0 || heads % kv != 0 || t == 0 || b == 0 || d == 0 {
            return Err(Error::usage(format!(
                "{}: {heads} query heads over {kv} key heads, {b} sequences of {t} tokens of {d} dims",
                module.name
            )));
        }
        let groups = groups(&module.name, b, t, spans)?;
        if let Some(pool) = &self.pool {
            if let Some(open) = &pool.open {
                return Err(Error::usage(format!(
                    "{}: called while the call of {} is still open",
                    module.name, self.layers[open.layer].name
                )));
            }
        }
        let pool = match self.pool.take() {
            Some(pool) => pool,
            None => self.first_pool(dims, kv, dtype)?,
        };
        let pool = self.pool.insert(pool);
        let module = &self.layers[layer];
        pool.check(module, dims, kv, &groups)?;
        pool.enter(layer, b, module, &self.layers, &groups)?;
        Ok(groups)
    }

    /// The pool of the first call: the metric options for the capture's length (set, or
    /// the call's) and a probe with room for its batch.
    fn first_pool(&mut self, dims: [usize; 4], kv: usize, dtype: DType) -> Result<Pool> {
        let [b, heads, t_call, d] = dims;
        let t = self.length.unwrap_or(t_call);
        // a bidirectional layer's keys are those of the passes' length
        for layer in &mut self.layers {
            layer.window = layer.window.for_length(t);
        }
        let heatmap_layer = self.heatmap_layer()?;
        let opts = metric_options_at(&self.spec, &self.spec.metrics, t, heatmap_layer)?;
        let Placement { rank, world } = self.placement;
        let probe = layer_probe(&self.layers, &opts, heads, t, world * b);
        Ok(Pool {
            opts,
            probe,
            t,
            heads,
            kv_heads: kv,
            head_dim: d,
            room: world * b,
            global: 0,
            offset: rank * b,
            batch: b,
            placement: self.placement,
            merged: 0,
            called: vec![false; self.layers.len()],
            passes: 0,
            dtype,
            open: None,
            tokens: 0,
            shortest: usize::MAX,
        })
    }

    /// The heatmap's layer among the captured modules: `layer` (1-based decoder layer) of
    /// the spec, else the 8th module or the last.
    fn heatmap_layer(&self) -> Result<usize> {
        match self.spec.layer {
            Some(l) => self
                .layers
                .iter()
                .position(|m| m.number + 1 == l)
                .ok_or_else(|| {
                    let with: Vec<String> = self
                        .layers
                        .iter()
                        .map(|m| (m.number + 1).to_string())
                        .collect();
                    Error::option(
                        "layer",
                        format!(
                            "{l} has no captured attention module (layers: {})",
                            with.join(", ")
                        ),
                    )
                }),
            None => Ok(8.min(self.layers.len()) - 1),
        }
    }

    /// The captured model's tables and record, labelled `label` (`model_class`,
    /// `transformers_version` and the torch `device` it ran on for run.json). Refused when no
    /// call went through.
    pub fn output(
        &self,
        label: &str,
        model_class: &str,
        transformers_version: &str,
        device: &str,
    ) -> Result<RunOutput> {
        let Some(pool) = &self.pool else {
            return Err(Error::usage(
                "nothing was captured: no attention call of the model went through the backend inside the block",
            ));
        };
        let seqs = pool.seqs();
        // the pooled probe has room for more sequences than came: the sequences that came,
        // merged into a probe of exactly their number
        let mut exact = layer_probe(&self.layers, &pool.opts, pool.heads, pool.t, seqs);
        exact.merge(&pool.probe);
        let sinks = self.layers.iter().any(|l| l.sinks);
        let traits = VariantTraits {
            has_sink_mass: sinks,
            weights_sum_to_one: !sinks,
        };
        let metrics: ModelMetrics = exact.finish(None, traits);
        let seconds = self.started.elapsed().as_secs_f64();
        let record = self.model_record(
            label,
            model_class,
            transformers_version,
            pool,
            &metrics,
            seconds,
        );
        Ok(RunOutput {
            models: vec![ModelResult {
                label: label.to_string(),
                metrics,
                record,
                partial: None,
                tokens: Vec::new(),
            }],
            series: Vec::new(),
            device: device.to_string(),
            dtype: dtype_name(pool.dtype).to_string(),
            seconds,
            shard: None,
            fingerprint: None,
            partials: Vec::new(),
        })
    }

    /// The output of a model's stacks captured apart (a VLM's vision tower and language
    /// model, each its own capture): one model per stack that was called, in the order
    /// given, whose tables keep the stacks apart by a `stack` column (`RunOutput::tables`).
    /// Refused when no stack was called.
    pub fn stacked_output(
        captures: &[&Capture],
        label: &str,
        model_class: &str,
        transformers_version: &str,
        device: &str,
    ) -> Result<RunOutput> {
        let called: Vec<&&Capture> = captures.iter().filter(|c| c.pool.is_some()).collect();
        let mut outputs = called
            .iter()
            .map(|c| c.output(label, model_class, transformers_version, device));
        let Some(first) = outputs.next() else {
            return Err(Error::usage(
                "nothing was captured: no attention call of the model went through the backend inside the block",
            ));
        };
        let mut out = first?;
        for other in outputs {
            let other = other?;
            out.seconds = out.seconds.max(other.seconds);
            out.models.extend(other.models);
        }
        Ok(out)
    }

    fn model_record(
        &self,
        label: &str,
        model_class: &str,
        transformers_version: &str,
        pool: &Pool,
        metrics: &ModelMetrics,
        seconds: f64,
    ) -> ModelRecord {
        let seqs = pool.seqs();
        let modules = self
            .layers
            .iter()
            .map(|l| CapturedModule {
                name: l.name.clone(),
                layer: l.number + 1,
                keys: l.window.describe(),
                softcap: l.softcap,
                sinks: l.sinks,
            })
            .collect();
        ModelRecord {
            model: label.to_string(),
            path: String::new(),
            architecture: model_class.to_string(),
            variant: if self.layers.iter().any(|l| l.sinks) {
                "sink".to_string()
            } else {
                "softmax".to_string()
            },
            variant_source: "the transformers modules' attention calls".to_string(),
            layers: self.layers.len(),
            heads: pool.heads,
            kv_heads: pool.kv_heads,
            head_dim: pool.head_dim,
            corpus: match pool.shortest < pool.t {
                false => format!(
                    "{} forward passes captured: {seqs} sequences of {} tokens",
                    pool.passes + 1,
                    pool.t
                ),
                true => format!(
                    "{} forward passes captured: {seqs} sequences of {} to {} tokens ({} tokens in this process, padding left out)",
                    pool.passes + 1,
                    pool.shortest,
                    pool.t,
                    pool.tokens
                ),
            },
            seq_len: pool.t,
            beta_length_n: pool.t,
            block_size: CAPTURE_BLOCK.min(pool.t),
            batch_size: pool.batch,
            heatmap_layer: self.layers[pool.opts.heatmap_layer].number + 1,
            profile_query: pool.opts.profile_query,
            layer_kinds: self
                .layers
                .iter()
                .map(|l| {
                    let attention = asa_models::mixers::Mixer::Attention.name();
                    LayerKind::attention(l.number, attention, l.window.describe(), true, false)
                })
                .collect(),
            kernels: kernel_layers(&metrics.kernels)
                .into_iter()
                .map(|(k, layers)| (k.to_string(), layers))
                .collect(),
            seconds,
            tokens_per_second: pool.tokens as f64 / seconds.max(1e-9),
            capture: Some(CaptureRecord {
                model_class: model_class.to_string(),
                stack: self.stack.clone(),
                transformers_version: transformers_version.to_string(),
                forward_passes: pool.passes + 1,
                modules,
            }),
            ..ModelRecord::default()
        }
    }
}

impl Pool {
    /// Whether a call of `module` fits the capture's first: the same heads, key heads and
    /// head size, and no sequence longer than the capture's positions.
    fn check(
        &self,
        module: &CaptureLayer,
        dims: [usize; 4],
        kv: usize,
        groups: &[Group],
    ) -> Result<()> {
        let [_, heads, _, d] = dims;
        if let Some(g) = groups.iter().find(|g| g.len > self.t) {
            return Err(Error::usage(format!(
                "{}: a sequence of {} tokens in a capture of {}-token sequences (the first forward pass's length; asa.capture(..., seq_len=N) takes longer ones)",
                module.name, g.len, self.t
            )));
        }
        if (heads, kv, d) != (self.heads, self.kv_heads, self.head_dim) {
            return Err(Error::usage(format!(
                "{}: {heads} heads over {kv} key heads of {d} dims where the first module had {} over {} of {}; a capture pools one head layout",
                module.name, self.heads, self.kv_heads, self.head_dim
            )));
        }
        Ok(())
    }

    /// A call of module `layer` with a batch of `b` sequences in `groups`: a module the
    /// current pass has called starts the next pass (its sequences after the current ones),
    /// with room made for them; a pass's first call counts its tokens.
    fn enter(
        &mut self,
        layer: usize,
        b: usize,
        module: &CaptureLayer,
        layers: &[CaptureLayer],
        groups: &[Group],
    ) -> Result<()> {
        let Placement { rank, world } = self.placement;
        if self.called[layer] {
            self.global += world * self.batch;
            self.offset = self.global + rank * b;
            self.batch = b;
            self.passes += 1;
            self.called.iter_mut().for_each(|c| *c = false);
        } else if self.called.iter().any(|&c| c) && b != self.batch {
            return Err(Error::usage(format!(
                "{}: a batch of {b} sequences in a forward pass of {}",
                module.name, self.batch
            )));
        }
        if !self.called.iter().any(|&c| c) {
            self.tokens += groups.iter().map(|g| g.count * g.len).sum::<usize>();
            let shortest = groups.iter().map(|g| g.len).min().unwrap_or(self.t);
            self.shortest = self.shortest.min(shortest);
        }
        self.batch = b;
        self.called[layer] = true;
        self.grow(layers, self.global + world * b)
    }

    /// Every rank's sequences so far (this pass's included), and any merged in.
    fn seqs(&self) -> usize {
        (self.global + self.placement.world * self.batch).max(self.merged)
    }

    /// Room in the probe for `needed` sequences.
    fn grow(&mut self, layers: &[CaptureLayer], needed: usize) -> Result<()> {
        if needed > self.room {
            // twice the room: the pooled sums are copied log(passes) times, not each pass
            let room = needed.max(2 * self.room);
            let mut grown = layer_probe(layers, &self.opts, self.heads, self.t, room);
            grown.merge(&self.probe);
            self.probe = grown;
            self.room = room;
        }
        Ok(())
    }
}

/// Whether `block`'s tensors are f32 of the sizes a block of `n` queries of `b` sequences
/// over `keys` keys and a row table `width` wide has (`name` names the module).
fn check_block(
    name: &str,
    block: &ExternalBlock,
    [b, heads, n, keys]: [usize; 4],
    width: usize,
) -> Result<()> {
    let expected = [
        ("row table", Some(&block.table), vec![b * heads * n, width]),
        ("key sums", block.key_sums.as_ref(), vec![b, heads, keys]),
        ("weights", block.pattern.as_ref(), vec![b, heads, n, keys]),
        ("sink mass", block.sink_mass.as_ref(), vec![b, heads, n]),
    ];
    for (what, xs, want) in expected {
        if let Some(xs) = xs {
            if xs.dims() != want.as_slice() || xs.dtype() != DType::F32 {
                return Err(Error::usage(format!(
                    "{name}: the block's {what} is {:?} {:?}, not {want:?} f32",
                    xs.dims(),
                    xs.dtype()
                )));
            }
        }
    }
    Ok(())
}

/// The shape of a captured module's attention: `heads` query heads over `kv` key heads of
/// `d` dims, its logits scaled by `scale` (and soft-capped, with sinks, as the module is).
fn call_shape(module: &CaptureLayer, [heads, kv, d]: [usize; 3], scale: f64) -> AttentionShape {
    AttentionShape {
        hidden: heads * d,
        heads,
        kv_heads: kv,
        head_dim: d,
        qkv_bias: false,
        o_bias: false,
        variant: if module.sinks {
            Variant::Sink
        } else {
            Variant::Softmax
        },
        qk_norm: false,
        qk_norm_whole: false,
        qk_norm_plus_one: false,
        rms_norm_eps: 0.0,
        window: module.window,
        scale,
        softcap: module.softcap,
        rotary: false,
        l2_qk_norm: false,
        temperature: None,
        latent: None,
        key_scale: None,
    }
}

/// The tables' name of a dtype.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::F64 => "f64",
        _ => "f32",
    }
}

/// A metric probe of `layers` for `seqs` sequences of `t` tokens.
fn layer_probe(
    layers: &[CaptureLayer],
    opts: &MetricOptions,
    heads: usize,
    t: usize,
    seqs: usize,
) -> MetricProbe {
    let key_windows: Vec<KeyWindow> = layers.iter().map(|l| l.window).collect();
    let numbers: Vec<usize> = layers.iter().map(|l| l.number).collect();
    let attention = ModelAttention {
        key_windows: &key_windows,
        logit_softcap: layers.iter().find_map(|l| l.softcap),
        heads,
        layer_numbers: &numbers,
    };
    MetricProbe::new(opts.clone(), attention, &vec![vec![0u32; t]; seqs])
}

#[cfg(test)]
mod tests {
    //! A capture against attention computed here by hand in f64 (outputs, first_token), its
    //! pooling over passes, and its refusals.
    use super::*;
    use asa_metrics::layer_stat::LayerStat;
    use candle_core::Device;

    const B: usize = 2;
    const H: usize = 4;
    const KV: usize = 2;
    const T: usize = 12;
    const D: usize = 8;

    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect()
    }

    /// q `[B, H, T, D]`, k and v `[B, KV, T, D]` of `seed`.
    fn qkv(seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        (
            values(seed, B * H * T * D),
            values(seed + 1, B * KV * T * D),
            values(seed + 2, B * KV * T * D),
        )
    }

    fn call(q: &[f32], k: &[f32], v: &[f32], b: usize, scale: f64) -> AttentionCall {
        let cpu = &Device::Cpu;
        AttentionCall {
            q: Tensor::from_slice(q, (b, H, T, D), cpu).unwrap(),
            k: Tensor::from_slice(k, (b, KV, T, D), cpu).unwrap(),
            v: Tensor::from_slice(v, (b, KV, T, D), cpu).unwrap(),
            scale,
            sinks: None,
            spans: None,
        }
    }

    fn layers() -> Vec<CaptureLayer> {
        let layer = |number, window| CaptureLayer {
            name: format!("model.layers.{number}.self_attn"),
            number,
            window,
            softcap: None,
            sinks: false,
        };
        vec![layer(0, KeyWindow::CAUSAL), layer(1, KeyWindow::sliding(4))]
    }

    fn spec() -> RunSpec {
        RunSpec {
            metrics: [Metric::FIRST_TOKEN, Metric::ENTROPY].into_iter().collect(),
            ..RunSpec::default()
        }
    }

    /// Softmax attention of one (sequence, head) in f64: the output rows and a_i0.
    fn by_hand(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        s: usize,
        h: usize,
        window: KeyWindow,
        scale: f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let g = h / (H / KV);
        let at = |x: &[f32], heads: usize, head: usize, i: usize, c: usize| {
            x[((s * heads + head) * T + i) * D + c] as f64
        };
        let (mut out, mut first) = (Vec::new(), Vec::new());
        for i in 0..T {
            let keys = window.keys(i);
            let logits: Vec<f64> = keys
                .clone()
                .map(|j| {
                    scale
                        * (0..D)
                            .map(|c| at(q, H, h, i, c) * at(k, KV, g, j, c))
                            .sum::<f64>()
                })
                .collect();
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
            let z: f64 = e.iter().sum();
            first.push(if keys.start == 0 { e[0] / z } else { f64::NAN });
            for c in 0..D {
                out.push(
                    keys.clone()
                        .zip(&e)
                        .map(|(j, w)| w / z * at(v, KV, g, j, c))
                        .sum(),
                );
            }
        }
        (out, first)
    }

    #[test]
    fn outputs_and_first_token_are_those_of_attention_by_hand() {
        let (q, k, v) = qkv(1);
        let scale = 0.4;
        let mut capture = Capture::new(spec(), layers(), None).unwrap();
        let mut firsts = vec![Vec::new(); 2];
        for (l, layer) in layers().iter().enumerate() {
            let out = capture.attend(l, call(&q, &k, &v, B, scale)).unwrap();
            let got = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for s in 0..B {
                for h in 0..H {
                    let (want, first) = by_hand(&q, &k, &v, s, h, layer.window, scale);
                    let at = (s * H + h) * T * D;
                    for (x, y) in got[at..at + T * D].iter().zip(&want) {
                        assert!((*x as f64 - y).abs() < 1e-5, "layer {l}: {x} vs {y}");
                    }
                    firsts[l].extend(first[1..].iter().filter(|x| !x.is_nan()));
                }
            }
        }
        let out = capture.output("m", "ByHand", "0", "cpu").unwrap();
        let metrics = &out.models[0].metrics;
        let first = metrics.get::<LayerStat>(Metric::FIRST_TOKEN).unwrap();
        for l in 0..2 {
            let want = firsts[l].iter().sum::<f64>() / firsts[l].len() as f64;
            assert!(
                (first.mean[l] - want).abs() < 1e-6,
                "layer {l}: {} vs {want}",
                first.mean[l]
            );
        }
        let record = out.models[0].record.capture.as_ref().unwrap();
        assert_eq!(record.forward_passes, 1);
        assert_eq!(record.modules[1].keys, "sliding window of 4 keys");
    }

    #[test]
    fn passes_of_one_sequence_pool_as_one_batch() {
        let (q, k, v) = qkv(7);
        let half = |x: &[f32]| x[x.len() / 2..].to_vec();
        let run = |passes: Vec<(Vec<f32>, Vec<f32>, Vec<f32>, usize)>| {
            let mut capture = Capture::new(spec(), layers(), None).unwrap();
            for (q, k, v, b) in &passes {
                for l in 0..2 {
                    capture.attend(l, call(q, k, v, *b, 0.3)).unwrap();
                }
            }
            let out = capture.output("m", "ByHand", "0", "cpu").unwrap();
            out.models[0]
                .metrics
                .get::<LayerStat>(Metric::FIRST_TOKEN)
                .unwrap()
                .clone()
        };
        let whole = run(vec![(q.clone(), k.clone(), v.clone(), B)]);
        let first = |x: &[f32]| x[..x.len() / 2].to_vec();
        let parts = run(vec![
            (first(&q), first(&k), first(&v), 1),
            (half(&q), half(&k), half(&v), 1),
        ]);
        for l in 0..2 {
            assert!((whole.mean[l] - parts.mean[l]).abs() < 1e-12);
            assert!(
                (whole.std[l] - parts.std[l]).abs() < 1e-12,
                "the std over 2 sequences"
            );
        }
        assert!(whole.std[0] > 0.0, "two different sequences");
    }

    #[test]
    fn two_ranks_merged_give_one_process_of_both_batches() {
        // two passes; in each, rank 0 has the first sequence and rank 1 the second
        let passes: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = [11, 13].into_iter().map(qkv).collect();
        let first = |x: &[f32]| x[..x.len() / 2].to_vec();
        let second = |x: &[f32]| x[x.len() / 2..].to_vec();
        let stats = |capture: &Capture| {
            let out = capture.output("m", "ByHand", "0", "cpu").unwrap();
            let m = &out.models[0].metrics;
            let first = m.get::<LayerStat>(Metric::FIRST_TOKEN).unwrap().clone();
            (first.mean, first.std, out.models[0].record.corpus.clone())
        };
        let mut whole = Capture::new(spec(), layers(), None).unwrap();
        for (q, k, v) in &passes {
            for l in 0..2 {
                whole.attend(l, call(q, k, v, B, 0.3)).unwrap();
            }
        }
        let mut ranks: Vec<Capture> = (0..2)
            .map(|rank| {
                let mut c = Capture::new(spec(), layers(), None).unwrap();
                c.place(Placement { rank, world: 2 }).unwrap();
                c
            })
            .collect();
        for (q, k, v) in &passes {
            for l in 0..2 {
                ranks[0]
                    .attend(l, call(&first(q), &first(k), &first(v), 1, 0.3))
                    .unwrap();
                ranks[1]
                    .attend(l, call(&second(q), &second(k), &second(v), 1, 0.3))
                    .unwrap();
            }
        }
        let state = ranks[1].state().unwrap();
        ranks[0].merge_state(&state).unwrap();
        let (want, got) = (stats(&whole), stats(&ranks[0]));
        for l in 0..2 {
            assert!((want.0[l] - got.0[l]).abs() < 1e-12, "mean");
            assert!(
                (want.1[l] - got.1[l]).abs() < 1e-12,
                "std over the 4 sequences"
            );
        }
        assert!(got.2.contains("4 sequences"), "{}", got.2);
        // a state of other modules does not merge
        let mut other = Capture::new(spec(), layers()[..1].to_vec(), None).unwrap();
        other
            .attend(0, call(&passes[0].0, &passes[0].1, &passes[0].2, B, 0.3))
            .unwrap();
        assert!(ranks[0].merge_state(&other.state().unwrap()).is_err());
        assert!(ranks[0].merge_state(b"not a state").is_err());
        assert!(
            ranks[0].place(Placement { rank: 0, world: 2 }).is_err(),
            "placed after a call"
        );
    }

    #[test]
    fn a_padded_batch_pools_as_its_sequences_alone() {
        // B = 2 sequences of T positions: the first whole, the second's tokens at 3 .. 10
        // (padding both sides); against a capture of the whole sequence and then of the
        // second's 7 tokens alone (positions re-based to 0), the capture's length set to T
        let (q, k, v) = qkv(5);
        let spec = RunSpec {
            metrics: [Metric::FIRST_TOKEN, Metric::KEY_RECEIVED, Metric::HEATMAP]
                .into_iter()
                .collect(),
            ..RunSpec::default()
        };
        let (start, len) = (3, 7);
        let mut padded = Capture::new(spec.clone(), layers(), None).unwrap();
        let mut alone = Capture::new(spec, layers(), None).unwrap();
        alone.set_length(T).unwrap();
        let one = |x: &Tensor, s: usize| x.narrow(0, s, 1).unwrap();
        let c = call(&q, &k, &v, B, 0.3);
        let part = |x: &Tensor| one(x, 1).narrow(2, start, len).unwrap();
        let mut outs = (Vec::new(), vec![Vec::new(); 2]);
        for l in 0..2 {
            let spans = vec![Span { start: 0, len: T }, Span { start, len }];
            let padded_call = AttentionCall {
                spans: Some(spans),
                ..call(&q, &k, &v, B, 0.3)
            };
            outs.0.push(padded.attend(l, padded_call).unwrap());
        }
        // one pass of the whole sequence, then one of the short one
        for (s, seq) in [
            [one(&c.q, 0), one(&c.k, 0), one(&c.v, 0)],
            [part(&c.q), part(&c.k), part(&c.v)],
        ]
        .into_iter()
        .enumerate()
        {
            for l in 0..2 {
                let [q, k, v] = seq.clone();
                let single = AttentionCall {
                    q,
                    k,
                    v,
                    scale: 0.3,
                    sinks: None,
                    spans: None,
                };
                outs.1[s].push(alone.attend(l, single).unwrap());
            }
        }
        let close = |a: &Tensor, b: &Tensor| {
            let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
            d.to_scalar::<f32>().unwrap()
        };
        for (l, out) in outs.0.iter().enumerate() {
            let (whole, short) = (&outs.1[0][l], &outs.1[1][l]);
            assert!(close(&one(out, 0), whole) < 1e-6);
            assert!(close(&one(out, 1).narrow(2, start, len).unwrap(), short) < 1e-6);
            let pad = one(out, 1).narrow(2, 0, start).unwrap();
            assert_eq!(
                pad.abs()
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap(),
                0.0
            );
        }
        let (a, b) = (
            padded.output("m", "c", "0", "cpu").unwrap(),
            alone.output("m", "c", "0", "cpu").unwrap(),
        );
        let (a, b) = (&a.models[0], &b.models[0]);
        let first = |m: &ModelResult| {
            m.metrics
                .get::<LayerStat>(Metric::FIRST_TOKEN)
                .unwrap()
                .clone()
        };
        let received = |m: &ModelResult| {
            m.metrics
                .get::<asa_metrics::key_received::KeyReceivedResult>(Metric::KEY_RECEIVED)
                .unwrap()
                .clone()
        };
        let heat = |m: &ModelResult| {
            m.metrics
                .get::<asa_metrics::heatmap::HeatmapResult>(Metric::HEATMAP)
                .unwrap()
                .values
                .clone()
        };
        let near = |x: &[f64], y: &[f64], what: &str| {
            for (p, q) in x.iter().zip(y) {
                assert!((p - q).abs() < 1e-9, "{what}: {p} vs {q}");
            }
        };
        near(&first(a).mean, &first(b).mean, "first_token mean");
        near(
            &first(a).std,
            &first(b).std,
            "first_token std over 2 sequences",
        );
        for l in 0..2 {
            near(
                &received(a).layer_sum[l],
                &received(b).layer_sum[l],
                "key_received sum",
            );
            near(
                &received(a).layer_mean[l],
                &received(b).layer_mean[l],
                "key_received mean",
            );
            // keys past the short sequence's are the whole one's alone
            assert!(received(a).layer_sum[l][T - 1] > 0.0);
        }
        for (x, y) in heat(a).iter().zip(&heat(b)) {
            near(x, y, "heatmap");
        }
        assert!(
            a.record
                .corpus
                .contains("2 sequences of 7 to 12 tokens (19 tokens"),
            "{}",
            a.record.corpus
        );
    }

    #[test]
    fn what_a_capture_cannot_pool_is_refused() {
        let (q, k, v) = qkv(3);
        let nll = RunSpec {
            metrics: [Metric::NLL].into_iter().collect(),
            ..RunSpec::default()
        };
        assert!(Capture::new(nll, layers(), None).is_err());
        let mut twice = layers();
        twice[1].number = 0;
        assert!(Capture::new(spec(), twice, None).is_err());
        let mut capture = Capture::new(spec(), layers(), None).unwrap();
        assert!(
            capture.output("m", "c", "0", "cpu").is_err(),
            "nothing captured"
        );
        capture.attend(0, call(&q, &k, &v, B, 0.3)).unwrap();
        let cpu = &Device::Cpu;
        let long = AttentionCall {
            q: Tensor::zeros((B, H, T + 1, D), DType::F32, cpu).unwrap(),
            k: Tensor::zeros((B, KV, T + 1, D), DType::F32, cpu).unwrap(),
            v: Tensor::zeros((B, KV, T + 1, D), DType::F32, cpu).unwrap(),
            scale: 0.3,
            sinks: None,
            spans: None,
        };
        let err = capture.attend(0, long).unwrap_err().to_string();
        assert!(
            err.contains("a sequence of 13 tokens in a capture of 12-token sequences"),
            "{err}"
        );
        assert!(capture.set_length(20).is_err(), "set after a call");
        let table = Tensor::zeros((1, 1), DType::F32, cpu).unwrap();
        let block = ExternalBlock {
            table,
            key_sums: None,
            pattern: None,
            sink_mass: None,
        };
        assert!(
            capture.block(1, 0, 0, 4, block).is_err(),
            "a block without begin_blocks"
        );
    }
}
