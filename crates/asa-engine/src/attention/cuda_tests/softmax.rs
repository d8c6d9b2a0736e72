//! The fused softmax against the candle path (scale, mask, softmax or softmax with
//! sink) and the CPU row pass of its weights. Needs a GPU: `cargo test --release
//! --features cuda cuda_`.
use super::host;
use crate::attention::softmax_with_sink;
use asa_hooks::blocks::{mask_invisible, visibility};
use asa_hooks::row_pass::{qk_sums, weight_rows};
use asa_kernels::cuda::softmax::*;
use asa_kernels::row_table::split_table;
use asa_kernels::row_table::RowWants;
use candle_core::{DType, Tensor};
use candle_core::{Device, D};

fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (x, y)) in got.iter().zip(want).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{k}]: {x} vs {y}"
        );
    }
}

#[test]
fn cuda_fused_softmax_equals_the_candle_path() {
    let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
    // rows of 301-305 keys (a warp per row: more keys than threads, and a tail) and of
    // 5,001-5,003 keys (a block per row)
    for (b, h, q_start, n) in [(2, 3, 300, 5), (1, 3, 5000, 3)] {
        fused_softmax_case(&gpu, b, h, q_start, n);
    }
}

fn fused_softmax_case(gpu: &Device, b: usize, h: usize, q_start: usize, n: usize) {
    let cpu = Device::Cpu;
    let keys = q_start + n;
    let data: Vec<f32> = (0..b * h * n * keys)
        .map(|k| ((k * 7919) % 1000) as f32 / 62.5 - 8.0)
        .collect();
    let scale = 0.37f32;
    let wants = RowWants {
        first: true,
        sum: true,
        entropy: true,
        bands: vec![(0, 1), (1, 10), (10, 100), (100, usize::MAX)],
        max_logit: false,
        key_blocks: None,
        key_sums_from: None,
    };
    let sink_logits = Tensor::new(&[0.5f32, -1.0, 9.0], &cpu)
        .unwrap()
        .reshape((1, h, 1, 1))
        .unwrap();
    for dtype in [DType::F32, DType::BF16] {
        for sink in [None, Some(&sink_logits)] {
            // the reference sees the raw values the kernel sees (rounded to `dtype`)
            let raw = Tensor::from_vec(data.clone(), (b, h, n, keys), &cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let raw32 = raw.to_dtype(DType::F32).unwrap();
            let visible = visibility(q_start, n, asa_hooks::KeyWindow::CAUSAL, &cpu).unwrap();
            let scores = mask_invisible(&(&raw32 * scale as f64).unwrap(), &visible).unwrap();
            let (want_w, want_mass) = match sink {
                Some(s) => {
                    let (w, m) = softmax_with_sink(&scores, s).unwrap();
                    (w, Some(m))
                }
                None => (candle_nn::ops::softmax(&scores, D::Minus1).unwrap(), None),
            };
            let causal = asa_hooks::KeyWindow::CAUSAL;
            let want_table = weight_rows(&want_w, q_start, causal, &wants)
                .unwrap()
                .unwrap();
            let want_rows = split_table(&want_table, &wants);
            let (qk, qk_abs) = qk_sums(&raw32, q_start, asa_hooks::KeyWindow::CAUSAL)
                .unwrap()
                .unwrap();

            let gpu_sink = sink.map(|s| s.to_device(gpu).unwrap());
            let (w, table) = causal_softmax_rows(
                &raw.to_device(gpu).unwrap(),
                scale,
                q_start,
                gpu_sink.as_ref(),
                &wants,
            )
            .unwrap()
            .expect("the kernel applies to a contiguous block on the GPU");
            let what = format!("{dtype:?}, sink {}, {keys} keys", sink.is_some());
            assert_eq!(w.dtype(), dtype);
            // bf16 weights are the f32 weights rounded (8 bits of mantissa)
            let w_tol = if dtype == DType::F32 { 1e-6 } else { 4e-3 };
            close(
                &host(&w),
                &host(&want_w),
                w_tol,
                &format!("weights, {what}"),
            );
            let table = host(&table);
            let rows = split_table(&table, &wants);
            close(
                &rows.first.to_vec(),
                &want_rows.first.to_vec(),
                1e-5,
                &format!("first, {what}"),
            );
            close(
                &rows.sum.to_vec(),
                &want_rows.sum.to_vec(),
                1e-5,
                &format!("sum, {what}"),
            );
            close(
                &rows.entropy.to_vec(),
                &want_rows.entropy.to_vec(),
                1e-5,
                &format!("entropy, {what}"),
            );
            for (k, (g, c)) in rows.bands.iter().zip(&want_rows.bands).enumerate() {
                close(&g.to_vec(), &c.to_vec(), 1e-5, &format!("band {k}, {what}"));
            }
            match &want_mass {
                Some(m) => close(
                    &rows.sink_mass.to_vec(),
                    &host(m),
                    1e-5,
                    &format!("sink, {what}"),
                ),
                None => assert!(rows.sink_mass.iter().all(|v| v == 0.0)),
            }
            let sum: f64 = rows.qk_sum.iter().map(f64::from).sum();
            let abs: f64 = rows.qk_abs_sum.iter().map(f64::from).sum();
            assert!(
                (sum - qk).abs() <= 1e-5 * qk_abs,
                "{what}: qk {sum} vs {qk}"
            );
            assert!(
                (abs - qk_abs).abs() <= 1e-6 * qk_abs,
                "{what}: |qk| {abs} vs {qk_abs}"
            );
        }
    }
}
