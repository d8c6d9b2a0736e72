//! [`MetricProbe`]: the probe that turns what the kernels hand over (row tables, or a
//! materialised block's tensors) into [`Event`]s and feeds them to the registry's
//! accumulators. Row tables are pooled here, on the host or (on a GPU) on their device
//! until the layer ends.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor};

use super::accumulator::{
    Accumulator, BlockEvent, Event, FinishCtx, KeyBlockRows, Needs, QkSums, Rows, Setup,
    TensorEvent, Weights,
};
use super::block_pools::{pool_host, pool_on_device, BlockPools, PoolShape};
use super::registry::REGISTRY;
use super::results::ModelMetrics;
use super::rows::to_host;
use super::{Metric, MetricOptions, VariantTraits};
use asa_core::error::{Error, Result};
use asa_core::profile::phase;
use asa_hooks::blocks::with_column;
use asa_hooks::row_pass::{weight_rows, weight_table_on_device};
use asa_hooks::{BlockCtx, Hook, Kernel, KeyWindow, Probe};
use asa_kernels::cpu::host::with_cpu_f32;
use asa_kernels::row_table::{Column, RowWants, QK_ABS_SUM, QK_SUM, SINK_MASS};

/// Why a saved [`ProbeState`] does not make a probe again.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The state holds another number of accumulator states than its metrics have
    /// accumulators.
    #[error("{states} metric states for the {accumulators} accumulators of its metrics")]
    Count { states: usize, accumulators: usize },
    /// The saved state of the accumulator of `metric` (its first) does not decode.
    #[error("the state of {metric}: {source}")]
    State {
        metric: Metric,
        #[source]
        source: rmp_serde::decode::Error,
    },
}

/// What a row table held.
#[derive(Debug, Clone, Copy, PartialEq)]
enum TableSource {
    /// The pattern's reductions; `qk`: its q.k columns hold the raw q.k sums (a fused
    /// kernel filled them; a materialised block hands its sums apart, from its raw q.k).
    Pattern { qk: bool },
    /// The plain softmax's entropy (`--entropy-of softmax`).
    Softmax,
}

/// A block's row table left on the GPU until the layer ends (one copy to the host per
/// layer instead of one wait per block).
struct DevicePools {
    /// Flat f64 sums ([`pool_on_device`]).
    sums: Tensor,
    /// The row table, copied whole only when it holds a NaN.
    table: Tensor,
    shape: PoolShape,
    seq_offset: usize,
    q_start: usize,
    window: KeyWindow,
    source: TableSource,
}

/// A materialised block's tensors, gathered until the block ends.
#[derive(Default)]
struct BlockTensors {
    qk: Option<Tensor>,
    pattern: Option<Tensor>,
    softmax: Option<Tensor>,
    sink_mass: Option<Tensor>,
    max_logit: Option<Tensor>,
}

/// The registry entries with an asked metric, in registry order.
fn asked_entries(
    opts: &MetricOptions,
) -> impl Iterator<Item = &'static super::registry::Entry> + '_ {
    REGISTRY
        .iter()
        .filter(|(metrics, _, _)| metrics.iter().any(|m| opts.metrics.contains(m)))
}

/// A [`MetricProbe`]'s exact state: its options, each asked accumulator's saved state (in
/// registry order) and the kernel of each layer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProbeState {
    pub opts: MetricOptions,
    pub heads: usize,
    pub accumulators: Vec<Vec<u8>>,
    pub kernels: BTreeMap<usize, Kernel>,
    /// The decoder layer of each probe layer (empty: the same numbers; states saved before
    /// hybrids had none).
    #[serde(default)]
    pub layer_numbers: Vec<usize>,
}

/// What the accumulators know of a model's attention: the keys each attention layer's
/// queries see (`[layer]`, sliding windows), the logits' soft-cap (Gemma 2), if any, the
/// query heads per layer, and the decoder layer (0-based) of each attention layer (a
/// hybrid's attention layers are the probe's 0, 1, ...; empty: every layer has attention).
#[derive(Debug, Clone, Copy)]
pub struct ModelAttention<'a> {
    pub key_windows: &'a [KeyWindow],
    pub logit_softcap: Option<f64>,
    pub heads: usize,
    pub layer_numbers: &'a [usize],
}

/// The probe that feeds every requested accumulator during one model's forward passes.
pub struct MetricProbe {
    opts: MetricOptions,
    seq_offset: usize,
    heads: usize,
    accumulators: Vec<Box<dyn Accumulator>>,
    /// The current materialised block's tensors.
    block: BlockTensors,
    /// Row tables still on the device, in block order.
    pending: Vec<DevicePools>,
    kernels: BTreeMap<usize, Kernel>,
    /// The key sums of the block whose row table comes next.
    key_sums: Option<Tensor>,
    /// [`ModelAttention::layer_numbers`].
    layer_numbers: Vec<usize>,
}

impl MetricProbe {
    /// Accumulators for a model of attention `model` over `windows` (all sequences of the
    /// run): one per registry entry with an asked metric.
    pub fn new(opts: MetricOptions, model: ModelAttention, windows: &[Vec<u32>]) -> Self {
        let ModelAttention {
            key_windows,
            logit_softcap,
            heads,
            layer_numbers,
        } = model;
        let setup = Setup {
            opts: &opts,
            layers: key_windows.len(),
            heads,
            key_windows,
            logit_softcap,
            windows,
        };
        let accumulators = asked_entries(&opts)
            .map(|(_, build, _)| build(&setup))
            .collect();
        MetricProbe {
            seq_offset: 0,
            heads,
            accumulators,
            block: BlockTensors::default(),
            pending: Vec::new(),
            kernels: BTreeMap::new(),
            key_sums: None,
            layer_numbers: layer_numbers.to_vec(),
            opts,
        }
    }

    /// Its exact state: what a shard writes and [`MetricProbe::restore`] reads.
    pub fn state(&self) -> Result<ProbeState> {
        Ok(ProbeState {
            opts: self.opts.clone(),
            heads: self.heads,
            accumulators: self
                .accumulators
                .iter()
                .map(|acc| acc.state())
                .collect::<Result<_>>()?,
            kernels: self.kernels.clone(),
            layer_numbers: self.layer_numbers.clone(),
        })
    }

    /// The probe whose [`MetricProbe::state`] is `state` (ready to merge and finish); an
    /// error says what does not fit.
    pub fn restore(state: ProbeState) -> std::result::Result<Self, RestoreError> {
        let entries: Vec<_> = asked_entries(&state.opts).collect();
        if entries.len() != state.accumulators.len() {
            return Err(RestoreError::Count {
                states: state.accumulators.len(),
                accumulators: entries.len(),
            });
        }
        let accumulators = entries
            .iter()
            .zip(&state.accumulators)
            .map(|((metrics, _, restore), bytes)| {
                restore(bytes).map_err(|source| RestoreError::State {
                    metric: metrics[0],
                    source,
                })
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(MetricProbe {
            seq_offset: 0,
            heads: state.heads,
            accumulators,
            block: BlockTensors::default(),
            pending: Vec::new(),
            kernels: state.kernels,
            opts: state.opts,
            key_sums: None,
            layer_numbers: state.layer_numbers,
        })
    }

    /// The next forward pass covers sequences `offset ..`.
    pub fn set_batch_offset(&mut self, offset: usize) {
        self.seq_offset = offset;
    }

    /// Results of a model whose variant has `traits`; `alpha_ma` `[layer][head]` is the
    /// stored buffer (affine variants).
    pub fn finish(&self, alpha_ma: Option<Vec<Vec<f64>>>, traits: VariantTraits) -> ModelMetrics {
        let ctx = FinishCtx {
            opts: &self.opts,
            traits,
            alpha_ma: alpha_ma.as_deref(),
        };
        let mut out = ModelMetrics::default();
        for acc in &self.accumulators {
            acc.finish(&ctx, &mut out);
        }
        out.layer_numbers = self.layer_numbers.clone();
        out.kernels = self
            .kernels
            .iter()
            .map(|(&l, &k)| (out.decoder_layer(l), k))
            .collect();
        out
    }

    /// Folds in `other`, a probe of the same model and options that saw other windows of
    /// the same run (each window in exactly one of them): afterwards this probe finishes to
    /// the tables of one probe that saw them all.
    pub fn merge(&mut self, other: &MetricProbe) {
        for (acc, theirs) in self.accumulators.iter_mut().zip(&other.accumulators) {
            acc.merge_any(&**theirs);
        }
        self.kernels
            .extend(other.kernels.iter().map(|(&l, &k)| (l, k)));
    }

    /// The row table a block computed outside the engine must hand
    /// [`MetricProbe::external_block`] for `layer` (the q.k columns holding the raw q.k sums
    /// over the visible keys), and the queries whose weights are read there (heatmap's
    /// corner and query_profile's query, in their layer): only a block holding one of them
    /// hands its weights over.
    pub fn external_wants(&self, layer: usize) -> (RowWants, Vec<std::ops::Range<usize>>) {
        let mut rows = Vec::new();
        if self.needs(layer).weights {
            let o = &self.opts;
            if o.metrics.contains(&Metric::HEATMAP) {
                rows.push(0..o.heatmap_size);
            }
            if o.metrics.contains(&Metric::QUERY_PROFILE) {
                rows.push(o.profile_query..o.profile_query + 1);
            }
        }
        (self.pattern_wants(), rows)
    }

    /// A block computed outside the engine (the capture's torch path, on any device): its
    /// row table `[rows, width]` as [`MetricProbe::external_wants`] lays it out, each key's
    /// weight summed over the block's queries from `key_sums_from` on where asked
    /// (`[batch, head, keys]`), and where the weights are read, the block's weights
    /// `[batch, head, n, keys]` with its sink mass `[batch, head, n]`. `keys` is
    /// [`KeyWindow::block_keys`]: a bidirectional layer's blocks span every key they see.
    pub fn external_block(
        &mut self,
        ctx: &BlockCtx,
        table: &Tensor,
        key_sums: Option<&Tensor>,
        pattern: Option<&Tensor>,
        sink_mass: Option<&Tensor>,
    ) -> Result<()> {
        let extras = BlockExtras {
            key_sums,
            weights: pattern.map(|pattern| Weights { pattern, sink_mass }),
            ..BlockExtras::default()
        };
        self.table_event(ctx, table, TableSource::Pattern { qk: true }, extras)
    }

    /// What the accumulators read in `layer`.
    fn needs(&self, layer: usize) -> Needs {
        self.accumulators
            .iter()
            .fold(Needs::default(), |all, acc| all.union(acc.needs(layer)))
    }

    /// The columns of the pattern's row tables (the same in every layer: the layout of a
    /// table must not depend on where it was made).
    fn pattern_wants(&self) -> RowWants {
        self.needs(0).rows
    }

    fn dispatch(accumulators: &mut [Box<dyn Accumulator>], event: &Event) -> Result<()> {
        for acc in accumulators {
            event.deliver(acc.as_mut())?;
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
            // a metric over the later queries of every window (the induction probe's copy)
            late: self
                .needs(ctx.layer)
                .rows_from
                .map(|from| from.saturating_sub(ctx.q_start).min(n)),
            width,
        }
    }

    /// The row table of weights `[batch, head, n, keys]` with `wants`: `Ok(Err(table))` on
    /// the weights' GPU, `Ok(Ok(pools))` pooled on the host.
    fn weight_table(
        &self,
        ctx: &BlockCtx,
        weights: &Tensor,
        wants: &RowWants,
    ) -> Result<std::result::Result<BlockPools, Tensor>> {
        if let Some(table) = weight_table_on_device(weights, ctx.q_start, wants)? {
            return Ok(Err(table));
        }
        let table = self.host_weight_rows(ctx, weights, wants)?;
        let shape = self.pool_shape(ctx, table.len(), wants.width());
        Ok(Ok(pool_host(&table, &shape)))
    }

    /// The host row table of `weights` by the CPU row pass (over a host f32 copy when they
    /// are of another dtype, layout or device).
    fn host_weight_rows(
        &self,
        ctx: &BlockCtx,
        weights: &Tensor,
        wants: &RowWants,
    ) -> Result<Vec<f32>> {
        let host = match weight_rows(weights, ctx.q_start, ctx.window, wants)? {
            Some(table) => Some(table),
            // another dtype or layout: the same pass over a host f32 copy
            None => {
                let copy = weights
                    .to_device(&Device::Cpu)?
                    .to_dtype(DType::F32)?
                    .contiguous()?;
                weight_rows(&copy, ctx.q_start, ctx.window, wants)?
            }
        };
        host.ok_or_else(|| {
            Error::Candle(candle_core::Error::Msg(format!(
                "layer {}: a block of weights {:?} does not cover keys 0 .. {}",
                ctx.layer + 1,
                weights.dims(),
                ctx.q_start + ctx.q_len
            )))
        })
    }

    /// Keeps a row table on its device until the layer ends, its sums made there.
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
            window: ctx.window,
            source,
        });
        Ok(())
    }

    /// The event of a materialised block, the same as a fused kernel's: its row table made
    /// by the row pass over its weights, with its sink mass and row maxima written into
    /// their columns; its q.k sums from its raw q.k; its weights when asked for.
    fn end_materialised_block(&mut self, ctx: &BlockCtx) -> Result<()> {
        let block = std::mem::take(&mut self.block);
        let needs = self.needs(ctx.layer);
        let qk = match &block.qk {
            Some(raw) => Some(QkSums::of_block(raw, ctx.q_start, ctx.window)?),
            None => None,
        };
        let mut softmax_rows = None;
        if let Some(softmax) = &block.softmax {
            let wants = RowWants {
                entropy: true,
                ..RowWants::default()
            };
            match self.weight_table(ctx, softmax, &wants)? {
                Ok(pools) => softmax_rows = Some(pools),
                Err(table) => self.pool_on_device(&table, ctx, TableSource::Softmax)?,
            }
        }
        let weights_read = needs.weights || needs.rows.key_sums_from.is_some();
        let weights = match (&block.pattern, weights_read) {
            (Some(pattern), true) => Some(Weights {
                pattern,
                sink_mass: block.sink_mass.as_ref(),
            }),
            _ => None,
        };
        let extras = BlockExtras {
            qk,
            softmax_rows: softmax_rows.as_ref(),
            weights,
            key_sums: None,
        };
        match self.materialised_table(ctx, &block, &needs)? {
            Some(table) => {
                self.table_event(ctx, &table, TableSource::Pattern { qk: false }, extras)
            }
            None => self.hand_on(ctx, None, extras),
        }
    }

    /// A materialised block's row table `[rows, width]` on the block's device: the row pass
    /// over its pattern where a column of the weights is read (else zeros), its sink mass
    /// and row maxima in their columns; `None` where no accumulator reads a row column.
    fn materialised_table(
        &self,
        ctx: &BlockCtx,
        block: &BlockTensors,
        needs: &Needs,
    ) -> Result<Option<Tensor>> {
        let wants = self.pattern_wants();
        let per_row = [&block.sink_mass, &block.max_logit];
        let rows_of = per_row.iter().find_map(|t| t.as_ref());
        let mut table = match (&block.pattern, rows_of) {
            (Some(pattern), _) if needs.reads_pattern_rows() => {
                self.pattern_table(ctx, pattern, &wants)?
            }
            (_, Some(per_row)) => {
                let dims = (per_row.elem_count(), wants.width());
                Tensor::zeros(dims, DType::F32, per_row.device())?
            }
            _ => return Ok(None),
        };
        if let Some(mass) = &block.sink_mass {
            table = with_column(&table, SINK_MASS, mass)?;
        }
        if let (Some(maxima), Some(c)) = (&block.max_logit, wants.max_logit_column()) {
            table = with_column(&table, c, maxima)?;
        }
        Ok(Some(table))
    }

    /// The row table of `weights` `[batch, head, n, keys]` with `wants`, on their device
    /// (the CUDA kernel) or the host (the CPU row pass; a host f32 copy of weights of
    /// another dtype or layout).
    fn pattern_table(&self, ctx: &BlockCtx, weights: &Tensor, wants: &RowWants) -> Result<Tensor> {
        if let Some(table) = weight_table_on_device(weights, ctx.q_start, wants)? {
            return Ok(table);
        }
        let rows = self.host_weight_rows(ctx, weights, wants)?;
        let width = wants.width();
        let shape = (rows_len(width, &rows), width);
        Ok(Tensor::from_vec(rows, shape, &Device::Cpu)?)
    }

    /// A host row table (`TableSource::Pattern`) pooled and handed on now; a device table
    /// kept until the layer ends (its `extras` handed on now).
    fn table_event(
        &mut self,
        ctx: &BlockCtx,
        table: &Tensor,
        source: TableSource,
        extras: BlockExtras,
    ) -> Result<()> {
        // a host table (the CPU's kernels) is pooled and handed on at once, in place
        let done = with_cpu_f32(table, |data| {
            self.hand_on(ctx, Some((data, source)), extras)
        });
        match done {
            Some(result) => result,
            // key-block columns are read on the host (only the CPU's kernels make them)
            None if self.pattern_wants().key_blocks.is_some() => {
                let host = table.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
                self.table_event(ctx, &host.contiguous()?, source, extras)
            }
            None => {
                self.pool_on_device(table, ctx, source)?;
                self.hand_on(ctx, None, extras)
            }
        }
    }

    /// Hands one block's event to every accumulator: the host row table `table` pooled
    /// (with its q.k sums when its source holds them; its key-block columns read in place)
    /// and `extras`.
    fn hand_on(
        &mut self,
        ctx: &BlockCtx,
        table: Option<(&[f32], TableSource)>,
        extras: BlockExtras,
    ) -> Result<()> {
        let wants = self.pattern_wants();
        let wants_qk = self.needs(ctx.layer).qk;
        let (width, pooled) = (wants.width(), wants.pooled_width());
        let pools = table.map(|(data, source)| {
            let part = pooled_columns(data, width, pooled);
            let shape = self.pool_shape(ctx, part.len(), pooled);
            (pool_host(&part, &shape), part, data, source)
        });
        let mut event = BlockEvent {
            softmax_rows: extras.softmax_rows,
            qk: extras.qk,
            weights: extras.weights,
            key_sums: extras.key_sums,
            ..BlockEvent::empty(ctx, self.seq_offset)
        };
        if let Some((pools, part, data, source)) = &pools {
            event.rows = Some(Rows {
                pools,
                bands: &wants.bands,
            });
            event.max_logit = wants
                .max_logit_column()
                .map(|c| Column::of_table(part, pooled, c));
            event.key_blocks = wants
                .key_blocks
                .zip(wants.key_block_columns())
                .map(|(blocks, c)| KeyBlockRows::new(data, width, c, blocks));
            if *source == (TableSource::Pattern { qk: true }) && wants_qk {
                event.qk = Some(qk_of_pools(pools, ctx));
            }
        }
        let any = event.rows.is_some()
            || event.qk.is_some()
            || event.softmax_rows.is_some()
            || event.weights.is_some();
        match any {
            true => Self::dispatch(&mut self.accumulators, &Event::Block(event)),
            false => Ok(()),
        }
    }

    /// Copies the sums of `layer` still on the device to the host in one transfer and hands
    /// each block's pools on (a block with a NaN is pooled from its table on the host).
    fn flush_device_pools(&mut self, layer: usize) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        if pending.is_empty() {
            return Ok(());
        }
        let _p = phase("metrics: pools to host");
        let parts: Vec<&Tensor> = pending.iter().map(|b| &b.sums).collect();
        let host = Tensor::cat(&parts, 0)?.to_vec1::<f64>()?;
        let wants = self.pattern_wants();
        let column = wants.max_logit_column();
        let layer_needs_qk = self.needs(layer).qk;
        let wants_qk = |_layer: usize| layer_needs_qk;
        let mut offset = 0;
        for block in &pending {
            let len = block.shape.flat_len();
            let pools = match BlockPools::from_sums(&host[offset..offset + len], &block.shape) {
                Some(pools) => pools,
                None => pool_host(&to_host(&block.table)?, &block.shape),
            };
            offset += len;
            let ctx = BlockCtx {
                layer,
                q_start: block.q_start,
                q_len: block.shape.n,
                seq_len: 0,
                window: block.window,
            };
            let mut event = BlockEvent::empty(&ctx, block.seq_offset);
            let maxima;
            match block.source {
                TableSource::Softmax => event.softmax_rows = Some(&pools),
                TableSource::Pattern { qk } => {
                    event.rows = Some(Rows {
                        pools: &pools,
                        bands: &wants.bands,
                    });
                    if let Some(c) = column {
                        maxima = to_host(&block.table.narrow(1, c, 1)?)?;
                        event.max_logit = Some(Column::from(&maxima[..]));
                    }
                    if qk && wants_qk(layer) {
                        event.qk = Some(qk_of_pools(&pools, &ctx));
                    }
                }
            }
            Self::dispatch(&mut self.accumulators, &Event::Block(event))?;
        }
        Ok(())
    }
}

/// What a block's event carries beside its row table.
#[derive(Default, Clone, Copy)]
struct BlockExtras<'a> {
    qk: Option<QkSums>,
    softmax_rows: Option<&'a BlockPools>,
    weights: Option<Weights<'a>>,
    key_sums: Option<&'a Tensor>,
}

/// The q.k sums a fused kernel's table holds: its q.k columns' totals over the block's
/// visible pairs.
fn qk_of_pools(pools: &BlockPools, ctx: &BlockCtx) -> QkSums {
    let cells = pools.counted[QK_SUM].len();
    let pairs = cells * ctx.window.pairs(ctx.q_start..ctx.q_start + ctx.q_len);
    QkSums {
        sum: pools.total(QK_SUM),
        abs_sum: pools.total(QK_ABS_SUM),
        pairs: pairs as f64,
    }
}

/// The first `pooled` columns of a host table of `width` columns: the table itself where
/// they are all of it, else a copy without the key-block columns after them.
fn pooled_columns(table: &[f32], width: usize, pooled: usize) -> std::borrow::Cow<'_, [f32]> {
    if pooled >= width {
        return std::borrow::Cow::Borrowed(table);
    }
    let rows = table.chunks_exact(width.max(1));
    std::borrow::Cow::Owned(rows.flat_map(|row| &row[..pooled]).copied().collect())
}

/// Rows of a host table of `width` columns.
fn rows_len(width: usize, table: &[f32]) -> usize {
    table.len() / width.max(1)
}

impl Probe for MetricProbe {
    fn wants(&self, hook: Hook, layer: usize) -> bool {
        self.needs(layer).wants(hook)
    }

    fn on_kernel(&mut self, layer: usize, kernel: Kernel) {
        self.kernels.insert(layer, kernel);
    }

    fn on_block_end(&mut self, ctx: &BlockCtx) -> Result<()> {
        let b = &self.block;
        let any = b.qk.is_some()
            || b.pattern.is_some()
            || b.softmax.is_some()
            || b.sink_mass.is_some()
            || b.max_logit.is_some();
        if any {
            self.end_materialised_block(ctx)?;
        }
        Ok(())
    }

    fn on_layer_end(&mut self, layer: usize) -> Result<()> {
        self.flush_device_pools(layer)
    }

    fn row_request(&self, layer: usize) -> Option<RowWants> {
        let needs = self.needs(layer);
        // no table where no metric reads one (e.g. `--metrics nll`): the plain softmax runs
        let read =
            needs.reads_pattern_rows() || needs.qk || needs.sink_mass || needs.rows.max_logit;
        // per-key metrics need the weights themselves, or key sums beside the table
        let read = read || needs.rows.key_sums_from.is_some();
        (read && !needs.softmax_entropy && !needs.weights).then_some(needs.rows)
    }

    fn on_row_table(&mut self, ctx: &BlockCtx, table: &Tensor) -> Result<()> {
        let source = TableSource::Pattern { qk: true };
        let key_sums = self.key_sums.take();
        let extras = BlockExtras {
            key_sums: key_sums.as_ref(),
            ..BlockExtras::default()
        };
        self.table_event(ctx, table, source, extras)
    }

    fn on_key_sums(&mut self, _ctx: &BlockCtx, sums: &Tensor) -> Result<()> {
        self.key_sums = Some(sums.clone());
        Ok(())
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        let slot = match hook {
            Hook::Qk => &mut self.block.qk,
            Hook::Pattern => &mut self.block.pattern,
            Hook::Softmax => &mut self.block.softmax,
            Hook::SinkMass => &mut self.block.sink_mass,
            Hook::MaxLogit => &mut self.block.max_logit,
            _ => {
                let event = Event::Tensor(TensorEvent {
                    hook,
                    ctx,
                    seq_offset: self.seq_offset,
                    xs,
                });
                return Self::dispatch(&mut self.accumulators, &event);
            }
        };
        *slot = Some(xs.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The GPU path of the probe (row tables pooled by candle ops on their device, pools
    //! copied at the layer's end) run on the CPU against the host path (tables pooled on
    //! the host as they come).
    use super::*;
    use crate::distance::Bands;
    use crate::entropy::{EntropyOf, EntropyResult};
    use crate::first_token::SinkRate;
    use crate::qk_mean::QkResult;
    use crate::{Metric, PerHead};
    use asa_hooks::blocks::query_blocks;
    use asa_kernels::row_table::{QK_ABS_SUM, QK_SUM, SINK_MASS};
    use candle_core::Device;
    use serde_json::Value;

    /// One causal layer of `heads` heads, no soft-cap.
    fn causal(heads: usize) -> ModelAttention<'static> {
        ModelAttention {
            key_windows: &[KeyWindow::CAUSAL],
            logit_softcap: None,
            heads,
            layer_numbers: &[],
        }
    }

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
    fn a_state_that_does_not_fit_says_why() {
        let t = 4;
        let opts = MetricOptions {
            metrics: [Metric::FIRST_TOKEN].into_iter().collect(),
            min_query: 2,
            heatmap_layer: 0,
            heatmap_size: t,
            map_size: t,
            profile_query: t - 1,
            bins: 7,
            sink_eps: 0.1,
            bands: Bands::decades(t),
            entropy_of: EntropyOf::Effective,
            induction_len: None,
            roles: Default::default(),
        };
        let windows = vec![vec![0u32; t]];
        let probe = MetricProbe::new(opts, causal(1), &windows);
        let mut state = probe.state().unwrap();
        assert!(MetricProbe::restore(state.clone()).is_ok());
        state.accumulators.push(Vec::new());
        let err = MetricProbe::restore(state.clone()).err().unwrap();
        assert_eq!(
            err.to_string(),
            "2 metric states for the 1 accumulators of its metrics"
        );
        // 0xc1 is no MessagePack marker
        state.accumulators = vec![vec![0xc1]];
        let err = MetricProbe::restore(state).err().unwrap();
        assert!(
            err.to_string().starts_with("the state of first_token: "),
            "{err}"
        );
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn pools_made_on_the_device_give_the_metrics_of_the_host_path() {
        let (b, h, t, block) = (2, 3, 23, 7);
        let metrics = [
            Metric::FIRST_TOKEN,
            Metric::WEIGHT_SUM,
            Metric::ENTROPY,
            Metric::HEAD_TOTAL,
            Metric::SINK_RATE,
            Metric::DISTANCE_PROFILE,
            Metric::QK_MEAN,
            Metric::SINK_MASS,
        ];
        let opts = MetricOptions {
            metrics: metrics.into_iter().collect(),
            min_query: 2,
            heatmap_layer: 5,
            heatmap_size: t,
            map_size: t,
            profile_query: t - 1,
            bins: 7,
            sink_eps: 0.1,
            bands: Bands::decades(t),
            entropy_of: EntropyOf::Effective,
            induction_len: None,
            roles: Default::default(),
        };
        let windows = vec![vec![0u32; t]; 2 * b];
        let mut host = MetricProbe::new(opts.clone(), causal(h), &windows);
        let mut device = MetricProbe::new(opts, causal(h), &windows);
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
                    window: KeyWindow::CAUSAL,
                };
                host.on_tensor(Hook::Pattern, &ctx, &w).unwrap();
                host.on_block_end(&ctx).unwrap();
                // the table the fused softmax hands over: its q.k and sink columns by hand
                let mut table = weight_rows(&w, q0, KeyWindow::CAUSAL, &wants)
                    .unwrap()
                    .unwrap();
                for cell in table.chunks_mut(width) {
                    cell[SINK_MASS] = 0.25;
                    cell[QK_SUM] = 1.0;
                    cell[QK_ABS_SUM] = 2.0;
                }
                let rows = table.len() / width;
                let table = Tensor::from_vec(table, (rows, width), &Device::Cpu).unwrap();
                // what on_row_table does with a table on a GPU
                let source = TableSource::Pattern { qk: true };
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
            v.as_object_mut().unwrap().remove("qk_mean");
            v.as_object_mut().unwrap().remove("sink_mass");
            v
        };
        assert!(from_device.get::<SinkRate>(Metric::SINK_RATE).is_some());
        let entropy = from_device.get::<EntropyResult>(Metric::ENTROPY).unwrap();
        assert!(entropy.nan_count > 0);
        assert_close(&json(&from_device), &json(&from_host), "metrics");
        // q.k: every row sums 1 and 2 over its i + 1 visible keys, so the mean over pairs
        // is sum_i 1 / sum_i (i + 1) = 2 / (t + 1)
        let qk = from_device.get::<QkResult>(Metric::QK_MEAN).unwrap();
        assert!(
            (qk.mean - 2.0 / (t as f64 + 1.0)).abs() < 1e-12,
            "{}",
            qk.mean
        );
        assert!((qk.abs_mean - 4.0 / (t as f64 + 1.0)).abs() < 1e-12);
        let sink_mass = from_device.get::<PerHead>(Metric::SINK_MASS).unwrap();
        for per_head in &sink_mass.0 {
            assert!(per_head.iter().all(|&m| (m - 0.25).abs() < 1e-12));
        }
    }
}
