//! `--weight-map` (SPEC section 3): the command line takes a weight map for a checkpoint
//! whose tensors carry other names, and bad maps are one-line errors. The mapped checkpoint's
//! metrics against the references are tested beside the library
//! (crates/asa-analysis/tests/library/weight_map.rs).

use crate::common;

use common::weight_map_fixture::{renamed_sink_fixture, MAP};
use common::*;

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
