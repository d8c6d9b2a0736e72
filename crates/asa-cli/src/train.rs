//! `train`: trains a small Llama-style model for one attention variant (glue over
//! [`asa_analysis::train`]): a progress bar, the CSV log and checkpoints under `--out`.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::stdout;
use asa_analysis::train::data::TextSource;
use asa_analysis::train::{self, Arch, OptimConfig, TrainOptions};
use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;
use asa_engine::device::{resolve_device, DeviceRequest};

/// Model, data and optimizer options shared by `train` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct TrainSettings {
    /// Training text (.txt, or .jsonl with a `text` field); default: built-in generated prose.
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,
    /// Characters of built-in prose to generate for training.
    #[arg(long, default_value_t = 400_000)]
    pub corpus_chars: usize,
    /// Optimizer steps.
    #[arg(long, default_value_t = 1000)]
    pub steps: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Tokens per training window (BOS included).
    #[arg(long, default_value_t = 128)]
    pub seq_len: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f64,
    /// Linear warmup steps.
    #[arg(long, default_value_t = 100)]
    pub warmup: usize,
    /// Share of the steps in the final linear decay (warmup-stable-decay).
    #[arg(long, default_value_t = 0.2)]
    pub decay_frac: f64,
    /// Final learning rate as a share of the peak.
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_ratio: f64,
    /// AdamW weight decay (matrices; norms and sink logits are not decayed).
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f64,
    /// Clip the global gradient norm (0: no clipping); the log has the norm before clipping.
    #[arg(long, default_value_t = 1.0)]
    pub grad_clip: f64,
    /// Seed of the initial weights and of the batch order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Checkpoint every N steps (and at the last step).
    #[arg(long)]
    pub save_every: Option<usize>,
    /// BPE vocabulary size.
    #[arg(long, default_value_t = 512)]
    pub vocab_size: usize,
    /// Hidden size.
    #[arg(long, default_value_t = 64)]
    pub hidden_size: usize,
    /// Decoder layers.
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    /// Key/value heads (grouped-query attention); default: --heads.
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// MLP hidden size.
    #[arg(long, default_value_t = 176)]
    pub intermediate_size: usize,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: DeviceRequest,
}

impl TrainSettings {
    /// Options for training `variant` into `out`.
    pub fn options(&self, variant: VariantKind, out: PathBuf) -> Result<TrainOptions> {
        let device = resolve_device(self.device)?;
        let text = match &self.corpus {
            Some(path) => {
                if !path.is_file() {
                    return Err(Error::input(path, "no such corpus file"));
                }
                TextSource::File(path.clone())
            }
            None => TextSource::BuiltIn {
                seed: self.seed,
                chars: self.corpus_chars,
            },
        };
        Ok(TrainOptions {
            variant,
            arch: Arch {
                hidden_size: self.hidden_size,
                num_layers: self.layers,
                num_heads: self.heads,
                num_kv_heads: self.kv_heads.unwrap_or(self.heads),
                intermediate_size: self.intermediate_size,
                vocab_size: self.vocab_size,
                max_position_embeddings: self.seq_len,
                rope_theta: 10000.0,
            },
            text,
            tokenizer: None,
            steps: self.steps,
            batch_size: self.batch_size,
            seq_len: self.seq_len,
            warmup: self.warmup,
            decay_frac: self.decay_frac,
            min_lr_ratio: self.min_lr_ratio,
            optim: OptimConfig {
                lr: self.lr,
                weight_decay: self.weight_decay,
                grad_clip: (self.grad_clip != 0.0).then_some(self.grad_clip),
                ..OptimConfig::default()
            },
            seed: self.seed,
            save_every: self.save_every.unwrap_or((self.steps / 10).max(1)),
            out,
            device,
        })
    }
}

/// `train --variant V --out DIR`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Attention variant (SPEC section 3).
    #[arg(long, value_parser = variant_parser())]
    pub variant: VariantKind,
    /// Output folder: log.csv, checkpoints/step-N/, tokenizer.json, train.json.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// An existing tokenizer.json to use instead of training one.
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// Overwrite a finished run in --out.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub settings: TrainSettings,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--variant`: one of the variants' names, which `--help` lists.
fn variant_parser() -> impl TypedValueParser<Value = VariantKind> {
    PossibleValuesParser::new(VariantKind::NAMES).try_map(|name| name.parse::<VariantKind>())
}

/// A progress bar over training steps.
pub fn step_bar(quiet: bool, steps: usize, label: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(steps as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>10} [{bar:30}] {pos}/{len} steps {msg} ({elapsed}, eta {eta})",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}

/// Runs `train`.
pub fn run(args: TrainArgs, process: &super::Process) -> Result<()> {
    let mut opts = args.settings.options(args.variant, args.out.clone())?;
    opts.tokenizer = args.tokenizer.clone();
    if args.out.join("train.json").exists() && !args.force {
        return Err(Error::input(
            &args.out,
            "holds a finished training run; pass --force to overwrite it",
        ));
    }
    let bar = step_bar(args.quiet, opts.steps, args.variant.name());
    let summary = train::train(&opts, &process.staging, &mut |row| {
        bar.set_position(row.step as u64);
        bar.set_message(format!("loss {:.3}", row.loss));
    })?;
    bar.finish_and_clear();
    stdout::print(&format!(
        "{}: {} steps in {:.1}s, loss {:.4} -> {:.4} (mean of the last 10), {} checkpoints under {}\n",
        summary.variant,
        summary.steps,
        summary.seconds,
        summary.first_loss,
        summary.final_loss,
        summary.checkpoints.len(),
        args.out.join("checkpoints").display()
    ))
}
