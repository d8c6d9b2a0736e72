//! Flash-style causal attention on the CPU: a query block's output and its row table
//! without the block's `[heads, n, keys]` weights ever existing whole. For each (sequence,
//! kv head) and tile of queries, the keys are visited in tiles of [`KEY_TILE`]: the q.k
//! tile (one small gemm), the online softmax (the row maximum so far, with every sum
//! rescaled when it grows), the row table's sums and the value product (a second gemm)
//! all stay in the core's caches. The block's logits and weights, 150 MB per block at
//! 32k tokens for SmolLM2, are never written to memory and read back.
//!
//! It replaces the materialised block (the q.k product, the fused softmax of
//! `super::cpu_softmax` with its row table, the variant's logit rule and the value product)
//! where the probe takes row tables, or nothing: plain, LogN and scale-invariant logits,
//! with or without sinks, softmax or Affine-Scaled weights ([`AffineTile`], two passes),
//! f32, no autograd. The row table's columns are those of
//! `crate::probe::row_table`; each is a sum over the row's keys of e = exp(y - m), y the
//! row's logits and m their running maximum, divided at the end by the row's denominator
//! S (+ the sink's e); `block_map`'s key-block columns are such sums over each key block
//! and the largest e there, rescaled with the others when m grows. The numbers are the materialised path's up to rounding, except where
//! a sink logit exceeds every real logit by more than ~87: there every f32 e of the
//! materialised path underflows and its entropy is NaN, while the tiles, which never shift
//! by the sink, keep the entropy of the (tiny but positive) weights the real keys get.

use std::mem::MaybeUninit;

use candle_core::{Device, Tensor};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::cpu_affine::{affine_weight, beta};
use super::cpu_kept_weights::{rows_within, KeptWeights};
use super::cpu_softmax::exp_row;
use super::variant::BetaLength;
use crate::cpu::bf16_gemm::product_into;
use crate::cpu::bf16_panels::{Bf16Rows, PackedWeight, PANEL_WIDTH};
use crate::cpu::host::{lane_max, lane_sum, lane_sum_max, with_cpu_f32};
use crate::error::Result;
use crate::probe::row_pass::{band_keys, clamped_entropy_sums, qk_row, EntropySums};
use crate::probe::row_table::{
    KeyBlocks, RowWants, BANDS, ENTROPY, FIRST, QK_ABS_SUM, QK_SUM, SINK_MASS, SUM,
};
use crate::probe::KeyWindow;
use crate::simd_dispatch;

/// Keys per tile. With [`ROWS_PER_TASK`] rows, a tile's logits and weights (384 KB each)
/// and its key and value tiles stay within a core's L2 and L3 share; measured best of 256,
/// 512 and 1,024 (SmolLM2 at 4k tokens, this project's 2-core AMD EPYC VM, 2026-11-24).
pub const KEY_TILE: usize = 512;

/// Query rows (the query heads of one kv head x queries) per task: enough rows for the
/// gemm kernels to run at speed; measured best of 48, 96, 192 and 384.
pub const ROWS_PER_TASK: usize = 192;

/// q, k and v of a layer: `[batch, heads, t, d]` and `[batch, kv, t, d]` tensors, or their
/// host values.
#[derive(Debug)]
pub struct Qkv<'a, T: ?Sized> {
    pub q: &'a T,
    pub k: &'a T,
    pub v: &'a T,
}

// references only: copied whatever `T` is (a derive would ask `T: Copy`)
impl<T: ?Sized> Clone for Qkv<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for Qkv<'_, T> {}

/// A query block: `n` queries from `q_start`, each seeing the keys `window` allows.
#[derive(Debug, Clone, Copy)]
pub struct QueryBlock {
    pub q_start: usize,
    pub n: usize,
    pub window: KeyWindow,
}

/// How the tiles' logits and weights are made: raw q.k times `scale`, then `rule`; the
/// weights are softmax, or Affine-Scaled with `affine`.
#[derive(Debug, Clone, Copy)]
pub struct Logits<'a> {
    pub scale: f32,
    pub rule: &'a TileLogits,
    pub affine: Option<&'a AffineTile>,
}

/// A layer's host q, k, v and, for bf16 products, its packed keys and values.
#[derive(Clone, Copy)]
struct Operands<'a> {
    qkv: Qkv<'a, [f32]>,
    packed: Option<&'a PackedKv>,
}

/// One kv head's keys and values `[t, d]` (host), and for the bf16 products the same
/// packed.
#[derive(Clone, Copy)]
struct KeyValues<'a> {
    k: &'a [f32],
    v: &'a [f32],
    packed: Option<&'a PackedHead>,
}

/// A layer's keys and values packed once for bf16 products (`crate::cpu::bf16_gemm`): with
/// them the tiles multiply as FlashAttention does in bf16. q is multiplied by the scale in
/// f32, then rounded to bf16; k and v are rounded (exact for a bf16 model's); each tile's
/// weights e are rounded for the value product only. Products are summed in f32; the
/// logits, the online softmax and every row sum stay f32/f64.
pub struct PackedKv {
    /// Per (sequence, kv head).
    heads: Vec<PackedHead>,
}

/// One kv head's keys as a `[t, d]` weight (keys are output columns of q.k) and its values
/// as a `[d, t]` one (keys are the inner dimension of p.v).
struct PackedHead {
    k: PackedWeight,
    v: PackedWeight,
}

impl PackedKv {
    /// Packs `k` and `v` `[batch, kv, t, d]` (contiguous f32 on the CPU; `None` otherwise),
    /// one head per thread.
    pub fn pack(k: &Tensor, v: &Tensor) -> Result<Option<Self>> {
        let (b, kv, t, d) = k.dims4()?;
        if v.dims4()? != (b, kv, t, d) {
            return Ok(None);
        }
        let heads = with_cpu_f32(k, |k| {
            with_cpu_f32(v, |v| {
                (0..b * kv)
                    .into_par_iter()
                    .map(|h| {
                        let at = h * t * d..(h + 1) * t * d;
                        PackedHead {
                            k: PackedWeight::pack_f32(&k[at.clone()], t, d),
                            v: PackedWeight::pack_f32_transposed(&v[at], t, d),
                        }
                    })
                    .collect()
            })
        });
        Ok(heads.flatten().map(|heads| PackedKv { heads }))
    }
}

/// One task's rows: the query heads sharing kv head `kv_head` of sequence `seq`, queries
/// `q0 .. q0 + nq`.
#[derive(Debug, Clone, Copy)]
struct TaskRows {
    seq: usize,
    kv_head: usize,
    q0: usize,
    nq: usize,
}

/// Tile sizes (tests take small ones to cross every tile boundary).
#[derive(Debug, Clone, Copy)]
pub struct Tiles {
    pub rows: usize,
    pub keys: usize,
}

impl Default for Tiles {
    fn default() -> Self {
        Tiles {
            rows: ROWS_PER_TASK,
            keys: KEY_TILE,
        }
    }
}

/// How the scaled logits s = scale * q.k of a row become the logits y it normalises (the
/// variants' logit rules, computed as their candle versions compute them).
#[derive(Debug, Clone)]
pub enum TileLogits {
    /// y = s.
    Plain,
    /// LogN: y = s * (s_h ln(i + 1)), s_h per head.
    Logn { head_scale: Vec<f32> },
    /// Soft-capped (Gemma 2): y = cap tanh(s / cap); the row table's max-logit column keeps
    /// the largest s, before capping.
    SoftCap { cap: f32 },
    /// Scale-invariant: y = s a_t + m_t at distance t = i - j, from coefficient tables
    /// stored in reverse (`a[len - 1 - t]`, `crate::attention::reversed_coefficients`) so
    /// that a row's keys read one slice in key order.
    Distance { a: Vec<f32>, m: Vec<f32> },
}

/// One row's rule: its factor, or its keys' coefficient slices from key `k0` on.
enum RowLogits<'a> {
    Plain,
    Factor(f32),
    SoftCap(f32),
    Distance(&'a [f32], &'a [f32]),
}

/// How one row's logits are made from its raw q.k: times `scale`, then `logits`, written to
/// `scratch` where the rule changes them.
struct RowRule<'a> {
    logits: RowLogits<'a>,
    scale: f32,
    scratch: &'a mut [f32],
}

/// Query `i`'s keys of one tile, from key `k0` on.
#[derive(Debug, Clone, Copy)]
struct RowTile {
    i: usize,
    k0: usize,
}

impl TileLogits {
    /// The rule of query `i` of head `head` for keys from `k0`.
    fn row(&self, head: usize, i: usize, k0: usize) -> RowLogits<'_> {
        match self {
            TileLogits::Plain => RowLogits::Plain,
            TileLogits::SoftCap { cap } => RowLogits::SoftCap(*cap),
            TileLogits::Logn { head_scale } => {
                RowLogits::Factor(head_scale[head] * ((i + 1) as f64).ln() as f32)
            }
            TileLogits::Distance { a, m } => {
                // key j is at distance i - j, stored at a.len() - 1 - (i - j)
                let from = a.len() - 1 - i + k0;
                RowLogits::Distance(&a[from..], &m[from..])
            }
        }
    }
}

/// Sizes of one layer's attention: `q` `[batch, heads, t, d]`, `k`/`v` `[batch, kv, t, d]`,
/// and the keys each query sees.
#[derive(Debug, Clone, Copy)]
struct Dims {
    heads: usize,
    kv: usize,
    t: usize,
    d: usize,
    window: KeyWindow,
}

/// The running sums of one query row (f64; the tile's sums come in f32 lanes).
#[derive(Debug, Clone)]
struct RowSums {
    /// The row's largest y so far (-inf before its first tile).
    max: f32,
    /// sum e and sum e (y - max).
    sum: f64,
    sum_ey: f64,
    /// e of key 0.
    first: f64,
    /// Raw q.k sum and absolute sum (no rescaling).
    qk: f64,
    qk_abs: f64,
    /// The largest logit before soft-capping (-inf without a cap).
    uncapped_max: f32,
}

impl RowSums {
    fn new() -> Self {
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

/// The logits y a row normalises from its raw q.k `x`, as (y', s) with y = s * y': `x`
/// itself for plain logits, else the rule's logits written to its scratch row and s = 1.
#[inline(always)]
fn row_logits<'a>(x: &'a [f32], rule: RowRule<'a>) -> (&'a [f32], f32) {
    let RowRule {
        logits,
        scale,
        scratch,
    } = rule;
    match logits {
        RowLogits::Plain => (x, scale),
        RowLogits::Factor(factor) => {
            let y = &mut scratch[..x.len()];
            for (y, &v) in y.iter_mut().zip(x) {
                *y = v * scale * factor;
            }
            (&*y, 1.0)
        }
        RowLogits::Distance(a, m) => {
            let y = &mut scratch[..x.len()];
            for (((y, &v), &a), &m) in y.iter_mut().zip(x).zip(a).zip(m) {
                *y = v * scale * a + m;
            }
            (&*y, 1.0)
        }
        RowLogits::SoftCap(cap) => {
            let y = &mut scratch[..x.len()];
            for (y, &v) in y.iter_mut().zip(x) {
                *y = (v * scale / cap).tanh() * cap;
            }
            (&*y, 1.0)
        }
    }
}

/// A row's running sums over parts of its keys: its distance bands and, for `block_map`,
/// its key blocks' sums and maxima (empty slices where nobody asked for them).
struct RowParts<'a> {
    bands: &'a mut [f64],
    block_sums: &'a mut [f64],
    block_max: &'a mut [f32],
}

impl RowParts<'_> {
    /// No parts (the first pass of Affine-Scaled tiles).
    fn none() -> RowParts<'static> {
        RowParts {
            bands: &mut [],
            block_sums: &mut [],
            block_max: &mut [],
        }
    }

    /// Every sum and maximum times `c` (the row's maximum grew); only the key blocks up to
    /// `last` hold any yet.
    #[inline(always)]
    fn rescale(&mut self, c: f64, last: usize) {
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
    fn add(&mut self, wants: &RowWants, at: RowTile, w: &[f32], tile_sum: f64) {
        self.add_bands(wants, at, w, tile_sum);
        if let Some(blocks) = wants.key_blocks {
            self.add_blocks(blocks, at.k0, w, tile_sum);
        }
    }

    /// Adds query `i`'s weights `w` of the tile from key `k0` to its distance-band sums; a
    /// band holding the whole tile takes `tile_sum`, the sum of `w` (most tiles of a long
    /// row).
    #[inline(always)]
    fn add_bands(&mut self, wants: &RowWants, at: RowTile, w: &[f32], tile_sum: f64) {
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
    fn add_blocks(&mut self, blocks: KeyBlocks, k0: usize, w: &[f32], tile_sum: f64) {
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
struct PartTotals<'a> {
    bands: &'a [f64],
    block_sums: &'a [f64],
    block_max: &'a [f32],
}

/// A task's rows' parts, row after row (`TaskAt::n_bands` and `TaskAt::n_blocks` a row).
struct TaskParts {
    bands: Vec<f64>,
    block_sums: Vec<f64>,
    block_max: Vec<f32>,
}

impl TaskParts {
    fn new(at: &TaskAt) -> Self {
        TaskParts {
            bands: vec![0f64; at.rows * at.n_bands],
            block_sums: vec![0f64; at.rows * at.n_blocks],
            block_max: vec![f32::NEG_INFINITY; at.rows * at.n_blocks],
        }
    }

    /// Task row `r`'s running parts.
    fn row(&mut self, at: &TaskAt, r: usize) -> RowParts<'_> {
        let (nb, nk) = (at.n_bands, at.n_blocks);
        RowParts {
            bands: &mut self.bands[r * nb..(r + 1) * nb],
            block_sums: &mut self.block_sums[r * nk..(r + 1) * nk],
            block_max: &mut self.block_max[r * nk..(r + 1) * nk],
        }
    }

    /// Task row `r`'s finished parts.
    fn totals(&self, at: &TaskAt, r: usize) -> PartTotals<'_> {
        let (nb, nk) = (at.n_bands, at.n_blocks);
        PartTotals {
            bands: &self.bands[r * nb..(r + 1) * nb],
            block_sums: &self.block_sums[r * nk..(r + 1) * nk],
            block_max: &self.block_max[r * nk..(r + 1) * nk],
        }
    }
}

/// Writes a row's key-block columns (see `crate::probe::row_table`): its blocks' sums and
/// maxima times `weight` (the row's 1 / denominator; 1 for weights already final); a block
/// the row saw no key of (maximum -inf) holds 0.
fn write_blocks(cell: &mut [f32], wants: &RowWants, parts: PartTotals, weight: f64) {
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
struct RowLine {
    first: f32,
    sum: f32,
    entropy: f32,
    sink_mass: f32,
    qk: f64,
    qk_abs: f64,
    /// The row's largest logit over its visible keys.
    max_logit: f32,
}

/// Writes a row's table line (the columns of `crate::probe::row_table` that `wants` asks
/// for, the sink and q.k columns always) with its bands' weights `bands`.
fn write_line(
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
struct RowState<'a> {
    sums: &'a mut RowSums,
    parts: RowParts<'a>,
    out: &'a mut [f32],
}

/// One query row's visible keys of one key tile (`at`): raw q.k `x` in, e out (`weights`,
/// same length), the row's `state` updated.
#[inline(always)]
fn tile_row(
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
fn max_before_cap(sums: &RowSums) -> f32 {
    match sums.uncapped_max > f32::NEG_INFINITY {
        true => sums.uncapped_max,
        false => sums.max,
    }
}

/// Query `i`'s table line (the columns of `crate::probe::row_table`) and its output row
/// divided by the denominator; `sink` is the row's sink logit; `parts` its bands' sums and
/// its key blocks' sums and maxima.
fn finish_row(
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
fn row_weight(sums: &RowSums, sink: Option<f32>) -> (f64, f64) {
    let max = sink.map_or(sums.max, |s| sums.max.max(s)) as f64;
    let c = (sums.max as f64 - max).exp();
    let sink_e = sink.map_or(0.0, |s| (s as f64 - max).exp());
    let inv = 1.0 / (sums.sum * c + sink_e);
    (c * inv, sink_e * inv)
}

/// A task's output rows `[rows, d]`, table cells `[rows, width]` and key_received sums
/// `[groups, keys]` (empty when not asked for).
type TaskOutput = (Vec<f32>, Vec<f32>, Vec<f32>);

/// Affine-Scaled weights a_ij = alpha_i p_ij + beta_i over the visible keys, with beta_i =
/// (alpha_ma - alpha_i) / N (`crate::attention::cpu_affine::beta`): they need each row's
/// finished softmax, so their tiles take two passes over the keys (the first finds each
/// row's maximum and denominator, the second forms the weights, their sums and the output).
#[derive(Debug, Clone)]
pub struct AffineTile {
    /// alpha of every query, `[batch, heads, t]`.
    pub alpha: Vec<f32>,
    /// The stored moving average of alpha, `[heads]`.
    pub alpha_ma: Vec<f32>,
    pub beta_length: BetaLength,
    /// N of `BetaLength::Full`: the analysed window's length.
    pub seq_len: usize,
}

/// The running sums of one row's Affine-Scaled weights (plain sums: the second pass knows
/// the softmax's final maximum and denominator).
#[derive(Debug, Clone, Default)]
struct AffineSums {
    first: f64,
    sum: f64,
    /// [`clamped_entropy_sums`]: positive mass and sum w ln w.
    entropy: EntropySums,
}

/// How one row's Affine-Scaled weights are made: alpha p + beta, p = e / S the softmax from
/// the row's final maximum and denominator (`softmax`).
#[derive(Debug, Clone, Copy)]
struct AffineRow<'a> {
    softmax: &'a RowSums,
    alpha: f32,
    beta: f32,
}

/// What the Affine-Scaled second pass keeps of one row: its weights' sums and its band and
/// key-block sums.
struct AffineState<'a> {
    acc: &'a mut AffineSums,
    parts: RowParts<'a>,
}

/// The second pass over one row's visible keys of a tile (`at`): the weights of `row` into
/// `weights`, and their sums into `state`.
#[inline(always)]
fn affine_tile_row(
    x: &[f32],
    rule: RowRule,
    weights: &mut [f32],
    row: AffineRow,
    state: AffineState,
    at: RowTile,
    wants: Option<&RowWants>,
) {
    let AffineRow {
        softmax,
        alpha,
        beta,
    } = row;
    let AffineState { acc, mut parts } = state;
    let (y, scale) = row_logits(x, rule);
    // SAFETY: f32 -> MaybeUninit<f32> of the same slice; exp_row only writes floats
    let uninit = unsafe { &mut *(weights as *mut [f32] as *mut [MaybeUninit<f32>]) };
    exp_row::<false>(y, uninit, scale, softmax.max);
    // as the materialised path rounds it: p = e * (1 / S) in f32
    let inv = (1.0 / softmax.sum) as f32;
    for w in weights.iter_mut() {
        *w = affine_weight(alpha, *w * inv, beta);
    }
    if at.k0 == 0 {
        acc.first = weights[0] as f64;
    }
    let tile_sum = lane_sum(weights, |w| w);
    acc.sum += tile_sum;
    acc.entropy.add(clamped_entropy_sums(weights));
    if let Some(wants) = wants {
        parts.add(wants, at, weights, tile_sum);
    }
}

/// The table line of a row of Affine-Scaled weights (no sink).
fn finish_affine_row(
    softmax: &RowSums,
    acc: &AffineSums,
    parts: PartTotals,
    cell: &mut [f32],
    i: usize,
    wants: Option<&RowWants>,
) {
    let Some(wants) = wants else {
        cell[0] = 0.0;
        return;
    };
    let line = RowLine {
        first: acc.first as f32,
        sum: acc.sum as f32,
        entropy: acc.entropy.entropy(),
        sink_mass: 0.0,
        qk: softmax.qk,
        qk_abs: softmax.qk_abs,
        max_logit: max_before_cap(softmax),
    };
    let bands = parts.bands.iter().map(|&b| b as f32);
    write_line(cell, wants, line, bands, i);
    write_blocks(cell, wants, parts, 1.0);
}

/// Where a task's tiles sit: `rows` query rows, head dim `d`, tile buffers of row stride
/// `tile`, this tile's `width` keys from key `k0`.
#[derive(Debug, Clone, Copy)]
struct TileAt {
    rows: usize,
    d: usize,
    tile: usize,
    k0: usize,
    width: usize,
}

/// logits `[rows, tile]` <- q_rows `[rows, d]` x the key rows k0..k0 + width of `k`.
fn qk_tile(logits: &mut [f32], q_rows: &[f32], k: &[f32], at: TileAt) {
    let TileAt {
        rows,
        d,
        tile,
        k0,
        width,
    } = at;
    assert!(logits.len() >= rows * tile && q_rows.len() >= rows * d && k.len() >= (k0 + width) * d);
    // SAFETY: the extents were checked above; the gemm reads and writes nothing else
    unsafe {
        gemm(
            rows,
            width,
            d,
            logits.as_mut_ptr(),
            1,
            tile as isize,
            false,
            q_rows.as_ptr(),
            1,
            d as isize,
            k[k0 * d..].as_ptr(),
            d as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// out `[rows, d]` += weights `[rows, tile]` (the first `width` columns) x the value rows
/// k0..k0 + width of `v`.
fn value_tile(out: &mut [f32], weights: &[f32], v: &[f32], at: TileAt) {
    let TileAt {
        rows,
        d,
        tile,
        k0,
        width,
    } = at;
    assert!(out.len() >= rows * d && weights.len() >= rows * tile && v.len() >= (k0 + width) * d);
    // SAFETY: the extents were checked above; the gemm reads and writes nothing else
    unsafe {
        gemm(
            rows,
            d,
            width,
            out.as_mut_ptr(),
            1,
            d as isize,
            true,
            weights.as_ptr(),
            1,
            tile as isize,
            v[k0 * d..].as_ptr(),
            1,
            d as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// The tile's q.k into `buf.logits`: f32 products, or bf16 ones with the keys packed.
fn qk_products(buf: &mut TaskBuffers, kv: KeyValues, tile: TileAt) {
    let Some(packed) = kv.packed else {
        return qk_tile(&mut buf.logits, &buf.q_rows, kv.k, tile);
    };
    let q = &buf.q_bf16;
    let keys = tile.k0..tile.k0 + tile.width;
    let pairs = 0..packed.k.pairs();
    product_into(
        (&q.bits, q.stride, tile.rows),
        &packed.k,
        keys,
        pairs,
        &mut buf.logits,
        tile.tile,
        false,
    );
}

/// The tile's weights times its values, added to `buf.out`: f32 products, or the weights
/// rounded to bf16 against the packed values.
fn value_products(buf: &mut TaskBuffers, kv: KeyValues, tile: TileAt) {
    let Some(packed) = kv.packed else {
        return value_tile(&mut buf.out, &buf.weights, kv.v, tile);
    };
    let w = &mut buf.weights_bf16;
    w.round_into(&buf.weights, tile.rows, tile.width, tile.tile);
    // tiles start at an even key (a multiple of the panel width)
    let pairs = tile.k0 / 2..tile.k0 / 2 + tile.width.div_ceil(2);
    product_into(
        (&w.bits, w.stride, tile.rows),
        &packed.v,
        0..tile.d,
        pairs,
        &mut buf.out,
        tile.d,
        true,
    );
}

/// The keys of a tile from `k0` (of `width`) that query `i` sees, as offsets `lo..hi` into
/// the tile (empty: `lo == hi`).
fn visible_in_tile(window: KeyWindow, i: usize, k0: usize, width: usize) -> (usize, usize) {
    let keys = window.keys(i);
    let hi = keys.end.clamp(k0, k0 + width) - k0;
    let lo = keys.start.clamp(k0, k0 + width) - k0;
    (lo.min(hi), hi)
}

/// Where one task sits: sequence `seq`, the query heads of kv head `kv_head` (`groups` of
/// them), queries `q0..q0 + nq`, in tiles of `tile` keys from key `first_key` (the first its
/// first query sees: tiles wholly outside a sliding window are skipped); `rows = groups * nq`.
#[derive(Debug, Clone, Copy)]
struct TaskAt {
    seq: usize,
    kv_head: usize,
    groups: usize,
    q0: usize,
    nq: usize,
    rows: usize,
    first_key: usize,
    tile: usize,
    n_bands: usize,
    /// Key blocks per row (0 without `block_map`).
    n_blocks: usize,
}

impl TaskAt {
    /// The task of `rows` with key tiles of `tile`; with `panel_aligned` (bf16 products)
    /// the tiles start at a multiple of the panel width (keys before the first one a query
    /// sees are masked like any other hidden key).
    fn new(
        dims: Dims,
        rows: TaskRows,
        wants: Option<&RowWants>,
        tile: usize,
        panel_aligned: bool,
    ) -> Self {
        let TaskRows {
            seq,
            kv_head,
            q0,
            nq,
        } = rows;
        let groups = dims.heads / dims.kv;
        let mut first_key = dims.window.first_key(q0);
        if panel_aligned {
            first_key -= first_key % PANEL_WIDTH;
        }
        TaskAt {
            seq,
            kv_head,
            groups,
            q0,
            nq,
            rows: groups * nq,
            first_key,
            // short rows need no full-width tile buffers
            tile: tile.min(q0 + nq - first_key),
            n_bands: wants.map_or(0, |w| w.bands.len()),
            n_blocks: wants.and_then(|w| w.key_blocks).map_or(0, |k| k.blocks),
        }
    }

    /// The query head of task row `r`.
    fn head(&self, r: usize) -> usize {
        self.kv_head * self.groups + r / self.nq
    }

    /// The query of task row `r`.
    fn query(&self, r: usize) -> usize {
        self.q0 + r % self.nq
    }

    /// The end of the task's keys: the last query's own key, + 1.
    fn keys(&self) -> usize {
        self.q0 + self.nq
    }

    /// The first key of each of the task's key tiles.
    fn tile_starts(&self) -> impl Iterator<Item = usize> {
        (self.first_key..self.keys()).step_by(self.tile)
    }

    /// Tile geometry of the tile from key `k0`.
    fn tile_at(&self, d: usize, k0: usize) -> TileAt {
        TileAt {
            rows: self.rows,
            d,
            tile: self.tile,
            k0,
            width: self.tile.min(self.keys() - k0),
        }
    }
}

/// A task's buffers: its query rows (and for bf16 products the same scaled and rounded,
/// and the tile's weights rounded), the tile's logits and weights, the rule's scratch row,
/// the output rows, each row's running sums and parts (band sums and key blocks' sums and
/// maxima).
struct TaskBuffers {
    q_rows: Vec<f32>,
    q_bf16: Bf16Rows,
    weights_bf16: Bf16Rows,
    /// key_received's sums `[groups, keys]` over the queries from `received_from` on
    /// (empty when not asked for).
    received: Vec<f32>,
    received_from: usize,
    /// The online pass's weights of the rows key_received sums (softmax weights only).
    kept: Option<KeptWeights>,
    logits: Vec<f32>,
    weights: Vec<f32>,
    scratch: Vec<f32>,
    out: Vec<f32>,
    sums: Vec<RowSums>,
    parts: TaskParts,
}

impl TaskBuffers {
    /// Buffers for task `at` with its query rows packed `[rows, d]` from `q`, and with
    /// `bf16_scale` the rows times it rounded to bf16.
    fn new(q: &[f32], dims: Dims, at: TaskAt, rule: &TileLogits, bf16_scale: Option<f32>) -> Self {
        let (rows, d) = (at.rows, dims.d);
        let mut q_rows = Vec::with_capacity(rows * d);
        for g in 0..at.groups {
            let head = at.kv_head * at.groups + g;
            let from = ((at.seq * dims.heads + head) * dims.t + at.q0) * d;
            q_rows.extend_from_slice(&q[from..from + at.nq * d]);
        }
        let mut q_bf16 = Bf16Rows::empty();
        if let Some(scale) = bf16_scale {
            let scaled: Vec<f32> = q_rows.iter().map(|&x| x * scale).collect();
            q_bf16.round_into(&scaled, rows, d, d);
        }
        TaskBuffers {
            q_rows,
            q_bf16,
            weights_bf16: Bf16Rows::empty(),
            received: Vec::new(),
            received_from: 0,
            kept: None,
            logits: vec![0f32; rows * at.tile],
            weights: vec![0f32; rows * at.tile],
            scratch: match rule {
                TileLogits::Plain => Vec::new(),
                _ => vec![0f32; at.tile],
            },
            out: vec![0f32; rows * d],
            sums: vec![RowSums::new(); rows],
            parts: TaskParts::new(&at),
        }
    }
}

/// One task: the query heads `head0..head0 + groups` (sharing one kv head) of sequence
/// `seq`, queries `q0..q0 + nq`. Returns their output rows `[groups * nq, d]` and table
/// cells `[groups * nq, width]`, row `g * nq + qi`.
fn task(
    operands: Operands,
    dims: Dims,
    rows: TaskRows,
    logits: Logits,
    sinks: Option<&[f32]>,
    wants: Option<&RowWants>,
    tile: usize,
) -> TaskOutput {
    let Operands {
        qkv: Qkv { q, k, v },
        packed,
    } = operands;
    let (t, d) = (dims.t, dims.d);
    let at = TaskAt::new(dims, rows, wants, tile, packed.is_some());
    let width = wants.map_or(1, RowWants::width);
    let head = rows.seq * dims.kv + rows.kv_head;
    let kv_at = head * t * d;
    let (k, v) = (&k[kv_at..kv_at + t * d], &v[kv_at..kv_at + t * d]);
    let packed = packed.map(|p| &p.heads[head]);
    let kv = KeyValues { k, v, packed };
    // bf16 products take q times the scale, rounded: the rules then scale by 1
    let bf16_scale = packed.map(|_| logits.scale);
    let logits = Logits {
        scale: if packed.is_some() { 1.0 } else { logits.scale },
        ..logits
    };
    let mut buf = TaskBuffers::new(q, dims, at, logits.rule, bf16_scale);
    if let Some(from) = wants.and_then(|w| w.key_sums_from) {
        buf.received = vec![0f32; at.groups * at.keys()];
        buf.received_from = from;
        if logits.affine.is_none() {
            buf.kept = Some(KeptWeights::new(at.rows, at.keys() - at.first_key, at.tile));
        }
    }
    online_pass(&mut buf, kv, dims, at, logits, wants);
    if let Some(scale) = bf16_scale {
        // the raw q.k sums: the tiles summed scale * q.k
        for sums in &mut buf.sums {
            sums.qk /= scale as f64;
            sums.qk_abs /= scale as f64;
        }
    }
    let mut cells = vec![0f32; at.rows * width];
    let Some(affine) = logits.affine else {
        add_kept_weights(&mut buf, at, sinks);
        let mut out = std::mem::take(&mut buf.out);
        for r in 0..at.rows {
            finish_row(
                &buf.sums[r],
                buf.parts.totals(&at, r),
                &mut out[r * d..(r + 1) * d],
                &mut cells[r * width..(r + 1) * width],
                sinks.map(|s| s[at.head(r)]),
                at.query(r),
                wants,
            );
        }
        return (out, cells, buf.received);
    };
    let acc = affine_pass(&mut buf, kv, dims, at, logits, affine, wants);
    for r in 0..at.rows {
        finish_affine_row(
            &buf.sums[r],
            &acc[r],
            buf.parts.totals(&at, r),
            &mut cells[r * width..(r + 1) * width],
            at.query(r),
            wants,
        );
    }
    (buf.out, cells, buf.received)
}

/// key_received's sums of a task's softmax weights: each row's kept tile weights rescaled to
/// its finished maximum and denominator (and sink), added into its head's key sums.
fn add_kept_weights(buf: &mut TaskBuffers, at: TaskAt, sinks: Option<&[f32]>) {
    let Some(kept) = &buf.kept else {
        return;
    };
    let keys = at.keys();
    for r in (0..at.rows).filter(|&r| at.query(r) >= buf.received_from) {
        let (factor, _) = row_weight(&buf.sums[r], sinks.map(|s| s[at.head(r)]));
        let g = r / at.nq;
        let sums = &mut buf.received[g * keys + at.first_key..(g + 1) * keys];
        kept.add_row(r, buf.sums[r].max, factor as f32, sums);
    }
}

/// The online softmax over every key tile: each row's maximum and denominator; with plain
/// weights (`weights_final`) also its sums, bands and output in the same pass, while
/// Affine-Scaled weights take only the maximum and denominator here ([`affine_pass`]).
fn online_pass(
    buf: &mut TaskBuffers,
    kv: KeyValues,
    dims: Dims,
    at: TaskAt,
    logits: Logits,
    wants: Option<&RowWants>,
) {
    let (scale, logits_rule) = (logits.scale, logits.rule);
    let weights_final = logits.affine.is_none();
    let d = dims.d;
    let online_wants = if weights_final { wants } else { None };
    for k0 in at.tile_starts() {
        let tile = at.tile_at(d, k0);
        qk_products(buf, kv, tile);
        for r in 0..at.rows {
            let i = at.query(r);
            let row = r * at.tile;
            let (lo, hi) = visible_in_tile(dims.window, i, k0, tile.width);
            let row_weights = &mut buf.weights[row..row + tile.width];
            // invisible keys weigh 0 in the value product
            row_weights[..lo].fill(0.0);
            row_weights[hi..].fill(0.0);
            if lo == hi {
                continue;
            }
            let e = &mut row_weights[lo..hi];
            // SAFETY: f32 -> MaybeUninit<f32> of the same slice; tile_row only writes floats
            let e = unsafe { &mut *(e as *mut [f32] as *mut [MaybeUninit<f32>]) };
            let x = &buf.logits[row + lo..row + hi];
            // the row's keys from key `from` on
            let from = k0 + lo;
            let rule = RowRule {
                logits: logits_rule.row(at.head(r), i, from),
                scale,
                scratch: &mut buf.scratch[..],
            };
            let (parts, out): (RowParts, &mut [f32]) = match weights_final {
                false => (RowParts::none(), &mut []),
                true => (buf.parts.row(&at, r), &mut buf.out[r * d..(r + 1) * d]),
            };
            let state = RowState {
                sums: &mut buf.sums[r],
                parts,
                out,
            };
            let row_at = RowTile { i, k0: from };
            simd_dispatch!(tile_row(x, rule, e, state, row_at, online_wants));
            if let Some(kept) = buf.kept.as_mut().filter(|_| i >= buf.received_from) {
                let e = &buf.weights[row..row + tile.width];
                kept.keep(r, k0 - at.first_key, e, buf.sums[r].max);
            }
        }
        if weights_final {
            value_products(buf, kv, tile);
        }
    }
}

/// The Affine-Scaled second pass: with each row's finished softmax (`buf.sums`), the weights
/// alpha p + beta of every tile, their sums and bands, and the output.
fn affine_pass(
    buf: &mut TaskBuffers,
    kv: KeyValues,
    dims: Dims,
    at: TaskAt,
    logits: Logits,
    affine: &AffineTile,
    wants: Option<&RowWants>,
) -> Vec<AffineSums> {
    let (scale, logits_rule) = (logits.scale, logits.rule);
    let d = dims.d;
    let mut acc = vec![AffineSums::default(); at.rows];
    for k0 in at.tile_starts() {
        let tile = at.tile_at(d, k0);
        qk_products(buf, kv, tile);
        for (r, acc) in acc.iter_mut().enumerate() {
            let (head, i) = (at.head(r), at.query(r));
            let row = r * at.tile;
            let (lo, hi) = visible_in_tile(dims.window, i, k0, tile.width);
            let row_weights = &mut buf.weights[row..row + tile.width];
            row_weights[..lo].fill(0.0);
            row_weights[hi..].fill(0.0);
            if lo == hi {
                continue;
            }
            let w = &mut row_weights[lo..hi];
            let from = k0 + lo;
            let alpha = affine.alpha[(at.seq * dims.heads + head) * dims.t + i];
            let beta = beta(
                alpha,
                affine.alpha_ma[head],
                i,
                affine.seq_len,
                affine.beta_length,
            );
            let x = &buf.logits[row + lo..row + hi];
            let rule = RowRule {
                logits: logits_rule.row(head, i, from),
                scale,
                scratch: &mut buf.scratch[..],
            };
            let parts = buf.parts.row(&at, r);
            let row_at = RowTile { i, k0: from };
            let weights_of = AffineRow {
                softmax: &buf.sums[r],
                alpha,
                beta,
            };
            let state = AffineState { acc, parts };
            simd_dispatch!(affine_tile_row(
                x, rule, w, weights_of, state, row_at, wants
            ));
            if !buf.received.is_empty() && i >= buf.received_from {
                let from = (r / at.nq) * at.keys() + k0 + lo;
                for (s, &w) in buf.received[from..from + w.len()].iter_mut().zip(w.iter()) {
                    *s += w;
                }
            }
        }
        value_products(buf, kv, tile);
    }
    acc
}

/// Causal attention of the queries `q_start..q_start + n` of `q` `[batch, heads, t, d]`
/// against keys and values `k`, `v` `[batch, kv, t, d]` (contiguous f32 on the CPU):
/// softmax(y) over the keys `window` lets query i see (j <= i, inside a sliding window
/// where there is one; tiles no query of a task sees are skipped) with y the `rule` of
/// scale * q.k, with per-head sink logits
/// `sinks` `[heads]` in the denominator when given. Returns the output
/// `[batch, heads, n, d]` and the row table `[batch * heads * n, wants.width()]` (with no
/// `wants`, one column: the sink mass); `None` where the tensors are not contiguous f32
/// CPU tensors, their shapes do not fit (kv heads not dividing the heads, the block past
/// `t`, sinks or the rule's tables shorter than the heads or `t`) or the block is empty.
/// With `packed` (the layer's k and v packed by [`PackedKv::pack`]) the tiles' products are
/// bf16 ones.
pub fn causal_attention(
    qkv: Qkv<Tensor>,
    block: QueryBlock,
    logits: Logits,
    sinks: Option<&[f32]>,
    wants: Option<&RowWants>,
    tiles: Tiles,
    packed: Option<&PackedKv>,
) -> Result<Option<TileOutput>> {
    let (b, heads, t, d) = qkv.q.dims4()?;
    let kv = qkv.k.dim(1)?;
    if !fits(qkv, block, logits, sinks)? {
        return Ok(None);
    }
    if packed.is_some_and(|p| p.heads.len() != b * kv) {
        return Ok(None);
    }
    let tiles = Tiles {
        rows: tiles.rows.max(1),
        // bf16 products read whole panels of keys
        keys: match packed {
            Some(_) => tiles.keys.max(1).next_multiple_of(PANEL_WIDTH),
            None => tiles.keys.max(1),
        },
    };
    let dims = Dims {
        heads,
        kv,
        t,
        d,
        window: block.window,
    };
    let mut per_task = (tiles.rows / (heads / kv)).clamp(1, block.n);
    if wants.is_some_and(|w| w.key_sums_from.is_some()) {
        per_task = rows_within(per_task, heads / kv, block.q_start + block.n);
    }
    let tasks = task_rows(b, kv, block, per_task);
    let computed = with_cpu_f32(qkv.q, |q| {
        with_cpu_f32(qkv.k, |k| {
            with_cpu_f32(qkv.v, |v| {
                tasks
                    .par_iter()
                    .map(|&rows| {
                        let qkv = Qkv { q, k, v };
                        let operands = Operands { qkv, packed };
                        task(operands, dims, rows, logits, sinks, wants, tiles.keys)
                    })
                    .collect::<Vec<_>>()
            })
        })
    });
    let Some(Some(Some(results))) = computed else {
        return Ok(None);
    };
    let width = wants.map_or(1, RowWants::width);
    let (out, table) = gather(&tasks, &results, b, dims, block, width);
    let keys = block.q_start + block.n;
    let key_sums = match wants.and_then(|w| w.key_sums_from) {
        Some(_) => Some(Tensor::from_vec(
            gather_key_sums(&tasks, &results, b, dims, keys),
            (b, heads, keys),
            &Device::Cpu,
        )?),
        None => None,
    };
    Ok(Some(TileOutput {
        out: Tensor::from_vec(out, (b, heads, block.n, d), &Device::Cpu)?,
        table: Tensor::from_vec(table, (b * heads * block.n, width), &Device::Cpu)?,
        key_sums,
    }))
}

/// What the tiles computed for a query block: the attention output `[batch, heads, n, d]`,
/// the row table `[batch * heads * n, width]` and, when `RowWants::key_sums_from` asked,
/// each key's weight summed over the block's queries from there on `[batch, heads, keys]`
/// (keys `0 .. q_start + n`).
pub struct TileOutput {
    pub out: Tensor,
    pub table: Tensor,
    pub key_sums: Option<Tensor>,
}

/// The tasks' key sums added up per (sequence, head) over the block's `keys`.
fn gather_key_sums(
    tasks: &[TaskRows],
    results: &[TaskOutput],
    b: usize,
    dims: Dims,
    keys: usize,
) -> Vec<f32> {
    let groups = dims.heads / dims.kv;
    let mut sums = vec![0f32; b * dims.heads * keys];
    for (at, (_, _, received)) in tasks.iter().zip(results) {
        let task_keys = at.q0 + at.nq;
        for g in 0..groups {
            let head = at.seq * dims.heads + at.kv_head * groups + g;
            let dst = &mut sums[head * keys..head * keys + task_keys];
            for (s, &r) in dst
                .iter_mut()
                .zip(&received[g * task_keys..(g + 1) * task_keys])
            {
                *s += r;
            }
        }
    }
    sums
}

/// Whether the tiles can take the block: a non-empty block within `t`, kv heads dividing
/// the heads, v shaped as k, sinks and the rule's tables long enough, and Affine-Scaled
/// weights without sinks with alpha for every row.
fn fits(
    qkv: Qkv<Tensor>,
    block: QueryBlock,
    logits: Logits,
    sinks: Option<&[f32]>,
) -> Result<bool> {
    let (b, heads, t, _) = qkv.q.dims4()?;
    let kv = qkv.k.dim(1)?;
    let short_table = match logits.rule {
        TileLogits::Plain | TileLogits::SoftCap { .. } => false,
        TileLogits::Logn { head_scale } => head_scale.len() < heads,
        TileLogits::Distance { a, m } => a.len() < t || m.len() < t,
    };
    let bad = block.n == 0
        || block.q_start + block.n > t
        || kv == 0
        || heads % kv != 0
        || qkv.v.dims4()? != qkv.k.dims4()?
        || sinks.is_some_and(|s| s.len() < heads)
        || logits.affine.is_some_and(|a| {
            sinks.is_some() || a.alpha.len() < b * heads * t || a.alpha_ma.len() < heads
        })
        || short_table;
    Ok(!bad)
}

/// The tasks of a block: per sequence and kv head, its queries `per_task` at a time.
fn task_rows(b: usize, kv: usize, block: QueryBlock, per_task: usize) -> Vec<TaskRows> {
    let (q_start, n) = (block.q_start, block.n);
    (0..b)
        .flat_map(|seq| (0..kv).map(move |kv_head| (seq, kv_head)))
        .flat_map(|(seq, kv_head)| {
            (0..n).step_by(per_task).map(move |at| TaskRows {
                seq,
                kv_head,
                q0: q_start + at,
                nq: per_task.min(n - at),
            })
        })
        .collect()
}

/// The tasks' output rows and table cells in `[batch, heads, n]` order.
fn gather(
    tasks: &[TaskRows],
    results: &[TaskOutput],
    b: usize,
    dims: Dims,
    block: QueryBlock,
    width: usize,
) -> (Vec<f32>, Vec<f32>) {
    let (heads, d, n) = (dims.heads, dims.d, block.n);
    let groups = heads / dims.kv;
    let mut out = vec![0f32; b * heads * n * d];
    let mut table = vec![0f32; b * heads * n * width];
    for (at, (task_out, task_cells, _)) in tasks.iter().zip(results) {
        for g in 0..groups {
            let row = (at.seq * heads + at.kv_head * groups + g) * n + (at.q0 - block.q_start);
            let (from, nq) = (g * at.nq, at.nq);
            out[row * d..(row + nq) * d].copy_from_slice(&task_out[from * d..(from + nq) * d]);
            table[row * width..(row + nq) * width]
                .copy_from_slice(&task_cells[from * width..(from + nq) * width]);
        }
    }
    (out, table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-scale, scale).
    fn values(len: usize, seed: usize, scale: f32) -> Vec<f32> {
        (0..len)
            .map(|k| (((k + seed) * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 * scale - scale)
            .collect()
    }

    /// A case's sizes: q `[b, heads, t, d]`, k and v `[b, kv, t, d]`.
    #[derive(Debug, Clone, Copy)]
    struct Sizes {
        b: usize,
        heads: usize,
        kv: usize,
        t: usize,
        d: usize,
    }

    /// Deterministic q, k, v as host vectors and CPU tensors.
    struct Inputs {
        host: [Vec<f32>; 3],
        tensors: [Tensor; 3],
    }

    impl Inputs {
        fn host(&self) -> Qkv<'_, [f32]> {
            let [q, k, v] = &self.host;
            Qkv { q, k, v }
        }

        fn tensors(&self) -> Qkv<'_, Tensor> {
            let [q, k, v] = &self.tensors;
            Qkv { q, k, v }
        }
    }

    /// q, k and v of `sizes` from `seed`: q and k within ±`qk`, v within ±1.
    fn inputs(sizes: Sizes, seed: usize, qk: f32) -> Inputs {
        let Sizes { b, heads, kv, t, d } = sizes;
        let q = values(b * heads * t * d, seed, qk);
        let k = values(b * kv * t * d, seed + 1, qk);
        let v = values(b * kv * t * d, seed + 2, 1.0);
        let tensor = |x: &Vec<f32>, h: usize| {
            Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap()
        };
        let tensors = [tensor(&q, heads), tensor(&k, kv), tensor(&v, kv)];
        Inputs {
            host: [q, k, v],
            tensors,
        }
    }

    /// The reference, in f64 by hand: for each query row, softmax over the visible keys (and
    /// the sink), its weights' reductions and the weighted sum of values.
    struct Expected {
        out: Vec<f64>,
        cells: Vec<Vec<f64>>,
    }

    /// The logit rules, in f64 from their papers' formulas.
    #[derive(Debug, Clone, Copy)]
    enum Rule<'a> {
        Plain,
        /// s * s_h ln(i + 1)
        Logn(&'a [f32]),
        /// a_t s + m_t, a_t = sqrt(1 + 2 ln(1 + t / tau)), m_t = -2 ln(1 + t / tau)
        ScaleInvariant(f64),
    }

    impl Rule<'_> {
        fn logit(self, s: f64, head: usize, i: usize, j: usize) -> f64 {
            match self {
                Rule::Plain => s,
                Rule::Logn(scale) => s * scale[head] as f64 * ((i + 1) as f64).ln(),
                Rule::ScaleInvariant(tau) => {
                    let log = (1.0 + (i - j) as f64 / tau).ln();
                    (1.0 + 2.0 * log).sqrt() * s - 2.0 * log
                }
            }
        }

        fn tiles(self, t: usize) -> TileLogits {
            match self {
                Rule::Plain => TileLogits::Plain,
                Rule::Logn(scale) => TileLogits::Logn {
                    head_scale: scale.to_vec(),
                },
                Rule::ScaleInvariant(tau) => {
                    let (a, m) = crate::attention::reversed_coefficients(tau, t);
                    TileLogits::Distance { a, m }
                }
            }
        }
    }

    /// What the reference computes: the queries `q_start..q_start + n`, each seeing the
    /// keys of its `window` (w keys: i - w < j <= i; all j <= i without), logits `rule` of
    /// `scale` * q.k, per-head `sinks`, distance `bands` and key `blocks` (each row's cells
    /// end with the sums, then the maxima, of its visible weights in each key block, 0
    /// where it sees none), and Affine-Scaled weights with `affine`.
    #[derive(Debug, Clone, Copy)]
    struct Case<'a> {
        q_start: usize,
        n: usize,
        window: Option<usize>,
        scale: f64,
        rule: Rule<'a>,
        sinks: Option<&'a [f32]>,
        bands: &'a [(usize, usize)],
        blocks: Option<KeyBlocks>,
        affine: Option<AffineCase<'a>>,
    }

    impl Default for Case<'_> {
        /// No queries, plain logits, no window, sinks, bands, blocks or affine weights.
        fn default() -> Self {
            Case {
                q_start: 0,
                n: 0,
                window: None,
                scale: 1.0,
                rule: Rule::Plain,
                sinks: None,
                bands: &[],
                blocks: None,
                affine: None,
            }
        }
    }

    /// Affine-Scaled weights a = alpha p + beta, beta = (alpha_ma - alpha) / N, N = t
    /// (`full`) or i + 1, from `alpha` `[b, heads, t]` and `alpha_ma` `[heads]`; their
    /// entropy is that of max(a, 0) renormalised.
    #[derive(Debug, Clone, Copy)]
    struct AffineCase<'a> {
        alpha: &'a [f32],
        alpha_ma: &'a [f32],
        full: bool,
    }

    /// The reference of `case` over `qkv` of `sizes`.
    fn expected(qkv: Qkv<[f32]>, sizes: Sizes, case: &Case) -> Expected {
        let Qkv { q, k, v } = qkv;
        let Sizes { b, heads, kv, t, d } = sizes;
        let Case {
            q_start,
            n,
            window,
            scale,
            rule,
            sinks,
            bands,
            blocks,
            affine,
        } = *case;
        let groups = heads / kv;
        let mut out = Vec::new();
        let mut cells = Vec::new();
        for s in 0..b {
            for h in 0..heads {
                let kvh = h / groups;
                for i in q_start..q_start + n {
                    let qi = &q[((s * heads + h) * t + i) * d..][..d];
                    let key = |j: usize| &k[((s * kv + kvh) * t + j) * d..][..d];
                    let value = |j: usize| &v[((s * kv + kvh) * t + j) * d..][..d];
                    // the visible keys lo..=i; q.k summed in f32, as the gemm does, then widened
                    let lo = window.map_or(0, |w| (i + 1).saturating_sub(w));
                    let raw: Vec<f64> = (lo..=i)
                        .map(|j| qi.iter().zip(key(j)).map(|(a, b)| a * b).sum::<f32>() as f64)
                        .collect();
                    let y: Vec<f64> = (lo..=i)
                        .map(|j| rule.logit(raw[j - lo] * scale, h, i, j))
                        .collect();
                    let sink = sinks.map(|s| s[h] as f64);
                    let m = y.iter().cloned().chain(sink).fold(f64::MIN, f64::max);
                    // e of every key 0..=i, 0 outside the window
                    let e: Vec<f64> = (0..=i)
                        .map(|j| if j < lo { 0.0 } else { (y[j - lo] - m).exp() })
                        .collect();
                    let sink_e = sink.map_or(0.0, |s| (s - m).exp());
                    let real: f64 = e.iter().sum();
                    let z = real + sink_e;
                    let mut w: Vec<f64> = e.iter().map(|e| e / z).collect();
                    let mut entropy: f64 =
                        e[lo..].iter().map(|e| e / real).map(|p| -p * p.ln()).sum();
                    if let Some(AffineCase {
                        alpha,
                        alpha_ma,
                        full,
                    }) = affine
                    {
                        let a = alpha[(s * heads + h) * t + i] as f64;
                        let len = if full { t } else { i + 1 } as f64;
                        let beta = (alpha_ma[h] as f64 - a) / len;
                        w = e.iter().map(|e| a * e / real + beta).collect();
                        let mass: f64 = w.iter().map(|w| w.max(0.0)).sum();
                        entropy = w
                            .iter()
                            .filter(|&&w| w > 0.0)
                            .map(|w| -(w / mass) * (w / mass).ln())
                            .sum();
                        if mass <= 0.0 {
                            entropy = f64::NAN;
                        }
                    }
                    for c in 0..d {
                        out.push((0..=i).map(|j| w[j] * value(j)[c] as f64).sum());
                    }
                    let mut cell = vec![0.0; BANDS + 1 + bands.len()];
                    cell[FIRST] = w[0];
                    cell[SUM] = w.iter().sum();
                    cell[ENTROPY] = entropy;
                    cell[SINK_MASS] = if affine.is_some() { 0.0 } else { sink_e / z };
                    cell[QK_SUM] = raw.iter().sum();
                    cell[QK_ABS_SUM] = raw.iter().map(|x| x.abs()).sum();
                    cell[BANDS] = if i > 0 { w[0] } else { 0.0 };
                    for (c, &(lo, hi)) in bands.iter().enumerate() {
                        // key 0 of a later query is `first`, not its distance's band
                        cell[BANDS + 1 + c] = (usize::from(i > 0)..=i)
                            .filter(|&j| (lo..hi).contains(&(i - j)))
                            .map(|j| w[j])
                            .sum();
                    }
                    // the row's largest logit over its real keys (never the sink)
                    cell.push(y.iter().cloned().fold(f64::MIN, f64::max));
                    if let Some(blocks) = blocks {
                        // block c holds keys floor(c t / G) .. floor((c + 1) t / G)
                        let g = blocks.blocks;
                        let in_block =
                            |c: usize| (c * t / g..(c + 1) * t / g).filter(|&j| j >= lo && j <= i);
                        let sums = (0..g).map(|c| in_block(c).map(|j| w[j]).sum::<f64>());
                        let maxima = (0..g).map(|c| {
                            let m = in_block(c).map(|j| w[j]).fold(f64::NEG_INFINITY, f64::max);
                            if m == f64::NEG_INFINITY {
                                0.0
                            } else {
                                m
                            }
                        });
                        let (sums, maxima): (Vec<f64>, Vec<f64>) =
                            (sums.collect(), maxima.collect());
                        cell.extend(sums);
                        cell.extend(maxima);
                    }
                    cells.push(cell);
                }
            }
        }
        Expected { out, cells }
    }

    /// Every row-table column: first, sum, entropy, `bands`, key `blocks` and max logit.
    fn every_column(bands: &[(usize, usize)], blocks: KeyBlocks) -> RowWants {
        RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: bands.to_vec(),
            key_blocks: Some(blocks),
            max_logit: true,
            key_sums_from: None,
        }
    }

    #[test]
    fn tiles_give_the_attention_and_row_table_of_a_float64_softmax() {
        // 2 sequences, 6 query heads on 2 kv heads, 45 positions, head dim 8; logits up to
        // ~±18 (LogN ~±70) so the running maximum moves across tiles; tasks of 3-4 queries
        // (x 3 heads) against tiles of 5-7 keys cross every boundary: diagonal tiles, partial
        // last tiles, rows with no visible key in a tile; 1 x 1 tiles; and one tile
        let sizes = Sizes {
            b: 2,
            heads: 6,
            kv: 2,
            t: 45,
            d: 8,
        };
        let Sizes { heads, t, d, .. } = sizes;
        let inputs = inputs(sizes, 1, 2.5);
        let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
        // block_map's key blocks: 7 of the 45 keys (6 or 7 keys each), across the tiles
        let blocks = KeyBlocks::new(7, t);
        let wants = every_column(&bands, blocks);
        let sinks = values(heads, 4, 3.0);
        let scale = 1.0 / (d as f64).sqrt();
        let logn_scale = [0.5f32, 0.8, 1.1, 0.3, 0.6, 0.9];
        let rules = [
            Rule::Plain,
            Rule::Logn(&logn_scale),
            Rule::ScaleInvariant(10.0),
        ];
        // sliding windows: one key, shorter than a tile, across tiles, and longer than t
        let windows = [None, Some(1), Some(4), Some(17), Some(60)];
        for ((q_start, n), rule, window) in [(0, 45), (0, 13), (30, 15), (44, 1)]
            .into_iter()
            .flat_map(|block| rules.iter().map(move |&rule| (block, rule)))
            .flat_map(|(block, rule)| windows.iter().map(move |&w| (block, rule, w)))
        {
            for sink in [None, Some(&sinks[..])] {
                for tiles in [
                    Tiles { rows: 12, keys: 7 },
                    Tiles { rows: 9, keys: 5 },
                    Tiles { rows: 1, keys: 1 },
                    Tiles::default(),
                ] {
                    let TileOutput { out, table, .. } = causal_attention(
                        inputs.tensors(),
                        QueryBlock {
                            q_start,
                            n,
                            window: window.map_or(KeyWindow::CAUSAL, KeyWindow::sliding),
                        },
                        Logits {
                            scale: scale as f32,
                            rule: &rule.tiles(t),
                            affine: None,
                        },
                        sink,
                        Some(&wants),
                        tiles,
                        None,
                    )
                    .unwrap()
                    .unwrap();
                    let case = Case {
                        q_start,
                        n,
                        window,
                        scale,
                        rule,
                        sinks: sink,
                        bands: &bands,
                        blocks: Some(blocks),
                        affine: None,
                    };
                    let want = expected(inputs.host(), sizes, &case);
                    let close =
                        |got: f32, want: f64| (got as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs();
                    let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    assert_eq!(out.len(), want.out.len());
                    for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                        assert!(
                            close(g, w),
                            "output {at}: {g} vs {w} ({q_start}, {n}, {rule:?}, {window:?}, {tiles:?})"
                        );
                    }
                    let table = table.to_vec2::<f32>().unwrap();
                    assert_eq!(table.len(), want.cells.len());
                    for (row, (got, want)) in table.iter().zip(&want.cells).enumerate() {
                        assert_eq!(got.len(), want.len());
                        for (c, (&g, &w)) in got.iter().zip(want).enumerate() {
                            // q.k sums are sums of up to 45 values of ~25: f32 rounding
                            let w_tol = if c == QK_SUM || c == QK_ABS_SUM {
                                1e-4
                            } else {
                                0.0
                            };
                            assert!(
                                close(g, w) || (g as f64 - w).abs() <= w_tol * w.abs().max(1.0),
                                "row {row} column {c}: {g} vs {w} ({q_start}, {n}, {rule:?}, window {window:?}, sink {}, {tiles:?})",
                                sink.is_some()
                            );
                        }
                    }
                }
            }
        }
    }

    /// bf16 products (`PackedKv`): with q, k, v already bf16 values and a power-of-two scale
    /// (so q times it rounds exactly), the only rounding left is the tile's weights for the
    /// value product: every row-table cell matches the float64 reference as the f32 tiles'
    /// do, and each output is within 2^-8 max|v| of it (a relative 2^-9 per weight). Tiles
    /// of 7 and 40 keys become whole panels (32, 64); windows start tiles mid-panel.
    #[test]
    fn bf16_products_round_only_the_weights_of_the_value_product() {
        let sizes = Sizes {
            b: 2,
            heads: 6,
            kv: 2,
            t: 100,
            d: 16,
        };
        let Sizes { b, heads, kv, t, d } = sizes;
        let rounded = |x: Vec<f32>| -> Vec<f32> {
            x.into_iter()
                .map(|v| half::bf16::from_f32(v).to_f32())
                .collect()
        };
        let raw = inputs(sizes, 3, 2.5);
        let [q, k, v] = raw.host.clone().map(rounded);
        let tensor = |x: &Vec<f32>, h: usize| {
            Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap()
        };
        let inputs = Inputs {
            tensors: [tensor(&q, heads), tensor(&k, kv), tensor(&v, kv)],
            host: [q, k, v],
        };
        let packed = PackedKv::pack(inputs.tensors().k, inputs.tensors().v)
            .unwrap()
            .unwrap();
        let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
        let blocks = KeyBlocks::new(7, t);
        let wants = every_column(&bands, blocks);
        let sinks = values(heads, 4, 3.0);
        let scale = 0.25;
        let logn_scale = [0.5f32, 0.8, 1.1, 0.3, 0.6, 0.9];
        let rules = [
            Rule::Plain,
            Rule::Logn(&logn_scale),
            Rule::ScaleInvariant(10.0),
        ];
        for (q_start, n) in [(0, 100), (37, 63)] {
            for rule in rules {
                for window in [None, Some(5), Some(45)] {
                    for (tiles, sink) in [
                        (Tiles { rows: 12, keys: 7 }, None),
                        (Tiles { rows: 5, keys: 40 }, Some(&sinks[..])),
                        (Tiles::default(), None),
                    ] {
                        let block = QueryBlock {
                            q_start,
                            n,
                            window: window.map_or(KeyWindow::CAUSAL, KeyWindow::sliding),
                        };
                        let logits = Logits {
                            scale,
                            rule: &rule.tiles(t),
                            affine: None,
                        };
                        let qkv = inputs.tensors();
                        let TileOutput { out, table, .. } = causal_attention(
                            qkv,
                            block,
                            logits,
                            sink,
                            Some(&wants),
                            tiles,
                            Some(&packed),
                        )
                        .unwrap()
                        .unwrap();
                        let case = Case {
                            q_start,
                            n,
                            window,
                            scale: scale as f64,
                            rule,
                            sinks: sink,
                            bands: &bands,
                            blocks: Some(blocks),
                            affine: None,
                        };
                        let want = expected(inputs.host(), sizes, &case);
                        let what = format!("({q_start}, {n}, {rule:?}, {window:?}, {tiles:?})");
                        let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                        for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                            let err = (g as f64 - w).abs();
                            assert!(err <= 2f64.powi(-8), "output {at}: {g} vs {w} {what}");
                        }
                        let table = table.to_vec2::<f32>().unwrap();
                        assert_eq!(table.len(), want.cells.len());
                        for (row, (got, want)) in table.iter().zip(&want.cells).enumerate() {
                            for (c, (&g, &w)) in got.iter().zip(want).enumerate() {
                                let err = (g as f64 - w).abs();
                                let tol = match c {
                                    QK_SUM | QK_ABS_SUM => 1e-4 * w.abs().max(1.0),
                                    _ => 1e-6 + 1e-5 * w.abs(),
                                };
                                assert!(err <= tol, "row {row} column {c}: {g} vs {w} {what}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn without_wants_the_one_column_is_the_sink_mass() {
        let sizes = Sizes {
            b: 1,
            heads: 2,
            kv: 1,
            t: 9,
            d: 4,
        };
        let t = sizes.t;
        let inputs = inputs(sizes, 5, 1.0);
        let sinks = [0.5f32, -2.0];
        let TileOutput { table, .. } = causal_attention(
            inputs.tensors(),
            QueryBlock {
                q_start: 0,
                n: t,
                window: KeyWindow::CAUSAL,
            },
            Logits {
                scale: 0.5,
                rule: &TileLogits::Plain,
                affine: None,
            },
            Some(&sinks),
            None,
            Tiles { rows: 2, keys: 3 },
            None,
        )
        .unwrap()
        .unwrap();
        let case = Case {
            n: t,
            scale: 0.5,
            sinks: Some(&sinks),
            ..Case::default()
        };
        let want = expected(inputs.host(), sizes, &case);
        let table = table.to_vec2::<f32>().unwrap();
        for (got, want) in table.iter().zip(&want.cells) {
            assert_eq!(got.len(), 1);
            assert!(
                (got[0] as f64 - want[SINK_MASS]).abs() < 1e-6,
                "{} vs {}",
                got[0],
                want[SINK_MASS]
            );
        }
    }

    #[test]
    fn columns_nobody_asked_for_stay_zero() {
        let sizes = Sizes {
            b: 1,
            heads: 4,
            kv: 2,
            t: 20,
            d: 4,
        };
        let inputs = inputs(sizes, 8, 1.5);
        let wants = RowWants {
            first: true,
            ..RowWants::default()
        };
        let TileOutput { table, .. } = causal_attention(
            inputs.tensors(),
            QueryBlock {
                q_start: 3,
                n: 17,
                window: KeyWindow::CAUSAL,
            },
            Logits {
                scale: 0.5,
                rule: &TileLogits::Plain,
                affine: None,
            },
            None,
            Some(&wants),
            Tiles { rows: 6, keys: 4 },
            None,
        )
        .unwrap()
        .unwrap();
        let case = Case {
            q_start: 3,
            n: 17,
            scale: 0.5,
            ..Case::default()
        };
        let want = expected(inputs.host(), sizes, &case);
        for (got, want) in table.to_vec2::<f32>().unwrap().iter().zip(&want.cells) {
            assert_eq!(got.len(), BANDS);
            assert!((got[FIRST] as f64 - want[FIRST]).abs() < 1e-6);
            assert_eq!((got[SUM], got[ENTROPY]), (0.0, 0.0));
        }
    }

    #[test]
    fn a_sink_far_above_every_logit_takes_all_the_mass_without_overflow() {
        // exp(1000 - max) overflows f64: the denominator is shifted by the sink instead
        let sizes = Sizes {
            b: 1,
            heads: 2,
            kv: 1,
            t: 12,
            d: 4,
        };
        let t = sizes.t;
        let inputs = inputs(sizes, 11, 1.0);
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: vec![(0, 1), (1, usize::MAX)],
            max_logit: false,
            key_blocks: None,
            key_sums_from: None,
        };
        let sinks = [1000f32, 1000.0];
        let TileOutput { out, table, .. } = causal_attention(
            inputs.tensors(),
            QueryBlock {
                q_start: 0,
                n: t,
                window: KeyWindow::CAUSAL,
            },
            Logits {
                scale: 0.5,
                rule: &TileLogits::Plain,
                affine: None,
            },
            Some(&sinks),
            Some(&wants),
            Tiles { rows: 2, keys: 5 },
            None,
        )
        .unwrap()
        .unwrap();
        // the real keys' softmax (without the sink) keeps its entropy
        let case = Case {
            n: t,
            scale: 0.5,
            ..Case::default()
        };
        let want = expected(inputs.host(), sizes, &case);
        for (got, want) in table.to_vec2::<f32>().unwrap().iter().zip(&want.cells) {
            assert_eq!(got[SINK_MASS], 1.0);
            assert_eq!((got[FIRST], got[SUM]), (0.0, 0.0));
            assert!(got[BANDS..].iter().all(|&w| w == 0.0));
            assert!(
                (got[ENTROPY] as f64 - want[ENTROPY]).abs() < 1e-5,
                "{:?}",
                got
            );
        }
        let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(out.iter().all(|&o| o == 0.0));
    }

    #[test]
    fn affine_tiles_give_the_weights_and_row_table_of_a_float64_affine_softmax() {
        // alpha from -0.2 to 1.2 (clipped activations stay in [0, 1]; the kernel takes any),
        // alpha_ma of both signs: some rows carry negative weights, and with alpha 0 and a
        // negative alpha_ma every weight of the row is negative (entropy NaN)
        let sizes = Sizes {
            b: 2,
            heads: 6,
            kv: 2,
            t: 33,
            d: 8,
        };
        let Sizes { b, heads, t, .. } = sizes;
        let inputs = inputs(sizes, 21, 2.0);
        let mut alpha: Vec<f32> = values(b * heads * t, 24, 0.7)
            .iter()
            .map(|a| a + 0.5)
            .collect();
        alpha[t + 5] = 0.0; // sequence 0, head 1 (alpha_ma -0.4), query 5
        let alpha_ma = [0.6f32, -0.4, 0.9, 0.2, -0.1, 1.0];
        let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
        // key blocks of 6 or 7 of the 33 keys; negative weights make negative maxima
        let blocks = KeyBlocks::new(5, t);
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: bands.clone(),
            key_blocks: Some(blocks),
            max_logit: true,
            key_sums_from: None,
        };
        let scale = 0.35f64;
        for (full, beta_length) in [(true, BetaLength::Full), (false, BetaLength::Visible)] {
            let affine = AffineTile {
                alpha: alpha.clone(),
                alpha_ma: alpha_ma.to_vec(),
                beta_length,
                seq_len: t,
            };
            for (q_start, n) in [(0, 33), (5, 20)] {
                for tiles in [
                    Tiles { rows: 12, keys: 7 },
                    Tiles { rows: 1, keys: 1 },
                    Tiles::default(),
                ] {
                    let TileOutput { out, table, .. } = causal_attention(
                        inputs.tensors(),
                        QueryBlock {
                            q_start,
                            n,
                            window: KeyWindow::CAUSAL,
                        },
                        Logits {
                            scale: scale as f32,
                            rule: &TileLogits::Plain,
                            affine: Some(&affine),
                        },
                        None,
                        Some(&wants),
                        tiles,
                        None,
                    )
                    .unwrap()
                    .unwrap();
                    let case = Case {
                        q_start,
                        n,
                        scale,
                        bands: &bands,
                        blocks: Some(blocks),
                        affine: Some(AffineCase {
                            alpha: &alpha,
                            alpha_ma: &alpha_ma,
                            full,
                        }),
                        ..Case::default()
                    };
                    let want = expected(inputs.host(), sizes, &case);
                    let close = |got: f32, want: f64| {
                        (got.is_nan() && want.is_nan())
                            || (got as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs()
                    };
                    let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                        assert!(
                            close(g, w),
                            "output {at}: {g} vs {w} ({full}, {q_start}, {tiles:?})"
                        );
                    }
                    let table = table.to_vec2::<f32>().unwrap();
                    let mut nan_rows = 0;
                    for (row, (got, want)) in table.iter().zip(&want.cells).enumerate() {
                        nan_rows += usize::from(want[ENTROPY].is_nan());
                        for (c, (&g, &w)) in got.iter().zip(want).enumerate() {
                            let qk = c == QK_SUM || c == QK_ABS_SUM;
                            assert!(
                                close(g, w)
                                    || (qk && (g as f64 - w).abs() <= 1e-4 * w.abs().max(1.0)),
                                "row {row} column {c}: {g} vs {w} ({full}, {q_start}, {tiles:?})"
                            );
                        }
                    }
                    if q_start == 0 {
                        assert!(nan_rows > 0, "the all-negative row is in the block");
                    }
                }
            }
        }
    }
}
