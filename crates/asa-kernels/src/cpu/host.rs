//! Host views of CPU tensors and lane-parallel sums.

use candle_core::{DType, Device, Storage, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;

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

/// The first NaN or infinity of a contiguous f32, bf16 or f16 CPU tensor (its flat index
/// and value), found on the stored values in parallel chunks without a cast; `None` for
/// other devices, dtypes or layouts.
pub fn first_nonfinite(xs: &Tensor) -> Option<Option<(usize, f32)>> {
    if !matches!(xs.device(), Device::Cpu) {
        return None;
    }
    let (storage, layout) = xs.storage_and_layout();
    let (start, end) = layout.contiguous_offsets()?;
    let Storage::Cpu(cpu) = &*storage else {
        return None;
    };
    Some(match xs.dtype() {
        DType::F32 => first_where(
            &cpu.as_slice::<f32>().ok()?[start..end],
            |v| v,
            f32::is_finite,
        ),
        DType::BF16 => first_where(
            &cpu.as_slice::<bf16>().ok()?[start..end],
            bf16::to_f32,
            |v| v.is_finite(),
        ),
        DType::F16 => first_where(&cpu.as_slice::<f16>().ok()?[start..end], f16::to_f32, |v| {
            v.is_finite()
        }),
        _ => return None,
    })
}

/// The first element of `xs` that is not `finite` (its index and value as f32): each chunk
/// is scanned whole (a branch-free pass the compiler vectorises) and searched only when it
/// holds one.
fn first_where<T: Copy + Sync>(
    xs: &[T],
    value: impl Fn(T) -> f32 + Sync,
    finite: impl Fn(T) -> bool + Sync,
) -> Option<(usize, f32)> {
    const CHUNK: usize = 1 << 16;
    xs.par_chunks(CHUNK)
        .enumerate()
        .find_map_first(|(c, chunk)| {
            if chunk.iter().fold(true, |all, &v| all & finite(v)) {
                return None;
            }
            let i = chunk.iter().position(|&v| !finite(v))?;
            Some((c * CHUNK + i, value(chunk[i])))
        })
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
/// it has those, else for the baseline (the tier capped by `ASA_SIMD`: `crate::cpu::simd`); `$kernel` must be `#[inline(always)]` so each copy
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
            // the CPU's tier, capped by ASA_SIMD (`crate::cpu::simd`)
            match $crate::cpu::simd::level() {
                // the closure is built outside `unsafe`: the arguments get no unsafe context
                $crate::cpu::simd::SimdLevel::Avx512 => {
                    __simd_run_512(#[inline(always)] || $kernel($($arg),*))
                }
                $crate::cpu::simd::SimdLevel::Avx2 => {
                    __simd_run_wide(#[inline(always)] || $kernel($($arg),*))
                }
                $crate::cpu::simd::SimdLevel::Portable => $kernel($($arg),*),
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

    #[test]
    fn the_first_nonfinite_value_is_found_in_every_half_and_f32() {
        // past the first 65,536-value chunk, with a later one that must not be reported
        let n = 200_000;
        let mut xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.01).sin() * 1e4).collect();
        let whole = Tensor::new(xs.as_slice(), &Device::Cpu).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let t = whole.to_dtype(dtype).unwrap();
            assert_eq!(first_nonfinite(&t), Some(None), "{dtype:?}");
        }
        xs[70_001] = f32::NEG_INFINITY;
        xs[150_000] = f32::NAN;
        let bad = Tensor::new(xs.as_slice(), &Device::Cpu).unwrap();
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            let t = bad.to_dtype(dtype).unwrap();
            assert_eq!(first_nonfinite(&t), Some(Some((70_001, f32::NEG_INFINITY))));
            // a view that starts past the infinity finds the NaN, at its own index
            let tail = t.narrow(0, 100_000, 100_000).unwrap();
            let (at, value) = first_nonfinite(&tail).unwrap().unwrap();
            assert!(at == 50_000 && value.is_nan(), "{dtype:?}: {at} {value}");
        }
        // other dtypes and devices are left to the caller
        assert_eq!(first_nonfinite(&bad.to_dtype(DType::F64).unwrap()), None);
    }
}
