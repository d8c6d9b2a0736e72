//! One task: a tile of query rows of one (sequence, kv head) visited over every key tile
//! (the online pass), with its buffers.

use std::mem::MaybeUninit;

use super::affine::*;
use super::logits::*;
use super::operands::*;
use super::products::*;
use super::row_sums::*;
use crate::attention::cpu_kept_weights::KeptWeights;
use asa_kernels::cpu::bf16_panels::{Bf16Rows, PANEL_WIDTH};
use asa_kernels::row_table::RowWants;
use asa_kernels::simd_dispatch;

/// A task's output rows `[rows, d]`, table cells `[rows, width]` and key_received sums
/// `[groups, keys]` (empty when not asked for).
pub(super) type TaskOutput = (Vec<f32>, Vec<f32>, Vec<f32>);

/// Where one task sits: sequence `seq`, the query heads of kv head `kv_head` (`groups` of
/// them), queries `q0..q0 + nq`, in tiles of `tile` keys from key `first_key` (the first its
/// first query sees: tiles wholly outside a sliding window are skipped); `rows = groups * nq`.
#[derive(Debug, Clone, Copy)]
pub(super) struct TaskAt {
    pub(super) seq: usize,
    pub(super) kv_head: usize,
    pub(super) groups: usize,
    pub(super) q0: usize,
    pub(super) nq: usize,
    pub(super) rows: usize,
    pub(super) first_key: usize,
    pub(super) tile: usize,
    pub(super) n_bands: usize,
    /// Key blocks per row (0 without `block_map`).
    pub(super) n_blocks: usize,
}

impl TaskAt {
    /// The task of `rows` with key tiles of `tile`; with `panel_aligned` (bf16 products)
    /// the tiles start at a multiple of the panel width (keys before the first one a query
    /// sees are masked like any other hidden key).
    pub(super) fn new(
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
    pub(super) fn head(&self, r: usize) -> usize {
        self.kv_head * self.groups + r / self.nq
    }

    /// The query of task row `r`.
    pub(super) fn query(&self, r: usize) -> usize {
        self.q0 + r % self.nq
    }

    /// The end of the task's keys: the last query's own key, + 1.
    pub(super) fn keys(&self) -> usize {
        self.q0 + self.nq
    }

    /// The first key of each of the task's key tiles.
    pub(super) fn tile_starts(&self) -> impl Iterator<Item = usize> {
        (self.first_key..self.keys()).step_by(self.tile)
    }

    /// Tile geometry of the tile from key `k0`.
    pub(super) fn tile_at(&self, d: usize, k0: usize) -> TileAt {
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
pub(super) struct TaskBuffers {
    pub(super) q_rows: Vec<f32>,
    pub(super) q_bf16: Bf16Rows,
    pub(super) weights_bf16: Bf16Rows,
    /// key_received's sums `[groups, keys]` over the queries from `received_from` on
    /// (empty when not asked for).
    pub(super) received: Vec<f32>,
    pub(super) received_from: usize,
    /// The online pass's weights of the rows key_received sums (softmax weights only).
    pub(super) kept: Option<KeptWeights>,
    pub(super) logits: Vec<f32>,
    pub(super) weights: Vec<f32>,
    pub(super) scratch: Vec<f32>,
    pub(super) out: Vec<f32>,
    pub(super) sums: Vec<RowSums>,
    pub(super) parts: TaskParts,
}

impl TaskBuffers {
    /// Buffers for task `at` with its query rows packed `[rows, d]` from `q`, and with
    /// `bf16_scale` the rows times it rounded to bf16.
    pub(super) fn new(
        q: &[f32],
        dims: Dims,
        at: TaskAt,
        rule: &TileLogits,
        bf16_scale: Option<f32>,
    ) -> Self {
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
pub(super) fn task(
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
pub(super) fn add_kept_weights(buf: &mut TaskBuffers, at: TaskAt, sinks: Option<&[f32]>) {
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
pub(super) fn online_pass(
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
