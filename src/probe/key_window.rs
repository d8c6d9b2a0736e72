//! Which keys a query sees: every earlier key (causal attention), or, in a sliding-window
//! layer, only the last `size` of them: key j is visible from query i when
//! i - size < j <= i (transformers' `sliding_window_overlay`, `kv_idx > q_idx - window`).
//! Every kernel masks by it and every metric counts by it.

use std::ops::Range;

/// The keys each query of a layer sees; `None`: every key j <= i.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct KeyWindow(pub Option<usize>);

impl KeyWindow {
    /// Full causal attention.
    pub const CAUSAL: KeyWindow = KeyWindow(None);

    /// A sliding window of `size` keys (the query itself included); `size` >= 1.
    pub fn sliding(size: usize) -> Self {
        KeyWindow(Some(size.max(1)))
    }

    /// Whether some query of a `seq_len`-token sequence does not see every earlier key.
    pub fn restricts(self, seq_len: usize) -> bool {
        self.0.is_some_and(|size| size < seq_len)
    }

    /// The first key query `i` sees.
    #[inline(always)]
    pub fn first_key(self, i: usize) -> usize {
        match self.0 {
            Some(size) => (i + 1).saturating_sub(size),
            None => 0,
        }
    }

    /// The keys query `i` sees: `first_key(i) ..= i`.
    #[inline(always)]
    pub fn keys(self, i: usize) -> Range<usize> {
        self.first_key(i)..i + 1
    }

    /// Whether query `i` sees key 0 (a first token outside the window is no sink).
    #[inline(always)]
    pub fn sees_first(self, i: usize) -> bool {
        self.first_key(i) == 0
    }

    /// How many of the queries `queries` see key 0.
    pub fn queries_seeing_first(self, queries: Range<usize>) -> usize {
        let end = match self.0 {
            Some(size) => queries.end.min(size),
            None => queries.end,
        };
        end.saturating_sub(queries.start)
    }

    /// The (query, key) pairs the queries `queries` see.
    pub fn pairs(self, queries: Range<usize>) -> usize {
        queries.map(|i| self.keys(i).len()).sum()
    }

    /// How many of the queries `queries` see key `j`.
    pub fn queries_seeing(self, j: usize, queries: Range<usize>) -> usize {
        let start = queries.start.max(j);
        let end = match self.0 {
            Some(size) => queries.end.min(j + size),
            None => queries.end,
        };
        end.saturating_sub(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_of_three_keys() {
        let w = KeyWindow::sliding(3);
        assert_eq!(w.keys(0), 0..1);
        assert_eq!(w.keys(2), 0..3);
        assert_eq!(w.keys(5), 3..6);
        assert!(w.sees_first(2) && !w.sees_first(3));
        assert_eq!(w.queries_seeing_first(1..10), 2);
        assert_eq!(w.pairs(0..5), 1 + 2 + 3 + 3 + 3);
        // key 4 is seen by queries 4, 5, 6 (of 0..10), by 4 and 5 of 0..6
        assert_eq!(w.queries_seeing(4, 0..10), 3);
        assert_eq!(w.queries_seeing(4, 0..6), 2);
        assert!(w.restricts(4) && !w.restricts(3));
    }

    #[test]
    fn causal_sees_every_earlier_key() {
        let c = KeyWindow::CAUSAL;
        assert_eq!(c.keys(7), 0..8);
        assert_eq!(c.queries_seeing_first(1..10), 9);
        assert_eq!(c.pairs(2..4), 3 + 4);
        assert_eq!(c.queries_seeing(4, 1..10), 6);
        assert!(!c.restricts(1 << 20));
    }
}
