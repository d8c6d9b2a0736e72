//! Flash-style causal attention on the CPU: a query block's output and its row table
//! without the block's `[heads, n, keys]` weights ever existing whole. For each (sequence,
//! kv head) and tile of queries, the keys are visited in tiles of [`KEY_TILE`]: the q.k
//! tile (one small gemm), the online softmax (the row maximum so far, with every sum
//! rescaled when it grows), the row table's sums and the value product (a second gemm)
//! all stay in the core's caches. The block's logits and weights, 150 MB per block at
//! 32k tokens for SmolLM2, are never written to memory and read back.
//!
//! The same numbers as [`super::cpu_softmax::causal_softmax_rows`] followed by the value
//! product, which it replaces where the probe takes row tables (or nothing): plain
//! logits, with or without sinks, f32, no autograd. The row table's columns are those of
//! `crate::probe::row_table`; each is a sum over the row's keys of e = exp(y - m),
//! y = scale * q.k and m the running maximum, divided at the end by the row's
//! denominator S (+ the sink's e).

use std::mem::MaybeUninit;

use candle_core::{Device, Tensor};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::cpu_softmax::{entropy_from_sums, exp_row};
use crate::cpu::host::{lane_max, lane_sum, with_cpu_f32};
use crate::error::Result;
use crate::metrics::row_pass::{band_keys, qk_row};
use crate::probe::row_table::{
    RowWants, BANDS, ENTROPY, FIRST, QK_ABS_SUM, QK_SUM, SINK_MASS, SUM,
};
use crate::simd_dispatch;

/// Keys per tile. With [`ROWS_PER_TASK`] rows, a tile's logits and weights (384 KB each)
/// and its key and value tiles stay within a core's L2 and L3 share; measured best of 256,
/// 512 and 1,024 (SmolLM2 at 4k tokens, this project's 2-core AMD EPYC VM, 2026-11-24).
pub const KEY_TILE: usize = 512;

/// Query rows (the query heads of one kv head x queries) per task: enough rows for the
/// gemm kernels to run at speed; measured best of 48, 96, 192 and 384.
pub const ROWS_PER_TASK: usize = 192;

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

/// Sizes of one layer's attention: `q` `[batch, heads, t, d]`, `k`/`v` `[batch, kv, t, d]`.
#[derive(Debug, Clone, Copy)]
struct Dims {
    heads: usize,
    kv: usize,
    t: usize,
    d: usize,
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
}

impl RowSums {
    fn new() -> Self {
        RowSums {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            sum_ey: 0.0,
            first: 0.0,
            qk: 0.0,
            qk_abs: 0.0,
        }
    }
}

/// One query row's visible keys of one key tile: raw q.k `x` in, e out (`weights`, same
/// length), sums updated; `bands` are the row's band sums and `out` its output row, both
/// rescaled when the maximum grows. `k0` is the tile's first key, `i` the query.
#[inline(always)]
fn tile_row(
    x: &[f32],
    weights: &mut [MaybeUninit<f32>],
    sums: &mut RowSums,
    bands: &mut [f64],
    out: &mut [f32],
    (scale, k0, i): (f32, usize, usize),
    wants: Option<&RowWants>,
) {
    let (qk, qk_abs) = qk_row(x);
    sums.qk += qk;
    sums.qk_abs += qk_abs;
    let max = sums.max.max(lane_max(x, |v| v * scale));
    if max > sums.max && sums.max > f32::NEG_INFINITY {
        // e (y - m) = e' (y - m') / c + e' (m' - m) / c with c = exp(m - m') and e' = c e
        let shift = sums.max as f64 - max as f64;
        let c = shift.exp();
        sums.sum_ey = c * (sums.sum_ey + sums.sum * shift);
        sums.sum *= c;
        sums.first *= c;
        for b in bands.iter_mut() {
            *b *= c;
        }
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
    let Some(wants) = wants else { return };
    let tile_end = k0 + e.len();
    for (band, &(lo, hi)) in bands.iter_mut().zip(&wants.bands) {
        let (start, end) = band_keys(i, lo, hi);
        let (start, end) = (start.max(k0), end.min(tile_end));
        if start == k0 && end == tile_end {
            // the band holds the whole tile (most tiles of a long row): its sum is known
            *band += sum;
        } else if start < end {
            *band += lane_sum(&e[start - k0..end - k0], |v| v);
        }
    }
}

/// The row's table line (the columns of `crate::probe::row_table`) and its output row
/// divided by the denominator; `sink` is the row's sink logit.
fn finish_row(
    sums: &RowSums,
    bands: &[f64],
    out: &mut [f32],
    cell: &mut [f32],
    (sink, i): (Option<f32>, usize),
    wants: Option<&RowWants>,
) {
    let sink_e = sink.map_or(0.0, |s| (s as f64 - sums.max as f64).exp());
    let total = sums.sum + sink_e;
    let inv = 1.0 / total;
    for o in out.iter_mut() {
        *o = (*o as f64 * inv) as f32;
    }
    let Some(wants) = wants else {
        cell[0] = (sink_e * inv) as f32;
        return;
    };
    let first = (sums.first * inv) as f32;
    if wants.first {
        cell[FIRST] = first;
    }
    if wants.sum {
        cell[SUM] = (sums.sum * inv) as f32;
    }
    if wants.entropy {
        cell[ENTROPY] = entropy_from_sums(sums.sum, sums.sum_ey);
    }
    cell[SINK_MASS] = (sink_e * inv) as f32;
    cell[QK_SUM] = sums.qk as f32;
    cell[QK_ABS_SUM] = sums.qk_abs as f32;
    if !wants.bands.is_empty() {
        cell[BANDS] = if i > 0 { first } else { 0.0 };
        for (c, b) in cell[BANDS + 1..].iter_mut().zip(bands) {
            *c = (b * inv) as f32;
        }
    }
}

/// One task: the query heads `head0..head0 + groups` (sharing one kv head) of sequence
/// `seq`, queries `q0..q0 + nq`. Returns their output rows `[groups * nq, d]` and table
/// cells `[groups * nq, width]`, row `g * nq + qi`.
#[allow(clippy::too_many_arguments)]
fn task(
    (q, k, v): (&[f32], &[f32], &[f32]),
    dims: Dims,
    (seq, kv_head, q0, nq): (usize, usize, usize, usize),
    scale: f32,
    sinks: Option<&[f32]>,
    wants: Option<&RowWants>,
    tile: usize,
) -> (Vec<f32>, Vec<f32>) {
    let Dims { heads, kv, t, d } = dims;
    let groups = heads / kv;
    let rows = groups * nq;
    let width = wants.map_or(1, RowWants::width);
    let n_bands = wants.map_or(0, |w| w.bands.len());
    // the rows' queries packed [rows, d]
    let mut q_rows = Vec::with_capacity(rows * d);
    for g in 0..groups {
        let head = kv_head * groups + g;
        let at = ((seq * heads + head) * t + q0) * d;
        q_rows.extend_from_slice(&q[at..at + nq * d]);
    }
    let kv_at = (seq * kv + kv_head) * t * d;
    let (k, v) = (&k[kv_at..kv_at + t * d], &v[kv_at..kv_at + t * d]);
    let keys = q0 + nq;
    let mut logits = vec![0f32; rows * tile];
    let mut weights = vec![0f32; rows * tile];
    let mut out = vec![0f32; rows * d];
    let mut sums = vec![RowSums::new(); rows];
    let mut bands = vec![0f64; rows * n_bands];
    for k0 in (0..keys).step_by(tile) {
        let width_k = tile.min(keys - k0);
        // SAFETY: logits [rows, tile] (row stride `tile`) <- q_rows [rows, d] x k^T, k's rows
        // k0..k0 + width_k of d values each, all inside their slices
        unsafe {
            gemm(
                rows,
                width_k,
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
        for r in 0..rows {
            let i = q0 + r % nq;
            let row = r * tile;
            let visible = if i >= k0 {
                (i + 1 - k0).min(width_k)
            } else {
                0
            };
            let (e, hidden) = weights[row..row + width_k].split_at_mut(visible);
            // invisible keys weigh 0 in the value product
            hidden.fill(0.0);
            if visible == 0 {
                continue;
            }
            // SAFETY: f32 -> MaybeUninit<f32> of the same slice; tile_row only writes floats
            let e = unsafe { &mut *(e as *mut [f32] as *mut [MaybeUninit<f32>]) };
            let x = &logits[row..row + visible];
            let band = &mut bands[r * n_bands..(r + 1) * n_bands];
            let o = &mut out[r * d..(r + 1) * d];
            let at = (scale, k0, i);
            simd_dispatch!(tile_row(x, e, &mut sums[r], band, o, at, wants));
        }
        // SAFETY: out [rows, d] += weights [rows, width_k] (row stride `tile`) x v's rows
        // k0..k0 + width_k
        unsafe {
            gemm(
                rows,
                d,
                width_k,
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
    let mut cells = vec![0f32; rows * width];
    for r in 0..rows {
        let head = kv_head * groups + r / nq;
        let sink = sinks.map(|s| s[head]);
        finish_row(
            &sums[r],
            &bands[r * n_bands..(r + 1) * n_bands],
            &mut out[r * d..(r + 1) * d],
            &mut cells[r * width..(r + 1) * width],
            (sink, q0 + r % nq),
            wants,
        );
    }
    (out, cells)
}

/// Causal attention of the queries `q_start..q_start + n` of `q` `[batch, heads, t, d]`
/// against keys and values `k`, `v` `[batch, kv, t, d]` (contiguous f32 on the CPU):
/// softmax(scale * q.k) over keys j <= i, with per-head sink logits `sinks` `[heads]` in
/// the denominator when given. Returns the output `[batch, heads, n, d]` and the row table
/// `[batch * heads * n, wants.width()]` (with no `wants`, one column: the sink mass);
/// `None` where the tensors are not contiguous f32 CPU tensors.
pub fn causal_attention(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    (q_start, n): (usize, usize),
    scale: f32,
    sinks: Option<&[f32]>,
    wants: Option<&RowWants>,
    tiles: Tiles,
) -> Result<Option<(Tensor, Tensor)>> {
    let (b, heads, t, d) = q.dims4()?;
    let kv = k.dim(1)?;
    if n == 0 || q_start + n > t || kv == 0 || heads % kv != 0 || v.dims4()? != k.dims4()? {
        return Ok(None);
    }
    let dims = Dims { heads, kv, t, d };
    let groups = heads / kv;
    let per_task = (tiles.rows / groups).clamp(1, n);
    let width = wants.map_or(1, RowWants::width);
    let tasks: Vec<(usize, usize, usize, usize)> = (0..b)
        .flat_map(|seq| (0..kv).map(move |h| (seq, h)))
        .flat_map(|(seq, h)| {
            (0..n)
                .step_by(per_task)
                .map(move |at| (seq, h, q_start + at, per_task.min(n - at)))
        })
        .collect();
    let computed = with_cpu_f32(q, |q| {
        with_cpu_f32(k, |k| {
            with_cpu_f32(v, |v| {
                tasks
                    .par_iter()
                    .map(|&at| task((q, k, v), dims, at, scale, sinks, wants, tiles.keys))
                    .collect::<Vec<_>>()
            })
        })
    });
    let Some(Some(Some(results))) = computed else {
        return Ok(None);
    };
    // the tasks' rows into [batch, heads, n] order
    let mut out = vec![0f32; b * heads * n * d];
    let mut table = vec![0f32; b * heads * n * width];
    for (&(seq, kv_head, q0, nq), (task_out, task_cells)) in tasks.iter().zip(&results) {
        for g in 0..groups {
            let row = (seq * heads + kv_head * groups + g) * n + (q0 - q_start);
            let from = g * nq;
            out[row * d..(row + nq) * d].copy_from_slice(&task_out[from * d..(from + nq) * d]);
            table[row * width..(row + nq) * width]
                .copy_from_slice(&task_cells[from * width..(from + nq) * width]);
        }
    }
    Ok(Some((
        Tensor::from_vec(out, (b, heads, n, d), &Device::Cpu)?,
        Tensor::from_vec(table, (b * heads * n, width), &Device::Cpu)?,
    )))
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

    /// The reference, in f64 by hand: for each query row, softmax over the visible keys (and
    /// the sink), its weights' reductions and the weighted sum of values.
    struct Expected {
        out: Vec<f64>,
        cells: Vec<Vec<f64>>,
    }

    #[allow(clippy::too_many_arguments)]
    fn expected(
        (q, k, v): (&[f32], &[f32], &[f32]),
        (b, heads, kv, t, d): (usize, usize, usize, usize, usize),
        (q_start, n): (usize, usize),
        scale: f64,
        sinks: Option<&[f32]>,
        bands: &[(usize, usize)],
    ) -> Expected {
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
                    // q.k summed in f32, as the gemm does, then widened
                    let raw: Vec<f64> = (0..=i)
                        .map(|j| qi.iter().zip(key(j)).map(|(a, b)| a * b).sum::<f32>() as f64)
                        .collect();
                    let y: Vec<f64> = raw.iter().map(|x| x * scale).collect();
                    let sink = sinks.map(|s| s[h] as f64);
                    let m = y.iter().cloned().chain(sink).fold(f64::MIN, f64::max);
                    let e: Vec<f64> = y.iter().map(|y| (y - m).exp()).collect();
                    let sink_e = sink.map_or(0.0, |s| (s - m).exp());
                    let real: f64 = e.iter().sum();
                    let z = real + sink_e;
                    let w: Vec<f64> = e.iter().map(|e| e / z).collect();
                    for c in 0..d {
                        out.push((0..=i).map(|j| w[j] * value(j)[c] as f64).sum());
                    }
                    let entropy: f64 = e.iter().map(|e| e / real).map(|p| -p * p.ln()).sum();
                    let mut cell = vec![0.0; BANDS + 1 + bands.len()];
                    cell[FIRST] = w[0];
                    cell[SUM] = w.iter().sum();
                    cell[ENTROPY] = entropy;
                    cell[SINK_MASS] = sink_e / z;
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
                    cells.push(cell);
                }
            }
        }
        Expected { out, cells }
    }

    #[test]
    fn tiles_give_the_attention_and_row_table_of_a_float64_softmax() {
        // 2 sequences, 6 query heads on 2 kv heads, 45 positions, head dim 8; logits up to
        // ~±25 so the running maximum moves across tiles; tiles of 4 rows x 7 keys cross
        // every boundary (diagonal tiles, partial last tiles, rows without visible keys)
        let (b, heads, kv, t, d) = (2, 6, 2, 45, 8);
        let q = values(b * heads * t * d, 1, 2.5);
        let k = values(b * kv * t * d, 2, 2.5);
        let v = values(b * kv * t * d, 3, 1.0);
        let tensor = |x: &Vec<f32>, h: usize| {
            Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap()
        };
        let (qt, kt, vt) = (tensor(&q, heads), tensor(&k, kv), tensor(&v, kv));
        let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
        let wants = RowWants {
            first: true,
            sum: true,
            entropy: true,
            bands: bands.clone(),
        };
        let sinks = values(heads, 4, 3.0);
        let scale = 1.0 / (d as f64).sqrt();
        for (q_start, n) in [(0, 45), (0, 13), (30, 15), (44, 1)] {
            for sink in [None, Some(&sinks[..])] {
                for tiles in [
                    Tiles { rows: 4, keys: 7 },
                    Tiles { rows: 1, keys: 1 },
                    Tiles::default(),
                ] {
                    let (out, table) = causal_attention(
                        (&qt, &kt, &vt),
                        (q_start, n),
                        scale as f32,
                        sink,
                        Some(&wants),
                        tiles,
                    )
                    .unwrap()
                    .unwrap();
                    let want = expected(
                        (&q, &k, &v),
                        (b, heads, kv, t, d),
                        (q_start, n),
                        scale,
                        sink,
                        &bands,
                    );
                    let close =
                        |got: f32, want: f64| (got as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs();
                    let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    assert_eq!(out.len(), want.out.len());
                    for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                        assert!(
                            close(g, w),
                            "output {at}: {g} vs {w} ({q_start}, {n}, {tiles:?})"
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
                                "row {row} column {c}: {g} vs {w} ({q_start}, {n}, sink {}, {tiles:?})",
                                sink.is_some()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn without_wants_the_one_column_is_the_sink_mass() {
        let (b, heads, kv, t, d) = (1, 2, 1, 9, 4);
        let q = values(b * heads * t * d, 5, 1.0);
        let k = values(b * kv * t * d, 6, 1.0);
        let v = values(b * kv * t * d, 7, 1.0);
        let tensor = |x: &Vec<f32>, h: usize| {
            Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap()
        };
        let sinks = [0.5f32, -2.0];
        let (_, table) = causal_attention(
            (&tensor(&q, heads), &tensor(&k, kv), &tensor(&v, kv)),
            (0, t),
            0.5,
            Some(&sinks),
            None,
            Tiles { rows: 2, keys: 3 },
        )
        .unwrap()
        .unwrap();
        let want = expected(
            (&q, &k, &v),
            (b, heads, kv, t, d),
            (0, t),
            0.5,
            Some(&sinks),
            &[],
        );
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
}
