//! A whole analysis as the library runs it: checkpoints, a corpus and options in, each
//! model's metrics (and a training series' QK^T curve) out, progress through
//! [`RunEvents`]. The CLI (`analyze` and the metric commands), `demo` and the Python package
//! are callers of [`Run::execute`]; none of them holds analysis logic of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device};

use super::attention_series;
use super::fingerprint::{model_fingerprint, run_fingerprint};
use super::hub_cache::{self, HubModel};
use super::partial::{Covered, PartialModel};
use super::plan::{batch_chunk, block_size, default_budget};
use super::record::{
    ActivationAt, ModelRecord, NonFiniteRecord, ProbeRecord, RunRecord, SeriesStep,
};
use super::run_spec::{RunOptions, RunSpec};
use super::schedule::{peak_rss_bytes, Schedule};
use super::series::find_series;
use super::shard::Shard;
use super::{accumulate_timed, finish, finish_inputs, Along, CancelToken, RunPart, RunShape};
use crate::corpus::induction::{copy_len, ProbeKind};
use crate::corpus::{
    load_windows_with, CorpusOptions, CorpusSource, SpecialTokens, TokenizerRef, Windows,
};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::device::{resolve_device, resolve_dtype};
use asa_hooks::Kernel;
use asa_metrics::distance::Bands;
use asa_metrics::qk_mean::QkResult;
use asa_metrics::{
    attention_tables, qk_series_table, Metric, MetricOptions, MetricProbe, ModelMetrics,
};
use asa_models::config::ModelConfig;
use asa_models::{Checkpoint, LayerTiming, MemoryModel, Model, WeightMap};
use asa_tables::{schema, Table};

/// A checkpoint to analyse and the label its rows carry.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub label: String,
    /// A checkpoint folder, a GGUF file, or a folder of `step-N/` checkpoints (a series).
    pub path: PathBuf,
    /// A model held in memory instead (`path` unused): analysed as the checkpoint saved
    /// from it would be.
    pub memory: Option<std::sync::Arc<MemoryModel>>,
}

impl ModelSource {
    /// The checkpoint (or series) at `path`, labelled `label`.
    pub fn at(label: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        ModelSource {
            label: label.into(),
            path: path.into(),
            memory: None,
        }
    }
}

/// What a caller hears while a run goes; every method defaults to nothing.
pub trait RunEvents {
    /// Model `label` starts: `tokens` to go through the forward pass.
    fn model_started(&mut self, _label: &str, _tokens: u64) {}
    /// Tokens of the current model done so far.
    fn progress(&mut self, _tokens: u64) {}
    /// The current model is done.
    fn model_finished(&mut self) {}
    /// Something the user should know (a variant note, a length warning, a smaller batch).
    fn note(&mut self, _text: &str) {}
}

/// A caller that hears nothing.
pub struct Silent;

impl RunEvents for Silent {}

/// One model's results.
#[derive(Debug, Clone)]
pub struct ModelResult {
    pub label: String,
    pub metrics: ModelMetrics,
    /// What run.json records of it (inputs, variant, shapes, kernels, timing).
    pub record: ModelRecord,
    /// A shard's exact metric states (`--shard`), for `merge`.
    pub partial: Option<PartialModel>,
    /// The first window's token ids and texts (`tokens` table; [`super::tokens`]): empty
    /// unless heatmap ran on windows of at most 2048 tokens with a tokenizer at hand.
    pub tokens: Vec<(u32, String)>,
}

/// One step of a training series: model label, step, QK^T mean and absolute mean.
pub type SeriesPoint = (String, u64, f64, f64);

/// Everything a run computed.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub models: Vec<ModelResult>,
    pub series: Vec<SeriesPoint>,
    pub device: String,
    pub dtype: String,
    pub seconds: f64,
    /// The shard this run analysed (its models carry partial states).
    pub shard: Option<Shard>,
    /// What must agree between the partials of one run (sharded and merged runs).
    pub fingerprint: Option<serde_json::Value>,
    /// A shard's exact states: every model's and every series step's, in run order.
    pub partials: Vec<PartialModel>,
}

impl RunOutput {
    /// The section 6 tables of the run (attention tables; a training series' QK^T series and
    /// its attention_series).
    pub fn tables(&self) -> Vec<Table> {
        if let Some(stacks) = self.stacks() {
            return self.stacked_tables(&stacks);
        }
        let models: Vec<(String, ModelMetrics)> = self
            .models
            .iter()
            .map(|m| (m.label.clone(), m.metrics.clone()))
            .collect();
        let mut tables = attention_tables(&models);
        let tokens = self
            .models
            .iter()
            .map(|m| (m.label.as_str(), m.tokens.as_slice()));
        tables.extend(super::tokens::tokens_table(tokens));
        if !self.series.is_empty() {
            tables.push(qk_series_table(&self.series));
            tables.push(attention_series::of_series(&self.series, &models));
        }
        tables
    }

    /// Each model's stack, when the models are the stacks of one captured model (a VLM's
    /// vision tower and language model: [`super::capture::Capture::stacked_output`]).
    fn stacks(&self) -> Option<Vec<String>> {
        if self.models.len() < 2 {
            return None;
        }
        self.models
            .iter()
            .map(|m| m.record.capture.as_ref()?.stack.clone())
            .collect()
    }

    /// The tables of a captured model's stacks: each stack's, a `stack` column after
    /// `model` ([`schema::STACK`]), one after the other.
    fn stacked_tables(&self, stacks: &[String]) -> Vec<Table> {
        let mut tables: Vec<Table> = Vec::new();
        for (model, stack) in self.models.iter().zip(stacks) {
            let one = RunOutput {
                models: vec![model.clone()],
                ..self.clone()
            };
            for mut table in one.tables() {
                schema::insert_stack(&mut table, stack);
                match tables.iter_mut().find(|t| t.name == table.name) {
                    Some(existing) => existing.append(table),
                    None => tables.push(table),
                }
            }
        }
        tables
    }

    /// run.json's record of the run, named `command`, with `options`.
    pub fn record(&self, command: &str, options: &RunOptions) -> RunRecord {
        RunRecord {
            command: command.to_string(),
            asa_analyze_version: env!("CARGO_PKG_VERSION").to_string(),
            candle_version: "0.11.1".to_string(),
            device: self.device.clone(),
            dtype: self.dtype.clone(),
            metrics: options.spec.metrics.clone(),
            // plain values of plain types: serialising them cannot fail
            options: serde_json::to_value(options).unwrap_or_default(),
            models: self.models.iter().map(|m| m.record.clone()).collect(),
            series: self
                .series
                .iter()
                .map(|r| SeriesStep {
                    model: r.0.clone(),
                    step: r.1,
                })
                .collect(),
            seconds: self.seconds,
            shard: self.shard,
            ..RunRecord::default()
        }
    }
}

/// A whole analysis: models, options, and the token that stops it.
#[derive(Debug, Clone)]
pub struct Run {
    pub models: Vec<ModelSource>,
    pub options: RunOptions,
    /// Set by whoever owns the process (the CLI on a signal, Python on Ctrl-C): the run
    /// stops at its next query block with [`Error::Interrupted`].
    pub cancel: CancelToken,
}

/// Notes on kernels a run has to do without: block_map's key-block sums on a GPU, the bf16
/// GEMM on a CPU without AVX-512 BF16.
fn kernel_notes(o: &RunOptions, device: &Device, dtype: DType) -> Vec<&'static str> {
    let mut notes = Vec::new();
    if device.is_cuda() && o.spec.metrics.contains(&Metric::BLOCK_MAP) {
        notes.push(
            "block_map: no CUDA kernel makes its key-block sums; every layer runs on materialised blocks whose weights are reduced on the host",
        );
    }
    if dtype == DType::BF16 && !device.is_cuda() && !asa_kernels::cpu::bf16_gemm::available() {
        notes.push(
            "bf16: this CPU has no AVX-512 BF16, so the products of the bf16 values run in f32 (f32 speed, weights held in f32)",
        );
    }
    notes
}

/// A caller's events with the kernel notes held back until a model starts: a run that fails
/// before (a bad checkpoint) says one line, its error, not a note about kernels as well.
struct NotesAtStart<'a> {
    events: &'a mut dyn RunEvents,
    notes: Vec<&'static str>,
}

impl RunEvents for NotesAtStart<'_> {
    fn model_started(&mut self, label: &str, tokens: u64) {
        for note in self.notes.drain(..) {
            self.events.note(note);
        }
        self.events.model_started(label, tokens);
    }
    fn progress(&mut self, tokens: u64) {
        self.events.progress(tokens);
    }
    fn model_finished(&mut self) {
        self.events.model_finished();
    }
    fn note(&mut self, text: &str) {
        self.events.note(text);
    }
}

impl Run {
    /// Analyses every model (a training series step by step: QK^T per step, the other
    /// metrics on its last step in the same forward pass), telling `events` as it goes.
    pub fn execute(&self, events: &mut dyn RunEvents) -> Result<RunOutput> {
        let started = Instant::now();
        let o = &self.options;
        o.validate()?;
        let device = resolve_device(o.execution.device)?;
        let dtype = resolve_dtype(o.spec.dtype, &device);
        let notes = kernel_notes(o, &device, dtype);
        let events = &mut NotesAtStart { events, notes };
        let map = WeightMap::from_option(o.inputs.weight_map.as_deref())?;
        let ctx = ModelContext {
            order: std::cell::Cell::new(0),
            options: o,
            map: &map,
            device: &device,
            dtype,
            cancel: &self.cancel,
        };
        let (mut models, mut series, mut step_partials) = (Vec::new(), Vec::new(), Vec::new());
        for source in &self.models {
            if let Some(memory) = &source.memory {
                let (label, metrics) = (&source.label, &o.spec.metrics);
                models.push(ctx.model(label, &memory.origin, Some(memory), metrics, events)?);
                continue;
            }
            // a Hub id with revisions (`org/name@step1000,step2000`), from the local cache
            let (hub_dir, hub_series) = match hub_cache::resolve(&source.path)? {
                Some(HubModel::Checkpoint(dir)) => (Some(dir), None),
                Some(HubModel::Series(steps)) => (None, Some(steps)),
                None => (None, None),
            };
            let path = hub_dir.as_deref().unwrap_or(&source.path);
            let steps = match hub_series {
                Some(steps) => Some(steps),
                None => find_series(path)?,
            };
            match steps {
                Some(steps) => {
                    let dirs: Vec<(u64, &Path)> =
                        steps.iter().map(|s| (s.step, s.dir.as_path())).collect();
                    let result = ctx.series(&source.label, &dirs, events)?;
                    series.extend(result.points);
                    step_partials.extend(result.step_partials);
                    models.extend(result.last);
                }
                None => {
                    let metrics = &o.spec.metrics;
                    models.push(ctx.model(&source.label, path, None, metrics, events)?)
                }
            }
        }
        let dtype = format!("{dtype:?}").to_lowercase();
        // every partial state of a shard: the models' and the series steps', in run order
        let mut partials: Vec<PartialModel> = models
            .iter()
            .filter_map(|m: &ModelResult| m.partial.clone())
            .chain(step_partials)
            .collect();
        partials.sort_by_key(|p| p.order);
        let fingerprint = o.execution.shard.map(|_| {
            let models = partials.iter().map(|p| p.fingerprint.clone()).collect();
            run_fingerprint(&o.spec, &dtype, models)
        });
        Ok(RunOutput {
            models,
            series,
            device: format!("{device:?}"),
            dtype,
            seconds: started.elapsed().as_secs_f64(),
            shard: o.execution.shard,
            fingerprint,
            partials,
        })
    }
}

/// A training series: its last step's model result (when metrics beyond QK^T are asked),
/// the QK^T point of every step, and (a shard) the partial states of the other steps.
#[derive(Default)]
struct SeriesResult {
    last: Option<ModelResult>,
    points: Vec<SeriesPoint>,
    step_partials: Vec<PartialModel>,
}

/// What every model of a run shares.
struct ModelContext<'a> {
    /// Checkpoints analysed so far (the order of a shard's partial states).
    order: std::cell::Cell<usize>,
    options: &'a RunOptions,
    map: &'a WeightMap,
    device: &'a Device,
    dtype: DType,
    cancel: &'a CancelToken,
}

impl ModelContext<'_> {
    /// A training series: QK^T per step; the other metrics on the last step.
    fn series(
        &self,
        label: &str,
        steps: &[(u64, &Path)],
        events: &mut dyn RunEvents,
    ) -> Result<SeriesResult> {
        let asked = &self.options.spec.metrics;
        let others = asked.iter().any(|m| *m != Metric::QK_MEAN);
        let mut out = SeriesResult::default();
        for (k, &(step, dir)) in steps.iter().enumerate() {
            let last = k + 1 == steps.len();
            let mut wanted: BTreeSet<Metric> = [Metric::QK_MEAN].into();
            if last && others {
                wanted.extend(asked.iter().copied());
            }
            let mut r = self.model(label, dir, None, &wanted, events)?;
            let qk = r
                .metrics
                .get::<QkResult>(Metric::QK_MEAN)
                .ok_or_else(|| Error::input(dir, "no QK^T mean was computed for this step"))?;
            out.points
                .push((label.to_string(), step, qk.mean, qk.abs_mean));
            if let Some(p) = r.partial.as_mut() {
                p.step = Some(step);
                p.model = last && others;
            }
            if last && others {
                if !asked.contains(&Metric::QK_MEAN) {
                    r.metrics.remove(Metric::QK_MEAN);
                }
                out.last = Some(r);
            } else if let Some(p) = r.partial {
                out.step_partials.push(p);
            }
        }
        Ok(out)
    }

    /// One checkpoint: opened and checked, its windows and metric options, its weights
    /// loaded as the schedule says, the forward passes, then its record (and a shard's
    /// partial state).
    fn model(
        &self,
        label: &str,
        path: &Path,
        memory: Option<&MemoryModel>,
        metrics: &BTreeSet<Metric>,
        events: &mut dyn RunEvents,
    ) -> Result<ModelResult> {
        let o = self.options;
        let ckpt = self.open(label, path, memory, events)?;
        let windows = self.windows(&ckpt, path)?;
        check_length(&ckpt, o.spec.seq_len, label, events)?;
        let opts = metric_options(o, metrics, &ckpt.config, label)?;
        let shape = self.shape(&ckpt, label, events);
        let (model, schedule) = self.load(&ckpt, path, label)?;
        // a shard analyses its share of the windows; the accumulators span them all
        let total = windows.ids.len();
        if let Some(shard) = &o.execution.shard {
            shard.check_windows(total, label)?;
        }
        let range = o.execution.shard.map_or(0..total, |s| s.units(total));
        let pass = Pass {
            ckpt: &ckpt,
            model: &model,
            label,
            windows: &windows.ids,
            range: range.clone(),
            opts: &opts,
            shape,
        };
        let done = self.forward(&pass, events)?;
        refuse_overflow(&ckpt, &model, path, o.spec.allow_nonfinite)?;
        note_nonfinite(&ckpt, &model, label, events);
        let record = ModelRecord {
            model: label.to_string(),
            path: path.display().to_string(),
            corpus: windows.description.clone(),
            heatmap_layer: opts.heatmap_layer + 1,
            profile_query: opts.profile_query,
            schedule: schedule.record(&done.timings),
            seconds: done.seconds,
            tokens_per_second: (range.len() * o.spec.seq_len) as f64 / done.seconds,
            host_copy: memory.and_then(|m| m.host_copy.clone()),
            probe: o
                .spec
                .probe
                .zip(opts.induction_len)
                .map(|(probe, copy_len)| ProbeRecord {
                    probe,
                    copy_len,
                    seed: o.spec.seed,
                }),
            ..model_record(&ckpt, &model, &done.metrics, shape, o.spec.seq_len)
        };
        let tokens = self.tokens(&ckpt, &windows, metrics);
        let partial = match o.execution.shard {
            None => None,
            Some(shard) => {
                let first = (pass.range.start == 0).then(|| tokens.clone());
                let partial = self.partial(&pass, &shard, &done.probe, &record, path)?;
                Some(PartialModel {
                    tokens: first.unwrap_or_default(),
                    ..partial
                })
            }
        };
        Ok(ModelResult {
            label: label.to_string(),
            metrics: done.metrics,
            record,
            partial,
            tokens,
        })
    }

    /// The checkpoint at `path` (or held in `memory`), as `--variant` says if it does,
    /// validated, with the options that govern its weights; a note of variant weights it
    /// does not use.
    fn open(
        &self,
        label: &str,
        path: &Path,
        memory: Option<&MemoryModel>,
        events: &mut dyn RunEvents,
    ) -> Result<Checkpoint> {
        let o = self.options;
        let ckpt = match memory {
            Some(m) => Checkpoint::from_memory(m, self.device, self.dtype, self.map)?,
            None => Checkpoint::open_mapped(path, self.device, self.dtype, self.map)?,
        };
        let mut ckpt = match o.spec.variant {
            Some(kind) => ckpt.with_variant(kind),
            None => ckpt,
        }
        .validate()?;
        ckpt.store.set_allow_nonfinite(o.spec.allow_nonfinite);
        check_unused(&ckpt, o.spec.ignore_unused_weights)?;
        if let Some(note) = &ckpt.variant.unused_weights {
            events.note(&format!("{label}: {note}"));
        }
        Ok(ckpt)
    }

    /// The model's weights, in memory or streamed layer by layer (its residual stream
    /// spilled to a scratch file when the schedule says), and the schedule that decided.
    fn load(&self, ckpt: &Checkpoint, path: &Path, label: &str) -> Result<(Model, Schedule)> {
        let schedule = Schedule::plan(ckpt, self.options, self.device);
        schedule.check_fits(path, ckpt.store.dtype().as_str(), self.device)?;
        let model = match (schedule.streamed, schedule.spill) {
            (true, true) => ckpt
                .load_streamed()?
                .spilling_residuals_to(self.scratch(label)),
            (true, false) => ckpt.load_streamed()?,
            (false, _) => ckpt.load_model()?,
        };
        Ok((model, schedule))
    }

    /// The forward passes of `pass`, its metrics finished, with the events a caller hears
    /// (started, progress after every query block, finished).
    fn forward(&self, pass: &Pass, events: &mut dyn RunEvents) -> Result<Forwarded> {
        events.model_started(
            pass.label,
            (pass.range.len() * self.options.spec.seq_len) as u64,
        );
        let started = Instant::now();
        let along = Along {
            cancel: self.cancel,
            progress: &mut |done: usize| events.progress(done as u64),
            observers: &mut [],
        };
        let part = RunPart {
            windows: pass.windows,
            range: pass.range.clone(),
        };
        let (probe, timings) =
            accumulate_timed(pass.ckpt, pass.model, part, pass.opts, pass.shape, along)?;
        let metrics = finish(pass.ckpt, &probe)?;
        events.model_finished();
        Ok(Forwarded {
            probe,
            metrics,
            timings,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// A shard's exact state of `pass`, for `merge`.
    fn partial(
        &self,
        pass: &Pass,
        shard: &Shard,
        probe: &MetricProbe,
        record: &ModelRecord,
        path: &Path,
    ) -> Result<PartialModel> {
        let (alpha_ma, traits) = finish_inputs(pass.ckpt)?;
        Ok(PartialModel {
            label: pass.label.to_string(),
            probe: probe.state()?,
            alpha_ma,
            traits,
            record: serde_json::to_string(record)
                .map_err(|e| Error::failed("cannot encode a model's record", e))?,
            windows: pass.range.len() as u64,
            total: pass.windows.len() as u64,
            fingerprint: model_fingerprint(pass.label, path, pass.windows, shard)?,
            step: None,
            model: true,
            order: self.order.replace(self.order.get() + 1),
            covers: vec![Covered::of(shard, pass.windows)],
            tokens: Vec::new(),
        })
    }

    /// The residual stream's scratch file of model `label`: in `--out`'s staging folder
    /// when the caller gave one, else in the system's temporary folder.
    fn scratch(&self, label: &str) -> PathBuf {
        let dir = self
            .options
            .execution
            .scratch_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let name: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        dir.join(format!(".asa-residuals-{name}-{}", std::process::id()))
    }

    /// The corpus windows for `ckpt` (its tokenizer, or `--tokenizer`, when text is read).
    fn windows(&self, ckpt: &Checkpoint, path: &Path) -> Result<Windows> {
        let o = self.options;
        let c = &ckpt.config;
        let source = match (&o.inputs.corpus, o.spec.probe) {
            (_, Some(ProbeKind::Induction)) => CorpusSource::InductionProbe { seed: o.spec.seed },
            (Some(p), None) => CorpusSource::File(p.clone()),
            (None, None) => CorpusSource::BuiltIn { seed: o.spec.seed },
        };
        let corpus_opts = CorpusOptions {
            seq_len: o.spec.seq_len,
            num_seqs: o.spec.num_seqs,
            bos: o.spec.bos,
            windows: o.spec.windows,
        };
        let special = SpecialTokens {
            bos: c.bos_token_id,
            eos: c.eos_token_id,
        };
        let needs_text =
            !matches!(&o.inputs.corpus, Some(p) if is_token_ids(p)) && o.spec.probe.is_none();
        let (built, tokenizer_json);
        let origin = path.to_path_buf();
        let tokenizer = match (&o.inputs.tokenizer, ckpt.tokenizer_json()) {
            (Some(file), _) => Some(TokenizerRef::Path(file)),
            (None, Some(json)) => {
                tokenizer_json = json;
                Some(TokenizerRef::Path(&tokenizer_json))
            }
            // GGUF: the tokenizer lives in the metadata; build it only when text needs it
            (None, None) if needs_text => {
                built = ckpt.tokenizer()?;
                Some(TokenizerRef::Built(&built, &origin))
            }
            (None, None) => None,
        };
        load_windows_with(&source, tokenizer, special, c.vocab_size, &corpus_opts)
    }

    /// The first window's tokens as text, for a short run whose heatmap a report shows next
    /// to them ([`super::tokens`]; a shard's partial carries them when it holds the first
    /// window); none without heatmap, past 2048 tokens, or when no tokenizer is at hand
    /// (token-id corpora).
    fn tokens(
        &self,
        ckpt: &Checkpoint,
        windows: &Windows,
        metrics: &BTreeSet<Metric>,
    ) -> Vec<(u32, String)> {
        let o = self.options;
        if !metrics.contains(&Metric::HEATMAP) || o.spec.seq_len > super::tokens::TOKENS_UP_TO {
            return Vec::new();
        }
        let tokenizer = match &o.inputs.tokenizer {
            Some(file) => asa_models::tokenizer_file::read_tokenizer(file).ok(),
            None => ckpt.tokenizer().ok(),
        };
        let (Some(tokenizer), Some(ids)) = (tokenizer, windows.ids.first()) else {
            return Vec::new();
        };
        let texts = super::tokens::token_texts(&tokenizer, ids);
        ids.iter().copied().zip(texts).collect()
    }

    /// Sequences per pass and queries per block: `--block-size`, or what fits the budget.
    fn shape(&self, ckpt: &Checkpoint, label: &str, events: &mut dyn RunEvents) -> RunShape {
        let o = self.options;
        let (heads, t) = (ckpt.config.num_heads, o.spec.seq_len);
        let budget = o
            .execution
            .max_memory
            .unwrap_or_else(|| default_budget(self.device));
        let (batch, block) = match o.execution.block_size {
            Some(b) => (o.execution.batch_size.max(1), b),
            None => {
                let batch = batch_chunk(budget, o.execution.batch_size.max(1), heads, t);
                (batch, block_size(budget, batch, heads, t))
            }
        };
        if batch < o.execution.batch_size {
            events.note(&format!(
                "{label}: --batch-size {} runs as batches of {batch} sequences to fit the attention memory budget ({} MiB)",
                o.execution.batch_size,
                budget >> 20
            ));
        }
        RunShape {
            batch_size: batch,
            block,
        }
    }
}

/// One model's forward passes: its checkpoint and weights, the windows (all of the run's;
/// `range` analysed here), the metric options and how the passes are cut.
struct Pass<'a> {
    ckpt: &'a Checkpoint,
    model: &'a Model,
    label: &'a str,
    windows: &'a [Vec<u32>],
    range: std::ops::Range<usize>,
    opts: &'a MetricOptions,
    shape: RunShape,
}

/// What a model's forward passes gave: the accumulators, their metrics, each streamed
/// layer's times and the seconds taken.
struct Forwarded {
    probe: MetricProbe,
    metrics: ModelMetrics,
    timings: Vec<LayerTiming>,
    seconds: f64,
}

/// Refuses a window longer than learned positions (GPT-2); notes one past
/// `max_position_embeddings` (the run analyses past the training length).
fn check_length(
    ckpt: &Checkpoint,
    t: usize,
    label: &str,
    events: &mut dyn RunEvents,
) -> Result<()> {
    let c = &ckpt.config;
    if c.layout.learned_positions && t > c.max_position_embeddings {
        return Err(Error::option(
            "--seq-len",
            format!(
                "{t} is longer than {label}'s {} learned positions (n_positions)",
                c.max_position_embeddings
            ),
        ));
    }
    if t > c.max_position_embeddings {
        events.note(&format!(
            "{label}: --seq-len {t} exceeds max_position_embeddings {} (analysing past the training length)",
            c.max_position_embeddings
        ));
    }
    Ok(())
}

/// Activations that turned NaN or infinite from finite weights (settings that overflow:
/// a multiplier of 1e300, a scale of 1e308) are an error naming the file and where, unless
/// `--allow-nonfinite` (issue 65 item 3): never tables of NaN with exit 0.
fn refuse_overflow(ckpt: &Checkpoint, model: &Model, path: &Path, allowed: bool) -> Result<()> {
    match model.first_nonfinite() {
        Some(at) if !allowed && ckpt.store.first_nonfinite().is_none() => Err(
            Error::checkpoint_problem(path, CheckpointProblem::NonFinite { at: at.to_string() }),
        ),
        _ => Ok(()),
    }
}

/// Says where NaN or an infinity entered (`--allow-nonfinite` weights, or an overflow).
fn note_nonfinite(ckpt: &Checkpoint, model: &Model, label: &str, events: &mut dyn RunEvents) {
    if let Some(at) = model.first_nonfinite() {
        let weight = ckpt
            .store
            .first_nonfinite()
            .map(|w| format!(" (the first non-finite weight read: {w})"))
            .unwrap_or_default();
        events.note(&format!(
            "{label}: activations are NaN or infinite from {at} on{weight}; metrics computed from them are NaN"
        ));
    }
}

/// What run.json records of a model from its checkpoint, its run and its metrics (the
/// caller fills in the rest: label, path, corpus, schedule, timings).
fn model_record(
    ckpt: &Checkpoint,
    model: &Model,
    metrics: &ModelMetrics,
    shape: RunShape,
    t: usize,
) -> ModelRecord {
    let c = &ckpt.config;
    ModelRecord {
        architecture: c.architecture.name().to_string(),
        variant: ckpt.variant.kind.name().to_string(),
        variant_source: ckpt.variant.source.clone(),
        unused_weights: ckpt.variant.unused_weights.clone(),
        layers: c.num_layers,
        layer_kinds: c.layer_kinds(),
        heads: c.num_heads,
        kv_heads: c.num_kv_heads,
        head_dim: c.head_dim,
        dequantized_from: ckpt.dequantized_from(),
        seq_len: t,
        beta_length_n: t,
        block_size: shape.block,
        batch_size: shape.batch_size,
        kernels: kernel_layers(&metrics.kernels)
            .into_iter()
            .map(|(k, layers)| (k.to_string(), layers))
            .collect(),
        first_nonfinite: NonFiniteRecord {
            weight: ckpt.store.first_nonfinite().map(str::to_string),
            activation: model.first_nonfinite().map(|at| ActivationAt {
                layer: at.layer,
                hook: at.hook.to_string(),
            }),
        },
        peak_rss_bytes: peak_rss_bytes(),
        ..ModelRecord::default()
    }
}

/// The metric options of a model of `layers` layers (layers and positions checked).
fn metric_options(
    o: &RunOptions,
    metrics: &BTreeSet<Metric>,
    config: &ModelConfig,
    label: &str,
) -> Result<MetricOptions> {
    let heatmap_layer = heatmap_layer(o.spec.layer, config, label)?;
    metric_options_at(&o.spec, metrics, o.spec.seq_len, heatmap_layer)
}

/// The metric options of `spec` for windows of `t` tokens, with the heatmap on probe layer
/// `heatmap_layer` (0-based; positions checked against `t`).
pub(crate) fn metric_options_at(
    spec: &RunSpec,
    metrics: &BTreeSet<Metric>,
    t: usize,
    heatmap_layer: usize,
) -> Result<MetricOptions> {
    let profile_query = match spec.profile_query {
        Some(q) if q >= t => {
            return Err(Error::option(
                "--profile-query",
                format!("{q} is outside the sequence (0..{t})"),
            ))
        }
        Some(q) => q,
        None => t - 1,
    };
    if spec.min_query >= t {
        return Err(Error::option(
            "--min-query",
            format!(
                "{} leaves no query to average in windows of {t} tokens (queries 0..{t})",
                spec.min_query
            ),
        ));
    }
    Ok(MetricOptions {
        metrics: metrics.clone(),
        min_query: spec.min_query,
        heatmap_layer,
        heatmap_size: spec.size.min(t),
        map_size: spec.map_size.min(t),
        profile_query,
        bins: spec.bins,
        sink_eps: spec.sink_eps,
        bands: match &spec.bands {
            Some(edges) => bands_from(edges, t)?,
            None => Bands::decades(t),
        },
        entropy_of: spec.entropy_of,
        induction_len: match spec.probe {
            Some(ProbeKind::Induction) => Some(copy_len(t)?),
            None => None,
        },
        roles: spec.roles,
    })
}

/// The heatmap's layer among the attention layers the probe numbers: `--layer` (1-based,
/// a decoder layer with attention), else the 8th attention layer or the last.
fn heatmap_layer(layer: Option<usize>, config: &ModelConfig, label: &str) -> Result<usize> {
    let numbers = config.attention_layer_numbers();
    let layers = config.num_layers;
    match layer {
        Some(0) => Err(Error::option("--layer", "is 1-based; 0 is not a layer")),
        Some(l) if l > layers => Err(Error::option(
            "--layer",
            format!("{l} does not exist: {label} has {layers} layers"),
        )),
        Some(l) => numbers.iter().position(|&n| n == l - 1).ok_or_else(|| {
            let with: Vec<String> = numbers.iter().map(|n| (n + 1).to_string()).collect();
            Error::option(
                "--layer",
                format!(
                    "{l} of {label} is a {} layer, without attention (its attention layers: {})",
                    config.mixers[l - 1].name(),
                    with.join(", ")
                ),
            )
        }),
        None => Ok(8.min(numbers.len()).max(1) - 1),
    }
}

/// `{kernel description: [1-based layers]}` for run.json and `--verbose`.
pub fn kernel_layers(kernels: &BTreeMap<usize, Kernel>) -> BTreeMap<&'static str, Vec<usize>> {
    let mut by_kernel: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    for (&layer, kernel) in kernels {
        by_kernel
            .entry(kernel.describe())
            .or_default()
            .push(layer + 1);
    }
    by_kernel
}

/// Whether a corpus file holds token ids (no tokenizer needed).
fn is_token_ids(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("npy") | Some("json")
    )
}

/// Distance bands from `--bands` edges (increasing, from 1).
fn bands_from(edges: &[usize], seq_len: usize) -> Result<Bands> {
    if edges.is_empty() || edges[0] == 0 || edges.windows(2).any(|w| w[1] <= w[0]) {
        return Err(Error::option(
            "--bands",
            "must be increasing edges starting at 1 or more, e.g. 1,10,100",
        ));
    }
    Ok(Bands::with_edges(edges, seq_len))
}

/// Refuses a checkpoint holding weights its config does not use (layers past
/// `num_hidden_layers`, another variant's weights: what they change would be lost without a
/// word), naming how many and the first few, unless `ignore`.
fn check_unused(ckpt: &Checkpoint, ignore: bool) -> Result<()> {
    match ignore {
        true => Ok(()),
        false => ckpt.refuse_unused(),
    }
}
