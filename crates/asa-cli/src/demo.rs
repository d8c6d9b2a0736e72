//! `demo`: trains baseline (softmax), sink, Affine-Scaled, gated and Affine-Scaled + gated
//! models here with the same data, seed and budget, then runs the toolkit on them end to
//! end: `analyze` on the final checkpoints over held-out text (with `qk` over each
//! checkpoint series), `grad-stats`, `spikes` and `curves` over the training logs,
//! `figures`, and the paper's Tables 1-2 (`tables`). Glue only: every step calls the
//! library function its command calls, with the command's options. Layout of `--out`:
//!
//! ```text
//! DIR/tokenizer.json              BPE tokenizer shared by the runs
//! DIR/runs/{baseline,sink,asa,gated,asa_gated}/   log.csv, checkpoints/step-N/, train.json
//! DIR/results/{attention,grad_stats,spikes,curves,tables}/   the exported tables
//! DIR/figures/                    every figure (PNG + SVG) and tables4_5.md
//! DIR/report.html                 the HTML report of the results (`report`)
//! ```
//!
//! Training that finished with the same options is reused unless `--force`. The runs
//! train in parallel threads with one compute thread each: on a small model that is faster
//! than sharing the cores per matmul. The compute threads of candle's and rayon's pools are
//! read from the environment once per process, so the binary's `main`, which owns the
//! process, sets `RAYON_NUM_THREADS=1` for `demo` (unless the environment sets it); the
//! library changes nothing of the process.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser};
use indicatif::MultiProgress;

use super::analyze::Terminal;
use super::stdout::with_stdout;
use super::tables::{record as tables_record, write_tables};
use super::train::{step_bar, TrainSettings};
use super::Process;
use crate::results::stage_tables;
use asa_analysis::analysis::series::find_series;
use asa_analysis::analysis::{Execution, ModelSource, Run, RunInputs, RunOptions, RunSpec};
use asa_analysis::train::data::TextSource;
use asa_analysis::train::run::finished_run;
use asa_analysis::train::tokenizer::train_bpe;
use asa_analysis::train::{self, TrainOptions, TrainSummary};
use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;
use asa_engine::device::DeviceRequest;
use asa_figures::paper::runs::Input;
use asa_figures::paper::{paper_tables, RunSet, ValueOptions};
use asa_figures::plot::{self, FigureOptions};
use asa_logs::report::{self, CurvesOptions, GradStatsOptions, LogFiles, LogInputs, SpikesOptions};
use asa_logs::spikes::SpikeRow;
use asa_logs::StepWindow;
use asa_tables::schema::ATTENTION;
use asa_tables::{Column, Format, OutputDir, Table};

/// The methods the demo compares: (label, variant); the first three make the paper's
/// Table 1, the baseline and the last two its Table 2.
pub const METHODS: [(&str, VariantKind); 5] = [
    ("baseline", VariantKind::Softmax),
    ("sink", VariantKind::Sink),
    ("asa", VariantKind::AffineScaled),
    ("gated", VariantKind::Gated),
    ("asa_gated", VariantKind::AffineScaledGated),
];

/// The size label of the demo's rows in Tables 1-2.
const DEMO_SIZE: &str = "demo";

/// Seed offset of the held-out built-in prose (the training text uses `--seed`).
const HELD_OUT_SEED: u64 = 1_000_003;

/// `demo [--out DIR] [--steps N] [--corpus FILE] [--device ...]`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Output folder.
    #[arg(long, default_value = "demo", value_name = "DIR")]
    pub out: PathBuf,
    /// Training steps per model.
    #[arg(long, default_value_t = 500)]
    pub steps: usize,
    /// Train on this text (.txt or .jsonl; its last 10% is held out for the analysis)
    /// instead of the built-in generated prose.
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    pub device: DeviceRequest,
    /// Seed of the weights, the batch order and the built-in training text.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// lm-eval-harness result JSON of a demo model, METHOD=FILE (repeatable; METHOD one of
    /// baseline, sink, asa, gated, asa_gated): fills Tables 1-2's accuracy columns.
    #[arg(long = "lm-eval", value_name = "METHOD=FILE")]
    pub lm_eval: Vec<String>,
    /// Retrain even when a finished run with the same options exists.
    #[arg(long)]
    pub force: bool,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `TrainSettings` at their `train` defaults.
#[derive(Parser)]
struct Defaults {
    #[command(flatten)]
    settings: TrainSettings,
}

/// Runs `demo`: check the arguments, train, analyse, the log tables, the figures, the
/// paper tables, the summary.
pub fn run(args: DemoArgs, process: &Process) -> Result<()> {
    let started = Instant::now();
    check_args(&args)?;
    let out = args.out.clone();
    std::fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
    let (settings, held_out) = demo_settings(&args)?;
    let base = settings.options(VariantKind::Softmax, out.clone())?;
    let tokenizer = shared_tokenizer(&base, &out, args.force)?;
    let reuse = Reuse {
        force: args.force,
        quiet: args.quiet,
    };
    let summaries = train_all(&settings, &tokenizer, &out, reuse, process)?;
    let trained_at = started.elapsed().as_secs_f64();

    let results = out.join("results");
    if !args.quiet {
        eprintln!("asa-analyze: demo: analysing the final checkpoints and the checkpoint series");
    }
    let run = analysis_run(&args, &settings, held_out, process);
    let attention = analyze_in_process(run, &results.join("attention"), args.quiet, process)?;
    let spikes = log_tables(&out, &results, process)?;
    let figures = out.join("figures");
    let dirs = ["attention", "grad_stats", "spikes", "curves"].map(|sub| results.join(sub));
    plot::write_figures(&dirs, &figures, &FigureOptions::default(), &process.staging)?;
    paper_tables_of_demo(&out, &results, &args.lm_eval, process)?;
    let report = out.join("report.html");
    let shown =
        ["attention", "grad_stats", "spikes", "curves", "tables"].map(|sub| results.join(sub));
    asa_figures::report::write(&shown, &report)?;

    print_summary(&summaries, &attention, &spikes)?;
    if !args.quiet {
        eprintln!(
            "asa-analyze: demo: done in {:.0}s (training {:.0}s); tables in {}, figures in {}, report {}",
            started.elapsed().as_secs_f64(),
            trained_at,
            results.display(),
            figures.display(),
            report.display()
        );
    }
    Ok(())
}

/// Refuses no steps, an `--lm-eval` that names no demo model or file, or a missing
/// corpus, before anything is written.
fn check_args(args: &DemoArgs) -> Result<()> {
    if args.steps == 0 {
        return Err(Error::option("--steps", "must be at least 1"));
    }
    check_lm_eval(&args.lm_eval)?;
    if let Some(c) = &args.corpus {
        if !c.is_file() {
            return Err(Error::input(c, "no such corpus file"));
        }
    }
    Ok(())
}

/// The training settings (the `train` defaults with the demo's budget) and the held-out
/// text: the built-in prose (`None`: another seed) or the corpus file split 90 / 10.
fn demo_settings(args: &DemoArgs) -> Result<(TrainSettings, Option<PathBuf>)> {
    let mut settings = Defaults::parse_from(["demo"]).settings;
    settings.steps = args.steps;
    settings.seed = args.seed;
    settings.device = args.device;
    settings.warmup = settings.warmup.min(args.steps / 5);
    settings.save_every = Some((args.steps / 10).max(1));
    let held_out = match &args.corpus {
        Some(path) => {
            let (train_txt, held) = split_corpus(path, &args.out.join("data"))?;
            settings.corpus = Some(train_txt);
            Some(held)
        }
        None => None,
    };
    Ok((settings, held_out))
}

/// The analysis of every method's checkpoint series over the held-out text.
fn analysis_run(
    args: &DemoArgs,
    settings: &TrainSettings,
    held_out: Option<PathBuf>,
    process: &Process,
) -> Run {
    let models = METHODS
        .iter()
        .map(|(label, _)| {
            ModelSource::at(
                label.to_string(),
                args.out.join("runs").join(label).join("checkpoints"),
            )
        })
        .collect();
    let options = RunOptions {
        spec: RunSpec {
            seq_len: settings.seq_len,
            num_seqs: 10,
            seed: args.seed + HELD_OUT_SEED,
            ..RunSpec::default()
        },
        inputs: RunInputs {
            corpus: held_out,
            ..RunInputs::default()
        },
        execution: Execution {
            device: args.device,
            ..Execution::default()
        },
    };
    Run {
        models,
        options,
        cancel: process.cancel.clone(),
    }
}

/// `grad-stats`, `spikes` and `curves` over the training logs into `results/<table>/`, as
/// the commands write them; the spike rows for the summary.
fn log_tables(out: &Path, results: &Path, process: &Process) -> Result<Vec<SpikeRow>> {
    let inputs = LogInputs {
        runs: METHODS
            .iter()
            .map(|(label, _)| {
                let log = out.join("runs").join(label).join("log.csv");
                format!("{label}={}", log.display())
            })
            .collect(),
        step_column: None,
    };
    let write = |files: LogFiles, name: &str| {
        files.write(&results.join(name), Format::Csv, &process.staging)
    };
    let grad = GradStatsOptions {
        metric: "grad_norm".into(),
        steps: StepWindow::ALL,
        ddof: 1,
    };
    write(report::grad_stats(&inputs, &grad)?.files(), "grad_stats")?;
    let spikes = SpikesOptions {
        metric: "grad_norm".into(),
        steps: None,
        k: vec![6.0, 9.0],
        mad_scale: 1.0,
    };
    let spikes = report::spikes(&inputs, &spikes)?;
    write(spikes.files(), "spikes")?;
    let curves = CurvesOptions {
        ema: Some(0.9),
        ..CurvesOptions::default()
    };
    write(report::curves(&inputs, &curves)?.files(), "curves")?;
    Ok(spikes.result.rows)
}

/// Refuses an `--lm-eval` argument that names no demo model or no file, before training.
fn check_lm_eval(lm_eval: &[String]) -> Result<()> {
    for arg in lm_eval {
        let Some((method, file)) = arg.split_once('=') else {
            return Err(Error::option(
                "--lm-eval",
                format!("takes METHOD=FILE, got `{arg}`"),
            ));
        };
        if !METHODS.iter().any(|(label, _)| *label == method) {
            return Err(Error::option(
                "--lm-eval",
                format!("{arg}: no demo model {method} (baseline, sink, asa, gated, asa_gated)"),
            ));
        }
        if !Path::new(file).is_file() {
            return Err(Error::input(file, "no such lm-eval-harness result file"));
        }
    }
    Ok(())
}

/// Tables 1-2 of the paper for the demo's models into `results/tables/`: Delta Params from
/// the final checkpoints, the final loss (mean of the last 10 steps, as the summary), the
/// perplexity of the analysis, the accuracies of any `--lm-eval` results.
fn paper_tables_of_demo(
    out: &Path,
    results: &Path,
    lm_eval: &[String],
    process: &Process,
) -> Result<()> {
    let mut set = RunSet::default();
    let attention = results.join("attention");
    for (label, _) in METHODS {
        let run = out.join("runs").join(label);
        let last = find_series(&run.join("checkpoints"))?
            .and_then(|steps| steps.last().map(|s| s.dir.clone()))
            .ok_or_else(|| Error::input(run.join("checkpoints"), "no step checkpoints"))?;
        let key = format!("{DEMO_SIZE}/{label}");
        set.add_option(Input::Checkpoint, &format!("{key}={}", last.display()))?;
        set.add_option(
            Input::Log,
            &format!("{key}={}", run.join("log.csv").display()),
        )?;
        set.add_option(Input::Results, &format!("{key}={}", attention.display()))?;
    }
    for arg in lm_eval {
        set.add_option(Input::LmEval, &format!("{DEMO_SIZE}/{arg}"))?;
    }
    let options = ValueOptions {
        loss_window: 10,
        loss_metric: "loss".into(),
        accuracy: Default::default(),
    };
    let tables = paper_tables(
        &set,
        &options,
        &asa_analysis::analysis::checkpoint_facts::ModelCheckpoints,
    )?;
    let mut dir = OutputDir::create(&results.join("tables"), Format::Csv, &process.staging)?;
    write_tables(&tables, &mut dir, &tables_record(&set, &options, &tables))?;
    dir.commit()?;
    Ok(())
}

/// Whether finished training runs are redone (`--force`) and progress is shown.
#[derive(Debug, Clone, Copy)]
struct Reuse {
    force: bool,
    quiet: bool,
}

/// Trains every method in parallel (a finished run with the same options is reused unless
/// `force`), one progress bar each.
fn train_all(
    settings: &TrainSettings,
    tokenizer: &Path,
    out: &Path,
    Reuse { force, quiet }: Reuse,
    process: &Process,
) -> Result<Vec<TrainSummary>> {
    let mut plans = Vec::new();
    for (label, variant) in METHODS {
        let mut opts = settings.options(variant, out.join("runs").join(label))?;
        opts.tokenizer = Some(tokenizer.to_path_buf());
        let done = if force { None } else { finished_run(&opts) };
        plans.push((label, opts, done));
    }
    let bars = MultiProgress::new();
    let summaries: Vec<Result<TrainSummary>> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|(label, opts, done)| {
                let bars = &bars;
                scope.spawn(move || match done {
                    Some(summary) => {
                        if !quiet {
                            eprintln!(
                                "asa-analyze: demo: reusing the finished {label} run in {}",
                                opts.out.display()
                            );
                        }
                        Ok(summary.clone())
                    }
                    None => {
                        let bar = bars.add(step_bar(quiet, opts.steps, label));
                        let summary = train::train(opts, &process.staging, &mut |row| {
                            bar.set_position(row.step as u64);
                            bar.set_message(format!("loss {:.3}", row.loss));
                        });
                        bar.finish();
                        summary
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("training thread"))
            .collect()
    });
    summaries.into_iter().collect()
}

/// Runs `run` through the library and writes its tables as `analyze` does; the
/// `attention` table, for the summary.
fn analyze_in_process(run: Run, out: &Path, quiet: bool, process: &Process) -> Result<Table> {
    let mut dir = OutputDir::create(out, Format::Csv, &process.staging)?;
    let mut terminal = Terminal { quiet, bar: None };
    let output = run.execute(&mut terminal)?;
    stage_tables(&mut dir, &output, &output.record("analyze", &run.options))?;
    dir.commit()?;
    output
        .tables()
        .into_iter()
        .find(|t| t.name == ATTENTION.name)
        .ok_or_else(|| Error::input(out, "the analysis wrote no attention table"))
}

/// The tokenizer the three runs share: `DIR/tokenizer.json`, trained on the training text
/// unless one trained on the same text is there already.
fn shared_tokenizer(opts: &TrainOptions, out: &Path, force: bool) -> Result<PathBuf> {
    let path = out.join("tokenizer.json");
    let stamp = out.join("tokenizer.source.json");
    let source = serde_json::json!({ "text": opts.text, "vocab_size": opts.arch.vocab_size });
    let same = std::fs::read_to_string(&stamp)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v == source);
    if same && !force && path.is_file() {
        return Ok(path);
    }
    let docs = train::data::documents(&opts.text)?;
    train_bpe(docs.iter(), opts.arch.vocab_size, &path)?;
    train::checkpoint::write_json(&stamp, &source)?;
    Ok(path)
}

/// Splits a corpus file into `dir/train.txt` (first 90% of the text, at a line break) and
/// `dir/heldout.txt` (the rest); `.jsonl` is split by documents.
fn split_corpus(path: &Path, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let docs = train::data::documents(&TextSource::File(path.to_path_buf()))?;
    let (train_text, held) = if docs.len() >= 10 {
        let cut = docs.len() * 9 / 10;
        (docs[..cut].join("\n\n"), docs[cut..].join("\n\n"))
    } else {
        let text = docs.join("\n\n");
        let mut cut = text.len() * 9 / 10;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = text[..cut]
            .rfind('\n')
            .map(|i| i + 1)
            .filter(|&i| i > 0)
            .unwrap_or(cut);
        (text[..cut].to_string(), text[cut..].to_string())
    };
    if held.trim().is_empty() || train_text.trim().is_empty() {
        return Err(Error::input(
            path,
            "too short to hold out 10% for the analysis",
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let (t, h) = (dir.join("train.txt"), dir.join("heldout.txt"));
    for (p, text) in [(&t, &train_text), (&h, &held)] {
        let same = std::fs::read_to_string(p).is_ok_and(|old| &old == text);
        if !same {
            std::fs::write(p, text).map_err(|e| Error::io(p, e))?;
        }
    }
    Ok((t, h))
}

/// Per method: final loss, perplexity, first-token mass, mean entropy, spike counts.
fn print_summary(summaries: &[TrainSummary], attention: &Table, spikes: &[SpikeRow]) -> Result<()> {
    let rows = attention_rows(attention);
    let layer_mean = |model: &str, metric: &str| -> Option<f64> {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| r.model == model && r.metric == metric && r.stat == "mean")
            .filter(|r| r.layer.is_some() && r.head.is_none())
            .filter_map(|r| r.value)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let ppl = |model: &str| -> Option<f64> {
        rows.iter()
            .find(|r| r.model == model && r.metric == "ppl" && r.stat == "mean")
            .and_then(|r| r.value)
    };
    let spike = |model: &str, k: f64| -> String {
        spikes
            .iter()
            .find(|r| r.run == model && r.metric == "grad_norm" && r.k == k)
            .map(|r| r.count.to_string())
            .unwrap_or_else(|| "-".into())
    };
    let f = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    with_stdout(|out| {
        writeln!(out)?;
        writeln!(
            out,
            "{:<9} {:>12} {:>10} {:>11} {:>9} {:>11} {:>11}",
            "method", "variant", "final_loss", "perplexity", "first_tok", "entropy", "spikes k=6/9"
        )?;
        for ((label, _), s) in METHODS.iter().zip(summaries) {
            writeln!(
                out,
                "{:<9} {:>12} {:>10.4} {:>11} {:>9} {:>11} {:>11}",
                label,
                short(&s.variant),
                s.final_loss,
                f(ppl(label)),
                f(layer_mean(label, "first_token")),
                f(layer_mean(label, "entropy")),
                format!("{}/{}", spike(label, 6.0), spike(label, 9.0)),
            )?;
        }
        Ok(())
    })
}

/// One row of the `attention` table.
struct AttentionRow<'a> {
    model: &'a str,
    metric: &'a str,
    layer: Option<i64>,
    head: Option<i64>,
    stat: &'a str,
    value: Option<f64>,
}

/// The rows of the `attention` table the analysis built (its columns as [`ATTENTION`]
/// declares them).
fn attention_rows(t: &Table) -> Vec<AttentionRow<'_>> {
    let text = |name: &str| match t.column(name) {
        Some(Column::Str(v)) => v.as_slice(),
        _ => unreachable!("attention.{name} is text"),
    };
    let int = |name: &str| match t.column(name) {
        Some(Column::Int(v)) => v.as_slice(),
        _ => unreachable!("attention.{name} is integer"),
    };
    let (model, metric, stat) = (text("model"), text("metric"), text("stat"));
    let (layer, head) = (int("layer"), int("head"));
    let Some(Column::Float(value)) = t.column("value") else {
        unreachable!("attention.value is float")
    };
    (0..t.height())
        .map(|i| AttentionRow {
            model: model[i].as_deref().unwrap_or(""),
            metric: metric[i].as_deref().unwrap_or(""),
            layer: layer[i],
            head: head[i],
            stat: stat[i].as_deref().unwrap_or(""),
            value: value[i],
        })
        .collect()
}

fn short(variant: &str) -> &str {
    match variant {
        "affine_scaled" => "affine",
        "affine_scaled_gated" => "affine+gated",
        other => other,
    }
}
