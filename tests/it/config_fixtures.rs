//! `inspect` of config cases (issue 40, item 6; `tests/fixtures/configs/cases.json`, written by
//! `tools/make_config_fixtures.py`): what it says of a window on every layer and of a soft-cap
//! beyond f32. Each case's logits against transformers' float64 forward pass are checked
//! beside the library (crates/asa-analysis/tests/library/config_cases.rs).

use serde_json::Value;

use crate::common::{config_cases, expect_success, run_cli, write_config_case};

/// `inspect` of config case `name`.
fn inspect_case(name: &str) -> String {
    let (cases, _) = config_cases();
    let case: &Value = cases.iter().find(|c| c["name"] == name).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    write_config_case(case, &tmp.path().join("m"));
    expect_success(&run_cli(tmp.path(), &["inspect", "m"]))
}

/// Qwen3MoeConfig has no `max_window_layers` (nor `layer_types`): with `use_sliding_window`
/// transformers windows every layer, and `inspect` says so.
#[test]
fn qwen3_moe_use_sliding_window_windows_every_layer() {
    let inspect = inspect_case("qwen3_moe_use_sliding_window_windows_every_layer");
    assert!(
        inspect.contains("sliding window of 5 keys on layers 1-2"),
        "{inspect}"
    );
}

/// A soft-cap of 1e308 (beyond f32) bends no logit, and `inspect` says why.
#[test]
fn gemma2_huge_softcap_is_identity() {
    let inspect = inspect_case("gemma2_huge_softcap_is_identity");
    assert!(inspect.contains("beyond f32"), "{inspect}");
}
