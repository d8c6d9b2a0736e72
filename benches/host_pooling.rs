//! Cost of the metric pooling of one batch's row tables: the tables of a 10 x 1024 batch of
//! a Llama-3.2-1B-shaped model (16 layers, 32 heads, query blocks of 102) with the core
//! metric set (first_token, weight_sum, entropy, head_total), handed to `MetricProbe` as the
//! fused softmax hands them over. Two parts, timed apart: `on_row_table` (here, with CPU
//! tables, the host pooling of the CPU path; on a GPU, three f64 reductions per block
//! queued there) and `on_layer_end` (on a GPU: the sums copied to the host and added, the
//! host work the device waits for; nothing left to do for CPU tables).
//! Run: `cargo bench --bench host_pooling`.
use std::collections::BTreeSet;
use std::time::Instant;

use asa_hooks::{BlockCtx, KeyWindow, Probe};
use asa_metrics::distance::Bands;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::{Metric, MetricOptions, MetricProbe, ModelAttention};
use candle_core::{Device, Tensor};

const BATCH: usize = 10;
const HEADS: usize = 32;
const SEQ_LEN: usize = 1024;
const LAYERS: usize = 16;
const BLOCK: usize = 102;
const BATCHES: usize = 5;

fn main() {
    // the binary's allocator settings (src/main.rs): large buffers are reused, not mapped anew
    // SAFETY: mallopt only sets allocator tunables; no other thread exists yet
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
    let opts = MetricOptions {
        metrics: [
            Metric::FIRST_TOKEN,
            Metric::WEIGHT_SUM,
            Metric::ENTROPY,
            Metric::HEAD_TOTAL,
        ]
        .into_iter()
        .collect::<BTreeSet<_>>(),
        min_query: 1,
        heatmap_layer: 8,
        heatmap_size: 64,
        map_size: 256,
        profile_query: SEQ_LEN - 1,
        bins: 20,
        sink_eps: 0.3,
        bands: Bands::decades(SEQ_LEN),
        entropy_of: EntropyOf::Effective,
        induction_len: None,
        roles: Default::default(),
    };
    let windows = vec![vec![0u32; SEQ_LEN]; BATCH * BATCHES];
    let model = ModelAttention {
        key_windows: &[KeyWindow::CAUSAL; LAYERS],
        logit_softcap: None,
        heads: HEADS,
        layer_numbers: &[],
    };
    let mut probe = MetricProbe::new(opts, model, &windows);
    let wants = probe
        .row_request(0)
        .expect("the core metrics take row tables");
    let blocks: Vec<(usize, usize)> = (0..SEQ_LEN)
        .step_by(BLOCK)
        .map(|q| (q, BLOCK.min(SEQ_LEN - q)))
        .collect();
    let tables: Vec<Tensor> = blocks
        .iter()
        .map(|&(_, n)| {
            Tensor::rand(0f32, 1f32, (BATCH * HEADS * n, wants.width()), &Device::Cpu)
                .expect("random table")
        })
        .collect();
    let mut times = Vec::new();
    for batch in 0..BATCHES {
        probe.set_batch_offset(batch * BATCH);
        let (mut pooling, mut adding) = (0.0, 0.0);
        for layer in 0..LAYERS {
            let started = Instant::now();
            for (&(q_start, q_len), table) in blocks.iter().zip(&tables) {
                let ctx = BlockCtx {
                    layer,
                    q_start,
                    q_len,
                    seq_len: SEQ_LEN,
                    window: KeyWindow::CAUSAL,
                };
                probe.on_row_table(&ctx, table).expect("table");
            }
            pooling += started.elapsed().as_secs_f64();
            let started = Instant::now();
            probe.on_layer_end(layer).expect("pooling");
            adding += started.elapsed().as_secs_f64();
        }
        times.push((pooling * 1e3, adding * 1e3));
    }
    println!(
        "one {BATCH} x {SEQ_LEN} batch ({LAYERS} layers, {HEADS} heads, {} row-table columns)",
        wants.width()
    );
    let median = |part: fn(&(f64, f64)) -> f64| {
        let mut steady: Vec<f64> = times[1..].iter().map(part).collect();
        steady.sort_by(f64::total_cmp);
        steady[steady.len() / 2]
    };
    println!(
        "on_row_table (pooling): first batch {:.1} ms, median of the next {} {:.1} ms",
        times[0].0,
        times.len() - 1,
        median(|t| t.0)
    );
    println!(
        "on_layer_end: first batch {:.1} ms, median of the next {} {:.1} ms",
        times[0].1,
        times.len() - 1,
        median(|t| t.1)
    );
}
