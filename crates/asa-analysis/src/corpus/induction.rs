//! The built-in induction probe (`--probe induction`; SPEC section 4, `induction_score`):
//! every window is `[BOS] x_1 .. x_L x_1 .. x_L`, L random token ids repeated once, so
//! `seq_len = 2L + 1` and a query i of the second copy (`L + 1 <= i <= 2L`) has seen its
//! own token at `i - L`, followed by the token at `i - L + 1`: the repeated random tokens
//! of Olsson et al. (2022) and of TransformerLens' induction-head detection.
//!
//! The ids, exactly, so that any tool can rebuild the windows from `--seed`:
//! - the ids drawn from are `0 .. vocab_size` in increasing order, less the special ids:
//!   the BOS and EOS (config.json, else tokenizer.json by name, as for a corpus) and every
//!   token tokenizer.json marks special (when the checkpoint has one);
//! - one splitmix64 generator seeded with `--seed` serves every window; a draw is
//!   `ids[next_u64() % ids.len()]`;
//! - window by window: position 0 is the BOS id when one is in use (`--bos`), else a draw;
//!   then L draws x_1 .. x_L; then x_1 .. x_L again.

use super::generator::SplitMix64;
use super::{resolve_special, BosMode, CorpusOptions, SpecialTokens, Tok, TokenizerRef, Windows};
use asa_core::error::{Error, Result};

/// The shortest copy: with L = 2 the token after the earlier occurrence is the previous
/// token (distance L - 1 = 1), so induction and previous-token attention are one thing.
pub const MIN_COPY: usize = 3;

pub use asa_record::probe_kind::ProbeKind;

/// L, the length of each copy, of windows of `seq_len` tokens (`2L + 1`); a usage error
/// naming `--seq-len` when it is even or shorter than `2 * MIN_COPY + 1`.
pub fn copy_len(seq_len: usize) -> Result<usize> {
    let shortest = 2 * MIN_COPY + 1;
    if seq_len.is_multiple_of(2) || seq_len < shortest {
        let fix = match seq_len < shortest {
            true => format!("at least {shortest}"),
            false => format!("e.g. {} or {}", seq_len - 1, seq_len + 1),
        };
        return Err(Error::usage(format!(
            "--probe induction: --seq-len must be odd, 2L + 1 (BOS, L random tokens, the same L \
             again) with L >= {MIN_COPY}, got {seq_len} ({fix})"
        )));
    }
    Ok((seq_len - 1) / 2)
}

/// `num_seqs` windows of `[first] x_1 .. x_len x_1 .. x_len`, every id drawn from `ids` by
/// one splitmix64 generator seeded with `seed`; `first` is the BOS id, or a draw when `None`.
pub fn draw_windows(
    seed: u64,
    ids: &[u32],
    first: Option<u32>,
    len: usize,
    num_seqs: usize,
) -> Vec<Vec<u32>> {
    let mut rng = SplitMix64(seed);
    let mut draw = || ids[rng.below(ids.len())];
    (0..num_seqs)
        .map(|_| {
            let start = first.unwrap_or_else(&mut draw);
            let copy: Vec<u32> = (0..len).map(|_| draw()).collect();
            std::iter::once(start)
                .chain(copy.iter().copied())
                .chain(copy.iter().copied())
                .collect()
        })
        .collect()
}

/// The probe's windows for a checkpoint of `vocab_size` ids with `special` ids (and its
/// tokenizer, when it has one, for the BOS and EOS by name and the ids it marks special).
pub(super) fn windows(
    seed: u64,
    tokenizer: Option<TokenizerRef<'_>>,
    special: SpecialTokens,
    vocab_size: usize,
    opts: &CorpusOptions,
) -> Result<Windows> {
    let len = copy_len(opts.seq_len)?;
    let tok = match tokenizer {
        Some(TokenizerRef::Path(p)) if p.is_file() => Some(Tok::open(p)?),
        Some(built @ TokenizerRef::Built(..)) => Some(Tok::load(Some(built), "the probe")?),
        _ => None,
    };
    let (bos, eos) = resolve_special(special, tok.as_ref(), vocab_size, opts.bos)?;
    // the BOS is never drawn, even where --bos never leaves it out of the windows
    let (any_bos, _) = resolve_special(special, tok.as_ref(), vocab_size, BosMode::Auto)?;
    let mut excluded: Vec<u32> = any_bos.iter().chain(&eos).map(|s| s.id).collect();
    if let Some(t) = &tok {
        let added = t.tokenizer.get_added_tokens_decoder();
        excluded.extend(added.iter().filter(|(_, t)| t.special).map(|(&id, _)| id));
    }
    excluded.retain(|&id| (id as usize) < vocab_size);
    excluded.sort_unstable();
    excluded.dedup();
    let ids: Vec<u32> = (0..vocab_size as u32)
        .filter(|id| excluded.binary_search(id).is_err())
        .collect();
    if ids.is_empty() {
        return Err(Error::option("--probe", format!(
            "induction: every one of the model's {vocab_size} token ids is special; none is left to draw"
        )));
    }
    let first = bos.as_ref().map(|b| b.id);
    let windows = draw_windows(seed, &ids, first, len, opts.num_seqs);
    let start = match &bos {
        Some(b) => format!("BOS ({})", b.text),
        None => format!("a random id (bos {})", opts.bos),
    };
    let description = format!(
        "induction probe (seed {seed}): {} windows of {} tokens: {start}, L = {len} random ids, \
         the same {len} again; ids drawn from {} of {vocab_size} (special ids {:?} left out)",
        opts.num_seqs,
        opts.seq_len,
        ids.len(),
        excluded
    );
    Ok(Windows {
        tokens: windows.len() * opts.seq_len,
        documents: windows.len(),
        ids: windows,
        description,
        bos: first,
        eos: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seq_len_must_be_two_copies_and_a_bos() {
        assert_eq!(copy_len(21).unwrap(), 10);
        assert_eq!(copy_len(7).unwrap(), 3);
        for bad in [0, 1, 5, 20, 1024] {
            let e = copy_len(bad).unwrap_err().to_string();
            assert!(
                e.contains("--seq-len") && e.contains(&bad.to_string()),
                "{e}"
            );
        }
        assert!(copy_len(1024)
            .unwrap_err()
            .to_string()
            .contains("1023 or 1025"));
    }

    #[test]
    fn windows_repeat_their_draws_and_follow_the_seed() {
        let ids = [3, 5, 9, 11];
        let w = draw_windows(7, &ids, Some(1), 4, 3);
        assert_eq!(w.len(), 3);
        for win in &w {
            assert_eq!(win.len(), 9);
            assert_eq!(win[0], 1);
            assert_eq!(win[1..5], win[5..9]);
            assert!(win[1..].iter().all(|id| ids.contains(id)));
        }
        // splitmix64 from state 7, by hand: the first draw is ids[next % 4]
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let first: Vec<u32> = (0..4).map(|_| ids[(next() % 4) as usize]).collect();
        assert_eq!(w[0][1..5], first[..]);
        assert_ne!(w, draw_windows(8, &ids, Some(1), 4, 3));
        // no BOS: position 0 is a draw too, before the copy's
        let no_bos = draw_windows(7, &ids, None, 4, 1);
        assert_eq!(no_bos[0][0], first[0]);
        assert_eq!(no_bos[0][1..4], first[1..4]);
    }
}
