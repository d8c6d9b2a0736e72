//! GGUF checkpoints (llama.cpp): one `.gguf` file carrying the hyperparameters, the
//! tokenizer and the (usually quantized) tensors. This module reads the file with candle,
//! checks it up front (architecture, tensor types, truncation), maps llama.cpp tensor names
//! to the Hugging Face names the decoder loads, writes the metadata as a config.json mirror
//! (resolved by `crate::config::open_gguf` through the same `RawConfig` path as a
//! config.json), and dequantizes tensors on demand.
//!
//! The metadata side lives in [`super::gguf_config`], RoPE factors in [`super::gguf_rope`].
//!
//! What differs between architectures (the names, what to undo, the config keys) is read
//! from the family's [`GgufRules`], in the family's own file, which the caller looks up by
//! `general.architecture` (this reader knows no family). Conventions undone on load, as transformers' own GGUF loader
//! does:
//! - llama.cpp permutes the rows of the llama q and k projections (weights and biases) so
//!   that its interleaved RoPE matches HF's rotate-half; [`GgufFile::load`] permutes them
//!   back (q with `head_count`, k with `head_count_kv`). Qwen2 files are not permuted.
//! - GPT-2 files store the Conv1D weights transposed (`[out, in]`): transposed back.
//! - GPT-NeoX files store `attn_qkv` as all q rows, then k, then v (llama.cpp's converter
//!   reorders HF's per-head `[q, k, v]` groups, as for Bloom): regrouped per head.
//! - Gemma 2/3 files store every norm's scale as 1 + w (the converter adds Gemma's offset):
//!   1 is subtracted again, as transformers' Gemma2TensorProcessor does.
//! - Tied models have no `output.weight`: no `lm_head.weight` is served and
//!   `tie_word_embeddings` is set.
//! - Llama-3.x files carry their RoPE scaling as a `rope_freqs.weight` tensor (llama.cpp
//!   divides each inverse frequency by its factor). The factors are turned back into the
//!   Llama-3 rule's parameters ([`super::gguf_rope`]), checked to reproduce every factor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};

use super::gguf_config::{metadata_str, raw_config, Meta, TensorFacts};
use super::gguf_pieces::{assemble, load_pieces, rule_for, Pieces};
use super::gguf_rope::Recovered;
use super::gguf_rules::{GgufRules, StoredTensor, Undo};
use super::root_cause;
use asa_core::error::{Error, InputKind, Result};
use asa_core::CheckpointProblem;

/// Tensor types candle dequantizes, for error messages.
const SUPPORTED_TYPES: &str =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K";

/// One tensor of the file, under its Hugging Face name.
#[derive(Debug, Clone)]
struct GgufTensor {
    /// llama.cpp name, e.g. `blk.0.attn_q.weight`.
    gguf_name: String,
    /// Row-major shape (HF orientation: `[out, in]` for projections).
    shape: Vec<usize>,
    dtype: GgmlDType,
    /// What llama.cpp's converter did to the HF tensor, undone on load.
    undo: Undo,
    /// The stored tensors it is made of, where it is not one stored tensor (an expert of a
    /// stacked tensor, a fused tensor stored split).
    pieces: Option<Pieces>,
}

/// An opened `.gguf` file: metadata, the tensor table under HF names, the family reading it
/// (its `model_type` and rules).
pub struct GgufFile {
    path: PathBuf,
    content: Content,
    tensors: BTreeMap<String, GgufTensor>,
    model_type: &'static str,
    rules: &'static GgufRules,
    /// How the RoPE settings were read, e.g. "rope_freqs.weight as llama3 scaling".
    rope_source: String,
}

/// What a GGUF file says of its model beside its tensors: the config.json mirror of its
/// metadata (resolved as a config.json is) and the RoPE factors recovered from
/// `rope_freqs.weight`, which the resolved RoPE must reproduce.
pub(crate) struct GgufSettings {
    pub raw: serde_json::Value,
    pub recovered: Option<Recovered>,
}

/// The family reading a GGUF architecture (`general.architecture`): its `model_type` and
/// its rules, or the refusal of an architecture no family reads.
pub(crate) type FamilyOf<'a> = &'a dyn Fn(&str) -> Result<(&'static str, &'static GgufRules)>;

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens and checks `path`: readable GGUF, an architecture `family_of` reads, supported
    /// tensor types, every tensor inside the file, every tensor name known; with its
    /// settings. Reads no tensor data except the small `rope_freqs` table.
    pub(crate) fn open(path: &Path, family_of: FamilyOf) -> Result<(Self, GgufSettings)> {
        let mut file = asa_core::input::open(path)?;
        let file_size = file.metadata().map_err(|e| Error::io(path, e))?.len();
        // candle's reader divides by the declared alignment
        super::gguf_alignment::check_alignment(path)?;
        let content = Content::read(&mut file).map_err(|e| read_error(path, e))?;
        check_extents(path, &content, file_size)?;
        let arch = metadata_str(&content, "general.architecture")
            .ok_or_else(|| {
                let problem = CheckpointProblem::MissingKey {
                    key: "general.architecture".into(),
                    detail: "not a model".into(),
                };
                Error::checkpoint_problem(path, problem)
            })?
            .to_string();
        let (model_type, rules) = family_of(&arch)?;
        let meta = Meta {
            content: &content,
            path,
            model_type,
            rules,
        };
        meta.check_block_count()?;
        // per-layer arrays (0 on a hybrid's layers without attention): the attention
        // layers' counts
        let heads = meta
            .opt_max_per_layer_key("attention.head_count")?
            .ok_or_else(|| {
                let problem = CheckpointProblem::missing_key(meta.key("attention.head_count"));
                Error::checkpoint_problem(path, problem)
            })?;
        let kv_heads = meta
            .opt_max_per_layer_key("attention.head_count_kv")?
            .unwrap_or(heads);
        let converter = Converter {
            rules,
            heads,
            kv_heads,
            trunk_layers: meta.trunk_layers()?,
        };
        let tensors = tensor_table(&meta, &converter)?;
        let facts = tensor_facts(path, &tensors)?;
        let (raw, recovered) = raw_config(&meta, &mut file, &facts, heads, kv_heads)?;
        let rope_source = recovered
            .as_ref()
            .map_or_else(|| "metadata".into(), Recovered::describe);
        let gguf = GgufFile {
            path: path.to_path_buf(),
            content,
            tensors,
            model_type,
            rules,
            rope_source,
        };
        Ok((gguf, GgufSettings { raw, recovered }))
    }

    /// Typed access to the file's metadata.
    pub(crate) fn meta(&self) -> Meta<'_> {
        Meta {
            content: &self.content,
            path: &self.path,
            model_type: self.model_type,
            rules: self.rules,
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the RoPE settings came from ("metadata" or the rope_freqs recovery).
    pub fn rope_source(&self) -> &str {
        &self.rope_source
    }

    /// The parsed header (metadata keys, tensor table).
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// Whether the HF-named tensor exists.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The HF-oriented shape of `name`.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.tensors.get(name).map(|t| t.shape.clone())
    }

    /// The llama.cpp name behind the HF name, for messages.
    pub fn gguf_name(&self, name: &str) -> Option<&str> {
        self.tensors.get(name).map(|t| t.gguf_name.as_str())
    }

    /// Every tensor as (HF name, shape, llama.cpp type name such as `q4_1`).
    pub fn tensors(&self) -> Vec<(String, Vec<usize>, String)> {
        self.tensors
            .iter()
            .map(|(name, t)| {
                (
                    name.clone(),
                    t.shape.clone(),
                    type_name(t.dtype).to_lowercase(),
                )
            })
            .collect()
    }

    /// Tensor count per stored type (`Q4_1` -> 210), the types the weights are dequantized from.
    pub fn type_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for t in self.tensors.values() {
            *counts.entry(type_name(t.dtype).to_string()).or_default() += 1;
        }
        counts
    }

    /// Reads and dequantizes `name` to f32 on the CPU, in the HF layout (what llama.cpp's
    /// converter changed undone: [`Undo`]).
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let t = self.tensors.get(name).ok_or_else(|| {
            let tensor = name.to_string();
            Error::checkpoint_problem(&self.path, CheckpointProblem::MissingTensor { tensor })
        })?;
        if let Some(pieces) = &t.pieces {
            return load_pieces(&self.path, &self.content, pieces);
        }
        let mut file = asa_core::input::open(&self.path)?;
        let q = self
            .content
            .tensor(&mut file, &t.gguf_name, &Device::Cpu)
            .map_err(|e| {
                let what = format!("cannot read tensor {}", t.gguf_name);
                Error::invalid(&self.path, what, root_cause(e)).about(InputKind::Checkpoint)
            })?;
        let xs = q.dequantize(&Device::Cpu)?;
        let undone = match t.undo {
            Undo::Nothing => Ok(xs),
            Undo::Permutation(heads) => unpermute_rows(&xs, heads),
            Undo::Transpose => xs.t().and_then(|x| x.contiguous()),
            Undo::QkvGrouping(heads) => group_qkv_per_head(&xs, heads),
            Undo::MinusOne => xs.affine(1.0, -1.0),
            Undo::Unsqueeze(dim) => xs.unsqueeze(dim),
            Undo::Flatten => xs.flatten_all(),
            Undo::LogOfNegated => xs.neg().and_then(|a| a.log()).and_then(|a| a.flatten_all()),
        };
        undone.map_err(|e| {
            Error::invalid(&self.path, &t.gguf_name, root_cause(e)).about(InputKind::Checkpoint)
        })
    }
}

impl GgufFile {
    /// Whether rows of `name` can be read alone ([`GgufFile::load_rows`]): a 2-D tensor
    /// stored as it is used (nothing to undo), each row a whole number of quantized blocks.
    pub fn reads_rows(&self, name: &str) -> bool {
        self.tensors.get(name).is_some_and(|t| {
            matches!(t.undo, Undo::Nothing)
                && t.pieces.is_none()
                && t.shape.len() == 2
                && t.shape[1].is_multiple_of(t.dtype.block_size())
        })
    }

    /// Rows `rows` of the matrix `name` dequantized to f32: only those rows' blocks are read
    /// (one positioned read), so an embedding or an LM head never has to be whole in memory.
    /// `None` when the tensor cannot be read by rows ([`GgufFile::reads_rows`]).
    pub fn load_rows(&self, name: &str, rows: std::ops::Range<usize>) -> Result<Option<Tensor>> {
        if !self.reads_rows(name) {
            return Ok(None);
        }
        let t = &self.tensors[name];
        let (count, cols) = (t.shape[0], t.shape[1]);
        if rows.start > rows.end || rows.end > count {
            let detail = format!("rows {rows:?} of its {count} rows do not exist");
            let problem = CheckpointProblem::tensor_data(&t.gguf_name, detail);
            return Err(Error::checkpoint_problem(&self.path, problem));
        }
        let info = &self.content.tensor_infos[&t.gguf_name];
        let row_bytes = (cols / t.dtype.block_size() * t.dtype.type_size()) as u64;
        let start = self.content.tensor_data_offset + info.offset + rows.start as u64 * row_bytes;
        let mut raw = vec![0u8; rows.len() * row_bytes as usize];
        let file = asa_core::input::open(&self.path)?;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut raw, start)
            .map_err(|e| Error::io(&self.path, e))?;
        let dims = vec![rows.len(), cols];
        let q =
            candle_core::quantized::ggml_file::qtensor_from_ggml(t.dtype, &raw, dims, &Device::Cpu)
                .map_err(|e| {
                    Error::invalid(&self.path, &t.gguf_name, root_cause(e))
                        .about(InputKind::Checkpoint)
                })?;
        Ok(Some(q.dequantize(&Device::Cpu)?))
    }
}

/// Whether `path` names a GGUF file by its extension.
pub fn is_gguf_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// The `.gguf` files directly inside `dir`, sorted.
pub fn gguf_files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_file() && is_gguf_path(&path) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// The llama.cpp name of a type (`Q4_K`, not candle's `Q4K`).
pub fn type_name(dtype: GgmlDType) -> &'static str {
    match dtype {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

/// llama.cpp's `ggml_type` ids candle cannot read, by name (ggml.h).
fn unsupported_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        4 => "Q4_2 (removed from ggml)",
        5 => "Q4_3 (removed from ggml)",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

/// What decides each tensor's name and [`Undo`]: the family's rules, and the head counts
/// the permutations were made with.
struct Converter {
    rules: &'static GgufRules,
    heads: usize,
    kv_heads: usize,
    /// Blocks from this one on are multi-token-prediction blocks, not read.
    trunk_layers: usize,
}

impl Converter {
    /// What to undo in the HF-named tensor `hf_name`; `shape` is turned into the HF one
    /// (transposed back, a squeezed dimension put back).
    fn undo(&self, hf_name: &str, shape: &mut Vec<usize>) -> Undo {
        let undo = (self.rules.undo)(&StoredTensor {
            name: hf_name,
            module: hf_name.rsplit('.').nth(1),
            rank: shape.len(),
            heads: self.heads,
            kv_heads: self.kv_heads,
        });
        undo.hf_shape(shape);
        undo
    }
}

/// The file's tensors under their HF names (`rope_freqs.weight` left out: it is metadata;
/// the multi-token-prediction blocks too);
/// an error for a tensor the architecture does not have. Block tensors that the family
/// reads assembled (stacked experts, split fused tensors) become their HF entries through
/// [`assemble`].
fn tensor_table(meta: &Meta, converter: &Converter) -> Result<BTreeMap<String, GgufTensor>> {
    let (path, content) = (meta.path, meta.content);
    let rules = converter.rules;
    let mut tensors = BTreeMap::new();
    // (layer, weight or bias) -> role -> (gguf name, shape), for the assembled roles
    let mut claimed: BTreeMap<(usize, String), BTreeMap<String, (String, Vec<usize>)>> =
        BTreeMap::new();
    for (gguf_name, info) in &content.tensor_infos {
        if gguf_name == "rope_freqs.weight" || block_of(gguf_name) >= Some(converter.trunk_layers) {
            continue;
        }
        if let Some((layer, role, kind)) = block_parts(gguf_name) {
            if rule_for(rules.assembled, role).is_some() {
                let entry = (gguf_name.clone(), info.shape.dims().to_vec());
                claimed
                    .entry((layer, kind.to_string()))
                    .or_default()
                    .insert(role.to_string(), entry);
                continue;
            }
        }
        let Some(hf_name) = hf_name(gguf_name, rules) else {
            let arch = rules.arch;
            let detail = format!("not part of the {arch} architecture this loader maps");
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::tensor_data(gguf_name, detail),
            ));
        };
        let mut shape = info.shape.dims().to_vec();
        let undo = converter.undo(&hf_name, &mut shape);
        tensors.insert(
            hf_name,
            GgufTensor {
                gguf_name: gguf_name.clone(),
                shape,
                dtype: info.ggml_dtype,
                undo,
                pieces: None,
            },
        );
    }
    for ((layer, kind), stored) in &claimed {
        for (hf_name, pieces) in assemble(meta, *layer, kind, rules.assembled, stored)? {
            let first = &pieces.pieces[0].gguf_name;
            let dtype = content.tensor_infos[first].ggml_dtype;
            let gguf_name = match pieces.pieces[0].expert {
                Some(e) => format!("{first} (expert {e})"),
                None => first.clone(),
            };
            tensors.insert(
                hf_name,
                GgufTensor {
                    gguf_name,
                    shape: pieces.shape.clone(),
                    dtype,
                    undo: Undo::Nothing,
                    pieces: Some(pieces),
                },
            );
        }
    }
    Ok(tensors)
}

/// What the config needs from the tensor table; an error without token embeddings.
fn tensor_facts(path: &Path, tensors: &BTreeMap<String, GgufTensor>) -> Result<TensorFacts> {
    let embed = tensors.get("model.embed_tokens.weight").ok_or_else(|| {
        let tensor = "token_embd.weight".to_string();
        Error::checkpoint_problem(path, CheckpointProblem::MissingTensor { tensor })
    })?;
    Ok(TensorFacts {
        vocab: embed.shape[0],
        has_output: tensors.contains_key("lm_head.weight"),
        has_q_bias: tensors.contains_key("model.layers.0.self_attn.q_proj.bias"),
        has_qkv_bias: tensors.contains_key("model.layers.0.self_attn.qkv_proj.bias"),
        names: tensors.keys().cloned().collect(),
    })
}

/// The HF name of a llama.cpp tensor name under the family's `rules` (the names
/// `convert_hf_to_gguf.py` gives): a global tensor's, or `model.layers.N.` and the block
/// tensor's role's (or its whole name's, [`GgufRules::whole_name`]).
fn hf_name(gguf: &str, rules: &GgufRules) -> Option<String> {
    if let Some(name) = rules.global_name(gguf) {
        return Some(name.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    if let Some(hf) = rules.whole_name(tail) {
        return Some(format!("model.layers.{layer}.{hf}"));
    }
    let (layer, role, kind) = block_parts(gguf)?;
    let hf = rules.block_name(role)?;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// The block of a tensor named `blk.N.*`.
fn block_of(gguf: &str) -> Option<usize> {
    gguf.strip_prefix("blk.")?.split_once('.')?.0.parse().ok()
}

/// A block tensor's name `blk.N.<role>.weight` (or `.bias`) as (N, role, kind).
fn block_parts(gguf: &str) -> Option<(usize, &str, &str)> {
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (role, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    Some((layer, role, kind))
}

/// Undoes llama.cpp's `permute`: within each head the rows were reordered from HF's
/// `[2, d/2]` (half, pair) to `[d/2, 2]`; `xs` is `[heads * d, ...]` (a weight or a bias).
fn unpermute_rows(xs: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let dims = xs.dims().to_vec();
    let rows = dims[0];
    if heads == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
        candle_core::bail!("{rows} rows cannot be split into {heads} heads of even size");
    }
    let half = rows / heads / 2;
    let rest: usize = dims[1..].iter().product();
    xs.reshape((heads, half, 2, rest))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims.as_slice())
}

/// Undoes llama.cpp's GPT-NeoX `attn_qkv` regrouping: rows `[q (heads * d); k; v]` (a
/// weight `[3 * heads * d, in]` or a bias) back to HF's `[heads, 3 (q, k, v), d]` order.
fn group_qkv_per_head(xs: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let dims = xs.dims().to_vec();
    let rows = dims[0];
    if heads == 0 || !rows.is_multiple_of(3 * heads) {
        candle_core::bail!("{rows} rows cannot be split into q, k and v of {heads} heads");
    }
    let rest: usize = dims[1..].iter().product();
    xs.reshape((3, heads, rows / 3 / heads, rest))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape(dims.as_slice())
}

/// The alignment of the tensor data, read as candle's reader reads it (default 32).
fn data_alignment(content: &Content) -> u64 {
    use candle_core::quantized::gguf_file::Value;
    match content.metadata.get("general.alignment") {
        Some(Value::U8(v)) => *v as u64,
        Some(Value::U16(v)) => *v as u64,
        Some(Value::U32(v)) => *v as u64,
        Some(Value::I8(v)) if *v >= 0 => *v as u64,
        Some(Value::I16(v)) if *v >= 0 => *v as u64,
        Some(Value::I32(v)) if *v >= 0 => *v as u64,
        _ => 32,
    }
}

/// Checks that the tensor table agrees with the file, before any tensor is read: every
/// tensor's size follows from its shape and type without overflow and lies inside the file
/// (a truncated download fails here, not mid-run); offsets are multiples of the alignment;
/// and the tensors follow one another as GGUF writers lay them out, with no overlap and no
/// gap beyond alignment padding. A tensor type or shape edited in the header (Q4_1 read as
/// Q4_0 would otherwise give garbage weights without a word) changes a size and fails here.
fn check_extents(path: &Path, content: &Content, file_size: u64) -> Result<()> {
    let alignment = data_alignment(content);
    let mut ranges: Vec<(u64, u64, &str)> = Vec::with_capacity(content.tensor_infos.len());
    let mut worst: Option<(&str, u64)> = None;
    for (name, info) in &content.tensor_infos {
        let refuse = |detail: String| {
            Error::checkpoint_problem(path, CheckpointProblem::tensor_data(name, detail))
        };
        let dims = info.shape.dims();
        let elems = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let Some(elems) = elems else {
            return Err(refuse(format!(
                "shape {dims:?} has more elements than can be addressed"
            )));
        };
        let block = info.ggml_dtype.block_size();
        if !elems.is_multiple_of(block) {
            let dtype = type_name(info.ggml_dtype);
            let detail =
                format!("{elems} elements, not a multiple of the {dtype} block size {block}");
            return Err(refuse(detail));
        }
        let bytes = ((elems / block) as u64).saturating_mul(info.ggml_dtype.type_size() as u64);
        if !info.offset.is_multiple_of(alignment) {
            let at = info.offset;
            let detail =
                format!("starts at data offset {at}, not a multiple of the alignment {alignment}");
            return Err(refuse(detail));
        }
        let end = content
            .tensor_data_offset
            .saturating_add(info.offset)
            .saturating_add(bytes);
        if end > file_size && worst.is_none_or(|(_, e)| end > e) {
            worst = Some((name, end));
        }
        ranges.push((info.offset, info.offset.saturating_add(bytes), name));
    }
    if let Some((name, end)) = worst {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::damaged(format!(
                "truncated GGUF file: {file_size} bytes, but tensor {name} ends at byte {end}"
            )),
        ));
    }
    ranges.sort_unstable();
    let describe = |(start, end, name): (u64, u64, &str)| {
        format!("tensor {name} ({}, bytes {start}..{end} of the data)", {
            let info = &content.tensor_infos[name];
            format!("{} {:?}", type_name(info.ggml_dtype), info.shape.dims())
        })
    };
    for pair in ranges.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let problem = if b.0 < a.1 {
            "overlaps"
        } else if b.0 - a.1 >= alignment {
            "leaves a gap larger than alignment padding before"
        } else {
            continue;
        };
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::damaged(format!(
                "{} {problem} {}: the tensor table does not match the data (a type or shape \
                 changed in the header?)",
                describe(a),
                describe(b)
            )),
        ));
    }
    Ok(())
}

/// One line for a header that candle cannot read (candle's own error kept as the cause
/// where its words are shown).
pub(crate) fn read_error(path: &Path, err: candle_core::Error) -> Error {
    let cause = root_cause(err);
    let text = cause.to_string();
    if let Some(id) = text
        .strip_prefix("unknown dtype for tensor ")
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        let name = unsupported_type_name(id).unwrap_or("unknown to ggml");
        return Error::checkpoint_problem(
            path,
            CheckpointProblem::unsupported(
                "tensor type",
                format!("{id} ({name})"),
                format!("{SUPPORTED_TYPES}; re-quantize the model or convert it to safetensors"),
            ),
        );
    }
    if text.starts_with("unknown magic") || text.contains("unsupported magic") {
        return Error::invalid(path, "not a GGUF file", cause).about(InputKind::Checkpoint);
    }
    Error::invalid(path, "invalid or truncated GGUF file", cause).about(InputKind::Checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::hf_name`] under the rules of GGUF architecture `arch`.
    fn hf_name(gguf: &str, arch: &str) -> Option<String> {
        super::hf_name(gguf, crate::config::Family::of_gguf(arch).unwrap().1)
    }

    #[test]
    fn llama_cpp_names_map_to_hf_names() {
        assert_eq!(
            hf_name("token_embd.weight", "llama").unwrap(),
            "model.embed_tokens.weight"
        );
        assert_eq!(
            hf_name("blk.12.attn_q.bias", "llama").unwrap(),
            "model.layers.12.self_attn.q_proj.bias"
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight", "llama").unwrap(),
            "model.layers.0.post_attention_layernorm.weight"
        );
        assert!(hf_name("blk.0.ffn_gate_exps.weight", "llama").is_none());
        assert!(hf_name("blk.x.attn_q.weight", "llama").is_none());
        // per architecture: Phi-3's fused projections, OLMo 2's post-norms, QK-norm
        assert_eq!(
            hf_name("blk.1.ffn_up.weight", "phi3").unwrap(),
            "model.layers.1.mlp.gate_up_proj.weight"
        );
        assert_eq!(
            hf_name("blk.1.ffn_up.weight", "llama").unwrap(),
            "model.layers.1.mlp.up_proj.weight"
        );
        assert_eq!(
            hf_name("blk.0.post_ffw_norm.weight", "olmo2").unwrap(),
            "model.layers.0.post_feedforward_layernorm.weight"
        );
        assert_eq!(
            hf_name("blk.0.attn_k_norm.weight", "qwen3").unwrap(),
            "model.layers.0.self_attn.k_norm.weight"
        );
        assert!(hf_name("blk.0.attn_q_norm.weight", "llama").is_none());
        // GPT-2 and GPT-NeoX: fused q/k/v, learned positions, LayerNorm biases
        assert_eq!(
            hf_name("blk.3.attn_qkv.bias", "gptneox").unwrap(),
            "model.layers.3.self_attn.qkv_proj.bias"
        );
        assert_eq!(
            hf_name("position_embd.weight", "gpt2").unwrap(),
            "model.embed_positions.weight"
        );
        assert_eq!(
            hf_name("output_norm.bias", "gpt2").unwrap(),
            "model.norm.bias"
        );
        assert!(hf_name("output_norm.bias", "llama").is_none());
        // Gemma's sandwich norms
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight", "gemma2").unwrap(),
            "model.layers.0.pre_feedforward_layernorm.weight"
        );
        assert_eq!(
            hf_name("blk.1.post_ffw_norm.weight", "gemma3").unwrap(),
            "model.layers.1.post_feedforward_layernorm.weight"
        );
        assert!(hf_name("blk.0.attn_norm.weight", "olmo2").is_none());
    }

    #[test]
    fn qkv_regrouping_inverts_llama_cpp_gptneox_order() {
        // HF rows per head [q, k, v] (2 heads of d = 1): q0 k0 v0 q1 k1 v1; llama.cpp's
        // converter: reshape(heads, 3, d, in), then all q, all k, all v: q0 q1 k0 k1 v0 v1
        let gguf = Tensor::new(&[0f32, 3., 1., 4., 2., 5.], &Device::Cpu)
            .unwrap()
            .reshape((6, 1))
            .unwrap();
        let hf = group_qkv_per_head(&gguf, 2).unwrap();
        let rows: Vec<f32> = hf.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(rows, [0., 1., 2., 3., 4., 5.]);
        assert!(group_qkv_per_head(&gguf, 4).is_err());
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(heads, 2, d/2, in).swapaxes(1, 2).reshape(w.shape)
        // 2 heads of d = 4, one input column: HF rows 0..8 -> GGUF rows [0, 2, 1, 3, 4, 6, 5, 7]
        let gguf = Tensor::new(&[0f32, 2., 1., 3., 4., 6., 5., 7.], &Device::Cpu)
            .unwrap()
            .reshape((8, 1))
            .unwrap();
        let hf = unpermute_rows(&gguf, 2).unwrap();
        let rows: Vec<f32> = hf.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(rows, [0., 1., 2., 3., 4., 5., 6., 7.]);
        assert!(unpermute_rows(&gguf, 3).is_err());
    }
}
