//! Each tile's logits from its q.k products: plain (scaled), LogN-scaled or scale-invariant,
//! with the row's visible keys.

/// How the scaled logits s = scale * q.k of a row become the logits y it normalises (the
/// variants' logit rules, computed as their candle versions compute them).
#[derive(Debug, Clone)]
pub enum TileLogits {
    /// y = s.
    Plain,
    /// LogN: y = s * (s_h ln(i + 1)), s_h per head.
    Logn { head_scale: Vec<f32> },
    /// Soft-capped (Gemma 2): y = cap tanh(s / cap); the row table's max-logit column keeps
    /// the largest s, before capping.
    SoftCap { cap: f32 },
    /// Scale-invariant: y = s a_t + m_t at distance t = i - j, from coefficient tables
    /// stored in reverse (`a[len - 1 - t]`, `crate::attention::reversed_coefficients`) so
    /// that a row's keys read one slice in key order.
    Distance { a: Vec<f32>, m: Vec<f32> },
}

/// One row's rule: its factor, or its keys' coefficient slices from key `k0` on.
pub(super) enum RowLogits<'a> {
    Plain,
    Factor(f32),
    SoftCap(f32),
    Distance(&'a [f32], &'a [f32]),
}

/// How one row's logits are made from its raw q.k: times `scale`, then `logits`, written to
/// `scratch` where the rule changes them.
pub(super) struct RowRule<'a> {
    pub(super) logits: RowLogits<'a>,
    pub(super) scale: f32,
    pub(super) scratch: &'a mut [f32],
}

/// Query `i`'s keys of one tile, from key `k0` on.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowTile {
    pub(super) i: usize,
    pub(super) k0: usize,
}

impl TileLogits {
    /// The rule of query `i` of head `head` for keys from `k0`.
    pub(super) fn row(&self, head: usize, i: usize, k0: usize) -> RowLogits<'_> {
        match self {
            TileLogits::Plain => RowLogits::Plain,
            TileLogits::SoftCap { cap } => RowLogits::SoftCap(*cap),
            TileLogits::Logn { head_scale } => {
                RowLogits::Factor(head_scale[head] * ((i + 1) as f64).ln() as f32)
            }
            TileLogits::Distance { a, m } => {
                // key j is at distance i - j, stored at a.len() - 1 - (i - j)
                let from = a.len() - 1 - i + k0;
                RowLogits::Distance(&a[from..], &m[from..])
            }
        }
    }
}

/// The logits y a row normalises from its raw q.k `x`, as (y', s) with y = s * y': `x`
/// itself for plain logits, else the rule's logits written to its scratch row and s = 1.
#[inline(always)]
pub(super) fn row_logits<'a>(x: &'a [f32], rule: RowRule<'a>) -> (&'a [f32], f32) {
    let RowRule {
        logits,
        scale,
        scratch,
    } = rule;
    match logits {
        RowLogits::Plain => (x, scale),
        RowLogits::Factor(factor) => {
            let y = &mut scratch[..x.len()];
            for (y, &v) in y.iter_mut().zip(x) {
                *y = v * scale * factor;
            }
            (&*y, 1.0)
        }
        RowLogits::Distance(a, m) => {
            let y = &mut scratch[..x.len()];
            for (((y, &v), &a), &m) in y.iter_mut().zip(x).zip(a).zip(m) {
                *y = v * scale * a + m;
            }
            (&*y, 1.0)
        }
        RowLogits::SoftCap(cap) => {
            let y = &mut scratch[..x.len()];
            for (y, &v) in y.iter_mut().zip(x) {
                *y = (v * scale / cap).tanh() * cap;
            }
            (&*y, 1.0)
        }
    }
}
