//! The SentencePiece tokenizer of a GGUF file (`tokenizer.ggml.model = llama`: Llama 2,
//! Mistral, TinyLlama, Gemma), rebuilt as a `tokenizers` BPE that splits text the way
//! llama.cpp's SPM tokenizer does.
//!
//! llama.cpp escapes spaces as "▁", puts one "▁" before each stretch of text (at the start and
//! after a special token, when `tokenizer.ggml.add_space_prefix` is true, the default), then
//! merges, from single characters, the adjacent pair whose union is the piece of highest
//! score; characters no piece holds become their UTF-8 byte tokens `<0xXX>`. The same comes
//! out of a BPE whose merges are every split of every normal piece into two normal pieces,
//! ranked by the whole piece's score (as transformers' GGUF converter builds them), with byte
//! fallback, behind a normaliser that prepends "▁" and replaces " " with "▁".

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{DecoderWrapper, NormalizerWrapper, Tokenizer};

use super::gguf_config::short;
use super::gguf_tokenizer::{
    add_listed_tokens, string_array, token_types, TokenType, TokenizerMetadataError,
};
use asa_core::error::{Error, InputKind, Result};

/// SentencePiece's escaped space.
const SPACE: &str = "\u{2581}";

/// Builds the SentencePiece tokenizer described by `content` (read from `path`).
pub fn sentencepiece_tokenizer(content: &Content, path: &Path) -> Result<Tokenizer> {
    let fail = |e: TokenizerMetadataError| Error::checkpoint_problem(path, e.into());
    let tokens = string_array(content, "tokenizer.ggml.tokens").map_err(fail)?;
    let scores = scores(content, tokens.len()).map_err(fail)?;
    let types = token_types(content, tokens.len());
    let add_space_prefix = match content.metadata.get("tokenizer.ggml.add_space_prefix") {
        Some(Value::Bool(b)) => *b,
        _ => true,
    };

    let mut vocab = Vocab::default();
    for (id, token) in tokens.iter().enumerate() {
        vocab.entry(token.clone()).or_insert(id as u32);
    }
    let merges = merges_by_score(&tokens, &scores, &types);
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    let unk = match content.metadata.get("tokenizer.ggml.unknown_token_id") {
        Some(v) => super::gguf_config::value_as_u64(v).map(|id| id as usize),
        None => types.iter().position(|t| *t == TokenType::Unknown),
    };
    if let Some(token) = unk.and_then(|id| tokens.get(id)) {
        bpe = bpe.unk_token(token.clone());
    }
    let invalid = |e| {
        Error::invalid(path, "invalid GGUF SentencePiece tokenizer", e).about(InputKind::Checkpoint)
    };
    let bpe = bpe.build().map_err(invalid)?;

    let mut tokenizer = Tokenizer::new(bpe);
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        normalizers.push(Prepend::new(SPACE.to_string()).into());
    }
    normalizers.push(
        Replace::new(" ", SPACE)
            .expect("a plain string pattern")
            .into(),
    );
    tokenizer
        .with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(invalid)?;
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE, " ")
            .expect("a plain string pattern")
            .into(),
        ByteFallback::default().into(),
        Fuse::default().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    add_listed_tokens(&mut tokenizer, &tokens, &types, |_| true, path)?;
    Ok(tokenizer)
}

/// `tokenizer.ggml.scores`, one per token.
fn scores(content: &Content, n: usize) -> std::result::Result<Vec<f32>, TokenizerMetadataError> {
    let key = "tokenizer.ggml.scores";
    let Some(Value::Array(items)) = content.metadata.get(key) else {
        return Err(TokenizerMetadataError::Missing {
            key,
            why: Some("a SentencePiece vocabulary needs its scores"),
        });
    };
    if items.len() != n {
        return Err(TokenizerMetadataError::Count {
            key,
            len: items.len(),
            tokens: n,
        });
    }
    items
        .iter()
        .map(|v| match v {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            other => Err(TokenizerMetadataError::Element {
                key,
                want: "float",
                found: short(other),
            }),
        })
        .collect()
}

/// Every split of a normal piece into two normal pieces, the pieces of higher score first;
/// the splits of one piece in order of their halves' scores (transformers' GGUF converter).
fn merges_by_score(
    tokens: &[String],
    scores: &[f32],
    types: &[TokenType],
) -> Vec<(String, String)> {
    let normal: HashMap<&str, f32> = tokens
        .iter()
        .zip(scores)
        .zip(types)
        .filter(|(_, t)| **t == TokenType::Normal)
        .map(|((token, score), _)| (token.as_str(), *score))
        .collect();
    let mut merges: Vec<(f32, f32, f32, &str, &str)> = Vec::new();
    for (&piece, &score) in &normal {
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if let (Some(&l), Some(&r)) = (normal.get(left), normal.get(right)) {
                merges.push((score, l, r, left, right));
            }
        }
    }
    // highest score first; ties (not expected: SentencePiece scores are distinct) by the
    // halves' scores, then by text so the order never depends on the hash map
    merges.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then(b.2.total_cmp(&a.2))
            .then(a.3.cmp(b.3))
            .then(a.4.cmp(b.4))
    });
    merges
        .into_iter()
        .map(|(_, _, _, l, r)| (l.to_string(), r.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_the_whole_pieces_scores() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"]
            .map(String::from)
            .to_vec();
        // "bc" scores above "ab": b+c merges first
        let scores = [-1.0, -2.0, -3.0, -5.0, -4.0, -6.0];
        let types = vec![TokenType::Normal; 6];
        let merges = merges_by_score(&tokens, &scores, &types);
        let pairs: Vec<(&str, &str)> = merges
            .iter()
            .map(|(l, r)| (l.as_str(), r.as_str()))
            .collect();
        // abc's splits: (a, bc) has the halves -1, -4 and (ab, c) -5, -3: a's score ranks first
        assert_eq!(pairs, [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]);
    }

    #[test]
    fn control_and_byte_pieces_never_come_out_of_a_merge() {
        let tokens: Vec<String> = ["<", "s", ">", "<s", "<s>", "<0x41>"]
            .map(String::from)
            .to_vec();
        let scores = [-1.0, -2.0, -3.0, -4.0, 0.0, 0.0];
        let mut types = vec![TokenType::Normal; 6];
        types[4] = TokenType::Control;
        types[5] = TokenType::Byte;
        let merges = merges_by_score(&tokens, &scores, &types);
        assert_eq!(merges, [("<".to_string(), "s".to_string())]);
    }
}
