//! Which keys a query sees: every earlier key (causal attention); in a sliding-window layer
//! only the last `size` of them: key j is visible from query i when i - size < j <= i
//! (transformers' `sliding_window_overlay`, `kv_idx > q_idx - window`); in a chunked layer
//! (Llama 4's `chunked_attention`) the earlier keys of the query's own chunk of `size`
//! positions: floor(j / size) = floor(i / size), j <= i (transformers' `chunked_overlay`).
//! Every kernel masks by it and every metric counts by it.

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
        }
    }

    /// The first key query `i` sees.
    #[inline(always)]
    pub fn first_key(self, i: usize) -> usize {
        match self {
            KeyWindow::Causal => 0,
            KeyWindow::Sliding(size) => (i + 1).saturating_sub(size),
            KeyWindow::Chunked(size) => i - i % size,
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

    /// The queries past `j` that see key `j` end before this one.
    fn end_of_sight(self, j: usize) -> Option<usize> {
        match self {
            KeyWindow::Causal => None,
            KeyWindow::Sliding(size) => Some(j + size),
            KeyWindow::Chunked(size) => Some(j - j % size + size),
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
        let start = queries.start.max(j);
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
        }
    }
}

/// Stored as before chunks existed: causal `null`, a sliding window its size, a chunked
/// layer a struct `{"chunk": size}` (a one-element array in MessagePack's saved metric
/// states), so that partial results and records written earlier still read.
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
        f.write_str("null, a window size or {\"chunk\": size}")
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
        let chunk: usize = seq
            .next_element()?
            .ok_or_else(|| serde::de::Error::invalid_length(0, &self))?;
        Ok(KeyWindow::chunked(chunk))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<KeyWindow, A::Error> {
        match map.next_entry::<String, usize>()? {
            Some((key, chunk)) if key == "chunk" => Ok(KeyWindow::chunked(chunk)),
            _ => Err(serde::de::Error::custom("expected {\"chunk\": size}")),
        }
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
