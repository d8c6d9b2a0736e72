//! The compact encoding of one block map in a report (a head's, or the map over heads, of one
//! stat): one byte per cell of the lower triangle, a quantised value on the map's own scale.
//!
//! The cells are those of query block a and key blocks b <= a (no visible pair lies above
//! the diagonal), row by row: `(0,0), (1,0), (1,1), (2,0) ...`, G (G + 1) / 2 of them. A
//! code is 0 for an empty cell (no visible pair: a sliding window's), 255 for a value that
//! is not finite, and k in 1 ..= 254 for a value on the map's scale:
//!
//! - `log` (every value > 0): `exp(ln lo + (k - 1) s)`, `s = (ln hi - ln lo) / 253`, with
//!   `hi` the map's largest value and `lo` its smallest, raised to `hi * 1e-8` where it is
//!   smaller (those values get code 1 and read as "at most lo"). The value read back is
//!   within a factor `exp(s / 2)` of the table's: a relative error of at most 3.7 % (eight
//!   decades over 253 steps), less on maps whose values span fewer decades.
//! - `linear` (some value <= 0: affine-scaled weights can be): `lo + (k - 1) (hi - lo) / 253`,
//!   within `(hi - lo) / 506` of the table's value.
//!
//! [`Quantised::error`] is that bound for the map; the page states it beside every value
//! it shows.

/// Codes of one map: [`EMPTY`], [`NOT_FINITE`], or a value's step + 1.
pub const EMPTY: u8 = 0;
/// The code of a NaN or infinite value.
pub const NOT_FINITE: u8 = 255;
/// Steps between the smallest and the largest value (codes 1 ..= 254).
const STEPS: f64 = 253.0;
/// Decades below the largest value a log-scale map keeps apart (values below share code 1).
const DECADES: f64 = 8.0;

/// How a map's codes read as values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Codes are equal steps of ln(value).
    Log,
    /// Codes are equal steps of the value.
    Linear,
}

/// One map's codes and what they mean.
#[derive(Debug, Clone, PartialEq)]
pub struct Quantised {
    pub scale: Scale,
    /// The value of code 1 (log scale: values below it have code 1 too, see `clipped`).
    pub lo: f64,
    /// The value of code 254.
    pub hi: f64,
    /// Whether some value lay below `lo` (log scale, more than eight decades below `hi`).
    pub clipped: bool,
    /// The bound on |read back - table value|: relative (a fraction) on the log scale,
    /// absolute on the linear one; values below `lo` excepted.
    pub error: f64,
    /// One code per cell, in the order of the module doc.
    pub codes: Vec<u8>,
}

/// Quantises the cells (`None`: empty) of one map.
pub fn quantise(cells: &[Option<f64>]) -> Quantised {
    let finite = || cells.iter().flatten().copied().filter(|v| v.is_finite());
    let min = finite().fold(f64::INFINITY, f64::min);
    let max = finite().fold(f64::NEG_INFINITY, f64::max);
    let (scale, lo, hi) = if !min.is_finite() {
        (Scale::Linear, 0.0, 0.0)
    } else if min > 0.0 {
        (Scale::Log, min.max(max * 10f64.powf(-DECADES)), max)
    } else {
        (Scale::Linear, min, max)
    };
    let (a, b) = match scale {
        Scale::Log => (lo.ln(), hi.ln()),
        Scale::Linear => (lo, hi),
    };
    let step = (b - a) / STEPS;
    let code = |v: f64| match v {
        v if !v.is_finite() => NOT_FINITE,
        _ if step == 0.0 => 1,
        v => {
            let x = if scale == Scale::Log { v.ln() } else { v };
            1 + ((x - a) / step).round().clamp(0.0, STEPS) as u8
        }
    };
    let codes = cells
        .iter()
        .map(|c| c.map_or(EMPTY, code))
        .collect::<Vec<_>>();
    let error = match scale {
        Scale::Log => (step / 2.0).exp() - 1.0,
        Scale::Linear => step / 2.0,
    };
    Quantised {
        scale,
        lo,
        hi,
        clipped: scale == Scale::Log && min < lo,
        error,
        codes,
    }
}

impl Quantised {
    /// The value code `k` reads as: `None` for an empty cell, NaN for [`NOT_FINITE`].
    pub fn value(&self, k: u8) -> Option<f64> {
        let x = |a: f64, b: f64| a + f64::from(k - 1) * (b - a) / STEPS;
        match k {
            EMPTY => None,
            NOT_FINITE => Some(f64::NAN),
            _ if self.scale == Scale::Log => Some(x(self.lo.ln(), self.hi.ln()).exp()),
            _ => Some(x(self.lo, self.hi)),
        }
    }

    /// The codes as sent: each row's codes less the code above them (the previous query
    /// block's, same key block; none above the diagonal cell), modulo 256. Neighbouring rows
    /// of a map look alike, so the differences compress better than the codes.
    pub fn row_differences(&self) -> Vec<u8> {
        let mut out = self.codes.clone();
        let mut start = 0;
        let mut row = 0;
        while start < self.codes.len() {
            let prev = start.saturating_sub(row);
            for b in 0..row.min(self.codes.len() - start) {
                out[start + b] = self.codes[start + b].wrapping_sub(self.codes[prev + b]);
            }
            start += row + 1;
            row += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_within_the_stated_error() {
        // 1e-12 .. 0.5 spans more than eight decades: the smallest are clipped to 0.5e-8
        let cells = [
            Some(0.5),
            None,
            Some(1e-3),
            Some(1e-12),
            Some(f64::NAN),
            Some(0.2),
        ];
        let q = quantise(&cells);
        assert_eq!(q.scale, Scale::Log);
        assert!(q.clipped && q.lo == 0.5e-8 && q.hi == 0.5);
        // ln(1e8) / 253 / 2 = 0.0364: exp(0.0364) - 1
        assert!((q.error - 0.03707).abs() < 1e-4, "{}", q.error);
        assert_eq!(q.codes[1], EMPTY);
        assert_eq!(q.codes[3], 1);
        assert_eq!(q.codes[4], NOT_FINITE);
        for i in [0, 2, 5] {
            let (got, want) = (q.value(q.codes[i]).unwrap(), cells[i].unwrap());
            assert!((got / want - 1.0).abs() <= q.error, "{got} {want}");
        }
    }

    #[test]
    fn values_at_or_below_zero_are_linear_with_an_absolute_error() {
        let cells = [Some(-0.1), Some(0.0), Some(0.4)];
        let q = quantise(&cells);
        assert_eq!(q.scale, Scale::Linear);
        // (0.4 + 0.1) / 253 / 2
        assert!((q.error - 0.5 / 506.0).abs() < 1e-15);
        for (c, v) in q.codes.iter().zip(cells) {
            assert!((q.value(*c).unwrap() - v.unwrap()).abs() <= q.error);
        }
        let flat = quantise(&[Some(0.25), Some(0.25)]);
        assert_eq!((flat.codes[0], flat.value(1)), (1, Some(0.25)));
    }

    #[test]
    fn rows_are_sent_as_differences_from_the_row_above() {
        // G = 3: rows [a], [b c], [d e f]
        let q = Quantised {
            codes: vec![10, 12, 7, 11, 0, 9],
            ..quantise(&[])
        };
        // row 1: 12-10, 7 (diagonal); row 2: 11-12, 0-7 mod 256, 9
        assert_eq!(q.row_differences(), [10, 2, 7, 255, 249, 9]);
    }
}
