//! RMSNorm of bf16 CPU rows in one pass: each row's mean square summed in f32 lanes, the row
//! times `1 / sqrt(ms + eps)` times the f32 scale, rounded once to bf16. The candle route of
//! the same arithmetic (widen the block to f32, candle's f32 norm, round back) reads and
//! writes the block three times.

use candle_core::{DType, Device, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

use super::bf16_panels::round_row;
use super::host::lane_sum;
use asa_core::error::Result;

/// Rows per task.
const ROWS: usize = 16;

/// `xs [..., dim] * rsqrt(mean(xs^2) + eps) * scale` for a contiguous bf16 CPU tensor and
/// an f32 `scale` of `dim` values, rounded once to bf16; `None` for any other tensor (those
/// take candle's ops).
pub fn rms_norm(xs: &Tensor, scale: &[f32], eps: f32) -> Result<Option<Tensor>> {
    let dim = scale.len();
    let fits = xs.dtype() == DType::BF16
        && matches!(xs.device(), Device::Cpu)
        && xs.dims().last() == Some(&dim)
        && dim > 0;
    if !fits {
        return Ok(None);
    }
    let (storage, layout) = xs.storage_and_layout();
    let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) else {
        return Ok(None);
    };
    let x = &cpu.as_slice::<bf16>()?[start..end];
    let mut out = vec![bf16::ZERO; x.len()];
    out.par_chunks_mut(ROWS * dim)
        .zip(x.par_chunks(ROWS * dim))
        .for_each(|(dst, src)| {
            let mut row = vec![0f32; dim];
            for (dst, src) in dst.chunks_exact_mut(dim).zip(src.chunks_exact(dim)) {
                for (w, &v) in row.iter_mut().zip(src) {
                    *w = v.to_f32();
                }
                let ms = lane_sum(&row, |v| v * v) as f32 / dim as f32;
                let r = 1.0 / (ms + eps).sqrt();
                for (w, &s) in row.iter_mut().zip(scale) {
                    *w = *w * r * s;
                }
                // SAFETY: bf16 is a transparent u16
                let bits =
                    unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u16, dim) };
                round_row(&row, bits);
            }
        });
    Ok(Some(Tensor::from_vec(out, xs.dims(), &Device::Cpu)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rows_are_the_float64_norm_rounded_once() {
        let (rows, dim, eps) = (37, 96, 1e-6f32);
        let x: Vec<bf16> = (0..rows * dim)
            .map(|i| bf16::from_f32(((i as f32) * 0.377).sin() * 4.0 + (i % 7) as f32 * 0.1))
            .collect();
        let scale: Vec<f32> = (0..dim).map(|i| 1.0 + (i as f32 * 0.9).cos()).collect();
        let xs = Tensor::from_vec(x.clone(), (rows, dim), &Device::Cpu).unwrap();
        let got = rms_norm(&xs, &scale, eps).unwrap().unwrap();
        let got = got.flatten_all().unwrap().to_vec1::<bf16>().unwrap();
        for (r, (row, out)) in x.chunks(dim).zip(got.chunks(dim)).enumerate() {
            let ms = row.iter().map(|v| v.to_f64().powi(2)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for ((v, s), y) in row.iter().zip(&scale).zip(out) {
                let want = v.to_f64() * inv * *s as f64;
                // one bf16 rounding (2^-8 relative at most) of an f32 value
                let err = (y.to_f64() - want).abs();
                assert!(
                    err <= want.abs() * 2f64.powi(-8) * (1.0 + 1e-3) + 1e-30,
                    "row {r}: {y} vs {want}"
                );
            }
        }
        // other dtypes and widths are candle's
        let f = xs.to_dtype(DType::F32).unwrap();
        assert!(rms_norm(&f, &scale, eps).unwrap().is_none());
        assert!(rms_norm(&xs, &scale[1..], eps).unwrap().is_none());
    }
}
