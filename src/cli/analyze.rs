//! `analyze` and the one-metric commands (`entropy`, `first-token`, `weight-sums`, `qk`,
//! `heads`, `heatmap`, `profile`, `sink`, `alpha`, `nll`, `sink-rate`, `distance`): models
//! as `label=path`, a corpus, one forward pass per batch computing every metric asked for,
//! tidy tables under `--out`, a compact table on stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use candle_core::DType;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::choice::choice;
use super::report;
use super::Process;
use crate::analysis::partial::{shard_info, stage_partial};
use crate::analysis::plan::parse_bytes;
use crate::analysis::record::{ModelRecord, ProfilePhase};
use crate::analysis::shard::Shard;
use crate::analysis::{
    kernel_layers, Execution, ModelSource, Run, RunEvents, RunInputs, RunOptions, RunOutput,
    RunSpec,
};
use crate::attention::VariantKind;
use crate::corpus::induction::ProbeKind;
use crate::corpus::{BosMode, WindowMode};
use crate::device::{parse_dtype, resolve_device, DeviceRequest};
use crate::error::{Error, Result};
use crate::export::{Format, OutputDir};
use crate::metrics::entropy::EntropyOf;
use crate::metrics::head_role::RoleThresholds;
use crate::metrics::{Metric, ModelMetrics};
use crate::results::{self, stage_tables};

/// The run's defaults, one place for the CLI's and the Python package's (`RunOptions`'s
/// `Default`): clap states them in `--help` from here.
fn defaults() -> RunOptions {
    RunOptions::default()
}

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
    /// A built-in probe instead of a corpus: `induction`, windows of BOS, L random token ids
    /// (from --seed) and the same L again, --seq-len 2L + 1; `analyze` adds induction_score.
    #[arg(long, value_parser = choice::<ProbeKind>(&ProbeKind::NAMES), value_name = "NAME")]
    pub probe: Option<ProbeKind>,
    /// tokenizer.json to use instead of the checkpoint's own (or its GGUF metadata).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// JSON of "convention name": "checkpoint name" patterns ({l} placeholders) for
    /// checkpoints whose tensors are named otherwise.
    #[arg(long, value_name = "FILE")]
    pub weight_map: Option<PathBuf>,
    /// Analyse every checkpoint as this attention variant, whatever config.json names or
    /// the weights point to (e.g. off_by_one, which has no weights of its own).
    #[arg(long, value_parser = choice::<VariantKind>(&VariantKind::NAMES), value_name = "NAME")]
    pub variant: Option<VariantKind>,
    /// Tokens per sequence (BOS included).
    #[arg(long, default_value_t = defaults().spec.seq_len)]
    pub seq_len: usize,
    /// Number of sequences.
    #[arg(long, default_value_t = defaults().spec.num_seqs)]
    pub num_seqs: usize,
    /// Whether each sequence starts with BOS.
    #[arg(long, value_parser = choice::<BosMode>(&BosMode::NAMES), default_value = "auto")]
    pub bos: BosMode,
    /// How windows are cut: packed (documents joined with EOS, cut into consecutive
    /// windows) or documents (each window the start of its own document, shorter ones
    /// skipped).
    #[arg(long, value_parser = choice::<WindowMode>(&WindowMode::NAMES), default_value = "packed")]
    pub windows: WindowMode,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = defaults().execution.batch_size)]
    pub batch_size: usize,
    /// Seed of the built-in corpus.
    #[arg(long, default_value_t = defaults().spec.seed)]
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
    /// Read one layer's weights at a time (layer-major: every window through a layer before
    /// the next); default: when the model's weights would not fit --memory-budget (CPU).
    #[arg(long)]
    pub stream_layers: bool,
    /// Analyse weights holding NaN or infinities (a diverged checkpoint; its metrics come out
    /// NaN) instead of refusing them.
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Analyse a checkpoint holding weights its config does not use (more layers than
    /// num_hidden_layers, another variant's weights) instead of refusing it.
    #[arg(long)]
    pub ignore_unused_weights: bool,
    /// Memory the model's weights may take before layers are streamed (e.g. 8G); default
    /// 80% of the memory available when the run starts.
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub memory_budget: Option<u64>,
    /// Output folder for the tables and run.json.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Analyse shard K of N (0-based) of each model's windows and write a partial result to
    /// --out for `merge`. Default: from a Slurm job array (SLURM_ARRAY_TASK_ID, ..._COUNT,
    /// ..._MIN) when there is one; `--shard 0/1` runs whole.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// The number of shards of a Kubernetes indexed job; K is JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "N")]
    pub shard_count: Option<usize>,
    /// Table format.
    #[arg(long, value_parser = choice::<Format>(&Format::NAMES), default_value = "csv")]
    pub format: Format,
    /// Queries i < min-query are left out of query averages.
    #[arg(long, default_value_t = defaults().spec.min_query)]
    pub min_query: usize,
    /// Heatmap / profile layer, 1-based, a layer with attention (default the 8th attention
    /// layer, clipped to the model's last).
    #[arg(long)]
    pub layer: Option<usize>,
    /// Heatmap size (queries and keys).
    #[arg(long, default_value_t = defaults().spec.size)]
    pub size: usize,
    /// block_map side: G x G blocks of queries and keys (G = min(map-size, seq-len)); only
    /// with `block_map` among the metrics [default: 256]
    #[arg(long)]
    pub map_size: Option<usize>,
    /// Query of the profile, 0-based (default: the last).
    #[arg(long)]
    pub profile_query: Option<usize>,
    /// Weight-sum histogram bins.
    #[arg(long, default_value_t = defaults().spec.bins)]
    pub bins: usize,
    /// Sink-rate threshold epsilon.
    #[arg(long, default_value_t = defaults().spec.sink_eps)]
    pub sink_eps: f64,
    /// Distance band edges after 0 (e.g. 1,10,100); default decades.
    #[arg(long, value_delimiter = ',')]
    pub bands: Option<Vec<usize>>,
    /// Entropy of the effective weights (clamped, renormalised) or of the plain softmax.
    #[arg(long, value_parser = choice::<EntropyOf>(&EntropyOf::NAMES), default_value = "effective")]
    pub entropy_of: EntropyOf,
    /// head_role: a head whose mean first-token mass reaches this is a sink head.
    #[arg(long, default_value_t = defaults().spec.roles.sink, value_name = "MASS")]
    pub role_sink: f64,
    /// head_role: local_mass is the mass on the last W keys (distances 0 .. W-1, key 0 not).
    #[arg(long, default_value_t = defaults().spec.roles.local_window, value_name = "W")]
    pub role_local_window: usize,
    /// head_role: a head whose local_mass reaches this is a local head.
    #[arg(long, default_value_t = defaults().spec.roles.local, value_name = "MASS")]
    pub role_local: f64,
    /// head_role: a head whose mass at distance 1 reaches this is a previous-token head.
    #[arg(long, default_value_t = defaults().spec.roles.prev, value_name = "MASS")]
    pub role_prev: f64,
    /// head_role: a head whose induction_score reaches this is an induction head.
    #[arg(long, default_value_t = defaults().spec.roles.induction, value_name = "MASS")]
    pub role_induction: f64,
    /// `analyze` only: compute just these metrics (comma-separated), e.g.
    /// first_token,entropy,weight_sum,head_total,heatmap,nll.
    #[arg(long, value_parser = choice::<Metric>(Metric::names()), value_delimiter = ',')]
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
    /// Say how each layer's attention is computed (the kernel the plan chose), on stderr.
    #[arg(long, short)]
    pub verbose: bool,
}

/// The models named on the command line: `label=path` or a path (label = its name).
pub(super) fn parse_models(raw: &[String]) -> Result<Vec<ModelSource>> {
    let mut specs: Vec<ModelSource> = Vec::new();
    for item in raw {
        let (label, path) = match item.split_once('=') {
            Some((label, path)) if !label.is_empty() && !label.contains('/') => {
                (label.to_string(), PathBuf::from(path))
            }
            _ => {
                let path = PathBuf::from(item);
                // a Hub series (`org/name@step1000,step2000`) is labelled by its repository
                let hub_series = match item.split_once('@') {
                    Some((repo, revisions)) if revisions.contains(',') => Some(repo),
                    _ => None,
                };
                let name = path
                    .canonicalize()
                    .ok()
                    .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().to_string()))
                    .or_else(|| hub_series.map(str::to_string))
                    .unwrap_or_else(|| item.clone());
                (name, path)
            }
        };
        if specs.iter().any(|s| s.label == label) {
            return Err(Error::usage(format!(
                "model label `{label}` is given twice; name them with label=path"
            )));
        }
        specs.push(ModelSource::at(label, path));
    }
    Ok(specs)
}

/// The library's options for these arguments, computing `metrics` (or, for `analyze`,
/// `--metrics`).
pub(super) fn run_options(
    args: &MetricArgs,
    metrics: &[Metric],
    command: &str,
) -> Result<RunOptions> {
    let metrics = chosen_metrics(args, metrics, command)?;
    let spec = RunSpec {
        metrics,
        probe: args.probe,
        variant: args.variant,
        seq_len: args.seq_len,
        num_seqs: args.num_seqs,
        bos: args.bos,
        windows: args.windows,
        seed: args.seed,
        dtype: args.dtype,
        allow_nonfinite: args.allow_nonfinite,
        ignore_unused_weights: args.ignore_unused_weights,
        min_query: args.min_query,
        layer: args.layer,
        size: args.size,
        map_size: args.map_size.unwrap_or(RunSpec::DEFAULT_MAP_SIZE),
        profile_query: args.profile_query,
        bins: args.bins,
        sink_eps: args.sink_eps,
        bands: args.bands.clone(),
        entropy_of: args.entropy_of,
        roles: RoleThresholds {
            sink: args.role_sink,
            local_window: args.role_local_window,
            local: args.role_local,
            prev: args.role_prev,
            induction: args.role_induction,
        },
    };
    let inputs = RunInputs {
        corpus: args.corpus.clone(),
        tokenizer: args.tokenizer.clone(),
        weight_map: args.weight_map.clone(),
    };
    Ok(RunOptions {
        spec,
        inputs,
        execution: execution(args)?,
    })
}

/// The metrics a command computes: `--metrics` for `analyze` (refused elsewhere), else the
/// command's own; the induction probe adds its score to `analyze`'s defaults, and
/// `--map-size` needs `block_map`.
fn chosen_metrics(
    args: &MetricArgs,
    metrics: &[Metric],
    command: &str,
) -> Result<BTreeSet<Metric>> {
    let mut metrics: BTreeSet<Metric> = match (&args.metrics, command) {
        (Some(chosen), "analyze") => chosen.iter().copied().collect(),
        (Some(_), _) => {
            return Err(Error::option(
                "--metrics",
                format!("applies to `analyze`; `{command}` computes its own metric"),
            ))
        }
        (None, _) => metrics.iter().copied().collect(),
    };
    // the probe's own metric comes with the defaults of `analyze`
    if args.probe == Some(ProbeKind::Induction) && args.metrics.is_none() && command == "analyze" {
        metrics.insert(Metric::INDUCTION_SCORE);
    }
    if args.map_size.is_some() && !metrics.contains(&Metric::BLOCK_MAP) {
        return Err(Error::option(
            "--map-size",
            "sets block_map's side: add block_map to --metrics, or leave --map-size out",
        ));
    }
    Ok(metrics)
}

/// How the run is carried out: device, memory, batching and the shard (from `--shard`,
/// `--shard-count` or a job array's environment).
fn execution(args: &MetricArgs) -> Result<Execution> {
    let shard = Shard::resolve(args.shard.as_deref(), args.shard_count, |k| {
        std::env::var(k).ok()
    })?;
    Ok(Execution {
        batch_size: args.batch_size,
        device: args.device,
        max_memory: args.max_memory,
        block_size: args.block_size,
        stream_layers: args.stream_layers,
        memory_budget: args.memory_budget,
        scratch_dir: None,
        // 0/1 asks for a whole run (inside a job array, say)
        shard: shard.filter(|s| s.count != 1),
    })
}

/// The schedule of a model's run on stderr (`--verbose`): per layer, what reading its
/// weights and computing it took, and the bytes read, when layers were streamed.
fn print_schedule(label: &str, record: &ModelRecord) {
    let schedule = &record.schedule;
    let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
    eprintln!(
        "asa-analyze: {label}: schedule {} (weights {:.2} GiB in memory, budget {:.2} GiB), peak RSS {:.2} GiB",
        schedule.taken,
        gib(schedule.in_memory_weight_bytes),
        gib(schedule.memory_budget_bytes),
        record.peak_rss_bytes.map_or(f64::NAN, gib),
    );
    for timing in &schedule.layers {
        let what = match timing.layer {
            l if l == record.layers => "LM head".to_string(),
            l => format!("layer {}", l + 1),
        };
        eprintln!(
            "asa-analyze: {label}: {what}: read + cast {:.3} s, compute {:.3} s, {:.1} MiB read",
            timing.load_seconds,
            timing.compute_seconds,
            timing.bytes_read as f64 / (1u64 << 20) as f64,
        );
    }
}

/// Progress bars and notes on stderr (nothing with `--quiet`).
pub(super) struct Terminal {
    pub quiet: bool,
    pub bar: Option<ProgressBar>,
}

impl RunEvents for Terminal {
    fn model_started(&mut self, label: &str, tokens: u64) {
        self.bar = Some(progress_bar(self.quiet, tokens, label));
    }

    fn progress(&mut self, tokens: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(tokens);
        }
    }

    fn model_finished(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn note(&mut self, text: &str) {
        if !self.quiet {
            eprintln!("asa-analyze: note: {text}");
        }
    }
}

/// Runs a metric command computing `metrics`; `command` names it in run.json.
pub fn run(args: MetricArgs, metrics: &[Metric], command: &str, process: &Process) -> Result<()> {
    let started = Instant::now();
    let options = run_options(&args, metrics, command)?;
    options.validate()?;
    if options.execution.shard.is_some() && (args.figures || args.json) {
        return Err(Error::usage(
            "a shard writes a partial result: --figures and --json come with `merge`",
        ));
    }
    let models = parse_models(&args.models)?;
    if args.profile {
        crate::profile::enable(&resolve_device(args.device)?);
    }
    let mut out = OutputDir::create(&args.out, args.format, &process.staging)?;
    let mut options = options;
    options.execution.scratch_dir = Some(out.staging().to_path_buf());
    let run = Run {
        models,
        options,
        cancel: process.cancel.clone(),
    };
    let mut terminal = Terminal {
        quiet: args.quiet,
        bar: None,
    };
    let output = run.execute(&mut terminal)?;
    if args.verbose {
        for m in &output.models {
            for (kernel, layers) in kernel_layers(&m.metrics.kernels) {
                eprintln!("asa-analyze: {}: layers {layers:?}: {kernel}", m.label);
            }
            print_schedule(&m.label, &m.record);
        }
    }
    let mut record = output.record(command, &run.options);
    record.options["format"] = json!(args.format);
    record.seconds = started.elapsed().as_secs_f64();
    record.profile = args.profile.then(profile_record);
    if let (Some(shard), Some(fingerprint)) = (output.shard, &output.fingerprint) {
        // a shard: the exact states for `merge`, no tables of its own
        let info = shard_info(&shard, fingerprint.clone());
        stage_partial(&mut out, &output.partials, &info, record)?;
        out.commit()?;
        if !args.quiet {
            eprintln!(
                "asa-analyze: shard {} of {} ({}) written to {}: `asa-analyze merge` its folder with the others'",
                shard.index,
                shard.count,
                shard.source.describe(),
                args.out.display()
            );
        }
        return Ok(());
    }
    stage_tables(&mut out, &output, &record)?;
    let flags = FigureFlags {
        figures: args.figures,
        quiet: args.quiet,
    };
    let written = commit_tables(out, flags)?;
    print_results(&output, &run.options.spec.metrics, &written, &args)?;
    if args.profile {
        eprint!("{}", crate::profile::report(started.elapsed()));
    }
    Ok(())
}

/// What a command asks of its figures: drawn (`--figures`), their notes printed unless
/// `--quiet`.
#[derive(Debug, Clone, Copy)]
pub(super) struct FigureFlags {
    pub figures: bool,
    pub quiet: bool,
}

/// Moves staged tables into place (with the figures when `--figures` asks), printing the
/// figures' notes unless `--quiet`.
pub(super) fn commit_tables(out: OutputDir, flags: FigureFlags) -> Result<Vec<PathBuf>> {
    let committed = results::commit_tables(out, flags.figures)?;
    if !flags.quiet {
        for note in &committed.notes {
            eprintln!("asa-analyze: note: {note}");
        }
    }
    Ok(committed.files)
}

/// The results on stdout: JSON with `--json`, else the summary table.
fn print_results(
    output: &RunOutput,
    metrics: &BTreeSet<Metric>,
    written: &[PathBuf],
    args: &MetricArgs,
) -> Result<()> {
    let models: Vec<(String, ModelMetrics)> = output
        .models
        .iter()
        .map(|m| (m.label.clone(), m.metrics.clone()))
        .collect();
    if args.json {
        let doc = json!({
            "models": models.iter().map(|(l, m)| json!({"model": l, "metrics": m})).collect::<Vec<_>>(),
            "qk_series": output.series.iter().map(|r| json!({"model": r.0, "step": r.1, "qk_mean": r.2, "qk_abs_mean": r.3})).collect::<Vec<_>>(),
            "files": written,
        });
        return super::stdout::print_json(&doc);
    }
    report::print_summary(&models, &output.series, metrics)?;
    if !args.quiet {
        eprintln!("wrote {} files to {}", written.len(), args.out.display());
    }
    Ok(())
}

/// The `--profile` phases for run.json: calls, host and total seconds by phase.
fn profile_record() -> BTreeMap<String, ProfilePhase> {
    crate::profile::totals()
        .into_iter()
        .map(|(name, t)| {
            let phase = ProfilePhase {
                calls: t.calls,
                host_s: t.host.as_secs_f64(),
                total_s: t.total.as_secs_f64(),
            };
            (name.to_string(), phase)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Issue 55: `--help` states the defaults of `RunOptions::default()`, the one place they
    /// are set; `--map-size` (an Option, to tell whether it was given) states its own in
    /// words, which must be that one too.
    #[test]
    fn help_states_the_run_options_defaults() {
        let mut cli = crate::cli::Cli::command();
        let analyze = cli.find_subcommand_mut("analyze").unwrap();
        let help = analyze.render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let map_size = help.split("--map-size <MAP_SIZE>").nth(1).unwrap();
        let map_size = map_size.split(" --").next().unwrap();
        let want = format!("[default: {}]", RunSpec::DEFAULT_MAP_SIZE);
        assert!(map_size.contains(&want), "{map_size}");
        let seq_len = help.split("--seq-len <SEQ_LEN>").nth(1).unwrap();
        assert!(seq_len.split(" --").next().unwrap().contains(&format!(
            "[default: {}]",
            RunOptions::default().spec.seq_len
        )));
    }
}
