//! Issue 40's classes 3, 4 and 7, one regression test each, named after its class: input
//! files that are no regular file or are larger than their kind may be (bounded reads and
//! blocking files), Hub refs that lead out of the cache, and signals while figures are
//! written with the tables.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{copy_fixture, expect_error, expect_success, model_dir, run_cli};

/// Runs the binary with `args` in `dir` (and `env`), killed after 20 s: a test of a read that
/// must not block fails instead of hanging.
fn run_bounded(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    crate::common::cap_address_space(&mut command, 4 << 30);
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("asa-analyze {args:?} did not end within 20 s (a blocking read?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A small analysis' results folder `dir/name`.
fn results(dir: &Path, name: &str) -> PathBuf {
    let model = format!("m={}", model_dir("llama_gqa").display());
    let args = ["analyze", &model, "--seq-len", "12", "--num-seqs", "2"];
    expect_success(&run_cli(
        dir,
        &[&args[..], &["--quiet", "--out", name]].concat(),
    ));
    dir.join(name)
}

/// A FIFO where run.json, config.json or a manifest should be is refused at once, naming
/// the file and what it is, with no output; before, the read waited for a writer forever.
#[test]
fn fifo_in_place_of_run_json_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let res = results(tmp.path(), "res");
    std::fs::remove_file(res.join("run.json")).unwrap();
    mkfifo(&res.join("run.json"));
    let err = expect_error(&run_bounded(
        tmp.path(),
        &["report", "res", "--out", "r.html"],
        &[],
    ));
    assert!(
        err.contains("res/run.json: is a FIFO, not a regular file"),
        "{err}"
    );
    assert!(!tmp.path().join("r.html").exists());
    let ckpt = tmp.path().join("ckpt");
    copy_fixture("llama_gqa", &ckpt);
    std::fs::remove_file(ckpt.join("config.json")).unwrap();
    mkfifo(&ckpt.join("config.json"));
    let err = expect_error(&run_bounded(tmp.path(), &["inspect", "ckpt"], &[]));
    assert!(err.contains("config.json: is a FIFO"), "{err}");
    mkfifo(&tmp.path().join("m.toml"));
    let err = expect_error(&run_bounded(
        tmp.path(),
        &["tables", "--manifest", "m.toml", "--out", "t"],
        &[],
    ));
    assert!(err.contains("m.toml: is a FIFO"), "{err}");
    assert!(!tmp.path().join("t").exists());
}

/// `/dev/zero` given as an lm-eval result file is refused at once as a device; a regular
/// file past a JSON record's 64 MiB (sparse, so the test writes nothing) is refused by its
/// length before a byte is read. Before: 7.6 GB read in 5 s.
#[test]
fn dev_zero_as_lm_eval_is_refused_quickly() {
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = expect_error(&run_bounded(
        tmp.path(),
        &["tables", "--lm-eval", "1B/sink=/dev/zero", "--out", "t"],
        &[],
    ));
    assert!(
        err.contains("/dev/zero: is a character device, not a regular file"),
        "{err}"
    );
    let big = tmp.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let err = expect_error(&run_bounded(
        tmp.path(),
        &["tables", "--lm-eval", "1B/sink=big.json", "--out", "t"],
        &[],
    ));
    assert!(
        err.contains("big.json: 68157440 bytes or more, past the 67108864 bytes a JSON or TOML record may hold"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!tmp.path().join("t").exists());
}

/// A Hub cache whose `refs/main` holds an absolute path (or `../`, or a name with a
/// separator) is refused naming the ref; before, an absolute path loaded that folder from
/// outside the cache with exit 0. A snapshot folder that links out of the cache is refused
/// too; a commit hash in the ref still resolves.
#[test]
fn absolute_ref_outside_cache_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = tmp.path().join("hub");
    let repo = hub.join("models--org--tiny");
    copy_fixture("llama_gqa", &repo.join("snapshots/abc123"));
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    let outside = tmp.path().join("outside");
    copy_fixture("llama_gqa", &outside);
    let env = [("HF_HUB_CACHE", hub.as_path())];
    let absolute = outside.display().to_string();
    let sneaky = format!("../../../{}", "outside");
    for held in [absolute.as_str(), sneaky.as_str(), "abc/123", ".."] {
        std::fs::write(repo.join("refs/main"), held).unwrap();
        let err = expect_error(&run_bounded(tmp.path(), &["inspect", "org/tiny"], &env));
        assert!(
            err.contains("refs/main: holds `") && err.contains("no snapshot name"),
            "{held}: {err}"
        );
    }
    std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
    expect_success(&run_bounded(tmp.path(), &["inspect", "org/tiny"], &env));
    std::fs::write(repo.join("refs/main"), "def456").unwrap();
    std::os::unix::fs::symlink(&outside, repo.join("snapshots/def456")).unwrap();
    let err = expect_error(&run_bounded(tmp.path(), &["inspect", "org/tiny"], &env));
    assert!(err.contains("leads out of the cache"), "{err}");
    mkfifo(&repo.join("refs/step1"));
    let err = expect_error(&run_bounded(
        tmp.path(),
        &["inspect", "org/tiny@step1"],
        &env,
    ));
    assert!(err.contains("refs/step1: is a FIFO"), "{err}");
}

/// `analyze --figures` started in `dir` into `out`, and the staging folder it made, once a
/// figure is staged in it (the run is then drawing figures).
fn figures_run_caught_drawing(dir: &Path, out: &str) -> (std::process::Child, PathBuf) {
    let model = format!("m={}", model_dir("llama_gqa").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(["analyze", &model, "--seq-len", "12", "--num-seqs", "2"])
        .args(["--quiet", "--figures", "--out", out])
        .current_dir(dir)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let staged = std::fs::read_dir(dir.join(out)).ok().and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .find(|p| staged_figure(&p.join("figures")))
        });
        if let Some(staging) = staged {
            return (child, staging);
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before a figure was caught being staged");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no figure staged"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether `folder` holds a figure.
fn staged_figure(folder: &Path) -> bool {
    std::fs::read_dir(folder).is_ok_and(|mut e| {
        e.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "svg")))
    })
}

/// A signal while `--figures` draws: SIGTERM leaves neither the tables nor the figures nor a
/// staging folder (they are one commit); SIGKILL leaves the staging folder, and the next run
/// into the same `--out`, figures or not, removes it, with one a killed run of an older
/// layout left under `figures/`. Before, tables could be committed without their figures,
/// and `OUT/figures/.asa-staging-*` stayed.
#[test]
fn staging_left_by_killed_figures_run_is_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (child, _) = figures_run_caught_drawing(tmp.path(), "out");
    // SAFETY: sends SIGTERM to the child we started
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{stderr}");
    assert!(!out.exists(), "SIGTERM left {:?}", listing(&out));

    let (mut child, staging) = figures_run_caught_drawing(tmp.path(), "out");
    child.kill().unwrap(); // SIGKILL: nothing can clean up
    child.wait().unwrap();
    assert!(staging.is_dir() && !out.join("attention.csv").exists());
    // a killed run of the layout before issue 40 staged figures in out/figures/
    let name = staging.file_name().unwrap();
    let nested = out.join("figures").join(name);
    std::fs::create_dir_all(nested.join("deep")).unwrap();
    std::fs::write(nested.join("fig1.svg"), "<svg/>").unwrap();
    let model = format!("m={}", model_dir("llama_gqa").display());
    let args = ["analyze", &model, "--seq-len", "12", "--num-seqs", "2"];
    expect_success(&run_cli(
        tmp.path(),
        &[&args[..], &["--quiet", "--out", "out"]].concat(),
    ));
    assert!(!staging.exists() && !nested.exists(), "{:?}", listing(&out));
    assert!(out.join("attention.csv").is_file());
    let hidden = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(".asa-staging-"))
    };
    assert!(!hidden(&out) && !hidden(&out.join("figures")));
    // and a whole run commits its figures with its tables
    expect_success(&run_cli(
        tmp.path(),
        &[&args[..], &["--quiet", "--figures", "--out", "out"]].concat(),
    ));
    assert!(out.join("run.json").is_file() && staged_figure(&out.join("figures")));
}

/// The names under `dir`, for a failure message.
fn listing(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            names.push(e.path().display().to_string());
            if e.path().is_dir() {
                stack.push(e.path());
            }
        }
    }
    names
}
