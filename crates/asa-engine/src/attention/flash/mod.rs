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
//! `asa_kernels::row_table`; each is a sum over the row's keys of e = exp(y - m), y the
//! row's logits and m their running maximum, divided at the end by the row's denominator
//! S (+ the sink's e); `block_map`'s key-block columns are such sums over each key block
//! and the largest e there, rescaled with the others when m grows. The numbers are the materialised path's up to rounding, except where
//! a sink logit exceeds every real logit by more than ~87: there every f32 e of the
//! materialised path underflows and its entropy is NaN, while the tiles, which never shift
//! by the sink, keep the entropy of the (tiny but positive) weights the real keys get.

mod affine;
mod logits;
mod operands;
mod products;
mod row_sums;
mod task;
#[cfg(test)]
mod tests;

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::cpu_kept_weights::rows_within;
pub use affine::AffineTile;
use asa_core::error::Result;
use asa_kernels::cpu::bf16_panels::PANEL_WIDTH;
use asa_kernels::cpu::host::with_cpu_f32;
use asa_kernels::row_table::RowWants;
pub use logits::TileLogits;
use operands::*;
pub use operands::{Logits, PackedKv, Qkv, QueryBlock, Tiles, KEY_TILE, ROWS_PER_TASK};
use task::*;

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
