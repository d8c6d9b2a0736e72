//! Issue 12: attention memory is O(heads x block x T). A counting global allocator in the
//! test binary measures the peak heap independently of the block planner. The one test binary
//! runs many tests at once, so the measurement runs in a child process of this binary that
//! runs only it (`MEASURE_ENV` set), where no other test allocates.

use crate::common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use asa_analysis::analysis::plan::block_size;
use asa_analysis::analysis::{analyze, RunShape};
use asa_metrics::distance::Bands;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::{Metric, MetricOptions};
use asa_models::Checkpoint;
use candle_core::{DType, Device};
use common::*;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: usize = 1 << 20;

/// Set in the child process that measures.
const MEASURE_ENV: &str = "ASA_TEST_MEASURE_HEAP";

#[test]
fn four_thousand_tokens_stay_under_a_cap_the_unblocked_path_exceeds() {
    if std::env::var_os(MEASURE_ENV).is_some() {
        return measure_four_thousand_tokens();
    }
    let name = "long_sequences::four_thousand_tokens_stay_under_a_cap_the_unblocked_path_exceeds";
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(MEASURE_ENV, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    // the child ran the measurement (a filter that matched nothing would pass too)
    assert!(text.contains("1 passed"), "{text}");
    assert!(text.contains("peak heap above baseline"), "{text}");
}

fn measure_four_thousand_tokens() {
    let t = 4096;
    let heads = 4;
    // one unblocked f32 map of one layer: 4 heads x 4096^2 x 4 B = 256 MiB; the cap is below it
    let unblocked_one_map = heads * t * t * 4;
    let cap = 160 * MIB;
    assert!(unblocked_one_map > cap);

    let ckpt = Checkpoint::open(&model_dir("affine_scaled"), &Device::Cpu, DType::F32).unwrap();
    let model = ckpt.load_model().unwrap();
    let ids: Vec<u32> = (0..t as u32).map(|i| (i * 7 + 3) % 64).collect();
    let windows = vec![ids];
    let opts = MetricOptions {
        heatmap_size: 30,
        map_size: 256,
        profile_query: t - 1,
        bands: Bands::decades(t),
        ..fixture_options(Metric::defaults(), EntropyOf::Effective)
    };
    let block = block_size(32 * MIB as u64, 1, heads, t);
    assert!(block < t);
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let metrics = analyze(
        &ckpt,
        &model,
        &windows,
        &opts,
        RunShape {
            batch_size: 1,
            block,
        },
        |_| {},
    )
    .unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    eprintln!(
        "block {block}: peak heap above baseline {} MiB (cap {} MiB)",
        peak / MIB,
        cap / MIB
    );
    assert!(
        peak < cap,
        "peak {} MiB exceeds the cap {} MiB",
        peak / MIB,
        cap / MIB
    );
    // and the numbers are real: every query's bands sum to its weight sum
    let d = metrics
        .get::<asa_metrics::distance::DistanceResult>(asa_metrics::Metric::DISTANCE_PROFILE)
        .unwrap();
    let ws = metrics
        .get::<asa_metrics::weight_sum::WeightSumResult>(asa_metrics::Metric::WEIGHT_SUM)
        .unwrap();
    for (l, bands) in d.per_layer.iter().enumerate() {
        assert_close(
            bands.iter().sum(),
            ws.per_layer[l].mean,
            1e-5,
            0.0,
            "bands sum",
        );
    }
    assert!(
        metrics
            .get::<asa_metrics::nll::NllResult>(asa_metrics::Metric::NLL)
            .unwrap()
            .per_position
            .len()
            == t - 1
    );
}
