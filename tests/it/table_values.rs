//! Issue 40, item 5: impossible numbers are refused by `tables` (and `figures`), never
//! printed as results: each refusal one line naming the file and the field, exit 2, nothing
//! written; means that do not overflow; every skipped value footnoted; Markdown cells escaped.

use std::fs;
use std::path::Path;

use crate::common::{expect_error, expect_success, run_cli};

/// An lm-eval-harness result file with the six tasks at `acc` / `acc_norm` 0.5, `piqa`'s
/// `acc,none` set to `piqa_acc` and its stderr to `piqa_stderr` (JSON text).
fn lm_eval_file(dir: &Path, name: &str, piqa_acc: &str, piqa_stderr: &str) -> String {
    let other = r#"{"acc,none": 0.5, "acc_stderr,none": 0.01, "acc_norm,none": 0.5, "acc_norm_stderr,none": 0.01}"#;
    let json = format!(
        r#"{{"results": {{"winogrande": {other}, "hellaswag": {other}, "arc_challenge": {other},
            "arc_easy": {other}, "boolq": {other},
            "piqa": {{"acc,none": {piqa_acc}, "acc_stderr,none": {piqa_stderr}, "acc_norm,none": 0.5}}}},
            "lm_eval_version": "0.4.13"}}"#
    );
    let path = dir.join(name);
    fs::write(&path, json).unwrap();
    path.display().to_string()
}

/// `tables` over Table 3 runs `1B/a` and `1B/b` with the given extra options, into `out`.
fn tables(dir: &Path, extra: &[String]) -> std::process::Output {
    let mut args: Vec<String> = ["tables", "--table3", "a,b", "--out", "out"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run_cli(dir, &refs)
}

/// A refusal: one line naming `file` and `field`, exit 2, no output folder.
fn refused(dir: &Path, extra: &[String], file: &str, field: &str) -> String {
    let err = expect_error(&tables(dir, extra));
    assert!(
        err.contains(file) && err.contains(field),
        "{file} {field}: {err}"
    );
    assert!(!dir.join("out").exists(), "partial output: {err}");
    err
}

fn lm(run: &str, path: &str) -> [String; 2] {
    ["--lm-eval".into(), format!("{run}={path}")]
}

#[test]
fn accuracy_above_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let good = lm_eval_file(tmp.path(), "good.json", "0.5", "0.01");
    for (name, acc) in [("above.json", "1.5"), ("huge.json", "1e308")] {
        let bad = lm_eval_file(tmp.path(), name, acc, "0.01");
        let mut extra = lm("1B/a", &good).to_vec();
        extra.extend(lm("1B/b", &bad));
        let err = refused(tmp.path(), &extra, name, r#"results.piqa."acc,none""#);
        assert!(err.contains("[0, 1]"), "{err}");
    }
}

#[test]
fn accuracy_below_zero_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = lm_eval_file(tmp.path(), "below.json", "-0.2", "0.01");
    refused(
        tmp.path(),
        &lm("1B/a", &bad),
        "below.json",
        r#"results.piqa."acc,none""#,
    );
}

#[test]
fn negative_stderr_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = lm_eval_file(tmp.path(), "s.json", "0.5", "-0.01");
    let err = refused(
        tmp.path(),
        &lm("1B/a", &bad),
        "s.json",
        r#"results.piqa."acc_stderr,none""#,
    );
    assert!(err.contains("standard error"), "{err}");
    // "N/A" (lm-eval could not compute it) is no stderr, not an error
    let na = lm_eval_file(tmp.path(), "na.json", "0.5", r#""N/A""#);
    expect_success(&tables(tmp.path(), &lm("1B/a", &na)));
}

/// An `analyze --out` folder whose attention.csv has the given ppl rows of model `m`.
fn results_dir(dir: &Path, name: &str, ppl: &[&str]) -> String {
    let folder = dir.join(name);
    fs::create_dir_all(&folder).unwrap();
    let mut csv = String::from("model,metric,layer,head,stat,value\nm,nll,,,mean,0.7\n");
    for v in ppl {
        csv.push_str(&format!("m,ppl,,,mean,{v}\n"));
    }
    fs::write(folder.join("attention.csv"), csv).unwrap();
    folder.display().to_string()
}

#[test]
fn perplexity_below_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, v) in [("zero", "0"), ("negative", "-5"), ("half", "0.5")] {
        let dir = results_dir(tmp.path(), name, &[v]);
        let err = refused(
            tmp.path(),
            &["--results".into(), format!("1B/a={dir}")],
            name,
            "column value",
        );
        assert!(err.contains("at least 1"), "{err}");
    }
}

#[test]
fn two_ppl_rows_for_one_model_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = results_dir(tmp.path(), "twice", &["2.0", "3.0"]);
    let err = refused(
        tmp.path(),
        &["--results".into(), format!("1B/a={dir}")],
        "attention.csv",
        "two ppl rows of model m",
    );
    // both rows named (data rows 2 and 3, after the nll row)
    assert!(err.contains("rows 2 and 3"), "{err}");
}

/// A training log `name` with the given loss column.
fn log(dir: &Path, name: &str, losses: &[&str]) -> String {
    let mut csv = String::from("step,loss\n");
    for (i, v) in losses.iter().enumerate() {
        csv.push_str(&format!("{},{v}\n", i + 1));
    }
    let path = dir.join(name);
    fs::write(&path, csv).unwrap();
    path.display().to_string()
}

#[test]
fn nan_in_loss_window_gets_a_footnote() {
    let tmp = tempfile::tempdir().unwrap();
    let path = log(tmp.path(), "log.csv", &["9", "2.0", "nan", "3.0"]);
    let extra = [
        "--log".to_string(),
        format!("1B/a={path}"),
        "--loss-window".into(),
        "3".into(),
    ];
    let md = expect_success(&tables(tmp.path(), &extra));
    // (2 + 3) / 2 over the window's finite values
    assert!(md.contains("| 2.500 |"), "{md}");
    assert!(
        md.contains("Loss: 1 values of `loss` in the window") && md.contains("1 NaN"),
        "{md}"
    );
}

#[test]
fn loss_window_mean_does_not_overflow() {
    let tmp = tempfile::tempdir().unwrap();
    let path = log(tmp.path(), "log.csv", &["1e308", "1e308", "1e308"]);
    let extra = ["--log".to_string(), format!("1B/a={path}")];
    expect_success(&tables(tmp.path(), &extra));
    let csv = fs::read_to_string(tmp.path().join("out").join("paper_tables.csv")).unwrap();
    let loss = csv
        .lines()
        .find(|l| l.contains(",a,") && l.contains(",loss,"))
        .unwrap();
    // table, size, method, method_name, column, value, ...
    let value: f64 = loss.split(',').nth(5).unwrap().parse().unwrap();
    assert_eq!(value, 1e308, "{loss}");
}

#[test]
fn empty_method_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let good = lm_eval_file(tmp.path(), "good.json", "0.5", "0.01");
    let manifest = tmp.path().join("paper.toml");
    fs::write(
        &manifest,
        format!("[[run]]\nsize = \"1B\"\nmethod = \"\"\nlm_eval = \"{good}\"\n"),
    )
    .unwrap();
    let err = expect_error(&run_cli(
        tmp.path(),
        &["tables", "--manifest", "paper.toml", "--out", "out"],
    ));
    assert!(
        err.contains("paper.toml") && err.contains("run 1 (size 1B): method is empty"),
        "{err}"
    );
    let err = expect_error(&tables(tmp.path(), &lm("1B/ ", &good)));
    assert!(err.contains("must all be given"), "{err}");
    let err = expect_error(&run_cli(
        tmp.path(),
        &[
            "tables",
            "--table3",
            "a,,b",
            "--lm-eval",
            &format!("1B/a={good}"),
        ],
    ));
    assert!(err.contains("--table3"), "{err}");
}

#[test]
fn two_runs_of_one_size_and_method_are_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("paper.toml");
    fs::write(
        &manifest,
        "[[run]]\nsize = \"1B\"\nmethod = \"asa\"\n[[run]]\nsize = \"1B\"\nmethod = \"b\"\n\
         [[run]]\nsize = \"1B\"\nmethod = \"affine_scaled\"\n",
    )
    .unwrap();
    let err = expect_error(&run_cli(
        tmp.path(),
        &["tables", "--manifest", "paper.toml", "--out", "out"],
    ));
    assert!(err.contains("runs 1 and 3"), "{err}");
}

#[test]
fn pipe_in_method_name_is_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let good = lm_eval_file(tmp.path(), "good.json", "0.5", "0.01");
    let extra = [
        "--lm-eval".to_string(),
        format!("1B/a|b={good}"),
        "--lm-eval".into(),
        format!("1B/b={good}"),
    ];
    let mut args: Vec<String> = ["tables", "--table3", "a|b,b", "--out", "out"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let md = expect_success(&run_cli(tmp.path(), &refs));
    let row = md
        .lines()
        .find(|l| l.contains("a\\|b"))
        .expect("escaped row");
    // 2 + 9 columns: every row has as many unescaped pipes as the header
    let pipes = |l: &str| l.replace("\\|", "").matches('|').count();
    let header = md.lines().find(|l| l.starts_with("| Size")).unwrap();
    assert_eq!(pipes(row), pipes(header), "{md}");
    let tex = fs::read_to_string(tmp.path().join("out").join("table3.tex")).unwrap();
    assert!(tex.contains(r"a\textbar{}b"), "{tex}");
}

/// `figures` reads grad_stats and spikes: a negative standard deviation or MAD is refused
/// naming the line and column; a run name with `|` is escaped in tables4_5.md.
#[test]
fn negative_std_in_grad_stats_is_refused_by_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let res = tmp.path().join("res");
    fs::create_dir_all(&res).unwrap();
    let header = "run,metric,step_start,step_end,n,mean,std,var,cv,ddof,n_excluded\n";
    fs::write(
        res.join("grad_stats.csv"),
        format!("{header}a|b,grad_norm,0,10,10,1.0,0.5,0.25,0.5,1,0\n"),
    )
    .unwrap();
    expect_success(&run_cli(
        tmp.path(),
        &["figures", "res", "--out", "fig", "--quiet"],
    ));
    let md = fs::read_to_string(tmp.path().join("fig").join("tables4_5.md")).unwrap();
    assert!(md.contains("| a\\|b | grad_norm |"), "{md}");
    fs::write(
        res.join("grad_stats.csv"),
        format!("{header}a,grad_norm,0,10,10,1.0,-0.5,0.25,-0.5,1,0\n"),
    )
    .unwrap();
    let err = expect_error(&run_cli(
        tmp.path(),
        &["figures", "res", "--out", "fig2", "--quiet"],
    ));
    assert!(
        err.contains("grad_stats.csv") && err.contains("line 2, column `std`"),
        "{err}"
    );
    assert!(!tmp.path().join("fig2").exists());
}
