//! The online softmax of one query row over its key tiles (the running maximum, every sum
//! rescaled when it grows) and the row table's sums (first-token mass, entropy, QK sums,
//! distance bands, block_map's key blocks), finished into the row's table line.

use std::mem::MaybeUninit;

use super::logits::*;
use super::task::*;
use crate::attention::cpu_softmax::exp_row;
use asa_hooks::row_pass::{band_keys, qk_row, EntropySums};
use asa_kernels::cpu::host::{lane_max, lane_sum, lane_sum_max};
use asa_kernels::row_table::{
    KeyBlocks, RowWants, BANDS, ENTROPY, FIRST, QK_ABS_SUM, QK_SUM, SINK_MASS, SUM,
};

/// The running sums of one query row (f64; the tile's sums come in f32 lanes).
#[derive(Debug, Clone)]
pub(super) struct RowSums {
    /// The row's largest y so far (-inf before its first tile).
    pub(super) max: f32,
    /// sum e and sum e (y - max).
    pub(super) sum: f64,
    pub(super) sum_ey: f64,
    /// e of key 0.
    pub(super) first: f64,
    /// Raw q.k sum and absolute sum (no rescaling).
    pub(super) qk: f64,
    pub(super) qk_abs: f64,
    /// The largest logit before soft-capping (-inf without a cap).
    pub(super) uncapped_max: f32,
}

impl RowSums {
    pub(super) fn new() -> Self {
        RowSums {
            uncapped_max: f32::NEG_INFINITY,
            max: f32::NEG_INFINITY,
            sum: 0.0,
            sum_ey: 0.0,
            first: 0.0,
            qk: 0.0,
            qk_abs: 0.0,
        }
    }
}

/// A row's running sums over parts of its keys: its distance bands and, for `block_map`,
/// its key blocks' sums and maxima (empty slices where nobody asked for them).
pub(super) struct RowParts<'a> {
    pub(super) bands: &'a mut [f64],
    pub(super) block_sums: &'a mut [f64],
    pub(super) block_max: &'a mut [f32],
}

impl RowParts<'_> {
    /// No parts (the first pass of Affine-Scaled tiles).
    pub(super) fn none() -> RowParts<'static> {
        RowParts {
            bands: &mut [],
            block_sums: &mut [],
            block_max: &mut [],
        }
    }

    /// Every sum and maximum times `c` (the row's maximum grew); only the key blocks up to
    /// `last` hold any yet.
    #[inline(always)]
    pub(super) fn rescale(&mut self, c: f64, last: usize) {
        for b in self.bands.iter_mut() {
            *b *= c;
        }
        let seen = (last + 1).min(self.block_sums.len());
        for s in &mut self.block_sums[..seen] {
            *s *= c;
        }
        let c = c as f32;
        // a block not seen yet stays at -inf (never -inf * 0 where c underflows)
        for m in self.block_max[..seen].iter_mut().filter(|m| m.is_finite()) {
            *m *= c;
        }
    }

    /// Adds query `i`'s weights `w` of the tile from key `k0` (their sum `tile_sum`).
    #[inline(always)]
    pub(super) fn add(&mut self, wants: &RowWants, at: RowTile, w: &[f32], tile_sum: f64) {
        self.add_bands(wants, at, w, tile_sum);
        if let Some(blocks) = wants.key_blocks {
            self.add_blocks(blocks, at.k0, w, tile_sum);
        }
    }

    /// Adds query `i`'s weights `w` of the tile from key `k0` to its distance-band sums; a
    /// band holding the whole tile takes `tile_sum`, the sum of `w` (most tiles of a long
    /// row).
    #[inline(always)]
    pub(super) fn add_bands(&mut self, wants: &RowWants, at: RowTile, w: &[f32], tile_sum: f64) {
        let RowTile { i, k0 } = at;
        let tile_end = k0 + w.len();
        for (band, &(lo, hi)) in self.bands.iter_mut().zip(&wants.bands) {
            let (start, end) = band_keys(i, lo, hi);
            let (start, end) = (start.max(k0), end.min(tile_end));
            if start == k0 && end == tile_end {
                *band += tile_sum;
            } else if start < end {
                *band += lane_sum(&w[start - k0..end - k0], |v| v);
            }
        }
    }

    /// Adds the weights `w` of the tile from key `k0` to the row's key blocks' sums and
    /// maxima; a tile within one block takes `tile_sum`, the sum of `w`.
    #[inline(always)]
    pub(super) fn add_blocks(&mut self, blocks: KeyBlocks, k0: usize, w: &[f32], tile_sum: f64) {
        // a loop, not `KeyBlocks::split`'s closure: the body stays in the caller's SIMD copy
        let end = k0 + w.len();
        let (mut b, mut lo) = (blocks.block_of(k0), k0);
        while lo < end {
            let hi = blocks.start(b + 1).min(end);
            let part = &w[lo - k0..hi - k0];
            let (sum, max) = if hi - lo == w.len() {
                (tile_sum, lane_max(part, |v| v))
            } else {
                lane_sum_max(part)
            };
            self.block_sums[b] += sum;
            self.block_max[b] = self.block_max[b].max(max);
            (b, lo) = (b + 1, hi);
        }
    }
}

/// A finished row's parts (see [`RowParts`]): its distance bands' sums and its key blocks'
/// sums and maxima.
#[derive(Debug, Clone, Copy)]
pub(super) struct PartTotals<'a> {
    pub(super) bands: &'a [f64],
    pub(super) block_sums: &'a [f64],
    pub(super) block_max: &'a [f32],
}

/// A task's rows' parts, row after row (`TaskAt::n_bands` and `TaskAt::n_blocks` a row).
pub(super) struct TaskParts {
    pub(super) bands: Vec<f64>,
    pub(super) block_sums: Vec<f64>,
    pub(super) block_max: Vec<f32>,
}

impl TaskParts {
    pub(super) fn new(at: &TaskAt) -> Self {
        TaskParts {
            bands: vec![0f64; at.rows * at.n_bands],
            block_sums: vec![0f64; at.rows * at.n_blocks],
            block_max: vec![f32::NEG_INFINITY; at.rows * at.n_blocks],
        }
    }

    /// Task row `r`'s running parts.
    pub(super) fn row(&mut self, at: &TaskAt, r: usize) -> RowParts<'_> {
        let (nb, nk) = (at.n_bands, at.n_blocks);
        RowParts {
            bands: &mut self.bands[r * nb..(r + 1) * nb],
            block_sums: &mut self.block_sums[r * nk..(r + 1) * nk],
            block_max: &mut self.block_max[r * nk..(r + 1) * nk],
        }
    }

    /// Task row `r`'s finished parts.
    pub(super) fn totals(&self, at: &TaskAt, r: usize) -> PartTotals<'_> {
        let (nb, nk) = (at.n_bands, at.n_blocks);
        PartTotals {
            bands: &self.bands[r * nb..(r + 1) * nb],
            block_sums: &self.block_sums[r * nk..(r + 1) * nk],
            block_max: &self.block_max[r * nk..(r + 1) * nk],
        }
    }
}

/// Writes a row's key-block columns (see `asa_kernels::row_table`): its blocks' sums and
/// maxima times `weight` (the row's 1 / denominator; 1 for weights already final); a block
/// the row saw no key of (maximum -inf) holds 0.
pub(super) fn write_blocks(cell: &mut [f32], wants: &RowWants, parts: PartTotals, weight: f64) {
    let Some((blocks, c)) = wants.key_blocks.zip(wants.key_block_columns()) else {
        return;
    };
    let (sums, maxima) = (parts.block_sums, parts.block_max);
    let (sum_cells, max_cells) = cell[c..].split_at_mut(blocks.blocks);
    for b in 0..blocks.blocks {
        if maxima[b] > f32::NEG_INFINITY || maxima[b].is_nan() {
            sum_cells[b] = (sums[b] * weight) as f32;
            max_cells[b] = (maxima[b] as f64 * weight) as f32;
        }
    }
}

/// A finished row's values for its table line.
pub(super) struct RowLine {
    pub(super) first: f32,
    pub(super) sum: f32,
    pub(super) entropy: f32,
    pub(super) sink_mass: f32,
    pub(super) qk: f64,
    pub(super) qk_abs: f64,
    /// The row's largest logit over its visible keys.
    pub(super) max_logit: f32,
}

/// Writes a row's table line (the columns of `asa_kernels::row_table` that `wants` asks
/// for, the sink and q.k columns always) with its bands' weights `bands`.
pub(super) fn write_line(
    cell: &mut [f32],
    wants: &RowWants,
    line: RowLine,
    bands: impl Iterator<Item = f32>,
    i: usize,
) {
    if wants.first {
        cell[FIRST] = line.first;
    }
    if wants.sum {
        cell[SUM] = line.sum;
    }
    if wants.entropy {
        cell[ENTROPY] = line.entropy;
    }
    cell[SINK_MASS] = line.sink_mass;
    cell[QK_SUM] = line.qk as f32;
    cell[QK_ABS_SUM] = line.qk_abs as f32;
    if !wants.bands.is_empty() {
        cell[BANDS] = if i > 0 { line.first } else { 0.0 };
        for (cell, band) in cell[BANDS + 1..].iter_mut().zip(bands) {
            *cell = band;
        }
    }
    if let Some(c) = wants.max_logit_column() {
        cell[c] = line.max_logit;
    }
}

/// What the online pass keeps of one query row, all rescaled when its maximum grows: its
/// running sums, its band and key-block sums (`parts`) and its output row `out` (the last
/// two empty in the first pass of Affine-Scaled tiles).
pub(super) struct RowState<'a> {
    pub(super) sums: &'a mut RowSums,
    pub(super) parts: RowParts<'a>,
    pub(super) out: &'a mut [f32],
}

/// One query row's visible keys of one key tile (`at`): raw q.k `x` in, e out (`weights`,
/// same length), the row's `state` updated.
#[inline(always)]
pub(super) fn tile_row(
    x: &[f32],
    rule: RowRule,
    weights: &mut [MaybeUninit<f32>],
    state: RowState,
    at: RowTile,
    wants: Option<&RowWants>,
) {
    let RowState {
        sums,
        mut parts,
        out,
    } = state;
    let RowTile { k0, .. } = at;
    let (qk, qk_abs) = qk_row(x);
    sums.qk += qk;
    sums.qk_abs += qk_abs;
    if matches!(rule.logits, RowLogits::SoftCap(_)) {
        let scale = rule.scale;
        sums.uncapped_max = sums.uncapped_max.max(lane_max(x, |v| v * scale));
    }
    let (x, scale) = row_logits(x, rule);
    let max = sums.max.max(lane_max(x, |v| v * scale));
    if max > sums.max && sums.max > f32::NEG_INFINITY {
        // e (y - m) = e' (y - m') / c + e' (m' - m) / c with c = exp(m - m') and e' = c e
        let shift = sums.max as f64 - max as f64;
        let c = shift.exp();
        sums.sum_ey = c * (sums.sum_ey + sums.sum * shift);
        sums.sum *= c;
        sums.first *= c;
        let last = wants
            .and_then(|w| w.key_blocks)
            .map_or(0, |b| b.block_of(k0));
        parts.rescale(c, last);
        let c = c as f32;
        for o in out.iter_mut() {
            *o *= c;
        }
    }
    sums.max = max;
    let entropy = wants.is_some_and(|w| w.entropy);
    let (sum, sum_ey) = if entropy {
        exp_row::<true>(x, weights, scale, max)
    } else {
        exp_row::<false>(x, weights, scale, max)
    };
    sums.sum += sum;
    sums.sum_ey += sum_ey;
    // SAFETY: exp_row wrote every element of `weights`
    let e = unsafe { &*(weights as *const [MaybeUninit<f32>] as *const [f32]) };
    if k0 == 0 {
        sums.first += e[0] as f64;
    }
    if let Some(wants) = wants {
        parts.add(wants, at, e, sum);
    }
}

/// The row's largest logit, before soft-capping where there is a cap.
pub(super) fn max_before_cap(sums: &RowSums) -> f32 {
    match sums.uncapped_max > f32::NEG_INFINITY {
        true => sums.uncapped_max,
        false => sums.max,
    }
}

/// Query `i`'s table line (the columns of `asa_kernels::row_table`) and its output row
/// divided by the denominator; `sink` is the row's sink logit; `parts` its bands' sums and
/// its key blocks' sums and maxima.
pub(super) fn finish_row(
    sums: &RowSums,
    parts: PartTotals,
    out: &mut [f32],
    cell: &mut [f32],
    sink: Option<f32>,
    i: usize,
    wants: Option<&RowWants>,
) {
    let (weight, sink_mass) = row_weight(sums, sink);
    for o in out.iter_mut() {
        *o = (*o as f64 * weight) as f32;
    }
    let Some(wants) = wants else {
        cell[0] = sink_mass as f32;
        return;
    };
    let line = RowLine {
        first: (sums.first * weight) as f32,
        sum: (sums.sum * weight) as f32,
        entropy: EntropySums {
            total: sums.sum,
            x: sums.sum_ey,
        }
        .entropy(),
        sink_mass: sink_mass as f32,
        qk: sums.qk,
        qk_abs: sums.qk_abs,
        max_logit: max_before_cap(sums),
    };
    let bands = parts.bands.iter().map(|b| (b * weight) as f32);
    write_line(cell, wants, line, bands, i);
    write_blocks(cell, wants, parts, weight);
}

/// What a row's e = exp(y - m) (m its maximum) are multiplied by to be its weights, and the
/// sink's mass. The denominator is shifted by max(m, sink), so that neither term overflows:
/// the real keys' sums take c = exp(m - max) <= 1, the sink exp(sink - max) <= 1.
pub(super) fn row_weight(sums: &RowSums, sink: Option<f32>) -> (f64, f64) {
    let max = sink.map_or(sums.max, |s| sums.max.max(s)) as f64;
    let c = (sums.max as f64 - max).exp();
    let sink_e = sink.map_or(0.0, |s| (s as f64 - max).exp());
    let inv = 1.0 / (sums.sum * c + sink_e);
    (c * inv, sink_e * inv)
}
