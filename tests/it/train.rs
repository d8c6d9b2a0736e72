//! The `train` command (issue 6): bad options as one-line errors with nothing written, a
//! run written at once (a failed rerun keeps it), and a run stopped by a signal leaving no
//! output. The trainer itself (gradients against autograd, reloads, transformers' logits)
//! is tested beside its crate (crates/asa-analysis/tests/library/train.rs).

use std::path::Path;

use crate::common;
use common::{expect_error, expect_success, run_cli};

/// `train` CLI arguments for a run of a few seconds into `out`; an option in `extra`
/// replaces the default of the same name.
fn tiny_train_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let defaults = [
        ("--steps", "3"),
        ("--batch-size", "2"),
        ("--seq-len", "16"),
        ("--corpus-chars", "20000"),
        ("--hidden-size", "16"),
        ("--layers", "1"),
        ("--heads", "2"),
        ("--intermediate-size", "16"),
        ("--vocab-size", "300"),
    ];
    let mut args = vec!["train", "--variant", "sink", "--out", out, "--quiet"];
    for (name, value) in defaults {
        if !extra.contains(&name) {
            args.extend([name, value]);
        }
    }
    args.extend_from_slice(extra);
    args
}

/// Files and folders under `dir`, relative, sorted (hidden staging folders included).
fn tree(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn train_bad_inputs_are_one_line_errors_and_write_nothing() {
    // SPEC 7: one line naming the option or file, exit 2, no output folder
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("short.txt"), "hi").unwrap();
    let cases: [(&[&str], &str); 9] = [
        (
            &["--intermediate-size", "0"],
            "--intermediate-size must be at least 1",
        ),
        (&["--lr", "NaN"], "--lr must be a positive number"),
        (&["--lr=-0.1"], "--lr must be a positive number"),
        (&["--grad-clip=-1"], "--grad-clip must be a number >= 0"),
        (&["--grad-clip", "inf"], "--grad-clip must be a number >= 0"),
        (
            &["--weight-decay", "NaN"],
            "--weight-decay must be a number >= 0",
        ),
        (&["--corpus", "short.txt"], "short.txt: holds"),
        (
            &["--corpus-chars", "10", "--seq-len", "100000"],
            "raise --corpus-chars",
        ),
        (
            &["--tokenizer", "nope.json"],
            "nope.json: no such file (--tokenizer)",
        ),
    ];
    for (extra, message) in cases {
        let out = run_cli(tmp.path(), &tiny_train_args("run", extra));
        let stderr = expect_error(&out);
        assert!(stderr.contains(message), "{extra:?}: {stderr}");
        assert!(!tmp.path().join("run").exists(), "{extra:?} left output");
    }
}

#[test]
fn train_writes_its_run_at_once_and_a_failed_rerun_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let stdout = expect_success(&run_cli(tmp.path(), &tiny_train_args("run", &[])));
    assert!(stdout.contains("3 steps"), "{stdout}");
    let run = tmp.path().join("run");
    let want = [
        "checkpoints",
        "checkpoints/step-1",
        "checkpoints/step-2",
        "checkpoints/step-3",
        "log.csv",
        "tokenizer.json",
        "train.json",
    ];
    let top: Vec<String> = tree(&run)
        .into_iter()
        .filter(|p| p.matches('/').count() <= 1)
        .collect();
    assert_eq!(top, want, "the run's layout, no staging folder left");
    let log = std::fs::read_to_string(run.join("log.csv")).unwrap();
    assert_eq!(log.lines().count(), 4, "header + 3 steps: {log}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("train.json")).unwrap()).unwrap();
    let ckpts = record["summary"]["checkpoints"].as_array().unwrap();
    assert_eq!(ckpts.len(), 3);
    for c in ckpts {
        // the recorded paths are the final ones (relative to where it ran, like --out), not
        // the staging folder's
        let c = c.as_str().unwrap();
        assert!(!c.contains(".asa-staging"), "{c}");
        assert!(tmp.path().join(c).join("config.json").is_file(), "{c}");
    }

    // a rerun that fails (the text is too short) leaves the finished run as it was
    std::fs::write(tmp.path().join("short.txt"), "hi").unwrap();
    let before = tree(&run);
    let out = run_cli(
        tmp.path(),
        &tiny_train_args("run", &["--force", "--corpus", "short.txt"]),
    );
    expect_error(&out);
    assert_eq!(tree(&run), before);
    assert_eq!(std::fs::read_to_string(run.join("log.csv")).unwrap(), log);
}

#[cfg(unix)]
#[test]
fn an_interrupted_or_terminated_run_leaves_no_output() {
    // Ctrl-C (SIGINT) or SIGTERM in the middle of training: the process ends by that signal
    // (a shell loop sees it) and no `--out` folder is left
    for (signal, says) in [(libc::SIGINT, "interrupted"), (libc::SIGTERM, "terminated")] {
        signalled_run_leaves_no_output(signal, says);
    }
}

#[cfg(unix)]
#[test]
fn signal_hangup_quit_and_user_signals_leave_no_output_either() {
    // issue 24: every signal that ends the process by default cleans up
    for signal in [libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1] {
        signalled_run_leaves_no_output(signal, "ended by a signal");
    }
}

#[cfg(unix)]
fn signalled_run_leaves_no_output(signal: i32, says: &str) {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let tmp = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
    command
        .args(tiny_train_args("run", &["--steps", "1000000"]))
        .current_dir(tmp.path())
        .stderr(std::process::Stdio::piped());
    // SAFETY: only resets signal dispositions in the child before exec. A test runner
    // started in the background by a non-interactive shell passes SIGINT down ignored, and
    // the binary rightly leaves an ignored signal alone.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let run = tmp.path().join("run");
    // wait until steps are being logged in the staging folder
    let started = std::time::Instant::now();
    let logging = || {
        std::fs::read_dir(&run).ok().into_iter().flatten().any(|e| {
            let log = e.unwrap().path().join("log.csv");
            std::fs::read_to_string(log).is_ok_and(|t| t.lines().count() > 2)
        })
    };
    while !logging() {
        if started.elapsed().as_secs() > 120 {
            child.kill().unwrap();
            panic!("training never started");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: sends a signal to our own child process
    unsafe { libc::kill(child.id() as i32, signal) };
    let waited = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if waited.elapsed().as_secs() > 60 {
            child.kill().unwrap();
            panic!("signal {signal} did not end the run");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.signal(), Some(signal), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(says), "{stderr}");
    assert!(!run.exists(), "left {:?}", tree(&run));
}
