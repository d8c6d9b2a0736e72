//! Issue 28: `tables`, the paper's Tables 1-3, against values read independently: parameter
//! counts from the safetensors headers, the final loss from the log's rows, the perplexity
//! of transformers' float64 reference, the accuracies of real lm-eval-harness result files
//! (`tools/make_lm_eval_fixture.py`).

use crate::common;

use std::fs;
use std::path::Path;

use common::*;
use polars::prelude::*;

/// Stored parameters of a checkpoint folder, from its safetensors headers alone (buffers
/// named `alpha_ma` left out, as the paper counts parameters).
fn header_parameters(dir: &Path) -> f64 {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .map(|p| file_parameters(&p))
        .sum()
}

fn file_parameters(path: &Path) -> f64 {
    let bytes = fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__" && !name.ends_with("alpha_ma"))
        .map(|(_, t)| {
            t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product::<u64>() as f64
        })
        .sum()
}

/// The accuracy (percent) lm-eval reported for `task` as `metric` in `file`.
fn lm_eval(file: &str, task: &str, metric: &str) -> f64 {
    let path = fixtures().join("lm_eval").join(file);
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    100.0
        * json["results"][task][format!("{metric},none")]
            .as_f64()
            .unwrap()
}

fn read_csv(path: &Path) -> DataFrame {
    CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(None)
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .unwrap()
        .finish()
        .unwrap()
}

/// The value of one cell of the tidy table (`None`: empty), asserting it exists once.
fn cell(df: &DataFrame, table: i64, size: &str, method: &str, column: &str) -> Option<f64> {
    let mask = df.column("table").unwrap().i64().unwrap().equal(table)
        & df.column("size").unwrap().str().unwrap().equal(size)
        & df.column("method").unwrap().str().unwrap().equal(method)
        & df.column("column").unwrap().str().unwrap().equal(column);
    let rows = df.filter(&mask).unwrap();
    assert_eq!(rows.height(), 1, "table {table} {size} {method} {column}");
    rows.column("value").unwrap().f64().unwrap().get(0)
}

/// analyze of the three fixtures over their reference ids, into `dir/res`.
fn analyze_fixtures(dir: &Path) {
    let corpus = ids_corpus("llama_gqa", dir);
    let arg = |label: &str, name: &str| format!("{label}={}", model_dir(name).display());
    let out = run_cli(
        dir,
        &[
            "analyze",
            &arg("base", "llama_gqa"),
            &arg("sink", "sink"),
            &arg("asa", "affine_scaled"),
            "--corpus",
            &corpus,
            "--seq-len",
            "20",
            "--num-seqs",
            "3",
            "--bos",
            "never",
            "--metrics",
            "nll",
            "--quiet",
            "--out",
            "res",
        ],
    );
    expect_success(&out);
}

#[test]
fn table1_from_a_manifest_matches_the_inputs_read_independently() {
    let tmp = tempfile::tempdir().unwrap();
    analyze_fixtures(tmp.path());
    let fx = fixtures();
    let manifest = format!(
        r#"loss_window = 3

[[run]]
size = "tiny"
method = "baseline"
checkpoint = "{base}"
log = "{logs}/hand.csv"
results = "res"
model = "base"
lm_eval = "{lm}/baseline.json"

[[run]]
size = "tiny"
checkpoint = "{sink}"
results = "res"

[[run]]
size = "tiny"
method = "asa"
checkpoint = "{asa}"
log = "{logs}/noisy.csv"
results = "res"
lm_eval = ["{lm}/asa.json"]
"#,
        base = model_dir("llama_gqa").display(),
        sink = model_dir("sink").display(),
        asa = model_dir("affine_scaled").display(),
        logs = fx.join("logs").display(),
        lm = fx.join("lm_eval").display(),
    );
    fs::write(tmp.path().join("paper.toml"), manifest).unwrap();
    let stdout = expect_success(&run_cli(
        tmp.path(),
        &["tables", "--manifest", "paper.toml", "--out", "tables"],
    ));
    let out = tmp.path().join("tables");
    let df = read_csv(&out.join("paper_tables.csv"));

    // Delta Params: the stored parameters over the baseline's, from the headers
    let params = |name: &str| header_parameters(&model_dir(name));
    let base = params("llama_gqa");
    assert_eq!(
        params("sink") - base,
        8.0,
        "2 layers x 4 heads of sink logits"
    );
    for (method, name) in [
        ("baseline", "llama_gqa"),
        ("sink", "sink"),
        ("affine_scaled", "affine_scaled"),
    ] {
        let got = cell(&df, 1, "tiny", method, "delta_params_m").unwrap();
        assert_close(got, (params(name) - base) / 1e6, 0.0, 1e-12, method);
    }
    // the final loss: hand.csv's last three steps (6, 7, 8)
    assert_close(
        cell(&df, 1, "tiny", "baseline", "loss").unwrap(),
        (2.0 + 2.5 + 3.0) / 3.0,
        0.0,
        1e-12,
        "loss",
    );
    let noisy = read_csv(&fx.join("logs").join("noisy.csv"));
    let (steps, loss) = (
        noisy.column("step").unwrap().i64().unwrap().clone(),
        noisy
            .column("loss")
            .unwrap()
            .cast(&DataType::Float64)
            .unwrap(),
    );
    let last = steps.max().unwrap();
    let tail: Vec<f64> = (0..noisy.height())
        .filter(|&i| steps.get(i).unwrap() > last - 3)
        .filter_map(|i| loss.f64().unwrap().get(i))
        .filter(|v| v.is_finite())
        .collect();
    assert!(!tail.is_empty());
    assert_close(
        cell(&df, 1, "tiny", "affine_scaled", "loss").unwrap(),
        tail.iter().sum::<f64>() / tail.len() as f64,
        0.0,
        1e-12,
        "noisy loss",
    );
    // perplexity: transformers' float64 reference of each fixture
    for (method, name) in [
        ("baseline", "llama_gqa"),
        ("sink", "sink"),
        ("affine_scaled", "affine_scaled"),
    ] {
        let want = reference_metrics(name)["nll"]["ppl"].as_f64().unwrap();
        assert_close(
            cell(&df, 1, "tiny", method, "ppl").unwrap(),
            want,
            1e-6,
            1e-5,
            method,
        );
    }
    // accuracies: lm-eval's numbers in percent, acc_norm for HellaSwag and ARC-c
    let tasks = [
        ("winogrande", "acc"),
        ("piqa", "acc"),
        ("hellaswag", "acc_norm"),
        ("arc_challenge", "acc_norm"),
        ("arc_easy", "acc"),
        ("boolq", "acc"),
    ];
    for (method, file) in [("baseline", "baseline.json"), ("affine_scaled", "asa.json")] {
        let mut sum = 0.0;
        for (task, metric) in tasks {
            let want = lm_eval(file, task, metric);
            sum += want;
            assert_close(
                cell(&df, 1, "tiny", method, task).unwrap(),
                want,
                0.0,
                1e-12,
                task,
            );
        }
        assert_close(
            cell(&df, 1, "tiny", method, "avg").unwrap(),
            sum / 6.0,
            0.0,
            1e-12,
            "avg",
        );
        // the sink run has no lm-eval result: empty, never zero
        assert_eq!(cell(&df, 1, "tiny", "sink", "piqa"), None);
    }

    // the Markdown: the paper's columns, the best accuracy of the size in bold, the empty
    // cells explained, the sink's method from its weights said
    let md = fs::read_to_string(out.join("table1.md")).unwrap();
    assert_eq!(md, stdout, "stdout prints the Markdown");
    assert!(md.contains("| Size | Method | ΔParams (M) | Loss | PPL | WinoGrande | PIQA | HellaSwag | ARC-c | ARC-e | BoolQ | Avg. |"), "{md}");
    let row = |name: &str| {
        md.lines()
            .find(|l| l.contains(&format!("| {name} |")))
            .unwrap()
            .to_string()
    };
    let (b, a) = (row("Baseline"), row("Affine-Scaled"));
    assert!(b.starts_with("| tiny | Baseline | 0 | 2.500 |"), "{b}");
    for (i, (task, metric)) in tasks.iter().enumerate() {
        let (wb, wa) = (
            lm_eval("baseline.json", task, metric),
            lm_eval("asa.json", task, metric),
        );
        let col = |line: &str| line.split('|').nth(6 + i).unwrap().trim().to_string();
        assert_eq!(col(&b).starts_with("**"), wb >= wa, "{task}: {b}");
        assert_eq!(col(&a).starts_with("**"), wa >= wb, "{task}: {a}");
    }
    assert!(
        row("Sink").ends_with("|  |  |  |  |  |  |  |"),
        "{}",
        row("Sink")
    );
    assert!(md.contains("tiny Sink: WinoGrande, PIQA, HellaSwag, ARC-c, ARC-e, BoolQ, Avg. empty: no lm-eval-harness result"), "{md}");
    assert!(md.contains("tiny Sink: method from the checkpoint's variant sink (weights: model.layers.0.self_attn.sinks)"), "{md}");
    assert!(
        md.contains("tiny Sink: Loss empty: no training log"),
        "{md}"
    );
    let tex = fs::read_to_string(out.join("table1.tex")).unwrap();
    for part in [
        r"\toprule",
        r"\midrule",
        r"\bottomrule",
        r"$\Delta$Params (M)",
        r"\textbf{",
        "tiny & Baseline & 0 & 2.500",
    ] {
        assert!(tex.contains(part), "{part}: {tex}");
    }
    assert!(
        !out.join("table2.md").exists(),
        "no Table 2 without its methods"
    );
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("run_tables.json")).unwrap()).unwrap();
    assert_eq!(record["options"]["loss_window"], 3);
    assert_eq!(record["options"]["accuracy"]["hellaswag"], "acc_norm");
}

#[test]
fn tables_2_and_3_from_options_and_refusals() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixtures();
    let lm = |f: &str| fx.join("lm_eval").join(f).display().to_string();
    let ckpt = |key: &str, name: &str| format!("{key}={}", model_dir(name).display());
    let args = [
        "tables".to_string(),
        "--checkpoint".into(),
        ckpt("1B/baseline", "llama_gqa"),
        "--checkpoint".into(),
        ckpt("1B/gated", "gated"),
        "--checkpoint".into(),
        ckpt("1B/asa_gated", "affine_scaled_gated"),
        "--lm-eval".into(),
        format!("1B/gated={}", lm("baseline.json")),
        "--lm-eval".into(),
        format!("1B/sigmoid={}", lm("asa.json")),
        "--lm-eval".into(),
        format!("1B/linear_clipping={}", lm("baseline.json")),
        "--table3".into(),
        "sigmoid,linear_clipping".into(),
        "--accuracy".into(),
        "piqa=acc_norm".into(),
        "--out".into(),
        "t".into(),
        "--quiet".into(),
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdout = expect_success(&run_cli(tmp.path(), &refs));
    assert!(stdout.is_empty(), "--quiet: {stdout}");
    let df = read_csv(&tmp.path().join("t").join("paper_tables.csv"));
    // gated: the gate rows of q_proj, heads x head_dim x hidden per layer
    let params = |name: &str| header_parameters(&model_dir(name));
    let base = params("llama_gqa");
    assert_eq!(params("gated") - base, (2 * 4 * 8 * 32) as f64);
    assert_close(
        cell(&df, 2, "1B", "gated", "delta_params_m").unwrap(),
        (params("gated") - base) / 1e6,
        0.0,
        1e-12,
        "gated",
    );
    assert_close(
        cell(&df, 2, "1B", "affine_scaled_gated", "delta_params_m").unwrap(),
        (params("affine_scaled_gated") - base) / 1e6,
        0.0,
        1e-12,
        "asa gated",
    );
    assert_close(
        cell(&df, 2, "1B", "gated", "piqa").unwrap(),
        lm_eval("baseline.json", "piqa", "acc_norm"),
        0.0,
        1e-12,
        "piqa acc_norm",
    );
    // Table 3 in the order named; the runs without checkpoints have no Delta Params
    let t3 = fs::read_to_string(tmp.path().join("t").join("table3.md")).unwrap();
    let (s, l) = (
        t3.find("| sigmoid |").unwrap(),
        t3.find("| linear_clipping |").unwrap(),
    );
    assert!(s < l, "{t3}");
    assert_eq!(cell(&df, 3, "1B", "sigmoid", "delta_params_m"), None);
    assert_close(
        cell(&df, 3, "1B", "sigmoid", "avg").unwrap(),
        {
            let t = [
                ("winogrande", "acc"),
                ("piqa", "acc_norm"),
                ("hellaswag", "acc_norm"),
                ("arc_challenge", "acc_norm"),
                ("arc_easy", "acc"),
                ("boolq", "acc"),
            ];
            t.iter()
                .map(|(k, m)| lm_eval("asa.json", k, m))
                .sum::<f64>()
                / 6.0
        },
        0.0,
        1e-12,
        "table 3 avg",
    );
    assert!(!tmp.path().join("t").join("table1.md").exists());

    // refusals: one line, exit 2, nothing written
    let bad = tmp.path().join("bad.json");
    fs::write(&bad, r#"{"config": {}}"#).unwrap();
    let bad_arg = format!("1B/sink={}", bad.display());
    for (args, wanted) in [
        (
            vec!["tables", "--lm-eval", bad_arg.as_str(), "--out", "x"],
            "no `results` object",
        ),
        (
            vec!["tables", "--log", "1B=log.csv", "--out", "x"],
            "SIZE/METHOD",
        ),
        (vec!["tables", "--out", "x"], "tables needs runs"),
        (
            vec!["tables", "--results", "1B/sink=.", "--out", "x"],
            "not an analyze --out folder",
        ),
        (
            vec![
                "tables",
                "--lm-eval",
                "1B/sink=x.json",
                "--accuracy",
                "mmlu=acc",
                "--out",
                "x",
            ],
            "unknown task `mmlu`",
        ),
    ] {
        let err = expect_error(&run_cli(tmp.path(), &args));
        assert!(err.contains(wanted), "{wanted}: {err}");
        assert!(!tmp.path().join("x").exists());
    }
    fs::write(
        tmp.path().join("m.toml"),
        "[[run]]\nsize = \"1B\"\nmethod = \"sink\"\ncolour = \"red\"\n",
    )
    .unwrap();
    let err = expect_error(&run_cli(tmp.path(), &["tables", "--manifest", "m.toml"]));
    assert!(err.contains("m.toml") && err.contains("colour"), "{err}");
}
