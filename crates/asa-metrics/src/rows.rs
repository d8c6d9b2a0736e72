//! Per-row reductions: one value per (sequence, head, query) pulled off the device as a
//! small vector, then pooled on the host in f64 per (layer, sequence, head).

use std::ops::Range;

use super::merge::Merge;

use candle_core::{DType, Tensor};

use asa_core::error::Result;
use asa_kernels::row_table::Column;

/// A `[batch, head, n]` tensor as a host vector (row-major).
pub fn to_host(xs: &Tensor) -> Result<Vec<f32>> {
    Ok(xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Sums and counts of a per-row quantity per (layer, sequence, head), over queries
/// `i >= min_query`; NaN rows are counted apart and left out.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RowAccumulator {
    heads: usize,
    min_query: usize,
    /// `[layer][seq][head]` sums and counts.
    sum: Vec<Vec<Vec<f64>>>,
    count: Vec<Vec<Vec<u64>>>,
    nan: Vec<u64>,
}

impl RowAccumulator {
    /// For `layers` x `seqs` x `heads` cells, pooling queries `>= min_query`.
    pub fn new(layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        RowAccumulator {
            heads,
            min_query,
            sum: vec![vec![vec![0.0; heads]; seqs]; layers],
            count: vec![vec![vec![0; heads]; seqs]; layers],
            nan: vec![0; layers],
        }
    }

    /// Adds a block of values `[batch, head, n]` (host, row-major) for queries
    /// `q_start .. q_start + n` of sequences `seq_offset ..`.
    pub fn add<'v>(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        n: usize,
        values: impl Into<Column<'v>>,
    ) {
        let (table, width) = values.into().as_table();
        let pools = pool_rows(table, width, n, self.counted_rows(q_start, n), &[0]);
        self.add_pools(layer, seq_offset, &pools[0]);
    }

    /// The rows of a block of `n` queries from `q_start` that count: queries `>= min_query`.
    pub fn counted_rows(&self, q_start: usize, n: usize) -> Range<usize> {
        self.min_query.saturating_sub(q_start).min(n)..n
    }

    /// Adds a block's pools `[batch * head]` of sequences `seq_offset ..` (see [`pool_rows`];
    /// the rows pooled must be [`Self::counted_rows`]).
    pub fn add_pools(&mut self, layer: usize, seq_offset: usize, pools: &[Pool]) {
        for (cell, pool) in pools.iter().enumerate() {
            let (b, h) = (cell / self.heads, cell % self.heads);
            self.sum[layer][seq_offset + b][h] += pool.sum;
            self.count[layer][seq_offset + b][h] += pool.count;
            self.nan[layer] += pool.nan;
        }
    }

    /// Pooled mean over sequences, heads and queries of `layer`.
    pub fn layer_mean(&self, layer: usize) -> f64 {
        let (s, c) = self.sum[layer]
            .iter()
            .zip(&self.count[layer])
            .flat_map(|(s, c)| s.iter().zip(c))
            .fold((0.0, 0u64), |(a, n), (s, c)| (a + s, n + c));
        s / c as f64
    }

    /// Standard deviation over sequences (ddof 0) of each sequence's mean over heads and
    /// queries of `layer`.
    pub fn layer_std_over_seqs(&self, layer: usize) -> f64 {
        let per_seq: Vec<f64> = self.sum[layer]
            .iter()
            .zip(&self.count[layer])
            .map(|(s, c)| s.iter().sum::<f64>() / c.iter().sum::<u64>() as f64)
            .collect();
        super::summary::std_pop(&per_seq)
    }

    /// Mean over sequences and queries of `(layer, head)`.
    pub fn head_mean(&self, layer: usize, head: usize) -> f64 {
        let s: f64 = self.sum[layer].iter().map(|s| s[head]).sum();
        let c: u64 = self.count[layer].iter().map(|c| c[head]).sum();
        s / c as f64
    }

    /// NaN rows seen in `layer`.
    pub fn nan_count(&self, layer: usize) -> u64 {
        self.nan[layer]
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.sum.len()
    }

    /// Number of heads.
    pub fn heads(&self) -> usize {
        self.heads
    }
}

/// The values of one (sequence, head) of a block pooled: sum (f64) and count of the values
/// that are not NaN, and the NaN count.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pool {
    pub sum: f64,
    pub count: u64,
    pub nan: u64,
}

/// Pools columns `cols` of a host row table (`width` values per row, rows in
/// `[batch, head, n]` order) over the rows `rows` of every (sequence, head):
/// `[col][batch * head]`. The rows are summed in a fixed order, so the sums are the same on
/// every run.
pub fn pool_rows(
    table: &[f32],
    width: usize,
    n: usize,
    rows: Range<usize>,
    cols: &[usize],
) -> Vec<Vec<Pool>> {
    let width = width.max(1);
    // the last row may be cut short after its last column (a column view of a table)
    let cells = if n == 0 {
        0
    } else {
        table.len().div_ceil(width) / n
    };
    let mut pools = vec![vec![Pool::default(); cells]; cols.len()];
    if rows.is_empty() {
        return pools;
    }
    for cell in 0..cells {
        let start = (cell * n + rows.start) * width;
        let end = ((cell * n + rows.end) * width).min(table.len());
        let block = &table[start..end];
        for (col, &c) in pools.iter_mut().zip(cols) {
            col[cell] = pool_column(&block[c..], width, rows.len());
        }
    }
    pools
}

/// Pools `count` values `stride` apart: four interleaved partial sums (independent adds
/// keep the pipeline full), NaN counted apart.
#[inline(always)]
fn pool_column(values: &[f32], stride: usize, count: usize) -> Pool {
    let mut sums = [0.0f64; 4];
    let mut kept = [0u64; 4];
    let mut add = |lane: usize, v: f32| {
        let keep = !v.is_nan();
        sums[lane] += if keep { v as f64 } else { 0.0 };
        kept[lane] += keep as u64;
    };
    let full = count / 4 * 4;
    for i in (0..full).step_by(4) {
        for lane in 0..4 {
            add(lane, values[(i + lane) * stride]);
        }
    }
    for i in full..count {
        add(0, values[i * stride]);
    }
    let count_kept: u64 = kept.iter().sum();
    Pool {
        sum: (sums[0] + sums[1]) + (sums[2] + sums[3]),
        count: count_kept,
        nan: count as u64 - count_kept,
    }
}

impl Merge for RowAccumulator {
    fn merge(&mut self, other: &RowAccumulator) {
        self.sum.merge(&other.sum);
        self.count.merge(&other.count);
        self.nan.merge(&other.nan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asa_kernels::row_table::{split_table, RowWants};

    /// A table of 2 cells (sequence, head) x 7 queries x width 6: value 100 * cell + 10 *
    /// query + column, with a NaN in cell 1, query 5, column 2.
    fn table() -> Vec<f32> {
        let mut t = Vec::new();
        for cell in 0..2 {
            for q in 0..7 {
                for c in 0..6 {
                    let nan = cell == 1 && q == 5 && c == 2;
                    t.push(if nan {
                        f32::NAN
                    } else {
                        (100 * cell + 10 * q + c) as f32
                    });
                }
            }
        }
        t
    }

    #[test]
    fn pools_by_hand() {
        let t = table();
        // rows 2..7 (five rows, more than the four lanes, with a tail)
        let pools = pool_rows(&t, 6, 7, 2..7, &[0, 2]);
        // column 0, cell 0: 20 + 30 + 40 + 50 + 60
        assert_eq!(
            pools[0][0],
            Pool {
                sum: 200.0,
                count: 5,
                nan: 0
            }
        );
        // column 0, cell 1: 5 * 100 + 200
        assert_eq!(
            pools[0][1],
            Pool {
                sum: 700.0,
                count: 5,
                nan: 0
            }
        );
        // column 2, cell 1: query 5 is NaN, counted apart
        let want = (122 + 132 + 142 + 162) as f64;
        assert_eq!(
            pools[1][1],
            Pool {
                sum: want,
                count: 4,
                nan: 1
            }
        );
        // no rows: empty pools, one per cell
        assert_eq!(
            pool_rows(&t, 6, 7, 0..0, &[1]),
            vec![vec![Pool::default(); 2]]
        );
    }

    #[test]
    fn a_column_view_pools_like_its_table() {
        let t = table();
        let wants = RowWants {
            entropy: true,
            ..RowWants::default()
        };
        // column 5 ends one value into the table's last row
        let column = split_table(&t, &wants).qk_abs_sum;
        let (view, width) = column.as_table();
        assert_eq!(view.len(), t.len() - 5);
        assert_eq!(
            pool_rows(view, width, 7, 0..7, &[0]),
            pool_rows(&t, 6, 7, 0..7, &[5])
        );
        // and the accumulator leaves queries below min_query out
        let mut acc = RowAccumulator::new(1, 1, 2, 3);
        acc.add(0, 0, 0, 7, column);
        // head 0: queries 3..7 of column 5: 35 + 45 + 55 + 65
        assert_eq!(acc.head_mean(0, 0), 200.0 / 4.0);
        assert_eq!(acc.nan_count(0), 0);
    }
}
