//! One model's analysis: batches of token windows through the forward pass with the
//! metric probe attached, query block by query block; the block planner; training series.

pub mod attention_series;
pub mod cancel;
pub mod capture;
pub mod capture_spans;
pub mod checkpoint_facts;
pub mod checkpoint_ready;
pub mod fingerprint;
pub mod hub_cache;
pub mod inspect;
pub mod partial;
pub mod partial_checks;
pub mod plan;
pub use asa_record::record;
mod run;
pub mod run_option;
mod run_spec;
pub mod schedule;
pub mod series;
pub use asa_record::shard;
pub mod tokens;

pub use cancel::CancelToken;
pub use run::{kernel_layers, ModelResult, ModelSource, Run, RunEvents, RunOutput, Silent};
pub use run_spec::{Execution, RunInputs, RunOptions, RunSpec};

use candle_core::Tensor;

use asa_core::error::Result;
use asa_hooks::{BlockCtx, Hook, Kernel, Probe, ProbeSet};
use asa_kernels::row_table::RowWants;
use asa_metrics::{MetricOptions, MetricProbe, ModelAttention, ModelMetrics, VariantTraits};
use asa_models::{Checkpoint, LayerTiming, Model};

/// How the forward passes are cut.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RunShape {
    /// Sequences per forward pass.
    pub batch_size: usize,
    /// Queries per attention block.
    pub block: usize,
}

/// A part of a run: the windows `range` of the run's `windows` (sequence numbers stay
/// those of the whole run).
#[derive(Debug, Clone)]
pub struct RunPart<'a> {
    /// Every window of the run, all of equal length.
    pub windows: &'a [Vec<u32>],
    /// The windows of this part.
    pub range: std::ops::Range<usize>,
}

impl<'a> RunPart<'a> {
    /// Every window of the run.
    pub fn whole(windows: &'a [Vec<u32>]) -> Self {
        RunPart {
            windows,
            range: 0..windows.len(),
        }
    }
}

/// What goes along with a part's forward passes beside the metrics.
pub struct Along<'a, 'b> {
    /// Checked after every query block: the part stops with
    /// [`Error::Interrupted`](crate::Error::Interrupted) once it is set.
    pub cancel: &'a CancelToken,
    /// Told the part's tokens done after every query block.
    pub progress: &'a mut dyn FnMut(usize),
    /// Probes attached beside the metrics ([`ProbeSet`]): they get what they want of every
    /// layer and never change the kernel the metrics' plan picks.
    pub observers: &'a mut [&'b mut dyn Probe],
}

/// Forwards everything to the metric probe, tells it which sequences each batch of a
/// layer-major pass holds, and reports each finished query block as `(batch, layer,
/// queries done in the layer)`, so long runs show progress block by block.
struct BlockTicker<'a, F: FnMut(usize, usize, usize)> {
    inner: &'a mut MetricProbe,
    /// First sequence (of the run) of each batch of a layer-major pass.
    offsets: &'a [usize],
    batch: usize,
    on_block: F,
    /// Checked after every query block.
    cancel: &'a CancelToken,
}

impl<F: FnMut(usize, usize, usize)> Probe for BlockTicker<'_, F> {
    fn wants(&self, hook: Hook, layer: usize) -> bool {
        self.inner.wants(hook, layer)
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        self.inner.on_tensor(hook, ctx, xs)
    }

    fn on_batch(&mut self, batch: usize) {
        self.batch = batch;
        if let Some(&offset) = self.offsets.get(batch) {
            self.inner.set_batch_offset(offset);
        }
    }

    fn on_block_end(&mut self, ctx: &BlockCtx) -> Result<()> {
        self.cancel.check()?;
        self.inner.on_block_end(ctx)?;
        (self.on_block)(self.batch, ctx.layer, ctx.q_start + ctx.q_len);
        Ok(())
    }

    fn on_kernel(&mut self, layer: usize, kernel: Kernel) {
        self.inner.on_kernel(layer, kernel)
    }

    fn on_layer_end(&mut self, layer: usize) -> Result<()> {
        self.inner.on_layer_end(layer)
    }

    fn row_request(&self, layer: usize) -> Option<RowWants> {
        self.inner.row_request(layer)
    }

    fn on_row_table(&mut self, ctx: &BlockCtx, table: &Tensor) -> Result<()> {
        self.inner.on_row_table(ctx, table)
    }

    fn on_key_sums(&mut self, ctx: &BlockCtx, sums: &Tensor) -> Result<()> {
        self.inner.on_key_sums(ctx, sums)
    }
}

/// Computes `opts` metrics of `model` over `windows` (all of equal length), calling
/// `progress(tokens_done)` after every query block of every layer (a batch counts in
/// proportion to the layers and queries done).
pub fn analyze(
    ckpt: &Checkpoint,
    model: &Model,
    windows: &[Vec<u32>],
    opts: &MetricOptions,
    shape: RunShape,
    progress: impl FnMut(usize),
) -> Result<ModelMetrics> {
    let probe = accumulate(ckpt, model, RunPart::whole(windows), opts, shape, progress)?;
    finish(ckpt, &probe)
}

/// The metric accumulators of `model` over the windows of `part` (`progress` counts this
/// part's tokens): a part of a run whose parts, merged
/// ([`MetricProbe::merge`]) and finished, give the whole run's metrics.
pub fn accumulate(
    ckpt: &Checkpoint,
    model: &Model,
    part: RunPart,
    opts: &MetricOptions,
    shape: RunShape,
    mut progress: impl FnMut(usize),
) -> Result<MetricProbe> {
    let along = Along {
        cancel: &CancelToken::new(),
        progress: &mut progress,
        observers: &mut [],
    };
    Ok(accumulate_timed(ckpt, model, part, opts, shape, along)?.0)
}

/// [`accumulate`] with what goes [`Along`] (a cancellation token, progress, observers),
/// and what each layer took when `model` is streamed (batch by batch, layer by layer, when
/// it is resident; layer by layer, every batch, when streamed).
pub fn accumulate_timed(
    ckpt: &Checkpoint,
    model: &Model,
    part: RunPart,
    opts: &MetricOptions,
    shape: RunShape,
    along: Along,
) -> Result<(MetricProbe, Vec<LayerTiming>)> {
    let RunPart { windows, range } = part;
    let Along {
        cancel,
        progress,
        observers,
    } = along;
    let c = &ckpt.config;
    let layer_numbers = c.attention_layer_numbers();
    let key_windows: Vec<_> = layer_numbers.iter().map(|&l| c.key_window(l)).collect();
    let attention = ModelAttention {
        key_windows: &key_windows,
        logit_softcap: c.attn_logit_softcap(),
        heads: c.num_heads,
        layer_numbers: &layer_numbers,
    };
    let mut probe = MetricProbe::new(opts.clone(), attention, windows);
    let device = ckpt.store.device();
    let t = windows.first().map_or(0, Vec::len);
    let layers = layer_numbers.len().max(1);
    let mut offsets = Vec::new();
    let mut batches = Vec::new();
    let mut first = range.start;
    for batch in windows[range.clone()].chunks(shape.batch_size.max(1)) {
        let flat: Vec<u32> = batch.iter().flatten().copied().collect();
        batches.push(Tensor::from_vec(flat, (batch.len(), t), device)?);
        offsets.push(first);
        first += batch.len();
    }
    // tokens of this part before each batch (a part's progress starts at 0)
    let before = |k: usize| (offsets[k] - range.start) * t;
    let batch_tokens = |k: usize| batches[k].elem_count();
    if model.is_streamed() {
        let part_tokens = range.len() * t;
        let mut ticker = BlockTicker {
            inner: &mut probe,
            offsets: &offsets,
            batch: 0,
            cancel,
            on_block: |k: usize, layer: usize, queries: usize| {
                let done = layer * part_tokens + before(k) + batch_tokens(k) * queries / t.max(1);
                progress(done / layers)
            },
        };
        let mut probes = ProbeSet::new(&mut ticker, observers);
        let timings = model.forward_layer_major(&ckpt.store, &batches, shape.block, &mut probes)?;
        return Ok((probe, timings));
    }
    for (k, ids) in batches.iter().enumerate() {
        probe.set_batch_offset(offsets[k]);
        let mut ticker = BlockTicker {
            inner: &mut probe,
            offsets: &[],
            batch: k,
            cancel,
            on_block: |k: usize, layer: usize, queries: usize| {
                progress(before(k) + batch_tokens(k) * (layer * t + queries) / (layers * t))
            },
        };
        model.forward(ids, shape.block, &mut ProbeSet::new(&mut ticker, observers))?;
    }
    Ok((probe, Vec::new()))
}

/// The metrics of accumulators `probe` of `ckpt`'s model (with its stored alpha_ma buffers).
pub fn finish(ckpt: &Checkpoint, probe: &MetricProbe) -> Result<ModelMetrics> {
    let (alpha_ma, traits) = finish_inputs(ckpt)?;
    Ok(probe.finish(alpha_ma, traits))
}

/// What finishing a model's metrics reads of its checkpoint: the stored moving average of
/// alpha (Affine-Scaled variants) and the variant's traits.
pub fn finish_inputs(ckpt: &Checkpoint) -> Result<(Option<Vec<Vec<f64>>>, VariantTraits)> {
    let c = &ckpt.config;
    let alpha_ma = if ckpt.variant.kind.is_affine() {
        let mut per_layer = Vec::with_capacity(c.num_layers);
        for l in c.attention_layer_numbers() {
            let name = format!("model.layers.{l}.self_attn.alpha_ma");
            let t = ckpt
                .store
                .get_as(&name, &[c.num_heads], candle_core::DType::F32)?;
            per_layer.push(t.to_vec1::<f32>()?.into_iter().map(f64::from).collect());
        }
        Some(per_layer)
    } else {
        None
    };
    let kind = ckpt.variant.kind;
    let traits = VariantTraits {
        has_sink_mass: kind.has_sink_mass(),
        weights_sum_to_one: kind.weights_sum_to_one(),
    };
    Ok((alpha_ma, traits))
}
