//! The corpus: where the analysed token windows come from (SPEC 2b, 4 "Corpus packing").
//!
//! A corpus is a file (`.txt` one document, `.jsonl` one document per line's `text`, `.npy`
//! or `.json` token ids) or the built-in generated prose ([`generator`]) when no `--corpus`
//! is given; `--probe induction` replaces it with the built-in induction probe
//! ([`induction`]: BOS, L random ids, the same L again). Text is tokenized with the
//! checkpoint's `tokenizer.json`, each document on its own and without special tokens.
//! Documents are joined in order with the EOS id between consecutive ones (when the
//! checkpoint has an EOS) and cut into `num_seqs` consecutive, non-overlapping windows of
//! `seq_len` ids; with a BOS each window is `[BOS]` followed by the next `seq_len - 1` ids
//! of the joined stream.
//!
//! Decisions beyond the spec:
//! - Token-id tables used as windows: a `[seqs, len]` `.npy` (or a `.json` list of lists all
//!   of one length) whose rows are exactly `seq_len` long is taken as ready-made windows
//!   (the first `num_seqs` rows, nothing inserted) when BOS handling would not change them:
//!   no BOS is in use, or each of those rows already starts with the BOS id. Otherwise rows
//!   are documents and are packed like text. A flat `.json` list is one document, like a
//!   `[n]` `.npy`.
//! - Special ids: `SpecialTokens` (from config.json) wins. An id it lacks is taken from the
//!   tokenizer's added tokens marked special, by name: BOS `<s>`, `<|begin_of_text|>`,
//!   `<bos>`, `<|startoftext|>`; EOS `</s>`, `<|endoftext|>`, `<|end_of_text|>`, `<eos>`.
//!   The description says where each id came from.
//! - Reading stops once the windows are full: a long `.jsonl` is read and tokenized only as
//!   far as needed (a bad line past that point is not seen), and a long document (a `.txt`
//!   file, a long line) is read and tokenized in pieces of 1 MiB, only as far as needed, with
//!   the same ids as tokenizing it whole ([`pieces`]). Documents that tokenize to nothing
//!   are skipped (no doubled EOS).

pub mod generator;
pub mod induction;
mod npy;
mod pieces;
mod read;
pub mod windowing;
mod words;

use asa_core::parse_error::ParseError;
use std::fmt;
use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use asa_core::error::{Error, InputKind, Result};
use read::Format;
pub use windowing::WindowMode;
use windowing::{DocumentWindows, MAX_SHORT_IN_A_ROW};

/// How each window starts (`--bos`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BosMode {
    /// BOS when the checkpoint names one (config.json, else tokenizer.json).
    Auto,
    /// BOS required: an error when the checkpoint names none.
    Always,
    /// Never a BOS: windows are plain slices of the joined stream.
    Never,
}

impl BosMode {
    /// The names `--bos` takes.
    pub const NAMES: [&'static str; 3] = ["auto", "always", "never"];
}

impl std::str::FromStr for BosMode {
    type Err = ParseError;

    /// The BOS mode named as in the CLI and the tables ([`BosMode::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        serde_json::from_value(serde_json::Value::String(s.to_string()))
            .map_err(|_| ParseError::unknown("BOS mode", s, &BosMode::NAMES))
    }
}

impl fmt::Display for BosMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BosMode::Auto => "auto",
            BosMode::Always => "always",
            BosMode::Never => "never",
        })
    }
}

/// Window shape and BOS handling.
#[derive(Debug, Clone)]
pub struct CorpusOptions {
    /// Tokens per window, BOS included (`--seq-len`, at least 2).
    pub seq_len: usize,
    /// Number of windows (`--num-seqs`, at least 1).
    pub num_seqs: usize,
    /// `--bos`.
    pub bos: BosMode,
    /// `--windows`: packed (default) or one per document.
    pub windows: WindowMode,
}

/// Special ids from the checkpoint (config.json `bos_token_id` / `eos_token_id`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

/// Where the text comes from.
#[derive(Debug, Clone)]
pub enum CorpusSource {
    /// `--corpus FILE`.
    File(PathBuf),
    /// The built-in generated prose ([`generator::documents`]).
    BuiltIn { seed: u64 },
    /// The built-in induction probe ([`induction`]): BOS, L random ids, the same L again.
    InductionProbe { seed: u64 },
}

/// Token windows ready for the model, plus provenance for run.json.
#[derive(Debug, Clone)]
pub struct Windows {
    /// `[num_seqs][seq_len]` token ids, each `< vocab_size`.
    pub ids: Vec<Vec<u32>>,
    /// One line, e.g. "val.jsonl: 12 documents, 40312 tokens read, 10 windows of 1024, bos
    /// always (id 1 `<s>`, config), eos between documents (id 2 `</s>`, config)".
    pub description: String,
    /// The BOS id each window starts with, if one was used.
    pub bos: Option<u32>,
    /// The EOS id put between documents, if any.
    pub eos: Option<u32>,
    /// Documents read (rows, for a token-id table used as windows).
    pub documents: usize,
    /// Token ids read (the joined stream: EOS separators included, BOS excluded).
    pub tokens: usize,
}

/// Where text gets its tokenizer: a `tokenizer.json` (read only when needed), or one
/// already built (e.g. from GGUF metadata) with the file it came from, for error messages.
#[derive(Clone, Copy)]
pub enum TokenizerRef<'a> {
    /// A tokenizer.json path; may not exist (then a text corpus is an error naming it).
    Path(&'a Path),
    /// A built tokenizer and its origin.
    Built(&'a Tokenizer, &'a Path),
}

/// [`load_windows`] with a tokenizer that may already be built (GGUF, `--tokenizer`).
pub fn load_windows_with(
    source: &CorpusSource,
    tokenizer: Option<TokenizerRef<'_>>,
    special: SpecialTokens,
    vocab_size: usize,
    opts: &CorpusOptions,
) -> Result<Windows> {
    load(source, tokenizer, special, vocab_size, opts)
}

/// Loads, tokenizes (when text) and packs.
///
/// `tokenizer`: path of the checkpoint's tokenizer.json. Pass it whenever the checkpoint
/// could have one (even if the file is absent): a text corpus then fails with an error
/// naming the missing file; with `None` the error can only say the checkpoint has none.
pub fn load_windows(
    source: &CorpusSource,
    tokenizer: Option<&Path>,
    special: SpecialTokens,
    vocab_size: usize,
    opts: &CorpusOptions,
) -> Result<Windows> {
    load(
        source,
        tokenizer.map(TokenizerRef::Path),
        special,
        vocab_size,
        opts,
    )
}

fn load(
    source: &CorpusSource,
    tokenizer: Option<TokenizerRef<'_>>,
    special: SpecialTokens,
    vocab_size: usize,
    opts: &CorpusOptions,
) -> Result<Windows> {
    if opts.seq_len < 2 {
        return Err(Error::option(
            "--seq-len",
            format!("must be at least 2, got {}", opts.seq_len),
        ));
    }
    if opts.num_seqs == 0 {
        return Err(Error::option("--num-seqs", "must be at least 1"));
    }
    if opts.num_seqs.checked_mul(opts.seq_len).is_none() {
        return Err(Error::usage("--num-seqs x --seq-len is too large"));
    }
    match source {
        CorpusSource::File(path) => match Format::of(path)? {
            Format::Txt => {
                let label = path.display().to_string();
                let tok = Tok::load(tokenizer, &label)?;
                pack_text(
                    path,
                    &label,
                    std::iter::once(Ok(Text::File(path.clone()))),
                    &tok,
                    special,
                    vocab_size,
                    opts,
                )
            }
            Format::Jsonl => {
                let label = path.display().to_string();
                let tok = Tok::load(tokenizer, &label)?;
                let docs = read::JsonlDocs::open(path)?.map(|doc| doc.map(Text::Owned));
                pack_text(path, &label, docs, &tok, special, vocab_size, opts)
            }
            Format::Npy => {
                let docs = read::read_npy(path, vocab_size)?;
                pack_ids(path, docs, tokenizer, special, vocab_size, opts)
            }
            Format::Json => {
                let docs = read::read_json(path, vocab_size)?;
                pack_ids(path, docs, tokenizer, special, vocab_size, opts)
            }
        },
        CorpusSource::BuiltIn { seed } => {
            let label = format!("built-in text (seed {seed})");
            let tok = Tok::load(tokenizer, &label)?;
            let docs = generator::documents(*seed).map(|doc| Ok(Text::Owned(doc)));
            pack_text(
                Path::new(&label),
                &label,
                docs,
                &tok,
                special,
                vocab_size,
                opts,
            )
        }
        CorpusSource::InductionProbe { seed } => {
            induction::windows(*seed, tokenizer, special, vocab_size, opts)
        }
    }
}

/// The checkpoint's tokenizer and its path.
struct Tok {
    path: PathBuf,
    tokenizer: Tokenizer,
}

impl Tok {
    /// The tokenizer needed to tokenize the text corpus `label`.
    fn load(source: Option<TokenizerRef<'_>>, label: &str) -> Result<Tok> {
        let path = match source {
            Some(TokenizerRef::Built(tokenizer, origin)) => {
                return Ok(Tok {
                    path: origin.to_path_buf(),
                    tokenizer: tokenizer.clone(),
                })
            }
            Some(TokenizerRef::Path(p)) => Some(p),
            None => None,
        };
        let Some(path) = path else {
            return Err(Error::usage(format!(
                "{label} is text and the checkpoint has no tokenizer.json to tokenize it; \
                 give token ids instead (--corpus FILE.npy or FILE.json)"
            )));
        };
        if !path.is_file() {
            return Err(Error::corpus(
                path,
                format!(
                    "missing: the text corpus {label} needs the checkpoint's tokenizer.json; \
                     give token ids instead (--corpus FILE.npy or FILE.json)"
                ),
            ));
        }
        Tok::open(path)
    }

    fn open(path: &Path) -> Result<Tok> {
        let tokenizer = asa_models::tokenizer_file::read_tokenizer(path)?;
        Ok(Tok {
            path: path.to_path_buf(),
            tokenizer,
        })
    }

    /// The first ids of `text` (at least `want`, or all of them), without special tokens,
    /// each checked `< vocab_size`: the text is read and tokenized in pieces
    /// ([`pieces`]), so a long one takes bounded memory.
    fn encode_prefix(
        &self,
        text: &Text,
        label: &str,
        vocab_size: usize,
        want: usize,
    ) -> Result<Vec<u32>> {
        let encode = |s: &str| -> Result<pieces::Encoded> {
            let enc = self.tokenizer.encode(s, false).map_err(|e| {
                Error::invalid(&self.path, format!("tokenizing {label} failed"), e)
                    .about(InputKind::Checkpoint)
            })?;
            Ok(pieces::Encoded {
                ids: enc.get_ids().to_vec(),
                offsets: enc.get_offsets().to_vec(),
            })
        };
        let path = text.path(label);
        let mut source = text.open()?;
        let ids = match pieces::encode_prefix(
            &mut *source,
            path,
            want,
            pieces::Pieces::default(),
            &encode,
        )? {
            Ok(ids) => ids,
            Err(pieces::NotLocal { at }) => self.encode_whole(text, label, at)?,
        };
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(Error::corpus(
                &self.path,
                format!(
                    "tokenizing {label} gave token id {bad}, out of range for the model's \
                     vocab_size {vocab_size}"
                ),
            ));
        }
        Ok(ids)
    }

    /// `text` tokenized whole, for a tokenizer whose output around byte `at` depended on
    /// more context than a piece holds; refused when that would pass the memory available.
    fn encode_whole(&self, text: &Text, label: &str, at: usize) -> Result<Vec<u32>> {
        // Measured: tokenizers holds about 160 bytes per byte of text while encoding.
        const BYTES_PER_BYTE: u64 = 200;
        let path = text.path(label);
        let len = match text {
            Text::Owned(s) => s.len() as u64,
            Text::File(p) => std::fs::metadata(p).map_err(|e| Error::io(p, e))?.len(),
        };
        let need = len.saturating_mul(BYTES_PER_BYTE);
        if let Some(available) = asa_core::host_memory::available_memory() {
            if need > available {
                return Err(Error::corpus(
                    path,
                    format!(
                        "the tokenizer's output near byte {at} depends on more context than \
                         {} KiB, so this text must be tokenized whole, which needs about {:.1} \
                         GiB; {:.1} GiB are available: split it into documents (.jsonl) or \
                         give token ids (.npy)",
                        pieces::OVERLAP >> 10,
                        need as f64 / GIB,
                        available as f64 / GIB
                    ),
                ));
            }
        }
        let whole;
        let s = match text {
            Text::Owned(s) => s.as_str(),
            Text::File(p) => {
                whole = read::read_txt(p)?;
                whole.as_str()
            }
        };
        let enc = self.tokenizer.encode_fast(s, false).map_err(|e| {
            Error::invalid(&self.path, format!("tokenizing {label} failed"), e)
                .about(InputKind::Checkpoint)
        })?;
        Ok(enc.get_ids().to_vec())
    }

    /// A special token by the first of `names` the tokenizer has as an added special token.
    fn special_by_name(&self, names: &[&str]) -> Option<(u32, String)> {
        let added = self.tokenizer.get_added_tokens_decoder();
        names.iter().find_map(|name| {
            added
                .iter()
                .filter(|(_, t)| t.special && t.content == *name)
                .map(|(&id, t)| (id, t.content.clone()))
                .min_by_key(|(id, _)| *id)
        })
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// A text document: held in memory (a `.jsonl` line, the built-in text), or a file read as
/// it is tokenized.
enum Text {
    Owned(String),
    File(PathBuf),
}

impl Text {
    /// The file, or `label` for text in memory, for error messages.
    fn path<'a>(&'a self, label: &'a str) -> &'a Path {
        match self {
            Text::Owned(_) => Path::new(label),
            Text::File(p) => p,
        }
    }

    /// The text's bytes.
    fn open(&self) -> Result<Box<dyn std::io::Read + '_>> {
        Ok(match self {
            Text::Owned(s) => Box::new(s.as_bytes()),
            Text::File(p) => Box::new(asa_core::input::open(p)?),
        })
    }
}

const BOS_NAMES: &[&str] = &["<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"];
const EOS_NAMES: &[&str] = &["</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"];

/// A resolved special id and where it came from, for the description.
#[derive(Debug, Clone)]
struct Special {
    id: u32,
    text: String,
}

/// The BOS (per `--bos`) and EOS ids to pack with.
fn resolve_special(
    special: SpecialTokens,
    tok: Option<&Tok>,
    vocab_size: usize,
    mode: BosMode,
) -> Result<(Option<Special>, Option<Special>)> {
    let resolve = |id: Option<u32>, names: &[&str], what: &str| -> Result<Option<Special>> {
        let name = |id: u32| {
            tok.and_then(|t| t.tokenizer.id_to_token(id))
                .map(|s| format!(" `{s}`"))
                .unwrap_or_default()
        };
        let found = match (id, tok) {
            (Some(id), _) => Some(Special {
                id,
                text: format!("id {id}{}, config", name(id)),
            }),
            (None, Some(t)) => t.special_by_name(names).map(|(id, s)| Special {
                id,
                text: format!("id {id} `{s}`, tokenizer.json"),
            }),
            (None, None) => None,
        };
        if let Some(s) = &found {
            if s.id as usize >= vocab_size {
                return Err(Error::usage(format!(
                    "the checkpoint's {what} id {} is out of range for its vocab_size {vocab_size}",
                    s.id
                )));
            }
        }
        Ok(found)
    };
    let eos = resolve(special.eos, EOS_NAMES, "EOS")?;
    let bos = match mode {
        BosMode::Never => None,
        BosMode::Auto => resolve(special.bos, BOS_NAMES, "BOS")?,
        BosMode::Always => match resolve(special.bos, BOS_NAMES, "BOS")? {
            Some(b) => Some(b),
            None => {
                return Err(Error::option(
                    "--bos",
                    "always: the checkpoint names no BOS token (no bos_token_id in \
                     config.json, no <s>-style special token in tokenizer.json)",
                ))
            }
        },
    };
    Ok((bos, eos))
}

/// The joined token stream being built.
struct Stream {
    ids: Vec<u32>,
    documents: usize,
    eos: Option<u32>,
}

impl Stream {
    fn new(eos: Option<u32>) -> Stream {
        Stream {
            ids: Vec::new(),
            documents: 0,
            eos,
        }
    }

    /// Appends a document (EOS first, when it is not the first); empty ones are skipped.
    fn push(&mut self, doc: &[u32]) {
        if doc.is_empty() {
            return;
        }
        if self.documents > 0 {
            self.ids.extend(self.eos);
        }
        self.ids.extend_from_slice(doc);
        self.documents += 1;
    }
}

/// Stream ids one window takes.
fn per_window(opts: &CorpusOptions, bos: &Option<Special>) -> usize {
    opts.seq_len - usize::from(bos.is_some())
}

fn too_short(path: &Path, opts: &CorpusOptions, tokens: usize) -> Error {
    Error::corpus(
        path,
        format!(
            "corpus shorter than {} sequences of {} tokens (has {tokens} tokens)",
            opts.num_seqs, opts.seq_len
        ),
    )
}

/// Cuts the stream into windows and describes the result.
fn finish(
    path: &Path,
    label: &str,
    stream: Stream,
    bos: Option<Special>,
    eos: Option<Special>,
    opts: &CorpusOptions,
) -> Result<Windows> {
    let per = per_window(opts, &bos);
    if stream.ids.len() < opts.num_seqs * per {
        return Err(too_short(path, opts, stream.ids.len()));
    }
    let ids = stream
        .ids
        .chunks_exact(per)
        .take(opts.num_seqs)
        .map(|chunk| {
            bos.iter()
                .map(|b| b.id)
                .chain(chunk.iter().copied())
                .collect()
        })
        .collect();
    let description = describe(
        label,
        stream.documents,
        stream.ids.len(),
        opts,
        &bos,
        &eos,
        "",
    );
    Ok(Windows {
        ids,
        description,
        bos: bos.map(|b| b.id),
        eos: eos.map(|e| e.id),
        documents: stream.documents,
        tokens: stream.ids.len(),
    })
}

fn describe(
    label: &str,
    documents: usize,
    tokens: usize,
    opts: &CorpusOptions,
    bos: &Option<Special>,
    eos: &Option<Special>,
    note: &str,
) -> String {
    let bos = match bos {
        Some(b) => format!("bos {} ({})", opts.bos, b.text),
        None => format!("bos {} (none)", opts.bos),
    };
    let eos = match eos {
        Some(e) => format!("eos between documents ({})", e.text),
        None => "no eos".to_string(),
    };
    format!(
        "{label}: {documents} documents, {tokens} tokens read, {} windows of {}{note}, {bos}, {eos}",
        opts.num_seqs, opts.seq_len
    )
}

/// Packs text documents, tokenizing them one by one until the windows are full.
fn pack_text(
    path: &Path,
    label: &str,
    docs: impl Iterator<Item = Result<Text>>,
    tok: &Tok,
    special: SpecialTokens,
    vocab_size: usize,
    opts: &CorpusOptions,
) -> Result<Windows> {
    let (bos, eos) = resolve_special(special, Some(tok), vocab_size, opts.bos)?;
    if opts.windows == WindowMode::Documents {
        let per = per_window(opts, &bos);
        let mut found = DocumentWindows::new(per);
        for doc in docs {
            let ids = tok.encode_prefix(&doc?, label, vocab_size, per)?;
            found.push(&ids, bos.as_ref().map(|b| b.id));
            if found.windows.len() == opts.num_seqs || found.short_in_a_row > MAX_SHORT_IN_A_ROW {
                break;
            }
        }
        return document_windows(path, label, found, bos, opts);
    }
    let needed = opts.num_seqs * per_window(opts, &bos);
    let mut stream = Stream::new(eos.as_ref().map(|e| e.id));
    // Bounds an endless source (the generator) whose documents tokenize to nothing.
    let mut empty_in_a_row = 0usize;
    for doc in docs {
        // The EOS before this document counts towards what is still wanted.
        let want = needed.saturating_sub(stream.ids.len() + usize::from(stream.documents > 0));
        let ids = tok.encode_prefix(&doc?, label, vocab_size, want.max(1))?;
        empty_in_a_row = if ids.is_empty() {
            empty_in_a_row + 1
        } else {
            0
        };
        if empty_in_a_row > 1000 {
            break;
        }
        stream.push(&ids);
        if stream.ids.len() >= needed {
            break;
        }
    }
    finish(path, label, stream, bos, eos, opts)
}

/// Packs token-id documents, or uses a table's rows as windows directly (see the module doc).
fn pack_ids(
    path: &Path,
    docs: read::IdDocs,
    tokenizer: Option<TokenizerRef<'_>>,
    special: SpecialTokens,
    vocab_size: usize,
    opts: &CorpusOptions,
) -> Result<Windows> {
    let label = path.display().to_string();
    // The tokenizer is only consulted for special ids config.json lacks, and only if present.
    let missing_special = special.bos.is_none() || special.eos.is_none();
    let tok = match tokenizer {
        Some(TokenizerRef::Path(t)) if missing_special && t.is_file() => Some(Tok::open(t)?),
        Some(built @ TokenizerRef::Built(..)) if missing_special => {
            Some(Tok::load(Some(built), &label)?)
        }
        _ => None,
    };
    let (bos, eos) = resolve_special(special, tok.as_ref(), vocab_size, opts.bos)?;
    let rows_are_windows = docs.table
        && docs.docs.first().is_some_and(|r| r.len() == opts.seq_len)
        && match &bos {
            None => true,
            Some(b) => docs
                .docs
                .iter()
                .take(opts.num_seqs)
                .all(|r| r.first() == Some(&b.id)),
        };
    if rows_are_windows {
        let tokens = docs.docs.len() * opts.seq_len;
        if docs.docs.len() < opts.num_seqs {
            return Err(too_short(path, opts, tokens));
        }
        let ids: Vec<Vec<u32>> = docs.docs.into_iter().take(opts.num_seqs).collect();
        let documents = ids.len();
        let description = describe(
            &label,
            documents,
            tokens,
            opts,
            &bos,
            &None,
            " (rows used as windows)",
        );
        return Ok(Windows {
            ids,
            description,
            bos: bos.map(|b| b.id),
            eos: None,
            documents,
            tokens,
        });
    }
    if opts.windows == WindowMode::Documents {
        let mut found = DocumentWindows::new(per_window(opts, &bos));
        for doc in &docs.docs {
            found.push(doc, bos.as_ref().map(|b| b.id));
            if found.windows.len() == opts.num_seqs {
                break;
            }
        }
        return document_windows(path, &label, found, bos, opts);
    }
    let mut stream = Stream::new(eos.as_ref().map(|e| e.id));
    for doc in &docs.docs {
        stream.push(doc);
    }
    finish(path, &label, stream, bos, eos, opts)
}

/// The windows `--windows documents` found, or an error saying how few documents were
/// long enough.
fn document_windows(
    path: &Path,
    label: &str,
    found: DocumentWindows,
    bos: Option<Special>,
    opts: &CorpusOptions,
) -> Result<Windows> {
    if found.windows.len() < opts.num_seqs {
        return Err(Error::corpus(
            path,
            format!(
                "--windows documents: {} of the {} documents read are at least {} tokens long; {} are needed (fewer --num-seqs, a shorter --seq-len, or --windows packed)",
                found.windows.len(),
                found.documents,
                opts.seq_len,
                opts.num_seqs
            ),
        ));
    }
    let tokens = found.windows.iter().map(Vec::len).sum::<usize>()
        - usize::from(bos.is_some()) * found.windows.len();
    let note = format!(
        " (one per document, its first tokens; {} shorter documents skipped)",
        found.skipped
    );
    let description = describe(label, found.documents, tokens, opts, &bos, &None, &note);
    Ok(Windows {
        ids: found.windows,
        description,
        bos: bos.map(|b| b.id),
        eos: None,
        documents: found.documents,
        tokens,
    })
}
