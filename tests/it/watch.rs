//! `watch`: a training run's folder followed step by step into attention_series; only
//! complete checkpoints are read, every step appears once, a restart resumes, and each
//! step's rows are those `analyze` gives for that checkpoint.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{copy_fixture, expect_error, expect_success, model_dir, run_cli};

const FIXTURE: &str = "llama_gqa";
const ARGS: [&str; 4] = ["--seq-len", "32", "--num-seqs", "2"];
const METRICS: &str = "first_token,sink_rate,entropy,max_logit,qk_mean,weight_sum";

/// (metric, layer, head, stat) -> value of each step of `model` in `csv`
/// (attention_series.csv, or attention.csv with `step` 0).
fn rows(csv: &Path, model: Option<&str>) -> BTreeMap<u64, BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let mut out: BTreeMap<u64, BTreeMap<String, f64>> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if model.is_some_and(|m| f[0] != m) {
            continue;
        }
        let step = col("step").map_or(0, |c| f[c].parse().unwrap());
        let key = ["metric", "layer", "head", "stat"]
            .map(|n| f[col(n).unwrap()])
            .join("/");
        let value: f64 = f[col("value").unwrap()].parse().unwrap();
        let previous = out.entry(step).or_default().insert(key.clone(), value);
        assert!(
            previous.is_none(),
            "{key} of step {step} twice in {}",
            csv.display()
        );
    }
    out
}

/// A run folder with step checkpoints `steps` of the fixture.
fn run_folder(root: &Path, steps: &[u64]) -> std::path::PathBuf {
    let run = root.join("run");
    for step in steps {
        copy_fixture(FIXTURE, &run.join(format!("checkpoint-{step}")));
    }
    // a trainer's other folders are not steps
    std::fs::create_dir_all(run.join("runs")).unwrap();
    run
}

/// `analyze` of the fixture with watch's metrics: the rows every step must have.
fn analyze_rows(root: &Path) -> BTreeMap<String, f64> {
    let dir = model_dir(FIXTURE).display().to_string();
    let mut args = vec![
        "analyze",
        &dir,
        "--out",
        "single",
        "--metrics",
        METRICS,
        "--quiet",
    ];
    args.extend(ARGS);
    expect_success(&run_cli(root, &args));
    rows(&root.join("single/attention.csv"), None)
        .remove(&0)
        .unwrap()
}

#[test]
fn watch_once_reads_complete_steps_and_a_restart_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let run = run_folder(root, &[10, 20]);
    // step 30 is being written: its last shard is cut short
    let partial = run.join("checkpoint-30");
    copy_fixture(FIXTURE, &partial);
    let shard = partial.join("model-00003-of-00003.safetensors");
    let whole = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &whole[..whole.len() - 100]).unwrap();
    let watch = |root: &Path| {
        let mut args = vec!["watch", "run", "--once", "--out", "out"];
        args.extend(ARGS);
        let output = run_cli(root, &args);
        expect_success(&output);
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    let said = watch(root);
    assert!(
        said.contains("step 30") && said.contains("not complete yet"),
        "{said}"
    );
    let series = root.join("out/attention_series.csv");
    let want = analyze_rows(root);
    let got = rows(&series, Some("run"));
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), [10, 20]);
    for (step, values) in &got {
        // the same checkpoint, the same corpus: the same numbers as `analyze`
        assert_eq!(values, &want, "step {step}");
    }
    // the step completes; a second watch analyses it alone
    std::fs::write(&shard, &whole).unwrap();
    let said = watch(root);
    assert!(said.contains("2 step(s) of run already in"), "{said}");
    assert!(said.contains("step 30 of run analysed"), "{said}");
    assert!(!said.contains("step 10 of run analysed"), "{said}");
    let got = rows(&series, Some("run"));
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), [10, 20, 30]);
    assert_eq!(got[&30], want);
    // qk_series follows the table, and `figures` draws both series
    let qk = std::fs::read_to_string(root.join("out/qk_series.csv")).unwrap();
    assert_eq!(qk.lines().count(), 4, "{qk}");
    expect_success(&run_cli(root, &["figures", "out", "--out", "figs"]));
    for fig in ["fig2_qk_mean", "sink_emergence"] {
        assert!(root.join(format!("figs/{fig}.png")).is_file(), "{fig}");
    }
}

/// Issue 54: a step is analysed once, under one number. Two folders claiming one step
/// (`checkpoint-010`, `checkpoint-10`) and a step past what the series' step column holds are
/// refused naming them (exit 2, nothing written); `--once` with a step that fails exits 2; a
/// `--poll` past a day is refused before anything runs (it overflowed the clock).
#[test]
fn watch_refuses_steps_a_series_cannot_hold_and_says_when_once_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let watch = |root: &Path, extra: &[&str]| {
        let mut args = vec!["watch", "run", "--once", "--out", "out", "--quiet"];
        args.extend(ARGS);
        args.extend(extra);
        run_cli(root, &args)
    };
    let run = run_folder(root, &[10]);
    copy_fixture(FIXTURE, &run.join("checkpoint-010"));
    let output = watch(root, &[]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("two checkpoints claim step 10")
            && said.contains("checkpoint-010")
            && said.contains("checkpoint-10"),
        "{said}"
    );
    assert!(!root.join("out").exists());
    std::fs::remove_dir_all(run.join("checkpoint-010")).unwrap();
    copy_fixture(FIXTURE, &run.join("checkpoint-18446744073709551615"));
    let output = watch(root, &[]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("step 18446744073709551615")
            && said.contains("past the largest step a series holds (9223372036854775807)"),
        "{said}"
    );
    assert!(!root.join("out").exists());
    std::fs::remove_dir_all(run.join("checkpoint-18446744073709551615")).unwrap();
    // steps that cannot be analysed: --once says so with exit 2 in one line naming each
    // (the fuzz harness found one line per step, then the count), the good step is kept
    for step in ["checkpoint-20", "checkpoint-30"] {
        copy_fixture(FIXTURE, &run.join(step));
        std::fs::write(
            run.join(step).join("config.json"),
            "{\"model_type\": \"llama\"}",
        )
        .unwrap();
    }
    let output = watch(root, &[]);
    let said = expect_error(&output);
    assert!(
        said.contains("2 step checkpoint(s) failed to analyse: step 20: ")
            && said.contains("; step 30: ")
            && said.contains("checkpoint-30/config.json"),
        "{said}"
    );
    std::fs::remove_dir_all(run.join("checkpoint-30")).unwrap();
    assert_eq!(
        rows(&root.join("out/attention_series.csv"), Some("run"))
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [10]
    );
    for poll in ["1e19", "86401", "0", "nan"] {
        let output = run_cli(root, &["watch", "run", "--out", "out2", "--poll", poll]);
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "--poll {poll}: {said}");
        assert!(
            said.contains("--poll must be a number of seconds above 0 and at most 86400"),
            "{said}"
        );
    }
}

/// Issue 54: one writer a folder. A watch holds its `--out` for its whole life, between
/// commits too; a second watch on it is refused at once naming the first one's pid, and
/// writes nothing (it used to erase the rows the other committed).
#[cfg(unix)]
#[test]
fn a_second_watch_on_one_output_folder_is_refused_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    run_folder(root, &[10]);
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(["watch", "run", "--out", "out", "--poll", "1", "--quiet"])
        .args(ARGS)
        .current_dir(root)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let series = root.join("out/attention_series.csv");
    let start = Instant::now();
    while !series.is_file() && start.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(series.is_file(), "the first watch committed step 10");
    let before = std::fs::read(&series).unwrap();
    let mut args = vec!["watch", "run", "--once", "--out", "out"];
    args.extend(ARGS);
    let output = run_cli(root, &args);
    first.kill().unwrap();
    first.wait().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!(
            "another asa-analyze run (pid {}) is writing to this output folder",
            first.id()
        )),
        "{said}"
    );
    assert_eq!(std::fs::read(&series).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn watch_reads_no_checkpoint_a_second_process_is_still_writing() {
    use std::io::Write;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let run = run_folder(&root, &[10]);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
    command
        .args(["watch", "run", "--poll", "0.05", "--out", "out"])
        .args(ARGS)
        .current_dir(&root)
        .stderr(std::process::Stdio::piped());
    // SAFETY: only resets SIGINT's disposition in the child before exec (a test runner
    // started in the background passes it down ignored)
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let child = command.spawn().unwrap();
    // the trainer writes step 20 file by file, each file in pieces, pausing far longer
    // than the watch's poll between them (a "sizes stable" rule would read it half-written)
    let step = run.join("checkpoint-20");
    std::fs::create_dir(&step).unwrap();
    let mut names: Vec<_> = std::fs::read_dir(model_dir(FIXTURE))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    // config first, the index after the shards, as save_pretrained writes them
    names.sort_by_key(|n| {
        (
            n != "config.json",
            n == "model.safetensors.index.json",
            n.clone(),
        )
    });
    for name in names {
        let bytes = std::fs::read(model_dir(FIXTURE).join(&name)).unwrap();
        let mut file = std::fs::File::create(step.join(&name)).unwrap();
        for piece in bytes.chunks(bytes.len().div_ceil(3)) {
            file.write_all(piece).unwrap();
            file.flush().unwrap();
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    let series = root.join("out/attention_series.csv");
    let started = Instant::now();
    while !(series.is_file() && rows(&series, Some("run")).contains_key(&20)) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "step 20 never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: sends SIGINT to the child we started
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGINT), "{stderr}");
    // no failed read of a half-written file, and each step once with analyze's numbers
    assert!(!stderr.contains("watch: step 20:"), "{stderr}");
    assert!(
        stderr.contains("step 20") && stderr.contains("not complete yet"),
        "{stderr}"
    );
    let got = rows(&series, Some("run"));
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), [10, 20]);
    let want = analyze_rows(&root);
    assert_eq!(got[&10], want);
    assert_eq!(got[&20], want);
    // no staging folder left behind
    let left: Vec<_> = std::fs::read_dir(root.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".asa-staging"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `merge` of folders holding attention_series (a run resumed elsewhere, `watch` on two
/// machines): every (model, step) once, in model then step order, a step held twice with
/// the same rows kept once; held twice with other values, refused with nothing written.
#[test]
fn merge_joins_attention_series_and_refuses_a_step_that_differs() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tables/full/attention_series.csv");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let header = text.lines().next().unwrap();
    let body: Vec<&str> = text.lines().skip(1).collect();
    let step = |line: &str| line.split(',').nth(1).unwrap().parse::<u64>().unwrap();
    let root = tempfile::tempdir().unwrap();
    let write = |name: &str, keep: &dyn Fn(u64) -> bool, edit: &dyn Fn(&str) -> String| {
        let dir = root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let lines: Vec<String> = body
            .iter()
            .filter(|l| keep(step(l)))
            .map(|l| edit(l))
            .collect();
        std::fs::write(
            dir.join("attention_series.csv"),
            format!("{header}\n{}\n", lines.join("\n")),
        )
        .unwrap();
        dir
    };
    let same = |l: &str| l.to_string();
    let early = write("early", &|s| s <= 500, &same);
    let late = write("late", &|s| s >= 500, &same);
    let out = root.path().join("merged");
    let args = [
        "merge",
        late.to_str().unwrap(),
        early.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    expect_success(&run_cli(root.path(), &args));
    // every step of each model once, as the fixture holds them
    for model in ["base", "sink"] {
        assert_eq!(
            rows(&out.join("attention_series.csv"), Some(model)),
            rows(&fixture, Some(model)),
            "{model}"
        );
    }
    let merged = std::fs::read_to_string(out.join("attention_series.csv")).unwrap();
    let order: Vec<(String, u64)> = merged
        .lines()
        .skip(1)
        .map(|l| (l.split(',').next().unwrap().to_string(), step(l)))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "model then step order"
    );
    assert!(out.join("qk_series.csv").is_file() || !merged.contains("qk_mean"));
    // the same step with another value: refused, naming it, nothing written
    let edited = write("edited", &|s| s == 500, &|l: &str| {
        let mut f: Vec<String> = l.split(',').map(str::to_string).collect();
        f[6] = format!("{}", f[6].parse::<f64>().unwrap() + 0.5);
        f.join(",")
    });
    let refused = root.path().join("refused");
    let o = run_cli(
        root.path(),
        &[
            "merge",
            early.to_str().unwrap(),
            edited.to_str().unwrap(),
            "--out",
            refused.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("step 500 of model base is also in") && err.contains("with other values"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!refused.exists());
}
