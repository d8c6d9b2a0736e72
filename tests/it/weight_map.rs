//! `--weight-map` (SPEC section 3): a checkpoint whose tensors carry other names reproduces
//! the reference metrics (numpy float64, `tools/make_fixtures.py`) of the conventionally
//! named fixture once the map names them; bad maps are one-line errors.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use asa_analysis::analysis::{analyze, RunShape};
use asa_metrics::entropy::EntropyOf;
use asa_metrics::Metric;
use asa_models::{Checkpoint, WeightMap};
use candle_core::{DType, Device, Tensor};
use common::*;

const MAP: &str = r#"{
    "model.layers.{l}.self_attn.sinks": "blocks.{l}.attn.sink_logits",
    "model.layers.{l}.self_attn.{p}.weight": "blocks.{l}.attn.{p}.w",
    "model.embed_tokens.weight": "wte.weight"
}"#;

/// The tensor names of `MAP`'s right-hand side, for a conventionally named tensor.
fn foreign_name(name: &str) -> String {
    let parts: Vec<&str> = name.split('.').collect();
    match parts.as_slice() {
        ["model", "layers", l, "self_attn", "sinks"] => format!("blocks.{l}.attn.sink_logits"),
        ["model", "layers", l, "self_attn", p, "weight"] => format!("blocks.{l}.attn.{p}.w"),
        ["model", "embed_tokens", "weight"] => "wte.weight".to_string(),
        _ => name.to_string(),
    }
}

/// The `sink` fixture with its sinks, attention projections and embedding renamed.
fn renamed_sink_fixture(dir: &Path) {
    copy_fixture("sink", dir);
    let file = dir.join("model.safetensors");
    let tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let renamed: HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(name, t)| (foreign_name(&name), t))
        .collect();
    assert!(renamed.contains_key("blocks.1.attn.sink_logits"));
    assert!(renamed.contains_key("blocks.0.attn.q_proj.w"));
    candle_core::safetensors::save(&renamed, &file).unwrap();
}

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

#[test]
fn the_cli_takes_a_weight_map_and_rejects_bad_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("foreign");
    renamed_sink_fixture(&dir);
    std::fs::write(tmp.path().join("map.json"), MAP).unwrap();
    let ok = run_cli(
        tmp.path(),
        &["inspect", "foreign", "--weight-map", "map.json", "--json"],
    );
    expect_success(&ok);
    assert!(String::from_utf8_lossy(&ok.stdout).contains("sink"));

    // without the map the conventional names are missing
    let err = expect_error(&run_cli(tmp.path(), &["inspect", "foreign"]));
    assert!(err.contains("is missing"), "{err}");
    assert_eq!(crate::common::open_problem(&dir).name(), "missing_tensor");

    let bad_maps = [
        (
            "bad.json",
            "{\"model.embed_tokens.weight\": ",
            "not valid JSON",
        ),
        (
            "placeholders.json",
            r#"{"model.layers.{l}.self_attn.sinks": "blocks.{n}.attn.sink_logits"}"#,
            "same placeholders",
        ),
        // wte.weight would become model.norm.weight, which the checkpoint already has
        (
            "clash.json",
            r#"{"model.norm.weight": "wte.weight"}"#,
            "would both be model.norm.weight",
        ),
    ];
    for (file, text, says) in bad_maps {
        std::fs::write(tmp.path().join(file), text).unwrap();
        let out = tmp.path().join(format!("out_{file}"));
        let err = expect_error(&run_cli(
            tmp.path(),
            &[
                "analyze",
                "foreign",
                "--weight-map",
                file,
                "--num-seqs",
                "1",
                "--seq-len",
                "8",
                "--out",
                out.to_str().unwrap(),
                "--quiet",
            ],
        ));
        assert!(err.contains(file) && err.contains(says), "{file}: {err}");
        // no output files (the folder itself may exist: it is made before the models load)
        let files = std::fs::read_dir(&out).map_or(0, |d| d.count());
        assert_eq!(files, 0, "{file}: no output files on a bad map");
    }
}
