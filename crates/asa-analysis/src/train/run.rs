//! A whole training run: tokenizer, data, parameters, the step loop with its CSV log, and
//! checkpoints every `save_every` steps as `checkpoints/step-N/`. Layout of `out`:
//!
//! ```text
//! out/tokenizer.json          the BPE tokenizer (trained here unless one is given)
//! out/log.csv                 step, loss, grad_norm, lr, qk_mean (every step)
//! out/checkpoints/step-N/     HF checkpoints (config.json, model.safetensors, tokenizer.json)
//! out/train.json              options and summary, written last: the run finished
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;
use serde_json::json;

use super::checkpoint::{save, write_json};
use super::data::{documents, TextSource, TokenStream};
use super::lr_schedule::Schedule;
use super::params::{config_json, init_params, resolve, Arch, SplitMix64};
use super::tokenizer::{train_bpe, BOS, EOS};
use super::{OptimConfig, StepLog, Trainer};
use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;
use asa_tables::{Format, OutputDir, StagingWatch};

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub variant: VariantKind,
    pub arch: Arch,
    pub text: TextSource,
    /// An existing tokenizer.json to use instead of training one.
    pub tokenizer: Option<PathBuf>,
    pub steps: usize,
    pub batch_size: usize,
    /// Tokens per training window (BOS included).
    pub seq_len: usize,
    pub warmup: usize,
    /// Share of the steps in the final decay phase.
    pub decay_frac: f64,
    pub min_lr_ratio: f64,
    pub optim: OptimConfig,
    pub seed: u64,
    /// Checkpoint every this many steps (and at the last step).
    pub save_every: usize,
    pub out: PathBuf,
    pub device: Device,
}

impl TrainOptions {
    /// The learning-rate schedule.
    pub fn schedule(&self) -> Schedule {
        Schedule {
            peak: self.optim.lr,
            warmup: self.warmup,
            decay: (self.steps as f64 * self.decay_frac).round() as usize,
            total: self.steps,
            min_ratio: self.min_lr_ratio,
        }
    }

    /// The options as recorded in train.json (what decides whether a finished run can be
    /// reused).
    pub fn record(&self) -> serde_json::Value {
        json!({
            "variant": self.variant.name(),
            "arch": self.arch,
            "text": self.text,
            "tokenizer": self.tokenizer,
            "steps": self.steps,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "schedule": self.schedule(),
            "weight_decay": self.optim.weight_decay,
            "betas": [self.optim.beta1, self.optim.beta2],
            "grad_clip": self.optim.grad_clip,
            "seed": self.seed,
            "save_every": self.save_every,
        })
    }
}

/// What a finished run reports.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TrainSummary {
    pub variant: String,
    pub steps: usize,
    pub first_loss: f64,
    /// Mean loss over the last 10 steps.
    pub final_loss: f64,
    pub seconds: f64,
    pub checkpoints: Vec<PathBuf>,
    pub log: PathBuf,
}

/// Trains per `opts`, calling `on_step` after each step. Everything is written to a
/// staging folder inside `out` and moved into place when the last step is done (train.json
/// last): a run that fails or is interrupted leaves `out` as it was (the staging folder is
/// registered with `watch` for whoever owns the process's signals).
pub fn train(
    opts: &TrainOptions,
    watch: &StagingWatch,
    on_step: &mut dyn FnMut(&StepLog),
) -> Result<TrainSummary> {
    validate(opts)?;
    let started = Instant::now();
    let docs = documents(&opts.text)?;
    let mut out = OutputDir::create(&opts.out, Format::Csv, watch)?;
    let tok_path = out.staged_path("tokenizer.json")?;
    let tokenizer = load_tokenizer(opts, &docs, &tok_path)?;
    let tok_name = opts
        .tokenizer
        .clone()
        .unwrap_or_else(|| out.final_path("tokenizer.json"));
    let special = check_tokenizer(opts, &tokenizer, &tok_name)?;
    let stream = encode_text(opts, &tokenizer, &docs, special)?;
    let config = config_json(&opts.arch, opts.variant, special.bos, special.eos);
    let resolved = resolve(&config)?;
    let params = init_params(&opts.arch, opts.variant, opts.seed, &opts.device)?;
    let mut trainer = Trainer::new(resolved, opts.variant, params, opts.optim, &opts.device)?;
    let inputs = StepInputs {
        opts,
        stream: &stream,
        config: &config,
        tok_path: &tok_path,
    };
    let progress = run_steps(&inputs, &mut trainer, &mut out, on_step)?;
    let summary = summarize(opts, progress, started, &out);
    commit_run(out, opts, &summary)?;
    Ok(summary)
}

/// The BOS and EOS ids of the tokenizer.
#[derive(Debug, Clone, Copy)]
struct Specials {
    bos: u32,
    eos: u32,
}

/// What the step loop reads besides the trainer.
struct StepInputs<'a> {
    opts: &'a TrainOptions,
    stream: &'a TokenStream,
    /// The config.json saved with each checkpoint.
    config: &'a serde_json::Value,
    /// The staged tokenizer.json copied into each checkpoint.
    tok_path: &'a Path,
}

/// What the step loop produced.
struct Progress {
    /// Every step's loss, in order.
    losses: Vec<f64>,
    /// The checkpoints saved, at their final paths.
    checkpoints: Vec<PathBuf>,
}

/// The tokenizer: the given one copied to `tok_path`, else one trained on `docs` and saved
/// there.
fn load_tokenizer(
    opts: &TrainOptions,
    docs: &[String],
    tok_path: &Path,
) -> Result<tokenizers::Tokenizer> {
    match &opts.tokenizer {
        Some(given) => {
            std::fs::copy(given, tok_path).map_err(|e| Error::io(given, e))?;
            asa_models::tokenizer_file::read_tokenizer(given)
        }
        None => train_bpe(docs.iter(), opts.arch.vocab_size, tok_path),
    }
}

/// The tokenizer's BOS and EOS ids; an error (naming the tokenizer `tok_name`) when one is
/// missing or the vocabulary is larger than `--vocab-size`.
fn check_tokenizer(
    opts: &TrainOptions,
    tokenizer: &tokenizers::Tokenizer,
    tok_name: &Path,
) -> Result<Specials> {
    let ids = |t: &str| {
        tokenizer
            .token_to_id(t)
            .ok_or_else(|| Error::input(tok_name, format!("the tokenizer has no {t} token")))
    };
    let (bos, eos) = (ids(BOS)?, ids(EOS)?);
    let vocab = tokenizer.get_vocab_size(true);
    if vocab > opts.arch.vocab_size {
        return Err(Error::input(
            tok_name,
            format!(
                "the tokenizer has {vocab} tokens, more than --vocab-size {}",
                opts.arch.vocab_size
            ),
        ));
    }
    Ok(Specials { bos, eos })
}

/// The documents as one token stream; an error when it is shorter than one training window.
fn encode_text(
    opts: &TrainOptions,
    tokenizer: &tokenizers::Tokenizer,
    docs: &[String],
    special: Specials,
) -> Result<TokenStream> {
    let stream = TokenStream::encode(tokenizer, docs, special.bos, special.eos)?;
    if stream.ids.len() < opts.seq_len {
        let problem = format!(
            "holds {} tokens, fewer than one training window of {} (--seq-len {} is BOS + {})",
            stream.ids.len(),
            opts.seq_len,
            opts.seq_len,
            opts.seq_len - 1
        );
        return Err(match &opts.text {
            TextSource::File(path) => Error::input(path, problem),
            TextSource::BuiltIn { chars, .. } => Error::usage(format!(
                "the built-in text of --corpus-chars {chars} {problem}; raise --corpus-chars"
            )),
        });
    }
    Ok(stream)
}

/// The step loop: each step logged to the staged log.csv (flushed) and reported to
/// `on_step`, a checkpoint every `save_every` steps and at the last; an error when the loss
/// is no longer finite.
fn run_steps(
    inputs: &StepInputs,
    trainer: &mut Trainer,
    out: &mut OutputDir,
    on_step: &mut dyn FnMut(&StepLog),
) -> Result<Progress> {
    let opts = inputs.opts;
    let schedule = opts.schedule();
    let log_path = out.staged_path("log.csv")?;
    let file = std::fs::File::create(&log_path).map_err(|e| Error::io(&log_path, e))?;
    let mut log = std::io::BufWriter::new(file);
    let io = |e| Error::io(&log_path, e);
    writeln!(log, "step,loss,grad_norm,lr,qk_mean").map_err(io)?;
    let mut rng = SplitMix64::new(opts.seed.wrapping_add(0x5eed));
    let mut progress = Progress {
        losses: Vec::with_capacity(opts.steps),
        checkpoints: Vec::new(),
    };
    let ckpt_dir = out.staged_folder("checkpoints")?;
    for step in 1..=opts.steps {
        let batch =
            inputs
                .stream
                .batch(&mut rng, opts.batch_size, opts.seq_len - 1, &opts.device)?;
        let row = trainer.step(&batch, schedule.lr(step))?;
        if !row.loss.is_finite() {
            return Err(Error::usage(format!(
                "training diverged at step {step} (loss {}); lower --lr",
                row.loss
            )));
        }
        write_row(&mut log, &row).map_err(io)?;
        progress.losses.push(row.loss);
        on_step(&row);
        if step % opts.save_every == 0 || step == opts.steps {
            let name = format!("step-{step}");
            save(
                trainer,
                inputs.config,
                inputs.tok_path,
                &ckpt_dir.join(&name),
            )?;
            progress
                .checkpoints
                .push(out.final_path("checkpoints").join(name));
        }
    }
    Ok(progress)
}

/// Appends one step's row to the log and flushes it.
fn write_row(log: &mut impl Write, row: &StepLog) -> std::io::Result<()> {
    writeln!(
        log,
        "{},{},{},{},{}",
        row.step, row.loss, row.grad_norm, row.lr, row.qk_mean
    )?;
    log.flush()
}

/// The run's summary: the first loss, the mean of the last 10, the time since `started`.
fn summarize(
    opts: &TrainOptions,
    progress: Progress,
    started: Instant,
    out: &OutputDir,
) -> TrainSummary {
    let losses = &progress.losses;
    let tail = &losses[losses.len().saturating_sub(10)..];
    TrainSummary {
        variant: opts.variant.name().to_string(),
        steps: opts.steps,
        first_loss: losses[0],
        final_loss: tail.iter().sum::<f64>() / tail.len() as f64,
        seconds: started.elapsed().as_secs_f64(),
        checkpoints: progress.checkpoints,
        log: out.final_path("log.csv"),
    }
}

/// Writes train.json and moves the staged run into place.
fn commit_run(mut out: OutputDir, opts: &TrainOptions, summary: &TrainSummary) -> Result<()> {
    // staged last, so moved last: train.json marks the run finished
    write_json(
        &out.staged_path("train.json")?,
        &json!({ "options": opts.record(), "summary": summary }),
    )?;
    // an older run's marker goes before anything moves: a commit that fails halfway leaves
    // an unfinished run, never an old train.json beside new checkpoints
    let finished = out.final_path("train.json");
    if finished.is_file() {
        std::fs::remove_file(&finished).map_err(|e| Error::io(&finished, e))?;
    }
    out.commit()?;
    Ok(())
}

/// A finished run in `out` trained with the same options, if there is one.
pub fn finished_run(opts: &TrainOptions) -> Option<TrainSummary> {
    let text =
        asa_core::input::read_text(&opts.out.join("train.json"), asa_core::input::JSON_RECORD)
            .ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    if json.get("options")? != &opts.record() {
        return None;
    }
    let summary: TrainSummary = serde_json::from_value(json.get("summary")?.clone()).ok()?;
    summary
        .checkpoints
        .iter()
        .all(|c| c.join("config.json").is_file())
        .then_some(summary)
}

fn validate(opts: &TrainOptions) -> Result<()> {
    opts.arch.validate()?;
    check_memory(opts)?;
    if opts.steps == 0 || opts.batch_size == 0 || opts.save_every == 0 {
        return Err(Error::usage(
            "--steps, --batch-size and --save-every must be at least 1",
        ));
    }
    if opts.seq_len < 2 || opts.seq_len > opts.arch.max_position_embeddings {
        return Err(Error::option(
            "--seq-len",
            format!(
                "{} must be in 2..={} (max_position_embeddings)",
                opts.seq_len, opts.arch.max_position_embeddings
            ),
        ));
    }
    let o = &opts.optim;
    if !(o.lr.is_finite() && o.lr > 0.0) {
        return Err(Error::option(
            "--lr",
            format!("must be a positive number, got {}", o.lr),
        ));
    }
    for (name, value) in [
        ("--weight-decay", o.weight_decay),
        ("--grad-clip", o.grad_clip.unwrap_or(0.0)),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(Error::option(
                name,
                format!("must be a number >= 0, got {value}"),
            ));
        }
    }
    if !(0.0..=1.0).contains(&opts.decay_frac) || !(0.0..=1.0).contains(&opts.min_lr_ratio) {
        return Err(Error::usage(
            "--decay-frac and --min-lr-ratio must be in [0, 1]",
        ));
    }
    if let TextSource::File(path) = &opts.text {
        if !path.is_file() {
            return Err(Error::input(path, "no such corpus file"));
        }
    }
    if let Some(t) = &opts.tokenizer {
        if !t.is_file() {
            return Err(Error::not_a_file(t, "--tokenizer"));
        }
    }
    Ok(())
}

/// Refuses a model whose training state would not fit in memory, before anything is
/// allocated (a huge `--hidden-size` or `--layers` aborted the process, its staging folder
/// left behind): f32 weights, gradients and two Adam moments, 16 bytes a parameter, against
/// the memory available now.
fn check_memory(opts: &TrainOptions) -> Result<()> {
    let a = &opts.arch;
    let head_dim = a.hidden_size / a.num_heads.max(1);
    let attention = 2 * a.hidden_size * a.hidden_size
        + 2 * a.num_kv_heads * head_dim * a.hidden_size
        + a.num_heads * head_dim * a.hidden_size;
    let per_layer = (attention as u128) + 3 * (a.hidden_size * a.intermediate_size) as u128;
    let params = (a.num_layers as u128) * per_layer + 2 * (a.vocab_size * a.hidden_size) as u128;
    let needed = params.saturating_mul(16);
    let available = asa_core::host_memory::available_memory().unwrap_or(u64::MAX) as u128;
    if needed > available {
        return Err(Error::usage(format!(
            "a model of {params} parameters needs about {:.1} GiB to train (weights, gradients, Adam moments), more than the {:.1} GiB available; choose a smaller --hidden-size, --layers or --intermediate-size",
            needed as f64 / (1u64 << 30) as f64,
            available as f64 / (1u64 << 30) as f64
        )));
    }
    Ok(())
}
