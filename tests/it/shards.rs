//! Issue 26: `analyze --shard K/N` and `merge`. Shards of a run, merged in any grouping
//! (all at once, or as a tree of partial merges), give the single run's tables: counts
//! equal, values within 1e-12 relative (here they are equal bit for bit, as each window's
//! numbers do not depend on which process computed it). K and N come from the flag, a
//! Slurm job array's variables or a Kubernetes indexed job's index. Partials of another
//! run, missing or doubled shards and unfinished partials are refused, nothing written;
//! issue 40: a partial's state and its run.json vouch for each other (tests at the end).

use std::path::Path;
use std::process::Command;

use asa_tables::{read_table, Column};

use crate::common::{expect_error, expect_success, fixtures, run_cli};

/// An `analyze` of two models (the learned-sink fixture and GPT-OSS with its window) over
/// 7 windows of 16 tokens, with `extra` arguments.
fn analyze(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    analyze_len(dir, "16", extra, env)
}

/// [`analyze`] with windows of `seq_len` tokens.
fn analyze_len(
    dir: &Path,
    seq_len: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let models = fixtures().join("models");
    let a = format!("a={}", models.join("sink").display());
    let b = format!("b={}", models.join("gpt_oss").display());
    let mut args = vec![
        "analyze",
        &a,
        &b,
        "--seq-len",
        seq_len,
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

    // one shard per window: 7 shards of 7 windows (more are refused, issue 40)
    for k in 0..7 {
        expect_success(&analyze(
            dir,
            &["--shard", &format!("{k}/7"), "--out", &format!("n{k}")],
            &[],
        ));
    }
    let parts: Vec<String> = (0..7).map(|k| format!("n{k}")).collect();
    let mut args: Vec<&str> = vec!["merge"];
    args.extend(parts.iter().map(String::as_str));
    args.extend(["--out", "seven", "--quiet"]);
    expect_success(&run_cli(dir, &args));
    assert_same_tables(&dir.join("seven"), &dir.join("whole"));
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

// Issue 40: merge cannot be fooled. A partial's state carries its identity (run
// fingerprint, shards of how many, each model's window ranges with their tokens' SHA-256),
// its run.json the SHA-256 of the state file; merge checks them against each other and the
// other partials. Every refusal: one line naming the file, exit 2, nothing written.

/// Shards `0..n` of the two-model run (7 windows of `seq_len` tokens) in `dir/{prefix}{k}`.
fn shards_of(dir: &Path, n: usize, prefix: &str, seq_len: &str) {
    for k in 0..n {
        expect_success(&analyze_len(
            dir,
            seq_len,
            &[
                "--shard",
                &format!("{k}/{n}"),
                "--out",
                &format!("{prefix}{k}"),
            ],
            &[],
        ));
    }
}

/// Rewrites `dir/run.json` through `edit`.
fn edit_run_json(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("run.json");
    let mut run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut run);
    std::fs::write(&path, serde_json::to_string_pretty(&run).unwrap()).unwrap();
}

/// Points `dir/run.json`'s recorded hash at the `partial.parquet` now in `dir` (a tamperer
/// who also fixes the hash).
fn rehash(dir: &Path) {
    let sha =
        asa_analysis::analysis::fingerprint::sha256_file(&dir.join("partial.parquet"), u64::MAX)
            .unwrap();
    edit_run_json(dir, |run| run["partial"]["states_sha256"] = sha.into());
}

/// `merge partials --out out` in `dir` is refused with `want` in its one line, and `out`
/// is not written.
fn merge_refused(dir: &Path, partials: &[&str], want: &[&str]) {
    let mut args = vec!["merge"];
    args.extend(partials);
    args.extend(["--out", "out"]);
    let err = expect_error(&run_cli(dir, &args));
    for w in want {
        assert!(err.contains(w), "{partials:?}: want `{w}`: {err}");
    }
    assert!(!dir.join("out").exists(), "{partials:?}: output written");
}

#[test]
fn merge_fooled_swapped_parquet_between_shards_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shards_of(dir, 4, "p", "16");
    std::fs::copy(
        dir.join("p1/partial.parquet"),
        dir.join("p0/partial.parquet"),
    )
    .unwrap();
    merge_refused(
        dir,
        &["p0", "p1", "p2", "p3"],
        &[
            "p0/partial.parquet",
            "not the partial.parquet its run.json records",
        ],
    );
    // run.json's hash fixed up as well: the state says which shard it is
    rehash(&dir.join("p0"));
    merge_refused(
        dir,
        &["p0", "p1", "p2", "p3"],
        &[
            "p0/partial.parquet",
            "holds shards [1] of 4 where its run.json says [0] of 4",
        ],
    );
}

#[test]
fn merge_fooled_parquet_of_a_seq_len_32_run_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shards_of(dir, 2, "p", "16");
    shards_of(dir, 2, "q", "32");
    std::fs::copy(
        dir.join("q1/partial.parquet"),
        dir.join("p1/partial.parquet"),
    )
    .unwrap();
    merge_refused(
        dir,
        &["p0", "p1"],
        &["p1/partial.parquet", "SHA-256 differs"],
    );
    rehash(&dir.join("p1"));
    merge_refused(
        dir,
        &["p0", "p1"],
        &[
            "p1/partial.parquet",
            "another run than its run.json's",
            "seq_len",
        ],
    );
}

#[test]
fn merge_fooled_shard_0_claiming_0_and_1_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shards_of(dir, 4, "p", "16");
    edit_run_json(&dir.join("p0"), |run| {
        run["partial"]["shards"] = serde_json::json!([0, 1])
    });
    merge_refused(
        dir,
        &["p0", "p2", "p3"],
        &[
            "p0/partial.parquet",
            "holds shards [0] of 4 where its run.json says [0, 1] of 4",
        ],
    );
}

#[test]
fn merge_fooled_copy_of_shard_3_claiming_2_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shards_of(dir, 4, "p", "16");
    std::fs::create_dir(dir.join("c2")).unwrap();
    for name in ["partial.parquet", "run.json", "partial.complete"] {
        std::fs::copy(dir.join("p3").join(name), dir.join("c2").join(name)).unwrap();
    }
    edit_run_json(&dir.join("c2"), |run| {
        run["partial"]["shards"] = serde_json::json!([2]);
        run["shard"]["index"] = 2.into();
    });
    merge_refused(
        dir,
        &["p0", "p1", "c2", "p3"],
        &[
            "c2/partial.parquet",
            "holds shards [3] of 4 where its run.json says [2] of 4",
        ],
    );
    // as a merge of some shards too
    expect_success(&run_cli(
        dir,
        &["merge", "p0", "p1", "--partial", "--out", "m01", "--quiet"],
    ));
    merge_refused(
        dir,
        &["m01", "c2", "p3"],
        &["c2/partial.parquet", "holds shards [3]"],
    );
}

/// A checkpoint whose safetensors data starts past the first MiB (its header padded with
/// spaces, as the format allows), and where in the file `tensor`'s bytes lie.
fn padded_checkpoint(to: &Path, tensor: &str) -> (std::path::PathBuf, std::ops::Range<usize>) {
    crate::common::copy_fixture("sink", to);
    let file = std::fs::read_dir(to)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let padded = (1 << 20) + 64;
    let mut out = (padded as u64).to_le_bytes().to_vec();
    out.extend(&bytes[8..8 + n]);
    out.resize(8 + padded, b' ');
    out.extend(&bytes[8 + n..]);
    std::fs::write(&file, out).unwrap();
    let offsets = &header[tensor]["data_offsets"];
    let at = |i: usize| 8 + padded + offsets[i].as_u64().unwrap() as usize;
    (file, at(0)..at(1))
}

#[test]
fn merge_fooled_weight_change_past_the_first_mib_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (file, norm) = padded_checkpoint(&dir.join("ckpt"), "model.norm.weight");
    assert!(norm.start > 1 << 20);
    let run = |k: usize| {
        run_cli(
            dir,
            &[
                "analyze",
                "ckpt",
                "--seq-len",
                "16",
                "--num-seqs",
                "4",
                "--quiet",
                "--shard",
                &format!("{k}/2"),
                "--out",
                &format!("p{k}"),
            ],
        )
    };
    expect_success(&run(0));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[norm.start] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    expect_success(&run(1));
    merge_refused(
        dir,
        &["p0", "p1"],
        &["p1", "another run than p0", "models[0].files[", "].sha256"],
    );
}

#[test]
fn counts_on_trust_huge_shard_count_via_flag_slurm_or_run_json_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let err = expect_error(&analyze(
        dir,
        &["--shard", "0/18446744073709551615", "--out", "big"],
        &[],
    ));
    assert!(err.contains("of the 7 windows of a: at most 7"), "{err}");
    assert!(!dir.join("big").exists());
    let env = [
        ("SLURM_ARRAY_TASK_ID", "0"),
        ("SLURM_ARRAY_TASK_COUNT", "1000000000"),
    ];
    let err = expect_error(&analyze(dir, &["--out", "big"], &env));
    assert!(err.contains("SLURM_ARRAY_TASK_COUNT 1000000000"), "{err}");
    assert!(!dir.join("big").exists());
    // a count written into run.json is bounded by the file: refused, nothing allocated
    shards_of(dir, 2, "p", "16");
    edit_run_json(&dir.join("p0"), |run| {
        run["partial"]["count"] = serde_json::json!(1_000_000_000_000u64)
    });
    let mut merge = Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
    merge
        .args(["merge", "p0", "p1", "--out", "out"])
        .current_dir(dir);
    crate::common::cap_address_space(&mut merge, 3 << 30);
    let err = expect_error(&merge.output().unwrap());
    assert!(
        err.contains("p0/run.json") && err.contains("shard_windows_sha256"),
        "{err}"
    );
    assert!(!dir.join("out").exists());
}

#[test]
fn odd_corners_contradictory_shard_env_sources_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let env = [
        ("JOB_COMPLETION_INDEX", "1"),
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ];
    let err = expect_error(&analyze(dir, &["--shard-count", "3", "--out", "o"], &env));
    assert!(
        err.contains("--shard-count 3") && err.contains("SLURM_ARRAY_TASK_ID 2"),
        "{err}"
    );
    let env = [
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
        ("SLURM_ARRAY_TASK_MAX", "5"),
    ];
    let err = expect_error(&analyze(dir, &["--out", "o"], &env));
    assert!(err.contains("SLURM_ARRAY_TASK_MAX 5"), "{err}");
    assert!(!dir.join("o").exists());
}

#[test]
fn odd_corners_merge_out_naming_an_input_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shards_of(dir, 2, "p", "16");
    let before = std::fs::read(dir.join("p1/run.json")).unwrap();
    let err = expect_error(&run_cli(dir, &["merge", "p0", "p1", "--out", "./p1/"]));
    assert!(err.contains("one of the folders merged"), "{err}");
    assert_eq!(std::fs::read(dir.join("p1/run.json")).unwrap(), before);
    let names: Vec<_> = std::fs::read_dir(dir.join("p1")).unwrap().collect();
    assert_eq!(names.len(), 3, "{names:?}");
    expect_success(&run_cli(
        dir,
        &["merge", "p0", "p1", "--out", "out", "--quiet"],
    ));
}

#[test]
fn odd_corners_null_fingerprint_and_old_partials_are_refused_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    shards_of(dir, 2, "p", "16");
    edit_run_json(&dir.join("p1"), |run| {
        run["partial"]["fingerprint"] = serde_json::Value::Null
    });
    merge_refused(
        dir,
        &["p0", "p1"],
        &["p1/run.json", "partial.fingerprint is null"],
    );
    // a partial written before the state's hash was recorded: re-run the shard
    edit_run_json(&dir.join("p0"), |run| {
        run["partial"]
            .as_object_mut()
            .unwrap()
            .remove("states_sha256");
    });
    merge_refused(
        dir,
        &["p0"],
        &["p0/run.json", "older asa-analyze", "re-run the shard"],
    );
}
