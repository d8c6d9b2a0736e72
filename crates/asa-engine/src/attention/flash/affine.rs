//! Affine-Scaled weights in tiles (alpha * softmax + beta): a first pass for each row's
//! softmax denominator, a second for the weights, the row table and the value product.

use std::mem::MaybeUninit;

use super::logits::*;
use super::operands::*;
use super::products::*;
use super::row_sums::*;
use super::task::*;
use crate::attention::cpu_affine::{affine_weight, beta};
use crate::attention::cpu_softmax::exp_row;
use crate::attention::variant::BetaLength;
use asa_hooks::row_pass::{clamped_entropy_sums, EntropySums};
use asa_kernels::cpu::host::lane_sum;
use asa_kernels::row_table::RowWants;
use asa_kernels::simd_dispatch;

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
pub(super) struct AffineSums {
    pub(super) first: f64,
    pub(super) sum: f64,
    /// [`clamped_entropy_sums`]: positive mass and sum w ln w.
    pub(super) entropy: EntropySums,
}

/// How one row's Affine-Scaled weights are made: alpha p + beta, p = e / S the softmax from
/// the row's final maximum and denominator (`softmax`).
#[derive(Debug, Clone, Copy)]
pub(super) struct AffineRow<'a> {
    pub(super) softmax: &'a RowSums,
    pub(super) alpha: f32,
    pub(super) beta: f32,
}

/// What the Affine-Scaled second pass keeps of one row: its weights' sums and its band and
/// key-block sums.
pub(super) struct AffineState<'a> {
    pub(super) acc: &'a mut AffineSums,
    pub(super) parts: RowParts<'a>,
}

/// The second pass over one row's visible keys of a tile (`at`): the weights of `row` into
/// `weights`, and their sums into `state`.
#[inline(always)]
pub(super) fn affine_tile_row(
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
pub(super) fn finish_affine_row(
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

/// The Affine-Scaled second pass: with each row's finished softmax (`buf.sums`), the weights
/// alpha p + beta of every tile, their sums and bands, and the output.
pub(super) fn affine_pass(
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
