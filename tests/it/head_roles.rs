//! Issue 39: head roles from the command line. The engineered `head_roles` checkpoint has
//! heads set by hand to a known role each; its head_roles.csv and attention.csv match
//! `tools/make_induction_fixtures.py`'s float64 scores (|x - y| <= 1e-6 + 1e-5 |y|), probe
//! shards merge to the single run, and bad probe options are one-line errors. The probe's
//! windows and scores on every kernel are tested beside the library
//! (crates/asa-analysis/tests/library/induction.rs).

use std::path::Path;

use asa_tables::{read_table, Column, Table};
use serde_json::Value;

use crate::common::*;

/// Column `name` of `table`.
fn column<'a>(table: &'a Table, name: &str) -> &'a Column {
    &table
        .columns
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .1
}

fn floats(table: &Table, name: &str) -> Vec<Option<f64>> {
    match column(table, name) {
        Column::Float(v) => v.clone(),
        Column::Int(v) => v.iter().map(|x| x.map(|x| x as f64)).collect(),
        // a column of empty cells reads back as text
        Column::Str(v) => v.iter().map(|x| x.as_ref().map(|_| f64::NAN)).collect(),
        Column::Bytes(_) => panic!("{name}: bytes"),
    }
}

fn texts(table: &Table, name: &str) -> Vec<String> {
    match column(table, name) {
        Column::Str(v) => v.iter().map(|x| x.clone().unwrap_or_default()).collect(),
        _ => panic!("{name} is not text"),
    }
}

/// `analyze` of the engineered checkpoint on its probe (seed 3, L = 10, 4 windows, local
/// window 4) with `extra` arguments, into `out`.
fn analyze_head_roles(dir: &Path, out: &str, extra: &[&str]) {
    let model = format!("hr={}", model_dir("head_roles").display());
    let mut args = vec![
        "analyze",
        &model,
        "--probe",
        "induction",
        "--seq-len",
        "21",
        "--num-seqs",
        "4",
        "--seed",
        "3",
        "--role-local-window",
        "4",
        "--quiet",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    expect_success(&run_cli(dir, &args));
}

/// head_roles.csv of `dir` against the reference's scores and `roles` (`[layer][head]`);
/// `induction`: whether its induction_score column is filled.
fn check_head_roles_csv(dir: &Path, roles: &Value, induction: bool) {
    let reference = induction_reference("head_roles");
    let want = &reference["probes"][0];
    let table = read_table(&dir.join("head_roles.csv")).unwrap();
    let (layers, heads) = (floats(&table, "layer"), floats(&table, "head"));
    let role = texts(&table, "role");
    assert_eq!(table.height(), 8);
    assert!(texts(&table, "model").iter().all(|m| m == "hr"));
    for r in 0..table.height() {
        let (l, h) = (
            layers[r].unwrap() as usize - 1,
            heads[r].unwrap() as usize - 1,
        );
        assert_eq!(role[r], roles[l][h].as_str().unwrap(), "layer {l} head {h}");
        for (col, key) in [
            ("first_token", "first_token"),
            ("local_mass", "local_mass_4"),
            ("prev_token", "prev_token"),
        ] {
            let got = floats(&table, col)[r].unwrap();
            assert_close(got, num(&want[key][l][h]), METRIC_ATOL, METRIC_RTOL, col);
        }
        let score = floats(&table, "induction_score")[r];
        match induction {
            true => assert_close(
                score.unwrap(),
                num(&want["induction_score"][l][h]),
                METRIC_ATOL,
                METRIC_RTOL,
                "induction_score",
            ),
            false => assert!(score.is_none(), "{score:?}"),
        }
    }
}

#[test]
fn the_engineered_heads_get_their_roles_from_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    analyze_head_roles(tmp.path(), "o", &[]);
    let dir = tmp.path().join("o");
    let reference = induction_reference("head_roles");
    let want = &reference["probes"][0];
    assert_eq!(
        want["roles_4"],
        serde_json::json!([
            ["sink", "previous_token", "local", "mixed"],
            ["induction", "sink", "previous_token", "mixed"]
        ])
    );
    check_head_roles_csv(&dir, &want["roles_4"], true);
    // attention.csv carries the induction scores too
    let attention = read_table(&dir.join("attention.csv")).unwrap();
    let (metric, values) = (texts(&attention, "metric"), floats(&attention, "value"));
    let (layers, heads) = (floats(&attention, "layer"), floats(&attention, "head"));
    let mut rows = 0;
    for r in (0..attention.height()).filter(|&r| metric[r] == "induction_score") {
        let (l, h) = (
            layers[r].unwrap() as usize - 1,
            heads[r].unwrap() as usize - 1,
        );
        let y = num(&want["induction_score"][l][h]);
        assert_close(
            values[r].unwrap(),
            y,
            METRIC_ATOL,
            METRIC_RTOL,
            "attention.csv",
        );
        rows += 1;
    }
    assert_eq!(rows, 8);
    // run.json: the probe, L and the seed that rebuild the windows; the thresholds
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run["models"][0]["probe"],
        serde_json::json!({"probe": "induction", "copy_len": 10, "seed": 3})
    );
    assert_eq!(run["options"]["probe"], "induction");
    assert_eq!(run["options"]["roles"]["local_window"], 4);
    let corpus = run["models"][0]["corpus"].as_str().unwrap();
    assert!(corpus.contains("induction probe (seed 3)"), "{corpus}");
    // without the induction score the induction head has no role of its own
    analyze_head_roles(tmp.path(), "n", &["--metrics", "head_role"]);
    let without = &want["roles_4_without_induction"];
    check_head_roles_csv(&tmp.path().join("n"), without, false);
    assert!(!tmp.path().join("n/attention.csv").exists());
}

#[test]
fn probe_shards_merged_give_the_single_run() {
    let tmp = tempfile::tempdir().unwrap();
    analyze_head_roles(tmp.path(), "whole", &[]);
    for k in 0..2 {
        analyze_head_roles(
            tmp.path(),
            &format!("p{k}"),
            &["--shard", &format!("{k}/2")],
        );
    }
    let merged = run_cli(
        tmp.path(),
        &["merge", "p1", "p0", "--out", "merged", "--quiet"],
    );
    expect_success(&merged);
    let read =
        |d: &str| std::fs::read_to_string(tmp.path().join(d).join("head_roles.csv")).unwrap();
    assert_eq!(read("merged"), read("whole"));
}

#[test]
fn bad_probe_options_are_one_line_errors_naming_the_option() {
    let model = model_dir("llama_gqa").display().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c.txt");
    std::fs::write(&corpus, "some text").unwrap();
    let corpus = corpus.display().to_string();
    let corpus = corpus.as_str();
    for (extra, needle) in [
        (
            vec!["--probe", "induction", "--seq-len", "20"],
            "--seq-len must be odd",
        ),
        (vec!["--probe", "induction", "--seq-len", "5"], "at least 7"),
        (
            vec!["--probe", "nope", "--seq-len", "21"],
            "invalid value 'nope' for '--probe",
        ),
        (
            vec!["--metrics", "induction_score", "--seq-len", "21"],
            "add --probe induction",
        ),
        (
            vec![
                "--probe",
                "induction",
                "--seq-len",
                "21",
                "--corpus",
                corpus,
            ],
            "drop --corpus",
        ),
        (
            vec![
                "--probe",
                "induction",
                "--seq-len",
                "21",
                "--windows",
                "documents",
            ],
            "--windows documents",
        ),
        (
            vec!["--seq-len", "21", "--role-local-window", "0"],
            "--role-local-window must be at least 1",
        ),
        (
            vec!["--seq-len", "21", "--role-sink", "nan"],
            "--role-sink must be a finite number",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["analyze", model.as_str(), "--num-seqs", "1", "--out", "o"];
        args.extend(extra.iter().copied());
        let err = expect_error(&run_cli(dir.path(), &args));
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!dir.path().join("o").exists(), "{extra:?}: output written");
    }
}
