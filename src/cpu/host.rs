//! Host views of CPU tensors and lane-parallel sums.

use candle_core::{DType, Device, Storage, Tensor};

/// Lanes of the partial sums: independent f32 accumulators the compiler keeps in vector
/// registers; they are combined in f64.
const LANES: usize = 16;

/// Runs `f` on the elements of a contiguous f32 CPU tensor without copying; `None` for
/// other devices, dtypes or layouts (those use candle ops).
pub fn with_cpu_f32<R>(xs: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Option<R> {
    if !matches!(xs.device(), Device::Cpu) || xs.dtype() != DType::F32 {
        return None;
    }
    let (storage, layout) = xs.storage_and_layout();
    let (start, end) = layout.contiguous_offsets()?;
    match &*storage {
        Storage::Cpu(cpu) => cpu.as_slice::<f32>().ok().map(|all| f(&all[start..end])),
        _ => None,
    }
}

/// Sum of `map(x)` over a slice, in `LANES` f32 partial sums combined in f64.
#[inline(always)]
pub fn lane_sum(xs: &[f32], map: impl Fn(f32) -> f32) -> f64 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += map(x);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&x| map(x) as f64).sum();
    acc.iter().map(|&a| a as f64).sum::<f64>() + tail
}

/// Maximum of `map(x)` over a slice (`-inf` for an empty one).
#[inline(always)]
pub fn lane_max(xs: &[f32], map: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            let v = map(x);
            *a = if v > *a { v } else { *a };
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(map(x)));
    acc.iter().fold(tail, |m, &a| m.max(a))
}

/// [`lane_sum`] of the values and [`lane_max`] of them in one pass (the same sum, bit for
/// bit).
#[inline(always)]
pub fn lane_sum_max(xs: &[f32]) -> (f64, f32) {
    let mut acc = [0f32; LANES];
    let mut top = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for ((a, t), &x) in acc.iter_mut().zip(top.iter_mut()).zip(chunk) {
            *a += x;
            *t = if x > *t { x } else { *t };
        }
    }
    let rest = chunks.remainder();
    let tail: f64 = rest.iter().map(|&x| x as f64).sum();
    let tail_max = rest.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let sum = acc.iter().map(|&a| a as f64).sum::<f64>() + tail;
    (sum, top.iter().fold(tail_max, |m, &t| m.max(t)))
}

/// Runs a row kernel compiled for AVX-512 where the CPU has it, else for AVX2 + FMA where
/// it has those, else for the baseline; `$kernel` must be `#[inline(always)]` so each copy
/// gets its own code. Every copy computes the same bits (no operation is contracted or
/// reordered by the target features; only the vector width and registers differ).
#[macro_export]
macro_rules! simd_dispatch {
    ($kernel:ident ( $($arg:expr),* $(,)? )) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            fn __simd_512<F: FnOnce() -> R, R>(f: F) -> R {
                f()
            }
            #[target_feature(enable = "avx2,fma")]
            fn __simd_wide<F: FnOnce() -> R, R>(f: F) -> R {
                f()
            }
            /// Runs `f` as AVX-512 code; `f` must be `#[inline(always)]` so that it is
            /// compiled into `__simd_512` rather than called from it.
            #[inline(always)]
            fn __simd_run_512<F: FnOnce() -> R, R>(f: F) -> R {
                // SAFETY: only called after the CPU was checked for AVX-512 F/VL, AVX2, FMA
                unsafe { __simd_512(f) }
            }
            /// Runs `f` as AVX2 code, like `__simd_run_512`.
            #[inline(always)]
            fn __simd_run_wide<F: FnOnce() -> R, R>(f: F) -> R {
                // SAFETY: only called after the CPU was checked for AVX2 and FMA
                unsafe { __simd_wide(f) }
            }
            let wide = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            if wide
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                // the closure is built outside `unsafe`: the arguments get no unsafe context
                __simd_run_512(#[inline(always)] || $kernel($($arg),*))
            } else if wide {
                __simd_run_wide(#[inline(always)] || $kernel($($arg),*))
            } else {
                $kernel($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $kernel($($arg),*)
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_reductions_cover_chunks_and_tail() {
        let xs: Vec<f32> = (0..37).map(|i| i as f32 - 20.0).collect();
        assert_eq!(
            lane_sum(&xs, |x| x),
            (0..37).map(|i| i as f64 - 20.0).sum::<f64>()
        );
        assert_eq!(lane_max(&xs, |x| -x), 20.0);
        assert_eq!(lane_max(&[], |x| x), f32::NEG_INFINITY);
        // -20 + ... + 16 = -74; the largest 16 (in the tail), then 3 (in the lanes)
        assert_eq!(lane_sum_max(&xs), (-74.0, 16.0));
        assert_eq!(lane_sum_max(&xs[..24]), (-204.0, 3.0));
        assert_eq!(lane_sum_max(&[]), (0.0, f32::NEG_INFINITY));
        let view = with_cpu_f32(
            &Tensor::new(&[1f32, 2., 3.], &Device::Cpu)
                .unwrap()
                .narrow(0, 1, 2)
                .unwrap(),
            |s| s.to_vec(),
        );
        assert_eq!(view, Some(vec![2., 3.]));
    }
}
