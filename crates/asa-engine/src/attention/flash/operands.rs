//! The flash tiles' operands: q, k and v (as tensors or host values, k and v packed for the
//! bf16 GEMM), the query block, the logit rule's tensors, the layer's sizes, and how rows
//! are split into tasks.

use candle_core::Tensor;
use rayon::prelude::*;

use super::affine::*;
use super::logits::*;
use asa_core::error::Result;
use asa_kernels::cpu::bf16_panels::PackedWeight;
use asa_kernels::cpu::host::with_cpu_f32;
pub use asa_kernels::qkv::{Qkv, QueryBlock};
use asa_kernels::KeyWindow;

/// Keys per tile. With [`ROWS_PER_TASK`] rows, a tile's logits and weights (384 KB each)
/// and its key and value tiles stay within a core's L2 and L3 share; measured best of 256,
/// 512 and 1,024 (SmolLM2 at 4k tokens, this project's 2-core AMD EPYC VM, 2026-11-24).
pub const KEY_TILE: usize = 512;

/// Query rows (the query heads of one kv head x queries) per task: enough rows for the
/// gemm kernels to run at speed; measured best of 48, 96, 192 and 384.
pub const ROWS_PER_TASK: usize = 192;

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
pub(super) struct Operands<'a> {
    pub(super) qkv: Qkv<'a, [f32]>,
    pub(super) packed: Option<&'a PackedKv>,
}

/// One kv head's keys and values `[t, d]` (host), and for the bf16 products the same
/// packed.
#[derive(Clone, Copy)]
pub(super) struct KeyValues<'a> {
    pub(super) k: &'a [f32],
    pub(super) v: &'a [f32],
    pub(super) packed: Option<&'a PackedHead>,
}

/// A layer's keys and values packed once for bf16 products (`asa_kernels::cpu::bf16_gemm`): with
/// them the tiles multiply as FlashAttention does in bf16. q is multiplied by the scale in
/// f32, then rounded to bf16; k and v are rounded (exact for a bf16 model's); each tile's
/// weights e are rounded for the value product only. Products are summed in f32; the
/// logits, the online softmax and every row sum stay f32/f64.
pub struct PackedKv {
    /// Per (sequence, kv head).
    pub(super) heads: Vec<PackedHead>,
}

/// One kv head's keys as a `[t, d]` weight (keys are output columns of q.k) and its values
/// as a `[d, t]` one (keys are the inner dimension of p.v).
pub(super) struct PackedHead {
    pub(super) k: PackedWeight,
    pub(super) v: PackedWeight,
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
pub(super) struct TaskRows {
    pub(super) seq: usize,
    pub(super) kv_head: usize,
    pub(super) q0: usize,
    pub(super) nq: usize,
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

/// Sizes of one layer's attention: `q` `[batch, heads, t, d]`, `k`/`v` `[batch, kv, t, d]`,
/// and the keys each query sees.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dims {
    pub(super) heads: usize,
    pub(super) kv: usize,
    pub(super) t: usize,
    pub(super) d: usize,
    pub(super) window: KeyWindow,
}
