//! `watch RUN_DIR`: follows the output folder of a training run (the HF Trainer's
//! `checkpoint-N/`, `step-N/`, any trainer that writes step folders) and analyses each step
//! checkpoint once it is complete (`analysis::checkpoint_ready`), appending its rows to
//! `attention_series` under `--out` (with `qk_series`, and the figures with `--figures`).
//! Steps already in the table are skipped, so a restarted watch resumes where it stopped;
//! `--once` analyses what is complete now and exits; Ctrl-C ends it between two commits
//! (the binary's signal thread removes the unfinished output, the committed table stays).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use super::analyze::{self, commit_tables, FigureFlags, MetricArgs, Terminal};
use super::Process;
use asa_analysis::analysis::attention_series::{
    self, empty, qk_points, step_rows, steps_done, without_steps,
};
use asa_analysis::analysis::checkpoint_ready::{step_folders, StepFolder};
use asa_analysis::analysis::series::MAX_STEP;
use asa_analysis::analysis::{ModelSource, Run, RunOptions};
use asa_core::error::{Error, Result};
use asa_metrics::{qk_series_table, Metric};
use asa_tables::{FolderLock, OutputDir, Table};

/// What `watch` computes unless `--metrics` says otherwise: what a training run's attention
/// is watched for (sinks forming, entropy collapse, logit growth, QK^T growth).
const WATCH_METRICS: [Metric; 6] = [
    Metric::FIRST_TOKEN,
    Metric::SINK_RATE,
    Metric::ENTROPY,
    Metric::MAX_LOGIT,
    Metric::QK_MEAN,
    Metric::WEIGHT_SUM,
];

/// `watch`'s arguments: the metric options of `analyze` (its one MODEL is the run folder,
/// `label=path` naming the series' model), and how to follow the folder.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub metric: MetricArgs,
    /// Analyse the complete step checkpoints there now, then exit.
    #[arg(long)]
    pub once: bool,
    /// Seconds between two looks at the folder.
    #[arg(long, default_value_t = 30.0)]
    pub poll: f64,
}

/// Runs `watch`.
pub fn run(args: WatchArgs, process: &Process) -> Result<()> {
    let m = &args.metric;
    if m.models.len() != 1 {
        return Err(Error::usage(
            "watch follows one run folder: `asa-analyze watch [LABEL=]RUN_DIR`",
        ));
    }
    if m.shard.is_some() || m.shard_count.is_some() || m.json || m.profile {
        return Err(Error::usage(
            "--shard, --shard-count, --json and --profile do not apply to watch",
        ));
    }
    if !(args.poll.is_finite() && args.poll > 0.0 && args.poll <= MAX_POLL_SECONDS) {
        return Err(Error::option(
            "--poll",
            format!("must be a number of seconds above 0 and at most {MAX_POLL_SECONDS} (a day)"),
        ));
    }
    let source = analyze::parse_models(&m.models)?.remove(0);
    if !source.path.is_dir() {
        return Err(Error::input(
            &source.path,
            "not a folder: watch follows a run's output folder",
        ));
    }
    // `--metrics` chooses as it does for `analyze`
    let mut options = analyze::run_options(m, &WATCH_METRICS, "analyze")?;
    options.execution.shard = None;
    options.validate()?;
    // one writer a folder: a watch holds its --out for its whole life (from its first
    // commit when the folder is not there yet)
    let held = match m.out.is_dir() {
        true => Some(FolderLock::acquire(&m.out)?),
        false => None,
    };
    let mut watcher = Watcher {
        source,
        options,
        args: &args,
        process,
        held,
        series: existing_series(&m.out)?,
        failed: BTreeMap::new(),
        said_waiting: BTreeSet::new(),
        waiting_notes: Vec::new(),
    };
    let done = steps_done(&watcher.series, &watcher.source.label);
    if !done.is_empty() && !m.quiet {
        eprintln!(
            "asa-analyze: watch: {} step(s) of {} already in {}: skipped",
            done.len(),
            watcher.source.label,
            m.out.join("attention_series").display()
        );
    }
    loop {
        let failed = watcher.look()?;
        if args.once {
            return watcher.once_ended(failed);
        }
        sleep(Duration::from_secs_f64(args.poll), process)?;
    }
}

/// The state of one watch.
struct Watcher<'a> {
    source: ModelSource,
    options: RunOptions,
    args: &'a WatchArgs,
    process: &'a Process,
    /// The lock on `--out`, held between commits.
    held: Option<FolderLock>,
    /// Every row committed so far (read back from `--out` at the start).
    series: Table,
    /// Steps whose analysis failed, with the files' signature then: tried again only when
    /// their files change.
    failed: BTreeMap<u64, Vec<(PathBuf, u64)>>,
    /// Steps already reported as incomplete.
    said_waiting: BTreeSet<u64>,
    /// `--once`: the incomplete steps' notes, said at the end when no step failed (a
    /// failing `--once` says one line, its error).
    waiting_notes: Vec<String>,
}

impl Watcher<'_> {
    /// The end of a `--once` watch: its notes of incomplete steps when every complete step
    /// was analysed; otherwise one error naming each failed step and why.
    fn once_ended(self, failed: Vec<String>) -> Result<()> {
        if failed.is_empty() {
            for note in &self.waiting_notes {
                eprintln!("{note}");
            }
            return Ok(());
        }
        Err(Error::input(
            &self.source.path,
            format!(
                "{} step checkpoint(s) failed to analyse: {}",
                failed.len(),
                failed.join("; ")
            ),
        ))
    }

    /// One look at the folder: every complete step not yet in the series, in step order;
    /// the failed steps, each "step N: why" (said at once unless `--once`). Two folders
    /// claiming one step, or a step past what a table holds, end the watch naming them.
    fn look(&mut self) -> Result<Vec<String>> {
        let run_dir = &self.source.path;
        let steps = step_folders(run_dir).map_err(|e| Error::io(run_dir, e))?;
        check_steps(run_dir, &steps)?;
        let done = steps_done(&self.series, &self.source.label);
        let mut failed = Vec::new();
        for step in steps.iter().filter(|s| !done.contains(&s.step)) {
            self.process.cancel.check()?;
            if let Some(why) = &step.waiting {
                self.say_waiting(step, why);
                continue;
            }
            let signature = signature(&step.dir);
            if self.failed.get(&step.step) == Some(&signature) {
                continue;
            }
            match self.analyse(step) {
                Ok(()) => {
                    self.failed.remove(&step.step);
                }
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => {
                    // a broken checkpoint must not end the watch of the rest of the run
                    let why = format!("step {}: {}", step.step, e.report());
                    if !self.args.once {
                        eprintln!("asa-analyze: watch: {why}");
                    }
                    self.failed.insert(step.step, signature);
                    failed.push(why);
                }
            }
        }
        Ok(failed)
    }

    fn say_waiting(&mut self, step: &StepFolder, why: &str) {
        let quiet = self.args.metric.quiet;
        let note = format!(
            "asa-analyze: watch: step {} ({}) is not complete yet: {why}",
            step.step,
            step.dir.display()
        );
        if self.args.once {
            self.waiting_notes.push(note);
        } else if !quiet && self.said_waiting.insert(step.step) {
            eprintln!("{note}");
        }
    }

    /// Analyses one complete step and commits the series with its rows.
    fn analyse(&mut self, step: &StepFolder) -> Result<()> {
        let started = Instant::now();
        let m = &self.args.metric;
        let staging = &self.process.staging;
        let mut out = match &self.held {
            Some(held) => OutputDir::create_held(&m.out, m.format, staging, held)?,
            None => OutputDir::create(&m.out, m.format, staging)?,
        };
        if self.held.is_none() {
            self.held = Some(out.lock()?);
        }
        let mut options = self.options.clone();
        options.execution.scratch_dir = Some(out.staging().to_path_buf());
        let run = Run {
            models: vec![ModelSource::at(self.source.label.clone(), step.dir.clone())],
            options,
            cancel: self.process.cancel.clone(),
        };
        let mut terminal = Terminal {
            quiet: m.quiet,
            bar: None,
        };
        let output = run.execute(&mut terminal)?;
        let attention = output
            .tables()
            .into_iter()
            .find(|t| t.name == "attention")
            .ok_or_else(|| Error::input(&step.dir, "the analysis gave no attention table"))?;
        let mut series = without_steps(&self.series, &self.source.label, &[step.step].into());
        series.append(step_rows(step.step, &attention));
        out.write(&series)?;
        let points = qk_points(&series);
        if !points.is_empty() {
            out.write(&qk_series_table(&points))?;
        }
        let mut record = output.record("watch", &run.options);
        record.options["format"] = json!(m.format);
        record.options["run_dir"] = json!(self.source.path);
        record.options["step"] = json!(step.step);
        record.seconds = started.elapsed().as_secs_f64();
        out.write_bytes("run.json", record.to_json()?.as_bytes())?;
        let flags = FigureFlags {
            figures: m.figures,
            quiet: m.quiet,
        };
        commit_tables(out, flags)?;
        self.series = series;
        if !m.quiet {
            eprintln!(
                "asa-analyze: watch: step {} of {} analysed in {:.1} s: {}",
                step.step,
                self.source.label,
                started.elapsed().as_secs_f64(),
                m.out.join("attention_series").display()
            );
        }
        Ok(())
    }
}

/// The longest `--poll`: a day.
const MAX_POLL_SECONDS: f64 = 86_400.0;

/// Refuses step folders a series cannot hold: two claiming one step (`checkpoint-010` and
/// `checkpoint-10`), or a step past the largest a table's step column holds.
fn check_steps(run_dir: &Path, steps: &[StepFolder]) -> Result<()> {
    if let Some(s) = steps.iter().find(|s| s.step > MAX_STEP) {
        return Err(Error::input(
            &s.dir,
            format!(
                "step {} is past the largest step a series holds ({MAX_STEP})",
                s.step
            ),
        ));
    }
    if let Some(pair) = steps.windows(2).find(|w| w[0].step == w[1].step) {
        return Err(Error::input(
            run_dir,
            format!(
                "two checkpoints claim step {}: {} and {}",
                pair[0].step,
                pair[0].dir.display(),
                pair[1].dir.display()
            ),
        ));
    }
    Ok(())
}

/// The `attention_series` table already under `out` (CSV or Parquet), or an empty one.
fn existing_series(out: &Path) -> Result<Table> {
    Ok(attention_series::read_in(out)?.unwrap_or_else(empty))
}

/// The names and sizes of the files in `dir` (what a retry after a failure waits to see
/// change).
fn signature(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
        .collect();
    files.sort();
    files
}

/// Waits `time`, waking to end early when the run is cancelled.
fn sleep(time: Duration, process: &Process) -> Result<()> {
    let until = Instant::now() + time;
    while Instant::now() < until {
        process.cancel.check()?;
        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(100)));
    }
    Ok(())
}
