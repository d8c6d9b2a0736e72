//! bf16 elementwise work on the CPU in vector registers: the rounding of f32 values to bf16
//! (round to nearest even, NaN kept quiet: `half::bf16::from_f32`'s bits, branch-free so
//! that it vectorises) and the residual stream's sum of two bf16 tensors. candle's bf16
//! ops convert one value at a time: on SmolLM2 at 4k tokens on a CPU without AVX-512 BF16
//! the residual sums and the MLP's conversions made a bf16 run 1.3x slower than f32
//! (issue 54).

use candle_core::{DType, Device, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

use crate::simd_dispatch;
use asa_core::error::Result;

/// Values per task.
const CHUNK: usize = 1 << 14;

/// The bf16 bits of `x`: `half::bf16::from_f32(x).to_bits()`, without a branch.
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let nan = (bits & 0x7FFF_FFFF) > 0x7F80_0000;
    // up when the dropped half is above a half ulp, or exactly half with an odd result
    let up = (bits & 0x8000 != 0) & (bits & 0x1_7FFF != 0);
    let rounded = ((bits >> 16) + up as u32) as u16;
    let quiet = ((bits >> 16) | 0x40) as u16;
    if nan {
        quiet
    } else {
        rounded
    }
}

/// `values` rounded to bf16 in place (each still an f32, exactly a bf16 value).
pub fn round_in_place(values: &mut [f32]) {
    values
        .par_chunks_mut(CHUNK)
        .for_each(|chunk| simd_dispatch!(round_in_place_row(chunk)));
}

#[inline(always)]
fn round_in_place_row(values: &mut [f32]) {
    for v in values.iter_mut() {
        *v = f32::from_bits((bf16_bits(*v) as u32) << 16);
    }
}

/// `values` rounded to a bf16 CPU tensor of shape `dims`.
pub fn to_bf16_tensor(values: &[f32], dims: &[usize]) -> Result<Tensor> {
    let mut out = vec![bf16::ZERO; values.len()];
    out.par_chunks_mut(CHUNK)
        .zip(values.par_chunks(CHUNK))
        .for_each(|(dst, src)| simd_dispatch!(round_row(src, dst)));
    Ok(Tensor::from_vec(out, dims, &Device::Cpu)?)
}

#[inline(always)]
fn round_row(src: &[f32], dst: &mut [bf16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16::from_bits(bf16_bits(s));
    }
}

/// `a + b` of two contiguous bf16 CPU tensors of one shape, each sum in f32 rounded once
/// (candle's bits); `None` for any other pair (those take candle's op).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    let usable = |x: &Tensor| {
        x.dtype() == DType::BF16 && matches!(x.device(), Device::Cpu) && x.is_contiguous()
    };
    if !usable(a) || !usable(b) || a.dims() != b.dims() {
        return Ok(None);
    }
    let (a_storage, a_layout) = a.storage_and_layout();
    let (b_storage, b_layout) = b.storage_and_layout();
    let (Storage::Cpu(x), Storage::Cpu(y)) = (&*a_storage, &*b_storage) else {
        return Ok(None);
    };
    let (Some((a0, a1)), Some((b0, b1))) =
        (a_layout.contiguous_offsets(), b_layout.contiguous_offsets())
    else {
        return Ok(None);
    };
    let (x, y) = (
        &x.as_slice::<bf16>()?[a0..a1],
        &y.as_slice::<bf16>()?[b0..b1],
    );
    let mut out = vec![bf16::ZERO; x.len()];
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
        .for_each(|(dst, (x, y))| simd_dispatch!(add_row(x, y, dst)));
    Ok(Some(Tensor::from_vec(out, a.dims(), &Device::Cpu)?))
}

#[inline(always)]
fn add_row(x: &[bf16], y: &[bf16], dst: &mut [bf16]) {
    for ((d, &x), &y) in dst.iter_mut().zip(x).zip(y) {
        let x = f32::from_bits((x.to_bits() as u32) << 16);
        let y = f32::from_bits((y.to_bits() as u32) << 16);
        *d = bf16::from_bits(bf16_bits(x + y));
    }
}

/// `xs` in f32: a bf16 CPU tensor widened in vector registers, in parallel (exact; a NaN
/// quieted as `half::bf16::to_f32` does: candle's cast's bits, which it makes one value at a
/// time on one thread); any other tensor through candle's cast.
pub fn to_f32(xs: &Tensor) -> Result<Tensor> {
    if xs.dtype() != DType::BF16 || !matches!(xs.device(), Device::Cpu) {
        return Ok(xs.to_dtype(DType::F32)?);
    }
    let xs = xs.contiguous()?;
    let (storage, layout) = xs.storage_and_layout();
    let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) else {
        return Ok(xs.to_dtype(DType::F32)?);
    };
    let src = &cpu.as_slice::<bf16>()?[start..end];
    let mut out = vec![0f32; src.len()];
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(dst, src)| simd_dispatch!(widen_row(src, dst)));
    Ok(Tensor::from_vec(out, xs.dims(), &Device::Cpu)?)
}

#[inline(always)]
fn widen_row(src: &[bf16], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        let bits = s.to_bits() as u32;
        let nan = (bits & 0x7FFF) > 0x7F80;
        *d = f32::from_bits((bits | (nan as u32 * 0x40)) << 16);
    }
}

/// `xs` in bf16: an f32 CPU tensor rounded in vector registers, in parallel (candle's cast's
/// bits); any other tensor through candle's cast.
pub fn to_bf16(xs: &Tensor) -> Result<Tensor> {
    let xs = match xs.dtype() == DType::F32 && xs.device().is_cpu() {
        true => xs.contiguous()?,
        false => return Ok(xs.to_dtype(DType::BF16)?),
    };
    super::host::with_cpu_f32(&xs, |values| to_bf16_tensor(values, xs.dims()))
        .unwrap_or_else(|| Ok(xs.to_dtype(DType::BF16)?))
}

/// An f32 CPU tensor with each value rounded to bf16 (still f32: `to_f32(to_bf16(xs))`'s
/// values, NaN aside), read and written in one parallel pass; any other tensor through
/// candle's casts.
pub fn rounded_f32(xs: &Tensor) -> Result<Tensor> {
    let xs = match xs.dtype() == DType::F32 && xs.device().is_cpu() {
        true => xs.contiguous()?,
        false => return Ok(xs.to_dtype(DType::BF16)?.to_dtype(DType::F32)?),
    };
    super::host::with_cpu_f32(&xs, |values| {
        let mut out = vec![0f32; values.len()];
        out.par_chunks_mut(CHUNK)
            .zip(values.par_chunks(CHUNK))
            .for_each(|(dst, src)| simd_dispatch!(round_copy_row(src, dst)));
        Ok(Tensor::from_vec(out, xs.dims(), &Device::Cpu)?)
    })
    .unwrap_or_else(|| Ok(xs.to_dtype(DType::BF16)?.to_dtype(DType::F32)?))
}

#[inline(always)]
fn round_copy_row(src: &[f32], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits((bf16_bits(s) as u32) << 16);
    }
}

/// Rounds the values of a contiguous f32 CPU tensor to bf16 in place (still f32), for a
/// tensor nothing else holds yet (a product just made: its storage is shared by every
/// clone); `false` for any other tensor, left as it is.
pub fn round_fresh_in_place(xs: &Tensor) -> Result<bool> {
    if xs.dtype() != DType::F32 || !xs.device().is_cpu() || !xs.is_contiguous() {
        return Ok(false);
    }
    xs.inplace_op1(&RoundInPlace)?;
    Ok(true)
}

struct RoundInPlace;

impl candle_core::InplaceOp1 for RoundInPlace {
    fn name(&self) -> &'static str {
        "round-to-bf16-in-place"
    }

    fn cpu_fwd(
        &self,
        storage: &mut candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        let (candle_core::CpuStorage::F32(values), Some((start, end))) =
            (storage, layout.contiguous_offsets())
        else {
            candle_core::bail!("round-to-bf16-in-place: a contiguous f32 tensor")
        };
        round_in_place(&mut values[start..end]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(t: &Tensor) -> Vec<u16> {
        t.to_vec1::<bf16>()
            .unwrap()
            .iter()
            .map(|b| b.to_bits())
            .collect()
    }

    /// Every rounding case (ties both ways, carries into the exponent, infinities, NaN,
    /// subnormals) gives half's bits, and the sum gives candle's.
    #[test]
    fn the_bits_are_halfs_and_the_sum_is_candles() {
        let mut values = vec![
            0.0f32,
            -0.0,
            1.0,
            f32::from_bits(0x3F80_8000), // a tie, even below: stays
            f32::from_bits(0x3F81_8000), // a tie, odd below: up
            f32::from_bits(0x3F80_8001),
            f32::from_bits(0x7F7F_FFFF), // rounds to infinity
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0x7F80_0001), // a signalling NaN
            f32::from_bits(0x0000_8001), // subnormal
            f32::MIN_POSITIVE,
        ];
        values.extend((0..5000).map(|i| ((i as f32) * 0.713).sin() * 10f32.powi(i % 40 - 20)));
        for &v in &values {
            assert_eq!(bf16_bits(v), bf16::from_f32(v).to_bits(), "{v:e}");
        }
        let n = values.len();
        let a: Vec<bf16> = values.iter().map(|&v| bf16::from_f32(v)).collect();
        let b: Vec<bf16> = values
            .iter()
            .rev()
            .map(|&v| bf16::from_f32(v * 0.37))
            .collect();
        let ta = Tensor::from_vec(a, n, &Device::Cpu).unwrap();
        let tb = Tensor::from_vec(b, n, &Device::Cpu).unwrap();
        let ours = add(&ta, &tb).unwrap().unwrap().to_vec1::<bf16>().unwrap();
        let candles = (&ta + &tb).unwrap().to_vec1::<bf16>().unwrap();
        for (o, c) in ours.iter().zip(&candles) {
            assert!(
                o.to_bits() == c.to_bits() || (o.is_nan() && c.is_nan()),
                "{o} vs {c}"
            );
        }
        let wide = Tensor::from_vec(values.clone(), n, &Device::Cpu).unwrap();
        let narrow = to_bf16(&wide).unwrap();
        assert_eq!(
            bits(&narrow),
            bits(&wide.to_dtype(DType::BF16).unwrap()),
            "to_bf16 is candle's cast"
        );
        let back = to_f32(&narrow).unwrap().to_vec1::<f32>().unwrap();
        let candles = narrow
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let f32_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            f32_bits(&back),
            f32_bits(&candles),
            "to_f32 is candle's cast"
        );
        let odd: Vec<bf16> = [0x7F81u16, 0xFF81, 0x7FC0, 0x0001, 0x8000]
            .map(bf16::from_bits)
            .to_vec();
        let odd = Tensor::from_vec(odd, 5, &Device::Cpu).unwrap();
        assert_eq!(
            f32_bits(&to_f32(&odd).unwrap().to_vec1::<f32>().unwrap()),
            f32_bits(&odd.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap()),
            "signalling NaNs quieted as candle's cast does"
        );
        let fresh = Tensor::from_vec(values.clone(), n, &Device::Cpu).unwrap();
        assert!(round_fresh_in_place(&fresh).unwrap());
        let copied = rounded_f32(&wide).unwrap();
        for (t, v) in [&fresh, &copied]
            .map(|t| t.to_vec1::<f32>().unwrap())
            .iter()
            .zip([&candles, &candles])
        {
            assert_eq!(f32_bits(t), f32_bits(v), "rounded in f32 is candle's casts");
        }
        let mut rounded = values.clone();
        round_in_place(&mut rounded);
        let tensor = to_bf16_tensor(&values, &[n])
            .unwrap()
            .to_vec1::<bf16>()
            .unwrap();
        for ((r, t), v) in rounded.iter().zip(&tensor).zip(&values) {
            assert_eq!(bf16::from_f32(*r).to_bits(), bf16::from_f32(*v).to_bits());
            assert_eq!(t.to_bits(), bf16::from_f32(*v).to_bits());
        }
    }
}
