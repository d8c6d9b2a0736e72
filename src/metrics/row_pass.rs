//! The CPU row pass: every per-row reduction of a block of causal weights (first-token
//! mass, weight sum, entropy, distance-band masses) or raw q.k (sum, absolute sum) in one
//! pass over the block's host memory, rows split across threads. Only visible keys j <= i
//! are read. On other devices and dtypes the metrics use their candle reductions instead,
//! which define the same quantities.

use candle_core::Tensor;
use rayon::prelude::*;

use crate::cpu::fast_math::ln;
use crate::cpu::host::{lane_sum, with_cpu_f32};
use crate::error::Result;
use crate::simd_dispatch;

/// What one call of [`weight_rows`] computes.
#[derive(Debug, Clone, Default)]
pub struct RowWants {
    pub first: bool,
    pub sum: bool,
    pub entropy: bool,
    /// Distance bands `[lo, hi)` of t = i - j, key 0 of queries i > 0 left out (its own
    /// `first` band); empty for none.
    pub bands: Vec<(usize, usize)>,
}

/// Per-row values `[batch, head, n]` (row-major), each empty unless asked for.
#[derive(Debug, Clone, Default)]
pub struct RowValues {
    pub first: Vec<f32>,
    pub sum: Vec<f32>,
    pub entropy: Vec<f32>,
    /// One vector per band: `first` (a_i0 for i > 0), then each of `RowWants::bands`.
    pub bands: Vec<Vec<f32>>,
}

/// Entropy in nats of `max(w, 0)` renormalised; NaN without positive mass.
#[inline(always)]
fn clamped_entropy(visible: &[f32]) -> f32 {
    let mass = lane_sum(visible, |w| w.max(0.0));
    if mass <= 0.0 {
        return f32::NAN;
    }
    // q ln q -> 0 as q -> 0: weights below the normal range contribute nothing
    let q_ln_q = lane_sum(visible, |w| {
        if w >= f32::MIN_POSITIVE {
            w * ln(w.max(f32::MIN_POSITIVE))
        } else {
            0.0
        }
    });
    (mass.ln() - q_ln_q / mass) as f32
}

/// The (start, end) key range of band `[lo, hi)` for query `i`, key 0 left out for i > 0.
fn band_keys(i: usize, lo: usize, hi: usize) -> (usize, usize) {
    if lo > i {
        return (0, 0);
    }
    let first_key = usize::from(i > 0);
    let start = if hi == usize::MAX || hi > i {
        0
    } else {
        i + 1 - hi
    };
    (start.max(first_key), i + 1 - lo)
}

/// Fills `cell` (first, sum, entropy, bands...) for query `i` with visible weights `visible`.
#[inline(always)]
fn row_values(cell: &mut [f32], visible: &[f32], i: usize, wants: &RowWants) {
    if wants.first {
        cell[0] = visible[0];
    }
    if wants.sum {
        cell[1] = lane_sum(visible, |x| x) as f32;
    }
    if wants.entropy {
        cell[2] = clamped_entropy(visible);
    }
    if !wants.bands.is_empty() {
        cell[3] = if i > 0 { visible[0] } else { 0.0 };
        for (k, &(lo, hi)) in wants.bands.iter().enumerate() {
            let (start, end) = band_keys(i, lo, hi);
            cell[4 + k] = if start < end {
                lane_sum(&visible[start..end], |x| x) as f32
            } else {
                0.0
            };
        }
    }
}

/// Sum and absolute sum of one row of raw q.k.
#[inline(always)]
fn qk_row(visible: &[f32]) -> (f64, f64) {
    (lane_sum(visible, |x| x), lane_sum(visible, f32::abs))
}

/// The per-row reductions of causal `weights` `[batch, head, n, q_start + n]` on CPU f32,
/// or `None` where the candle reductions must run.
pub fn weight_rows(
    weights: &Tensor,
    q_start: usize,
    wants: &RowWants,
) -> Result<Option<RowValues>> {
    let (b, h, n, keys) = weights.dims4()?;
    if keys != q_start + n || keys == 0 {
        return Ok(None);
    }
    let rows = b * h * n;
    let bands = if wants.bands.is_empty() {
        0
    } else {
        wants.bands.len() + 1
    };
    // per row: first, sum, entropy, bands...
    let width = 3 + bands;
    let values = with_cpu_f32(weights, |data| {
        let mut out = vec![0f32; rows * width];
        out.par_chunks_mut(width)
            .zip(data.par_chunks(keys))
            .enumerate()
            .for_each(|(row, (cell, w))| {
                let i = q_start + row % n;
                simd_dispatch!(row_values(cell, &w[..=i], i, wants));
            });
        out
    });
    Ok(values.map(|out| {
        let column = |c: usize| out.iter().skip(c).step_by(width).copied().collect();
        let pick = |want: bool, c: usize| if want { column(c) } else { Vec::new() };
        RowValues {
            first: pick(wants.first, 0),
            sum: pick(wants.sum, 1),
            entropy: pick(wants.entropy, 2),
            bands: (0..bands).map(|k| column(3 + k)).collect(),
        }
    }))
}

/// Sum and absolute sum of raw causal q.k `[batch, head, n, q_start + n]` over the visible
/// pairs, on CPU f32; `None` where the candle reductions must run.
pub fn qk_sums(raw: &Tensor, q_start: usize) -> Result<Option<(f64, f64)>> {
    let (_, _, n, keys) = raw.dims4()?;
    if keys != q_start + n || keys == 0 {
        return Ok(None);
    }
    Ok(with_cpu_f32(raw, |data| {
        data.par_chunks(keys)
            .enumerate()
            .map(|(row, w)| {
                let visible = &w[..=q_start + row % n];
                simd_dispatch!(qk_row(visible))
            })
            .collect::<Vec<_>>()
            .into_iter()
            // rows summed in order: the same bits on every run, whatever the threads did
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn band_keys_partition_a_row() {
        // query 12, bands 0, 1-10, 10-inf: key 0 is `first`, the bands cover keys 1..=12
        assert_eq!(band_keys(12, 0, 1), (12, 13));
        assert_eq!(band_keys(12, 1, 10), (3, 12));
        assert_eq!(band_keys(12, 10, usize::MAX), (1, 3));
        // query 0 sees only itself at distance 0, with no `first`
        assert_eq!(band_keys(0, 0, 1), (0, 1));
        assert_eq!(band_keys(0, 1, 10), (0, 0));
    }

    #[test]
    fn rows_by_hand() {
        // 1 seq, 1 head, queries 1 and 2 (q_start 1), 3 keys; the masked key of query 1
        // holds garbage that must not be read
        let w = Tensor::new(&[[[[0.5f32, 0.5, 99.0], [0.6, -0.2, 0.6]]]], &Device::Cpu).unwrap();
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: vec![(0, 1), (1, usize::MAX)],
        };
        let v = weight_rows(&w, 1, &wants).unwrap().unwrap();
        assert_eq!(v.first, vec![0.5, 0.6]);
        assert!((v.sum[0] - 1.0).abs() < 1e-7 && (v.sum[1] - 1.0).abs() < 1e-7);
        // row 2: q = (0.5, 0, 0.5) -> ln 2
        assert!((v.entropy[1] - std::f32::consts::LN_2).abs() < 1e-6);
        assert_eq!(v.bands[0], vec![0.5, 0.6]); // first
        assert_eq!(v.bands[1], vec![0.5, 0.6]); // distance 0
        assert!((v.bands[2][0]).abs() < 1e-7 && (v.bands[2][1] + 0.2).abs() < 1e-7);
        let (s, a) = qk_sums(&w, 1).unwrap().unwrap();
        assert!((s - 2.0).abs() < 1e-6 && (a - 2.4).abs() < 1e-6);
    }
}

#[cfg(test)]
mod device_path_tests {
    //! The candle reductions (the path of GPUs and other dtypes) and the CPU row pass agree.
    use super::*;
    use crate::metrics::distance::{Bands, DistanceProfile};
    use crate::metrics::entropy::row_entropy;
    use candle_core::Device;
    use candle_core::D;

    #[test]
    fn candle_reductions_equal_the_row_pass() {
        // rows of 31-37 keys cross the 16-lane chunks and leave tails
        let (h, q_start, n) = (2, 30, 7);
        let keys = q_start + n;
        let mut data = Vec::new();
        for head in 0..h {
            for r in 0..n {
                for j in 0..keys {
                    let x = ((head * 31 + r * 7 + j * 13) % 17) as f32 / 17.0 - 0.2;
                    data.push(if j <= q_start + r { x } else { 0.0 });
                }
            }
        }
        let w = Tensor::from_vec(data, (1, h, n, keys), &Device::Cpu).unwrap();
        let bands = Bands {
            edges: vec![1, 3, 9, 27],
        };
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: bands.ranges(),
        };
        let rows = weight_rows(&w, q_start, &wants).unwrap().unwrap();
        let host = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let close = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() < 1e-6 || (x.is_nan() && y.is_nan()))
        };
        assert!(close(&rows.entropy, &host(row_entropy(&w).unwrap())));
        assert!(close(&rows.sum, &host(w.sum(D::Minus1).unwrap())));
        assert!(close(&rows.first, &host(w.narrow(3, 0, 1).unwrap())));
        let mut fused = DistanceProfile::new(bands.clone(), 1, 1, h, 0);
        fused.add_rows(0, 0, q_start, n, &rows.bands);
        let mut candle = DistanceProfile::new(bands, 1, 1, h, 0);
        candle.add(0, 0, q_start, &w).unwrap();
        let (a, b) = (fused.finish(), candle.finish());
        for (x, y) in a.per_head[0]
            .iter()
            .flatten()
            .zip(b.per_head[0].iter().flatten())
        {
            assert!((x - y).abs() < 1e-6, "{x} vs {y}");
        }
        // q.k sums over the visible pairs (the invisible entries above are 0 already)
        let (sum, abs_sum) = qk_sums(&w, q_start).unwrap().unwrap();
        let want = |t: Tensor| t.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((sum - want(w.clone())).abs() < 1e-4, "{sum}");
        assert!((abs_sum - want(w.abs().unwrap())).abs() < 1e-4, "{abs_sum}");
    }
}
