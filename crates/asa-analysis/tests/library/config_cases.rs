//! Issue 40, item 6: configs read as transformers reads them. Each case of
//! `tests/fixtures/configs/cases.json` (written by `tools/make_config_fixtures.py`) is a family
//! fixture's weights under a config.json with non-default values of the fields the family
//! reads (windows, soft-caps, the query scale, RoPE scaling and its parameters, experts); its
//! reference is transformers' own forward pass in float64. asa-analyze's f32 logits must match
//! it (SPEC: logits atol 1e-4), and a config transformers refuses is refused. What `inspect` says of
//! some cases is tested in tests/it/config_fixtures.rs.

use std::path::Path;

use asa_hooks::{CaptureProbe, Hook};
use asa_models::Checkpoint;
use candle_core::{DType, Device, Tensor};

use crate::common::{config_cases, max_abs_diff, write_config_case};

/// SPEC section 4: logits against float64 references.
const ATOL: f64 = 1e-4;

/// The logits of the checkpoint in `dir` for `ids` in `dtype` (as f32), or the error that
/// refused it.
fn logits(dir: &Path, ids: &Tensor, dtype: DType) -> Result<Tensor, String> {
    let ckpt = Checkpoint::open(dir, &Device::Cpu, dtype)
        .and_then(|c| c.validate())
        .map_err(|e| e.to_string())?;
    let model = ckpt.load_model().map_err(|e| e.to_string())?;
    let mut probe = CaptureProbe::new(&[Hook::Logits]);
    model
        .forward(ids, 64, &mut probe)
        .map_err(|e| e.to_string())?;
    let layers = model.config().num_layers;
    let logits = probe.get(Hook::Logits, layers).unwrap().unwrap();
    Ok(logits.to_dtype(DType::F32).unwrap())
}

/// Runs case `name` (every case when `None`); returns the failures.
fn check(name: Option<&str>) -> Vec<String> {
    let (cases, refs) = config_cases();
    let ids = refs["input_ids"].to_dtype(DType::U32).unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in cases.iter().filter(|c| name.is_none_or(|n| c["name"] == n)) {
        ran += 1;
        let case_name = case["name"].as_str().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(case_name);
        write_config_case(case, &dir);
        let got = logits(&dir, &ids, DType::F32);
        match (case.get("transformers_error"), got) {
            (Some(_), Err(_)) => {}
            (Some(e), Ok(_)) => failures.push(format!(
                "{case_name}: transformers refuses it ({e}), asa-analyze ran it"
            )),
            (None, Err(e)) => failures.push(format!("{case_name}: refused: {e}")),
            (None, Ok(logits)) => {
                let d = max_abs_diff(&logits, &refs[case_name]);
                if d.is_nan() || d > ATOL {
                    failures.push(format!(
                        "{case_name}: logits differ from transformers' by {d:e} ({})",
                        case["transformers"]
                    ));
                }
            }
        }
    }
    assert!(ran > 0, "no config case named {name:?}");
    failures
}

#[test]
fn every_config_case_matches_transformers() {
    let failures = check(None);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// transformers refuses a Qwen2 config whose `layer_types` name sliding layers while
/// `use_sliding_window` is false (it has no window to give them): so does asa-analyze.
#[test]
fn qwen2_sliding_layer_types_without_a_window_are_refused() {
    let failures = check(Some("qwen2_layer_types_without_use_sliding_window"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// transformers refuses a Gemma 2, Gemma 3 or GPT-OSS config with `sliding_window: null` and
/// no `layer_types`: its config class derives sliding layers anyway and has no window for
/// their mask. So does asa-analyze (it ran them with full attention before).
#[test]
fn null_window_without_layer_types_is_refused_where_the_class_derives_sliding_layers() {
    for case in [
        "gemma2_null_window_without_layer_types",
        "gemma3_null_window_without_layer_types",
        "gpt_oss_null_window_without_layer_types",
    ] {
        let failures = check(Some(case));
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// Soft-caps past f16's range (65504) but inside f32's bend no logit in f16 either: the final
/// cap is applied in f32 (in f16 it was inf, and every logit NaN). The reference is
/// transformers' float64 forward without caps (the identity to (s / cap)^2 / 3 < 1e-12).
#[test]
fn softcaps_past_the_half_range_are_the_identity_in_f16() {
    let (cases, refs) = config_cases();
    let ids = refs["input_ids"].to_dtype(DType::U32).unwrap();
    let mut case = cases
        .iter()
        .find(|c| c["name"] == "gemma2_no_softcaps")
        .unwrap()
        .clone();
    case["edits"]["attn_logit_softcapping"] = serde_json::json!(1e6);
    case["edits"]["final_logit_softcapping"] = serde_json::json!(1e6);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    write_config_case(&case, &dir);
    let reference = &refs["gemma2_no_softcaps"];
    let f16 = logits(&dir, &ids, DType::F16).unwrap();
    let d = max_abs_diff(&f16, reference);
    // f16 keeps 11 significant bits: within 2^-10 of the largest logit per layer of rounding
    let scale = reference
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let bound = scale.to_scalar::<f64>().unwrap() * 2f64.powi(-10) * 8.0;
    assert!(
        d.is_finite() && d < bound,
        "f16 logits differ from float64 by {d:e} (bound {bound:e})"
    );
    let f32 = logits(&dir, &ids, DType::F32).unwrap();
    let d = max_abs_diff(&f32, reference);
    assert!(d < ATOL, "f32 logits differ from float64 by {d:e}");
}

/// A soft-cap of 1e308 (beyond f32) bends no logit: transformers' float64 logits with the cap
/// and without it are the same to rounding (the case itself is in
/// `every_config_case_matches_transformers`).
#[test]
fn a_huge_softcap_is_the_identity_in_the_reference() {
    let (_, refs) = config_cases();
    let d = max_abs_diff(
        &refs["gemma2_huge_softcap_is_identity"],
        &refs["gemma2_no_softcaps"],
    );
    assert!(d < 1e-12, "{d:e}");
}
