//! A query block's row table pooled per (sequence, head) and column: over the rows that
//! count (queries >= min_query) and over the rows before them, when a metric asks for it
//! over the rows from a later query on (`Needs::rows_from`), plus W_i (the weight sum
//! averaged over heads) of every counted query. This is all the accumulators keep of a
//! table. Host tables are pooled in one pass ([`pool_host`]); tables on a GPU are summed
//! there by three candle reductions ([`pool_on_device`]), so a few kilobytes per block cross
//! to the host instead of the whole table.

use std::ops::Range;

use candle_core::{DType, Tensor};

use super::rows::{pool_rows, Pool};
use super::weight_sum::query_means;
use asa_core::error::Result;
use asa_kernels::row_table::{Column, SUM};

/// The shape of one block's row table and of its pools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolShape {
    pub batch: usize,
    pub heads: usize,
    /// Queries in the block.
    pub n: usize,
    /// Leading queries of the block that do not count (those < min_query).
    pub skip: usize,
    /// The block's rows from which the late pools run (those of queries >=
    /// `Needs::rows_from`, clipped to `n`); `None`: no late pools asked for.
    pub late: Option<usize>,
    /// Columns of the table.
    pub width: usize,
}

impl PoolShape {
    /// (sequence, head) cells.
    pub fn cells(&self) -> usize {
        self.batch * self.heads
    }

    /// The rows of each cell that count.
    pub fn counted(&self) -> Range<usize> {
        self.skip.min(self.n)..self.n
    }

    /// The rows of each cell in the late pools (empty when none are asked for).
    pub fn late_rows(&self) -> Range<usize> {
        match self.late {
            Some(from) => from.min(self.n)..self.n,
            None => self.n..self.n,
        }
    }

    /// Values of the flat f64 sums of [`pool_on_device`]: per (cell, column) over every row,
    /// when rows are skipped over the skipped rows, when late pools are asked for over the
    /// late rows; then per (sequence, query, column) over the heads.
    pub fn flat_len(&self) -> usize {
        let early = usize::from(self.skip > 0);
        let late = usize::from(self.late.is_some());
        (1 + early + late) * self.cells() * self.width + self.batch * self.n * self.width
    }
}

/// Pools of one block (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockPools {
    /// `[column][cell]` over the counted rows.
    pub counted: Vec<Vec<Pool>>,
    /// `[column][cell]` over the rows before them.
    pub early: Vec<Vec<Pool>>,
    /// `[column][cell]` over the late rows ([`PoolShape::late_rows`]); empty when no metric
    /// asked for them.
    pub late: Vec<Vec<Pool>>,
    /// W_i `[batch, counted]` (mean over heads of the weight sums; NaN if one is).
    pub query_means: Vec<f64>,
}

/// Pools a host row table `[batch * heads * n, width]`.
pub fn pool_host(table: &[f32], shape: &PoolShape) -> BlockPools {
    let (width, n) = (shape.width, shape.n);
    let columns: Vec<usize> = (0..width).collect();
    let counted = shape.counted();
    BlockPools {
        counted: pool_rows(table, width, n, counted.clone(), &columns),
        early: pool_rows(table, width, n, 0..counted.start, &columns),
        late: match shape.late {
            Some(_) => pool_rows(table, width, n, shape.late_rows(), &columns),
            None => Vec::new(),
        },
        query_means: query_means(Column::of_table(table, width, SUM), shape.heads, n, counted),
    }
}

/// Sums of a row table `[batch * heads * n, width]` f32 on its device, in f64: a flat
/// tensor of [`PoolShape::flat_len`] values, read on the host by [`BlockPools::from_sums`].
pub fn pool_on_device(table: &Tensor, shape: &PoolShape) -> Result<Tensor> {
    let (b, h, n, width) = (shape.batch, shape.heads, shape.n, shape.width);
    let rows = table.reshape((b, h, n, width))?.to_dtype(DType::F64)?;
    let mut parts = vec![rows.sum(2)?.flatten_all()?];
    if shape.skip > 0 {
        parts.push(
            rows.narrow(2, 0, shape.skip.min(n))?
                .sum(2)?
                .flatten_all()?,
        );
    }
    if shape.late.is_some() {
        let late = shape.late_rows();
        let sums = match late.len() {
            0 => Tensor::zeros(b * h * width, DType::F64, table.device())?,
            _ => rows
                .narrow(2, late.start, late.len())?
                .sum(2)?
                .flatten_all()?,
        };
        parts.push(sums);
    }
    parts.push(rows.sum(1)?.flatten_all()?);
    Ok(Tensor::cat(&parts, 0)?)
}

impl BlockPools {
    /// The pools from the sums of [`pool_on_device`]; `None` when a sum is not finite (a NaN
    /// or infinity in the table: NaN rows must be counted apart, and the rows before
    /// min_query cannot be subtracted from an infinite sum), when [`pool_host`] must pool the
    /// table on the host.
    pub fn from_sums(flat: &[f64], shape: &PoolShape) -> Option<Self> {
        if flat.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let (cells, width, n) = (shape.cells(), shape.width, shape.n);
        let table = cells * width;
        let all = &flat[..table];
        let skip = shape.skip.min(n);
        let (early, rest) = if shape.skip > 0 {
            (&flat[table..2 * table], &flat[2 * table..])
        } else {
            (&[][..], &flat[table..])
        };
        let (late, over_heads) = match shape.late {
            Some(_) => rest.split_at(table),
            None => (&[][..], rest),
        };
        let early_sum = |k: usize| early.get(k).copied().unwrap_or(0.0);
        let pools = |sum: &dyn Fn(usize) -> f64, rows: usize| -> Vec<Vec<Pool>> {
            (0..width)
                .map(|c| {
                    (0..cells)
                        .map(|cell| Pool {
                            sum: sum(cell * width + c),
                            count: rows as u64,
                            nan: 0,
                        })
                        .collect()
                })
                .collect()
        };
        let counted = shape.counted();
        let query_means = (0..shape.batch)
            .flat_map(|b| counted.clone().map(move |r| (b * n + r) * width + SUM))
            .map(|k| over_heads[k] / shape.heads as f64)
            .collect();
        Some(BlockPools {
            counted: pools(&|k| all[k] - early_sum(k), n - skip),
            early: pools(&early_sum, skip),
            late: match shape.late {
                Some(_) => pools(&|k| late[k], shape.late_rows().len()),
                None => Vec::new(),
            },
            query_means,
        })
    }

    /// Sum over every row of column `c` (counted and early); NaN if a value is.
    pub fn total(&self, c: usize) -> f64 {
        let pools = self.counted[c].iter().chain(&self.early[c]);
        pools.fold(0.0, |total, p| {
            total + if p.nan > 0 { f64::NAN } else { p.sum }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A table of 2 sequences x 3 heads x 5 queries, width 7, with NaNs in two cells.
    fn table() -> (Vec<f32>, PoolShape) {
        let shape = PoolShape {
            batch: 2,
            heads: 3,
            n: 5,
            skip: 2,
            late: Some(3),
            width: 7,
        };
        let rows = shape.cells() * shape.n;
        let table = (0..rows * shape.width)
            .map(|k| match k {
                40 | 101 => f32::NAN,
                _ => ((k * 37) % 101) as f32 / 50.0 - 0.7,
            })
            .collect();
        (table, shape)
    }

    #[test]
    fn host_pools_by_hand() {
        let (table, shape) = table();
        let pools = pool_host(&table, &shape);
        // cell 0, column 1: rows 2, 3, 4 counted, rows 0, 1 early
        let value = |row: usize, c: usize| table[row * 7 + c] as f64;
        let want: f64 = (2..5).map(|r| value(r, 1)).sum();
        assert!((pools.counted[1][0].sum - want).abs() < 1e-12);
        assert_eq!((pools.counted[1][0].count, pools.counted[1][0].nan), (3, 0));
        assert!((pools.early[1][0].sum - (value(0, 1) + value(1, 1))).abs() < 1e-12);
        // late rows 3, 4 of cell 1 (rows 8, 9 of the table), column 4
        let late = &pools.late[4][1];
        assert!((late.sum - (value(8, 4) + value(9, 4))).abs() < 1e-12);
        assert_eq!((late.count, late.nan), (2, 0));
        // 101 is query 4 of cell 2: a late row too
        assert_eq!((pools.late[3][2].count, pools.late[3][2].nan), (1, 1));
        let none = pool_host(
            &table,
            &PoolShape {
                late: None,
                ..shape
            },
        );
        assert!(none.late.is_empty());
        // value 40 = row 5 (cell 1, query 0: early), column 5; 101 = row 14 (cell 2, query 4), column 3
        assert_eq!((pools.early[5][1].count, pools.early[5][1].nan), (1, 1));
        assert_eq!((pools.counted[3][2].count, pools.counted[3][2].nan), (2, 1));
        assert!(pools.total(5).is_nan() && pools.total(3).is_nan());
        assert!(pools.total(0).is_finite());
        // W_i of sequence 1, query 3: the sum column of its three heads, averaged
        let w: f64 = (3..6).map(|cell| value(cell * 5 + 3, SUM)).sum::<f64>() / 3.0;
        assert!((pools.query_means[3 + 1] - w).abs() < 1e-12);
        assert_eq!(pools.query_means.len(), 2 * 3);
    }

    #[test]
    fn device_pools_equal_host_pools() {
        let (mut table, shape) = table();
        for skip in [0, 2, 5] {
            let shape = PoolShape { skip, ..shape };
            let rows = shape.cells() * shape.n;
            let t = Tensor::from_vec(table.clone(), (rows, shape.width), &Device::Cpu).unwrap();
            let flat: Vec<f64> = pool_on_device(&t, &shape).unwrap().to_vec1().unwrap();
            assert_eq!(flat.len(), shape.flat_len());
            // the NaNs send the block to the host
            assert!(BlockPools::from_sums(&flat, &shape).is_none());
        }
        for v in table.iter_mut().filter(|v| v.is_nan()) {
            *v = 0.5;
        }
        // an infinity in a row before min_query (cell 0, query 1): the host keeps it out of
        // the counted rows, where the device's all-rows sum minus early sum would be NaN
        let mut with_inf = table.clone();
        with_inf[7 + 2] = f32::INFINITY;
        let t = Tensor::from_vec(with_inf.clone(), (30, 7), &Device::Cpu).unwrap();
        let flat: Vec<f64> = pool_on_device(&t, &shape).unwrap().to_vec1().unwrap();
        assert!(BlockPools::from_sums(&flat, &shape).is_none());
        assert!(pool_host(&with_inf, &shape).counted[2][0].sum.is_finite());
        let cases = [0, 2, 5].into_iter().flat_map(|skip| {
            [None, Some(0), Some(3), Some(5), Some(9)].map(move |late| (skip, late))
        });
        for (skip, late) in cases {
            let shape = PoolShape {
                skip,
                late,
                ..shape
            };
            let want = pool_host(&table, &shape);
            let rows = shape.cells() * shape.n;
            let t = Tensor::from_vec(table.clone(), (rows, shape.width), &Device::Cpu).unwrap();
            let flat: Vec<f64> = pool_on_device(&t, &shape).unwrap().to_vec1().unwrap();
            let got = BlockPools::from_sums(&flat, &shape).expect("no NaN");
            let close = |a: &[Vec<Pool>], b: &[Vec<Pool>]| {
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
                    assert_eq!((x.count, x.nan), (y.count, y.nan), "skip {skip}");
                    assert!((x.sum - y.sum).abs() < 1e-12, "skip {skip}: {x:?} {y:?}");
                }
            };
            close(&got.counted, &want.counted);
            close(&got.early, &want.early);
            close(&got.late, &want.late);
            assert_eq!(got.late.is_empty(), late.is_none());
            assert_eq!(got.query_means.len(), want.query_means.len());
            for (x, y) in got.query_means.iter().zip(&want.query_means) {
                assert!((x - y).abs() < 1e-12, "skip {skip}: {x} vs {y}");
            }
        }
    }
}
