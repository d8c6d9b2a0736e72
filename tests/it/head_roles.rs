//! Issue 39: the induction probe, induction_score and head roles against
//! `tools/make_induction_fixtures.py`, which rebuilds the probe's windows from their
//! documented rule and computes every score in float64 from the attention weights of its own
//! forward pass (checked against transformers' eager float64 for the softmax fixtures):
//! |x - y| <= 1e-6 + 1e-5 |y|, on the flash tiles, the materialised blocks and blocks of 1
//! and 7 queries. The engineered `head_roles` checkpoint has heads set by hand to a known
//! role each.

use std::collections::BTreeSet;
use std::path::Path;

use asa_analysis::analysis::{analyze, RunShape};
use asa_analysis::corpus::WindowMode;
use asa_analysis::corpus::{load_windows, BosMode, CorpusOptions, CorpusSource, SpecialTokens};
use asa_hooks::Kernel;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::head_role::{HeadRoleResult, RoleThresholds};
use asa_metrics::induction::InductionResult;
use asa_metrics::{Metric, ModelMetrics};
use asa_models::Checkpoint;
use asa_tables::{read_table, Column, Table};
use candle_core::{DType, Device};
use serde_json::Value;

use crate::common::*;

const ATOL: f64 = 1e-6;
const RTOL: f64 = 1e-5;
/// Fixtures with a float64 induction reference, and the engineered checkpoint.
const FIXTURES: [&str; 4] = ["llama_gqa", "sink", "affine_scaled", "head_roles"];

fn induction_reference(name: &str) -> Value {
    let path = fixtures()
        .join("reference")
        .join(format!("{name}.induction.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn close_mat(got: &[Vec<f64>], want: &Value, what: &str) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: layers");
    for (l, (g, w)) in got.iter().zip(want).enumerate() {
        let w = w.as_array().unwrap();
        assert_eq!(g.len(), w.len(), "{what}: heads");
        for (h, (x, y)) in g.iter().zip(w).enumerate() {
            assert_close(*x, num(y), ATOL, RTOL, &format!("{what} [{l}][{h}]"));
        }
    }
}

/// The probe's windows as `analyze --probe induction` makes them for fixture `name`.
fn probe_windows(name: &str, probe: &Value) -> Vec<Vec<u32>> {
    let dir = model_dir(name);
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let id = |k: &str| config[k].as_u64().map(|v| v as u32);
    let special = SpecialTokens {
        bos: id("bos_token_id"),
        eos: id("eos_token_id"),
    };
    let opts = CorpusOptions {
        seq_len: probe["seq_len"].as_u64().unwrap() as usize,
        num_seqs: probe["num_seqs"].as_u64().unwrap() as usize,
        bos: BosMode::Auto,
        windows: WindowMode::Packed,
    };
    let source = CorpusSource::InductionProbe {
        seed: probe["seed"].as_u64().unwrap(),
    };
    let vocab = config["vocab_size"].as_u64().unwrap() as usize;
    let tokenizer = dir.join("tokenizer.json");
    load_windows(&source, Some(&tokenizer), special, vocab, &opts)
        .unwrap()
        .ids
}

#[test]
fn the_probe_windows_are_the_documented_draws() {
    for name in FIXTURES {
        let want = induction_reference(name);
        for probe in want["probes"].as_array().unwrap() {
            let got = probe_windows(name, probe);
            let expected: Vec<Vec<u32>> = serde_json::from_value(probe["windows"].clone()).unwrap();
            assert_eq!(got, expected, "{name} seed {}", probe["seed"]);
            let len = probe["copy_len"].as_u64().unwrap() as usize;
            let excluded: Vec<u32> = serde_json::from_value(want["excluded_ids"].clone()).unwrap();
            for w in &got {
                assert_eq!(w[1..=len], w[len + 1..], "{name}: the second copy");
                assert!(w[1..].iter().all(|id| !excluded.contains(id)), "{name}");
            }
        }
    }
}

/// The fixture's metrics over `windows`, with the entropy of `entropy_of` (`Softmax` reads
/// every block's plain softmax: every block is materialised).
fn compute_with(
    name: &str,
    windows: &[Vec<u32>],
    metrics: &[Metric],
    (len, w): (usize, usize),
    shape: (usize, usize),
    entropy_of: EntropyOf,
) -> ModelMetrics {
    let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
    let model = ckpt.load_model().unwrap();
    let t = windows[0].len();
    let mut opts = fixture_options(metrics.iter().copied(), entropy_of);
    opts.profile_query = t - 1;
    opts.heatmap_size = opts.heatmap_size.min(t);
    opts.bands = asa_metrics::distance::Bands::decades(t);
    opts.induction_len = Some(len);
    opts.roles = RoleThresholds {
        local_window: w,
        ..RoleThresholds::default()
    };
    let (batch_size, block) = shape;
    let shape = RunShape { batch_size, block };
    analyze(&ckpt, &model, windows, &opts, shape, |_| {}).unwrap()
}

/// Every score of `got` against `probe`'s reference, and the roles with window `w`.
fn check_scores(got: &ModelMetrics, probe: &Value, w: usize, what: &str) {
    let induction = got
        .get::<InductionResult>(Metric::INDUCTION_SCORE)
        .unwrap_or_else(|| panic!("{what}: no induction_score"));
    assert_eq!(induction.len as u64, probe["copy_len"].as_u64().unwrap());
    close_mat(&induction.per_head, &probe["induction_score"], what);
    let Some(roles) = got.get::<HeadRoleResult>(Metric::HEAD_ROLE) else {
        return;
    };
    let field = |f: fn(&asa_metrics::head_role::HeadRole) -> f64| -> Vec<Vec<f64>> {
        (roles.heads.iter())
            .map(|heads| heads.iter().map(f).collect())
            .collect()
    };
    close_mat(&field(|h| h.first_token), &probe["first_token"], what);
    close_mat(&field(|h| h.prev_token), &probe["prev_token"], what);
    let local = &probe[format!("local_mass_{w}").as_str()];
    close_mat(&field(|h| h.local_mass), local, what);
    let role_names: Vec<Vec<&str>> = (roles.heads.iter())
        .map(|heads| heads.iter().map(|h| h.role.name()).collect())
        .collect();
    let want: Vec<Vec<String>> =
        serde_json::from_value(probe[format!("roles_{w}").as_str()].clone()).unwrap();
    assert_eq!(role_names, want, "{what}: roles");
}

#[test]
fn induction_score_and_head_scores_match_the_float64_reference_on_every_kernel() {
    let defaults: Vec<Metric> = Metric::defaults()
        .into_iter()
        .chain([Metric::INDUCTION_SCORE])
        .collect();
    let with_keys: Vec<Metric> = defaults
        .iter()
        .copied()
        .chain([Metric::KEY_RECEIVED])
        .collect();
    let alone = vec![Metric::INDUCTION_SCORE, Metric::HEAD_ROLE];
    for name in FIXTURES {
        let want = induction_reference(name);
        for probe in want["probes"].as_array().unwrap() {
            let windows = probe_windows(name, probe);
            let len = probe["copy_len"].as_u64().unwrap() as usize;
            // tiles in layer 1 and the materialised heatmap layer 2 (key_received too:
            // its sums from the tiles); every layer materialised (`--entropy-of softmax`);
            // tiles only; blocks of 1 and 7 queries
            for (metrics, w, shape, entropy_of) in [
                (&defaults, 16, (3, 64), EntropyOf::Effective),
                (&defaults, 4, (2, 7), EntropyOf::Effective),
                (&with_keys, 16, (1, 7), EntropyOf::Effective),
                (&with_keys, 16, (1, 7), EntropyOf::Softmax),
                (&alone, 4, (2, 1), EntropyOf::Effective),
                (&alone, 16, (4, 64), EntropyOf::Effective),
            ] {
                let got = compute_with(name, &windows, metrics, (len, w), shape, entropy_of);
                let kernels: BTreeSet<Kernel> = got.kernels.values().copied().collect();
                let materialised = entropy_of == EntropyOf::Softmax;
                assert_eq!(
                    kernels.contains(&Kernel::FlashTiles),
                    !materialised,
                    "{kernels:?}"
                );
                let what = format!("{name} L={len} w={w} {shape:?} {entropy_of:?}");
                check_scores(&got, probe, w, &what);
            }
        }
    }
}

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
            assert_close(got, num(&want[key][l][h]), ATOL, RTOL, col);
        }
        let score = floats(&table, "induction_score")[r];
        match induction {
            true => assert_close(
                score.unwrap(),
                num(&want["induction_score"][l][h]),
                ATOL,
                RTOL,
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
        assert_close(values[r].unwrap(), y, ATOL, RTOL, "attention.csv");
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
