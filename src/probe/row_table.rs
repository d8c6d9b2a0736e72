//! Row tables: the per-row reductions of a query block's attention, one row per (sequence,
//! head, query) in `[batch, head, n]` order, f32. The CPU row pass, the CUDA row kernel and
//! the fused CUDA softmax all fill this one layout; [`split_table`] reads it.
//!
//! Columns: [`FIRST`] a_i0; [`SUM`] sum_j a_ij; [`ENTROPY`] entropy in nats of max(a, 0)
//! renormalised (NaN without positive mass); [`SINK_MASS`] the mass sent to no token;
//! [`QK_SUM`] and [`QK_ABS_SUM`] sum of raw q.k and of |q.k| over the visible keys; then,
//! when bands are asked for, [`BANDS`] a_i0 for i > 0 (else 0) and one column per distance
//! range of [`RowWants::bands`]. A column nobody asked for (or that the filler does not
//! compute: sink and q.k columns come from the fused softmax only) holds 0.

/// Column of a_i0.
pub const FIRST: usize = 0;
/// Column of the weight sum.
pub const SUM: usize = 1;
/// Column of the entropy.
pub const ENTROPY: usize = 2;
/// Column of the sink mass.
pub const SINK_MASS: usize = 3;
/// Column of the sum of raw q.k.
pub const QK_SUM: usize = 4;
/// Column of the sum of |q.k|.
pub const QK_ABS_SUM: usize = 5;
/// First band column.
pub const BANDS: usize = 6;

/// Which reductions a row table must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowWants {
    pub first: bool,
    pub sum: bool,
    pub entropy: bool,
    /// Distance bands `[lo, hi)` of t = i - j, key 0 of queries i > 0 left out (its own
    /// `first` band); empty for none.
    pub bands: Vec<(usize, usize)>,
}

impl RowWants {
    /// Columns of the table.
    pub fn width(&self) -> usize {
        BANDS
            + if self.bands.is_empty() {
                0
            } else {
                self.bands.len() + 1
            }
    }
}

/// Per-row values `[batch, head, n]` (row-major), each empty unless asked for.
#[derive(Debug, Clone, Default)]
pub struct RowValues {
    pub first: Vec<f32>,
    pub sum: Vec<f32>,
    pub entropy: Vec<f32>,
    /// One vector per band: `first` (a_i0 for i > 0), then each of `RowWants::bands`.
    pub bands: Vec<Vec<f32>>,
    /// Sink mass, raw q.k sum and |q.k| sum (filled by the fused softmax; 0 otherwise).
    pub sink_mass: Vec<f32>,
    pub qk_sum: Vec<f32>,
    pub qk_abs_sum: Vec<f32>,
}

/// The columns of a host row table laid out for `wants`.
pub fn split_table(table: &[f32], wants: &RowWants) -> RowValues {
    let width = wants.width();
    let column = |c: usize| table.iter().skip(c).step_by(width).copied().collect();
    let pick = |want: bool, c: usize| if want { column(c) } else { Vec::new() };
    RowValues {
        first: pick(wants.first, FIRST),
        sum: pick(wants.sum, SUM),
        entropy: pick(wants.entropy, ENTROPY),
        bands: (BANDS..width).map(column).collect(),
        sink_mass: column(SINK_MASS),
        qk_sum: column(QK_SUM),
        qk_abs_sum: column(QK_ABS_SUM),
    }
}
