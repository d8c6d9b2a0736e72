//! The GPU's tiles against the CPU's (`flash::causal_attention`, itself checked
//! against the float64 fixtures) on the same inputs: every logit rule, sinks,
//! Affine-Scaled weights (both betas), causal and sliding windows, grouped kv heads,
//! f32 and bf16 (the CPU given the bf16 values), head dimensions of each kernel. Needs a
//! GPU: `cargo test --release --features cuda cuda_`.
use super::host;
use crate::attention::flash::{self as cpu_flash, AffineTile, Logits, Qkv, TileLogits, Tiles};
use crate::attention::reversed_coefficients;
use asa_hooks::KeyWindow;
use asa_kernels::beta_length::BetaLength;
use asa_kernels::cuda::flash::*;
use asa_kernels::qkv::QueryBlock;
use asa_kernels::row_table::RowWants;
use candle_core::Device;
use candle_core::{DType, Tensor};

/// Deterministic values in [-2, 2).
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// Values equal within `tol` (relative above 1); NaN equals NaN.
fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (x, y)) in got.iter().zip(want).enumerate() {
        let same = (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(same, "{what}[{k}]: gpu {x} vs cpu {y}");
    }
}

/// Row tables equal within 2e-5 (relative above 1); the q.k sums, which cancel, within
/// 2e-5 of the row's absolute sum.
fn compare_tables(got: &[f32], want: &[f32], width: usize, what: &str) {
    use asa_kernels::row_table::{QK_ABS_SUM, QK_SUM};
    assert_eq!(got.len(), want.len(), "{what}");
    for (r, (g, w)) in got.chunks(width).zip(want.chunks(width)).enumerate() {
        for (c, (x, y)) in g.iter().zip(w).enumerate() {
            let scale = match width > QK_SUM && c == QK_SUM {
                true => w[QK_ABS_SUM].abs(),
                false => y.abs(),
            };
            let same = (x.is_nan() && y.is_nan()) || (x - y).abs() <= 2e-5 * (1.0 + scale);
            assert!(same, "table row {r} column {c}, {what}: gpu {x} vs cpu {y}");
        }
    }
}

/// One case's shape and settings.
#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    heads: usize,
    kv: usize,
    t: usize,
    d: usize,
    q_start: usize,
    n: usize,
    window: KeyWindow,
}

/// The rules of a case: (name, CPU rule, GPU rule).
fn rules(case: Case, gpu: &Device) -> Vec<(&'static str, TileLogits, DeviceLogits)> {
    let head_scale: Vec<f32> = (0..case.heads).map(|h| 0.2 + 0.15 * h as f32).collect();
    let (a, m) = reversed_coefficients(4.0, case.t);
    vec![
        ("plain", TileLogits::Plain, DeviceLogits::Plain),
        (
            "logn",
            TileLogits::Logn {
                head_scale: head_scale.clone(),
            },
            DeviceLogits::Logn {
                head_scale: Tensor::new(head_scale.as_slice(), gpu).unwrap(),
            },
        ),
        (
            "softcap",
            TileLogits::SoftCap { cap: 1.5 },
            DeviceLogits::SoftCap { cap: 1.5 },
        ),
        (
            "scale_invariant",
            TileLogits::Distance {
                a: a.clone(),
                m: m.clone(),
            },
            DeviceLogits::Distance {
                a: Tensor::new(a.as_slice(), gpu).unwrap(),
                m: Tensor::new(m.as_slice(), gpu).unwrap(),
            },
        ),
    ]
}

#[test]
fn cuda_flash_tiles_equal_the_cpu_tiles() {
    let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
    let base = Case {
        b: 2,
        heads: 4,
        kv: 2,
        t: 100,
        d: 64,
        q_start: 37,
        n: 50,
        window: KeyWindow::CAUSAL,
    };
    let mut cases = vec![
        base,
        Case {
            window: KeyWindow::sliding(7),
            ..base
        },
        // the whole sequence in one block, head dimensions of the other kernels (80:
        // not a multiple of a warp)
        Case {
            q_start: 0,
            n: 100,
            d: 80,
            ..base
        },
        Case {
            b: 1,
            heads: 2,
            kv: 1,
            t: 70,
            d: 256,
            q_start: 5,
            n: 60,
            window: KeyWindow::CAUSAL,
        },
    ];
    // a long row (many tiles, the maximum growing late)
    cases.push(Case {
        b: 1,
        heads: 2,
        kv: 2,
        t: 1500,
        d: 128,
        q_start: 1400,
        n: 100,
        window: KeyWindow::CAUSAL,
    });
    let mut checked = 0;
    // f32 on the CUDA cores; bf16 and f16 on the tensor cores where they apply (head
    // dimensions 64 and 128), bf16 on the CUDA cores too
    let runs = [
        (DType::F32, Engine::Fastest),
        (DType::BF16, Engine::Fastest),
        (DType::BF16, Engine::Cores),
        (DType::F16, Engine::Fastest),
    ];
    for case in cases {
        for (dtype, engine) in runs {
            checked += check_case(case, dtype, engine, &gpu);
        }
    }
    assert!(checked > 200, "{checked} comparisons");
}

/// Every rule x sinks x Affine-Scaled x row request of `case` in `dtype`; the number of
/// comparisons made.
fn check_case(case: Case, dtype: DType, engine: Engine, gpu: &Device) -> usize {
    let cpu = Device::Cpu;
    let Case {
        b, heads, kv, t, d, ..
    } = case;
    let make = |h: usize, seed: u64| {
        // rounded to `dtype`: both sides see the same values
        Tensor::from_vec(values(b * h * t * d, seed), (b, h, t, d), &cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let (q, k, v) = (make(heads, 1), make(kv, 2), make(kv, 3));
    let f32s = |x: &Tensor| x.to_dtype(DType::F32).unwrap();
    let (q32, k32, v32) = (f32s(&q), f32s(&k), f32s(&v));
    let on_gpu = |x: &Tensor| x.to_device(gpu).unwrap();
    let (qg, kg, vg) = (on_gpu(&q), on_gpu(&k), on_gpu(&v));
    let sinks: Vec<f32> = (0..heads).map(|h| h as f32 - 1.0).collect();
    let alpha: Vec<f32> = values(b * heads * t, 4)
        .iter()
        .map(|a| 0.6 + 0.2 * a)
        .collect();
    let alpha_ma: Vec<f32> = (0..heads).map(|h| 0.9 + 0.05 * h as f32).collect();
    let full = RowWants {
        first: true,
        sum: true,
        entropy: true,
        bands: vec![(0, 1), (1, 10), (10, 100), (100, usize::MAX)],
        max_logit: true,
        key_blocks: None,
        key_sums_from: None,
    };
    let block = QueryBlock {
        q_start: case.q_start,
        n: case.n,
        window: case.window,
    };
    let mut checked = 0;
    for (name, cpu_rule, gpu_rule) in rules(case, gpu) {
        for (sink, beta) in [
            (false, None),
            (true, None),
            (false, Some(BetaLength::Full)),
            (false, Some(BetaLength::Visible)),
        ] {
            let cpu_affine = beta.map(|beta_length| AffineTile {
                alpha: alpha.clone(),
                alpha_ma: alpha_ma.clone(),
                beta_length,
                seq_len: t,
            });
            let gpu_affine = beta.map(|beta_length| DeviceAffine {
                alpha: Tensor::from_vec(alpha.clone(), (b, heads, t), gpu).unwrap(),
                alpha_ma: Tensor::new(alpha_ma.as_slice(), gpu).unwrap(),
                beta_length,
                seq_len: t,
            });
            let gpu_sinks = Tensor::new(sinks.as_slice(), gpu).unwrap();
            for wants in [Some(&full), None] {
                let what = format!(
                    "{case:?} {dtype:?} {engine:?} {name} sink {sink} affine {beta:?} rows {}",
                    wants.is_some()
                );
                let cpu_flash::TileOutput {
                    out: want_out,
                    table: want_table,
                    ..
                } = cpu_flash::causal_attention(
                    Qkv {
                        q: &q32,
                        k: &k32,
                        v: &v32,
                    },
                    block,
                    Logits {
                        scale: 1.0 / (d as f32).sqrt(),
                        rule: &cpu_rule,
                        affine: cpu_affine.as_ref(),
                    },
                    sink.then_some(sinks.as_slice()),
                    wants,
                    Tiles::default(),
                    None,
                )
                .unwrap()
                .expect("the CPU tiles take the case");
                let (out, table) = causal_attention_on(
                    Qkv {
                        q: &qg,
                        k: &kg,
                        v: &vg,
                    },
                    block,
                    FlashLogits {
                        scale: 1.0 / (d as f32).sqrt(),
                        rule: &gpu_rule,
                        affine: gpu_affine.as_ref(),
                        sinks: sink.then_some(&gpu_sinks),
                    },
                    wants,
                    engine,
                )
                .unwrap()
                .expect("the GPU tiles take the case");
                assert_eq!(out.dtype(), dtype, "{what}");
                assert_eq!(out.dims4().unwrap(), (b, heads, case.n, d), "{what}");
                assert_eq!(table.dims(), want_table.dims(), "{what}");
                // 16-bit outputs are rounded (bf16: 8 bits of mantissa), and the tensor
                // cores take the weights rounded as well
                let out_tol = if dtype == DType::F32 { 2e-5 } else { 1e-2 };
                close(
                    &host(&out),
                    &host(&want_out),
                    out_tol,
                    &format!("output, {what}"),
                );
                let width = want_table.dim(1).unwrap();
                compare_tables(&host(&table), &host(&want_table), width, &what);
                checked += 1;
            }
        }
    }
    checked
}
