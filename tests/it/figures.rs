//! The `figures` command (issue 5, SPEC section 6) on the fixture tables of
//! `tests/fixtures/tables`: the files it writes, the notes of skipped figures, and bad input
//! (a missing folder, an unparsable cell, two folders sharing a label) as one-line errors
//! with no output. The figures themselves are tested beside their crate
//! (crates/asa-figures/tests/figures.rs).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tables(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tables")
        .join(name)
}

#[test]
fn folders_sharing_a_label_are_an_error_not_one_line() {
    // two folders with a run or model of the same name would be drawn as one line
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(
        tables("full").join("attention.csv"),
        copy.join("attention.csv"),
    )
    .unwrap();
    let (full, copy) = (tables("full"), copy.display().to_string());
    let full = full.display().to_string();
    let f = out.path().join("f").display().to_string();
    let err = common::expect_error(&run(&["figures", &full, &copy, "--out", &f]));
    assert!(
        err.contains("copy/attention.csv") && err.contains("label `asa` is also in"),
        "{err}"
    );
    assert!(!out.path().join("f").exists());
    // the same folder twice is read once
    let o = run(&["figures", &full, &full, "--out", &f]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(args)
        .output()
        .expect("the asa-analyze binary runs")
}

#[test]
fn cli_writes_every_figure_and_the_tables() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("figures");
    let (full, logs) = (tables("full"), tables("logs"));
    let o = run(&[
        "figures",
        full.to_str().unwrap(),
        logs.to_str().unwrap(),
        "--out",
        dest.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("wrote 29 files"), "{err}");
    let mut files: Vec<String> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 29, "{files:?}");
    assert!(
        files.iter().all(|f| !f.starts_with('.')),
        "staging left behind"
    );
    let md = std::fs::read_to_string(dest.join("tables4_5.md")).unwrap();
    assert!(
        md.contains("| softmax | grad_norm | 0..100 | 1.060 |"),
        "{md}"
    );
    assert!(
        md.contains("| Method | Metric | Steps | k = 6 | k = 9 | Median | MAD |"),
        "{md}"
    );
    assert!(md.contains("| softmax | grad_norm | all | 2 | 1 |"), "{md}");
    // One notation for step windows, said once per table; never "(half-open)" beside "all".
    assert!(!md.contains("half-open"), "{md}");
    assert_eq!(
        md.matches("a..b from step a up to but not including b")
            .count(),
        2
    );
}

#[test]
fn cli_notes_skipped_figures_and_rejects_a_missing_folder() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("figs");
    let logs = tables("logs");
    let o = run(&[
        "figures",
        logs.to_str().unwrap(),
        "--out",
        dest.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("note: fig4_first_token: skipped (no attention table)"),
        "{err}"
    );
    assert!(dest.join("fig7_loss.png").is_file() && dest.join("fig11_clipping.svg").is_file());
    assert!(!dest.join("fig4_first_token.png").exists());

    let missing = out.path().join("nope");
    let dest = out.path().join("never");
    let o = run(&[
        "figures",
        missing.to_str().unwrap(),
        "--out",
        dest.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nope: not a results folder"), "{err}");
    assert!(!dest.exists(), "no output folder on bad input");
}

#[test]
fn unparsable_cells_are_errors_naming_line_and_column() {
    // a value that is no number, or a layer that is no integer, would have been drawn as a
    // gap (read as empty); it is bad input instead
    let out = tempfile::tempdir().unwrap();
    let full = std::fs::read_to_string(tables("full").join("attention.csv")).unwrap();
    let header = full.lines().next().unwrap();
    let cols: Vec<&str> = header.split(',').collect();
    let (value, layer) = (
        cols.iter().position(|c| *c == "value").unwrap(),
        cols.iter().position(|c| *c == "layer").unwrap(),
    );
    for (column, cell, says) in [
        (
            value,
            "0.5x",
            "line 3, column `value`: `0.5x` is not a number",
        ),
        (
            layer,
            "1.5",
            "line 3, column `layer`: `1.5` is not an integer",
        ),
        (
            layer,
            "-3",
            "line 3, column `layer`: `-3` is not an integer >= 1",
        ),
        // a row without a model label was dropped without a word
        (0, "", "line 3, column `model`: the label is empty"),
    ] {
        let dir = out.path().join(format!("bad{column}{cell}"));
        std::fs::create_dir(&dir).unwrap();
        let mut lines: Vec<String> = full.lines().map(str::to_string).collect();
        let mut row: Vec<String> = lines[2].split(',').map(str::to_string).collect();
        row[column] = cell.to_string();
        lines[2] = row.join(",");
        std::fs::write(dir.join("attention.csv"), lines.join("\n") + "\n").unwrap();
        let dest = out.path().join(format!("figs{column}{cell}"));
        let err = common::expect_error(&run(&[
            "figures",
            dir.to_str().unwrap(),
            "--out",
            dest.to_str().unwrap(),
        ]));
        assert!(
            err.contains("attention.csv: ") && err.contains(says),
            "{err}"
        );
        assert!(!dest.exists(), "no output folder on bad input");
    }
}
