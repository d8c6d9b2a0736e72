//! `WeightMap` (SPEC section 3): a checkpoint whose tensors carry other names reproduces the
//! reference metrics (numpy float64, `tools/make_fixtures.py`) of the conventionally named
//! fixture once the map names them. The command line's `--weight-map` is tested in
//! tests/it/weight_map.rs.

use asa_analysis::analysis::{analyze, RunShape};
use asa_metrics::entropy::EntropyOf;
use asa_metrics::Metric;
use asa_models::{Checkpoint, WeightMap};
use candle_core::{DType, Device};

use crate::common::weight_map_fixture::{renamed_sink_fixture, MAP};
use crate::common::*;

#[test]
fn a_mapped_checkpoint_gives_the_reference_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("foreign");
    renamed_sink_fixture(&dir);
    let map_path = tmp.path().join("map.json");
    std::fs::write(&map_path, MAP).unwrap();
    let map = WeightMap::load(&map_path).unwrap();
    let ckpt = Checkpoint::open_mapped(&dir, &Device::Cpu, DType::F32, &map).unwrap();
    // the variant is detected from the renamed sinks
    assert_eq!(ckpt.variant.kind.name(), "sink");
    let model = ckpt.load_model().unwrap();
    let ids = reference("sink")["input_ids"]
        .to_dtype(DType::U32)
        .unwrap()
        .to_vec2::<u32>()
        .unwrap();
    let opts = fixture_options(
        [Metric::FIRST_TOKEN, Metric::SINK_MASS, Metric::ENTROPY],
        EntropyOf::Effective,
    );
    let shape = RunShape {
        batch_size: 1,
        block: 8,
    };
    let got = analyze(&ckpt, &model, &ids, &opts, shape, |_| {}).unwrap();
    let want = reference_metrics("sink");
    let num = |v: &serde_json::Value| v.as_f64().unwrap();
    let first = got
        .get::<asa_metrics::layer_stat::LayerStat>(asa_metrics::Metric::FIRST_TOKEN)
        .unwrap();
    for (l, g) in first.mean.iter().enumerate() {
        let w = num(&want["first_token"]["mean"][l]);
        assert_close(*g, w, 1e-6, 1e-5, &format!("first_token layer {l}"));
    }
    let entropy = got
        .get::<asa_metrics::entropy::EntropyResult>(asa_metrics::Metric::ENTROPY)
        .unwrap();
    for (l, g) in entropy.per_layer.mean.iter().enumerate() {
        let w = num(&want["entropy"]["mean"][l]);
        assert_close(*g, w, 1e-6, 1e-5, &format!("entropy layer {l}"));
    }
    let sink = got
        .get::<asa_metrics::PerHead>(Metric::SINK_MASS)
        .expect("the sinks were found under the map");
    for (l, heads) in sink.0.iter().enumerate() {
        for (h, g) in heads.iter().enumerate() {
            let w = num(&want["sink_mass"][l][h]);
            assert_close(*g, w, 1e-6, 1e-5, &format!("sink_mass {l}/{h}"));
        }
    }
}
