//! Every metric of a run against the float64 reference of its fixture (SPEC section 4
//! tolerances: |x - y| <= 1e-6 + 1e-5 |y|), what `metrics.rs` and `real_model.rs` check a
//! run with, and a GGUF file's whole check against its checkpoint's references.

use std::path::Path;

use asa_analysis::analysis::{analyze, RunShape};
use asa_hooks::{CaptureProbe, Hook};
use asa_metrics::alpha_gate::AlphaResult;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::{Metric, ModelMetrics, PerHead};
use asa_models::Checkpoint;
use candle_core::{DType, Device};
use serde_json::Value;

use crate::common::*;

const ATOL: f64 = METRIC_ATOL;
const RTOL: f64 = METRIC_RTOL;

pub fn close_vec(got: &[f64], want: &Value, what: &str) {
    let want = want
        .as_array()
        .unwrap_or_else(|| panic!("{what}: reference is not a list"));
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_close(*g, num(w), ATOL, RTOL, &format!("{what}[{i}]"));
    }
}

pub fn close_mat(got: &[Vec<f64>], want: &Value, what: &str) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        close_vec(g, w, &format!("{what}[{i}]"));
    }
}

/// Every metric of `got` against the float64 reference `want`.
pub fn check_all(name: &str, got: &ModelMetrics, want: &Value) {
    let ft = got
        .get::<asa_metrics::layer_stat::LayerStat>(asa_metrics::Metric::FIRST_TOKEN)
        .unwrap();
    close_vec(
        &ft.mean,
        &want["first_token"]["mean"],
        &format!("{name} first_token.mean"),
    );
    close_vec(
        &ft.std,
        &want["first_token"]["std"],
        &format!("{name} first_token.std"),
    );
    // sliding-window fixtures: the share of counted queries that still see the first token
    if let Some(share) = want["first_token"].get("visible_share") {
        let all_see = vec![1.0; ft.mean.len()];
        close_vec(
            ft.visible_share.as_ref().unwrap_or(&all_see),
            share,
            &format!("{name} first_token.visible_share"),
        );
    }

    let e = got
        .get::<asa_metrics::entropy::EntropyResult>(asa_metrics::Metric::ENTROPY)
        .unwrap();
    close_vec(
        &e.per_layer.mean,
        &want["entropy"]["mean"],
        &format!("{name} entropy.mean"),
    );
    close_vec(
        &e.per_layer.std,
        &want["entropy"]["std"],
        &format!("{name} entropy.std"),
    );
    close_mat(
        &e.per_head,
        &want["entropy"]["per_head"],
        &format!("{name} entropy.per_head"),
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
        close_vec(
            &values,
            &want["weight_sum"][stat],
            &format!("{name} weight_sum.{stat}"),
        );
    }
    let hist = &want["weight_sum_hist"];
    if hist["degenerate"].as_bool() != Some(true) {
        close_vec(
            &ws.histogram.bin_lo,
            &hist["bin_lo"],
            &format!("{name} hist.bin_lo"),
        );
        close_vec(
            &ws.histogram.bin_hi,
            &hist["bin_hi"],
            &format!("{name} hist.bin_hi"),
        );
        let counts: Vec<u64> = hist["count"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(ws.histogram.count, counts, "{name} histogram counts");
    } else {
        // every weight sum is 1 up to rounding: one bin holds all of them
        let total: u64 = ws.histogram.count.iter().sum();
        assert_eq!(
            ws.histogram.count.iter().max(),
            Some(&total),
            "{name} degenerate histogram"
        );
    }
    close_mat(
        &ws.head_total,
        &want["head_total"],
        &format!("{name} head_total"),
    );

    let qk = got
        .get::<asa_metrics::qk_mean::QkResult>(asa_metrics::Metric::QK_MEAN)
        .unwrap();
    assert_close(
        qk.mean,
        num(&want["qk_mean"]["mean"]),
        ATOL,
        RTOL,
        &format!("{name} qk.mean"),
    );
    assert_close(
        qk.abs_mean,
        num(&want["qk_mean"]["abs_mean"]),
        ATOL,
        RTOL,
        &format!("{name} qk.abs_mean"),
    );
    close_vec(
        &qk.per_layer_mean,
        &want["qk_mean"]["per_layer_mean"],
        &format!("{name} qk.per_layer_mean"),
    );
    close_vec(
        &qk.per_layer_abs_mean,
        &want["qk_mean"]["per_layer_abs_mean"],
        &format!("{name} qk.per_layer_abs_mean"),
    );

    // the maps' layer (absent where a test asks for no maps)
    if let Some(hm) = got.get::<asa_metrics::heatmap::HeatmapResult>(asa_metrics::Metric::HEATMAP) {
        check_maps(name, got, hm, want);
    }

    match (got.get::<PerHead>(Metric::SINK_MASS), want.get("sink_mass")) {
        (Some(g), Some(w)) => close_mat(&g.0, w, &format!("{name} sink_mass")),
        (None, None) => {}
        (g, w) => panic!(
            "{name}: sink_mass computed {} vs reference {}",
            g.is_some(),
            w.is_some()
        ),
    }
    match (got.get::<AlphaResult>(Metric::ALPHA), want.get("alpha")) {
        (Some(a), Some(w)) => {
            for (stat, idx) in [
                ("mean", 0),
                ("std", 1),
                ("p05", 2),
                ("p25", 3),
                ("p50", 4),
                ("p75", 5),
                ("p95", 6),
            ] {
                let values: Vec<Vec<f64>> = a
                    .per_head
                    .iter()
                    .map(|hs| hs.iter().map(|d| d.named()[idx].1).collect())
                    .collect();
                close_mat(&values, &w[stat], &format!("{name} alpha.{stat}"));
            }
            close_mat(&a.alpha_ma, &w["alpha_ma"], &format!("{name} alpha_ma"));
        }
        (None, None) => {}
        (g, w) => panic!(
            "{name}: alpha computed {} vs reference {}",
            g.is_some(),
            w.is_some()
        ),
    }
    match (got.get::<PerHead>(Metric::GATE), want.get("gate")) {
        (Some(g), Some(w)) => close_mat(&g.0, w, &format!("{name} gate")),
        (None, None) => {}
        (g, w) => panic!(
            "{name}: gate computed {} vs reference {}",
            g.is_some(),
            w.is_some()
        ),
    }

    let nll = got
        .get::<asa_metrics::nll::NllResult>(asa_metrics::Metric::NLL)
        .unwrap();
    assert_close(
        nll.mean,
        num(&want["nll"]["mean"]),
        ATOL,
        RTOL,
        &format!("{name} nll"),
    );
    assert_close(
        nll.ppl,
        num(&want["nll"]["ppl"]),
        ATOL,
        RTOL,
        &format!("{name} ppl"),
    );
    close_vec(
        &nll.per_position,
        &want["nll"]["per_position"],
        &format!("{name} nll per position"),
    );

    let sr = got
        .get::<asa_metrics::first_token::SinkRate>(asa_metrics::Metric::SINK_RATE)
        .unwrap();
    close_mat(
        &sr.importance,
        &want["sink_rate"]["importance"],
        &format!("{name} sink importance"),
    );
    assert_eq!(sr.rate, num(&want["sink_rate"]["rate"]), "{name} sink rate");

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
    close_mat(
        &d.per_layer,
        &want["distance_profile"]["per_layer"],
        &format!("{name} distance per layer"),
    );
    for (l, heads) in d.per_head.iter().enumerate() {
        close_mat(
            heads,
            &want["distance_profile"]["per_head"][l],
            &format!("{name} distance layer {l}"),
        );
    }
}

pub fn check_maps(
    name: &str,
    got: &ModelMetrics,
    hm: &asa_metrics::heatmap::HeatmapResult,
    want: &Value,
) {
    assert_eq!(
        hm.layer + 1,
        want["heatmap"]["layer"].as_u64().unwrap() as usize
    );
    close_mat(
        &hm.values,
        &want["heatmap"]["values"],
        &format!("{name} heatmap"),
    );

    let qp = got
        .get::<asa_metrics::heatmap::QueryProfileResult>(asa_metrics::Metric::QUERY_PROFILE)
        .unwrap();
    assert_eq!(
        qp.query,
        want["query_profile"]["query"].as_u64().unwrap() as usize
    );
    close_vec(
        &qp.values,
        &want["query_profile"]["values"],
        &format!("{name} query_profile"),
    );
    assert_close(
        qp.sink_mass,
        num(&want["query_profile"]["sink_mass"]),
        ATOL,
        RTOL,
        &format!("{name} profile sink"),
    );
}

/// The GGUF file `path` of the checkpoint `tests/fixtures/models/{name}` must reproduce its
/// float64 references `tests/fixtures/reference/{name}.*`: logits, every attention layer's
/// pattern, every metric.
pub fn check_gguf_file(path: &Path, name: &str) {
    let ckpt = Checkpoint::open(path, &Device::Cpu, DType::F32)
        .and_then(Checkpoint::validate)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let model = ckpt.load_model().unwrap();
    let refs = reference(name);
    let ids = refs["input_ids"].to_dtype(DType::U32).unwrap();
    // the attention layers, numbered in order (a hybrid's other layers have no pattern)
    let layers = reference_layers(&refs);
    let mut probe = CaptureProbe::new(&[Hook::Logits, Hook::Pattern]);
    model.forward(&ids, 64, &mut probe).unwrap();
    let atol = 1e-5 * f32_noise(name);
    let d = max_abs_diff(
        &probe.get(Hook::Logits, layers).unwrap().unwrap(),
        &refs["logits"],
    );
    assert!(d < atol, "{name}.gguf: logits differ by {d:e}");
    for l in 0..layers {
        let p = probe.get(Hook::Pattern, l).unwrap().unwrap();
        let d = max_abs_diff(&p, &refs[&format!("layers.{l}.pattern")]);
        assert!(
            d < atol,
            "{name}.gguf attention layer {l}: pattern differs by {d:e}"
        );
    }
    let windows: Vec<Vec<u32>> = ids.to_vec2().unwrap();
    let opts = fixture_options(Metric::defaults(), EntropyOf::Effective);
    let got = analyze(
        &ckpt,
        &model,
        &windows,
        &opts,
        RunShape {
            batch_size: 3,
            block: 7,
        },
        |_| {},
    )
    .unwrap();
    // every metric, a learned sink's mass among them (GPT-OSS)
    check_all(&format!("{name}.gguf"), &got, &reference_metrics(name));
}
