//! The operands of the bf16 GEMM ([`super::bf16_gemm`]): a weight `[n, k]` packed once in
//! pair-interleaved panels, and activation rows rounded to bf16.
//!
//! `vdpbf16ps` multiplies bf16 pairs and adds both products into one f32 lane, so the
//! weight's two values of a k pair sit side by side: panel `p` holds, for each k pair `j`,
//! the [`PANEL_WIDTH`] output columns `n = p * PANEL_WIDTH + lane` as
//! `(w[n][2j], w[n][2j + 1])`. One 64-byte load then gives 16 lanes' pairs, and one 32-bit
//! broadcast of an activation row's pair `(x[2j], x[2j + 1])` multiplies them all.

use half::bf16;

/// Output columns of one panel: two 16-lane vectors.
pub const PANEL_WIDTH: usize = 32;

/// A weight `[n, k]` in bf16, packed for [`super::bf16_gemm::matmul`] (k padded to even
/// with zeros, n to a multiple of [`PANEL_WIDTH`]).
pub struct PackedWeight {
    /// Output columns (rows of the weight).
    pub n: usize,
    /// Inner dimension (columns of the weight).
    pub k: usize,
    pairs: usize,
    data: Vec<u16>,
}

impl PackedWeight {
    /// Packs the row-major weight `w` `[n, k]` (the bits of bf16 values).
    pub fn pack(w: &[bf16], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "a weight [{n}, {k}] has {} values", w.len());
        if k % 2 == 1 {
            return Self::pack_with(n, k, |col, i| w[col * k + i].to_bits());
        }
        Self::pack_panels(n, k, |_, p, panel| {
            let first = p * PANEL_WIDTH;
            let cols = ((p + 1) * PANEL_WIDTH).min(n) - first;
            pack_even_panel(&w[first * k..(first + cols) * k], k, panel);
        })
    }

    /// Packs the bf16 weight `[n, k]` (k even) whose rows `rows` `fill(rows, buffer)` writes
    /// to `buffer` (`rows.len()` rows of k values, row-major): read panel by panel into a
    /// small buffer and packed from there while it is in cache, on both cores, so the
    /// weight is never held unpacked. `None` when a `fill` returns false.
    pub fn pack_rows(
        n: usize,
        k: usize,
        fill: impl Fn(std::ops::Range<usize>, &mut [bf16]) -> bool + Sync,
    ) -> Option<Self> {
        assert!(k.is_multiple_of(2), "pack_rows: an odd k ({k})");
        let failed = std::sync::atomic::AtomicBool::new(false);
        let packed = Self::pack_panels(n, k, |buffer, p, panel| {
            use std::sync::atomic::Ordering::Relaxed;
            let rows = p * PANEL_WIDTH..((p + 1) * PANEL_WIDTH).min(n);
            buffer.resize(rows.len() * k, bf16::ZERO);
            if failed.load(Relaxed) || !fill(rows, buffer) {
                failed.store(true, Relaxed);
                return;
            }
            pack_even_panel(buffer, k, panel);
        });
        (!failed.into_inner()).then_some(packed)
    }

    /// Packs the row-major f32 matrix `w` `[n, k]` rounded to the nearest bf16 (the keys of
    /// an attention head: `[keys, d]` against query rows of `d`).
    pub fn pack_f32(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "a matrix [{n}, {k}] has {} values", w.len());
        Self::pack_with(n, k, |col, i| bf16::from_f32(w[col * k + i]).to_bits())
    }

    /// Packs the transpose of the row-major f32 matrix `m` `[k, n]` rounded to bf16: the
    /// values of an attention head `[keys, d]`, weighed by rows of key weights.
    pub fn pack_f32_transposed(m: &[f32], k: usize, n: usize) -> Self {
        assert_eq!(m.len(), n * k, "a matrix [{k}, {n}] has {} values", m.len());
        Self::pack_with(n, k, |col, i| bf16::from_f32(m[i * n + col]).to_bits())
    }

    /// Packs the weight whose value at output column `col`, inner index `i` is
    /// `bits(col, i)`.
    fn pack_with(n: usize, k: usize, bits: impl Fn(usize, usize) -> u16 + Sync) -> Self {
        // written in memory order: pair by pair, the panel's columns side by side (the
        // padding of an odd k and of the last panel's missing columns stays 0)
        Self::pack_panels(n, k, |_, p, panel| {
            let cols = p * PANEL_WIDTH..((p + 1) * PANEL_WIDTH).min(n);
            for (j, pair) in panel.chunks_exact_mut(PANEL_WIDTH * 2).enumerate() {
                for (lane, col) in cols.clone().enumerate() {
                    pair[lane * 2] = bits(col, 2 * j);
                    if 2 * j + 1 < k {
                        pair[lane * 2 + 1] = bits(col, 2 * j + 1);
                    }
                }
            }
        })
    }

    /// A zeroed packed weight `[n, k]` whose panels `fill(scratch, p, panel)` writes (with
    /// a scratch buffer of its thread's), the panels shared out to both cores (a streamed
    /// 8B model packs 16 GB).
    fn pack_panels(
        n: usize,
        k: usize,
        fill: impl Fn(&mut Vec<bf16>, usize, &mut [u16]) + Sync,
    ) -> Self {
        let pairs = k.div_ceil(2);
        let panel_len = pairs * PANEL_WIDTH * 2;
        let mut data = vec![0u16; n.div_ceil(PANEL_WIDTH) * panel_len];
        // small weights (an attention head's keys) stay on the calling thread
        fill_chunks(&mut data, panel_len.max(1), n * k, fill);
        PackedWeight { n, k, pairs, data }
    }

    /// k pairs (k / 2 rounded up).
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// Panels of [`PANEL_WIDTH`] columns.
    pub fn panels(&self) -> usize {
        self.n.div_ceil(PANEL_WIDTH)
    }

    /// Panel `p`: `pairs` x [`PANEL_WIDTH`] x 2 values.
    pub fn panel(&self, p: usize) -> &[u16] {
        let len = self.pairs * PANEL_WIDTH * 2;
        &self.data[p * len..(p + 1) * len]
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 2
    }

    /// The weight `[n, k]` back in row-major order.
    pub fn unpack(&self) -> Vec<bf16> {
        let mut w = Vec::with_capacity(self.n * self.k);
        for col in 0..self.n {
            let panel = self.panel(col / PANEL_WIDTH);
            let lane = col % PANEL_WIDTH;
            w.extend(
                (0..self.k).map(|i| {
                    bf16::from_bits(panel[(i / 2) * PANEL_WIDTH * 2 + lane * 2 + (i & 1)])
                }),
            );
        }
        w
    }
}

/// Activation rows `[m, k]` as bf16 bits, each row padded to an even length with a zero
/// (`stride` values a row).
pub struct Bf16Rows {
    /// Rows.
    pub m: usize,
    /// Values a row, padding included (even).
    pub stride: usize,
    /// The bits, row-major.
    pub bits: Vec<u16>,
}

impl Bf16Rows {
    /// f32 rows `[m, k]` rounded to the nearest bf16 (ties to even), as torch rounds.
    pub fn from_f32(xs: &[f32], m: usize, k: usize) -> Self {
        let stride = k.div_ceil(2) * 2;
        let mut bits = vec![0u16; m * stride];
        if k > 0 {
            for (src, dst) in xs.chunks_exact(k).zip(bits.chunks_exact_mut(stride)) {
                round_row(src, &mut dst[..k]);
            }
        }
        Bf16Rows { m, stride, bits }
    }

    /// An empty buffer for [`Bf16Rows::round_into`] to fill.
    pub fn empty() -> Self {
        Bf16Rows {
            m: 0,
            stride: 0,
            bits: Vec::new(),
        }
    }

    /// Fills the buffer with the f32 rows `[m, k]` of `xs` (row stride `src_stride` >= k)
    /// rounded to the nearest bf16, each row padded to an even length with a zero; the
    /// allocation is kept from call to call.
    pub fn round_into(&mut self, xs: &[f32], m: usize, k: usize, src_stride: usize) {
        assert!(src_stride >= k && (m == 0 || xs.len() >= (m - 1) * src_stride + k));
        self.m = m;
        self.stride = k.div_ceil(2) * 2;
        self.bits.resize(m * self.stride, 0);
        for r in 0..m {
            let dst = &mut self.bits[r * self.stride..(r + 1) * self.stride];
            round_row(&xs[r * src_stride..r * src_stride + k], &mut dst[..k]);
            dst[k..].fill(0);
        }
    }
}

/// Fills `data` chunk by chunk (`len` values each) with `fill(scratch, index, chunk)`, each
/// thread with a scratch buffer of its own: on both cores when the operand has at least
/// 2^20 `values` (a layer's weight or activations), on the calling thread below that (an
/// attention head's keys), where handing out tasks would cost more than the work.
pub(crate) fn fill_chunks<T: Send, S: Send>(
    data: &mut [T],
    len: usize,
    values: usize,
    fill: impl Fn(&mut Vec<S>, usize, &mut [T]) + Sync,
) {
    use rayon::prelude::*;
    match values >= 1 << 20 {
        true => data
            .par_chunks_exact_mut(len)
            .enumerate()
            .for_each_init(Vec::new, |scratch, (i, chunk)| fill(scratch, i, chunk)),
        false => {
            let mut scratch = Vec::new();
            for (i, chunk) in data.chunks_exact_mut(len).enumerate() {
                fill(&mut scratch, i, chunk);
            }
        }
    }
}

/// f32 values rounded to the nearest bf16 (ties to even), both cores taking parts of a long
/// slice: the analysis' bf16 tensors are made from f32 sums this way.
pub fn round_to_bf16(src: &[f32]) -> Vec<bf16> {
    use rayon::prelude::*;
    /// Values per task: large enough that a task outweighs its scheduling.
    const CHUNK: usize = 1 << 16;
    let mut out = vec![bf16::ZERO; src.len()];
    out.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(dst, src)| {
            // SAFETY: bf16 is a transparent u16
            let bits =
                unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u16, dst.len()) };
            round_row(src, bits);
        });
    out
}

/// Rounds a row with the AVX-512 conversions where the CPU has them (`vcvtne2ps2bf16`: round
/// to nearest even, as `half` does), else with `half`.
pub(crate) fn round_row(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if super::bf16_gemm::available() {
        // SAFETY: the CPU has AVX-512 F, BW and BF16 (checked just above)
        unsafe { round_row_avx512(src, dst) };
        return;
    }
    crate::simd_dispatch!(round_bits_row(src, dst));
}

/// [`round_row`] elsewhere: `half`'s bits, branch-free so that it vectorises.
#[inline(always)]
fn round_bits_row(src: &[f32], dst: &mut [u16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = super::bf16_elementwise::bf16_bits(s);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn round_row_avx512(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 32 <= n {
        let lo = _mm512_loadu_ps(src.as_ptr().add(i));
        let hi = _mm512_loadu_ps(src.as_ptr().add(i + 16));
        let both: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.as_mut_ptr().add(i) as *mut _, both);
        i += 32;
    }
    for j in i..n {
        dst[j] = half::bf16::from_f32(src[j]).to_bits();
    }
}

/// Packs the rows `rows` (up to [`PANEL_WIDTH`] rows of an even `k`, row-major) into
/// `panel`: a transpose of the rows' 32-bit pairs. Blocks of 16 pairs x 16 rows go through
/// AVX-512 registers where the CPU has them (a streamed 8B model packs 16 GB: 4 % of its
/// run pair by pair), the rest pair by pair, in blocks of 16 pairs (one 64-byte line of each
/// row), row by row.
fn pack_even_panel(rows: &[bf16], k: usize, panel: &mut [u16]) {
    const BLOCK: usize = 16;
    let pairs = k / 2;
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::bf16_gemm::available() {
        done = pairs - pairs % BLOCK;
        let n_rows = rows.len() / k.max(1);
        assert!(n_rows <= PANEL_WIDTH && panel.len() >= pairs * PANEL_WIDTH * 2);
        // SAFETY: the CPU has AVX-512 F (checked above); the rows hold `n_rows` rows of k
        // values and the panel `pairs` pairs of PANEL_WIDTH lanes (asserted)
        unsafe { pack_blocks_avx512(rows, k, n_rows, done, panel) };
    }
    for j0 in (done..pairs).step_by(BLOCK) {
        let j1 = (j0 + BLOCK).min(pairs);
        for (lane, row) in rows.chunks_exact(k.max(1)).enumerate() {
            for (t, pair) in row[2 * j0..2 * j1].chunks_exact(2).enumerate() {
                let at = ((j0 + t) * PANEL_WIDTH + lane) * 2;
                panel[at] = pair[0].to_bits();
                panel[at + 1] = pair[1].to_bits();
            }
        }
    }
}

/// The pairs `0..pairs` (a multiple of 16) of `n_rows` rows of k values into `panel`: each
/// 16 x 16 block of 32-bit pairs transposed in registers (rows past `n_rows` are zeros).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_blocks_avx512(
    rows: &[bf16],
    k: usize,
    n_rows: usize,
    pairs: usize,
    panel: &mut [u16],
) {
    use std::arch::x86_64::*;
    let src = rows.as_ptr() as *const u16;
    let dst = panel.as_mut_ptr();
    for j0 in (0..pairs).step_by(16) {
        for lane0 in (0..PANEL_WIDTH).step_by(16) {
            let mut r = [_mm512_setzero_si512(); 16];
            for (i, r) in r.iter_mut().enumerate() {
                if lane0 + i < n_rows {
                    *r = _mm512_loadu_si512(src.add((lane0 + i) * k + 2 * j0) as *const _);
                }
            }
            for (c, column) in transpose_16x16(r).into_iter().enumerate() {
                let at = dst.add(((j0 + c) * PANEL_WIDTH + lane0) * 2);
                _mm512_storeu_si512(at as *mut _, column);
            }
        }
    }
}

/// The transpose of 16 rows of 16 32-bit values: output `c` holds value `c` of each row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_16x16(r: [std::arch::x86_64::__m512i; 16]) -> [std::arch::x86_64::__m512i; 16] {
    use std::arch::x86_64::*;
    // per 128-bit lane L: t[2i] = rows 2i, 2i+1 of values 4L, 4L+1; t[2i+1] of 4L+2, 4L+3
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + c], per lane L: value 4L + c of rows 4g..4g+3
    let mut u = [_mm512_setzero_si512(); 16];
    for g in 0..4 {
        u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    // value 4L + c of every row: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    let mut out = [_mm512_setzero_si512(); 16];
    for c in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
        let v1 = _mm512_shuffle_i32x4::<0xEE>(u[c], u[4 + c]);
        let w0 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
        let w1 = _mm512_shuffle_i32x4::<0xEE>(u[8 + c], u[12 + c]);
        out[c] = _mm512_shuffle_i32x4::<0x88>(v0, w0);
        out[4 + c] = _mm512_shuffle_i32x4::<0xDD>(v0, w0);
        out[8 + c] = _mm512_shuffle_i32x4::<0x88>(v1, w1);
        out[12 + c] = _mm512_shuffle_i32x4::<0xDD>(v1, w1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_interleave_the_pairs_of_each_column() {
        // w[n][k] = n * 10 + k, n = 33 (two panels), k = 3 (two pairs, the last padded)
        let (n, k) = (33, 3);
        let w: Vec<bf16> = (0..n * k)
            .map(|i| bf16::from_f32(((i / k) * 10 + i % k) as f32))
            .collect();
        let p = PackedWeight::pack(&w, n, k);
        assert_eq!((p.pairs(), p.panels()), (2, 2));
        let at = |panel: usize, pair: usize, lane: usize, half: usize| {
            bf16::from_bits(p.panel(panel)[pair * PANEL_WIDTH * 2 + lane * 2 + half]).to_f32()
        };
        assert_eq!(at(0, 0, 5, 0), 50.0);
        assert_eq!(at(0, 0, 5, 1), 51.0);
        assert_eq!(at(0, 1, 5, 0), 52.0);
        assert_eq!(at(0, 1, 5, 1), 0.0);
        assert_eq!(at(1, 1, 0, 0), 322.0);
        assert_eq!(at(1, 0, 1, 0), 0.0);
        assert_eq!(p.unpack(), w);
    }

    #[test]
    fn even_widths_pack_as_the_value_by_value_layout() {
        // the pair-copying path of an even k against the value-by-value one (pack_f32 of
        // the same values): a partial last panel, a pair count that is not a multiple of
        // the 16-pair block, and a weight large enough to be packed on both cores
        for (n, k) in [(70, 74), (33, 2), (300, 3500)] {
            let w: Vec<bf16> = (0..n * k)
                .map(|i| bf16::from_f32((i as f32 * 0.377).sin()))
                .collect();
            let wide: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
            let (fast, each) = (
                PackedWeight::pack(&w, n, k),
                PackedWeight::pack_f32(&wide, n, k),
            );
            assert_eq!((fast.pairs, fast.panels()), (each.pairs, each.panels()));
            assert!(fast.data == each.data, "[{n}, {k}]");
            assert_eq!(fast.unpack(), w);
            // the same weight read panel by panel through a buffer
            let read = PackedWeight::pack_rows(n, k, |rows, buffer| {
                buffer.copy_from_slice(&w[rows.start * k..rows.end * k]);
                true
            });
            assert!(
                read.is_some_and(|r| r.data == each.data),
                "[{n}, {k}] by rows"
            );
            // a panel that cannot be read fails the whole weight
            assert!(PackedWeight::pack_rows(n, k, |rows, _| rows.start == 0).is_none() || n <= 32);
        }
    }

    #[test]
    fn f32_matrices_pack_as_their_bf16_rounding_and_transposes_as_their_transpose() {
        let (n, k) = (37, 5);
        let m: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.731).sin() * 3.0).collect();
        let rounded: Vec<bf16> = m.iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(PackedWeight::pack_f32(&m, n, k).unpack(), rounded);
        // m read as [k, n]: its transpose [n, k]
        let t = PackedWeight::pack_f32_transposed(&m, k, n);
        assert_eq!((t.n, t.k), (n, k));
        let want: Vec<bf16> = (0..n)
            .flat_map(|col| (0..k).map(move |i| (col, i)))
            .map(|(col, i)| bf16::from_f32(m[i * n + col]))
            .collect();
        assert_eq!(t.unpack(), want);
    }

    #[test]
    fn strided_rows_round_into_a_reused_buffer() {
        let xs: Vec<f32> = (0..40).map(|i| i as f32 * 1.001 - 7.0).collect();
        let mut rows = Bf16Rows::empty();
        rows.round_into(&xs, 3, 8, 10);
        rows.round_into(&xs, 4, 7, 10);
        assert_eq!((rows.m, rows.stride, rows.bits.len()), (4, 8, 32));
        for r in 0..4 {
            for i in 0..7 {
                assert_eq!(
                    rows.bits[r * 8 + i],
                    bf16::from_f32(xs[r * 10 + i]).to_bits()
                );
            }
            assert_eq!(rows.bits[r * 8 + 7], 0, "row {r} padded");
        }
    }

    #[test]
    fn long_slices_round_as_half_does() {
        let xs: Vec<f32> = (0..200_003)
            .map(|i| (i as f32 * 0.0137).sin() * 3e4 + f32::from_bits(0x3f80_8000 + (i % 7)))
            .collect();
        let want: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(round_to_bf16(&xs), want);
    }

    #[test]
    fn rows_round_to_nearest_even_as_half_does() {
        let xs: Vec<f32> = (0..70)
            .map(|i| (i as f32 * 0.37).sin() * 1e3 + f32::from_bits(0x3f80_8000 + i))
            .collect();
        let rows = Bf16Rows::from_f32(&xs, 2, 35);
        assert_eq!(rows.stride, 36);
        for (r, row) in xs.chunks(35).enumerate() {
            for (i, &x) in row.iter().enumerate() {
                assert_eq!(rows.bits[r * 36 + i], bf16::from_f32(x).to_bits());
            }
            assert_eq!(rows.bits[r * 36 + 35], 0);
        }
    }
}
