//! Helpers of the library's tests (this crate's `tests/library`, and `tests/it` of the
//! binary, which includes this file): fixture paths, reference loading, comparisons, edited
//! copies of checkpoints and the problems they are refused with.
#![allow(dead_code)]

use std::path::Path;

use std::collections::BTreeSet;

use asa_metrics::distance::Bands;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::{Metric, MetricOptions};

#[path = "../../../asa-models/tests/common/reference_files.rs"]
mod reference_files;
pub use reference_files::*;

/// The renamed `sink` fixture and its weight map (`#[path]`: the same file whichever binary
/// includes this one).
#[path = "weight_map_fixture.rs"]
pub mod weight_map_fixture;

/// The repository's root (where `tools/` is): above `tests/fixtures`.
pub fn repository() -> std::path::PathBuf {
    fixtures()
        .parent()
        .and_then(Path::parent)
        .expect("tests/fixtures is two folders down")
        .to_path_buf()
}

/// The options the fixture references were computed with (`tools/make_fixtures.py`: 20
/// tokens, 2 layers): `metrics`, heatmap and profile of the last layer, decade bands.
pub fn fixture_options(
    metrics: impl IntoIterator<Item = Metric>,
    entropy_of: EntropyOf,
) -> MetricOptions {
    MetricOptions {
        metrics: metrics.into_iter().collect::<BTreeSet<_>>(),
        min_query: 1,
        heatmap_layer: 1, // the default 8 clipped to the 2 layers
        heatmap_size: 20,
        map_size: 20,
        profile_query: 19,
        bins: 20,
        sink_eps: 0.3,
        bands: Bands::decades(20),
        entropy_of,
        induction_len: None,
        roles: Default::default(),
    }
}

/// The reference metrics of a fixture.
pub fn reference_metrics(name: &str) -> serde_json::Value {
    let path = fixtures()
        .join("reference")
        .join(format!("{name}.metrics.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The induction probe's references of a fixture (`tools/make_induction_fixtures.py`).
pub fn induction_reference(name: &str) -> serde_json::Value {
    let path = fixtures()
        .join("reference")
        .join(format!("{name}.induction.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A reference's number (NaN where the JSON holds null, as the references write NaN).
pub fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// SPEC section 4: a metric against its float64 reference, |x - y| <= 1e-6 + 1e-5 |y|.
pub const METRIC_ATOL: f64 = 1e-6;
/// See [`METRIC_ATOL`].
pub const METRIC_RTOL: f64 = 1e-5;

/// |x - y| <= atol + rtol |y|, NaN equal to NaN; panics with `what` otherwise.
pub fn assert_close(x: f64, y: f64, atol: f64, rtol: f64, what: &str) {
    if x.is_nan() && y.is_nan() {
        return;
    }
    assert!(
        (x - y).abs() <= atol + rtol * y.abs(),
        "{what}: got {x}, expected {y} (diff {:e})",
        (x - y).abs()
    );
}

/// Writes the reference input ids of `name` as a .json corpus of ready-made windows.
pub fn ids_corpus(name: &str, dir: &Path) -> String {
    let ids = reference(name)["input_ids"]
        .to_dtype(candle_core::DType::U32)
        .unwrap()
        .to_vec2::<u32>()
        .unwrap();
    let path = dir.join(format!("{name}.ids.json"));
    std::fs::write(&path, serde_json::to_string(&ids).unwrap()).unwrap();
    path.display().to_string()
}

/// Copies model fixture `name` into `to` (created), to be edited by a test.
pub fn copy_fixture(name: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(model_dir(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Rewrites `dir/config.json` through `edit`.
pub fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&path, serde_json::to_string(&cfg).unwrap()).unwrap();
}

/// The same JSON: integers (counts) equal, floats within `rel` relative, NaN equal to NaN
/// (`null` both), objects with the same fields; panics naming the first place that differs.
pub fn assert_json_close(a: &serde_json::Value, b: &serde_json::Value, rel: f64, path: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_u64() && y.is_u64() => {
            assert_eq!(x, y, "{path}: counts differ")
        }
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= rel * x.abs().max(y.abs()),
                "{path}: {x} vs {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{path}: lengths");
            for (k, (x, y)) in x.iter().zip(y).enumerate() {
                assert_json_close(x, y, rel, &format!("{path}[{k}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.len(), y.len(), "{path}: fields");
            for (k, x) in x {
                assert_json_close(x, &y[k], rel, &format!("{path}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{path}"),
    }
}

/// A copy of GGUF fixture `name` with the f32 metadata value of `key` set to `value`.
pub fn gguf_with_f32(
    name: &str,
    key: &str,
    value: f32,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    gguf_with_4_bytes(name, key, (6, "an f32"), value.to_le_bytes(), dir)
}

/// A copy of GGUF fixture `name` with the u32 metadata value of `key` set to `value`.
pub fn gguf_with_u32(
    name: &str,
    key: &str,
    value: u32,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    gguf_with_4_bytes(name, key, (4, "a u32"), value.to_le_bytes(), dir)
}

/// A copy of GGUF fixture `name` whose metadata value of `key`, of GGUF type `kind` (its
/// number and name), is `bytes`.
fn gguf_with_4_bytes(
    name: &str,
    key: &str,
    kind: (u32, &str),
    bytes: [u8; 4],
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let mut file = std::fs::read(fixtures().join("gguf").join(name)).unwrap();
    let at = file
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap_or_else(|| panic!("{key} in {name}"));
    let typed = at + key.len();
    assert_eq!(
        &file[typed..typed + 4],
        &kind.0.to_le_bytes(),
        "{key} is {}",
        kind.1
    );
    file[typed + 4..typed + 8].copy_from_slice(&bytes);
    let path = dir.join(name);
    std::fs::write(&path, file).unwrap();
    path
}

/// A copy of GGUF fixture `name` with the metadata `extra` added (replacing a key of the same
/// name), its tensors written again by candle's GGUF writer.
pub fn gguf_with_metadata(
    name: &str,
    extra: Vec<(&str, candle_core::quantized::gguf_file::Value)>,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    gguf_rewritten(name, extra, &[], dir)
}

/// A copy of GGUF fixture `name` (under `dir`, at the same relative path) without the
/// metadata key `key`.
pub fn gguf_without(name: &str, key: &str, dir: &std::path::Path) -> std::path::PathBuf {
    gguf_rewritten(name, vec![], &[key], dir)
}

/// A copy of GGUF fixture `name` with `extra` metadata set and the `removed` keys left out.
fn gguf_rewritten(
    name: &str,
    extra: Vec<(&str, candle_core::quantized::gguf_file::Value)>,
    removed: &[&str],
    dir: &std::path::Path,
) -> std::path::PathBuf {
    use candle_core::quantized::gguf_file::{self, Content};
    let mut file = std::fs::File::open(fixtures().join("gguf").join(name)).unwrap();
    let content = Content::read(&mut file).unwrap();
    let mut metadata: Vec<(&str, gguf_file::Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k) && !removed.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    metadata.extend(extra);
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(&str, candle_core::quantized::QTensor)> = names
        .iter()
        .map(|n| {
            let t = content
                .tensor(&mut file, n, &candle_core::Device::Cpu)
                .unwrap();
            (n.as_str(), t)
        })
        .collect();
    let path = dir.join(name);
    let mut out = std::fs::File::create(&path).unwrap();
    let metadata: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &candle_core::quantized::QTensor)> =
        tensors.iter().map(|(k, t)| (*k, t)).collect();
    gguf_file::write(&mut out, &metadata, &tensors).unwrap();
    path
}

/// The error of opening checkpoint `path` (a folder or a GGUF file) on the CPU in f32,
/// which must fail.
/// The problem [`asa_models::Checkpoint::open`] (and `validate`) refuses the
/// checkpoint at `path` with, as a value.
pub fn open_problem(path: &Path) -> asa_core::checkpoint_problem::CheckpointProblem {
    use candle_core::{DType, Device};
    let err = asa_models::Checkpoint::open(path, &Device::Cpu, DType::F32)
        .and_then(asa_models::Checkpoint::validate)
        .and_then(|checkpoint| checkpoint.refuse_unused())
        .err()
        .expect("refused");
    err.problem()
        .cloned()
        .unwrap_or_else(|| panic!("not a typed problem: {err}"))
}

/// The problem `path` is refused with (as [`open_problem`]), checked to be the variant `name`
/// ([`CheckpointProblem::name`]) about `about`: one of its keys, or its tensor.
///
/// [`CheckpointProblem::name`]: asa_core::checkpoint_problem::CheckpointProblem::name
pub fn expect_problem(
    path: &Path,
    name: &str,
    about: &str,
) -> asa_core::checkpoint_problem::CheckpointProblem {
    let problem = open_problem(path);
    assert_eq!(problem.name(), name, "{problem:?}");
    assert!(
        problem.keys().contains(&about) || problem.tensor() == Some(about),
        "{problem:?} is not about {about}"
    );
    problem
}

/// The problem the library's run (what `analyze` calls: 2 windows of 16 tokens) refuses the
/// checkpoint at `path` with: what only a forward pass finds (activations that overflow) as
/// well as what opening it does.
pub fn run_problem(path: &Path) -> asa_core::checkpoint_problem::CheckpointProblem {
    run_problem_as(path, None)
}

/// [`run_problem`] with every checkpoint analysed as `variant` (`--variant`) where one is.
pub fn run_problem_as(
    path: &Path,
    variant: Option<asa_engine::attention::VariantKind>,
) -> asa_core::checkpoint_problem::CheckpointProblem {
    use asa_analysis::analysis::{ModelSource, Run, RunOptions, RunSpec, Silent};
    let options = RunOptions {
        spec: RunSpec {
            seq_len: 16,
            num_seqs: 2,
            variant,
            ..RunSpec::default()
        },
        ..RunOptions::default()
    };
    let run = Run {
        models: vec![ModelSource::at("m", path)],
        options,
        cancel: Default::default(),
    };
    let err = run.execute(&mut Silent).err().expect("refused");
    err.problem()
        .cloned()
        .unwrap_or_else(|| panic!("not a typed problem: {err}"))
}

pub fn open_error(path: &Path) -> String {
    use candle_core::{DType, Device};
    asa_models::Checkpoint::open(path, &Device::Cpu, DType::F32)
        .err()
        .unwrap_or_else(|| panic!("{} opened", path.display()))
        .to_string()
}

/// The config cases of `tests/fixtures/configs` (`tools/make_config_fixtures.py`) and their
/// reference tensors (`input_ids` and one logits tensor per case).
pub fn config_cases() -> (
    Vec<serde_json::Value>,
    std::collections::HashMap<String, candle_core::Tensor>,
) {
    let dir = fixtures().join("configs");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let refs =
        candle_core::safetensors::load(dir.join("logits.safetensors"), &candle_core::Device::Cpu)
            .expect("config fixture logits load");
    (cases["cases"].as_array().unwrap().clone(), refs)
}

/// Writes a config case's checkpoint (its base fixture, config.json edited) into `dir`.
pub fn write_config_case(case: &serde_json::Value, dir: &Path) {
    copy_fixture(case["base"].as_str().unwrap(), dir);
    edit_config(dir, |cfg| {
        let obj = cfg.as_object_mut().unwrap();
        for (key, value) in case["edits"].as_object().unwrap() {
            match value.as_str() {
                Some("<delete>") => {
                    obj.remove(key);
                }
                _ => {
                    obj.insert(key.clone(), value.clone());
                }
            }
        }
    });
}
