//! Every metric on every fixture against `tools/make_fixtures.py`'s numpy float64 values,
//! in f32: |x - y| <= 1e-6 + 1e-5 |y| (SPEC section 4 tolerances).

use crate::common;

use crate::reference_check::{check_all, close_mat, close_vec};
use asa_analysis::analysis::{accumulate, analyze, finish, RunPart, RunShape};
use asa_metrics::entropy::EntropyOf;
use asa_metrics::{Metric, MetricOptions, ModelMetrics};
use asa_models::Checkpoint;
use candle_core::{DType, Device};
use common::*;
use serde_json::Value;

fn options(entropy_of: EntropyOf) -> MetricOptions {
    fixture_options(Metric::defaults(), entropy_of)
}

fn windows(name: &str) -> Vec<Vec<u32>> {
    let ids = &reference(name)["input_ids"];
    ids.to_dtype(DType::U32).unwrap().to_vec2::<u32>().unwrap()
}

fn compute(name: &str, shape: RunShape, entropy_of: EntropyOf) -> ModelMetrics {
    let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
    let model = ckpt.load_model().unwrap();
    analyze(
        &ckpt,
        &model,
        &windows(name),
        &options(entropy_of),
        shape,
        |_| {},
    )
    .unwrap()
}

#[test]
fn every_metric_matches_the_reference_on_every_fixture() {
    for name in MODEL_FIXTURES {
        let got = compute(
            name,
            RunShape {
                batch_size: 3,
                block: 64,
            },
            EntropyOf::Effective,
        );
        assert!(got
            .get::<asa_metrics::heatmap::HeatmapResult>(Metric::HEATMAP)
            .is_some());
        check_all(name, &got, &reference_metrics(name));
    }
}

/// A sliding-window layer through the flash tiles as well: with no maps asked for, the
/// windowed layer 2 of `qwen2_window` (window 6 of 20 tokens) and GPT-OSS's windowed layer 1
/// with its learned sinks are computed by the tiles (in the test above they are materialised
/// for the heatmap), in blocks of 7 queries whose first key tiles lie wholly outside the
/// window, and every metric matches transformers' own sliding mask in float64.
#[test]
fn a_sliding_window_layer_matches_the_reference_through_the_tiles() {
    for (name, windowed) in [("qwen2_window", 1), ("gpt_oss", 0)] {
        let metrics = Metric::defaults()
            .into_iter()
            .filter(|m| ![Metric::HEATMAP, Metric::QUERY_PROFILE].contains(m));
        let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
        let model = ckpt.load_model().unwrap();
        let shape = RunShape {
            batch_size: 2,
            block: 7,
        };
        let opts = fixture_options(metrics, EntropyOf::Effective);
        let got = analyze(&ckpt, &model, &windows(name), &opts, shape, |_| {}).unwrap();
        assert!(got
            .get::<asa_metrics::heatmap::HeatmapResult>(Metric::HEATMAP)
            .is_none());
        assert_eq!(
            got.kernels.get(&windowed),
            Some(&asa_hooks::Kernel::FlashTiles),
            "{name}"
        );
        check_all(name, &got, &reference_metrics(name));
    }
}

#[test]
fn entropy_of_softmax_matches_the_reference() {
    for name in ["affine_scaled", "sink", "off_by_one"] {
        let got = compute(
            name,
            RunShape {
                batch_size: 3,
                block: 64,
            },
            EntropyOf::Softmax,
        );
        let want = &reference_metrics(name)["entropy_softmax"];
        let e = got
            .get::<asa_metrics::entropy::EntropyResult>(asa_metrics::Metric::ENTROPY)
            .unwrap();
        close_vec(
            &e.per_layer.mean,
            &want["mean"],
            &format!("{name} entropy_softmax.mean"),
        );
        close_mat(
            &e.per_head,
            &want["per_head"],
            &format!("{name} entropy_softmax.per_head"),
        );
    }
}

#[test]
fn batch_size_and_block_size_do_not_change_the_metrics() {
    // issue 3: batch 1 vs N; issue 12: blocks 1, 7, T (per-key sums included)
    for name in ["affine_scaled_sigmoid_visible", "sink", "llama_gqa"] {
        let want = reference_metrics(name);
        for (batch_size, block) in [(1, 20), (1, 1), (2, 7), (3, 3)] {
            let got = compute(name, RunShape { batch_size, block }, EntropyOf::Effective);
            check_all(
                &format!("{name} batch {batch_size} block {block}"),
                &got,
                &want,
            );
        }
    }
}

#[test]
fn distance_bands_sum_to_the_weight_sum() {
    for name in ["llama_gqa", "affine_scaled"] {
        let got = compute(
            name,
            RunShape {
                batch_size: 3,
                block: 5,
            },
            EntropyOf::Effective,
        );
        let d = got
            .get::<asa_metrics::distance::DistanceResult>(asa_metrics::Metric::DISTANCE_PROFILE)
            .unwrap();
        let ws = got
            .get::<asa_metrics::weight_sum::WeightSumResult>(asa_metrics::Metric::WEIGHT_SUM)
            .unwrap();
        for (l, bands) in d.per_layer.iter().enumerate() {
            let total: f64 = bands.iter().sum();
            assert_close(
                total,
                ws.per_layer[l].mean,
                1e-6,
                0.0,
                &format!("{name} layer {l} bands"),
            );
        }
    }
}

#[test]
fn progress_is_reported_block_by_block() {
    // batches of 2 sequences, blocks of 7 queries: one report per block of every layer of
    // every batch, rising to every token
    let name = "llama_gqa";
    let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
    let model = ckpt.load_model().unwrap();
    let ids = windows(name);
    let t = ids[0].len();
    let layers = ckpt.config.num_layers;
    let total: usize = ids.iter().map(Vec::len).sum();
    let mut seen = Vec::new();
    let shape = RunShape {
        batch_size: 2,
        block: 7,
    };
    analyze(
        &ckpt,
        &model,
        &ids,
        &options(EntropyOf::Effective),
        shape,
        |done| seen.push(done),
    )
    .unwrap();
    let batches = ids.len().div_ceil(2);
    assert!(t > 7 && layers > 1);
    assert_eq!(seen.len(), batches * layers * t.div_ceil(7), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert_eq!(*seen.last().unwrap(), total);
    // the first report is the first block of the first layer of the first batch
    let first_batch = ids.len().min(2) * t;
    assert_eq!(seen[0], first_batch * 7 / (layers * t), "{seen:?}");
}

/// `tools/make_logit_key_fixtures.py`'s float64 max_logit and key_received of a fixture.
fn logit_key_reference(name: &str) -> Value {
    let path = fixtures()
        .join("reference")
        .join(format!("{name}.logit_key.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn max_logit_and_key_received_match_the_float64_reference() {
    // layer 1 on the flash tiles (key_received's sums from their second pass, issue 41),
    // layer 2 the materialised heatmap layer; and every block materialised (`--entropy-of
    // softmax`: key_received from the weights); in one block and in blocks of 7 queries
    let with_keys: Vec<Metric> = Metric::defaults()
        .into_iter()
        .chain([Metric::KEY_RECEIVED])
        .collect();
    for name in MODEL_FIXTURES {
        let want = logit_key_reference(name);
        let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
        let model = ckpt.load_model().unwrap();
        for (metrics, (batch_size, block), entropy_of) in [
            (Metric::defaults().to_vec(), (3, 64), EntropyOf::Effective),
            (Metric::defaults().to_vec(), (2, 7), EntropyOf::Effective),
            (with_keys.clone(), (3, 64), EntropyOf::Effective),
            (with_keys.clone(), (2, 7), EntropyOf::Effective),
            (with_keys.clone(), (2, 7), EntropyOf::Softmax),
        ] {
            let keys = metrics.contains(&Metric::KEY_RECEIVED);
            let opts = fixture_options(metrics, entropy_of);
            let shape = RunShape { batch_size, block };
            let got = analyze(&ckpt, &model, &windows(name), &opts, shape, |_| {}).unwrap();
            let what =
                format!("{name} (keys {keys}, batch {batch_size}, block {block}, {entropy_of:?})");
            let tiles = got
                .kernels
                .values()
                .any(|&k| k == asa_hooks::Kernel::FlashTiles);
            assert_eq!(
                tiles,
                entropy_of == EntropyOf::Effective,
                "{what}: {:?}",
                got.kernels
            );
            let ml = got
                .get::<asa_metrics::max_logit::MaxLogitResult>(asa_metrics::Metric::MAX_LOGIT)
                .unwrap();
            let w = &want["max_logit"];
            close_mat(&ml.max, &w["max"], &format!("{what} max_logit max"));
            close_mat(&ml.mean, &w["mean"], &format!("{what} max_logit mean"));
            close_vec(&ml.layer_max, &w["layer_max"], &format!("{what} layer max"));
            close_vec(
                &ml.layer_mean,
                &w["layer_mean"],
                &format!("{what} layer mean"),
            );
            // soft-capped logits (Gemma 2): the capped maxima beside the raw ones
            let capped = want.get("max_logit_capped");
            assert_eq!(ml.capped.is_some(), capped.is_some(), "{what}");
            if let (Some((heads, layers)), Some(w)) = (&ml.capped, capped) {
                close_mat(heads, &w["max"], &format!("{what} capped max"));
                close_vec(layers, &w["layer_max"], &format!("{what} capped layer max"));
            }
            assert_eq!(
                got.get::<asa_metrics::key_received::KeyReceivedResult>(
                    asa_metrics::Metric::KEY_RECEIVED
                )
                .is_some(),
                keys,
                "{what}"
            );
            let Some(kr) = got.get::<asa_metrics::key_received::KeyReceivedResult>(
                asa_metrics::Metric::KEY_RECEIVED,
            ) else {
                continue;
            };
            let w = &want["key_received"];
            for l in 0..kr.sum.len() {
                close_mat(
                    &kr.sum[l],
                    &w["sum"][l],
                    &format!("{what} key sum layer {l}"),
                );
                close_mat(
                    &kr.mean[l],
                    &w["mean"][l],
                    &format!("{what} key mean layer {l}"),
                );
            }
            close_mat(
                &kr.layer_sum,
                &w["layer_sum"],
                &format!("{what} layer key sum"),
            );
            close_mat(
                &kr.layer_mean,
                &w["layer_mean"],
                &format!("{what} layer key mean"),
            );
        }
    }
}

/// A small deterministic generator (xorshift64*) for split points and orders.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }
}

#[test]
fn a_run_split_at_random_and_merged_in_any_order_gives_the_single_run() {
    // 9 windows of 20 tokens; each trial cuts them at random points into up to 4 groups
    // (so batches of 2 pair other windows than in the single run), accumulates each group
    // apart, merges the groups in a random order, and must finish to the single run's
    // tables. Query blocks stay those of the single run: other blocks change f32 rounding,
    // which is no matter of merging (batch_size_and_block_size_do_not_change_the_metrics).
    // Each part goes through its saved state (MetricProbe::state / restore) first
    let ids: Vec<Vec<u32>> = (0..9u32)
        .map(|s| (0..20u32).map(|i| (s * 17 + i * i * 5 + 3) % 64).collect())
        .collect();
    let metrics: Vec<Metric> = Metric::defaults()
        .into_iter()
        .chain([Metric::KEY_RECEIVED])
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // llama4_text: chunked and NoPE layers, their windows carried in each part's saved state;
    // lfm2: a hybrid, whose attention layers' decoder numbers the saved state carries
    for name in ["sink", "affine_scaled_gated", "logn", "llama4_text", "lfm2"] {
        let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
        let model = ckpt.load_model().unwrap();
        for flash in [true, false] {
            // without key_received the tiles run (layer 1); with it every block is materialised
            let metrics = if flash {
                Metric::defaults().to_vec()
            } else {
                metrics.clone()
            };
            let opts = fixture_options(metrics, EntropyOf::Effective);
            // an MoE layer gathers each expert's tokens over the batch, so a window's batch
            // partners change its f32 rounding there: llama4_text runs a window a pass
            let shape = RunShape {
                batch_size: if name == "llama4_text" { 1 } else { 2 },
                block: 8,
            };
            let whole = analyze(&ckpt, &model, &ids, &opts, shape, |_| {}).unwrap();
            let numbers = whole.layer_numbers.clone();
            let whole = serde_json::to_value(&whole).unwrap();
            for trial in 0..4 {
                let mut cuts: Vec<usize> = (0..3).map(|_| rng.below(ids.len() + 1)).collect();
                cuts.extend([0, ids.len()]);
                cuts.sort();
                cuts.dedup();
                let mut parts: Vec<_> = cuts
                    .windows(2)
                    .map(|w| {
                        // a part's progress counts its own tokens, up to all of them
                        let mut done = 0;
                        let part = RunPart {
                            windows: &ids,
                            range: w[0]..w[1],
                        };
                        let part =
                            accumulate(&ckpt, &model, part, &opts, shape, |d| done = d).unwrap();
                        assert_eq!(done, (w[1] - w[0]) * 20, "progress of part {w:?}");
                        // through its saved state, as a shard's partial result carries it
                        asa_metrics::MetricProbe::restore(part.state().unwrap()).unwrap()
                    })
                    .collect();
                let mut merged = parts.swap_remove(rng.below(parts.len()));
                while !parts.is_empty() {
                    merged.merge(&parts.swap_remove(rng.below(parts.len())));
                }
                let got = finish(&ckpt, &merged).unwrap();
                assert_eq!(got.layer_numbers, numbers, "{name}: layer numbers");
                let got = serde_json::to_value(got).unwrap();
                assert_json_close(
                    &got,
                    &whole,
                    1e-12,
                    &format!("{name} flash {flash} trial {trial} {cuts:?}"),
                );
            }
        }
    }
}
