//! `analyze` and the one-metric commands (`entropy`, `first-token`, `weight-sums`, `qk`,
//! `heads`, `heatmap`, `profile`, `sink`, `alpha`, `nll`, `sink-rate`, `distance`): models
//! as `label=path`, a corpus, one forward pass per batch computing every metric asked for,
//! tidy tables under `--out`, a compact table on stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::choice::choice;
use super::report;
use super::run_args::RunArgs;
use super::Process;
use crate::results::{self, stage_tables};
use asa_analysis::analysis::partial::{shard_info, stage_partial};
use asa_analysis::analysis::record::{ModelRecord, ProfilePhase};
use asa_analysis::analysis::run_option::{run_options_from, FrontEnd};
use asa_analysis::analysis::shard::Shard;
use asa_analysis::analysis::{kernel_layers, ModelSource, Run, RunEvents, RunOptions, RunOutput};
use asa_core::error::{Error, Result};
use asa_engine::device::resolve_device;
use asa_metrics::{Metric, ModelMetrics};
use asa_tables::{Format, OutputDir};

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
    /// The run's options (`RUN_OPTIONS`: the same as Python's keyword arguments).
    #[command(flatten)]
    pub run: RunArgs,
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

/// The library's options for these arguments: the run's options as given (else their
/// defaults), the command's own `metrics` unless `analyze --metrics` names them, the corpus
/// and the shard (from `--shard`, `--shard-count` or a job array's environment).
pub(super) fn run_options(
    args: &MetricArgs,
    metrics: &[Metric],
    command: &str,
) -> Result<RunOptions> {
    if args.run.has("metrics") && command != "analyze" {
        return Err(Error::option(
            "--metrics",
            format!("applies to `analyze`; `{command}` computes its own metric"),
        ));
    }
    let mut options = run_options_from(&args.run.given, FrontEnd::CommandLine)?;
    if !args.run.has("metrics") {
        // the command's own set; `analyze`'s (and `watch`'s) with the probe's own metric
        let probe_metric = options.spec.metrics.contains(&Metric::INDUCTION_SCORE);
        options.spec.metrics = metrics.iter().copied().collect::<BTreeSet<_>>();
        if probe_metric && command == "analyze" {
            options.spec.metrics.insert(Metric::INDUCTION_SCORE);
        }
    }
    options.inputs.corpus = args.corpus.clone();
    let shard = Shard::resolve(args.shard.as_deref(), args.shard_count, |k| {
        std::env::var(k).ok()
    })?;
    // 0/1 asks for a whole run (inside a job array, say)
    options.execution.shard = shard.filter(|s| s.count != 1);
    Ok(options)
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
        asa_core::profile::enable(&resolve_device(options.execution.device)?);
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
        eprint!("{}", asa_core::profile::report(started.elapsed()));
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
    asa_core::profile::totals()
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
    use clap::{CommandFactory, Parser};

    use super::*;

    /// Issue 66: every run option of the one declaration (`RUN_OPTIONS`) is a flag of each
    /// metric command, with its help and the default of `RunOptions::default()`.
    #[test]
    fn help_states_every_run_option_with_its_default() {
        let mut cli = crate::Cli::command();
        for command in ["analyze", "entropy", "watch"] {
            let sub = cli.find_subcommand_mut(command).unwrap();
            let help = sub.render_long_help().to_string();
            let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
            for option in asa_analysis::analysis::run_option::RUN_OPTIONS {
                let flag = format!("--{}", option.flag());
                let first_words = option.help.split_whitespace().take(3).collect::<Vec<_>>();
                let first_words = first_words.join(" ");
                // a flag's help follows it; a value's after its <NAME>
                let starts = match option.kind {
                    asa_analysis::analysis::run_option::OptionKind::Flag => {
                        format!("{flag} {first_words}")
                    }
                    _ => format!("{flag} <"),
                };
                let after = help
                    .split(&starts)
                    .nth(1)
                    .unwrap_or_else(|| panic!("{command}: {flag}"));
                let own = after.split(" --").next().unwrap();
                assert!(
                    own.contains(&first_words) || starts.ends_with(&first_words),
                    "{command} {flag}: {own}"
                );
                if let Some(default) = option.default_text() {
                    assert!(
                        own.contains(&format!("[default: {default}]")),
                        "{command} {flag}: {own}"
                    );
                }
            }
        }
        let seq_len = RunOptions::default().spec.seq_len.to_string();
        let option = asa_analysis::analysis::run_option::RUN_OPTIONS
            .iter()
            .find(|o| o.name == "seq_len")
            .unwrap();
        assert_eq!(option.default_text(), Some(seq_len));
    }

    /// Only what was typed is given (a default is not), and the library's one parser reads
    /// it, refusing what Python's keyword would be refused with, in the same words.
    #[test]
    fn flags_parse_as_the_library_and_only_typed_ones_are_given() {
        let cli = crate::Cli::try_parse_from([
            "asa-analyze",
            "analyze",
            "m",
            "--dtype",
            "bf16",
            "--allow-nonfinite",
        ])
        .unwrap();
        let crate::Command::Analyze(args) = cli.command else {
            panic!("not analyze")
        };
        let given: Vec<(&str, &str)> = args
            .run
            .given
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(given, [("allow_nonfinite", "true"), ("dtype", "bf16")]);
        let options = run_options(&args, &[], "analyze").unwrap();
        assert_eq!(options.spec.dtype, Some(candle_core::DType::BF16));
        assert!(options.spec.allow_nonfinite);
        let cli =
            crate::Cli::try_parse_from(["asa-analyze", "analyze", "m", "--seq-len=-3"]).unwrap();
        let crate::Command::Analyze(args) = cli.command else {
            panic!("not analyze")
        };
        let err = run_options(&args, &[], "analyze").unwrap_err().to_string();
        assert_eq!(err, "--seq-len must be a whole number >= 0, got `-3`");
    }
}
