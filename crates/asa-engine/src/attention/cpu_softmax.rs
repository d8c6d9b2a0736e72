//! The fused causal softmax on CPU: for each row of a query block, in one pass over the
//! visible keys j <= i, the scaled logits' maximum, exp, the sum with an optional sink
//! logit, and the normalised weights; invisible keys are written as 0 without being read.
//! It replaces the scale, mask and softmax ops (three passes over the block and a mask
//! tensor) where candle's CPU backend computes in f32 without autograd; other devices and
//! training use `mask_invisible` + softmax, which define the same weights. Like the GPU's
//! fused softmax it can also fill the probe's row table while the row is in cache
//! ([`causal_softmax_rows`]).

use std::mem::MaybeUninit;

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use asa_core::error::Result;
use asa_hooks::row_pass::{key_block_values, qk_row, row_values, EntropySums};
use asa_kernels::cpu::fast_math::exp;
use asa_kernels::cpu::host::{lane_max, with_cpu_f32};
use asa_kernels::row_table::{RowWants, QK_ABS_SUM, QK_SUM, SINK_MASS};
use asa_kernels::simd_dispatch;

/// Writes e = exp(scale * x - max) over `x` into `out` (same length) and returns sum e and,
/// with `ENTROPY`, sum e (scale * x - max) (0 without it), in f32 lanes combined in f64.
/// The one exp loop of the CPU attention kernels: [`softmax_row`] normalises its output,
/// the flash-style block (`flash`) rescales it tile by tile.
#[inline(always)]
pub(crate) fn exp_row<const ENTROPY: bool>(
    x: &[f32],
    out: &mut [MaybeUninit<f32>],
    scale: f32,
    max: f32,
) -> (f64, f64) {
    debug_assert_eq!(x.len(), out.len());
    let mut acc = [0f32; 16];
    let mut acc_ey = [0f32; 16];
    let mut chunks = out.chunks_exact_mut(16).zip(x.chunks_exact(16));
    for (o, v) in &mut chunks {
        // computed in a local chunk, then written: reads of `x` and writes of `out` never
        // interleave, so the sums stay in vector registers (no alias check, no spills)
        let mut e = [0f32; 16];
        for k in 0..16 {
            let y = v[k] * scale - max;
            e[k] = exp(y);
            acc[k] += e[k];
            if ENTROPY {
                acc_ey[k] += e[k] * y;
            }
        }
        for (o, e) in o.iter_mut().zip(e) {
            o.write(e);
        }
    }
    let done = x.len() - x.len() % 16;
    let mut sum: f64 = acc.iter().map(|&a| a as f64).sum();
    let mut sum_ey: f64 = acc_ey.iter().map(|&a| a as f64).sum();
    for (o, &v) in out[done..].iter_mut().zip(&x[done..]) {
        let y = v * scale - max;
        let e = *o.write(exp(y));
        sum += e as f64;
        if ENTROPY {
            sum_ey += (e * y) as f64;
        }
    }
    (sum, sum_ey)
}

/// Writes softmax(scale * x ++ [sink]) over `x` into `out` (same length) and returns the
/// sink's share (0 without a sink) and, with `ENTROPY`, the entropy in nats of the weights
/// renormalised over the real keys (NaN without it).
///
/// The entropy comes from the logits: with y = scale * x, m the maximum, e = exp(y - m) and
/// S = sum e over the real keys, q = e / S and H = -sum q ln q = ln S - sum e (y - m) / S.
/// That is one multiply-add per key in the exp loop instead of a logarithm per weight.
#[inline(always)]
fn softmax_row<const ENTROPY: bool>(
    x: &[f32],
    out: &mut [MaybeUninit<f32>],
    scale: f32,
    sink: Option<f32>,
) -> (f32, f32) {
    let row_max = lane_max(x, |v| v * scale);
    let max = sink.map_or(row_max, |s| row_max.max(s));
    let (sum, sum_ey) = exp_row::<ENTROPY>(x, out, scale, max);
    // SAFETY: exp_row wrote every element of `out`
    let out = unsafe { &mut *(out as *mut [MaybeUninit<f32>] as *mut [f32]) };
    let sink_exp = sink.map_or(0.0, |s| exp(s - max) as f64);
    let inv = (1.0 / (sum + sink_exp)) as f32;
    for o in out.iter_mut() {
        *o *= inv;
    }
    // ln S - sum e (y - m) / S does not depend on the shift m (the sink's logit where it
    // is the maximum)
    let entropy = if ENTROPY {
        // NaN when S is 0 (every real key's e underflowed: no mass left to them)
        EntropySums {
            total: sum,
            x: sum_ey,
        }
        .entropy()
    } else {
        f32::NAN
    };
    ((sink_exp * inv as f64) as f32, entropy)
}

/// Softmax of row `x` (the visible logits of query `i`) into `out`, and the row's `cell`:
/// the sink mass alone without `wants`, else its line of the row table (the reductions of
/// the weights, the entropy from the logits, the sink mass and the raw q.k sums).
#[inline(always)]
fn softmax_cell(
    x: &[f32],
    out: &mut [MaybeUninit<f32>],
    cell: &mut [f32],
    scale: f32,
    sink: Option<f32>,
    i: usize,
    wants: Option<&RowWants>,
) {
    let Some(wants) = wants else {
        cell[0] = softmax_row::<false>(x, out, scale, sink).0;
        return;
    };
    let (mass, entropy) = if wants.entropy {
        softmax_row::<true>(x, out, scale, sink)
    } else {
        softmax_row::<false>(x, out, scale, sink)
    };
    // SAFETY: softmax_row wrote every element of `out`
    let weights = unsafe { &*(out as *const [MaybeUninit<f32>] as *const [f32]) };
    row_values(cell, weights, i, wants, Some(entropy));
    // causal rows (the fused softmax masks no window): the keys 0 ..= i
    if let Some((blocks, c)) = wants.key_blocks.zip(wants.key_block_columns()) {
        key_block_values(&mut cell[c..], weights, 0, blocks);
    }
    let (qk, qk_abs) = qk_row(x);
    cell[SINK_MASS] = mass;
    cell[QK_SUM] = qk as f32;
    cell[QK_ABS_SUM] = qk_abs as f32;
}

/// The weights `[batch, heads, n, keys]` and, per row, `width` values of
/// [`softmax_cell`]; `None` where `logits` is not a contiguous f32 CPU tensor.
fn fused_block(
    logits: &Tensor,
    scale: f32,
    q_start: usize,
    sinks: Option<&[f32]>,
    wants: Option<&RowWants>,
) -> Result<Option<(Tensor, Vec<f32>)>> {
    let (b, h, n, keys) = logits.dims4()?;
    if keys != q_start + n || keys == 0 || n == 0 {
        return Ok(None);
    }
    let width = wants.map_or(1, RowWants::width);
    let computed = with_cpu_f32(logits, |data| {
        // every element is written below (the weights of visible keys, 0 for the rest), so
        // the block is not zero-filled first
        let mut weights = Vec::with_capacity(data.len());
        let mut cells = vec![0f32; b * h * n * width];
        weights.spare_capacity_mut()[..data.len()]
            .par_chunks_mut(keys)
            .zip(data.par_chunks(keys))
            .zip(cells.par_chunks_mut(width))
            .enumerate()
            .for_each(|(row, ((out, x), cell))| {
                let i = q_start + row % n;
                let sink = sinks.map(|s| s[(row / n) % h]);
                let (out, invisible) = out.split_at_mut(i + 1);
                for o in invisible {
                    o.write(0.0);
                }
                let x = &x[..=i];
                simd_dispatch!(softmax_cell(x, out, cell, scale, sink, i, wants));
            });
        // SAFETY: the loop above wrote all `data.len()` elements
        unsafe { weights.set_len(data.len()) };
        (weights, cells)
    });
    let Some((weights, cells)) = computed else {
        return Ok(None);
    };
    Ok(Some((
        Tensor::from_vec(weights, (b, h, n, keys), &Device::Cpu)?,
        cells,
    )))
}

/// Causal softmax of `logits` `[batch, heads, n, q_start + n]` (f32, CPU) times `scale`,
/// with per-head sink logits `sinks` `[heads]` in the denominator when given. Returns the
/// weights and, with sinks, the sink mass `[batch, heads, n]`; `None` where the tensor is
/// not a contiguous f32 CPU tensor.
pub fn causal_softmax(
    logits: &Tensor,
    scale: f32,
    q_start: usize,
    sinks: Option<&[f32]>,
) -> Result<Option<(Tensor, Option<Tensor>)>> {
    let Some((weights, mass)) = fused_block(logits, scale, q_start, sinks, None)? else {
        return Ok(None);
    };
    let (b, h, n, _) = logits.dims4()?;
    let mass = match sinks {
        Some(_) => Some(Tensor::from_vec(mass, (b, h, n), &Device::Cpu)?),
        None => None,
    };
    Ok(Some((weights, mass)))
}

/// [`causal_softmax`] of raw q.k `raw` that also fills the row table `[rows, wants.width()]`
/// of the block (the layout of `asa_kernels::row_table`, as the GPU's fused softmax):
/// the reductions of the weights, the sink mass and the raw q.k sums.
pub fn causal_softmax_rows(
    raw: &Tensor,
    scale: f32,
    q_start: usize,
    sinks: Option<&[f32]>,
    wants: &RowWants,
) -> Result<Option<(Tensor, Tensor)>> {
    let Some((weights, table)) = fused_block(raw, scale, q_start, sinks, Some(wants))? else {
        return Ok(None);
    };
    let rows = table.len() / wants.width();
    let table = Tensor::from_vec(table, (rows, wants.width()), &Device::Cpu)?;
    Ok(Some((weights, table)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::sink::softmax_with_sink;
    use asa_hooks::blocks::{mask_invisible, visibility};

    fn block() -> Tensor {
        // 2 seqs, 2 heads, queries 33..37 against keys 0..37 (rows cross the 16 lanes)
        let (b, h, q_start, n) = (2, 2, 33, 4);
        let keys = q_start + n;
        let data: Vec<f32> = (0..b * h * n * keys)
            .map(|k| ((k * 7919) % 101) as f32 / 10.0 - 5.0)
            .collect();
        Tensor::from_vec(data, (b, h, n, keys), &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn equals_mask_then_softmax() {
        let raw = block();
        let (weights, mass) = causal_softmax(&raw, 0.125, 33, None).unwrap().unwrap();
        assert!(mass.is_none());
        let visible = visibility(33, 4, asa_hooks::KeyWindow::CAUSAL, &Device::Cpu).unwrap();
        let scores = mask_invisible(&(&raw * 0.125).unwrap(), &visible).unwrap();
        let expected = candle_nn::ops::softmax_last_dim(&scores).unwrap();
        assert!(max_diff(&weights, &expected) < 1e-7);
    }

    #[test]
    fn sinks_take_their_share() {
        let raw = block();
        let sinks = [0.5f32, -1.0];
        let (weights, mass) = causal_softmax(&raw, 1.0, 33, Some(&sinks))
            .unwrap()
            .unwrap();
        let visible = visibility(33, 4, asa_hooks::KeyWindow::CAUSAL, &Device::Cpu).unwrap();
        let scores = mask_invisible(&raw, &visible).unwrap();
        let sink = Tensor::new(&sinks, &Device::Cpu)
            .unwrap()
            .reshape((1, 2, 1, 1))
            .unwrap();
        let (expected, expected_mass) = softmax_with_sink(&scores, &sink).unwrap();
        assert!(max_diff(&weights, &expected) < 1e-7);
        assert!(max_diff(&mass.unwrap(), &expected_mass) < 1e-7);
    }
}

#[cfg(test)]
mod row_table_tests {
    use super::*;
    use asa_hooks::row_pass::weight_rows;
    use asa_kernels::row_table::{BANDS, ENTROPY, FIRST, SUM};

    #[test]
    fn the_row_table_is_the_row_pass_of_the_weights_with_sink_and_qk_columns() {
        // 2 seqs, 2 heads, queries 33..37 (rows cross the 16 lanes)
        let (b, h, q_start, n) = (2, 2, 33, 4);
        let keys = q_start + n;
        let data: Vec<f32> = (0..b * h * n * keys)
            .map(|k| ((k * 7919) % 101) as f32 / 10.0 - 5.0)
            .collect();
        let raw = Tensor::from_vec(data.clone(), (b, h, n, keys), &Device::Cpu).unwrap();
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: vec![(0, 1), (1, 10), (10, usize::MAX)],
            max_logit: false,
            // block_map's columns too: 5 key blocks of the 37 keys
            key_blocks: Some(asa_kernels::row_table::KeyBlocks::new(5, keys)),
            key_sums_from: None,
        };
        let width = wants.width();
        let sinks = [0.5f32, -1.0];
        for sink in [None, Some(&sinks[..])] {
            let (weights, table) = causal_softmax_rows(&raw, 0.125, q_start, sink, &wants)
                .unwrap()
                .unwrap();
            let (want_weights, mass) = causal_softmax(&raw, 0.125, q_start, sink).unwrap().unwrap();
            let host = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(host(&weights), host(&want_weights));
            let causal = asa_hooks::KeyWindow::CAUSAL;
            let want = weight_rows(&want_weights, q_start, causal, &wants)
                .unwrap()
                .unwrap();
            let table = host(&table);
            assert_eq!(table.len(), b * h * n * width);
            let mass = mass.map(|m| host(&m));
            for (row, (got, want)) in table.chunks(width).zip(want.chunks(width)).enumerate() {
                // the same reductions of the same weights
                assert_eq!(got[FIRST], want[FIRST], "row {row}");
                assert_eq!(got[SUM], want[SUM], "row {row}");
                assert_eq!(got[BANDS..], want[BANDS..], "row {row}");
                let want_mass = mass.as_ref().map_or(0.0, |m| m[row]);
                assert_eq!(got[SINK_MASS], want_mass, "row {row}");
                // the entropy from the logits: the row pass's of the weights, and a float64
                // softmax over the real keys by hand
                let i = q_start + row % n;
                let visible = &data[row * keys..row * keys + i + 1];
                let y: Vec<f64> = visible.iter().map(|&v| v as f64 * 0.125).collect();
                let m = y.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = y.iter().map(|v| (v - m).exp()).sum();
                let h: f64 = y
                    .iter()
                    .map(|v| {
                        let q = (v - m).exp() / z;
                        -q * q.ln()
                    })
                    .sum();
                let tol = |x: f64| 1e-6 + 1e-6 * x.abs();
                assert!(
                    (got[ENTROPY] as f64 - h).abs() < tol(h),
                    "row {row}: {} vs {h}",
                    got[ENTROPY]
                );
                assert!((got[ENTROPY] - want[ENTROPY]).abs() < 1e-5, "row {row}");
                // raw q.k over the visible keys, summed by hand
                let sum: f64 = visible.iter().map(|&v| v as f64).sum();
                let abs: f64 = visible.iter().map(|&v| v.abs() as f64).sum();
                assert!((got[QK_SUM] as f64 - sum).abs() < 1e-5, "row {row}");
                assert!((got[QK_ABS_SUM] as f64 - abs).abs() < 1e-5, "row {row}");
            }
        }
    }
}

#[cfg(test)]
mod wide_tests {
    use super::*;

    #[inline(always)]
    fn with_entropy(x: &[f32], out: &mut [MaybeUninit<f32>], sink: Option<f32>) -> (f32, f32) {
        softmax_row::<true>(x, out, 0.7, sink)
    }

    #[test]
    fn the_vectorised_copy_equals_the_baseline_bit_for_bit() {
        // rows of 1..200 keys (chunks and tails), logits from -90 to 30, a dominant sink
        for len in [1usize, 15, 16, 17, 100, 200] {
            let x: Vec<f32> = (0..len)
                .map(|k| ((k * 7919) % 1201) as f32 / 10.0 - 90.0)
                .collect();
            for sink in [None, Some(0.0), Some(1e3)] {
                let mut base = vec![MaybeUninit::new(f32::NAN); len];
                let mut vectorised = vec![MaybeUninit::new(f32::NAN); len];
                let (m_base, h_base) = with_entropy(&x, &mut base, sink);
                let (m_wide, h_wide) = simd_dispatch!(with_entropy(&x, &mut vectorised, sink));
                assert_eq!(m_base.to_bits(), m_wide.to_bits());
                assert_eq!(h_base.to_bits(), h_wide.to_bits());
                for (a, b) in base.iter().zip(&vectorised) {
                    // SAFETY: both rows were fully written by softmax_row
                    let (a, b) = unsafe { (a.assume_init(), b.assume_init()) };
                    assert_eq!(a.to_bits(), b.to_bits(), "len {len} sink {sink:?}");
                }
            }
        }
    }
}
