//! The activation rows of the bf16 GEMM ([`super::bf16_gemm::matmul`]) in tiles of
//! [`TILE_ROWS`] rows, pair-interleaved: for each k pair, the tile's rows' pairs side by side.
//!
//! The register tile broadcasts one 32-bit pair of each of its rows per k pair. From
//! row-major rows those are [`TILE_ROWS`] reads a whole row apart; from a tile they are one
//! contiguous stream of 24 bytes a pair, which the hardware prefetcher follows from L3 while
//! the weight's panel streams from L2 (measured on the 8B shapes: 400-440 GFLOP/s against
//! 350-390 from row-major rows, `benches/bf16_gemm.rs`).

use half::bf16;

use super::bf16_panels::fill_chunks;

/// Rows of one tile (x 64 columns: the GEMM's 24 accumulators).
pub const TILE_ROWS: usize = 6;

/// Activation rows `[m, k]` as bf16 pairs in tiles of [`TILE_ROWS`] rows: tile `t`, pair
/// `j`, row `r` at `(t * pairs + j) * TILE_ROWS + r`, holding `(x[2j], x[2j + 1])` of row
/// `t * TILE_ROWS + r` (low half first). An odd k's last pair and the last tile's missing
/// rows are zeros.
pub struct RowTiles {
    /// Rows.
    pub m: usize,
    /// Values a row.
    pub k: usize,
    pairs: usize,
    data: Vec<u32>,
}

impl RowTiles {
    /// bf16 rows `[m, k]` (row-major) as they are.
    pub fn from_bf16(xs: &[bf16], m: usize, k: usize) -> Self {
        assert_eq!(xs.len(), m * k, "rows [{m}, {k}] have {} values", xs.len());
        Self::build(m, k, |row, dst| {
            for (d, s) in dst.iter_mut().zip(&xs[row * k..(row + 1) * k]) {
                *d = s.to_bits();
            }
        })
    }

    /// f32 rows `[m, k]` (row-major) rounded to the nearest bf16 (ties to even), as torch
    /// rounds.
    pub fn from_f32(xs: &[f32], m: usize, k: usize) -> Self {
        assert_eq!(xs.len(), m * k, "rows [{m}, {k}] have {} values", xs.len());
        Self::build(m, k, |row, dst| {
            super::bf16_panels::round_row(&xs[row * k..(row + 1) * k], &mut dst[..k])
        })
    }

    /// The tiles of the rows that `fill(row, bits)` writes (`k` bits; the padding past k is
    /// zero), the tiles shared out to both cores when the rows are large.
    pub fn build(m: usize, k: usize, fill: impl Fn(usize, &mut [u16]) + Sync) -> Self {
        let pairs = k.div_ceil(2);
        let mut data = vec![0u32; m.div_ceil(TILE_ROWS) * pairs * TILE_ROWS];
        let interleave = |scratch: &mut Vec<u16>, t: usize, tile: &mut [u32]| {
            let rows = t * TILE_ROWS..((t + 1) * TILE_ROWS).min(m);
            scratch.clear();
            scratch.resize(TILE_ROWS * pairs * 2, 0);
            for (r, row) in rows.enumerate() {
                fill(row, &mut scratch[r * pairs * 2..(r + 1) * pairs * 2]);
            }
            for (j, pair) in tile.chunks_exact_mut(TILE_ROWS).enumerate() {
                for (r, dst) in pair.iter_mut().enumerate() {
                    let at = r * pairs * 2 + 2 * j;
                    *dst = scratch[at] as u32 | (scratch[at + 1] as u32) << 16;
                }
            }
        };
        fill_chunks(&mut data, (pairs * TILE_ROWS).max(1), m * k, interleave);
        RowTiles { m, k, pairs, data }
    }

    /// k pairs (k / 2 rounded up).
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// Tiles of [`TILE_ROWS`] rows (the last may be partial).
    pub fn tiles(&self) -> usize {
        self.m.div_ceil(TILE_ROWS)
    }

    /// Tile `t`: `pairs` x [`TILE_ROWS`] pairs.
    pub fn tile(&self, t: usize) -> &[u32] {
        let len = self.pairs * TILE_ROWS;
        &self.data[t * len..(t + 1) * len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_interleave_each_rows_pairs() {
        // x[r][i] = r * 10 + i: m = 7 (a partial second tile), k = 5 (the last pair padded)
        let (m, k) = (7, 5);
        let xs: Vec<f32> = (0..m * k).map(|i| ((i / k) * 10 + i % k) as f32).collect();
        let halves: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
        for tiles in [
            RowTiles::from_f32(&xs, m, k),
            RowTiles::from_bf16(&halves, m, k),
        ] {
            assert_eq!((tiles.pairs(), tiles.tiles()), (3, 2));
            let at = |t: usize, j: usize, r: usize| {
                let pair = tiles.tile(t)[j * TILE_ROWS + r];
                let value = |bits: u32| bf16::from_bits(bits as u16).to_f32();
                (value(pair & 0xffff), value(pair >> 16))
            };
            assert_eq!(at(0, 0, 0), (0.0, 1.0));
            assert_eq!(at(0, 1, 3), (32.0, 33.0));
            assert_eq!(at(0, 2, 5), (54.0, 0.0));
            assert_eq!(at(1, 1, 0), (62.0, 63.0));
            assert_eq!(at(1, 1, 1), (0.0, 0.0), "rows past m are zero");
        }
    }

    #[test]
    fn large_rows_round_as_half_does_on_both_cores() {
        // past the size that shares the tiles out to both cores
        let (m, k) = (301, 4001);
        let xs: Vec<f32> = (0..m * k)
            .map(|i| (i as f32 * 0.0137).sin() * 3e4 + f32::from_bits(0x3f80_8000 + (i % 7) as u32))
            .collect();
        let tiles = RowTiles::from_f32(&xs, m, k);
        for (row, i) in [(0, 0), (5, 4000), (6, 1), (300, 3999), (173, 2222)] {
            let pair = tiles.tile(row / TILE_ROWS)[(i / 2) * TILE_ROWS + row % TILE_ROWS];
            let bits = if i % 2 == 0 {
                pair as u16
            } else {
                (pair >> 16) as u16
            };
            assert_eq!(
                bits,
                bf16::from_f32(xs[row * k + i]).to_bits(),
                "[{row}, {i}]"
            );
        }
    }
}
