//! Issue 41's accuracy rule for the whole analysis in bf16 (SPEC section 12): on every model
//! fixture, every metric of `tools/make_fixtures.py`'s `<name>.metrics.json` and
//! `tools/make_logit_key_fixtures.py`'s `<name>.logit_key.json` (the defaults, the softmax
//! entropy of `--entropy-of softmax`, `key_received`) computed by asa-analyze with
//! `DType::BF16` on the CPU is at most twice as far from the float64 reference as the same
//! computation done in bf16 by torch (FlashAttention's test rule, max |ours - ref| <=
//! 2 max |torch_bf16 - ref|, the max taken over all of a metric's numbers).
//!
//! FlashAttention applies the rule to one large output, where the largest error is a
//! stable number. A fixture's metric here is a handful of numbers (2 layers of a few heads
//! over 20 positions), and its largest bf16 error is a matter of which values round which
//! way: two equally valid bf16 computations of the same fixtures (our flash tiles and our
//! materialised blocks) differ in `max_logit`'s largest error by up to 1.6x either way,
//! fixture by fixture (measured 2026-11-26). So the rule is applied to each metric's whole
//! output, all fixtures transformers runs together, each fixture's errors relative to its
//! largest |float64 value| of the metric (so that fixtures of large logits do not hide the
//! others): max over fixtures of |ours - ref| / scale <= 2 max over fixtures of
//! |torch - ref| / scale. Each fixture is also held on its own to 4x torch's error on it,
//! which a family-specific error fails. The 4 was set from measurements, not derived: the
//! pooled rule alone passed the RMSNorm that rounded each row's rms to bf16 (candle's half
//! kernel) with the RoPE tables in bf16, which this guard fails on 4 fixtures (rope_dynamic
//! `qk_mean` at 4.6x, rope_linear `first_token` 7.1x, qwen3 `qk_mean` 7.3x, gemma2
//! `max_logit` 4.0x torch's error; the norm's fix is in `nn::layers`); with the fix the
//! largest ratio left is qwen3's per-layer `qk_mean` at 3.1x, whose f16 run is 80x closer
//! (rounding, not a formula).
//!
//! torch's errors are `tests/fixtures/reference/metrics_bf16.json`, written by
//! `tools/make_metrics_bf16_fixture.py`: transformers' own bf16 eager forward of each fixture
//! it runs, every metric computed from its bf16 weights, logits, softmax logits and q, k by
//! the reference scripts' own numpy functions, the largest |torch - float64| per field
//! (`metric.stat`). A metric's bound here is twice the largest of its fields' errors; the
//! stats of a metric share a unit, except key_received's sums over queries (`sum`,
//! `layer_sum`) and its means per query (`mean`, `layer_mean`), held apart, and `nll.ppl`,
//! which is exp(`nll.mean`): it is checked to be that of our own mean, not bounded apart.
//! Where torch's error is 0 the bound is a floor, twice bf16's unit roundoff 2^-8 times the
//! largest |float64 value| of the metric (0 for a metric that is 0 throughout, such as
//! `query_profile.sink_mass` of a model without a sink). The fixtures transformers does not
//! run (the variants make_fixtures.py computes with its own forward: sink, off_by_one, gated,
//! affine_scaled*, logn, scale_invariant) are held to twice the largest torch error of the
//! metric over the fixtures it runs. Not plain differences:
//!
//! - `weight_sum_hist.edges`: the bin edges, a metric of their own; `weight_sum_hist.count`:
//!   the pooled values ours puts in another bin than the reference, sum |count - ref count|
//!   / 2, at most twice torch's (a degenerate pool, whose bins are those of a constant, must
//!   match exactly);
//! - `sink_rate.rate`: a head may be on the other side of `sink_eps` only if its float64
//!   importance lies within the `sink_rate` (importance) bound of it;
//! - `alpha` and `gate` exist only on fixtures transformers cannot run, so torch has no
//!   error for them: they are held to SPEC section 12's flat atol 1e-2 + rtol 2e-2, as the
//!   tolerance of each token's value carried to the statistics: a mean, a std and a
//!   percentile of values each move by at most the largest change of a value, so every
//!   statistic is within 1e-2 + 2e-2 x the metric's largest |value|. (Per statistic, with
//!   its own value as the scale, the p05 and p25 of Affine-Scaled alpha, near ReLU's 0 among
//!   values of ~1, miss it by up to 1.2x on the f32-products path of a CPU without AVX-512
//!   BF16 while its tokens' values are within their own tolerance.)
//! - structural fields (`first_token.visible_share`, `entropy.nan_count`, the heatmap's
//!   layer, the profile's query, the band names, a degenerate histogram) must be equal.
//!
//! Every metric's largest difference (and the field it is in) and its bound are printed
//! (`--nocapture`); all metrics past their bound are listed before the test fails.

use std::collections::BTreeMap;

use asa_analysis::analysis::{analyze, RunShape};
use asa_metrics::alpha_gate::AlphaResult;
use asa_metrics::distance::DistanceResult;
use asa_metrics::entropy::{EntropyOf, EntropyResult};
use asa_metrics::first_token::SinkRate;
use asa_metrics::heatmap::{HeatmapResult, QueryProfileResult};
use asa_metrics::key_received::KeyReceivedResult;
use asa_metrics::layer_stat::LayerStat;
use asa_metrics::max_logit::MaxLogitResult;
use asa_metrics::nll::NllResult;
use asa_metrics::qk_mean::QkResult;
use asa_metrics::weight_sum::WeightSumResult;
use asa_metrics::{Metric, ModelMetrics, PerHead};
use asa_models::Checkpoint;
use candle_core::{DType, Device};
use serde_json::Value;

use crate::common::*;

/// bf16's unit roundoff: 8 significand bits.
const UNIT_ROUNDOFF: f64 = 1.0 / 256.0;
/// SPEC section 12's flat tolerance, for the fields torch cannot compute.
const FLAT: (f64, f64) = (1e-2, 2e-2);
const STATS: [&str; 7] = ["mean", "std", "p05", "p25", "p50", "p75", "p95"];

/// Numbers per field `metric.stat`, flattened in the reference's order (NaN for null).
type Fields = BTreeMap<String, Vec<f64>>;

fn windows(name: &str) -> Vec<Vec<u32>> {
    let ids = &reference(name)["input_ids"];
    ids.to_dtype(DType::U32).unwrap().to_vec2::<u32>().unwrap()
}

fn json(path: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(path)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn flatten(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Array(items) => items.iter().for_each(|x| flatten(x, out)),
        Value::Number(x) => out.push(x.as_f64().unwrap()),
        // NaN: null in metrics.json, the string "NaN" in logit_key.json
        Value::Null | Value::String(_) => out.push(f64::NAN),
        other => panic!("not a number: {other}"),
    }
}

fn flat(v: &Value) -> Vec<f64> {
    let mut out = Vec::new();
    flatten(v, &mut out);
    out
}

fn rows(m: &[Vec<f64>]) -> Vec<f64> {
    m.iter().flatten().copied().collect()
}

/// The reference's fields of `name` (those with a bf16 bound; see the module doc).
fn reference_fields(name: &str) -> Fields {
    let metrics = reference_metrics(name);
    let logit_key = json(&format!("reference/{name}.logit_key.json"));
    let mut out = Fields::new();
    for (doc, metric) in [
        (&metrics, "first_token"),
        (&metrics, "entropy"),
        (&metrics, "entropy_softmax"),
        (&metrics, "weight_sum"),
        (&metrics, "qk_mean"),
        (&metrics, "heatmap"),
        (&metrics, "query_profile"),
        (&metrics, "alpha"),
        (&metrics, "nll"),
        (&metrics, "sink_rate"),
        (&metrics, "distance_profile"),
        (&logit_key, "max_logit"),
        (&logit_key, "max_logit_capped"),
        (&logit_key, "key_received"),
    ] {
        let Some(fields) = doc.get(metric).and_then(Value::as_object) else {
            continue;
        };
        for (stat, v) in fields {
            let structural = ["visible_share", "nan_count", "layer", "query", "bands"];
            if !structural.contains(&stat.as_str()) {
                out.insert(format!("{metric}.{stat}"), flat(v));
            }
        }
    }
    for metric in ["head_total", "sink_mass", "gate"] {
        if let Some(v) = metrics.get(metric) {
            out.insert(metric.to_string(), flat(v));
        }
    }
    let hist = &metrics["weight_sum_hist"];
    out.insert(
        "weight_sum_hist.edges".into(),
        [flat(&hist["bin_lo"]), flat(&hist["bin_hi"])].concat(),
    );
    out.insert("weight_sum_hist.count".into(), flat(&hist["count"]));
    out
}

/// Our fields of `name` in the layout of [`reference_fields`]: `got` ran the defaults and
/// key_received, `softmax` the entropy of `--entropy-of softmax`; the structural fields are
/// asserted equal to the reference here.
fn our_fields(name: &str, got: &ModelMetrics, softmax: &ModelMetrics) -> Fields {
    let want = reference_metrics(name);
    let mut out = Fields::new();
    let mut put = |field: &str, values: Vec<f64>| {
        out.insert(field.to_string(), values);
    };

    let ft = got.get::<LayerStat>(Metric::FIRST_TOKEN).unwrap();
    put("first_token.mean", ft.mean.clone());
    put("first_token.std", ft.std.clone());
    // sliding-window fixtures: the share of counted queries that still see the first token
    if let Some(share) = want["first_token"].get("visible_share") {
        let all_see = vec![1.0; ft.mean.len()];
        let got = ft.visible_share.as_ref().unwrap_or(&all_see);
        assert_eq!(*got, flat(share), "{name} visible_share");
    }

    for (metric, run) in [("entropy", got), ("entropy_softmax", softmax)] {
        let e = run.get::<EntropyResult>(Metric::ENTROPY).unwrap();
        put(&format!("{metric}.mean"), e.per_layer.mean.clone());
        put(&format!("{metric}.std"), e.per_layer.std.clone());
        put(&format!("{metric}.per_head"), rows(&e.per_head));
        assert_eq!(
            Some(e.nan_count),
            want[metric]["nan_count"].as_u64(),
            "{name} {metric}.nan_count"
        );
    }

    let ws = got.get::<WeightSumResult>(Metric::WEIGHT_SUM).unwrap();
    for (idx, stat) in STATS.iter().enumerate() {
        let values = ws.per_layer.iter().map(|d| d.named()[idx].1).collect();
        put(&format!("weight_sum.{stat}"), values);
    }
    let hist = &ws.histogram;
    put(
        "weight_sum_hist.edges",
        [hist.bin_lo.clone(), hist.bin_hi.clone()].concat(),
    );
    put(
        "weight_sum_hist.count",
        hist.count.iter().map(|&c| c as f64).collect(),
    );
    if want["weight_sum_hist"]["degenerate"].as_bool() == Some(true) {
        // weights that sum to 1 by construction: one bin holds every value
        let total: u64 = hist.count.iter().sum();
        assert_eq!(hist.count.iter().max(), Some(&total), "{name} degenerate");
    }
    put("head_total", rows(&ws.head_total));

    let qk = got.get::<QkResult>(Metric::QK_MEAN).unwrap();
    put("qk_mean.mean", vec![qk.mean]);
    put("qk_mean.abs_mean", vec![qk.abs_mean]);
    put("qk_mean.per_layer_mean", qk.per_layer_mean.clone());
    put("qk_mean.per_layer_abs_mean", qk.per_layer_abs_mean.clone());

    let hm = got.get::<HeatmapResult>(Metric::HEATMAP).unwrap();
    assert_eq!(Some(hm.layer as u64 + 1), want["heatmap"]["layer"].as_u64());
    put("heatmap.values", rows(&hm.values));
    let qp = got
        .get::<QueryProfileResult>(Metric::QUERY_PROFILE)
        .unwrap();
    assert_eq!(
        Some(qp.query as u64),
        want["query_profile"]["query"].as_u64()
    );
    put("query_profile.values", qp.values.clone());
    put("query_profile.sink_mass", vec![qp.sink_mass]);

    if let Some(s) = got.get::<PerHead>(Metric::SINK_MASS) {
        put("sink_mass", rows(&s.0));
    }
    if let Some(a) = got.get::<AlphaResult>(Metric::ALPHA) {
        for (idx, stat) in STATS.iter().enumerate() {
            let values = a.per_head.iter().flatten().map(|d| d.named()[idx].1);
            put(&format!("alpha.{stat}"), values.collect());
        }
        put("alpha.alpha_ma", rows(&a.alpha_ma));
    }
    if let Some(g) = got.get::<PerHead>(Metric::GATE) {
        put("gate", rows(&g.0));
    }

    let nll = got.get::<NllResult>(Metric::NLL).unwrap();
    put("nll.mean", vec![nll.mean]);
    put("nll.ppl", vec![nll.ppl]);
    put("nll.per_position", nll.per_position.clone());

    let sr = got.get::<SinkRate>(Metric::SINK_RATE).unwrap();
    put("sink_rate.importance", rows(&sr.importance));
    put("sink_rate.rate", vec![sr.rate]);

    let d = got.get::<DistanceResult>(Metric::DISTANCE_PROFILE).unwrap();
    assert_eq!(
        serde_json::to_value(&d.bands).unwrap(),
        want["distance_profile"]["bands"]
    );
    put("distance_profile.per_layer", rows(&d.per_layer));
    put(
        "distance_profile.per_head",
        d.per_head.iter().flat_map(|l| rows(l)).collect(),
    );

    let ml = got.get::<MaxLogitResult>(Metric::MAX_LOGIT).unwrap();
    put("max_logit.max", rows(&ml.max));
    put("max_logit.mean", rows(&ml.mean));
    put("max_logit.layer_max", ml.layer_max.clone());
    put("max_logit.layer_mean", ml.layer_mean.clone());
    if let Some((heads, layers)) = &ml.capped {
        put("max_logit_capped.max", rows(heads));
        put("max_logit_capped.layer_max", layers.clone());
    }

    let kr = got.get::<KeyReceivedResult>(Metric::KEY_RECEIVED).unwrap();
    let per_head = |m: &Vec<Vec<Vec<f64>>>| m.iter().flat_map(|l| rows(l)).collect();
    put("key_received.sum", per_head(&kr.sum));
    put("key_received.mean", per_head(&kr.mean));
    put("key_received.layer_sum", rows(&kr.layer_sum));
    put("key_received.layer_mean", rows(&kr.layer_mean));
    out
}

/// max |ours - ref| over a field's numbers; NaN must sit at the same places in both.
fn largest_diff(ours: &[f64], want: &[f64], what: &str) -> f64 {
    assert_eq!(ours.len(), want.len(), "{what}: length");
    let mut worst = 0f64;
    for (i, (&x, &y)) in ours.iter().zip(want).enumerate() {
        assert_eq!(x.is_nan(), y.is_nan(), "{what}[{i}]: {x} vs {y}");
        if !y.is_nan() {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

/// The metric a field's bound is taken over: its name, but key_received's sums and means
/// apart, and the histogram's edges and counts, the sink rate and the perplexity (not
/// bounded: exp of the mean) on their own.
fn metric_of(field: &str) -> &str {
    match field {
        "key_received.sum" | "key_received.layer_sum" => "key_received.sum",
        "key_received.mean" | "key_received.layer_mean" => "key_received.mean",
        "weight_sum_hist.edges" | "weight_sum_hist.count" | "sink_rate.rate" | "nll.ppl" => field,
        f => f.split('.').next().unwrap(),
    }
}

/// A fixture's fields grouped by [`metric_of`].
fn by_metric(fields: &Fields) -> BTreeMap<&str, Vec<&str>> {
    let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for field in fields.keys() {
        out.entry(metric_of(field)).or_default().push(field);
    }
    out
}

/// Fixtures whose bf16 forward sends some tokens to other experts than the float64 one, in
/// torch too (Qwen3-Next: its bf16 hidden states after the first Gated DeltaNet layer are
/// 1.25% off, and the top-2 experts of 2 tokens change, `tools/make_metrics_bf16_fixture.py`):
/// which tokens flip is rounding's chance, so their errors are held to the pooled bound of the
/// fixtures transformers does not run, twice the largest torch error over the fixtures.
const ROUTING_FLIPS: [&str; 1] = ["qwen3_next"];

/// torch's errors (`tools/make_metrics_bf16_fixture.py`) and the bounds they give.
struct TorchBf16 {
    errors: serde_json::Map<String, Value>,
}

impl TorchBf16 {
    fn load() -> Self {
        let doc = json("reference/metrics_bf16.json");
        let errors = doc["errors"].as_object().unwrap().clone();
        assert!(errors.len() >= 20, "{:?}", errors.keys());
        TorchBf16 { errors }
    }

    /// torch's largest error over the fields of `metric` on fixture `name`: for a fixture it
    /// runs, those of the fixture; else the largest over the fixtures it runs (None: no
    /// fixture it runs has the metric).
    fn error(&self, name: &str, metric: &str) -> Option<f64> {
        let of = |e: &Value| {
            let fields = e.as_object().unwrap().iter();
            let mine = fields.filter(|(f, _)| metric_of(f) == metric);
            mine.map(|(_, x)| x.as_f64().unwrap()).reduce(f64::max)
        };
        match self.errors.get(name).filter(|_| self.runs(name)) {
            Some(e) => Some(of(e).unwrap_or_else(|| panic!("{name}: no torch error for {metric}"))),
            None => self.errors.values().filter_map(of).reduce(f64::max),
        }
    }

    /// Whether fixture `name` is held to its own torch errors (transformers runs it, and
    /// its bf16 routing is that of float64).
    fn runs(&self, name: &str) -> bool {
        self.errors.contains_key(name) && !ROUTING_FLIPS.contains(&name)
    }

    /// 2 x torch's error of `metric`; where that is 0, 2 x the floor 2^-8 x `scale` (the
    /// largest |float64 value| of the metric).
    fn bound(&self, name: &str, metric: &str, scale: f64) -> Option<f64> {
        let torch = self.error(name, metric)?;
        Some(if torch > 0.0 {
            2.0 * torch
        } else {
            2.0 * UNIT_ROUNDOFF * scale
        })
    }
}

/// The defaults plus key_received, and the softmax entropy, of fixture `name` in bf16.
fn run_bf16(name: &str) -> (ModelMetrics, ModelMetrics) {
    let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::BF16).unwrap();
    let model = ckpt.load_model().unwrap();
    let ids = windows(name);
    let shape = RunShape {
        batch_size: 3,
        block: 7,
    };
    let metrics = Metric::defaults().into_iter().chain([Metric::KEY_RECEIVED]);
    let opts = fixture_options(metrics, EntropyOf::Effective);
    let got = analyze(&ckpt, &model, &ids, &opts, shape, |_| {}).unwrap();
    let opts = fixture_options([Metric::ENTROPY], EntropyOf::Softmax);
    let softmax = analyze(&ckpt, &model, &ids, &opts, shape, |_| {}).unwrap();
    (got, softmax)
}

/// The fixture's own bound on a plain metric: this many times torch's error on it (the
/// pooled rule, twice torch's, is checked over all fixtures).
const PER_FIXTURE: f64 = 4.0;

/// One metric's check on fixture `name`: (ours, the field it is largest in, bound, within,
/// and for a plain metric of a fixture transformers runs, ours and torch's errors relative to
/// the metric's largest |float64 value|, for the pooled rule).
#[allow(clippy::type_complexity)]
fn check_metric<'f>(
    torch: &TorchBf16,
    name: &str,
    metric: &str,
    fields: &[&'f str],
    (ours, want): (&Fields, &Fields),
    importance_bound: f64,
) -> (f64, &'f str, f64, bool, Option<(f64, f64)>) {
    let what = format!("{name} {metric}");
    let (first, values) = (fields[0], |f: &str| (&ours[f][..], &want[f][..]));
    match metric {
        "weight_sum_hist.count" => {
            let (ours, want) = values(first);
            let moved = ours
                .iter()
                .zip(want)
                .map(|(x, y)| (x - y).abs())
                .sum::<f64>()
                / 2.0;
            let bound = 2.0 * torch.error(name, metric).unwrap();
            (moved, first, bound, moved <= bound, None)
        }
        "sink_rate.rate" => {
            // a head may be on the other side of sink_eps than in float64 only where its
            // float64 importance lies within the importance bound of sink_eps
            let importance = &want["sink_rate.importance"];
            let eps = 0.3; // fixture_options' sink_eps
            let may_flip = importance
                .iter()
                .filter(|&&x| (x - eps).abs() <= importance_bound)
                .count();
            let bound = may_flip as f64 / importance.len() as f64;
            let (ours, want) = values(first);
            let diff = (ours[0] - want[0]).abs();
            (diff, first, bound, diff <= bound + 1e-12, None)
        }
        "alpha" | "gate" => {
            // SPEC section 12's flat tolerance for each token's value, carried to the
            // statistics: atol 1e-2 + rtol 2e-2 x the largest |value| of the metric
            let scale = fields
                .iter()
                .flat_map(|f| values(f).1.iter())
                .filter(|y| !y.is_nan())
                .fold(0f64, |m, y| m.max(y.abs()));
            let tol = FLAT.0 + FLAT.1 * scale;
            let (mut worst, mut at) = (0f64, first);
            for &f in fields {
                let (ours, want) = values(f);
                let d = largest_diff(ours, want, &format!("{what} {f}"));
                if d > worst {
                    (worst, at) = (d, f);
                }
            }
            (worst, at, tol, worst <= tol, None)
        }
        _ => {
            let (mut diff, mut at, mut scale) = (0f64, first, 0f64);
            for &f in fields {
                let (ours, want) = values(f);
                let d = largest_diff(ours, want, &format!("{what} {f}"));
                if d > diff {
                    (diff, at) = (d, f);
                }
                scale = want
                    .iter()
                    .filter(|x| !x.is_nan())
                    .fold(scale, |m, x| m.max(x.abs()));
            }
            let bound = torch
                .bound(name, metric, scale)
                .unwrap_or_else(|| panic!("{what}: no torch error"));
            if !torch.runs(name) {
                // 2x the largest torch error over the fixtures it runs: pooled already
                return (diff, at, bound, diff <= bound, None);
            }
            let bound = bound / 2.0 * PER_FIXTURE;
            let pooled = (scale > 0.0).then(|| (diff / scale, bound / PER_FIXTURE / scale));
            (diff, at, bound, diff <= bound, pooled)
        }
    }
}

#[test]
fn bf16_metrics_are_within_twice_torchs_bf16_error() {
    let torch = TorchBf16::load();
    let mut failures = Vec::new();
    // per metric: the largest ours / bound over fixtures, and where
    let mut closest: BTreeMap<String, (f64, &str)> = BTreeMap::new();
    // per metric: the largest relative error of ours and of torch over the fixtures
    let mut pooled: BTreeMap<String, (f64, &str, f64)> = BTreeMap::new();
    for name in MODEL_FIXTURES {
        let (got, softmax) = run_bf16(name);
        let mut ours = our_fields(name, &got, &softmax);
        let mut want = reference_fields(name);
        // perplexity is exp(mean nll): held to the mean's bound through the mean
        let (ppl, mean) = (ours["nll.ppl"][0], ours["nll.mean"][0]);
        assert!((ppl - mean.exp()).abs() <= 1e-12 * ppl, "{name}: ppl {ppl}");
        ours.remove("nll.ppl");
        want.remove("nll.ppl");
        let names = |f: &Fields| f.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&ours), names(&want), "{name}: fields");
        let importance = ["sink_rate.importance"];
        let importance_bound =
            check_metric(&torch, name, "sink_rate", &importance, (&ours, &want), 0.0).2;
        let runs = match (torch.errors.contains_key(name), torch.runs(name)) {
            (_, true) => "torch bf16",
            (true, false) => "bf16 routing flips: 2 x the largest torch error",
            (false, _) => "not run by transformers: 2 x the largest torch error",
        };
        eprintln!("{name} ({runs}):");
        for (metric, fields) in by_metric(&want) {
            let (diff, at, bound, within, relative) = check_metric(
                &torch,
                name,
                metric,
                &fields,
                (&ours, &want),
                importance_bound,
            );
            let mark = if within { "" } else { "  EXCEEDS" };
            eprintln!("  {metric:22} {diff:.3e} <= {bound:.3e}  ({at}){mark}");
            if !within {
                failures.push(format!("{name} {metric}: {diff:.3e} > {bound:.3e} ({at})"));
            }
            let ratio = match (bound > 0.0, diff > 0.0) {
                (true, _) => diff / bound,
                (false, true) => f64::INFINITY,
                (false, false) => 0.0,
            };
            let entry = closest.entry(metric.to_string()).or_insert((0.0, name));
            if ratio > entry.0 {
                *entry = (ratio, name);
            }
            if let Some((ours, torch)) = relative {
                let entry = pooled.entry(metric.to_string()).or_insert((0.0, name, 0.0));
                if ours > entry.0 {
                    (entry.0, entry.1) = (ours, name);
                }
                entry.2 = entry.2.max(torch);
            }
        }
    }
    eprintln!("pooled over the fixtures transformers runs (errors / the metric's scale):");
    for (metric, (ours, name, torch)) in &pooled {
        let within = ours <= &(2.0 * torch);
        let mark = if within { "" } else { "  EXCEEDS" };
        eprintln!("  {metric:22} {ours:.3e} ({name}) <= 2 x {torch:.3e}{mark}");
        if !within {
            failures.push(format!(
                "{metric} over all fixtures: {ours:.3e} ({name}) > 2 x torch's {torch:.3e}"
            ));
        }
    }
    eprintln!("largest ours / bound per metric:");
    for (metric, (ratio, name)) in &closest {
        eprintln!("  {metric:22} {ratio:.3} ({name})");
    }
    assert!(
        failures.is_empty(),
        "{} metric(s) past twice torch's bf16 error:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
