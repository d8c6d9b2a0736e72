//! The metrics' run beside a capture probe, against the fixtures' float64 references
//! (the forward pass itself is checked family by family in asa-models' tests/conformance.rs).

use crate::common;

use asa_hooks::{CaptureProbe, Hook};
use asa_models::Checkpoint;
use candle_core::{DType, Device};
use common::*;

/// Issue 2: logits and effective weights within 1e-5 absolute in f32.
const ATOL: f64 = 1e-5;

/// Issue 37: a capture probe attached beside the metrics (`analysis::Along::observers`)
/// never changes a layer's kernel nor a table, and it gets the tensors it asked for (the
/// float64 reference's weights) even from layers the flash tiles compute, where no block is
/// materialised for the metrics. Before, attaching it took every layer off the tiles.
#[test]
fn an_attached_capture_probe_keeps_the_kernel_plan_and_the_tables() {
    use asa_analysis::analysis::{accumulate_timed, finish, Along, CancelToken, RunPart, RunShape};
    use asa_hooks::{Kernel, Probe};
    use asa_metrics::entropy::EntropyOf;
    use asa_metrics::{attention_tables, Metric};

    let opts = fixture_options(Metric::defaults(), EntropyOf::Effective);
    let mut tiled = 0;
    for name in ["llama_gqa", "sink", "affine_scaled", "scale_invariant"] {
        let ckpt = Checkpoint::open(&model_dir(name), &Device::Cpu, DType::F32).unwrap();
        let model = ckpt.load_model().unwrap();
        let refs = reference(name);
        let ids = refs["input_ids"]
            .to_dtype(DType::U32)
            .unwrap()
            .to_vec2::<u32>()
            .unwrap();
        let all = 0..ids.len();
        // one forward pass of every sequence, as the reference's; blocks of 8 queries
        let shape = RunShape {
            batch_size: ids.len(),
            block: 8,
        };
        let run = |observers: &mut [&mut dyn Probe]| {
            let along = Along {
                cancel: &CancelToken::new(),
                progress: &mut |_| {},
                observers,
            };
            let part = RunPart {
                windows: &ids,
                range: all.clone(),
            };
            let (probe, _) = accumulate_timed(&ckpt, &model, part, &opts, shape, along).unwrap();
            finish(&ckpt, &probe).unwrap()
        };
        let alone = run(&mut []);
        let hooks = [
            Hook::Pattern,
            Hook::AttnScores,
            Hook::Qk,
            Hook::Logits,
            Hook::RotQ,
        ];
        let mut capture = CaptureProbe::new(&hooks);
        let observed = run(&mut [&mut capture]);
        assert_eq!(alone.kernels, observed.kernels, "{name}: kernels");
        tiled += alone
            .kernels
            .values()
            .filter(|k| **k == Kernel::FlashTiles)
            .count();
        let tables = |m| format!("{:?}", attention_tables(&[(name.to_string(), m)]));
        assert_eq!(tables(alone), tables(observed), "{name}: tables");
        let layers = reference_layers(&refs);
        for l in 0..layers {
            let pattern = capture.get(Hook::Pattern, l).unwrap().unwrap();
            let d = max_abs_diff(&pattern, &refs[&format!("layers.{l}.pattern")]);
            assert!(
                d < ATOL,
                "{name} layer {l}: observed pattern differs by {d:e}"
            );
            for hook in [Hook::AttnScores, Hook::Qk, Hook::RotQ] {
                assert!(capture.get(hook, l).unwrap().is_some(), "{name} {hook:?}");
            }
        }
        let logits = capture.get(Hook::Logits, layers).unwrap().unwrap();
        assert!(
            max_abs_diff(&logits, &refs["logits"]) < ATOL,
            "{name}: logits"
        );
    }
    // the tiles ran where the metrics allow them (the heatmap layer is materialised)
    assert!(tiled > 0);
}
