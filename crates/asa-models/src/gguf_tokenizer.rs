//! The tokenizer a GGUF file describes in its metadata (`tokenizer.ggml.*`), rebuilt as a
//! `tokenizers` tokenizer that splits text the way llama.cpp does.
//!
//! Supported: byte-level BPE (`tokenizer.ggml.model = gpt2`: GPT-2, SmolLM, Llama 3, Qwen2
//! and their relatives) with the pre-tokenizers of [`PRE_TOKENIZERS`], and SentencePiece
//! (`llama`: Llama 2, Mistral, Gemma; see `gguf_sentencepiece`). Tokens marked control
//! (type 3) become special added tokens, user-defined ones (type 4) plain added tokens, as
//! in transformers' GGUF loader. No BOS/EOS is added by the tokenizer: windows get their BOS
//! from the corpus packing (`--bos`). Anything else (WordPiece `bert`, an unknown
//! `tokenizer.ggml.pre`) is an error that points to `--tokenizer`.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::gguf::read_error;
use super::gguf_config::{metadata_str, short, value_as_u64};
use super::gguf_sentencepiece::sentencepiece_tokenizer;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};

/// `tokenizer.ggml.pre` values understood, for error messages.
pub const PRE_TOKENIZERS: &str = "default, gpt2, smollm, starcoder, refact, command-r, codeshell, llama-bpe, llama3, smaug-bpe, falcon3, dbrx, qwen2, deepseek-r1-qwen";

/// GPT-4 style split (Llama 3), with digits in groups of up to three.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2: as Llama 3 with single digits.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A `tokenizer.ggml.*` metadata value that is missing or not what the tokenizer needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizerMetadataError {
    /// `missing tokenizer metadata {key}`, then ` ({why})` when there is a reason to give.
    #[error("missing tokenizer metadata {key}{}", why.map_or_else(String::new, |w| format!(" ({w})")))]
    Missing {
        key: &'static str,
        why: Option<&'static str>,
    },
    /// The value is not an array.
    #[error("{key} is not an array")]
    NotArray { key: &'static str },
    /// An element of the array is not of the type `want` (`string`, `float`); `found`
    /// describes it ("u32 5").
    #[error("{key} holds a non-{want}, {found}")]
    Element {
        key: &'static str,
        want: &'static str,
        found: String,
    },
    /// The array has `len` entries where the vocabulary has `tokens`.
    #[error("{key} has {len} entries for {tokens} tokens")]
    Count {
        key: &'static str,
        len: usize,
        tokens: usize,
    },
}

impl From<TokenizerMetadataError> for CheckpointProblem {
    fn from(e: TokenizerMetadataError) -> Self {
        let detail = e.to_string();
        match e {
            TokenizerMetadataError::Missing { key, why } => CheckpointProblem::MissingKey {
                key: key.into(),
                detail: why.unwrap_or_default().into(),
            },
            TokenizerMetadataError::NotArray { key } => {
                CheckpointProblem::wrong_type(key, "an array", "another type")
            }
            TokenizerMetadataError::Element { key, want, found } => {
                CheckpointProblem::wrong_type(key, format!("an array of {want}s"), found)
            }
            TokenizerMetadataError::Count { key, .. } => {
                CheckpointProblem::inconsistent(&[key, "tokenizer.ggml.tokens"], detail)
            }
        }
    }
}

/// Whether the file carries a tokenizer at all.
pub fn has_tokenizer(content: &Content) -> bool {
    content.metadata.contains_key("tokenizer.ggml.tokens")
}

/// Builds the tokenizer of the GGUF file at `path` from its metadata.
pub fn tokenizer_from_gguf(path: &Path) -> Result<Tokenizer> {
    let mut file = asa_core::input::open(path)?;
    let content = Content::read(&mut file).map_err(|e| read_error(path, e))?;
    tokenizer_from_content(&content, path)
}

/// Builds the tokenizer described by `content` (read from `path`, named in errors).
pub fn tokenizer_from_content(content: &Content, path: &Path) -> Result<Tokenizer> {
    let fail = |problem: CheckpointProblem| Error::checkpoint_problem(path, problem);
    if !has_tokenizer(content) {
        return Err(fail(CheckpointProblem::MissingKey {
            key: "tokenizer.ggml.tokens".into(),
            detail: "the GGUF file has no tokenizer; pass --tokenizer tokenizer.json, or give token ids (--corpus FILE.npy or FILE.json)".into(),
        }));
    }
    let model = metadata_str(content, "tokenizer.ggml.model").unwrap_or("(none)");
    match model {
        "gpt2" => {}
        "llama" => return sentencepiece_tokenizer(content, path),
        _ => {
            let kind = if model == "bert" { " (WordPiece)" } else { "" };
            return Err(fail(CheckpointProblem::unsupported(
                "tokenizer.ggml.model",
                format!("{model}{kind}"),
                "gpt2 byte-level BPE, llama SentencePiece; pass --tokenizer tokenizer.json",
            )));
        }
    }
    let pre = metadata_str(content, "tokenizer.ggml.pre").unwrap_or("default");
    let pre_tokenizer = pre_tokenizer(pre).ok_or_else(|| {
        fail(CheckpointProblem::unsupported(
            "tokenizer.ggml.pre",
            pre,
            format!("{PRE_TOKENIZERS}; pass --tokenizer tokenizer.json"),
        ))
    })?;
    let metadata = |e: TokenizerMetadataError| fail(e.into());
    let tokens = string_array(content, "tokenizer.ggml.tokens").map_err(metadata)?;
    let merges = string_array(content, "tokenizer.ggml.merges").map_err(metadata)?;
    let types = token_types(content, tokens.len());

    let spelling = bytes_to_unicode();
    let alphabet: std::collections::HashSet<char> = spelling.values().copied().collect();
    let respell = |token: &str| -> String {
        if token.chars().all(|c| alphabet.contains(&c)) {
            token.to_string()
        } else {
            token.bytes().map(|b| spelling[&b]).collect()
        }
    };
    let mut vocab = Vocab::default();
    for (id, token) in tokens.iter().enumerate() {
        vocab.entry(respell(token)).or_insert(id as u32);
    }
    let mut pairs = Vec::with_capacity(merges.len());
    for merge in &merges {
        let (a, b) = merge.split_once(' ').ok_or_else(|| {
            let problem = CheckpointProblem::wrong_type(
                "tokenizer.ggml.merges",
                "merges of two tokens (`a b`)",
                format!("`{merge}`"),
            );
            fail(problem)
        })?;
        pairs.push((a.to_string(), b.to_string()));
    }
    // llama.cpp matches a whole pre-token found in the vocabulary before merging for the
    // Llama 3 family (as their tokenizer.json's `ignore_merges`)
    let ignore_merges = matches!(pre, "llama-bpe" | "llama3" | "llama-v3");
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| {
            Error::invalid(path, "invalid GGUF tokenizer", e).about(InputKind::Checkpoint)
        })?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    // control tokens written in GPT-2's byte alphabet only (as transformers' loader)
    let byte_level = |token: &str| token.chars().all(|c| alphabet.contains(&c));
    add_listed_tokens(&mut tokenizer, &tokens, &types, byte_level, path)?;
    Ok(tokenizer)
}

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

/// The type of each of `n` tokens; Normal where the file lists none (or an unknown code).
pub(super) fn token_types(content: &Content, n: usize) -> Vec<TokenType> {
    let mut types = vec![TokenType::Normal; n];
    if let Some(Value::Array(items)) = content.metadata.get("tokenizer.ggml.token_type") {
        for (t, v) in types.iter_mut().zip(items) {
            *t = match value_as_u64(v) {
                Some(2) => TokenType::Unknown,
                Some(3) => TokenType::Control,
                Some(4) => TokenType::UserDefined,
                Some(5) => TokenType::Unused,
                Some(6) => TokenType::Byte,
                _ => TokenType::Normal,
            };
        }
    }
    types
}

/// Adds the control tokens that `keep_control` accepts as special tokens and the
/// user-defined ones as plain added tokens, both matched whole in raw text; a failure
/// names `path`.
pub(super) fn add_listed_tokens(
    tokenizer: &mut Tokenizer,
    tokens: &[String],
    types: &[TokenType],
    keep_control: impl Fn(&str) -> bool,
    path: &Path,
) -> Result<()> {
    let mut control = Vec::new();
    let mut user = Vec::new();
    for (token, kind) in tokens.iter().zip(types) {
        match kind {
            TokenType::Control if keep_control(token) => {
                control.push(AddedToken::from(token.clone(), true).normalized(false))
            }
            TokenType::UserDefined => {
                user.push(AddedToken::from(token.clone(), false).normalized(false))
            }
            _ => {}
        }
    }
    let added = |e| {
        Error::invalid(path, "cannot add the GGUF's special tokens", e).about(InputKind::Checkpoint)
    };
    tokenizer.add_special_tokens(control).map_err(added)?;
    tokenizer.add_tokens(user).map_err(added)?;
    Ok(())
}

/// The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre` (llama-vocab.cpp).
fn pre_tokenizer(pre: &str) -> Option<PreTokenizerWrapper> {
    let byte_level = |use_regex| ByteLevel::new(false, true, use_regex);
    let split = |regex: &str| {
        Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .expect("the built-in split patterns compile")
    };
    Some(match pre {
        // GPT-2's own regex, which ByteLevel applies
        "default" | "gpt2" | "mpt" | "olmo" | "jais" => byte_level(true).into(),
        // "\p{N}" first (every digit alone), then GPT-2's regex
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" => {
            Sequence::new(vec![Digits::new(true).into(), byte_level(true).into()]).into()
        }
        "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" | "falcon3" | "dbrx" => {
            Sequence::new(vec![split(LLAMA3_SPLIT).into(), byte_level(false).into()]).into()
        }
        "qwen2" | "deepseek-r1-qwen" => {
            Sequence::new(vec![split(QWEN2_SPLIT).into(), byte_level(false).into()]).into()
        }
        _ => return None,
    })
}

/// The array of strings at `key`.
pub(super) fn string_array(
    content: &Content,
    key: &'static str,
) -> std::result::Result<Vec<String>, TokenizerMetadataError> {
    match content.metadata.get(key) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(TokenizerMetadataError::Element {
                    key,
                    want: "string",
                    found: short(other),
                }),
            })
            .collect(),
        Some(_) => Err(TokenizerMetadataError::NotArray { key }),
        None => Err(TokenizerMetadataError::Missing { key, why: None }),
    }
}

/// GPT-2's reversible byte -> printable character map.
fn bytes_to_unicode() -> HashMap<u8, char> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut map = HashMap::with_capacity(256);
    let mut next = 256u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).expect("valid code point");
            next += 1;
            c
        };
        map.insert(b, c);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    use candle_core::quantized::gguf_file::VersionedMagic;

    fn content(model: &str, pre: &str, with_tokens: bool) -> Content {
        let strings =
            |xs: &[&str]| Value::Array(xs.iter().map(|x| Value::String(x.to_string())).collect());
        let mut metadata = std::collections::HashMap::new();
        metadata.insert("tokenizer.ggml.model".into(), Value::String(model.into()));
        metadata.insert("tokenizer.ggml.pre".into(), Value::String(pre.into()));
        if with_tokens {
            let tokens = ["<s>", "a", "b", "ab", "\u{120}", "\u{120}ab", "1", "2"];
            metadata.insert("tokenizer.ggml.tokens".into(), strings(&tokens));
            metadata.insert(
                "tokenizer.ggml.merges".into(),
                strings(&["a b", "\u{120} ab"]),
            );
            let types = [3, 1, 1, 1, 1, 1, 1, 1].map(Value::I32).to_vec();
            metadata.insert("tokenizer.ggml.token_type".into(), Value::Array(types));
        }
        Content {
            magic: VersionedMagic::GgufV3,
            metadata,
            tensor_infos: Default::default(),
            tensor_data_offset: 0,
        }
    }

    #[test]
    fn byte_level_bpe_from_metadata() {
        let tok =
            tokenizer_from_content(&content("gpt2", "smollm", true), Path::new("t.gguf")).unwrap();
        // "ab" + " ab" + "12" (digits alone) + the control token kept whole
        let ids = tok.encode("ab ab12<s>", false).unwrap().get_ids().to_vec();
        assert_eq!(ids, [3, 5, 6, 7, 0]);
    }

    #[test]
    fn unsupported_tokenizers_point_to_the_tokenizer_option() {
        let path = Path::new("m.gguf");
        for (c, problem, key) in [
            (
                content("gpt2", "jina-v2-code", true),
                "unsupported",
                "tokenizer.ggml.pre",
            ),
            (
                content("bert", "default", true),
                "unsupported",
                "tokenizer.ggml.model",
            ),
            (
                content("gpt2", "default", false),
                "missing_key",
                "tokenizer.ggml.tokens",
            ),
        ] {
            let err = tokenizer_from_content(&c, path).err().unwrap();
            let refused = err.problem().unwrap();
            assert_eq!((refused.name(), refused.key()), (problem, Some(key)));
            assert_eq!(err.path(), Some(path));
            assert!(err.to_string().contains("--tokenizer"), "{err}");
        }
    }

    #[test]
    fn metadata_errors_read_as_before() {
        let mut c = content("gpt2", "default", true);
        let key = "tokenizer.ggml.merges";
        let says = |c: &Content| string_array(c, key).unwrap_err().to_string();
        c.metadata
            .insert(key.into(), Value::Array(vec![Value::U32(5)]));
        assert_eq!(says(&c), "tokenizer.ggml.merges holds a non-string, u32 5");
        c.metadata.insert(key.into(), Value::U32(5));
        assert_eq!(says(&c), "tokenizer.ggml.merges is not an array");
        c.metadata.remove(key);
        assert_eq!(says(&c), "missing tokenizer metadata tokenizer.ggml.merges");
        let scores = TokenizerMetadataError::Missing {
            key: "tokenizer.ggml.scores",
            why: Some("a SentencePiece vocabulary needs its scores"),
        };
        assert_eq!(
            scores.to_string(),
            "missing tokenizer metadata tokenizer.ggml.scores (a SentencePiece vocabulary needs its scores)"
        );
        let count = TokenizerMetadataError::Count {
            key: "tokenizer.ggml.scores",
            len: 3,
            tokens: 8,
        };
        assert_eq!(
            count.to_string(),
            "tokenizer.ggml.scores has 3 entries for 8 tokens"
        );
    }

    #[test]
    fn byte_map_is_gpt2s() {
        let m = bytes_to_unicode();
        assert_eq!(m[&b' '], '\u{120}'); // "Ġ"
        assert_eq!(m[&b'\n'], '\u{10a}'); // "Ċ"
        assert_eq!(m[&b'A'], 'A');
        assert_eq!(
            m.values().collect::<std::collections::HashSet<_>>().len(),
            256
        );
    }

    #[test]
    fn smollm_splits_every_digit() {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let pt = pre_tokenizer("smollm").unwrap();
        let mut s = PreTokenizedString::from("In 1603, it's  ok");
        pt.pre_tokenize(&mut s).unwrap();
        let parts: Vec<String> = s
            .get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(p, _, _)| p.to_string())
            .collect();
        assert_eq!(
            parts,
            [
                "In",
                "\u{120}",
                "1",
                "6",
                "0",
                "3",
                ",",
                "\u{120}it",
                "'s",
                "\u{120}",
                "\u{120}ok"
            ]
        );
    }
}
