//! SwiGLU of bf16 CPU tensors in one pass: `silu(gate) * up` computed in f32 (the vectorised
//! exp of [`super::fast_math`]) and rounded once to bf16. candle's bf16 ops convert every
//! operand of every op one value at a time (silu, then the product: three roundings).

use candle_core::{DType, Device, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

use super::bf16_elementwise::bf16_bits;
use super::bf16_gemm::matmul;
use super::bf16_panels::{round_row, PackedWeight};
use super::bf16_row_tiles::RowTiles;
use super::fast_math::exp;
use crate::simd_dispatch;
use asa_core::error::Result;

/// Values per task (and per f32 scratch row).
const CHUNK: usize = 1 << 14;

/// `silu(gate) * up` for contiguous bf16 CPU tensors of one shape; `None` for any other
/// (those take candle's ops).
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Option<Tensor>> {
    let cpu_bf16 = |x: &Tensor| {
        x.dtype() == DType::BF16 && matches!(x.device(), Device::Cpu) && x.is_contiguous()
    };
    if !cpu_bf16(gate) || !cpu_bf16(up) || gate.dims() != up.dims() {
        return Ok(None);
    }
    let (g_storage, g_layout) = gate.storage_and_layout();
    let (u_storage, u_layout) = up.storage_and_layout();
    let (Storage::Cpu(g), Storage::Cpu(u)) = (&*g_storage, &*u_storage) else {
        return Ok(None);
    };
    let (Some((g0, g1)), Some((u0, u1))) =
        (g_layout.contiguous_offsets(), u_layout.contiguous_offsets())
    else {
        return Ok(None);
    };
    let (g, u) = (
        &g.as_slice::<bf16>()?[g0..g1],
        &u.as_slice::<bf16>()?[u0..u1],
    );
    let mut out = vec![bf16::ZERO; g.len()];
    out.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)))
        .for_each(|(dst, (g, u))| {
            let mut values = vec![0f32; dst.len()];
            simd_dispatch!(silu_mul_row(g, u, &mut values));
            round_row(&values, bits_of(dst));
        });
    Ok(Some(Tensor::from_vec(out, gate.dims(), &Device::Cpu)?))
}

/// The SwiGLU of a bf16 MLP for its down projection: `silu(g) * u` with `g = x gate^T` and
/// `u = x up^T`, each product's f32 sums rounded to bf16 (as [`super::bf16_gemm`]'s callers
/// round a bf16 layer's outputs) and the SwiGLU computed in f32 from those and rounded once,
/// as [`silu_mul`] does: the same bits, without the two bf16 tensors, the SwiGLU's tensor
/// and the down projection's copy of it into tiles (one pass instead of four).
pub fn swiglu_rows(x: &RowTiles, gate: &PackedWeight, up: &PackedWeight) -> RowTiles {
    assert_eq!(gate.n, up.n, "gate and up projections of one width");
    let (g, u) = (matmul(x, gate), matmul(x, up));
    let n = gate.n;
    RowTiles::build(x.m, n, |row, dst| {
        /// Values rounded and multiplied at a time (on the stack).
        const PIECE: usize = 256;
        let (mut gb, mut ub) = ([bf16::ZERO; PIECE], [bf16::ZERO; PIECE]);
        let mut values = [0f32; PIECE];
        let (g, u) = (&g[row * n..(row + 1) * n], &u[row * n..(row + 1) * n]);
        for (start, (g, u)) in (0..n)
            .step_by(PIECE)
            .zip(g.chunks(PIECE).zip(u.chunks(PIECE)))
        {
            let len = g.len();
            round_row(g, bits_of(&mut gb[..len]));
            round_row(u, bits_of(&mut ub[..len]));
            simd_dispatch!(silu_mul_row(&gb[..len], &ub[..len], &mut values[..len]));
            round_row(&values[..len], &mut dst[start..start + len]);
        }
    })
}

/// `silu(g) * u` of two projections' f32 sums, each rounded to bf16 first and the product
/// rounded once ([`silu_mul`]'s arithmetic on the rounded sums), in one pass over the values.
pub fn silu_mul_rounded(g: &[f32], u: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; u.len()];
    out.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)))
        .for_each(|(out, (g, u))| simd_dispatch!(silu_mul_rounded_row(g, u, out)));
    out
}

#[inline(always)]
fn silu_mul_rounded_row(g: &[f32], u: &[f32], out: &mut [f32]) {
    let rounded = |x: f32| f32::from_bits((bf16_bits(x) as u32) << 16);
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        let (g, u) = (rounded(g), rounded(u));
        *o = rounded(g / (1.0 + exp(-g)) * u);
    }
}

/// bf16 values as their bits.
fn bits_of(values: &mut [bf16]) -> &mut [u16] {
    // SAFETY: bf16 is a transparent u16
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr() as *mut u16, values.len()) }
}

/// `g / (1 + e^-g) * u` in f32 (e^-g saturates at e^88: the product is then ~0, as it is).
#[inline(always)]
fn silu_mul_row(g: &[bf16], u: &[bf16], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        let g = f32::from_bits((g.to_bits() as u32) << 16);
        let u = f32::from_bits((u.to_bits() as u32) << 16);
        *o = g / (1.0 + exp(-g)) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swiglu_is_the_float64_product_rounded_once() {
        let n = 3 * CHUNK + 17;
        let values = |seed: f32| -> Vec<bf16> {
            (0..n)
                .map(|i| bf16::from_f32(((i as f32 + seed) * 0.61).sin() * 12.0))
                .collect()
        };
        let (g, u) = (values(0.3), values(7.1));
        let tensor = |v: &Vec<bf16>| Tensor::from_vec(v.clone(), (n,), &Device::Cpu).unwrap();
        let got = silu_mul(&tensor(&g), &tensor(&u)).unwrap().unwrap();
        let got = got.to_vec1::<bf16>().unwrap();
        for i in 0..n {
            let (gv, uv) = (g[i].to_f64(), u[i].to_f64());
            let want = gv / (1.0 + (-gv).exp()) * uv;
            // one bf16 rounding (2^-9 relative) of a value within 2 ulp of f32's
            let err = (got[i].to_f64() - want).abs();
            assert!(
                err <= want.abs() * 2f64.powi(-8) + 1e-30,
                "{i}: {} vs {want}",
                got[i]
            );
        }
        // other dtypes are candle's
        let f = Tensor::new(&[1f32], &Device::Cpu).unwrap();
        assert!(silu_mul(&f, &f).unwrap().is_none());
    }
}
