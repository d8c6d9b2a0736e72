//! Row tables: the per-row reductions of a query block's attention, one row per (sequence,
//! head, query) in `[batch, head, n]` order, f32. The CPU row pass, the CUDA row kernel and
//! the fused CUDA softmax all fill this one layout; [`split_table`] reads it.
//!
//! Columns: the fixed ones of [`RowColumn`] (declared once in `row_columns.rs`, from which
//! build.rs writes the CUDA header): a_i0; sum_j a_ij; entropy in nats of max(a, 0)
//! renormalised (NaN without positive mass); the mass sent to no token; sum of raw q.k and
//! of |q.k| over the visible keys; then, when bands are asked for, a_i0 for i > 0 (else 0)
//! and one column per distance range of [`RowWants::bands`]; last, when asked for, the
//! row's largest logit over its visible keys ([`RowWants::max_logit_column`]); last, for
//! `block_map`, the sum and then the maximum of the row's weights over each key block of
//! [`KeyBlocks`] ([`RowWants::key_block_columns`]: G sums, then G maxima; a block the row
//! sees no key of holds 0 in both). A column nobody asked for (or that the filler does not compute: sink and q.k columns come from
//! the fused softmaxes and the CPU's flash tiles only) holds 0.

pub use super::row_columns::{RowColumn, MAX_BANDS};

/// Column of a_i0.
pub const FIRST: usize = RowColumn::First.index();
/// Column of the weight sum.
pub const SUM: usize = RowColumn::Sum.index();
/// Column of the entropy.
pub const ENTROPY: usize = RowColumn::Entropy.index();
/// Column of the sink mass.
pub const SINK_MASS: usize = RowColumn::SinkMass.index();
/// Column of the sum of raw q.k.
pub const QK_SUM: usize = RowColumn::QkSum.index();
/// Column of the sum of |q.k|.
pub const QK_ABS_SUM: usize = RowColumn::QkAbsSum.index();
/// First band column.
pub const BANDS: usize = RowColumn::Bands.index();

/// Which reductions a row table must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowWants {
    pub first: bool,
    pub sum: bool,
    pub entropy: bool,
    /// Distance bands `[lo, hi)` of t = i - j, key 0 of queries i > 0 left out (its own
    /// `first` band); empty for none.
    pub bands: Vec<(usize, usize)>,
    /// The row's largest logit over its visible keys (the logit the variant normalises).
    pub max_logit: bool,
    /// Per key block: the sum and the maximum of the row's weights over its visible keys
    /// there (`block_map`).
    pub key_blocks: Option<KeyBlocks>,
    /// Beside the table, each key's weight summed over the block's queries from this one on
    /// (`key_received`): `[batch, head, q_start + n]`, from kernels that never hold a block.
    pub key_sums_from: Option<usize>,
}

/// The key blocks of `block_map`: G = `blocks` blocks over `seq_len` positions, block b
/// holding positions [floor(b T / G), floor((b + 1) T / G)) (none empty: G <= T).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyBlocks {
    pub blocks: usize,
    pub seq_len: usize,
}

impl KeyBlocks {
    /// G blocks over T positions; G is clipped to 1 ..= T.
    pub fn new(blocks: usize, seq_len: usize) -> Self {
        KeyBlocks {
            blocks: blocks.clamp(1, seq_len.max(1)),
            seq_len,
        }
    }

    /// The first position of block `b` (T for b = G).
    #[inline(always)]
    pub fn start(self, b: usize) -> usize {
        b * self.seq_len / self.blocks
    }

    /// The block holding position `j` (< T): the largest b with start(b) <= j, that is
    /// ceil((j + 1) G / T) - 1.
    #[inline(always)]
    pub fn block_of(self, j: usize) -> usize {
        ((j + 1) * self.blocks).div_ceil(self.seq_len) - 1
    }

    /// Calls `each(b, lo, hi)` for every block b meeting the positions `from .. to`, with
    /// `lo .. hi` the part of them in block b.
    #[inline(always)]
    pub fn split(self, from: usize, to: usize, mut each: impl FnMut(usize, usize, usize)) {
        if from >= to {
            return;
        }
        let mut b = self.block_of(from);
        let mut lo = from;
        while lo < to {
            let hi = self.start(b + 1).min(to);
            each(b, lo, hi);
            (b, lo) = (b + 1, hi);
        }
    }
}

impl RowWants {
    /// Columns of the table.
    pub fn width(&self) -> usize {
        self.pooled_width() + self.key_blocks.map_or(0, |k| 2 * k.blocks)
    }

    /// The columns before the key blocks' (the per-row reductions the probe pools).
    pub fn pooled_width(&self) -> usize {
        self.bands_end() + self.max_logit as usize
    }

    /// The first column of the key blocks' sums (G of them, then G maxima), when asked for.
    pub fn key_block_columns(&self) -> Option<usize> {
        self.key_blocks.map(|_| self.pooled_width())
    }

    /// One past the last band column.
    pub fn bands_end(&self) -> usize {
        BANDS
            + if self.bands.is_empty() {
                0
            } else {
                self.bands.len() + 1
            }
    }

    /// The columns of distance bands `ranges` in a table whose bands are `table_bands`,
    /// after the `first` band's column ([`BANDS`]); `None` when one is not in the table.
    pub fn band_columns(
        table_bands: &[(usize, usize)],
        ranges: &[(usize, usize)],
    ) -> Option<Vec<usize>> {
        let column = |r: &(usize, usize)| table_bands.iter().position(|b| b == r);
        std::iter::once(Some(BANDS))
            .chain(ranges.iter().map(|r| column(r).map(|k| BANDS + 1 + k)))
            .collect()
    }

    /// The column of the row's largest logit, after the bands, when asked for.
    pub fn max_logit_column(&self) -> Option<usize> {
        self.max_logit.then(|| self.bands_end())
    }
}

/// One column of a host row table: a value per row, `stride` apart (1 for a plain
/// per-row vector). Reading columns in place spares a copy of every table.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a> {
    /// From the column's first value to the table's end.
    data: &'a [f32],
    stride: usize,
}

impl<'a> Column<'a> {
    /// Column `c` of `table`, `width` values per row.
    pub fn of_table(table: &'a [f32], width: usize, c: usize) -> Self {
        Column {
            data: table.get(c..).unwrap_or_default(),
            stride: width.max(1),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.len().div_ceil(self.stride)
    }

    /// Whether the column has no rows (a column nobody asked for).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The value of row `i`.
    #[inline(always)]
    pub fn get(&self, i: usize) -> f32 {
        self.data[i * self.stride]
    }

    /// The column as a table: values from its first one on, and the row width.
    pub fn as_table(&self) -> (&'a [f32], usize) {
        (self.data, self.stride)
    }

    /// The values in row order.
    pub fn iter(&self) -> impl Iterator<Item = f32> + 'a {
        self.data.iter().step_by(self.stride).copied()
    }

    /// The values as a vector.
    pub fn to_vec(&self) -> Vec<f32> {
        self.iter().collect()
    }
}

impl<'a> From<&'a [f32]> for Column<'a> {
    fn from(values: &'a [f32]) -> Self {
        Column {
            data: values,
            stride: 1,
        }
    }
}

impl<'a> From<&'a Vec<f32>> for Column<'a> {
    fn from(values: &'a Vec<f32>) -> Self {
        Column::from(values.as_slice())
    }
}

impl<'a, const N: usize> From<&'a [f32; N]> for Column<'a> {
    fn from(values: &'a [f32; N]) -> Self {
        Column::from(values.as_slice())
    }
}

/// Per-row values `[batch, head, n]` (row-major), read in place from a host row table; a
/// column not asked for is empty.
#[derive(Debug, Clone)]
pub struct RowValues<'a> {
    pub first: Column<'a>,
    pub sum: Column<'a>,
    pub entropy: Column<'a>,
    /// One column per band: `first` (a_i0 for i > 0), then each of `RowWants::bands`.
    pub bands: Vec<Column<'a>>,
    /// Sink mass, raw q.k sum and |q.k| sum (filled by the fused softmax; 0 otherwise).
    pub sink_mass: Column<'a>,
    pub qk_sum: Column<'a>,
    pub qk_abs_sum: Column<'a>,
    /// The row's largest logit (empty when not asked for).
    pub max_logit: Column<'a>,
}

/// The columns of a host row table laid out for `wants`.
pub fn split_table<'a>(table: &'a [f32], wants: &RowWants) -> RowValues<'a> {
    let width = wants.width();
    let column = |c: usize| Column::of_table(table, width, c);
    let pick = |want: bool, c: usize| {
        if want {
            column(c)
        } else {
            Column::from(&[] as &[f32])
        }
    };
    RowValues {
        first: pick(wants.first, FIRST),
        sum: pick(wants.sum, SUM),
        entropy: pick(wants.entropy, ENTROPY),
        bands: (BANDS..wants.bands_end()).map(column).collect(),
        sink_mass: column(SINK_MASS),
        qk_sum: column(QK_SUM),
        qk_abs_sum: column(QK_ABS_SUM),
        max_logit: wants
            .max_logit_column()
            .map_or(Column::from(&[] as &[f32]), column),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cuda_header_is_generated_from_the_one_column_enum() {
        // build.rs wrote it from row_columns.rs; kernels.cu includes it and defines none
        let generated = include_str!(concat!(env!("OUT_DIR"), "/row_table.h"));
        assert_eq!(generated, super::super::row_columns::cuda_header());
        assert!(generated.contains("#define COL_QK_ABS_SUM 5\n"));
        assert!(generated.contains(&format!("#define MAX_BANDS {MAX_BANDS}\n")));
        let kernels = include_str!("cuda/kernels.cu");
        assert!(kernels.contains("#include \"row_table.h\""));
        assert!(!kernels.contains("#define COL_") && !kernels.contains("#define MAX_BANDS"));
        let indices: Vec<usize> = RowColumn::ALL.iter().map(|c| c.index()).collect();
        assert_eq!(indices, (0..RowColumn::ALL.len()).collect::<Vec<_>>());
        assert_eq!(BANDS, RowColumn::ALL.len() - 1);
    }

    #[test]
    fn columns_read_a_table_in_place() {
        // two rows of width 7 (one band: the `first` band column only)
        let wants = RowWants {
            first: true,
            sum: false,
            entropy: true,
            bands: Vec::new(),
            max_logit: false,
            key_blocks: None,
            key_sums_from: None,
        };
        assert_eq!(wants.width(), 6);
        let table: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let rows = split_table(&table, &wants);
        assert_eq!(rows.first.to_vec(), [0.0, 6.0]);
        assert!(rows.sum.is_empty());
        assert_eq!(rows.sum.len(), 0);
        assert_eq!(rows.entropy.to_vec(), [2.0, 8.0]);
        assert_eq!(rows.qk_abs_sum.to_vec(), [5.0, 11.0]);
        assert_eq!(rows.qk_abs_sum.len(), 2);
        assert_eq!(rows.entropy.get(1), 8.0);
        assert!(rows.bands.is_empty());
        let dense = Column::from(&[1.0f32, 2.0, 3.0]);
        assert_eq!((dense.len(), dense.get(2)), (3, 3.0));
        // key blocks follow every other column: G sums, then G maxima
        let blocks = RowWants {
            key_blocks: Some(KeyBlocks::new(4, 10)),
            ..wants
        };
        assert_eq!(blocks.pooled_width(), 6);
        assert_eq!(blocks.key_block_columns(), Some(6));
        assert_eq!(blocks.width(), 6 + 8);
    }

    #[test]
    fn key_blocks_by_hand() {
        // T = 10, G = 4: floor(b 10 / 4) = 0, 2, 5, 7, 10
        let k = KeyBlocks::new(4, 10);
        let starts: Vec<usize> = (0..=4).map(|b| k.start(b)).collect();
        assert_eq!(starts, [0, 2, 5, 7, 10]);
        let of: Vec<usize> = (0..10).map(|j| k.block_of(j)).collect();
        assert_eq!(of, [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]);
        let mut parts = Vec::new();
        k.split(1, 8, |b, lo, hi| parts.push((b, lo, hi)));
        assert_eq!(parts, [(0, 1, 2), (1, 2, 5), (2, 5, 7), (3, 7, 8)]);
        // G = T: one position per block; G > T is clipped to T
        let one = KeyBlocks::new(50, 7);
        assert_eq!(one.blocks, 7);
        assert!((0..7).all(|j| one.block_of(j) == j && one.start(j) == j));
        // uneven blocks of a long window: every position in the block that starts at or
        // before it
        let long = KeyBlocks::new(256, 1000);
        for j in 0..1000 {
            let b = long.block_of(j);
            assert!(long.start(b) <= j && j < long.start(b + 1), "{j}");
        }
    }
}
