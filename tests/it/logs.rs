//! Training-log statistics through the real binary: `grad-stats`, `spikes`, `curves`
//! (issue 4, SPEC section 5). Expected numbers come from numpy/scipy in
//! `tools/make_log_fixtures.py` (committed as `tests/fixtures/logs/expected.json`),
//! never from this crate.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Float tolerance against the float64 references: |x - y| <= ATOL + RTOL * |y|.
const ATOL: f64 = 1e-10;
const RTOL: f64 = 1e-9;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs")
}

/// Runs the binary in `dir` with `args`.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the asa-analyze binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs in the fixtures folder and parses `--json` output; panics with stderr on failure.
fn json_of(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let o = run_in(&fixtures(), &args);
    assert!(o.status.success(), "{args:?} failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

fn expected_cases() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    let v: Value = serde_json::from_str(&text).expect("expected.json parses");
    v["cases"].as_array().expect("cases").clone()
}

fn close(x: f64, y: f64) -> bool {
    (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= ATOL + RTOL * y.abs()
}

/// The fields a row is matched on.
fn key(row: &Value) -> String {
    ["run", "metric", "k", "step"]
        .iter()
        .map(|k| row.get(*k).map_or(String::new(), |v| v.to_string()))
        .collect::<Vec<_>>()
        .join("|")
}

/// Every expected row has an actual row with the same key whose fields agree: text,
/// integers and nulls exactly, floats within tolerance. Row counts must match.
fn compare_rows(case: &str, table: &str, expected: &[Value], actual: &[Value]) {
    assert_eq!(
        expected.len(),
        actual.len(),
        "{case}: {table} has {} rows, expected {}",
        actual.len(),
        expected.len()
    );
    for e in expected {
        let k = key(e);
        let a = actual
            .iter()
            .find(|a| key(a) == k)
            .unwrap_or_else(|| panic!("{case}: {table}: no row {k}"));
        for (field, ev) in e.as_object().expect("row object") {
            let av = a
                .get(field)
                .unwrap_or_else(|| panic!("{case}: {table} row {k}: no field {field}"));
            let ok = match (ev, av) {
                (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
                    close(y.as_f64().unwrap(), x.as_f64().unwrap())
                }
                _ => ev == av,
            };
            assert!(ok, "{case}: {table} row {k}: {field} = {av}, expected {ev}");
        }
    }
}

/// Runs one case of expected.json and checks every table it lists.
fn run_case(name: &str) {
    let cases = expected_cases();
    let case = cases
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name} in expected.json"));
    let args: Vec<&str> = case["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let got = json_of(&args);
    for (table, rows) in case["expect"].as_object().unwrap() {
        let actual = got[table]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: output has no {table}"));
        compare_rows(name, table, rows.as_array().unwrap(), actual);
    }
}

macro_rules! fixture_cases {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        $(
            $(#[doc = $doc])*
            #[test]
            fn $name() {
                run_case(stringify!($name));
            }
        )*
        const CASES: &[&str] = &[$(stringify!($name)),*];
    };
}

fixture_cases! {
    /// Table 4 by hand (see `hand_checkable_tables`), population statistics.
    hand_grad_stats_ddof0,
    /// Same window, sample statistics: ddof changes std and var.
    hand_grad_stats_ddof1,
    /// Unscaled MAD: k = 6 finds 2 spikes.
    hand_spikes_scale1_0,
    /// Normal-consistent MAD (1.4826): the same data gives 1 spike at k = 6.
    hand_spikes_scale1_4826,
    /// Default window 0..500 of a 3000-step decaying log, ddof 0.
    long_grad_stats_ddof0,
    /// Default window 0..500, ddof 1.
    long_grad_stats_ddof1,
    /// Open window `500..`; spikes planted between the unscaled and scaled thresholds.
    long_spikes_scale1_0,
    /// Same, MAD scaled: fewer spikes.
    long_spikes_scale1_4826,
    /// Median and MAD taken over the window 0..500, fractional k.
    long_spikes_window,
    /// Debiased EMA over the whole run, cut to `1000..=1100`; loss and grad_norm.
    long_curves_ema,
    /// NaN, inf, -inf, empty cells, duplicate steps, steps out of order, ddof 0.
    noisy_grad_stats_ddof0,
    /// The same with ddof 1.
    noisy_grad_stats_ddof1,
    /// Spikes on the noisy log: excluded values never count.
    noisy_spikes,
    /// TSV, `iteration` step column, `gradient_norm` alias, explicit label.
    tsv_grad_stats,
    /// JSON Lines with nested keys, eval lines, NaN/Infinity literals, null.
    jsonl_spikes,
    /// `--metric train.grad_norm` (dotted) finds the nested key, closed window.
    jsonl_grad_stats_dotted,
    /// A metric only some lines log (`eval/loss`), EMA 0.6.
    jsonl_curves_eval,
    /// W&B export: one row per W&B run, __MIN/__MAX ignored, ddof 0.
    wandb_grad_stats,
    /// W&B export with a label: runs `exp/<run>`, scaled MAD, k = 2.5.
    wandb_spikes_labelled,
    /// tensorboardX, a resumed run in two event files (later value wins), histograms skipped.
    tbx_spikes,
    /// tensorboardX, window over the overlap of the two files.
    tbx_grad_stats,
    /// torch.utils.tensorboard, curves with EMA and a half-open window.
    torch_curves,
    /// A single event file given directly, labelled.
    torch_spikes_file,
    /// TF2-style tensor summaries (float_val and tensor_content) from tensorboard's writer.
    tensor_spikes,
    /// Three runs of three formats in one command, one row each.
    multi_grad_stats,
}

#[test]
fn every_fixture_case_has_a_test() {
    let mut names: Vec<String> = expected_cases()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    let mut ours: Vec<String> = CASES.iter().map(|s| s.to_string()).collect();
    ours.sort();
    assert_eq!(names, ours);
}

#[test]
fn wandb_exports_with_another_x_axis_are_read_as_exports() {
    // W&B names the first column after the chart's x axis: a step key (HF Trainer's
    // train/global_step) or any key, recognised by the runs' __MIN / __MAX companions
    let cases = expected_cases();
    let case = cases
        .iter()
        .find(|c| c["name"] == "wandb_grad_stats")
        .unwrap();
    let text = std::fs::read_to_string(fixtures().join("wandb_export.csv")).unwrap();
    for axis in ["train/global_step", "custom_x"] {
        let tmp = tempfile::tempdir().unwrap();
        let renamed = text.replacen("\"Step\"", &format!("\"{axis}\""), 1);
        std::fs::write(tmp.path().join("export.csv"), renamed).unwrap();
        let o = run_in(
            tmp.path(),
            &["grad-stats", "export.csv", "--ddof", "0", "--json"],
        );
        assert!(o.status.success(), "{axis}: {}", stderr(&o));
        let got: Value = serde_json::from_slice(&o.stdout).unwrap();
        let want = case["expect"]["grad_stats"].as_array().unwrap();
        let got = got["grad_stats"].as_array().unwrap();
        compare_rows(axis, "grad_stats", want, got);
    }
}

#[test]
fn hand_checkable_tables() {
    // hand.csv, steps 0..8: g = [3, 4, 5, 5, 5, 6, 7, 12, 50].
    //
    // Table 4 over 0..7 (steps 0-6, g = [3, 4, 5, 5, 5, 6, 7]):
    //   mean = 35 / 7 = 5; deviations [-2, -1, 0, 0, 0, 1, 2], squares sum 10;
    //   ddof 1: var = 10 / 6 = 1.6667, std = 1.2910, cv = 1.2910 / 5 = 0.2582;
    //   ddof 0: var = 10 / 7 = 1.4286, std = 1.1952.
    let v = json_of(&["grad-stats", "hand.csv", "--steps", "0..7"]);
    let r = &v["grad_stats"][0];
    assert_eq!(r["n"], 7);
    assert!(close(r["mean"].as_f64().unwrap(), 5.0));
    assert!(close(r["var"].as_f64().unwrap(), 10.0 / 6.0));
    assert!(close(
        r["cv"].as_f64().unwrap(),
        (10.0f64 / 6.0).sqrt() / 5.0
    ));
    assert_eq!(
        (r["step_start"].as_i64(), r["step_end"].as_i64()),
        (Some(0), Some(7))
    );
    let v = json_of(&["grad-stats", "hand.csv", "--steps", "0..=6", "--ddof", "0"]);
    let r = &v["grad_stats"][0];
    assert!(close(r["var"].as_f64().unwrap(), 10.0 / 7.0));
    assert_eq!(r["step_end"], 7, "0..=6 is exported half-open as 0..7");

    // Table 5 over all 9 steps: median 5; |g - 5| = [2, 1, 0, 0, 0, 1, 2, 7, 45],
    // sorted [0, 0, 0, 1, 1, 2, 2, 7, 45], MAD = 1.
    //   unscaled: tau(6) = 5 + 6 = 11 -> {12, 50}: 2; tau(9) = 14 -> {50}: 1.
    //   scaled 1.4826: tau(6) = 5 + 8.8956 = 13.8956 -> {50}: 1; tau(9) = 18.3434 -> 1.
    let v = json_of(&["spikes", "hand.csv"]);
    let counts: Vec<(f64, i64, f64)> = v["spikes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["k"].as_f64().unwrap(),
                r["count"].as_i64().unwrap(),
                r["tau"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, vec![(6.0, 2, 11.0), (9.0, 1, 14.0)]);
    let steps: Vec<i64> = v["spike_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step"].as_i64().unwrap())
        .collect();
    assert_eq!(steps, vec![7, 8, 8], "k=6: steps 7 and 8; k=9: step 8");
    let v = json_of(&["spikes", "hand.csv", "--k", "6", "--mad-scale", "1.4826"]);
    assert_eq!(v["spikes"][0]["count"], 1);
    assert!(close(
        v["spikes"][0]["tau"].as_f64().unwrap(),
        5.0 + 6.0 * 1.4826
    ));
}

/// Reads a CSV header (our tables never quote their headers).
fn csv_header(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect()
}

fn csv_rows(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count() - 1
}

/// Files directly inside `dir`, sorted (hidden staging folders included).
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn starts_with(header: &[String], contract: &[&str]) -> bool {
    header.len() >= contract.len() && header.iter().zip(contract).all(|(h, c)| h == c)
}

#[test]
fn spikes_out_writes_the_table_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let fx = fixtures();
    let o = run_in(
        &fx,
        &[
            "spikes",
            "hand.csv",
            "long.csv",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "", "--quiet prints no table");
    assert_eq!(stderr(&o), "", "--quiet prints no warnings or notes");
    assert_eq!(
        listing(&out),
        [
            "run_spikes.json",
            "spike_steps.csv",
            "spikes.csv",
            "spikes.md"
        ]
    );
    let h = csv_header(&out.join("spikes.csv"));
    assert!(
        starts_with(
            &h,
            &[
                "run",
                "metric",
                "k",
                "mad_scale",
                "median",
                "mad",
                "tau",
                "count"
            ]
        ),
        "{h:?}"
    );
    assert_eq!(csv_rows(&out.join("spikes.csv")), 4, "2 runs x 2 k");
    assert_eq!(
        csv_header(&out.join("spike_steps.csv")),
        ["run", "metric", "k", "step", "value"]
    );
    let md = std::fs::read_to_string(out.join("spikes.md")).unwrap();
    assert!(
        md.contains("| Method | k = 6 | k = 9 | Median | MAD | n |"),
        "{md}"
    );
    assert!(md.contains("| hand | 2 | 1 | 5.000 | 1.000 | 9 |"), "{md}");
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run_spikes.json")).unwrap())
            .unwrap();
    assert_eq!(run["command"], "spikes");
    assert_eq!(run["inputs"][1]["source"], "train/grad_norm");
    assert_eq!(run["options"]["k"], serde_json::json!([6.0, 9.0]));
}

#[test]
fn table5_names_the_step_window_of_its_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("res");
    let args = ["spikes", "hand.csv", "--steps", "2..8", "--out"];
    let o = run_in(&fixtures(), &[&args[..], &[out.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let figs = tmp.path().join("figs");
    let o = run_in(
        &fixtures(),
        &[
            "figures",
            out.to_str().unwrap(),
            "--out",
            figs.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let md = std::fs::read_to_string(figs.join("tables4_5.md")).unwrap();
    assert!(
        md.contains("| Method | Metric | Steps | k = 6 | k = 9 |"),
        "{md}"
    );
    assert!(md.contains("| hand | grad_norm | 2..8 |"), "{md}");
}

#[test]
fn grad_stats_out_and_markdown() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run_in(
        &fixtures(),
        &[
            "grad-stats",
            "a=hand.csv",
            "b=noisy.csv",
            "--steps",
            "0..=50",
            "--out",
            tmp.path().to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let h = csv_header(&tmp.path().join("grad_stats.csv"));
    assert!(
        starts_with(
            &h,
            &[
                "run",
                "metric",
                "step_start",
                "step_end",
                "n",
                "mean",
                "std",
                "var",
                "cv",
                "ddof",
                "n_excluded"
            ]
        ),
        "{h:?}"
    );
    let md = std::fs::read_to_string(tmp.path().join("grad_stats.md")).unwrap();
    assert!(
        md.contains("| Method | Mean | Std | Var | CV | n |"),
        "{md}"
    );
    assert!(
        md.contains("b: 7 (3 missing, 2 NaN, 2 inf)"),
        "excluded steps are reported: {md}"
    );
    // stdout: one line per run after the header.
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.lines().next().unwrap().starts_with("run"));
}

#[test]
fn curves_out_and_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run_in(
        &fixtures(),
        &[
            "curves",
            "hand.csv",
            "tb_torch",
            "--ema",
            "0.9",
            "--out",
            tmp.path().to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        csv_header(&tmp.path().join("curves.csv")),
        ["run", "metric", "step", "value", "smoothed"]
    );
    // hand: 9 steps x 2 metrics; tb_torch: 200 x 2.
    assert_eq!(csv_rows(&tmp.path().join("curves.csv")), 9 * 2 + 200 * 2);

    let pq = tmp.path().join("pq");
    let o = run_in(
        &fixtures(),
        &[
            "spikes",
            "hand.csv",
            "--format",
            "parquet",
            "--out",
            pq.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["spikes.parquet", "spike_steps.parquet"] {
        let bytes = std::fs::read(pq.join(f)).unwrap();
        assert!(
            bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"),
            "{f} is Parquet"
        );
    }
}

#[test]
fn curves_default_metrics_skip_what_a_log_lacks() {
    // tb_tensor logs only gradient_norm: loss is skipped with a warning.
    let o = run_in(&fixtures(), &["curves", "tb_tensor", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no `loss` in this log; skipped"),
        "{}",
        stderr(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["curve_summary"].as_array().unwrap().len(), 1);
    assert_eq!(v["curve_summary"][0]["metric"], "grad_norm");
    assert_eq!(v["curve_summary"][0]["source"], "gradient_norm");
    // Named explicitly, a missing metric is an error.
    let o = run_in(&fixtures(), &["curves", "tb_tensor", "--metric", "loss"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn quality_problems_are_reported_not_hidden() {
    let o = run_in(&fixtures(), &["grad-stats", "noisy.csv", "--steps", "all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("noisy.csv") && err.contains("steps out of order; sorted"),
        "{err}"
    );
    assert!(err.contains("2 values overwritten"), "{err}");
    let v = json_of(&["grad-stats", "noisy.csv", "--steps", "all"]);
    let r = &v["grad_stats"][0];
    assert_eq!(
        (
            r["n_missing"].as_i64(),
            r["n_nan"].as_i64(),
            r["n_inf"].as_i64()
        ),
        (Some(3), Some(2), Some(2))
    );
    assert_eq!(r["n_duplicate"], 2);
    assert_eq!(r["step_start"], Value::Null);
}

#[test]
fn truncated_event_file_is_read_up_to_the_cut() {
    // A run still writing leaves a partial last record: warn and read the rest.
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("live");
    std::fs::create_dir(&run).unwrap();
    let src = fixtures().join("tb_torch/events.out.tfevents.1700000200.fixture.0");
    let bytes = std::fs::read(src).unwrap();
    std::fs::write(
        run.join("events.out.tfevents.1.host"),
        &bytes[..bytes.len() - 7],
    )
    .unwrap();
    let o = run_in(
        tmp.path(),
        &["curves", "live", "--metric", "grad_norm", "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("cut short"), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["curve_summary"][0]["run"], "live");
    assert_eq!(
        v["curve_summary"][0]["points"], 200,
        "the cut record was the loss at step 597"
    );
}

#[test]
fn jsonl_steps_past_exact_integers_are_errors_not_clamped() {
    // 1e300 and u64::MAX were both clamped to i64::MAX and merged as duplicates
    let tmp = tempfile::tempdir().unwrap();
    for step in ["1e300", "18446744073709551615"] {
        let text = format!(
            "{{\"step\": 1, \"grad_norm\": 1.0}}\n{{\"step\": {step}, \"grad_norm\": 2.0}}\n"
        );
        std::fs::write(tmp.path().join("log.jsonl"), text).unwrap();
        let o = run_in(tmp.path(), &["grad-stats", "log.jsonl"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{step}: {err}");
        assert!(
            err.contains("log.jsonl: line 2: step `step` is") && err.contains("not an integer"),
            "{step}: {err}"
        );
    }
}

#[test]
fn a_metric_named_twice_is_read_once() {
    // it was read as two runs of one label and refused with advice about labels
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = run_in(
        &fixtures(),
        &[
            "curves",
            "hand.csv",
            "--metric",
            "grad_norm,grad_norm",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["curve_summary"].as_array().unwrap().len(), 1, "{v}");
}

#[test]
fn an_event_file_without_one_whole_record_is_named() {
    // the folder's only event file holds 5 bytes: the error names that file, not the folder
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::write(run.join("events.out.tfevents.1.host"), [1u8, 2, 3, 4, 5]).unwrap();
    let o = run_in(tmp.path(), &["spikes", "run"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(
            "run/events.out.tfevents.1.host: event file holds no complete record (5 bytes)"
        ),
        "{err}"
    );
}

/// Bad input: exit 2, one line on stderr naming `needle_file` and `needle`, nothing
/// on stdout, nothing under --out.
fn assert_bad(args: &[&str], needle_file: &str, needle: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let mut all = args.to_vec();
    all.extend(["--out", out.to_str().unwrap()]);
    let o = run_in(&fixtures(), &all);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    assert!(err.starts_with("asa-analyze: "), "{err}");
    assert!(
        err.contains(needle_file),
        "{args:?}: names {needle_file}: {err}"
    );
    assert!(err.contains(needle), "{args:?}: says {needle}: {err}");
    assert_eq!(stdout(&o), "");
    assert!(
        listing(&out).is_empty(),
        "{args:?}: partial output {:?}",
        listing(&out)
    );
}

#[test]
fn bad_rows_and_headers_that_leave_a_value_unattributed() {
    // line 3 holds a third value the header names no column for; line 2's trailing
    // delimiter (an empty third cell) is fine
    assert_bad(
        &["spikes", "bad/extra_field.csv"],
        "extra_field.csv",
        "line 3: 3 fields, but the header names 2 columns",
    );
    assert_bad(
        &["grad-stats", "bad/duplicate_column.csv"],
        "duplicate_column.csv",
        "column `grad_norm` appears more than once",
    );
}

#[test]
fn bad_empty_file() {
    assert_bad(&["spikes", "bad/empty.csv"], "bad/empty.csv", "empty");
    assert_bad(
        &["spikes", "bad/header_only.csv"],
        "header_only.csv",
        "no data rows",
    );
    assert_bad(
        &["curves", "bad/empty.jsonl"],
        "empty.jsonl",
        "no JSON objects",
    );
}

#[test]
fn bad_metric_absent_lists_what_exists() {
    assert_bad(
        &["grad-stats", "bad/no_metric.csv"],
        "no_metric.csv",
        "columns found: lr, loss",
    );
    assert_bad(
        &["spikes", "tb_torch", "--metric", "grad_nrom"],
        "tb_torch",
        "scalar tags found: grad_norm, loss",
    );
    assert_bad(
        &["spikes", "nested.jsonl", "--metric", "eval/acc"],
        "nested.jsonl",
        "train/lr",
    );
    assert_bad(
        &["spikes", "bad/ambiguous.csv"],
        "ambiguous.csv",
        "train/grad_norm, gradient_norm",
    );
}

#[test]
fn bad_empty_step_window() {
    assert_bad(
        &["grad-stats", "hand.csv", "--steps", "100..200"],
        "hand.csv",
        "steps 0..=8",
    );
    // Several runs: the one with nothing in the window fails the command.
    assert_bad(
        &["spikes", "long.csv", "hand.csv", "--steps", "1000..2000"],
        "hand.csv",
        "steps 1000..2000",
    );
}

#[test]
fn bad_all_nan_column() {
    assert_bad(&["grad-stats", "bad/all_nan.csv"], "all_nan.csv", "10 NaN");
}

#[test]
fn bad_corrupted_event_file() {
    assert_bad(
        &["spikes", "bad/tb_corrupt"],
        "events.out.tfevents.1700000400.fixture.0",
        "CRC mismatch",
    );
}

#[test]
fn bad_unparseable_values() {
    assert_bad(
        &["spikes", "bad/garbage.csv"],
        "garbage.csv",
        "line 3, column `grad_norm`: `abc` is not a number",
    );
    assert_bad(
        &["spikes", "bad/broken.jsonl"],
        "broken.jsonl",
        "line 2: not valid JSON",
    );
    assert_bad(&["spikes", "missing.csv"], "missing.csv", "No such file");
}

#[test]
fn bad_options() {
    assert_bad(&["spikes", "hand.csv", "--k=-1"], "--k", "non-negative");
    assert_bad(
        &["spikes", "hand.csv", "--mad-scale", "0"],
        "--mad-scale",
        "positive",
    );
    assert_bad(&["curves", "hand.csv", "--ema", "1"], "--ema", "[0, 1)");
    assert_bad(
        &["grad-stats", "hand.csv", "--steps", "0..=1", "--ddof", "2"],
        "hand.csv",
        "ddof 2 needs at least 3",
    );
    assert_bad(
        &["spikes", "hand.csv", "long.csv", "hand.csv"],
        "hand.csv",
        "labelled `hand`",
    );
    let o = run_in(&fixtures(), &["grad-stats", "hand.csv", "--steps", "5..5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds no step"), "{}", stderr(&o));
}

/// Runs the binary in the fixtures folder with stdout sent to `stdout`.
fn run_into(stdout: impl Into<std::process::Stdio>, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .current_dir(fixtures())
        .args(args)
        .stdout(stdout)
        .output()
        .expect("the asa-analyze binary runs")
}

/// Issue 22: `asa-analyze ... | head` is not an error. Rust ignores SIGPIPE, so a write to
/// a pipe whose reader has closed fails with EPIPE: the command exits 0 and prints nothing
/// (no panic text). The reader is closed before the command starts, so every write fails.
#[test]
fn a_closed_stdout_exits_0_quietly() {
    let model = fixtures().join("../models/scale_invariant");
    let model = model.to_str().unwrap();
    for args in [
        &["spikes", "long.csv"][..],
        &["curves", "long.csv", "--json"],
        &["grad-stats", "hand.csv", "--steps", "0..7"],
        &["inspect", model],
        &["inspect", model, "--json"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = run_into(writer, args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
    }
}

/// Any other failure to write stdout is an error: one line, exit 2.
#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_is_an_error() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = run_into(full, &["spikes", "long.csv"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("asa-analyze: cannot write to stdout: No space left"),
        "{err}"
    );
}

/// `curves` reads an `attention_series` table (CSV or Parquet) as a log: each mean is a
/// series named as the training callbacks log it, each model a run. Expected values are
/// the fixture's own rows (written by tools/make_tables.py), read here as plain text.
#[test]
fn curves_read_an_attention_series_as_the_callbacks_name_it() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tables/full/attention_series.csv");
    let text = std::fs::read_to_string(&fixture).unwrap();
    let mut want: Vec<(String, i64, f64)> = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[2] == "first_token" && f[3] == "2" && f[4] == "1" && f[5] == "mean" {
            want.push((
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[6].parse().unwrap(),
            ));
        }
    }
    assert!(
        want.len() >= 4 && want.iter().any(|w| w.0 != want[0].0),
        "two models' steps"
    );
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("attention_series.parquet");
    let table = asa_tables::read_table(&fixture).unwrap();
    asa_tables::write_table(&table, &parquet, asa_tables::Format::Parquet).unwrap();
    for input in [&fixture, &parquet] {
        let input = input.to_str().unwrap();
        let v = json_of(&[
            "curves",
            input,
            "--metric",
            "attn/first_token/layer_02/head_01",
        ]);
        let got: Vec<(String, i64, f64)> = v["curves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["run"].as_str().unwrap().to_string(),
                    r["step"].as_i64().unwrap(),
                    r["value"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{input}");
    }
    // a series the table does not hold: the names it does hold
    let o = run_in(
        &fixtures(),
        &[
            "curves",
            fixture.to_str().unwrap(),
            "--metric",
            "attn/alpha/layer_01",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("no series `attn/alpha/layer_01`; series found: attn/first_token/layer_01"),
        "{err}"
    );
}
