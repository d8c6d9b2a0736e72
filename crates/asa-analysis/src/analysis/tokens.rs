//! `tokens`: the first window's tokens as text, for the report's tokens view of a short run
//! (issue 39): written when `heatmap` runs on windows of at most [`TOKENS_UP_TO`] tokens and
//! the checkpoint (or `--tokenizer`) has a tokenizer. A table of its own, beside the
//! section 6 tables: model, position (0-based, as heatmap's query and key), token_id, text.

use tokenizers::Tokenizer;

use asa_tables::Table;
use asa_tables::{schema, Column};

/// The longest windows whose tokens are written (a tokens view reads them one by one).
pub const TOKENS_UP_TO: usize = 2048;

/// Each token of `ids` as text: the text it and the few tokens before it decode to less
/// the text of those before it (so a word's leading space stays with it, whatever the
/// tokenizer's decoder does at the start of a text, and a character of several byte tokens
/// is whole); a token whose text is not such an extension (an incomplete UTF-8 sequence,
/// decoded as U+FFFD) is decoded on its own.
pub fn token_texts(tokenizer: &Tokenizer, ids: &[u32]) -> Vec<String> {
    const CONTEXT: usize = 8;
    let decode = |ids: &[u32]| tokenizer.decode(ids, false).unwrap_or_default();
    (0..ids.len())
        .map(|i| {
            let from = i.saturating_sub(CONTEXT);
            let before = decode(&ids[from..i]);
            match decode(&ids[from..=i]).strip_prefix(&before) {
                Some(rest) => rest.to_string(),
                None => decode(&ids[i..=i]),
            }
        })
        .collect()
}

/// The `tokens` table of the models that have tokens (`(label, [(id, text)])`); none when no
/// model has.
pub fn tokens_table<'a>(
    models: impl Iterator<Item = (&'a str, &'a [(u32, String)])>,
) -> Option<Table> {
    let (mut model, mut position, mut id, mut text) = (vec![], vec![], vec![], vec![]);
    for (label, tokens) in models {
        for (i, (t, s)) in tokens.iter().enumerate() {
            model.push(Some(label.to_string()));
            position.push(Some(i as i64));
            id.push(Some(i64::from(*t)));
            text.push(Some(s.clone()));
        }
    }
    if model.is_empty() {
        return None;
    }
    Some(schema::TOKENS.build(vec![
        ("model", Column::Str(model)),
        ("position", Column::Int(position)),
        ("token_id", Column::Int(id)),
        ("text", Column::Str(text)),
    ]))
}
