//! A bf16 GEMM with f32 accumulation: `c[m, n] = sum_k x[m, k] w[n, k]` on AVX-512 BF16
//! (`vdpbf16ps`: 32 bf16 products summed into 16 f32 lanes per instruction, twice the
//! multiply-adds of an f32 FMA), runtime-detected; a portable loop computes the same sums
//! elsewhere.
//!
//! The structure follows llama.cpp's tinyBLAS and IREE's `mmt4d` bf16 tiles: the weight is
//! packed once in pair-interleaved panels ([`PackedWeight`]), and a register tile keeps 24
//! independent accumulators (more than the instruction's latency x throughput), fed per k
//! pair by the panels' loads and one broadcast per row. [`matmul`] runs
//! [`bf16_row_tiles::TILE_ROWS`] rows (packed in [`RowTiles`]) x two panels (64 columns:
//! four loads, six broadcasts per 24 instructions); [`product_into`] runs [`TILE_ROWS`]
//! row-major rows x one panel (the attention tiles). Threads take disjoint ranges of panels;
//! within a thread the panels' k block ([`K_BLOCK_PAIRS`] pairs, 128 KiB a panel) stays in
//! L2 while every row block goes by.

use rayon::prelude::*;

use super::bf16_panels::{PackedWeight, PANEL_WIDTH};
use super::bf16_row_tiles::{self, RowTiles};

/// Rows of [`product_into`]'s register tile (x 2 vectors of 16 lanes: 24 accumulators of
/// 32).
pub const TILE_ROWS: usize = 12;
/// k pairs of one pass over a panel (128 KiB of panel: held in L2 across row blocks).
pub const K_BLOCK_PAIRS: usize = 1024;

/// Whether this CPU runs the AVX-512 BF16 kernel (else [`matmul`] uses the portable loop);
/// `ASA_SIMD` below `avx512` turns it off.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::simd::level() == super::simd::SimdLevel::Avx512
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `x [m, k] w^T`: `[m, n]` f32, row-major; the products of bf16 values summed in f32.
pub fn matmul(x: &RowTiles, w: &PackedWeight) -> Vec<f32> {
    assert_eq!(x.pairs(), w.pairs(), "rows and weight disagree on k");
    let mut out = vec![0f32; x.m * w.n];
    if x.m == 0 || w.n == 0 {
        return out;
    }
    // panels two by two (the last alone when their count is odd)
    let pairs_of_panels = w.panels().div_ceil(2);
    let threads = rayon::current_num_threads().clamp(1, pairs_of_panels);
    let per_thread = pairs_of_panels.div_ceil(threads);
    let out_at = OutPtr(out.as_mut_ptr());
    (0..threads).into_par_iter().for_each(|t| {
        let first = (t * per_thread).min(pairs_of_panels);
        let end = ((t + 1) * per_thread).min(pairs_of_panels);
        for two in first..end {
            // SAFETY: each pair of panels writes only its own columns of `out` ([`Target`])
            unsafe { panels_product(x, w, 2 * two, out_at.get()) };
        }
    });
    out
}

/// A part of `x w^T` on the calling thread (the attention tiles run one per task): the rows
/// of `x` (`m` rows of `x_stride` bits from its first pair on) against the output columns
/// `cols` and the k pairs `pairs` of `w`; written to `out` (row stride `stride`, column 0 is
/// `cols.start`), or added to it when `accumulate`. `cols.start` is a multiple of
/// [`PANEL_WIDTH`].
#[allow(clippy::too_many_arguments)]
pub fn product_into(
    (x, x_stride, m): (&[u16], usize, usize),
    w: &PackedWeight,
    cols: std::ops::Range<usize>,
    pairs: std::ops::Range<usize>,
    out: &mut [f32],
    stride: usize,
    accumulate: bool,
) {
    assert!(cols.start.is_multiple_of(PANEL_WIDTH) && cols.end <= w.n && pairs.end <= w.pairs());
    assert!(
        x_stride >= pairs.len() * 2 && (m == 0 || x.len() >= (m - 1) * x_stride + pairs.len() * 2)
    );
    assert!(cols.len() <= stride && (m == 0 || out.len() >= (m - 1) * stride + cols.len()));
    if pairs.is_empty() {
        if !accumulate {
            for row in out.chunks_mut(stride).take(m) {
                row[..cols.len()].fill(0.0);
            }
        }
        return;
    }
    for col in cols.clone().step_by(PANEL_WIDTH) {
        let data = &w.panel(col / PANEL_WIDTH)[pairs.start * PANEL_WIDTH * 2..];
        for first in (0..pairs.len()).step_by(K_BLOCK_PAIRS) {
            let block = (pairs.len() - first).min(K_BLOCK_PAIRS);
            for row in (0..m).step_by(TILE_ROWS) {
                let target = Target {
                    // SAFETY (of the tile below): inside `out`, checked above
                    at: unsafe { out.as_mut_ptr().add(row * stride + (col - cols.start)) },
                    stride,
                    rows: (m - row).min(TILE_ROWS),
                    cols: (cols.end - col).min(PANEL_WIDTH),
                    accumulate: accumulate || first > 0,
                };
                let rows = &x[row * x_stride + first * 2..];
                // SAFETY: the rows, the panel's pairs and the target lie inside their
                // buffers (the extents checked above)
                unsafe {
                    tile(
                        rows,
                        x_stride,
                        &data[first * PANEL_WIDTH * 2..],
                        block,
                        target,
                    )
                };
            }
        }
    }
}

/// The output buffer shared by the threads, each writing its own columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: threads write disjoint column ranges of the buffer, which outlives them
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer (a method, so closures capture the `Send` wrapper, not its field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Where one tile's sums go: `rows` x `cols` of `out` from `at`, row stride `stride`; added
/// to what is there when `accumulate` (the k blocks after the first).
#[derive(Clone, Copy)]
struct Target {
    at: *mut f32,
    stride: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
}

/// The columns of panels `first` and `first + 1` (the first alone when it is the last),
/// every row, every k block.
///
/// # Safety
/// `out` holds `x.m * w.n` values and no other thread writes these panels' columns.
unsafe fn panels_product(x: &RowTiles, w: &PackedWeight, first: usize, out: *mut f32) {
    let cols = (w.n - first * PANEL_WIDTH).min(2 * PANEL_WIDTH);
    let second = (first + 1 < w.panels()).then(|| w.panel(first + 1));
    let data = w.panel(first);
    for first_pair in (0..w.pairs()).step_by(K_BLOCK_PAIRS) {
        let pairs = first_pair..(first_pair + K_BLOCK_PAIRS).min(w.pairs());
        let at = pairs.start * PANEL_WIDTH * 2;
        let panels = (&data[at..], second.map(|panel| &panel[at..]));
        for tile in 0..x.tiles() {
            let row = tile * bf16_row_tiles::TILE_ROWS;
            let target = Target {
                at: out.add(row * w.n + first * PANEL_WIDTH),
                stride: w.n,
                rows: (x.m - row).min(bf16_row_tiles::TILE_ROWS),
                cols,
                accumulate: first_pair > 0,
            };
            let rows = &x.tile(tile)[pairs.start * bf16_row_tiles::TILE_ROWS..];
            tiled_tile(rows, panels, pairs.len(), target);
        }
    }
}

/// One register tile over `pairs` k pairs: `rows` (bits, row stride `stride`) against
/// `panel` (from the block's first pair).
unsafe fn tile(rows: &[u16], stride: usize, panel: &[u16], pairs: usize, target: Target) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        return avx512::strided_tile(rows.as_ptr(), stride, panel.as_ptr(), pairs, target);
    }
    let pair = |r: usize, j: usize| {
        rows[r * stride + 2 * j] as u32 | (rows[r * stride + 2 * j + 1] as u32) << 16
    };
    portable_tile(pair, (panel, None), pairs, target)
}

/// One register tile of [`RowTiles`] rows over `pairs` k pairs: `rows` (a tile, from the
/// block's first pair) against one or two panels (from the block's first pair).
unsafe fn tiled_tile(rows: &[u32], panels: (&[u16], Option<&[u16]>), pairs: usize, t: Target) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        let second = panels.1.map(|panel| panel.as_ptr());
        return avx512::tiled_tile(rows.as_ptr(), (panels.0.as_ptr(), second), pairs, t);
    }
    let pair = |r: usize, j: usize| rows[j * bf16_row_tiles::TILE_ROWS + r];
    portable_tile(pair, panels, pairs, t)
}

/// The tile in plain f32 arithmetic: each pair's two products added, then into the lane's
/// sum, as `vdpbf16ps` orders them; `pair(r, j)` is row `r`'s k pair `j` (low half first),
/// columns past the first panel's from the second.
unsafe fn portable_tile(
    pair: impl Fn(usize, usize) -> u32,
    panels: (&[u16], Option<&[u16]>),
    pairs: usize,
    t: Target,
) {
    let value = |bits: u16| f32::from_bits((bits as u32) << 16);
    // columns past the first panel only where there is a second (as the callers pass them)
    let cols = match panels.1 {
        Some(_) => t.cols,
        None => t.cols.min(PANEL_WIDTH),
    };
    for r in 0..t.rows {
        for c in 0..cols {
            let (panel, lane) = match (c.checked_sub(PANEL_WIDTH), panels.1) {
                (Some(lane), Some(second)) => (second, lane),
                _ => (panels.0, c),
            };
            let mut sum = 0f32;
            for j in 0..pairs {
                let bits = pair(r, j);
                let (a0, a1) = (value(bits as u16), value((bits >> 16) as u16));
                let at = j * PANEL_WIDTH * 2 + lane * 2;
                let (b0, b1) = (value(panel[at]), value(panel[at + 1]));
                sum += a0 * b0 + a1 * b1;
            }
            let dst = t.at.add(r * t.stride + c);
            *dst = if t.accumulate { *dst + sum } else { sum };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Target, PANEL_WIDTH, TILE_ROWS};
    use crate::cpu::bf16_row_tiles;

    /// A tile of `t.rows` row-major rows x one panel, on the kernel compiled for that many.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and BF16; `rows` holds `t.rows` rows of `stride` and
    /// `panel` `pairs` pairs of [`PANEL_WIDTH`] lanes.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub unsafe fn strided_tile(
        rows: *const u16,
        stride: usize,
        panel: *const u16,
        pairs: usize,
        t: Target,
    ) {
        let rows = Rows::Strided(rows as *const i32, stride / 2);
        macro_rules! rows {
            ($($n:literal)*) => {
                match t.rows {
                    $($n => kernel::<$n, 1>(rows, [panel], pairs, t),)*
                    _ => unreachable!("a tile has 1 to {TILE_ROWS} rows"),
                }
            };
        }
        rows!(1 2 3 4 5 6 7 8 9 10 11 12)
    }

    /// A tile of `t.rows` rows of a [`bf16_row_tiles::RowTiles`] tile x one or two panels,
    /// on the kernel compiled for that many.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and BF16; `rows` holds `pairs` pairs of a tile and each
    /// panel `pairs` pairs of [`PANEL_WIDTH`] lanes.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub unsafe fn tiled_tile(
        rows: *const u32,
        panels: (*const u16, Option<*const u16>),
        pairs: usize,
        t: Target,
    ) {
        let rows = Rows::Tiled(rows as *const i32);
        macro_rules! rows {
            ($($n:literal)*) => {
                match (t.rows, panels.1) {
                    $(($n, Some(second)) => kernel::<$n, 2>(rows, [panels.0, second], pairs, t),)*
                    $(($n, None) => kernel::<$n, 1>(rows, [panels.0], pairs, t),)*
                    _ => unreachable!("a tile has 1 to {} rows", bf16_row_tiles::TILE_ROWS),
                }
            };
        }
        rows!(1 2 3 4 5 6)
    }

    /// Where a kernel finds row `r`'s k pair `j`.
    #[derive(Clone, Copy)]
    enum Rows {
        /// Row-major rows, this many pairs apart.
        Strided(*const i32, usize),
        /// A [`bf16_row_tiles::RowTiles`] tile: the rows' pairs side by side.
        Tiled(*const i32),
    }

    /// `R` rows x `P` panels (32 columns each): per k pair 2P panel loads, one broadcast per
    /// row, 2RP `vdpbf16ps` into independent accumulators; then stored (masked to `t.cols`).
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    #[inline]
    unsafe fn kernel<const R: usize, const P: usize>(
        rows: Rows,
        panels: [*const u16; P],
        pairs: usize,
        t: Target,
    ) {
        match rows {
            Rows::Strided(at, pair_stride) => {
                let pair = |r: usize, j: usize| at.add(r * pair_stride + j).read_unaligned();
                kernel_of::<R, P>(pair, panels, pairs, t)
            }
            Rows::Tiled(at) => {
                let pair =
                    |r: usize, j: usize| at.add(j * bf16_row_tiles::TILE_ROWS + r).read_unaligned();
                kernel_of::<R, P>(pair, panels, pairs, t)
            }
        }
    }

    /// [`kernel`] with row `r`'s k pair `j` at `pair(r, j)`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    #[inline]
    unsafe fn kernel_of<const R: usize, const P: usize>(
        pair: impl Fn(usize, usize) -> i32,
        panels: [*const u16; P],
        pairs: usize,
        t: Target,
    ) {
        const { assert!(P == 1 || P == 2) };
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        for j in 0..pairs {
            let zero: __m512bh = std::mem::transmute(_mm512_setzero_si512());
            let mut b = [zero; 4];
            for p in 0..P {
                let at = panels[p].add(j * PANEL_WIDTH * 2);
                let load = |at: *const u16| -> __m512bh {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(at as *const _))
                };
                b[2 * p] = load(at);
                b[2 * p + 1] = load(at.add(32));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair(r, j)));
                for v in 0..2 * P {
                    acc[v] = _mm512_dpbf16_ps(acc[v], a, b[v]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, &sum) in acc.iter().take(2 * P).enumerate() {
                let lanes = t.cols.saturating_sub(v * 16).min(16);
                if lanes == 0 {
                    continue;
                }
                let mask: __mmask16 = ((1u32 << lanes) - 1) as u16;
                let dst = t.at.add(r * t.stride + v * 16);
                let value = match t.accumulate {
                    true => _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, dst)),
                    false => sum,
                };
                _mm512_mask_storeu_ps(dst, mask, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use half::bf16;

    use super::*;
    use crate::cpu::bf16_panels::Bf16Rows;

    /// xorshift values in [-2, 2) with a spread of magnitudes.
    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    #[test]
    fn products_match_float64_within_the_f32_accumulation_bound() {
        // odd sizes and tails: rows not a multiple of the tile, columns not of the panel,
        // k odd and past one k block
        for &(m, k, n) in &[
            (1, 1, 1),
            (13, 7, 33),
            (25, 2051, 47),
            (12, 64, 32),
            (3, 130, 95),
        ] {
            let x = values(m as u64 * 7 + k as u64, m * k);
            let w: Vec<bf16> = values(n as u64 * 3 + 1, n * k)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let got = matmul(&RowTiles::from_f32(&x, m, k), &PackedWeight::pack(&w, n, k));
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut size) = (0f64, 0f64);
                    for l in 0..k {
                        let a = bf16::from_f32(x[i * k + l]).to_f64();
                        let p = a * w[j * k + l].to_f64();
                        want += p;
                        size += p.abs();
                    }
                    // products of bf16 values are exact in f32; the k sums round in f32
                    let bound = k as f64 * f32::EPSILON as f64 * size + 1e-30;
                    let err = (got[i * n + j] as f64 - want).abs();
                    assert!(err <= bound, "{m}x{k}x{n} [{i},{j}]: {err} > {bound}");
                }
            }
        }
    }

    #[test]
    fn parts_of_a_product_equal_the_matching_part_of_the_whole() {
        // columns from the second panel, pairs from an odd offset, accumulated onto ones
        let (m, k, n) = (17, 2 * 600, 100);
        let x = values(11, m * k);
        let w: Vec<bf16> = values(12, n * k).into_iter().map(bf16::from_f32).collect();
        let packed = PackedWeight::pack(&w, n, k);
        let (cols, pairs) = (32..90, 3..563);
        // the rows' k values of those pairs, and the whole product of those columns
        let sub_x: Vec<f32> = (0..m)
            .flat_map(|r| x[r * k + pairs.start * 2..r * k + pairs.end * 2].to_vec())
            .collect();
        let sub_w: Vec<bf16> = cols
            .clone()
            .flat_map(|c| w[c * k + pairs.start * 2..c * k + pairs.end * 2].to_vec())
            .collect();
        let want = matmul(
            &RowTiles::from_f32(&sub_x, m, pairs.len() * 2),
            &PackedWeight::pack(&sub_w, cols.len(), pairs.len() * 2),
        );
        let rows = Bf16Rows::from_f32(&x, m, k);
        let stride = cols.len() + 5;
        let mut out = vec![1f32; m * stride];
        let x_part = (&rows.bits[pairs.start * 2..], rows.stride, m);
        product_into(
            x_part,
            &packed,
            cols.clone(),
            pairs.clone(),
            &mut out,
            stride,
            true,
        );
        for r in 0..m {
            for c in 0..cols.len() {
                let (got, want) = (out[r * stride + c], want[r * cols.len() + c] + 1.0);
                assert!(
                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "[{r},{c}] {got} vs {want}"
                );
            }
            assert_eq!(
                out[r * stride + cols.len()],
                1.0,
                "row {r}: past the columns"
            );
        }
        product_into(
            x_part,
            &packed,
            cols.clone(),
            pairs,
            &mut out,
            stride,
            false,
        );
        assert!((out[0] - want[0]).abs() <= 1e-4 * (1.0 + want[0].abs()));
    }

    #[test]
    fn the_kernels_and_the_portable_loop_agree() {
        // three panels (two together, then one partial alone), tiles of 6, 6 and 2 rows
        let (m, k, n) = (14, 40, 70);
        let x = values(5, m * k);
        let w: Vec<bf16> = values(6, n * k).into_iter().map(bf16::from_f32).collect();
        let packed = PackedWeight::pack(&w, n, k);
        let tiles = RowTiles::from_f32(&x, m, k);
        let rows = Bf16Rows::from_f32(&x, m, k);
        let fast = matmul(&tiles, &packed);
        let mut strided = vec![0f32; m * n];
        product_into(
            (&rows.bits, k, m),
            &packed,
            0..n,
            0..k / 2,
            &mut strided,
            n,
            false,
        );
        let mut slow = vec![0f32; m * n];
        for first in (0..packed.panels()).step_by(2) {
            let second = (first + 1 < packed.panels()).then(|| packed.panel(first + 1));
            for tile in 0..tiles.tiles() {
                let row = tile * bf16_row_tiles::TILE_ROWS;
                let target = Target {
                    // SAFETY: inside `slow`
                    at: unsafe { slow.as_mut_ptr().add(row * n + first * PANEL_WIDTH) },
                    stride: n,
                    rows: (m - row).min(bf16_row_tiles::TILE_ROWS),
                    cols: (n - first * PANEL_WIDTH).min(2 * PANEL_WIDTH),
                    accumulate: false,
                };
                let at = tiles.tile(tile);
                let pair = |r: usize, j: usize| at[j * bf16_row_tiles::TILE_ROWS + r];
                let panels = (packed.panel(first), second);
                // SAFETY: the target lies inside `slow`
                unsafe { portable_tile(pair, panels, k / 2, target) };
            }
        }
        for ((a, b), c) in fast.iter().zip(&slow).zip(&strided) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
            assert!((c - b).abs() <= 1e-5 * (1.0 + b.abs()), "{c} vs {b}");
        }
    }
}
