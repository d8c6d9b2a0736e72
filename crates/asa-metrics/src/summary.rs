//! Summary statistics over pooled f64 values, with numpy's conventions: linear-interpolated
//! quantiles (`np.quantile` default), population std (ddof 0), `np.histogram` bins.

/// Quantile `q` in [0, 1] of `sorted` values (ascending), numpy's linear interpolation.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// Mean of `values` (NaN when empty).
pub fn mean(values: &[f64]) -> f64 {
    asa_core::robust::moments(values, 0).map_or(f64::NAN, |m| m.mean)
}

/// Population standard deviation (ddof 0; NaN when empty).
pub fn std_pop(values: &[f64]) -> f64 {
    asa_core::robust::moments(values, 0).map_or(f64::NAN, |m| m.std)
}

/// The distribution summary exported for weight sums and alpha: mean, std, p05 ... p95.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Distribution {
    pub mean: f64,
    /// Standard deviation; what it is over (values or sequences) is the caller's choice.
    pub std: f64,
    pub p05: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p95: f64,
}

impl Distribution {
    /// Summary of `values` with std over the values (ddof 0).
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Distribution {
            mean: mean(values),
            std: std_pop(values),
            p05: quantile_sorted(&sorted, 0.05),
            p25: quantile_sorted(&sorted, 0.25),
            p50: quantile_sorted(&sorted, 0.50),
            p75: quantile_sorted(&sorted, 0.75),
            p95: quantile_sorted(&sorted, 0.95),
        }
    }

    /// The stats in export order with their names.
    pub fn named(&self) -> [(&'static str, f64); 7] {
        [
            ("mean", self.mean),
            ("std", self.std),
            ("p05", self.p05),
            ("p25", self.p25),
            ("p50", self.p50),
            ("p75", self.p75),
            ("p95", self.p95),
        ]
    }
}

/// A histogram: bin edges and counts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Histogram {
    pub bin_lo: Vec<f64>,
    pub bin_hi: Vec<f64>,
    pub count: Vec<u64>,
}

/// `np.histogram([value] * count, bins)`: a constant sample, numpy's range
/// [v - 0.5, v + 0.5], every value in the bin that holds v.
pub fn constant_histogram(value: f64, count: u64, bins: usize) -> Histogram {
    let mut h = histogram(&[value], bins);
    if let Some(k) = h.count.iter().position(|&c| c == 1) {
        h.count[k] = count;
    }
    h
}

/// `np.histogram(values, bins)`: equal-width bins over [min, max], the last bin closed;
/// a constant sample gets numpy's range [v - 0.5, v + 0.5]. NaN and infinite values (a
/// diverged checkpoint) are left out of the counts.
pub fn histogram(values: &[f64], bins: usize) -> Histogram {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let values = finite.as_slice();
    let bins = bins.max(1);
    let (mut lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mut hi = hi;
    if values.is_empty() {
        (lo, hi) = (0.0, 1.0);
    } else if lo == hi {
        (lo, hi) = (lo - 0.5, hi + 0.5);
    }
    let width = (hi - lo) / bins as f64;
    let edges: Vec<f64> = (0..=bins)
        .map(|k| lo + (hi - lo) * k as f64 / bins as f64)
        .collect();
    let mut count = vec![0u64; bins];
    for &v in values {
        let mut k = ((v - lo) / width) as usize;
        if k >= bins {
            k = bins - 1;
        }
        // numpy corrects for rounding at the edges
        if k > 0 && v < edges[k] {
            k -= 1;
        } else if k + 1 < bins && v >= edges[k + 1] {
            k += 1;
        }
        count[k] += 1;
    }
    Histogram {
        bin_lo: edges[..bins].to_vec(),
        bin_hi: edges[1..].to_vec(),
        count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_like_numpy() {
        // np.quantile([1, 2, 3, 4], 0.25) = 1 + 0.75 * (2 - 1) = 1.75
        assert_eq!(quantile_sorted(&[1., 2., 3., 4.], 0.25), 1.75);
        assert_eq!(quantile_sorted(&[1., 2., 3., 4.], 0.5), 2.5);
        assert_eq!(quantile_sorted(&[5.], 0.95), 5.0);
    }

    #[test]
    fn histogram_closes_the_last_bin() {
        // np.histogram([0, 1, 1, 2, 4], 4): edges 0, 1, 2, 3, 4 -> counts 1, 2, 1, 1
        let h = histogram(&[0., 1., 1., 2., 4.], 4);
        assert_eq!(h.count, vec![1, 2, 1, 1]);
        assert_eq!(h.bin_lo, vec![0., 1., 2., 3.]);
        // constant: range [v - 0.5, v + 0.5], everything in the middle bin of 20
        let h = histogram(&[1.0; 3], 20);
        assert_eq!(h.count[10], 3);
        assert_eq!(h.bin_lo[0], 0.5);
        // non-finite values are left out; none at all gives numpy's empty range [0, 1]
        let h = histogram(&[f64::NAN, 0., 1., 1., 2., f64::INFINITY, 4.], 4);
        assert_eq!(h.count, vec![1, 2, 1, 1]);
        let h = histogram(&[f64::NAN; 3], 2);
        assert_eq!((h.count, h.bin_lo), (vec![0, 0], vec![0.0, 0.5]));
        // a spread of 4.5e-5 is split like any other: np.histogram(
        // [0.9999552, 0.99997, 0.9999998], 4) -> edges 0.9999552 + k 1.115e-5, counts 1, 1, 0, 1
        let h = histogram(&[0.9999552, 0.99997, 0.9999998], 4);
        assert_eq!(h.count, vec![1, 1, 0, 1]);
        assert!((h.bin_hi[3] - 0.9999998).abs() < 1e-15);
        assert_eq!(constant_histogram(1.0, 7, 20), {
            let mut h = histogram(&[1.0], 20);
            h.count[10] = 7;
            h
        });
    }
}
