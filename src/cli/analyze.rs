//! `analyze` and the one-metric commands (`entropy`, `first-token`, `weight-sums`, `qk`,
//! `heads`, `heatmap`, `profile`, `sink`, `alpha`, `nll`, `sink-rate`, `distance`): models
//! as `label=path`, a corpus, one forward pass per batch computing every metric asked for,
//! tidy tables under `--out`, a compact table on stdout.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::DType;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::report;
use crate::analysis::plan::{batch_chunk, block_size, default_budget, parse_bytes};
use crate::analysis::series::find_series;
use crate::analysis::{analyze, RunShape};
use crate::corpus::{
    load_windows_with, BosMode, CorpusOptions, CorpusSource, SpecialTokens, TokenizerRef,
};
use crate::device::{parse_dtype, resolve_device, resolve_dtype, DeviceRequest};
use crate::error::{Error, Result};
use crate::export::{Format, OutputDir};
use crate::metrics::distance::Bands;
use crate::metrics::entropy::EntropyOf;
use crate::metrics::{attention_tables, qk_series_table, Metric, MetricOptions, ModelMetrics};
use crate::model::{Checkpoint, WeightMap};

/// Options shared by every metric command.
#[derive(Debug, clap::Args)]
pub struct MetricArgs {
    /// Checkpoints: `label=path` or `path` (label = folder name). A folder of step
    /// checkpoints (`step-1000/`, `checkpoint-2000/`) is a training series.
    #[arg(required = true, value_name = "MODEL")]
    pub models: Vec<String>,
    /// Text (.txt, .jsonl) or token ids (.npy, .json); default: built-in generated prose.
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,
    /// tokenizer.json to use instead of the checkpoint's own (or its GGUF metadata).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// JSON of "convention name": "checkpoint name" patterns ({l} placeholders) for
    /// checkpoints whose tensors are named otherwise.
    #[arg(long, value_name = "FILE")]
    pub weight_map: Option<PathBuf>,
    /// Tokens per sequence (BOS included).
    #[arg(long, default_value_t = 1024)]
    pub seq_len: usize,
    /// Number of sequences.
    #[arg(long, default_value_t = 10)]
    pub num_seqs: usize,
    /// Whether each sequence starts with BOS.
    #[arg(long, value_enum, default_value_t = BosMode::Auto)]
    pub bos: BosMode,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 1)]
    pub batch_size: usize,
    /// Seed of the built-in corpus.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: DeviceRequest,
    /// Analysis dtype: f32, bf16, f16 (default f32 on CPU, bf16 on GPU).
    #[arg(long, value_parser = parse_dtype)]
    pub dtype: Option<DType>,
    /// Memory for attention blocks (e.g. 2G); default a quarter of available memory.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub max_memory: Option<u64>,
    /// Queries per attention block (overrides --max-memory).
    #[arg(long)]
    pub block_size: Option<usize>,
    /// Output folder for the tables and run.json.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Table format.
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Queries i < min-query are left out of query averages.
    #[arg(long, default_value_t = 1)]
    pub min_query: usize,
    /// Heatmap / profile layer, 1-based (default 8, clipped to the model's depth).
    #[arg(long)]
    pub layer: Option<usize>,
    /// Heatmap size (queries and keys).
    #[arg(long, default_value_t = 30)]
    pub size: usize,
    /// Query of the profile, 0-based (default: the last).
    #[arg(long)]
    pub profile_query: Option<usize>,
    /// Weight-sum histogram bins.
    #[arg(long, default_value_t = 20)]
    pub bins: usize,
    /// Sink-rate threshold epsilon.
    #[arg(long, default_value_t = 0.3)]
    pub sink_eps: f64,
    /// Distance band edges after 0 (e.g. 1,10,100); default decades.
    #[arg(long, value_delimiter = ',')]
    pub bands: Option<Vec<usize>>,
    /// Entropy of the effective weights (clamped, renormalised) or of the plain softmax.
    #[arg(long, value_enum, default_value_t = EntropyOf::Effective)]
    pub entropy_of: EntropyOf,
    /// `analyze` only: compute just these metrics (comma-separated), e.g.
    /// first_token,entropy,weight_sum,head_total,heatmap,nll.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub metrics: Option<Vec<Metric>>,
    /// Also render every figure the tables allow into OUT/figures/ (as `figures` would).
    #[arg(long)]
    pub figures: bool,
    /// Print results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Time each phase of the forward pass and the metrics (waiting for the device after
    /// each: slower), print the table to stderr and record it in run.json.
    #[arg(long)]
    pub profile: bool,
    /// No progress bars or warnings.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A model named on the command line.
struct ModelSpec {
    label: String,
    path: PathBuf,
}

fn parse_models(raw: &[String]) -> Result<Vec<ModelSpec>> {
    let mut specs: Vec<ModelSpec> = Vec::new();
    for item in raw {
        let (label, path) = match item.split_once('=') {
            Some((label, path)) if !label.is_empty() && !label.contains('/') => {
                (label.to_string(), PathBuf::from(path))
            }
            _ => {
                let path = PathBuf::from(item);
                let name = path
                    .canonicalize()
                    .ok()
                    .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().to_string()))
                    .unwrap_or_else(|| item.clone());
                (name, path)
            }
        };
        if specs.iter().any(|s| s.label == label) {
            return Err(Error::usage(format!(
                "model label `{label}` is given twice; name them with label=path"
            )));
        }
        specs.push(ModelSpec { label, path });
    }
    Ok(specs)
}

/// What one model's run recorded for run.json.
struct ModelRun {
    label: String,
    metrics: ModelMetrics,
    record: serde_json::Value,
}

/// Runs a metric command computing `metrics`; `command` names it in run.json.
pub fn run(args: MetricArgs, metrics: &[Metric], command: &str) -> Result<()> {
    let started = Instant::now();
    let specs = parse_models(&args.models)?;
    let device = resolve_device(args.device)?;
    let dtype = resolve_dtype(args.dtype, &device);
    if args.profile {
        crate::profile::enable(&device);
    }
    if let Some(b) = args.block_size {
        crate::analysis::plan::check_block(b)?;
    }
    for (name, value) in [
        ("--bins", args.bins),
        ("--size", args.size),
        ("--batch-size", args.batch_size),
    ] {
        if value == 0 {
            return Err(Error::usage(format!("{name} must be at least 1")));
        }
    }
    // more bins than any figure can show; each is a table row (10^7 wrote 0.5 GB)
    const MAX_BINS: usize = 100_000;
    if args.bins > MAX_BINS {
        return Err(Error::usage(format!(
            "--bins {} is more than {MAX_BINS}",
            args.bins
        )));
    }
    // beyond any analysis that finishes; refused before the built-in text is generated
    const MAX_TOKENS: usize = 1 << 28;
    if args.seq_len.saturating_mul(args.num_seqs) > MAX_TOKENS {
        return Err(Error::usage(format!(
            "--seq-len {} x --num-seqs {} asks for more than {MAX_TOKENS} tokens",
            args.seq_len, args.num_seqs
        )));
    }
    if !args.sink_eps.is_finite() {
        return Err(Error::usage(format!(
            "--sink-eps must be a finite number, got {}",
            args.sink_eps
        )));
    }
    if let Some(file) = &args.tokenizer {
        if !file.is_file() {
            return Err(Error::not_a_file(file, "--tokenizer"));
        }
    }
    let map = WeightMap::from_option(args.weight_map.as_deref())?;
    let mut out = OutputDir::create(&args.out, args.format)?;
    let metric_set: BTreeSet<Metric> = match (&args.metrics, command) {
        (Some(chosen), "analyze") => chosen.iter().copied().collect(),
        (Some(_), _) => {
            return Err(Error::usage(format!(
                "--metrics applies to `analyze`; `{command}` computes its own metric"
            )))
        }
        (None, _) => metrics.iter().copied().collect(),
    };
    let mut runs = Vec::new();
    let mut series_rows = Vec::new();
    for spec in &specs {
        match find_series(&spec.path)? {
            Some(steps) => {
                // a training series: QK^T per step; the other metrics on the last step, in the
                // same forward pass as its QK^T (no step runs twice)
                let others = metric_set.iter().any(|m| *m != Metric::QkMean);
                for (k, step) in steps.iter().enumerate() {
                    let last = k + 1 == steps.len();
                    let mut wanted: BTreeSet<Metric> = [Metric::QkMean].into();
                    if last && others {
                        wanted.extend(metric_set.iter().copied());
                    }
                    let mut r = run_model(
                        &args,
                        &map,
                        &spec.label,
                        &step.dir,
                        &wanted,
                        &device,
                        dtype,
                        command,
                    )?;
                    let qk = r.metrics.qk.as_ref().expect("qk was asked for");
                    series_rows.push((spec.label.clone(), step.step, qk.mean, qk.abs_mean));
                    if last && others {
                        if !metric_set.contains(&Metric::QkMean) {
                            r.metrics.qk = None;
                        }
                        runs.push(r);
                    }
                }
            }
            None => runs.push(run_model(
                &args,
                &map,
                &spec.label,
                &spec.path,
                &metric_set,
                &device,
                dtype,
                command,
            )?),
        }
    }
    let models: Vec<(String, ModelMetrics)> = runs
        .iter()
        .map(|r| (r.label.clone(), r.metrics.clone()))
        .collect();
    for table in attention_tables(&models) {
        out.write(&table)?;
    }
    if !series_rows.is_empty() {
        out.write(&qk_series_table(&series_rows))?;
    }
    let record = json!({
        "command": command,
        "asa_analyze_version": env!("CARGO_PKG_VERSION"),
        "candle_version": "0.11.1",
        "device": format!("{device:?}"),
        "dtype": format!("{dtype:?}").to_lowercase(),
        "metrics": metric_set,
        "options": {
            "seq_len": args.seq_len, "num_seqs": args.num_seqs, "bos": args.bos, "batch_size": args.batch_size,
            "min_query": args.min_query, "size": args.size, "bins": args.bins, "sink_eps": args.sink_eps,
            "entropy_of": args.entropy_of, "format": args.format, "seed": args.seed,
            "layer": args.layer, "profile_query": args.profile_query, "bands": args.bands,
            "weight_map": args.weight_map, "tokenizer": args.tokenizer,
            "max_memory": args.max_memory, "block_size": args.block_size,
            "device": format!("{:?}", args.device).to_lowercase(),
        },
        "models": runs.iter().map(|r| r.record.clone()).collect::<Vec<_>>(),
        "series": series_rows.iter().map(|r| json!({"model": r.0, "step": r.1})).collect::<Vec<_>>(),
        "seconds": started.elapsed().as_secs_f64(),
        "profile": args.profile.then(profile_record),
    });
    out.write_bytes(
        "run.json",
        serde_json::to_string_pretty(&record)
            .expect("json")
            .as_bytes(),
    )?;
    // figures from the staged tables, so tables and figures appear together or not at all
    let figures = if args.figures {
        let mut fig_out = OutputDir::create(&args.out.join("figures"), args.format)?;
        let report = crate::plot::render_all(&[out.staging().to_path_buf()], &mut fig_out)?;
        if !args.quiet {
            for note in &report.notes {
                eprintln!("asa-analyze: note: {note}");
            }
        }
        Some(fig_out)
    } else {
        None
    };
    let mut written = out.commit()?;
    if let Some(fig_out) = figures {
        written.extend(fig_out.commit()?);
    }
    if args.json {
        let doc = json!({
            "models": models.iter().map(|(l, m)| json!({"model": l, "metrics": m})).collect::<Vec<_>>(),
            "qk_series": series_rows.iter().map(|r| json!({"model": r.0, "step": r.1, "qk_mean": r.2, "qk_abs_mean": r.3})).collect::<Vec<_>>(),
            "files": written,
        });
        super::stdout::print_json(&doc)?;
    } else {
        report::print_summary(&models, &series_rows, &metric_set)?;
        if !args.quiet {
            eprintln!("wrote {} files to {}", written.len(), args.out.display());
        }
    }
    if args.profile {
        eprint!("{}", crate::profile::report(started.elapsed()));
    }
    Ok(())
}

/// The `--profile` phases for run.json: calls, host and total seconds by phase.
fn profile_record() -> serde_json::Value {
    let phases: serde_json::Map<String, serde_json::Value> = crate::profile::totals()
        .into_iter()
        .map(|(name, t)| {
            let row = json!({"calls": t.calls, "host_s": t.host.as_secs_f64(), "total_s": t.total.as_secs_f64()});
            (name.to_string(), row)
        })
        .collect();
    serde_json::Value::Object(phases)
}

#[allow(clippy::too_many_arguments)]
fn run_model(
    args: &MetricArgs,
    map: &WeightMap,
    label: &str,
    path: &Path,
    metric_set: &BTreeSet<Metric>,
    device: &candle_core::Device,
    dtype: DType,
    command: &str,
) -> Result<ModelRun> {
    let ckpt = Checkpoint::open_mapped(path, device, dtype, map)?.validate()?;
    if let (Some(note), false) = (&ckpt.variant.unused_weights, args.quiet) {
        eprintln!("asa-analyze: note: {label}: {note}");
    }
    let c = &ckpt.config;
    let source = match &args.corpus {
        Some(p) => CorpusSource::File(p.clone()),
        None => CorpusSource::BuiltIn { seed: args.seed },
    };
    let corpus_opts = CorpusOptions {
        seq_len: args.seq_len,
        num_seqs: args.num_seqs,
        bos: args.bos,
    };
    let special = SpecialTokens {
        bos: c.bos_token_id,
        eos: c.eos_token_id,
    };
    let needs_text = !matches!(&args.corpus, Some(p) if is_token_ids(p));
    let built;
    let origin;
    let tokenizer_json;
    let tokenizer = match (&args.tokenizer, ckpt.tokenizer_json()) {
        (Some(file), _) => Some(TokenizerRef::Path(file)),
        (None, Some(json)) => {
            tokenizer_json = json;
            Some(TokenizerRef::Path(&tokenizer_json))
        }
        // GGUF: the tokenizer lives in the metadata; build it only when text needs it
        (None, None) if needs_text => {
            built = ckpt.tokenizer()?;
            origin = path.to_path_buf();
            Some(TokenizerRef::Built(&built, &origin))
        }
        (None, None) => None,
    };
    let windows = load_windows_with(&source, tokenizer, special, c.vocab_size, &corpus_opts)?;
    let t = args.seq_len;
    if t > c.max_position_embeddings && !args.quiet {
        eprintln!(
            "asa-analyze: warning: {label}: --seq-len {t} exceeds max_position_embeddings {} (analysing past the training length)",
            c.max_position_embeddings
        );
    }
    let heatmap_layer = match args.layer {
        Some(0) => return Err(Error::usage("--layer is 1-based; 0 is not a layer")),
        Some(l) if l > c.num_layers => {
            return Err(Error::usage(format!(
                "--layer {l} does not exist: {label} has {} layers",
                c.num_layers
            )))
        }
        Some(l) => l - 1,
        None => 8.min(c.num_layers) - 1,
    };
    let profile_query = match args.profile_query {
        Some(q) if q >= t => {
            return Err(Error::usage(format!(
                "--profile-query {q} is outside the sequence (0..{t})"
            )))
        }
        Some(q) => q,
        None => t - 1,
    };
    if args.min_query >= t {
        return Err(Error::usage(format!(
            "--min-query {} leaves no query to average in windows of {t} tokens (queries 0..{t})",
            args.min_query
        )));
    }
    let opts = MetricOptions {
        metrics: metric_set.clone(),
        min_query: args.min_query,
        heatmap_layer,
        heatmap_size: args.size.min(t),
        profile_query,
        bins: args.bins,
        sink_eps: args.sink_eps,
        bands: match &args.bands {
            Some(edges) => bands_from(edges, t)?,
            None => Bands::decades(t),
        },
        entropy_of: args.entropy_of,
    };
    let budget = args.max_memory.unwrap_or_else(|| default_budget(device));
    let (batch, block) = match args.block_size {
        Some(b) => (args.batch_size.max(1), b),
        None => {
            let batch = batch_chunk(budget, args.batch_size.max(1), c.num_heads, t);
            (batch, block_size(budget, batch, c.num_heads, t))
        }
    };
    if batch < args.batch_size && !args.quiet {
        eprintln!(
            "note: {label}: --batch-size {} runs as batches of {batch} sequences to fit the attention memory budget ({} MiB)",
            args.batch_size,
            budget >> 20
        );
    }
    let model = ckpt.load_model()?;
    let bar = progress_bar(args.quiet, (windows.ids.len() * t) as u64, label);
    let started = Instant::now();
    let metrics = analyze(
        &ckpt,
        &model,
        &windows.ids,
        &opts,
        RunShape {
            batch_size: batch,
            block,
        },
        |tokens| bar.set_position(tokens as u64),
    )?;
    bar.finish_and_clear();
    let record = json!({
        "model": label,
        "command": command,
        "path": path.display().to_string(),
        "architecture": c.architecture.name(),
        "variant": ckpt.variant.kind.name(),
        "variant_source": ckpt.variant.source,
        "unused_weights": ckpt.variant.unused_weights,
        "layers": c.num_layers,
        "heads": c.num_heads,
        "kv_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "corpus": windows.description,
        "dequantized_from": ckpt.dequantized_from(),
        "seq_len": t,
        "beta_length_n": t,
        "block_size": block,
        "batch_size": batch,
        "heatmap_layer": heatmap_layer + 1,
        "profile_query": profile_query,
        "seconds": started.elapsed().as_secs_f64(),
        "tokens_per_second": (windows.ids.len() * t) as f64 / started.elapsed().as_secs_f64(),
    });
    Ok(ModelRun {
        label: label.to_string(),
        metrics,
        record,
    })
}

/// Whether a corpus file holds token ids (no tokenizer needed).
fn is_token_ids(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("npy") | Some("json")
    )
}

fn bands_from(edges: &[usize], seq_len: usize) -> Result<Bands> {
    if edges.is_empty() || edges[0] == 0 || edges.windows(2).any(|w| w[1] <= w[0]) {
        return Err(Error::usage(
            "--bands must be increasing edges starting at 1 or more, e.g. 1,10,100",
        ));
    }
    Ok(Bands::with_edges(edges, seq_len))
}

fn progress_bar(quiet: bool, total: u64, label: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len} tokens {per_sec} eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}
