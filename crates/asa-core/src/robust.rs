//! Summary statistics over finite samples, through statrs: mean and variance with a
//! chosen ddof, median (numpy's: the mean of the two middle values for even n) and the
//! median absolute deviation.

use statrs::statistics::{Data, OrderStatistics, Statistics};

/// Mean, variance, standard deviation and coefficient of variation of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moments {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Variance: sum of squared deviations / (n - ddof).
    pub var: f64,
    /// sqrt(var).
    pub std: f64,
    /// std / mean (inf or NaN when the mean is 0).
    pub cv: f64,
}

/// Moments of `values` with `ddof` delta degrees of freedom (0: population, 1: sample);
/// `None` when `values.len() <= ddof`.
pub fn moments(values: &[f64], ddof: u32) -> Option<Moments> {
    let n = values.len();
    if n <= ddof as usize {
        return None;
    }
    let mean = values.mean();
    // statrs gives the population variance (divisor n); rescale for other ddof.
    let var = values.population_variance() * n as f64 / (n - ddof as usize) as f64;
    let std = var.sqrt();
    Some(Moments {
        n,
        mean,
        var,
        std,
        cv: std / mean,
    })
}

/// Median of `values` (reordered in place); NaN when empty. For even n, the mean of
/// the two middle values, as numpy.median.
pub fn median(values: &mut [f64]) -> f64 {
    let mut data = Data::new(values);
    OrderStatistics::median(&mut data)
}

/// Median absolute deviation from `center`: median(|x - center|), unscaled.
pub fn mad(values: &[f64], center: f64) -> f64 {
    let mut dev: Vec<f64> = values.iter().map(|x| (x - center).abs()).collect();
    median(&mut dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_by_hand() {
        // [2, 4, 4, 4, 5, 5, 7, 9]: mean 40 / 8 = 5; squared deviations
        // 9 + 1 + 1 + 1 + 0 + 0 + 4 + 16 = 32; population var 32 / 8 = 4, sample 32 / 7.
        let g = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        let p = moments(&g, 0).unwrap();
        assert_eq!((p.n, p.mean, p.var, p.std, p.cv), (8, 5.0, 4.0, 2.0, 0.4));
        let s = moments(&g, 1).unwrap();
        assert!((s.var - 32.0 / 7.0).abs() < 1e-12);
        assert!((s.std - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!(moments(&[1.0], 1).is_none());
        assert_eq!(moments(&[1.0], 0).unwrap().var, 0.0);
    }

    #[test]
    fn median_matches_numpy_convention() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        // Even n: mean of the middle two, (2 + 3) / 2.
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
        assert!(median(&mut []).is_nan());
        // |x - 2.5| = [1.5, 0.5, 0.5, 1.5] -> median (0.5 + 1.5) / 2 = 1.
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0], 2.5), 1.0);
    }
}
