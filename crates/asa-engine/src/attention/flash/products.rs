//! The two GEMMs of a tile: q.k into the tile's logits, weights x v into the output rows.

use gemm::{gemm, Parallelism};

use super::operands::*;
use super::task::*;
use asa_hooks::KeyWindow;
use asa_kernels::cpu::bf16_gemm::product_into;

/// Where a task's tiles sit: `rows` query rows, head dim `d`, tile buffers of row stride
/// `tile`, this tile's `width` keys from key `k0`.
#[derive(Debug, Clone, Copy)]
pub(super) struct TileAt {
    pub(super) rows: usize,
    pub(super) d: usize,
    pub(super) tile: usize,
    pub(super) k0: usize,
    pub(super) width: usize,
}

/// logits `[rows, tile]` <- q_rows `[rows, d]` x the key rows k0..k0 + width of `k`.
pub(super) fn qk_tile(logits: &mut [f32], q_rows: &[f32], k: &[f32], at: TileAt) {
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
pub(super) fn value_tile(out: &mut [f32], weights: &[f32], v: &[f32], at: TileAt) {
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
pub(super) fn qk_products(buf: &mut TaskBuffers, kv: KeyValues, tile: TileAt) {
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
pub(super) fn value_products(buf: &mut TaskBuffers, kv: KeyValues, tile: TileAt) {
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
pub(super) fn visible_in_tile(
    window: KeyWindow,
    i: usize,
    k0: usize,
    width: usize,
) -> (usize, usize) {
    let keys = window.keys(i);
    let hi = keys.end.clamp(k0, k0 + width) - k0;
    let lo = keys.start.clamp(k0, k0 + width) - k0;
    (lo.min(hi), hi)
}
