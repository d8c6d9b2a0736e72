//! The row pass: every per-row reduction of a block of causal weights (first-token mass,
//! weight sum, entropy, distance-band masses) or raw q.k (sum, absolute sum) in one pass
//! over the block, on the CPU over its host memory with rows split across threads, on CUDA
//! by the kernels of [`asa_kernels::cuda`] (feature `cuda`), which fill the same tables. Only
//! visible keys j <= i are read. Elsewhere (other dtypes, layouts or devices) the metrics
//! use their candle reductions instead, which define the same quantities.

use candle_core::{Tensor, D};
use rayon::prelude::*;

use crate::blocks::visibility;
use crate::KeyWindow;
use asa_core::error::Result;
use asa_kernels::cpu::fast_math::ln;
use asa_kernels::cpu::host::{lane_sum, lane_sum_max, with_cpu_f32};
use asa_kernels::row_table::{KeyBlocks, RowWants, BANDS, ENTROPY, FIRST, SUM};
use asa_kernels::simd_dispatch;

/// The two sums an entropy is made of ([`EntropySums::entropy`]): T = sum w and X = sum w
/// ln w of weights w, or S = sum e and sum e (y - m) of a softmax from its logits y
/// (maximum m, e = exp(y - m)); additive over a row's parts.
#[derive(Debug, Clone, Copy, Default)]
pub struct EntropySums {
    /// T (or S).
    pub total: f64,
    /// X.
    pub x: f64,
}

impl EntropySums {
    /// The one entropy formula of the CPU: H = ln T - X / T in nats, the entropy of weights
    /// w / T ([`clamped_entropy_sums`] of a whole row), or of a softmax from its logits (T =
    /// S, X = sum e (y - m): the fused softmaxes and the flash tiles); NaN without mass (T
    /// <= 0).
    #[inline(always)]
    pub fn entropy(self) -> f32 {
        let EntropySums { total, x } = self;
        if total <= 0.0 {
            return f32::NAN;
        }
        (total.ln() - x / total) as f32
    }

    /// Adds a part of the row's sums.
    #[inline(always)]
    pub fn add(&mut self, part: EntropySums) {
        self.total += part.total;
        self.x += part.x;
    }
}

/// The sums the entropy of `max(w, 0)` renormalised is made of: the positive mass sum
/// max(w, 0) and sum w ln w over the positive weights; additive over a row's parts.
#[inline(always)]
pub fn clamped_entropy_sums(weights: &[f32]) -> EntropySums {
    let mass = lane_sum(weights, |w| w.max(0.0));
    // q ln q -> 0 as q -> 0: weights below the normal range contribute nothing
    let q_ln_q = lane_sum(weights, |w| {
        if w >= f32::MIN_POSITIVE {
            w * ln(w.max(f32::MIN_POSITIVE))
        } else {
            0.0
        }
    });
    EntropySums {
        total: mass,
        x: q_ln_q,
    }
}

/// Entropy in nats of `max(w, 0)` renormalised; NaN without positive mass.
#[inline(always)]
fn clamped_entropy(visible: &[f32]) -> f32 {
    clamped_entropy_sums(visible).entropy()
}

/// The (start, end) key range of band `[lo, hi)` for query `i`, key 0 left out for i > 0.
pub fn band_keys(i: usize, lo: usize, hi: usize) -> (usize, usize) {
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

/// Fills the row-table `cell` of query `i` with visible weights `visible`; the entropy is
/// `known_entropy` where the caller has it (the fused softmax computes it from the logits).
#[inline(always)]
pub fn row_values(
    cell: &mut [f32],
    visible: &[f32],
    i: usize,
    wants: &RowWants,
    known_entropy: Option<f32>,
) {
    if wants.first {
        cell[FIRST] = visible[0];
    }
    if wants.sum {
        cell[SUM] = lane_sum(visible, |x| x) as f32;
    }
    if wants.entropy {
        cell[ENTROPY] = known_entropy.unwrap_or_else(|| clamped_entropy(visible));
    }
    if !wants.bands.is_empty() {
        cell[BANDS] = if i > 0 { visible[0] } else { 0.0 };
        for (k, &(lo, hi)) in wants.bands.iter().enumerate() {
            let (start, end) = band_keys(i, lo, hi);
            cell[BANDS + 1 + k] = if start < end {
                lane_sum(&visible[start..end], |x| x) as f32
            } else {
                0.0
            };
        }
    }
}

/// Fills a row's key-block columns `cells` (G sums, then G maxima) from its weights
/// `visible` of the keys `first_key ..` it sees; the blocks it sees no key of keep 0.
#[inline(always)]
pub fn key_block_values(cells: &mut [f32], visible: &[f32], first_key: usize, blocks: KeyBlocks) {
    let (sums, maxima) = cells.split_at_mut(blocks.blocks);
    // a loop, not `KeyBlocks::split`'s closure: the body stays in the caller's SIMD copy
    let end = first_key + visible.len();
    let (mut b, mut lo) = (blocks.block_of(first_key), first_key);
    while lo < end {
        let hi = blocks.start(b + 1).min(end);
        let (sum, max) = lane_sum_max(&visible[lo - first_key..hi - first_key]);
        (sums[b], maxima[b]) = (sum as f32, max);
        (b, lo) = (b + 1, hi);
    }
}

/// Sum and absolute sum of one row of raw q.k.
#[inline(always)]
pub fn qk_row(visible: &[f32]) -> (f64, f64) {
    (lane_sum(visible, |x| x), lane_sum(visible, f32::abs))
}

/// The host row table (read it with [`asa_kernels::row_table::split_table`]) of causal `weights`
/// `[batch, head, n, q_start + n]` on CPU f32 or a CUDA device (f32), or `None` where the
/// candle reductions must run. Keys outside `window` hold 0 in `weights`; the key blocks
/// read only the keys each query sees.
pub fn weight_rows(
    weights: &Tensor,
    q_start: usize,
    window: KeyWindow,
    wants: &RowWants,
) -> Result<Option<Vec<f32>>> {
    let (b, h, n, keys) = weights.dims4()?;
    if keys != q_start + n || keys == 0 {
        return Ok(None);
    }
    let rows = b * h * n;
    let width = wants.width();
    let key_blocks = wants.key_blocks.zip(wants.key_block_columns());
    let host = with_cpu_f32(weights, |data| {
        let mut out = vec![0f32; rows * width];
        out.par_chunks_mut(width)
            .zip(data.par_chunks(keys))
            .enumerate()
            .for_each(|(row, (cell, w))| {
                let i = q_start + row % n;
                simd_dispatch!(row_values(cell, &w[..=i], i, wants, None));
                if let Some((blocks, c)) = key_blocks {
                    let seen = window.keys(i);
                    let from = seen.start;
                    let row = &w[seen];
                    simd_dispatch!(key_block_values(&mut cell[c..], row, from, blocks));
                }
            });
        out
    });
    let table = match host {
        Some(out) => out,
        None => match weight_table_on_device(weights, q_start, wants)? {
            Some(table) => table.flatten_all()?.to_vec1::<f32>()?,
            None => return Ok(None),
        },
    };
    Ok(Some(table))
}

/// The row table `[rows, width]` of causal `weights` `[batch, head, n, q_start + n]` on a
/// GPU, computed there and left there (pooled there too:
/// the metrics crate's `block_pools::pool_on_device`); `None` on the CPU and where the candle
/// reductions must run.
pub fn weight_table_on_device(
    weights: &Tensor,
    q_start: usize,
    wants: &RowWants,
) -> Result<Option<Tensor>> {
    let (_, _, n, keys) = weights.dims4()?;
    // the GPU's row kernel has no key-block columns: the CPU row pass makes them
    if keys != q_start + n || keys == 0 || wants.key_blocks.is_some() {
        return Ok(None);
    }
    device_weight_table(weights, q_start, wants)
}

/// Sums of a block's raw q.k over its visible (query, key) pairs, in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QkSums {
    pub sum: f64,
    pub abs_sum: f64,
    /// Visible pairs summed (every sequence and head of the block).
    pub pairs: f64,
}

impl QkSums {
    /// The sums of raw q.k `[batch, head, n, q_start + n]` of queries `q_start ..` over
    /// the keys `window` lets each see: rows summed in f64 on CPU f32 (or the CUDA kernel),
    /// else candle's reductions (per-row partial sums in f32, the total in f64).
    pub fn of_block(raw: &Tensor, q_start: usize, window: KeyWindow) -> Result<QkSums> {
        let (b, h, n, _) = raw.dims4()?;
        if let Some((sum, abs_sum)) = qk_sums(raw, q_start, window)? {
            let pairs = b * h * window.pairs(q_start..q_start + n);
            return Ok(QkSums {
                sum,
                abs_sum,
                pairs: pairs as f64,
            });
        }
        let visible = visibility(q_start, n, window, raw.device())?;
        let masked = raw.broadcast_mul(&visible)?;
        let rows = masked.sum(D::Minus1)?.flatten_all()?.to_vec1::<f32>()?;
        let abs_rows = masked
            .abs()?
            .sum(D::Minus1)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        Ok(QkSums {
            sum: rows.iter().map(|&v| v as f64).sum::<f64>(),
            abs_sum: abs_rows.iter().map(|&v| v as f64).sum::<f64>(),
            pairs: (b * h) as f64 * visible.sum_all()?.to_scalar::<f32>()? as f64,
        })
    }
}

/// Sum and absolute sum of raw causal q.k `[batch, head, n, q_start + n]` over the pairs
/// `window` makes visible, on CPU f32 (or CUDA, causal only); `None` where the candle
/// reductions must run.
pub fn qk_sums(raw: &Tensor, q_start: usize, window: KeyWindow) -> Result<Option<(f64, f64)>> {
    let (_, _, n, keys) = raw.dims4()?;
    if keys != q_start + n || keys == 0 {
        return Ok(None);
    }
    let host = with_cpu_f32(raw, |data| {
        data.par_chunks(keys)
            .enumerate()
            .map(|(row, w)| {
                let visible = &w[window.keys(q_start + row % n)];
                simd_dispatch!(qk_row(visible))
            })
            .collect::<Vec<_>>()
    });
    let rows = match host {
        Some(rows) => rows,
        // the CUDA kernel sums every key j <= i
        None if window.restricts(keys) => return Ok(None),
        None => match device_qk_table(raw, q_start)? {
            Some(table) => table.chunks_exact(2).map(|r| (r[0], r[1])).collect(),
            None => return Ok(None),
        },
    };
    // rows summed in order: the same bits on every run, whatever the threads did
    Ok(Some(
        rows.into_iter()
            .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1)),
    ))
}

/// The row table from the CUDA kernel, where `weights` is on a GPU.
#[cfg(feature = "cuda")]
fn device_weight_table(
    weights: &Tensor,
    q_start: usize,
    wants: &RowWants,
) -> Result<Option<Tensor>> {
    asa_kernels::cuda::rows::weight_table(weights, q_start, wants)
}

#[cfg(not(feature = "cuda"))]
fn device_weight_table(_: &Tensor, _: usize, _: &RowWants) -> Result<Option<Tensor>> {
    Ok(None)
}

/// Per-row (sum, absolute sum) of [`qk_sums`] from the CUDA kernel, where `raw` is on a GPU.
#[cfg(feature = "cuda")]
fn device_qk_table(raw: &Tensor, q_start: usize) -> Result<Option<Vec<f64>>> {
    asa_kernels::cuda::rows::qk_table(raw, q_start)
}

#[cfg(not(feature = "cuda"))]
fn device_qk_table(_: &Tensor, _: usize) -> Result<Option<Vec<f64>>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use asa_kernels::row_table::split_table;
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
            max_logit: false,
            key_blocks: None,
            key_sums_from: None,
        };
        let table = weight_rows(&w, 1, KeyWindow::CAUSAL, &wants)
            .unwrap()
            .unwrap();
        let v = split_table(&table, &wants);
        assert_eq!(v.first.to_vec(), vec![0.5, 0.6]);
        assert!((v.sum.get(0) - 1.0).abs() < 1e-7 && (v.sum.get(1) - 1.0).abs() < 1e-7);
        // row 2: q = (0.5, 0, 0.5) -> ln 2
        assert!((v.entropy.get(1) - std::f32::consts::LN_2).abs() < 1e-6);
        assert_eq!(v.bands[0].to_vec(), vec![0.5, 0.6]); // first
        assert_eq!(v.bands[1].to_vec(), vec![0.5, 0.6]); // distance 0
        assert!((v.bands[2].get(0)).abs() < 1e-7 && (v.bands[2].get(1) + 0.2).abs() < 1e-7);
        let (s, a) = qk_sums(&w, 1, KeyWindow::CAUSAL).unwrap().unwrap();
        assert!((s - 2.0).abs() < 1e-6 && (a - 2.4).abs() < 1e-6);
    }
}

#[cfg(test)]
mod device_path_tests {
    //! The candle reductions (the path of GPUs and other dtypes) and the CPU row pass agree.
    use super::*;
    use asa_kernels::row_table::split_table;
    use candle_core::Device;
    use candle_core::D;

    /// Row entropies `[batch, head, n]` of weights `[batch, head, n, keys]` by candle ops.
    fn row_entropy(weights: &Tensor) -> Result<Tensor> {
        let q = weights.relu()?;
        let mass = q.sum(D::Minus1)?;
        // q ln q with 0 ln 0 = 0: ln of a floor far below any f32 weight that matters
        let q_ln_q = (&q * q.clamp(1e-30f32, f32::INFINITY)?.log()?)?.sum(D::Minus1)?;
        Ok((mass.log()? - (q_ln_q / mass)?)?)
    }

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
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            // the distance profile's bands with edges 1, 3, 9, 27: `first`, then distances
            // [1, 3), [3, 9), [9, 27) and [27, ...)
            bands: vec![(0, 1), (1, 3), (3, 9), (9, 27), (27, usize::MAX)],
            max_logit: false,
            key_blocks: None,
            key_sums_from: None,
        };
        let table = weight_rows(&w, q_start, KeyWindow::CAUSAL, &wants)
            .unwrap()
            .unwrap();
        let rows = split_table(&table, &wants);
        let host = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let close = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() < 1e-6 || (x.is_nan() && y.is_nan()))
        };
        assert!(close(
            &rows.entropy.to_vec(),
            &host(row_entropy(&w).unwrap())
        ));
        assert!(close(&rows.sum.to_vec(), &host(w.sum(D::Minus1).unwrap())));
        assert!(close(
            &rows.first.to_vec(),
            &host(w.narrow(3, 0, 1).unwrap())
        ));
        // band masses by their definition: key 0 of a query i > 0 is `first`; the others
        // go to the band of their distance t = i - j
        let data = host(w.clone());
        for row in 0..h * n {
            let i = q_start + row % n;
            let weights = &data[row * keys..row * keys + i + 1];
            let cell = &table[row * wants.width()..(row + 1) * wants.width()];
            let first = if i > 0 { weights[0] } else { 0.0 };
            assert!((cell[BANDS] - first).abs() < 1e-6);
            for (k, &(lo, hi)) in wants.bands.iter().enumerate() {
                let mass: f32 = (0..=i)
                    .filter(|&j| !(j == 0 && i > 0) && i - j >= lo && i - j < hi)
                    .map(|j| weights[j])
                    .sum();
                let got = cell[BANDS + 1 + k];
                assert!(
                    (got - mass).abs() < 1e-5,
                    "row {row} band {k}: {got} vs {mass}"
                );
            }
        }
        // q.k sums over the visible pairs (the invisible entries above are 0 already)
        let (sum, abs_sum) = qk_sums(&w, q_start, KeyWindow::CAUSAL).unwrap().unwrap();
        let want = |t: Tensor| t.sum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((sum - want(w.clone())).abs() < 1e-4, "{sum}");
        assert!((abs_sum - want(w.abs().unwrap())).abs() < 1e-4, "{abs_sum}");
    }
}

#[cfg(all(test, feature = "cuda"))]
mod cuda_tests {
    //! The CUDA row kernels and the CPU row pass fill the same tables (run on a GPU machine:
    //! `cargo test --release --features cuda cuda_`).
    use super::*;
    use asa_kernels::row_table::{split_table, Column};
    use candle_core::Device;

    #[test]
    fn cuda_row_kernels_equal_the_cpu_pass() {
        let gpu = Device::new_cuda(0).expect("the cuda feature's tests need a CUDA device");
        // rows of 301-305 keys (a warp per row: more keys than threads, and a tail) and of
        // 5,001-5,003 keys (a block per row)
        for (b, h, q_start, n) in [(2, 3, 300, 5), (1, 2, 5000, 3)] {
            row_kernel_case(&gpu, b, h, q_start, n);
        }
    }

    fn row_kernel_case(gpu: &Device, b: usize, h: usize, q_start: usize, n: usize) {
        let keys = q_start + n;
        let mut data = Vec::new();
        for s in 0..b * h {
            for r in 0..n {
                for j in 0..keys {
                    let x = ((s * 31 + r * 7 + j * 13) % 23) as f32 / 23.0 - 0.1;
                    // invisible keys hold garbage that must not be read; one tiny weight
                    let x = if j > q_start + r {
                        1e6
                    } else if j == 5 {
                        1e-40
                    } else {
                        x
                    };
                    data.push(x);
                }
            }
        }
        let cpu_w = Tensor::from_vec(data, (b, h, n, keys), &Device::Cpu).unwrap();
        let gpu_w = cpu_w.to_device(gpu).unwrap();
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: vec![(0, 1), (1, 10), (10, 100), (100, usize::MAX)],
            max_logit: false,
            key_blocks: None,
            key_sums_from: None,
        };
        let causal = KeyWindow::CAUSAL;
        let cpu_table = weight_rows(&cpu_w, q_start, causal, &wants)
            .unwrap()
            .unwrap();
        let gpu_table = weight_rows(&gpu_w, q_start, causal, &wants)
            .unwrap()
            .unwrap();
        let (cpu, gpu_rows) = (
            split_table(&cpu_table, &wants),
            split_table(&gpu_table, &wants),
        );
        let close = |a: &Column, b: &Column| {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b.iter()) {
                assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} vs {y}");
            }
        };
        close(&gpu_rows.first, &cpu.first);
        close(&gpu_rows.sum, &cpu.sum);
        close(&gpu_rows.entropy, &cpu.entropy);
        assert_eq!(gpu_rows.bands.len(), cpu.bands.len());
        for (g, c) in gpu_rows.bands.iter().zip(&cpu.bands) {
            close(g, c);
        }
        // a row without positive mass has no entropy (NaN) on both
        let negative = Tensor::new(&[[[[-0.5f32, -0.5]]]], &Device::Cpu).unwrap();
        let table = weight_rows(&negative.to_device(gpu).unwrap(), 1, causal, &wants)
            .unwrap()
            .unwrap();
        assert!(split_table(&table, &wants).entropy.get(0).is_nan());
        let (s, a) = qk_sums(&cpu_w, q_start, KeyWindow::CAUSAL)
            .unwrap()
            .unwrap();
        let (gs, ga) = qk_sums(&gpu_w, q_start, KeyWindow::CAUSAL)
            .unwrap()
            .unwrap();
        assert!(
            (gs - s).abs() <= 1e-6 * s.abs() && (ga - a).abs() <= 1e-6 * a,
            "{gs} {s} {ga} {a}"
        );
    }
}
