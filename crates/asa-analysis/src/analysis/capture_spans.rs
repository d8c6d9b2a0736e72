//! Where a captured call's sequences lie in its padded batch: each sequence's tokens are one
//! run of positions (left or right padding), and its padded positions are neither keys nor
//! queries. A call is computed in groups of sequences that share their run, each group's
//! positions re-based to 0 (the pooled tables count positions from each sequence's first
//! token).

use asa_core::error::{Error, Result};

/// One sequence's tokens in a padded batch: positions `start .. start + len` of its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

/// Sequences `first .. first + count` of a call, each holding positions
/// `start .. start + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub first: usize,
    pub count: usize,
    pub start: usize,
    pub len: usize,
}

/// The groups of a call of `b` sequences of `t` positions: one group of every sequence
/// without `spans`; else consecutive sequences of the same span together. Refused: a span
/// count other than `b`, an empty span or one past `t`; `name` names the module.
pub fn groups(name: &str, b: usize, t: usize, spans: Option<&[Span]>) -> Result<Vec<Group>> {
    let Some(spans) = spans else {
        return Ok(vec![Group {
            first: 0,
            count: b,
            start: 0,
            len: t,
        }]);
    };
    if spans.len() != b {
        return Err(Error::usage(format!(
            "{name}: {} sequence spans for a batch of {b}",
            spans.len()
        )));
    }
    let mut groups: Vec<Group> = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        if s.len == 0 || s.start.checked_add(s.len).is_none_or(|end| end > t) {
            return Err(Error::usage(format!(
                "{name}: sequence {i} holds positions {}..{} of {t}{}",
                s.start,
                s.start.saturating_add(s.len),
                if s.len == 0 {
                    " (every position is padding)"
                } else {
                    ""
                }
            )));
        }
        match groups.last_mut() {
            Some(g) if (g.start, g.len) == (s.start, s.len) => g.count += 1,
            _ => groups.push(Group {
                first: i,
                count: 1,
                start: s.start,
                len: s.len,
            }),
        }
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_sequences_of_one_span_share_a_group() {
        let span = |start, len| Span { start, len };
        let spans = [span(0, 5), span(0, 5), span(2, 3), span(0, 5)];
        let g = groups("m", 4, 5, Some(&spans)).unwrap();
        let group = |first, count, start, len| Group {
            first,
            count,
            start,
            len,
        };
        assert_eq!(g, [group(0, 2, 0, 5), group(2, 1, 2, 3), group(3, 1, 0, 5)]);
        assert_eq!(groups("m", 3, 7, None).unwrap(), [group(0, 3, 0, 7)]);
        for (bad, words) in [
            (vec![span(0, 0)], "every position is padding"),
            (vec![span(4, 2)], "positions 4..6 of 5"),
            (
                vec![span(0, 5), span(0, 5)],
                "2 sequence spans for a batch of 1",
            ),
        ] {
            let e = groups("m", 1, 5, Some(&bad)).unwrap_err().to_string();
            assert!(e.contains(words), "{e}");
        }
    }
}
