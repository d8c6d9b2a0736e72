//! Issue 26: `analyze --shard K/N` and `merge`. Shards of a run, merged in any grouping
//! (all at once, or as a tree of partial merges), give the single run's tables: counts
//! equal, values within 1e-12 relative (here they are equal bit for bit, as each window's
//! numbers do not depend on which process computed it). K and N come from the flag, a
//! Slurm job array's variables or a Kubernetes indexed job's index. Partials of another
//! run, missing or doubled shards and unfinished partials are refused, nothing written.

use std::path::Path;
use std::process::Command;

use asa_analyze::export::{read_table, Column};

use crate::common::{expect_error, expect_success, fixtures, run_cli};

/// An `analyze` of two models (the learned-sink fixture and GPT-OSS with its window) over
/// 7 windows of 16 tokens, with `extra` arguments.
fn analyze(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let models = fixtures().join("models");
    let a = format!("a={}", models.join("sink").display());
    let b = format!("b={}", models.join("gpt_oss").display());
    let mut args = vec![
        "analyze",
        &a,
        &b,
        "--seq-len",
        "16",
        "--num-seqs",
        "7",
        "--metrics",
        "first_token,sink_rate,entropy,weight_sum,head_total,qk_mean,sink_mass,nll,heatmap,query_profile,distance_profile,max_logit,key_received",
        "--quiet",
    ];
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(&args)
        .current_dir(dir)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .envs(env.iter().copied())
        .output()
        .expect("binary runs")
}

/// Every table of `got` equals `want`'s: the same files, rows and text, integers equal,
/// floats within 1e-12 relative (NaN where NaN).
fn assert_same_tables(got: &Path, want: &Path) {
    let tables = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.ends_with(".csv"))
            .collect();
        names.sort();
        names
    };
    let names = tables(want);
    assert!(names.len() >= 6, "{names:?}");
    assert_eq!(tables(got), names);
    for name in names {
        let (a, b) = (
            read_table(&got.join(&name)).unwrap(),
            read_table(&want.join(&name)).unwrap(),
        );
        assert_eq!(a.height(), b.height(), "{name}: rows");
        for ((ca, x), (cb, y)) in a.columns.iter().zip(&b.columns) {
            assert_eq!(ca, cb, "{name}: columns");
            match (x, y) {
                (Column::Float(x), Column::Float(y)) => {
                    for (i, (p, q)) in x.iter().zip(y).enumerate() {
                        let same = match (p, q) {
                            (Some(p), Some(q)) if p.is_nan() || q.is_nan() => {
                                p.is_nan() && q.is_nan()
                            }
                            (Some(p), Some(q)) => (p - q).abs() <= 1e-12 * q.abs(),
                            (p, q) => p == q,
                        };
                        assert!(same, "{name} {ca} row {i}: {p:?} vs {q:?}");
                    }
                }
                (x, y) => assert_eq!(x, y, "{name} {ca}"),
            }
        }
    }
}

#[test]
fn shards_merged_give_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    expect_success(&analyze(dir, &["--out", "whole"], &[]));
    // 3 shards of 7 windows: 2, 2 and 3 of each model
    for k in 0..3 {
        expect_success(&analyze(
            dir,
            &["--shard", &format!("{k}/3"), "--out", &format!("p{k}")],
            &[],
        ));
        assert!(dir.join(format!("p{k}/partial.complete")).is_file());
        assert!(!dir.join(format!("p{k}/attention.csv")).exists());
    }
    expect_success(&run_cli(
        dir,
        &["merge", "p2", "p0", "p1", "--out", "merged", "--quiet"],
    ));
    assert_same_tables(&dir.join("merged"), &dir.join("whole"));
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("merged/run.json")).unwrap())
            .unwrap();
    assert_eq!(run["command"], "merge");
    assert_eq!(run["models"][0]["windows"], 7);

    // a tree: two shards merged into a partial, then with the third
    expect_success(&run_cli(
        dir,
        &["merge", "p0", "p1", "--partial", "--out", "m01", "--quiet"],
    ));
    expect_success(&run_cli(
        dir,
        &["merge", "m01", "p2", "--out", "tree", "--quiet"],
    ));
    assert_same_tables(&dir.join("tree"), &dir.join("whole"));

    // more shards than windows: empty shards merge too
    for k in 0..9 {
        expect_success(&analyze(
            dir,
            &["--shard", &format!("{k}/9"), "--out", &format!("n{k}")],
            &[],
        ));
    }
    let parts: Vec<String> = (0..9).map(|k| format!("n{k}")).collect();
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(parts.iter().map(String::as_str));
    args.extend(["--out", "nine", "--quiet"]);
    expect_success(&run_cli(dir, &args));
    assert_same_tables(&dir.join("nine"), &dir.join("whole"));
}

/// A training series (a folder of step checkpoints) beside a plain model: each shard keeps
/// every step's QK^T state; the merge gives the single run's QK^T curve and the last step's
/// tables. A shard re-run (after a failure, say) replaces its partial.
#[test]
fn a_training_series_shards_and_a_rerun_shard_replaces_its_partial() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for (step, fixture) in [(1000, "sink"), (2000, "off_by_one")] {
        crate::common::copy_fixture(fixture, &dir.join(format!("series/step-{step}")));
    }
    let models = fixtures().join("models");
    let plain = format!("plain={}", models.join("gpt_oss").display());
    let run = |extra: &[&str]| {
        let mut args = vec![
            "analyze",
            "series",
            &plain,
            "--seq-len",
            "16",
            "--num-seqs",
            "5",
            "--quiet",
        ];
        args.extend(extra);
        run_cli(dir, &args)
    };
    expect_success(&run(&["--out", "whole"]));
    assert!(dir.join("whole/qk_series.csv").is_file());
    for k in 0..2 {
        expect_success(&run(&[
            "--shard",
            &format!("{k}/2"),
            "--out",
            &format!("p{k}"),
        ]));
    }
    // shard 1 again, over its finished partial
    expect_success(&run(&["--shard", "1/2", "--out", "p1"]));
    expect_success(&run_cli(
        dir,
        &["merge", "p0", "p1", "--out", "merged", "--quiet"],
    ));
    assert_same_tables(&dir.join("merged"), &dir.join("whole"));
}

#[test]
fn slurm_arrays_and_kubernetes_indexed_jobs_name_the_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    expect_success(&analyze(dir, &["--out", "whole"], &[]));
    // --array=1-3: tasks 1, 2, 3 are shards 0, 1, 2
    for task in ["1", "2", "3"] {
        let env = [
            ("SLURM_ARRAY_TASK_ID", task),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ];
        expect_success(&analyze(dir, &["--out", &format!("s{task}")], &env));
    }
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("s3/run.json")).unwrap()).unwrap();
    assert_eq!(run["shard"]["source"], "slurm");
    assert_eq!(run["partial"]["shards"], serde_json::json!([2]));
    // a Kubernetes indexed job of 3 completions, and the explicit flag beside them
    expect_success(&analyze(
        dir,
        &["--shard-count", "3", "--out", "k1"],
        &[("JOB_COMPLETION_INDEX", "1")],
    ));
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("k1/run.json")).unwrap()).unwrap();
    assert_eq!(run["shard"]["source"], "kubernetes");
    expect_success(&run_cli(
        dir,
        &["merge", "s1", "k1", "s3", "--out", "merged", "--quiet"],
    ));
    assert_same_tables(&dir.join("merged"), &dir.join("whole"));
    // inside an array, --shard 0/1 runs whole
    let env = [
        ("SLURM_ARRAY_TASK_ID", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ];
    expect_success(&analyze(dir, &["--shard", "0/1", "--out", "one"], &env));
    assert_same_tables(&dir.join("one"), &dir.join("whole"));
    // inconsistent variables are named, nothing written
    let env = [
        ("SLURM_ARRAY_TASK_ID", "5"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ];
    let err = expect_error(&analyze(dir, &["--out", "bad"], &env));
    assert!(
        err.contains("SLURM_ARRAY_TASK_ID 5") && err.contains("SLURM_ARRAY_TASK_COUNT 3"),
        "{err}"
    );
    assert!(!dir.join("bad").exists());
}

#[test]
fn bad_shards_and_bad_merges_are_refused_with_nothing_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for bad in ["3/3", "0/0", "3/x"] {
        let err = expect_error(&analyze(dir, &["--shard", bad, "--out", "bad"], &[]));
        assert!(err.contains(&format!("--shard `{bad}`")), "{err}");
    }
    for k in 0..3 {
        expect_success(&analyze(
            dir,
            &["--shard", &format!("{k}/3"), "--out", &format!("p{k}")],
            &[],
        ));
    }
    // another run: a longer sequence
    let mut other = vec!["--seq-len", "17"];
    other.extend(["--shard", "2/3", "--out", "q2"]);
    let models = fixtures().join("models");
    let a = format!("a={}", models.join("sink").display());
    let b = format!("b={}", models.join("gpt_oss").display());
    let mut args = vec!["analyze", &a, &b, "--num-seqs", "7", "--quiet"];
    args.extend(other);
    expect_success(&run_cli(dir, &args));
    let cases: [(&[&str], &str); 5] = [
        (&["p0", "p1"], "shard 2 of 3 missing"),
        (&["p0", "p1", "p1", "p2"], "shard 1 of 3 is also in p1"),
        (
            &["p0", "p1", "q2"],
            "a partial result of another run than p0: the runs differ in",
        ),
        (&["p0", "p1", "nowhere"], "not a partial result"),
        (&["p0", "p1", "u2"], "an unfinished partial result"),
    ];
    std::fs::create_dir(dir.join("u2")).unwrap();
    std::fs::copy(
        dir.join("p2/partial.parquet"),
        dir.join("u2/partial.parquet"),
    )
    .unwrap();
    std::fs::copy(dir.join("p2/run.json"), dir.join("u2/run.json")).unwrap();
    for (partials, want) in cases {
        let mut args = vec!["merge"];
        args.extend(partials);
        args.extend(["--out", "out"]);
        let err = expect_error(&run_cli(dir, &args));
        assert!(err.contains(want), "{partials:?}: {err}");
        assert!(!dir.join("out").exists(), "{partials:?}: output written");
    }
    // a shard writes no tables, so no figures
    let err = expect_error(&analyze(
        dir,
        &["--shard", "0/2", "--figures", "--out", "f"],
        &[],
    ));
    assert!(
        err.contains("--figures and --json come with `merge`"),
        "{err}"
    );
}
