//! Which keys a query sees: every earlier key (causal attention); in a sliding-window layer
//! only the last `size` of them: key j is visible from query i when i - size < j <= i
//! (transformers' `sliding_window_overlay`, `kv_idx > q_idx - window`); in a chunked layer
//! (Llama 4's `chunked_attention`) the earlier keys of the query's own chunk of `size`
//! positions: floor(j / size) = floor(i / size), j <= i (transformers' `chunked_overlay`).
//! A bidirectional layer (an encoder's, a vision transformer's: [`KeyWindow::Around`]) sees
//! keys on both sides, `before` earlier and `after` later ones of its `len` positions (every
//! key for full bidirectional attention). Every kernel masks by it and every metric counts
//! by it; the kernels of a checkpoint's layers take the causal windows only (a bidirectional
//! layer is computed by the capture's torch path).

use std::ops::Range;

/// The keys each query of a layer sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyWindow {
    /// Every key j <= i.
    #[default]
    Causal,
    /// The last `size` keys, the query itself included (`size` >= 1).
    Sliding(usize),
    /// The keys of the query's chunk of `size` positions up to the query (`size` >= 1).
    Chunked(usize),
    /// Bidirectional: the keys `i - before ..= i + after` of the `len` positions (clipped to
    /// them); every key when `before` and `after` are at least `len - 1`.
    Around {
        before: usize,
        after: usize,
        len: usize,
    },
}

impl KeyWindow {
    /// Full causal attention.
    pub const CAUSAL: KeyWindow = KeyWindow::Causal;

    /// A sliding window of `size` keys (the query itself included); `size` >= 1.
    pub fn sliding(size: usize) -> Self {
        KeyWindow::Sliding(size.max(1))
    }

    /// Chunks of `size` positions; `size` >= 1.
    pub fn chunked(size: usize) -> Self {
        KeyWindow::Chunked(size.max(1))
    }

    /// Full bidirectional attention over `len` positions: every query sees every key.
    pub fn bidirectional(len: usize) -> Self {
        KeyWindow::Around {
            before: len.saturating_sub(1),
            after: len.saturating_sub(1),
            len,
        }
    }

    /// The keys a block of `n` queries from `q_start` spans, `0 .. block_keys`: `q_start + n`
    /// (its last query's), or up to `after` past it in a bidirectional layer.
    pub fn block_keys(self, q_start: usize, n: usize) -> usize {
        match (self, n) {
            (_, 0) => q_start,
            (KeyWindow::Around { .. }, _) => self.keys(q_start + n - 1).end,
            _ => q_start + n,
        }
    }

    /// This window over sequences of `len` positions: a bidirectional window's length set
    /// (its reach clipped to it); the causal windows are the same at any length.
    pub fn for_length(self, len: usize) -> Self {
        match self {
            KeyWindow::Around { before, after, .. } => KeyWindow::Around {
                before: before.min(len.saturating_sub(1)),
                after: after.min(len.saturating_sub(1)),
                len,
            },
            other => other,
        }
    }

    /// Whether a query sees later keys (a bidirectional layer).
    pub fn sees_later(self) -> bool {
        matches!(self, KeyWindow::Around { after, .. } if after > 0)
    }

    /// The sliding window's size (none for causal and chunked layers).
    pub fn sliding_size(self) -> Option<usize> {
        match self {
            KeyWindow::Sliding(size) => Some(size),
            _ => None,
        }
    }

    /// Whether some query of a `seq_len`-token sequence does not see every earlier key.
    pub fn restricts(self, seq_len: usize) -> bool {
        match self {
            KeyWindow::Causal => false,
            KeyWindow::Sliding(size) | KeyWindow::Chunked(size) => size < seq_len,
            KeyWindow::Around { before, .. } => before + 1 < seq_len,
        }
    }

    /// The first key query `i` sees.
    #[inline(always)]
    pub fn first_key(self, i: usize) -> usize {
        match self {
            KeyWindow::Causal => 0,
            KeyWindow::Sliding(size) => (i + 1).saturating_sub(size),
            KeyWindow::Chunked(size) => i - i % size,
            KeyWindow::Around { before, .. } => i.saturating_sub(before),
        }
    }

    /// The keys query `i` sees: `first_key(i) ..= i` (to `i + after` in a bidirectional
    /// layer).
    #[inline(always)]
    pub fn keys(self, i: usize) -> Range<usize> {
        match self {
            KeyWindow::Around { after, len, .. } => {
                self.first_key(i)..(i.saturating_add(after).saturating_add(1)).min(len)
            }
            _ => self.first_key(i)..i + 1,
        }
    }

    /// Whether query `i` sees key 0 (a first token outside the window is no sink).
    #[inline(always)]
    pub fn sees_first(self, i: usize) -> bool {
        self.first_key(i) == 0
    }

    /// The queries past `j` that see key `j` end before this one.
    fn end_of_sight(self, j: usize) -> Option<usize> {
        match self {
            KeyWindow::Causal => None,
            KeyWindow::Sliding(size) => Some(j + size),
            KeyWindow::Chunked(size) => Some(j - j % size + size),
            KeyWindow::Around { before, .. } => Some(j.saturating_add(before).saturating_add(1)),
        }
    }

    /// The first query that sees key `j`: `j`, or earlier in a bidirectional layer.
    fn start_of_sight(self, j: usize) -> usize {
        match self {
            KeyWindow::Around { after, .. } => j.saturating_sub(after),
            _ => j,
        }
    }

    /// How many of the queries `queries` see key 0.
    pub fn queries_seeing_first(self, queries: Range<usize>) -> usize {
        self.queries_seeing(0, queries)
    }

    /// The (query, key) pairs the queries `queries` see.
    pub fn pairs(self, queries: Range<usize>) -> usize {
        queries.map(|i| self.keys(i).len()).sum()
    }

    /// How many of the queries `queries` see key `j`.
    pub fn queries_seeing(self, j: usize, queries: Range<usize>) -> usize {
        let start = queries.start.max(self.start_of_sight(j));
        let end = match self.end_of_sight(j) {
            Some(end) => queries.end.min(end),
            None => queries.end,
        };
        end.saturating_sub(start)
    }

    /// In words, for `inspect` and run.json ("causal", "sliding window of 6 keys", ...).
    pub fn describe(self) -> String {
        match self {
            KeyWindow::Causal => "causal".to_string(),
            KeyWindow::Sliding(size) => format!("sliding window of {size} keys"),
            KeyWindow::Chunked(size) => format!("chunks of {size} positions"),
            KeyWindow::Around { before, after, len } if before + 1 >= len && after + 1 >= len => {
                "bidirectional".to_string()
            }
            KeyWindow::Around { before, after, .. } => {
                format!("bidirectional window of {before} keys before and {after} after")
            }
        }
    }
}

/// Stored as before chunks existed: causal `null`, a sliding window its size, a chunked
/// layer a struct `{"chunk": size}` (a one-element array in MessagePack's saved metric
/// states), so that partial results and records written earlier still read; a
/// bidirectional layer `{"before": b, "after": a, "len": n}` (a three-element array).
impl serde::Serialize for KeyWindow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        match *self {
            KeyWindow::Causal => s.serialize_none(),
            KeyWindow::Sliding(size) => s.serialize_some(&size),
            KeyWindow::Chunked(chunk) => {
                let mut st = s.serialize_struct("Chunk", 1)?;
                st.serialize_field("chunk", &chunk)?;
                st.end()
            }
            KeyWindow::Around { before, after, len } => {
                let mut st = s.serialize_struct("Around", 3)?;
                st.serialize_field("before", &before)?;
                st.serialize_field("after", &after)?;
                st.serialize_field("len", &len)?;
                st.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for KeyWindow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(StoredWindow)
    }
}

/// Reads what [`KeyWindow`]'s `Serialize` writes, in any self-describing format.
struct StoredWindow;

impl<'de> serde::de::Visitor<'de> for StoredWindow {
    type Value = KeyWindow;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("null, a window size, {\"chunk\": size} or {\"before\", \"after\", \"len\"}")
    }

    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<KeyWindow, E> {
        Ok(KeyWindow::Causal)
    }

    fn visit_none<E: serde::de::Error>(self) -> std::result::Result<KeyWindow, E> {
        Ok(KeyWindow::Causal)
    }

    fn visit_some<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<KeyWindow, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_u64<E: serde::de::Error>(self, size: u64) -> std::result::Result<KeyWindow, E> {
        Ok(KeyWindow::sliding(size as usize))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<KeyWindow, A::Error> {
        let first: usize = seq
            .next_element()?
            .ok_or_else(|| serde::de::Error::invalid_length(0, &self))?;
        match seq.next_element::<usize>()? {
            None => Ok(KeyWindow::chunked(first)),
            Some(after) => {
                let len = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(2, &self))?;
                Ok(KeyWindow::Around {
                    before: first,
                    after,
                    len,
                })
            }
        }
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<KeyWindow, A::Error> {
        let mut entries = std::collections::BTreeMap::new();
        while let Some((key, value)) = map.next_entry::<String, usize>()? {
            entries.insert(key, value);
        }
        let get = |k: &str| entries.get(k).copied();
        match (get("chunk"), get("before"), get("after"), get("len")) {
            (Some(chunk), None, None, None) => Ok(KeyWindow::chunked(chunk)),
            (None, Some(before), Some(after), Some(len)) => {
                Ok(KeyWindow::Around { before, after, len })
            }
            _ => Err(serde::de::Error::custom(
                "expected {\"chunk\": size} or {\"before\", \"after\", \"len\"}",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidirectional_windows() {
        let full = KeyWindow::bidirectional(6);
        assert_eq!(full.keys(0), 0..6);
        assert_eq!(full.keys(5), 0..6);
        assert!(full.sees_later() && full.sees_first(5));
        assert_eq!(
            full.queries_seeing(4, 1..6),
            5,
            "every counted query sees key 4"
        );
        assert_eq!(full.pairs(0..6), 36);
        assert_eq!(full.describe(), "bidirectional");
        // ModernBERT-style local attention: 2 keys on each side
        let local = KeyWindow::Around {
            before: 2,
            after: 2,
            len: 8,
        };
        assert_eq!(local.keys(0), 0..3);
        assert_eq!(local.keys(4), 2..7);
        assert_eq!(local.keys(7), 5..8);
        assert_eq!(local.queries_seeing(4, 0..8), 5, "queries 2..=6");
        assert_eq!(local.queries_seeing_first(1..8), 2, "queries 1 and 2");
        assert_eq!(local.pairs(0..8), 3 + 4 + 5 + 5 + 5 + 5 + 4 + 3);
        for w in [
            full,
            local,
            KeyWindow::chunked(4),
            KeyWindow::sliding(3),
            KeyWindow::CAUSAL,
        ] {
            let json = serde_json::to_string(&w).unwrap();
            assert_eq!(
                serde_json::from_str::<KeyWindow>(&json).unwrap(),
                w,
                "{json}"
            );
            let packed = rmp_serde::to_vec(&w).unwrap();
            assert_eq!(rmp_serde::from_slice::<KeyWindow>(&packed).unwrap(), w);
        }
    }

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

    #[test]
    fn chunks_of_four_positions() {
        let w = KeyWindow::chunked(4);
        assert_eq!(w.keys(0), 0..1);
        assert_eq!(w.keys(3), 0..4);
        assert_eq!(w.keys(4), 4..5);
        assert_eq!(w.keys(9), 8..10);
        assert!(w.sees_first(3) && !w.sees_first(4));
        assert_eq!(w.queries_seeing_first(1..10), 3);
        assert_eq!(w.pairs(0..6), 1 + 2 + 3 + 4 + 1 + 2);
        // key 5 is seen by queries 5, 6, 7 of its chunk 4..8
        assert_eq!(w.queries_seeing(5, 0..10), 3);
        assert_eq!(w.queries_seeing(5, 0..7), 2);
        assert_eq!(w.queries_seeing(8, 0..10), 2);
        assert!(w.restricts(5) && !w.restricts(4));
        // every count agrees with the keys each query sees
        for j in 0..12 {
            let seen = (0..12).filter(|&i| w.keys(i).contains(&j)).count();
            assert_eq!(w.queries_seeing(j, 0..12), seen, "key {j}");
        }
    }

    #[test]
    fn stored_as_before_chunks_existed() {
        for (w, json) in [
            (KeyWindow::CAUSAL, "null"),
            (KeyWindow::sliding(6), "6"),
            (KeyWindow::chunked(8), r#"{"chunk":8}"#),
        ] {
            assert_eq!(serde_json::to_string(&w).unwrap(), json);
            assert_eq!(serde_json::from_str::<KeyWindow>(json).unwrap(), w);
            // saved metric states are MessagePack
            let bytes = rmp_serde::to_vec(&w).unwrap();
            let back = rmp_serde::from_slice::<KeyWindow>(&bytes);
            assert_eq!(back.as_ref().ok(), Some(&w), "{bytes:?} {back:?}");
        }
    }
}
