//! The corpus module against the packing reference written by `tools/make_fixtures.py`
//! (Python `tokenizers`), token-id inputs, the built-in generator and every bad-input error.

use crate::common;

use std::path::{Path, PathBuf};

use asa_analysis::corpus::{
    generator, load_windows, BosMode, CorpusOptions, CorpusSource, SpecialTokens, WindowMode,
    Windows,
};
use asa_core::Result;
use serde_json::Value;

/// The fixture tokenizer's vocabulary (tests/fixtures/models/llama_gqa/config.json).
const VOCAB: usize = 64;
/// `<s>` and `</s>` in the fixture tokenizer (and config.json).
const BOS: u32 = 1;
const EOS: u32 = 2;
const CKPT_SPECIAL: SpecialTokens = SpecialTokens {
    bos: Some(BOS),
    eos: Some(EOS),
};
const NO_SPECIAL: SpecialTokens = SpecialTokens {
    bos: None,
    eos: None,
};

fn corpus(name: &str) -> PathBuf {
    common::fixtures().join("corpus").join(name)
}

fn tokenizer() -> PathBuf {
    common::model_dir("llama_gqa").join("tokenizer.json")
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(corpus(name)).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn opts(seq_len: usize, num_seqs: usize, bos: BosMode) -> CorpusOptions {
    CorpusOptions {
        seq_len,
        num_seqs,
        bos,
        windows: WindowMode::Packed,
    }
}

fn load(
    path: &Path,
    special: SpecialTokens,
    seq_len: usize,
    num_seqs: usize,
    bos: BosMode,
) -> Result<Windows> {
    load_windows(
        &CorpusSource::File(path.to_path_buf()),
        Some(&tokenizer()),
        special,
        VOCAB,
        &opts(seq_len, num_seqs, bos),
    )
}

/// The error of a failing load, checked to be one line naming `names`.
fn error_of(result: Result<Windows>, names: &str) -> String {
    let message = match result {
        Ok(w) => panic!("expected an error, got windows: {}", w.description),
        Err(e) => e.to_string(),
    };
    assert_eq!(message.lines().count(), 1, "one line: {message}");
    assert!(message.contains(names), "{message:?} should name {names}");
    message
}

/// A `.npy` (format 1.0, C order) written by hand: `descr` like `<i4`, `data` little-endian.
fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
    let shape = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

fn i32_bytes(xs: &[i32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64_bytes(xs: &[i64]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn jsonl_packing_matches_reference_bos_always_and_never() {
    let packed = json("tiny.packed.json");
    for mode in [BosMode::Always, BosMode::Never] {
        let reference = &packed[mode.to_string()];
        let seq_len = reference["seq_len"].as_u64().unwrap() as usize;
        let num_seqs = reference["num_seqs"].as_u64().unwrap() as usize;
        let expected: Vec<Vec<u32>> = reference["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(ids)
            .collect();
        let w = load(&corpus("tiny.jsonl"), CKPT_SPECIAL, seq_len, num_seqs, mode).unwrap();
        assert_eq!(w.ids, expected, "bos {mode}");
        assert!(w
            .description
            .starts_with(&format!("{}: ", corpus("tiny.jsonl").display())));
        assert!(
            w.description.contains(&format!("bos {mode}")),
            "{}",
            w.description
        );
        assert_eq!(w.eos, Some(EOS));
        assert_eq!(w.bos, (mode == BosMode::Always).then_some(BOS));
    }
}

#[test]
fn auto_uses_bos_exactly_when_the_checkpoint_has_one() {
    let packed = json("tiny.packed.json");
    let always: Vec<Vec<u32>> = packed["always"]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let w = load(&corpus("tiny.jsonl"), CKPT_SPECIAL, 16, 3, BosMode::Auto).unwrap();
    assert_eq!(w.ids, always);

    // Without a BOS anywhere (no config id, no tokenizer): auto packs like never.
    let stream: Vec<i32> = (3..60).collect();
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("stream.npy");
    write_npy(&npy, "<i4", &[stream.len()], &i32_bytes(&stream));
    let w = load_windows(
        &CorpusSource::File(npy),
        None,
        NO_SPECIAL,
        VOCAB,
        &opts(5, 2, BosMode::Auto),
    )
    .unwrap();
    assert_eq!(w.ids, vec![vec![3, 4, 5, 6, 7], vec![8, 9, 10, 11, 12]]);
    assert_eq!((w.bos, w.eos), (None, None));
}

#[test]
fn jsonl_stream_is_documents_joined_with_eos() {
    let encoded = json("tiny.encoded.json");
    let stream = ids(&encoded["jsonl_stream"]);
    // One window holding the whole stream, no BOS.
    let w = load(
        &corpus("tiny.jsonl"),
        CKPT_SPECIAL,
        stream.len(),
        1,
        BosMode::Never,
    )
    .unwrap();
    assert_eq!(w.ids, vec![stream.clone()]);
    assert_eq!((w.documents, w.tokens), (8, stream.len()));
    // The same from the per-document encodings.
    let mut joined = Vec::new();
    for (i, doc) in encoded["jsonl_docs"].as_array().unwrap().iter().enumerate() {
        if i > 0 {
            joined.push(EOS);
        }
        joined.extend(ids(doc));
    }
    assert_eq!(joined, stream);
}

#[test]
fn txt_is_one_document_tokenized_like_python() {
    let expected = ids(&json("tiny.encoded.json")["txt_whole"]);
    let w = load(
        &corpus("tiny.txt"),
        CKPT_SPECIAL,
        expected.len(),
        1,
        BosMode::Never,
    )
    .unwrap();
    assert_eq!(w.ids, vec![expected.clone()]);
    assert_eq!(w.documents, 1);
    // With a BOS: [BOS] + the first seq_len - 1 ids; no EOS anywhere (a single document).
    let w = load(&corpus("tiny.txt"), CKPT_SPECIAL, 40, 2, BosMode::Always).unwrap();
    assert_eq!(w.ids[0][0], BOS);
    assert_eq!(w.ids[0][1..], expected[..39]);
    assert_eq!(w.ids[1][1..], expected[39..78]);
}

#[test]
fn special_ids_fall_back_to_the_tokenizer() {
    // config.json without bos/eos ids: `<s>` and `</s>` are special added tokens.
    let w = load(&corpus("tiny.jsonl"), NO_SPECIAL, 16, 3, BosMode::Auto).unwrap();
    let packed = json("tiny.packed.json");
    let always: Vec<Vec<u32>> = packed["always"]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    assert_eq!(w.ids, always);
    assert_eq!((w.bos, w.eos), (Some(BOS), Some(EOS)));
    assert!(
        w.description.contains("tokenizer.json"),
        "{}",
        w.description
    );
}

#[test]
fn json_ids_are_documents_or_ready_windows() {
    let path = corpus("tiny_ids.json");
    let docs: Vec<Vec<u32>> = json("tiny_ids.json")
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let mut stream = docs[0].clone();
    for d in &docs[1..] {
        stream.push(EOS);
        stream.extend(d);
    }
    // seq_len 10 != 12: rows are documents joined with EOS.
    let w = load(&path, CKPT_SPECIAL, 10, 3, BosMode::Never).unwrap();
    assert_eq!(
        w.ids,
        stream
            .chunks(10)
            .take(3)
            .map(<[u32]>::to_vec)
            .collect::<Vec<_>>()
    );
    let w = load(&path, CKPT_SPECIAL, 10, 3, BosMode::Always).unwrap();
    for (k, window) in w.ids.iter().enumerate() {
        assert_eq!(window[0], BOS);
        assert_eq!(window[1..], stream[9 * k..9 * (k + 1)]);
    }
    // seq_len 12 == row length and no BOS: the rows are the windows.
    let w = load(&path, CKPT_SPECIAL, 12, 2, BosMode::Never).unwrap();
    assert_eq!(w.ids, docs[..2].to_vec());
    assert!(
        w.description.contains("rows used as windows"),
        "{}",
        w.description
    );
    // With a BOS the rows (which do not start with it) are packed as documents.
    let w = load(&path, CKPT_SPECIAL, 12, 3, BosMode::Always).unwrap();
    assert_eq!(w.ids[0][0], BOS);
    assert_eq!(w.ids[0][1..], stream[..11]);
}

#[test]
fn npy_int32_stream_and_int64_table() {
    let dir = tempfile::tempdir().unwrap();
    // Shape [n], int32: one document.
    let stream: Vec<i32> = (0..40).map(|i| (i * 7 + 3) % 61 + 3).collect();
    let flat = dir.path().join("flat.npy");
    write_npy(&flat, "<i4", &[40], &i32_bytes(&stream));
    let w = load(&flat, CKPT_SPECIAL, 8, 4, BosMode::Never).unwrap();
    let expected: Vec<Vec<u32>> = stream
        .chunks(8)
        .take(4)
        .map(|c| c.iter().map(|&x| x as u32).collect())
        .collect();
    assert_eq!(w.ids, expected);
    let w = load(&flat, CKPT_SPECIAL, 8, 4, BosMode::Always).unwrap();
    for (k, window) in w.ids.iter().enumerate() {
        let chunk: Vec<u32> = stream[7 * k..7 * (k + 1)]
            .iter()
            .map(|&x| x as u32)
            .collect();
        assert_eq!(window[0], BOS);
        assert_eq!(window[1..], chunk[..]);
    }

    // Shape [3, 6], int64, rows starting with BOS: with seq_len 6 the rows are the windows,
    // whatever the BOS mode (a BOS would not change them).
    let rows: Vec<i64> = vec![
        1, 10, 11, 12, 13, 14, //
        1, 20, 21, 22, 23, 24, //
        1, 30, 31, 32, 33, 34,
    ];
    let table = dir.path().join("table.npy");
    write_npy(&table, "<i8", &[3, 6], &i64_bytes(&rows));
    let as_rows: Vec<Vec<u32>> = rows
        .chunks(6)
        .map(|c| c.iter().map(|&x| x as u32).collect())
        .collect();
    for mode in [BosMode::Auto, BosMode::Always, BosMode::Never] {
        let w = load(&table, CKPT_SPECIAL, 6, 3, mode).unwrap();
        assert_eq!(w.ids, as_rows, "bos {mode}");
    }
    // seq_len 5: rows are documents, joined with EOS.
    let w = load(&table, CKPT_SPECIAL, 5, 3, BosMode::Never).unwrap();
    assert_eq!(
        w.ids,
        vec![
            vec![1, 10, 11, 12, 13],
            vec![14, EOS, 1, 20, 21],
            vec![22, 23, 24, EOS, 1]
        ]
    );
}

#[test]
fn npy_rows_without_bos_are_packed_when_a_bos_is_wanted() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<i64> = (10..22).collect(); // [2, 6]: 10..16, 16..22
    let table = dir.path().join("table.npy");
    write_npy(&table, "<i8", &[2, 6], &i64_bytes(&rows));
    let w = load(&table, CKPT_SPECIAL, 6, 2, BosMode::Never).unwrap();
    assert_eq!(
        w.ids,
        vec![vec![10, 11, 12, 13, 14, 15], vec![16, 17, 18, 19, 20, 21]]
    );
    // stream: 10..16, EOS, 16..22 (13 ids); windows of BOS + 5.
    let w = load(&table, CKPT_SPECIAL, 6, 2, BosMode::Always).unwrap();
    assert_eq!(
        w.ids,
        vec![
            vec![BOS, 10, 11, 12, 13, 14],
            vec![BOS, 15, EOS, 16, 17, 18]
        ]
    );
}

#[test]
fn built_in_corpus_fills_the_windows_deterministically() {
    let o = opts(128, 12, BosMode::Auto);
    let source = CorpusSource::BuiltIn { seed: 7 };
    let a = load_windows(&source, Some(&tokenizer()), CKPT_SPECIAL, VOCAB, &o).unwrap();
    let b = load_windows(&source, Some(&tokenizer()), CKPT_SPECIAL, VOCAB, &o).unwrap();
    assert_eq!(a.ids, b.ids);
    assert_eq!(a.ids.len(), 12);
    assert!(a.ids.iter().all(|w| w.len() == 128 && w[0] == BOS));
    // The generator's alphabet is covered by the tiny fixture tokenizer: no <unk> (id 0).
    assert!(
        a.ids.iter().flatten().all(|&id| id != 0),
        "unknown characters in generated text"
    );
    // Several documents, joined with EOS.
    assert!(a.documents >= 2, "{}", a.description);
    assert!(a.ids.iter().flatten().any(|&id| id == EOS));
    let other = CorpusSource::BuiltIn { seed: 8 };
    let c = load_windows(&other, Some(&tokenizer()), CKPT_SPECIAL, VOCAB, &o).unwrap();
    assert_ne!(a.ids, c.ids);
    assert!(
        a.description.starts_with("built-in text (seed 7): "),
        "{}",
        a.description
    );
}

#[test]
fn generator_is_deterministic_and_seeded() {
    let a = generator::generate_text(1, 5000);
    assert_eq!(a, generator::generate_text(1, 5000));
    assert_ne!(a, generator::generate_text(2, 5000));
    assert!(a.len() >= 5000 && a.len() < 10_000, "{}", a.len());
    // A longer text starts with the shorter one (documents are drawn in order).
    assert!(generator::generate_text(1, 20_000).starts_with(&a));
    assert!(a
        .chars()
        .all(|c| c.is_ascii_alphabetic() || " .,\n".contains(c)));
    // English-like prose: sentences and paragraphs, a name repeated within a story.
    let first = generator::documents(1).next().unwrap();
    assert!(first.contains("\n\n") && first.ends_with('.'), "{first}");
    // Names are the capitalized words that also occur mid-sentence.
    let words: Vec<&str> = first.split(' ').collect();
    let names: Vec<&str> = words
        .windows(2)
        .filter(|w| !w[0].ends_with('.') && w[1].starts_with(|c: char| c.is_uppercase()))
        .map(|w| w[1].trim_end_matches([',', '.']))
        .collect();
    let most = names
        .iter()
        .map(|n| first.matches(n).count())
        .max()
        .unwrap_or(0);
    assert!(most >= 3, "no name repeated in {first:?}");
}

// ---------------------------------------------------------------- errors

#[test]
fn unsupported_extension_lists_the_formats() {
    let msg = error_of(
        load(
            Path::new("data/corpus.csv"),
            CKPT_SPECIAL,
            16,
            3,
            BosMode::Auto,
        ),
        "corpus.csv",
    );
    for ext in [".txt", ".jsonl", ".npy", ".json"] {
        assert!(msg.contains(ext), "{msg}");
    }
}

#[test]
fn missing_corpus_file_names_it() {
    error_of(
        load(
            Path::new("no/such/val.jsonl"),
            CKPT_SPECIAL,
            16,
            3,
            BosMode::Auto,
        ),
        "no/such/val.jsonl",
    );
}

#[test]
fn jsonl_bad_lines_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, "{\"text\": \"the cat sat.\"}\n\n{\"id\": 3}\n").unwrap();
    let msg = error_of(load(&path, CKPT_SPECIAL, 16, 3, BosMode::Auto), "bad.jsonl");
    assert!(msg.contains("line 3") && msg.contains("\"text\""), "{msg}");
    std::fs::write(&path, "{\"text\": 5}\n").unwrap();
    let msg = error_of(load(&path, CKPT_SPECIAL, 16, 3, BosMode::Auto), "bad.jsonl");
    assert!(
        msg.contains("line 1") && msg.contains("not a string"),
        "{msg}"
    );
    std::fs::write(&path, "{\"text\": \"a\"}\n{\"text\": \n").unwrap();
    let msg = error_of(load(&path, CKPT_SPECIAL, 16, 3, BosMode::Auto), "bad.jsonl");
    assert!(
        msg.contains("line 2") && msg.contains("not valid JSON"),
        "{msg}"
    );
}

#[test]
fn out_of_range_ids_name_file_and_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ids.json");
    std::fs::write(&path, "[[1, 2, 3], [4, 70, 5]]").unwrap();
    let msg = error_of(load(&path, CKPT_SPECIAL, 4, 1, BosMode::Never), "ids.json");
    assert!(msg.contains("token id 70") && msg.contains("64"), "{msg}");
    std::fs::write(&path, "[[1, -3]]").unwrap();
    let msg = error_of(load(&path, CKPT_SPECIAL, 2, 1, BosMode::Never), "ids.json");
    assert!(msg.contains("token id -3"), "{msg}");
    std::fs::write(&path, "[[1, 2.5]]").unwrap();
    let msg = error_of(load(&path, CKPT_SPECIAL, 2, 1, BosMode::Never), "ids.json");
    assert!(msg.contains("2.5"), "{msg}");
    std::fs::write(&path, "{\"ids\": [1, 2]}").unwrap();
    error_of(load(&path, CKPT_SPECIAL, 2, 1, BosMode::Never), "ids.json");
    std::fs::write(&path, "[[1, 2], ").unwrap();
    error_of(load(&path, CKPT_SPECIAL, 2, 1, BosMode::Never), "ids.json");

    let npy = dir.path().join("ids.npy");
    write_npy(&npy, "<i8", &[4], &i64_bytes(&[3, 4, 64, 5]));
    let msg = error_of(load(&npy, CKPT_SPECIAL, 2, 1, BosMode::Never), "ids.npy");
    assert!(msg.contains("token id 64"), "{msg}");
}

#[test]
fn bad_npy_files_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("bad.npy");
    let cases: Vec<(&str, Vec<usize>, Vec<u8>, &str)> = vec![
        ("<f4", vec![2], vec![0; 8], "int32"),
        ("<i4", vec![4], i32_bytes(&[1, 2]), "data bytes"),
        ("<i4", vec![2, 2, 1], i32_bytes(&[1, 2, 3, 4]), "shape"),
    ];
    for (descr, shape, data, expect) in cases {
        write_npy(&npy, descr, &shape, &data);
        let msg = error_of(load(&npy, CKPT_SPECIAL, 2, 1, BosMode::Never), "bad.npy");
        assert!(msg.contains(expect), "{descr} {shape:?}: {msg}");
    }
    std::fs::write(&npy, b"not numpy at all").unwrap();
    error_of(load(&npy, CKPT_SPECIAL, 2, 1, BosMode::Never), "bad.npy");
    // A header that claims far more data than the file holds: an error, not an allocation.
    write_npy(&npy, "<i8", &[1 << 40, 1 << 30], &[]);
    error_of(load(&npy, CKPT_SPECIAL, 2, 1, BosMode::Never), "bad.npy");
}

#[test]
fn text_without_tokenizer_names_the_missing_tokenizer_json() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("ckpt").join("tokenizer.json");
    let r = load_windows(
        &CorpusSource::File(corpus("tiny.txt")),
        Some(&missing),
        CKPT_SPECIAL,
        VOCAB,
        &opts(16, 1, BosMode::Auto),
    );
    let msg = error_of(r, "ckpt/tokenizer.json");
    assert!(msg.contains("tiny.txt"), "{msg}");
    let r = load_windows(
        &CorpusSource::BuiltIn { seed: 0 },
        None,
        CKPT_SPECIAL,
        VOCAB,
        &opts(16, 1, BosMode::Auto),
    );
    error_of(r, "tokenizer.json");
    // Token ids need no tokenizer.
    let r = load_windows(
        &CorpusSource::File(corpus("tiny_ids.json")),
        Some(&missing),
        CKPT_SPECIAL,
        VOCAB,
        &opts(12, 3, BosMode::Never),
    );
    assert!(r.is_ok());
}

#[test]
fn short_corpus_says_how_short() {
    // tiny.jsonl is 380 tokens: 30 windows of 16 need 480.
    let msg = error_of(
        load(&corpus("tiny.jsonl"), CKPT_SPECIAL, 16, 30, BosMode::Never),
        "tiny.jsonl",
    );
    assert!(
        msg.ends_with("corpus shorter than 30 sequences of 16 tokens (has 380 tokens)"),
        "{msg}"
    );
    // Rows used as windows: 3 rows of 12.
    let msg = error_of(
        load(
            &corpus("tiny_ids.json"),
            CKPT_SPECIAL,
            12,
            4,
            BosMode::Never,
        ),
        "tiny_ids.json",
    );
    assert!(
        msg.contains("corpus shorter than 4 sequences of 12 tokens (has 36 tokens)"),
        "{msg}"
    );
}

#[test]
fn bos_always_without_a_bos_is_an_error() {
    let r = load_windows(
        &CorpusSource::File(corpus("tiny_ids.json")),
        None,
        NO_SPECIAL,
        VOCAB,
        &opts(12, 1, BosMode::Always),
    );
    error_of(r, "--bos always");
}

#[test]
fn bad_options_are_usage_errors() {
    for (seq_len, num_seqs, what) in [(1, 3, "--seq-len"), (16, 0, "--num-seqs")] {
        let r = load(
            &corpus("tiny.jsonl"),
            CKPT_SPECIAL,
            seq_len,
            num_seqs,
            BosMode::Auto,
        );
        error_of(r, what);
    }
}

/// `--windows documents` (issue 28): each window is the start of its own document, from the
/// reference tokenization of each line (transformers' tokenizer, `tiny.encoded.json`);
/// documents shorter than a window are skipped, too few long ones is an error.
#[test]
fn document_windows_open_each_document_from_the_reference_ids() {
    let docs: Vec<Vec<u32>> = json("tiny.encoded.json")["jsonl_docs"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect();
    let load_docs = |seq_len: usize, num_seqs: usize, bos: BosMode| {
        let mut o = opts(seq_len, num_seqs, bos);
        o.windows = WindowMode::Documents;
        load_windows(
            &CorpusSource::File(corpus("tiny.jsonl")),
            Some(&tokenizer()),
            CKPT_SPECIAL,
            VOCAB,
            &o,
        )
    };
    // 50 tokens with BOS: 49 of each document; the 36-, 48- and 42-id documents are skipped
    let w = load_docs(50, 3, BosMode::Always).unwrap();
    let expected: Vec<Vec<u32>> = docs
        .iter()
        .filter(|d| d.len() >= 49)
        .take(3)
        .map(|d| {
            std::iter::once(BOS)
                .chain(d[..49].iter().copied())
                .collect()
        })
        .collect();
    assert_eq!(w.ids, expected);
    assert!(
        w.description.contains("one per document")
            && w.description.contains("6 documents")
            && w.description.contains("3 shorter documents skipped"),
        "{}",
        w.description
    );
    // without BOS the windows are the documents' first ids
    let w = load_docs(40, 2, BosMode::Never).unwrap();
    let first_ids: Vec<Vec<u32>> = docs
        .iter()
        .filter(|d| d.len() >= 40)
        .take(2)
        .map(|d| d[..40].to_vec())
        .collect();
    assert_eq!(w.ids, first_ids);
    // the packed default differs: windows run across documents
    let packed = load(&corpus("tiny.jsonl"), CKPT_SPECIAL, 50, 3, BosMode::Always).unwrap();
    assert_ne!(packed.ids, expected);
    error_of(
        load_docs(60, 2, BosMode::Always),
        "1 of the 8 documents read are at least 60 tokens long; 2 are needed",
    );
}
