//! The metric commands end to end: the real binary on the fixtures, tables read back with
//! polars (CSV and Parquet), values against the fixture script's references, bad input.

use crate::common;

use std::fs;
use std::path::Path;

use common::*;
use polars::prelude::*;
use serde_json::json;

fn read_csv(path: &Path) -> DataFrame {
    CsvReadOptions::default()
        .with_has_header(true)
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .unwrap()
        .finish()
        .unwrap()
}

fn read_parquet(path: &Path) -> DataFrame {
    ParquetReader::new(fs::File::open(path).unwrap())
        .finish()
        .unwrap()
}

/// The `value` of the attention row (model, metric, layer, head, stat).
fn value(
    df: &DataFrame,
    model: &str,
    metric: &str,
    layer: Option<i64>,
    head: Option<i64>,
    stat: &str,
) -> f64 {
    let models = df.column("model").unwrap().str().unwrap().clone();
    let metrics = df.column("metric").unwrap().str().unwrap().clone();
    let layers = df
        .column("layer")
        .unwrap()
        .cast(&DataType::Int64)
        .unwrap()
        .i64()
        .unwrap()
        .clone();
    let heads = df
        .column("head")
        .unwrap()
        .cast(&DataType::Int64)
        .unwrap()
        .i64()
        .unwrap()
        .clone();
    let stats = df.column("stat").unwrap().str().unwrap().clone();
    let values = df.column("value").unwrap().f64().unwrap().clone();
    let mut found = None;
    for i in 0..df.height() {
        if models.get(i) == Some(model)
            && metrics.get(i) == Some(metric)
            && layers.get(i) == layer
            && heads.get(i) == head
            && stats.get(i) == Some(stat)
        {
            assert!(
                found.is_none(),
                "duplicate row {model} {metric} {layer:?} {head:?} {stat}"
            );
            found = values.get(i);
        }
    }
    found.unwrap_or_else(|| panic!("no row {model} {metric} {layer:?} {head:?} {stat}"))
}

fn analyze(tmp: &Path, extra: &[&str]) -> std::process::Output {
    let base = model_dir("llama_gqa").display().to_string();
    let asa = model_dir("affine_scaled").display().to_string();
    let corpus = ids_corpus("llama_gqa", tmp);
    let mut args = vec![
        "analyze".to_string(),
        format!("base={base}"),
        format!("asa={asa}"),
        "--corpus".into(),
        corpus,
        "--seq-len".into(),
        "20".into(),
        "--num-seqs".into(),
        "3".into(),
        "--bos".into(),
        "never".into(),
        "--quiet".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run_cli(tmp, &refs)
}

fn check_attention_table(df: &DataFrame) {
    assert_eq!(
        df.get_column_names()
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>(),
        vec!["model", "metric", "layer", "head", "stat", "value"]
    );
    for (label, fixture) in [("base", "llama_gqa"), ("asa", "affine_scaled")] {
        let want = reference_metrics(fixture);
        let num = |v: &serde_json::Value| v.as_f64().unwrap();
        for l in 0..2usize {
            let layer = Some(l as i64 + 1);
            assert_close(
                value(df, label, "first_token", layer, None, "mean"),
                num(&want["first_token"]["mean"][l]),
                1e-6,
                1e-5,
                "first_token",
            );
            assert_close(
                value(df, label, "entropy", layer, None, "std"),
                num(&want["entropy"]["std"][l]),
                1e-6,
                1e-5,
                "entropy std",
            );
            assert_close(
                value(df, label, "weight_sum", layer, None, "p95"),
                num(&want["weight_sum"]["p95"][l]),
                1e-6,
                1e-5,
                "weight_sum p95",
            );
            for h in 0..4usize {
                let head = Some(h as i64 + 1);
                assert_close(
                    value(df, label, "head_total", layer, head, "mean"),
                    num(&want["head_total"][l][h]),
                    1e-6,
                    1e-5,
                    "head_total",
                );
                assert_close(
                    value(df, label, "sink_importance", layer, head, "mean"),
                    num(&want["sink_rate"]["importance"][l][h]),
                    1e-6,
                    1e-5,
                    "importance",
                );
            }
        }
        assert_close(
            value(df, label, "qk_mean", None, None, "mean"),
            num(&want["qk_mean"]["mean"]),
            1e-6,
            1e-5,
            "qk_mean",
        );
        assert_close(
            value(df, label, "ppl", None, None, "mean"),
            num(&want["nll"]["ppl"]),
            1e-6,
            1e-5,
            "ppl",
        );
    }
    let want = reference_metrics("affine_scaled");
    assert_close(
        value(df, "asa", "alpha", Some(2), Some(3), "p25"),
        want["alpha"]["p25"][1][2].as_f64().unwrap(),
        1e-6,
        1e-5,
        "alpha p25",
    );
}

#[test]
fn analyze_writes_every_table_matching_the_references() {
    let tmp = tempfile::tempdir().unwrap();
    let out = analyze(tmp.path(), &["--out", "res"]);
    expect_success(&out);
    let res = tmp.path().join("res");
    for table in [
        "attention",
        "weight_sum_hist",
        "heatmap",
        "query_profile",
        "distance_profile",
        "nll_position",
    ] {
        assert!(
            res.join(format!("{table}.csv")).is_file(),
            "{table}.csv missing"
        );
    }
    check_attention_table(&read_csv(&res.join("attention.csv")));
    // heatmap rows: 2 models x 20 x 20, 1-based layer 2 (default 8 clipped), 0-based positions
    let heat = read_csv(&res.join("heatmap.csv"));
    assert_eq!(heat.height(), 2 * 20 * 20);
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(res.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["models"][1]["variant"], "affine_scaled");
    assert_eq!(run["models"][0]["heatmap_layer"], 2);
    // stdout summary names both models
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("base") && stdout.contains("asa"),
        "{stdout}"
    );
}

#[test]
fn a_tight_memory_budget_splits_the_batch_without_changing_the_metrics() {
    // 3 sequences asked for in one batch; 5 KiB of attention budget fits the query rows of
    // fewer, so the planner runs smaller batches (and blocks of 1 query)
    let tmp = tempfile::tempdir().unwrap();
    let out = analyze(
        tmp.path(),
        &["--out", "small", "--batch-size", "3", "--max-memory", "5K"],
    );
    expect_success(&out);
    let res = tmp.path().join("small");
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(res.join("run.json")).unwrap()).unwrap();
    let batch = run["models"][0]["batch_size"].as_u64().unwrap();
    assert!((1..3).contains(&batch), "batch {batch}");
    assert_eq!(run["models"][0]["block_size"], 1);
    // the options as asked for are recorded (5K = 5 * 1024 bytes)
    assert_eq!(run["options"]["max_memory"], 5 * 1024);
    assert_eq!(run["options"]["bands"], serde_json::Value::Null);
    assert_eq!(run["options"]["device"], "auto");
    check_attention_table(&read_csv(&res.join("attention.csv")));
}

#[test]
fn parquet_tables_hold_the_same_values() {
    let tmp = tempfile::tempdir().unwrap();
    let out = analyze(
        tmp.path(),
        &[
            "--out",
            "pq",
            "--format",
            "parquet",
            "--batch-size",
            "3",
            "--block-size",
            "7",
        ],
    );
    expect_success(&out);
    check_attention_table(&read_parquet(&tmp.path().join("pq/attention.parquet")));
    let dist = read_parquet(&tmp.path().join("pq/distance_profile.parquet"));
    assert_eq!(
        dist.get_column_names()
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>(),
        vec!["model", "layer", "head", "band", "value"]
    );
}

#[test]
fn newcomer_entropy_on_the_built_in_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let out = run_cli(
        tmp.path(),
        &[
            "entropy",
            &model,
            "--seq-len",
            "64",
            "--num-seqs",
            "2",
            "--quiet",
        ],
    );
    expect_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("entropy (nats) by layer"), "{stdout}");
    let df = read_csv(&tmp.path().join("results/attention.csv"));
    // 2 layers x (mean, std) + 2 x 4 heads
    assert_eq!(df.height(), 4 + 8);
}

#[test]
fn profile_times_every_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "--out",
        "p",
        "--profile",
        "--block-size",
        "5",
        "--batch-size",
        "3",
    ];
    let out = analyze(tmp.path(), &args);
    expect_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("all phases:"), "{stderr}");
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("p/run.json")).unwrap()).unwrap();
    let phases = run["profile"]
        .as_object()
        .expect("run.json has the profile");
    // 2 models x 2 layers, 20 queries in blocks of 5, 3 sequences in one batch; each block
    // runs either the flash tiles (layer 1 of both models) or the q.k and value products
    // (layer 2, the heatmap layer, whose maps are read)
    let calls = |phase: &str| {
        phases
            .get(phase)
            .map_or(0, |p| p["calls"].as_u64().unwrap())
    };
    let flash = calls("attention: flash tiles (q.k, softmax, row table, values)");
    assert_eq!(calls("attention: q/k/v, norms, rope"), 4);
    assert_eq!(flash, 8);
    assert_eq!(calls("attention: q.k products") + flash, 16);
    assert_eq!(calls("attention: value products") + flash, 16);
    assert_eq!(calls("mlp"), 4);
    for (name, t) in phases {
        let (host, total) = (
            t["host_s"].as_f64().unwrap(),
            t["total_s"].as_f64().unwrap(),
        );
        assert!(
            0.0 <= host && host <= total,
            "{name}: host {host} total {total}"
        );
    }
    // without --profile nothing is recorded
    let plain = analyze(tmp.path(), &["--out", "q"]);
    assert!(plain.status.success());
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("q/run.json")).unwrap()).unwrap();
    assert!(run["profile"].is_null());
}

#[test]
fn json_output_is_machine_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let out = analyze(tmp.path(), &["--out", "j", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["models"][0]["model"], "base");
    assert!(doc["models"][1]["metrics"]["alpha"].is_object());
}

#[test]
fn training_series_gives_the_qk_curve() {
    let tmp = tempfile::tempdir().unwrap();
    let series = tmp.path().join("run");
    for (step, fixture) in [(1000, "llama_gqa"), (2000, "qwen2")] {
        let dir = series.join(format!("step-{step}"));
        fs::create_dir_all(&dir).unwrap();
        for entry in fs::read_dir(model_dir(fixture)).unwrap() {
            let entry = entry.unwrap();
            fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let corpus = ids_corpus("llama_gqa", tmp.path());
    let out = run_cli(
        tmp.path(),
        &[
            "qk",
            "run",
            "--corpus",
            &corpus,
            "--seq-len",
            "20",
            "--num-seqs",
            "3",
            "--bos",
            "never",
            "--quiet",
        ],
    );
    let stdout = expect_success(&out);
    assert!(
        stdout.starts_with("qk_mean over training steps") && !stdout.contains("none of"),
        "{stdout}"
    );
    let df = read_csv(&tmp.path().join("results/qk_series.csv"));
    let steps: Vec<i64> = df
        .column("step")
        .unwrap()
        .i64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    assert_eq!(steps, vec![1000, 2000]);
    let qk: Vec<f64> = df
        .column("qk_mean")
        .unwrap()
        .f64()
        .unwrap()
        .into_no_null_iter()
        .collect();
    assert_close(
        qk[0],
        reference_metrics("llama_gqa")["qk_mean"]["mean"]
            .as_f64()
            .unwrap(),
        1e-6,
        1e-5,
        "step 1000",
    );
    assert_close(
        qk[1],
        reference_metrics("qwen2")["qk_mean"]["mean"]
            .as_f64()
            .unwrap(),
        1e-6,
        1e-5,
        "step 2000",
    );
}

/// Nothing left behind: not even the empty output folder the run made.
fn assert_no_output(dir: &Path) {
    if dir.exists() {
        let left: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        panic!("{} left behind, holding {left:?}", dir.display());
    }
}

#[test]
fn corpus_shorter_than_one_sequence_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let corpus = fixtures().join("corpus/tiny.txt").display().to_string();
    let out = run_cli(
        tmp.path(),
        &[
            "analyze",
            &model,
            "--corpus",
            &corpus,
            "--seq-len",
            "5000",
            "--num-seqs",
            "1",
            "--out",
            "o",
        ],
    );
    let err = expect_error(&out);
    assert!(err.contains("tiny.txt") && err.contains("shorter"), "{err}");
    assert_no_output(&tmp.path().join("o"));
}

#[test]
fn text_without_a_tokenizer_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    fs::create_dir(&ckpt).unwrap();
    for entry in fs::read_dir(model_dir("qwen2")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "tokenizer.json" {
            fs::copy(entry.path(), ckpt.join(entry.file_name())).unwrap();
        }
    }
    let corpus = fixtures().join("corpus/tiny.txt").display().to_string();
    let out = run_cli(
        tmp.path(),
        &[
            "entropy",
            "ckpt",
            "--corpus",
            &corpus,
            "--seq-len",
            "8",
            "--num-seqs",
            "1",
            "--out",
            "o",
        ],
    );
    let err = expect_error(&out);
    assert!(err.contains("tokenizer.json"), "{err}");
    assert_no_output(&tmp.path().join("o"));
}

#[test]
fn layer_out_of_range_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let out = run_cli(
        tmp.path(),
        &[
            "heatmap",
            &model,
            "--layer",
            "3",
            "--seq-len",
            "16",
            "--num-seqs",
            "1",
            "--out",
            "o",
        ],
    );
    let err = expect_error(&out);
    assert!(
        err.contains("--layer 3") && err.contains("2 layers"),
        "{err}"
    );
    assert_no_output(&tmp.path().join("o"));
}

#[test]
fn bad_option_values_are_one_line_errors() {
    let model = model_dir("llama_gqa").display().to_string();
    for (option, value, needle) in [
        ("--bins", "0", "--bins must be at least 1"),
        ("--size", "0", "--size must be at least 1"),
        ("--batch-size", "0", "--batch-size must be at least 1"),
        ("--min-query", "16", "--min-query 16 leaves no query"),
        ("--sink-eps", "nan", "--sink-eps must be a finite number"),
        // clap's own errors, kept to one line
        ("--dtype", "f64", "invalid value 'f64' for '--dtype"),
        ("--format", "xlsx", "[possible values: csv, parquet]"),
        (
            "--no-such-option",
            "1",
            "unexpected argument '--no-such-option'",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let args = [
            "analyze",
            &model,
            option,
            value,
            "--seq-len",
            "16",
            "--num-seqs",
            "1",
            "--out",
            "o",
        ];
        let err = expect_error(&run_cli(tmp.path(), &args));
        assert!(err.contains(needle), "{option} {value}: {err}");
        assert_no_output(&tmp.path().join("o"));
    }
}

#[test]
fn unwritable_output_folder_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("taken"), "a file, not a folder").unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let out = run_cli(
        tmp.path(),
        &[
            "entropy",
            &model,
            "--seq-len",
            "16",
            "--num-seqs",
            "1",
            "--out",
            "taken/results",
        ],
    );
    let err = expect_error(&out);
    assert!(err.contains("taken/results"), "{err}");
    // --out naming the file itself
    let args = [
        "entropy",
        &model,
        "--seq-len",
        "16",
        "--num-seqs",
        "1",
        "--out",
        "taken",
    ];
    let err = expect_error(&run_cli(tmp.path(), &args));
    assert!(err.contains("taken: the output folder is a file"), "{err}");
}

#[test]
fn cuda_without_the_feature_is_a_clear_error() {
    if cfg!(feature = "cuda") {
        return; // this build has CUDA; the error path does not exist
    }
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let out = run_cli(
        tmp.path(),
        &["entropy", &model, "--device", "cuda", "--out", "o"],
    );
    let err = expect_error(&out);
    assert!(
        err.contains("built without `cuda`") && err.contains("--features cuda"),
        "{err}"
    );
    assert_no_output(&tmp.path().join("o"));
}

/// The values of the per-layer table titled `title` on stdout, one per layer.
fn layer_table(stdout: &str, title: &str) -> Vec<f64> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(title)).skip(2);
    let mut values = Vec::new();
    while let Some(line) = lines.next().filter(|l| !l.trim().is_empty()) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], (values.len() + 1).to_string(), "{stdout}");
        values.push(cells[1].parse().unwrap());
    }
    assert!(!values.is_empty(), "no table `{title}`: {stdout}");
    values
}

#[test]
fn alpha_and_sink_print_their_values_per_layer() {
    // they printed a summary row of dashes; now a per-layer table of the mean over heads,
    // here against the float64 references (mean of the 4 heads' values, 4 decimals shown)
    let tmp = tempfile::tempdir().unwrap();
    for (command, fixture, title, reference) in [
        (
            "alpha",
            "affine_scaled",
            "alpha (mean over heads)",
            "/alpha/mean",
        ),
        ("sink", "sink", "sink_mass (mean over heads)", "/sink_mass"),
    ] {
        let corpus = ids_corpus(fixture, tmp.path());
        let model = model_dir(fixture).display().to_string();
        let out = run_cli(
            tmp.path(),
            &[
                command,
                &model,
                "--corpus",
                &corpus,
                "--seq-len",
                "20",
                "--num-seqs",
                "3",
                "--bos",
                "never",
                "--quiet",
                "--out",
                command,
            ],
        );
        let stdout = expect_success(&out);
        assert!(!stdout.contains(" -"), "a dash on stdout: {stdout}");
        let want = reference_metrics(fixture);
        let want: Vec<f64> = want
            .pointer(reference)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|heads| {
                let heads = heads.as_array().unwrap();
                heads.iter().map(|h| h.as_f64().unwrap()).sum::<f64>() / heads.len() as f64
            })
            .collect();
        let got = layer_table(&stdout, title);
        assert_eq!(got.len(), want.len(), "{stdout}");
        for (g, w) in got.iter().zip(&want) {
            // 5e-5 for the 4 decimals shown, 1e-5 for the float32 forward pass
            assert!((g - w).abs() <= 6e-5, "{command}: {g} vs {w}: {stdout}");
        }
    }
}

#[test]
fn alpha_of_a_model_without_alpha_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    let out = run_cli(
        tmp.path(),
        &[
            "alpha",
            &model,
            "--seq-len",
            "16",
            "--num-seqs",
            "1",
            "--quiet",
        ],
    );
    let stdout = expect_success(&out);
    assert!(
        stdout.contains("alpha: none of these models computes it"),
        "{stdout}"
    );
}

#[test]
fn analyze_option_checks_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("llama_gqa").display().to_string();
    std::fs::create_dir(tmp.path().join("a_folder")).unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--tokenizer", "nope.json"],
            "nope.json: no such file (--tokenizer)",
        ),
        (
            &["--tokenizer", "a_folder"],
            "a_folder: not a regular file (--tokenizer)",
        ),
        // 10^9 bins grew past 12 GB; 10^7 wrote a 0.5 GB table
        (&["--bins", "1000000"], "--bins 1000000 is more than 100000"),
        (
            &["--seq-len", "100000000", "--num-seqs", "100"],
            "asks for more than 268435456 tokens",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["entropy", model.as_str(), "--out", "res", "--quiet"];
        args.extend_from_slice(extra);
        let err = expect_error(&run_cli(tmp.path(), &args));
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!tmp.path().join("res").exists());
    }
}

#[test]
fn run_json_and_verbose_name_the_kernel_of_every_layer() {
    // issue 22: the plan taken is visible. Every metric: layer 1 on the flash tiles, layer 2
    // (the heatmap layer) materialised; key_received takes its sums from the tiles too
    // (issue 41)
    let model = model_dir("llama_gqa").display().to_string();
    let flash = "flash tiles (no block map held)";
    let fused = "materialised blocks, fused CPU softmax";
    for (metrics, want) in [
        (None, json!({flash: [1], fused: [2]})),
        (
            Some("key_received,heatmap"),
            json!({flash: [1], fused: [2]}),
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut args = vec![
            "analyze",
            &model,
            "--seq-len",
            "32",
            "--num-seqs",
            "2",
            "--verbose",
        ];
        args.extend(["--out", "o"]);
        if let Some(m) = metrics {
            args.extend(["--metrics", m]);
        }
        let output = run_cli(tmp.path(), &args);
        expect_success(&output);
        let run: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(tmp.path().join("o/run.json")).unwrap())
                .unwrap();
        assert_eq!(run["models"][0]["kernels"], want, "{metrics:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(fused), "{stderr}");
    }
}

#[test]
fn the_library_run_gives_what_the_cli_writes() {
    // analysis::Run is what the CLI calls: the same options give the same numbers
    use asa_analysis::analysis::{ModelSource, Run, RunOptions, RunSpec, Silent};
    let tmp = tempfile::tempdir().unwrap();
    let model = model_dir("sink");
    let options = RunOptions {
        spec: RunSpec {
            seq_len: 24,
            num_seqs: 2,
            ..RunSpec::default()
        },
        ..RunOptions::default()
    };
    let source = ModelSource::at("sink", model.clone());
    let output = Run {
        models: vec![source],
        options,
        cancel: Default::default(),
    }
    .execute(&mut Silent)
    .unwrap();
    let path = model.display().to_string();
    let args = [
        "analyze",
        &path,
        "--seq-len",
        "24",
        "--num-seqs",
        "2",
        "--json",
        "--quiet",
    ];
    let cli: serde_json::Value = serde_json::from_str(&expect_success(&run_cli(
        tmp.path(),
        &[&args[..], &["--out", "o"]].concat(),
    )))
    .unwrap();
    let library = serde_json::to_value(&output.models[0].metrics).unwrap();
    // serde_json reads printed floats back to within an ulp, not always to the bit
    assert_json_close(&cli["models"][0]["metrics"], &library, 1e-14, "metrics");
}

/// `--variant` (issue 27): an off-by-one checkpoint whose config.json does not say so is
/// analysed as softmax by detection (it has no weights of its own), and as off-by-one, with
/// the reference's numbers, when asked; a variant whose weights are missing is refused.
#[test]
fn variant_overrides_detection_and_matches_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("obo");
    copy_fixture("off_by_one", &dir);
    edit_config(&dir, |c| {
        c.as_object_mut().unwrap().remove("attention_variant");
    });
    let corpus = ids_corpus("off_by_one", tmp.path());
    let run = |out: &str, extra: &[&str]| {
        let mut args = vec![
            "analyze",
            "obo",
            "--corpus",
            &corpus,
            "--seq-len",
            "20",
            "--num-seqs",
            "3",
            "--bos",
            "never",
            "--quiet",
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        run_cli(tmp.path(), &args)
    };
    let want = reference_metrics("off_by_one");
    let first_token = |out: &str, l: usize| {
        let df = read_csv(&tmp.path().join(out).join("attention.csv"));
        value(&df, "obo", "first_token", Some(l as i64 + 1), None, "mean")
    };
    let run_json = |out: &str| -> serde_json::Value {
        serde_json::from_str(&fs::read_to_string(tmp.path().join(out).join("run.json")).unwrap())
            .unwrap()
    };

    expect_success(&run("detected", &[]));
    let detected = run_json("detected");
    assert_eq!(detected["models"][0]["variant"], "softmax", "{detected}");
    let off = (first_token("detected", 0) - want["first_token"]["mean"][0].as_f64().unwrap()).abs();
    assert!(
        off > 1e-3,
        "softmax and off-by-one agree to {off}: the test could not fail"
    );

    expect_success(&run("forced", &["--variant", "off_by_one"]));
    let forced = run_json("forced");
    assert_eq!(forced["models"][0]["variant"], "off_by_one", "{forced}");
    assert_eq!(
        forced["models"][0]["variant_source"], "--variant",
        "{forced}"
    );
    assert_eq!(forced["options"]["variant"], "off_by_one", "{forced}");
    let df = read_csv(&tmp.path().join("forced").join("attention.csv"));
    for l in 0..2usize {
        assert_close(
            first_token("forced", l),
            want["first_token"]["mean"][l].as_f64().unwrap(),
            1e-6,
            1e-5,
            "first_token",
        );
        for h in 0..4usize {
            let (layer, head) = (Some(l as i64 + 1), Some(h as i64 + 1));
            assert_close(
                value(&df, "obo", "sink_mass", layer, head, "mean"),
                want["sink_mass"][l][h].as_f64().unwrap(),
                1e-6,
                1e-5,
                "sink_mass",
            );
        }
    }

    // the sink variant needs self_attn.sinks: named, exit 2, nothing written
    let err = expect_error(&run("sink", &["--variant", "sink"]));
    assert!(err.contains("self_attn.sinks"), "{err}");
    assert!(!tmp.path().join("sink").exists());
    // an unknown name lists the known ones
    let err = expect_error(&run("bad", &["--variant", "magic"]));
    assert!(
        err.contains("off_by_one") && err.contains("affine_scaled"),
        "{err}"
    );
}
