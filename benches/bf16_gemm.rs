//! The bf16 GEMM (crates/asa-kernels/src/cpu/bf16_gemm.rs) against this CPU's limit (issue 41).
//!
//! 1. Peak throughput of `vdpbf16ps` and of the f32 FMA (`vfmadd231ps`, zmm): 24 independent
//!    accumulators in registers, one thread and every thread, as FLOP/s (2 per multiply-add).
//!    Their ratio does not depend on the clock.
//! 2. `x [m, k] w^T` at the shapes of an 8B model's projections (m = 1024 tokens): the bf16
//!    GEMM (activations rounded to bf16 inside the timing, the weight packed once outside it,
//!    as a layer's weights are), and the f32 `gemm` crate candle's CPU matmul uses, each the
//!    best of 5.
//!
//! Prints one JSON object (benches/bf16_gemm.sh runs it beside torch's bf16 matmul).
//! Run: `cargo bench --bench bf16_gemm`.
use std::time::Instant;

use asa_kernels::cpu::bf16_gemm;
use asa_kernels::cpu::bf16_panels::PackedWeight;
use asa_kernels::cpu::bf16_row_tiles::RowTiles;
use half::bf16;

const PEAK_ITERS: usize = 20_000_000;
const SHAPES: [(usize, usize, usize); 3] =
    [(1024, 4096, 4096), (1024, 4096, 14336), (1024, 14336, 4096)];

fn main() {
    if !bf16_gemm::available() {
        println!("{{\"error\": \"this CPU has no AVX-512 BF16\"}}");
        return;
    }
    let threads = rayon::current_num_threads();
    let bf16_one = peak(threads_of(1, peak_bf16));
    let fma_one = peak(threads_of(1, peak_fma));
    let bf16_all = peak(threads_of(threads, peak_bf16));
    let fma_all = peak(threads_of(threads, peak_fma));
    let mut rows = Vec::new();
    for (m, k, n) in SHAPES {
        let x = values(1, m * k);
        let w = values(2, n * k);
        let w16: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let packed = PackedWeight::pack(&w16, n, k);
        let ours = best_of(5, || {
            let rows = RowTiles::from_f32(&x, m, k);
            std::hint::black_box(bf16_gemm::matmul(&rows, &packed));
        });
        let f32_gemm = best_of(5, || {
            std::hint::black_box(f32_product(&x, &w, (m, k, n)));
        });
        let flops = 2.0 * (m * k * n) as f64;
        rows.push(format!(
            "{{\"m\": {m}, \"k\": {k}, \"n\": {n}, \"bf16_s\": {ours:.5}, \"bf16_gflops\": {:.1}, \
             \"bf16_of_peak\": {:.3}, \"f32_gemm_s\": {f32_gemm:.5}, \"f32_gemm_gflops\": {:.1}}}",
            flops / ours / 1e9,
            flops / ours / bf16_all,
            flops / f32_gemm / 1e9,
        ));
    }
    println!(
        "{{\"threads\": {threads}, \"peak_gflops\": {{\"bf16_one_thread\": {:.1}, \"f32_fma_one_thread\": {:.1}, \
         \"bf16_all_threads\": {:.1}, \"f32_fma_all_threads\": {:.1}, \"ratio\": {:.2}}},\n \"gemm\": [{}]}}",
        bf16_one / 1e9,
        fma_one / 1e9,
        bf16_all / 1e9,
        fma_all / 1e9,
        bf16_all / fma_all,
        rows.join(",\n  ")
    );
}

/// `kernel` run on `threads` OS threads at once (one each, not a work-stealing pool, which
/// may run two on one thread): (seconds, FLOPs of all).
fn threads_of(threads: usize, kernel: fn() -> f64) -> (f64, f64) {
    let start = Instant::now();
    let flops: f64 = std::thread::scope(|s| {
        let each: Vec<_> = (0..threads).map(|_| s.spawn(kernel)).collect();
        each.into_iter().map(|h| h.join().unwrap()).sum()
    });
    (start.elapsed().as_secs_f64(), flops)
}

fn peak((seconds, flops): (f64, f64)) -> f64 {
    flops / seconds
}

/// FLOPs of `PEAK_ITERS` x 24 `vdpbf16ps` (32 multiply-adds each).
fn peak_bf16() -> f64 {
    // SAFETY: the CPU has AVX-512 BF16 (checked in main)
    unsafe { dpbf16_chain(PEAK_ITERS) };
    (PEAK_ITERS * 24 * 32 * 2) as f64
}

/// FLOPs of `PEAK_ITERS` x 24 zmm FMAs (16 multiply-adds each).
fn peak_fma() -> f64 {
    // SAFETY: the CPU has AVX-512 F (checked in main)
    unsafe { fma_chain(PEAK_ITERS) };
    (PEAK_ITERS * 24 * 16 * 2) as f64
}

/// `iters` x 24 of the instruction `op` (`vdpbf16ps`, `vfmadd231ps`) into 24 zmm
/// accumulators, operands 1.0 in f32 bits (bf16 pairs 0 and 1), in assembly: written with
/// intrinsics, the compiler kept 15 of the accumulators in registers and moved the rest
/// through the stack, which measured 20 % under the GEMM itself.
macro_rules! chain {
    ($op:literal, $iters:expr) => {
        std::arch::asm!(
            "vpxord zmm0, zmm0, zmm0",
            "vpxord zmm1, zmm1, zmm1",
            "vpxord zmm2, zmm2, zmm2",
            "vpxord zmm3, zmm3, zmm3",
            "vpxord zmm4, zmm4, zmm4",
            "vpxord zmm5, zmm5, zmm5",
            "vpxord zmm6, zmm6, zmm6",
            "vpxord zmm7, zmm7, zmm7",
            "vpxord zmm8, zmm8, zmm8",
            "vpxord zmm9, zmm9, zmm9",
            "vpxord zmm10, zmm10, zmm10",
            "vpxord zmm11, zmm11, zmm11",
            "vpxord zmm12, zmm12, zmm12",
            "vpxord zmm13, zmm13, zmm13",
            "vpxord zmm14, zmm14, zmm14",
            "vpxord zmm15, zmm15, zmm15",
            "vpxord zmm16, zmm16, zmm16",
            "vpxord zmm17, zmm17, zmm17",
            "vpxord zmm18, zmm18, zmm18",
            "vpxord zmm19, zmm19, zmm19",
            "vpxord zmm20, zmm20, zmm20",
            "vpxord zmm21, zmm21, zmm21",
            "vpxord zmm22, zmm22, zmm22",
            "vpxord zmm23, zmm23, zmm23",
            "vpternlogd zmm24, zmm24, zmm24, 0xff",
            "vpsrld zmm24, zmm24, 25",
            "vpslld zmm24, zmm24, 23",
            "vmovaps zmm25, zmm24",
            "2:",
            concat!($op, " zmm0, zmm24, zmm25"),
            concat!($op, " zmm1, zmm24, zmm25"),
            concat!($op, " zmm2, zmm24, zmm25"),
            concat!($op, " zmm3, zmm24, zmm25"),
            concat!($op, " zmm4, zmm24, zmm25"),
            concat!($op, " zmm5, zmm24, zmm25"),
            concat!($op, " zmm6, zmm24, zmm25"),
            concat!($op, " zmm7, zmm24, zmm25"),
            concat!($op, " zmm8, zmm24, zmm25"),
            concat!($op, " zmm9, zmm24, zmm25"),
            concat!($op, " zmm10, zmm24, zmm25"),
            concat!($op, " zmm11, zmm24, zmm25"),
            concat!($op, " zmm12, zmm24, zmm25"),
            concat!($op, " zmm13, zmm24, zmm25"),
            concat!($op, " zmm14, zmm24, zmm25"),
            concat!($op, " zmm15, zmm24, zmm25"),
            concat!($op, " zmm16, zmm24, zmm25"),
            concat!($op, " zmm17, zmm24, zmm25"),
            concat!($op, " zmm18, zmm24, zmm25"),
            concat!($op, " zmm19, zmm24, zmm25"),
            concat!($op, " zmm20, zmm24, zmm25"),
            concat!($op, " zmm21, zmm24, zmm25"),
            concat!($op, " zmm22, zmm24, zmm25"),
            concat!($op, " zmm23, zmm24, zmm25"),
            "dec {n}",
            "jnz 2b",
            n = inout(reg) $iters => _,
            out("zmm0") _,
            out("zmm1") _,
            out("zmm2") _,
            out("zmm3") _,
            out("zmm4") _,
            out("zmm5") _,
            out("zmm6") _,
            out("zmm7") _,
            out("zmm8") _,
            out("zmm9") _,
            out("zmm10") _,
            out("zmm11") _,
            out("zmm12") _,
            out("zmm13") _,
            out("zmm14") _,
            out("zmm15") _,
            out("zmm16") _,
            out("zmm17") _,
            out("zmm18") _,
            out("zmm19") _,
            out("zmm20") _,
            out("zmm21") _,
            out("zmm22") _,
            out("zmm23") _,
            out("zmm24") _,
            out("zmm25") _,
            options(nostack),
        )
    };
}

/// `iters` x 24 `vdpbf16ps` ([`chain`]).
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn dpbf16_chain(iters: usize) {
    chain!("vdpbf16ps", iters);
}

/// `iters` x 24 zmm FMAs ([`chain`]).
#[target_feature(enable = "avx512f")]
unsafe fn fma_chain(iters: usize) {
    chain!("vfmadd231ps", iters);
}

/// `x w^T` in f32 with the `gemm` crate on every thread, as candle's CPU matmul calls it.
fn f32_product(x: &[f32], w: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    // SAFETY: the strides describe x [m, k] row-major, w^T (w [n, k] row-major), out [m, n]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(rayon::current_num_threads()),
        );
    }
    out
}

fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// xorshift values in [-1, 1).
fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}
