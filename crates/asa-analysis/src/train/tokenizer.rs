//! The BPE tokenizer trained on the training text with the `tokenizers` crate: byte-level
//! (any text encodes, no unknown token), `<s>` (BOS, id 0) and `</s>` (EOS, id 1), and a
//! post-processor that puts BOS in front of each encoded text when special tokens are
//! asked for (as Llama tokenizers do).

use std::path::Path;

use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer, TokenizerBuilder};

use asa_core::error::{Error, Result};

/// BOS token text.
pub const BOS: &str = "<s>";
/// EOS token text.
pub const EOS: &str = "</s>";

/// Trains a byte-level BPE tokenizer with `vocab_size` entries (at least 258: 256 bytes and
/// the two special tokens) on `documents`, and saves it as `path` (tokenizer.json).
pub fn train_bpe<I, S>(documents: I, vocab_size: usize, path: &Path) -> Result<Tokenizer>
where
    I: Iterator<Item = S> + Send,
    S: AsRef<str> + Send,
{
    if vocab_size < 258 {
        return Err(Error::option(
            "--vocab-size",
            format!(
            "{vocab_size} is too small: a byte-level BPE needs at least 258 (256 bytes + BOS + EOS)"
        ),
        ));
    }
    let wrap = |e: tokenizers::Error| Error::failed("tokenizer training failed", e);
    let mut trainer = BpeTrainerBuilder::new()
        .show_progress(false)
        .vocab_size(vocab_size)
        .min_frequency(2)
        .special_tokens(vec![
            AddedToken::from(BOS, true),
            AddedToken::from(EOS, true),
        ])
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let post = TemplateProcessing::builder()
        .try_single(format!("{BOS} $A"))
        .and_then(|b| b.try_pair(format!("{BOS} $A {BOS} $B")))
        .map_err(|e| Error::failed("tokenizer template", e))?
        .special_tokens(vec![(BOS, 0)])
        .build()
        .map_err(|e| Error::failed("tokenizer template", e))?;
    let mut tokenizer =
        TokenizerBuilder::<BPE, NormalizerWrapper, ByteLevel, TemplateProcessing, ByteLevel>::new()
            .with_model(BPE::default())
            .with_normalizer(None)
            .with_pre_tokenizer(Some(ByteLevel::new(false, true, true)))
            .with_post_processor(Some(post))
            .with_decoder(Some(ByteLevel::default()))
            .build()
            .map_err(wrap)?;
    tokenizer.train(&mut trainer, documents).map_err(wrap)?;
    tokenizer
        .save(path, false)
        .map_err(|e| Error::invalid(path, "cannot write tokenizer", e))?;
    let tokenizer = asa_models::tokenizer_file::read_tokenizer(path)?;
    for (text, id) in [(BOS, 0), (EOS, 1)] {
        if tokenizer.token_to_id(text) != Some(id) {
            return Err(Error::input(path, format!("{text} did not get id {id}")));
        }
    }
    Ok(tokenizer)
}
