//! Exact merging of accumulators: a run's windows split into any groups, each accumulated
//! apart, merged in any order, give the single run's tables. Sums and counts add (cells of
//! sequences a group never saw hold 0, so per-sequence cells merge bit for bit); pooled
//! values for quantiles are kept whole and concatenated; maxima take the larger.

use super::rows::Pool;

/// Folds another accumulator of the same shape (the same run, other windows) into this one.
pub trait Merge {
    fn merge(&mut self, other: &Self);
}

impl Merge for f64 {
    fn merge(&mut self, other: &f64) {
        *self += other;
    }
}

impl Merge for u64 {
    fn merge(&mut self, other: &u64) {
        *self += other;
    }
}

impl Merge for Pool {
    fn merge(&mut self, other: &Pool) {
        self.sum += other.sum;
        self.count += other.count;
        self.nan += other.nan;
    }
}

/// Element-wise, over equally shaped vectors.
impl<T: Merge> Merge for Vec<T> {
    fn merge(&mut self, other: &Vec<T>) {
        for (a, b) in self.iter_mut().zip(other) {
            a.merge(b);
        }
    }
}

/// Both present: merged; only `other`: taken; neither, or only `self`: unchanged.
impl<T: Merge + Clone> Merge for Option<T> {
    fn merge(&mut self, other: &Option<T>) {
        match (self.as_mut(), other) {
            (Some(a), Some(b)) => a.merge(b),
            (None, Some(b)) => *self = Some(b.clone()),
            _ => {}
        }
    }
}

/// Appends `other`'s pooled values to `values`, list by list (`[layer]` or `[layer][head]`).
pub fn concat<T: Clone>(values: &mut [Vec<T>], other: &[Vec<T>]) {
    for (a, b) in values.iter_mut().zip(other) {
        a.extend_from_slice(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_sums_add_and_options_fill() {
        let mut a = vec![vec![1.0, 2.0], vec![0.5, 0.0]];
        a.merge(&vec![vec![0.25, 0.0], vec![0.0, 3.0]]);
        assert_eq!(a, [[1.25, 2.0], [0.5, 3.0]]);
        let mut none: Option<Vec<u64>> = None;
        none.merge(&Some(vec![2, 3]));
        none.merge(&Some(vec![1, 1]));
        assert_eq!(none, Some(vec![3, 4]));
        let mut pooled = vec![vec![1.0], vec![]];
        concat(&mut pooled, &[vec![2.0], vec![3.0]]);
        assert_eq!(pooled, [vec![1.0, 2.0], vec![3.0]]);
    }
}
