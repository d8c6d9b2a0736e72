//! Where a checkpoint's tensors come from: safetensors (one file or shards listed in
//! `model.safetensors.index.json`, read tensor by tensor with positioned reads, see
//! [`super::safetensors_file`]) or a GGUF file (dequantized on load, under the Hugging Face
//! names; see [`super::gguf`]). Every lookup checks the shape and names the tensor, the file
//! and both shapes when they disagree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use super::gguf::GgufFile;
use super::safetensors_file::SafetensorsFiles;
use super::weight_map::WeightMap;
use asa_core::error::{Error, InputKind, Result};
use asa_core::CheckpointProblem;
use asa_kernels::cpu::bf16_gemm;
use asa_kernels::cpu::bf16_panels::PackedWeight;
use asa_kernels::cpu::host::first_nonfinite;

/// The tensors of one checkpoint, loaded lazily and cast to the analysis dtype on `get`.
pub struct WeightStore {
    source: Source,
    device: Device,
    dtype: DType,
    /// Check names and shapes only: `get` returns a broadcast zero without reading data.
    shapes_only: bool,
    /// Analyse non-finite weights (`--allow-nonfinite`) instead of refusing them.
    allow_nonfinite: bool,
    /// The first non-finite weight read when they are allowed, in words.
    first_nonfinite: std::sync::OnceLock<String>,
    /// Stored names looked up so far (what the model reads: [`WeightStore::unread`]).
    read: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// Convention name -> stored name, from a weight map ([`WeightStore::renamed`]).
    aliases: BTreeMap<String, String>,
}

/// The file format behind a store; both serve tensors under the HF names.
enum Source {
    Safetensors {
        files: SafetensorsFiles,
        /// What names the checkpoint's weights as a whole: model.safetensors, or the index
        /// of a sharded checkpoint (where a missing tensor is reported).
        listing: PathBuf,
    },
    Gguf(Box<GgufFile>),
    /// Tensors already in memory (the trainer's parameters, served as they are so that
    /// gradients flow through the model built from them).
    Memory(BTreeMap<String, Tensor>),
}

impl WeightStore {
    /// Opens the weights of the checkpoint folder `dir`.
    pub fn open(dir: &Path, device: &Device, dtype: DType) -> Result<Self> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let (paths, listing) = if single.is_file() {
            (vec![single.clone()], single)
        } else if index.is_file() {
            (shard_paths(dir, &index)?, index)
        } else {
            let problem = CheckpointProblem::MissingFile {
                file: "model.safetensors".into(),
                detail: "nor model.safetensors.index.json in the checkpoint folder".into(),
            };
            return Err(Error::checkpoint_problem(dir, problem));
        };
        let files = SafetensorsFiles::open(&paths)?;
        Ok(WeightStore::with_source(
            Source::Safetensors { files, listing },
            device,
            dtype,
        ))
    }

    /// A store of `source` with nothing read yet.
    fn with_source(source: Source, device: &Device, dtype: DType) -> Self {
        WeightStore {
            source,
            device: device.clone(),
            dtype,
            shapes_only: false,
            allow_nonfinite: false,
            first_nonfinite: Default::default(),
            read: Default::default(),
            aliases: BTreeMap::new(),
        }
    }

    /// Serves tensors held in memory (`files` of [`SafetensorsFiles::from_memory`]) through
    /// the safetensors loader, as the checkpoint saved from them would be served; `origin`
    /// names them in messages.
    pub fn from_memory(
        files: SafetensorsFiles,
        origin: &Path,
        device: &Device,
        dtype: DType,
    ) -> Self {
        WeightStore::with_source(
            Source::Safetensors {
                files,
                listing: origin.to_path_buf(),
            },
            device,
            dtype,
        )
    }

    /// Serves the tensors of an opened GGUF file, dequantized to `dtype` on `get`.
    pub fn from_gguf(gguf: GgufFile, device: &Device, dtype: DType) -> Self {
        WeightStore::with_source(Source::Gguf(Box::new(gguf)), device, dtype)
    }

    /// Serves in-memory tensors under their HF names (the trainer's `Var`s): `get` returns
    /// the same tensor when dtype and device already match, so gradients reach the variables.
    pub fn from_tensors(tensors: BTreeMap<String, Tensor>, device: &Device, dtype: DType) -> Self {
        WeightStore::with_source(Source::Memory(tensors), device, dtype)
    }

    /// The GGUF file behind the store, if it is one.
    pub fn gguf(&self) -> Option<&GgufFile> {
        match &self.source {
            Source::Gguf(g) => Some(g),
            Source::Safetensors { .. } | Source::Memory(_) => None,
        }
    }

    /// A store that checks every tensor's name and shape on `get` but reads no data (each
    /// tensor is a zero-stride broadcast scalar): building a model from it validates a
    /// checkpoint in milliseconds, whatever its size.
    pub fn shapes_only(mut self) -> Self {
        self.shapes_only = true;
        self
    }

    /// Whether `get` reads data (false: [`WeightStore::shapes_only`]).
    pub fn reads_data(&self) -> bool {
        !self.shapes_only
    }

    /// Undoes [`WeightStore::shapes_only`].
    pub fn with_data(mut self) -> Self {
        self.shapes_only = false;
        self
    }

    /// The store with the tensors that `map` renames known by their convention names
    /// (the others keep theirs); an error when two tensors would get one name.
    pub fn renamed(mut self, map: &WeightMap) -> Result<Self> {
        let mut aliases: BTreeMap<String, String> = BTreeMap::new();
        let stored: Vec<String> = self.tensors().into_iter().map(|t| t.0).collect();
        for name in &stored {
            let Some(convention) = map.convention_name(name) else {
                continue;
            };
            let clash = aliases.get(&convention).cloned().or_else(|| {
                // a tensor already stored under the convention name and not renamed itself
                (stored.contains(&convention) && map.convention_name(&convention).is_none())
                    .then(|| convention.clone())
            });
            if let Some(other) = clash {
                let detail = format!("weight map: {name} and {other} would both be {convention}");
                return Err(Error::checkpoint_problem(
                    map.path(),
                    CheckpointProblem::damaged(detail),
                ));
            }
            aliases.insert(convention, name.clone());
        }
        self.aliases = aliases;
        Ok(self)
    }

    /// The name `name` (a convention name) is stored under.
    fn stored_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.get(name).map_or(name, String::as_str)
    }

    /// `name` for messages: with the stored name when a weight map renamed it.
    fn shown(&self, name: &str) -> String {
        match self.aliases.get(name) {
            Some(stored) => format!("{name} ({stored} in the checkpoint)"),
            None => name.to_string(),
        }
    }

    /// Whether a tensor called `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        let name = self.stored_name(name);
        match &self.source {
            Source::Safetensors { files, .. } => files.get(name).is_some(),
            Source::Gguf(g) => g.contains(name),
            Source::Memory(map) => map.contains_key(name),
        }
    }

    /// The stored shape of `name`, if it exists.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let name = self.stored_name(name);
        match &self.source {
            Source::Safetensors { files, .. } => files.get(name).map(|t| t.shape.clone()),
            Source::Gguf(g) => g.shape(name),
            Source::Memory(map) => map.get(name).map(|t| t.dims().to_vec()),
        }
    }

    /// Loads `name`, checks it has `expected` shape, casts to the analysis dtype.
    pub fn get(&self, name: &str, expected: &[usize]) -> Result<Tensor> {
        self.get_as(name, expected, self.dtype)
    }

    /// Like [`WeightStore::get`] but casts to `dtype` (e.g. f32 for small parameters).
    pub fn get_as(&self, name: &str, expected: &[usize], dtype: DType) -> Result<Tensor> {
        self.check(name, expected)?;
        if self.shapes_only {
            return Ok(Tensor::zeros((), dtype, &self.device)?.broadcast_as(expected)?);
        }
        let shown = self.shown(name);
        let name = self.stored_name(name);
        let tensor = match &self.source {
            Source::Safetensors { files, .. } => files.load(&shown, &files.tensors()[name])?,
            Source::Gguf(g) => g.load(name)?,
            // the trainer's parameters, served as they are
            Source::Memory(map) => {
                return Ok(map[name].to_dtype(dtype)?.to_device(&self.device)?)
            }
        };
        let cast = tensor.to_dtype(dtype)?;
        self.check_finite(name, &shown, &cast)
            .map_err(|e| overflow_of_cast(e, &shown, &tensor, dtype))?;
        Ok(cast.to_device(&self.device)?)
    }

    /// Stored tensors never looked up since the store was opened (after building a model
    /// from it: the weights the config does not use), sorted.
    pub fn unread(&self) -> Vec<String> {
        let read = match self.read.lock() {
            Ok(read) => read.clone(),
            Err(_) => return Vec::new(),
        };
        let stored: Vec<String> = match &self.source {
            Source::Safetensors { files, .. } => files.tensors().keys().cloned().collect(),
            Source::Gguf(g) => g.tensors().into_iter().map(|t| t.0).collect(),
            Source::Memory(_) => Vec::new(),
        };
        stored.into_iter().filter(|n| !read.contains(n)).collect()
    }

    /// Analyse non-finite weights instead of refusing them (`--allow-nonfinite`: a diverged
    /// checkpoint).
    pub fn set_allow_nonfinite(&mut self, allow: bool) {
        self.allow_nonfinite = allow;
    }

    /// The first weight read that held NaN or an infinity (`--allow-nonfinite` runs), e.g.
    /// "tensor model.layers.0.mlp.up_proj.weight holds NaN at flat index 5".
    pub fn first_nonfinite(&self) -> Option<&str> {
        self.first_nonfinite.get().map(String::as_str)
    }

    /// Refuses a weight holding NaN or an infinity (its metrics would be NaN or worse, and
    /// silently so), unless non-finite weights are allowed: then the first is recorded.
    fn check_finite(&self, name: &str, shown: &str, tensor: &Tensor) -> Result<()> {
        if self.allow_nonfinite && self.first_nonfinite.get().is_some() {
            return Ok(());
        }
        let first_bad = |data: &[f32]| {
            data.iter()
                .position(|v| !v.is_finite())
                .map(|i| (i, data[i]))
        };
        let bad = match first_nonfinite(tensor) {
            Some(bad) => bad,
            None => first_bad(
                &tensor
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            ),
        };
        match bad {
            None => Ok(()),
            Some((index, value)) if self.allow_nonfinite => {
                let _ = self.first_nonfinite.set(format!(
                    "tensor {shown} holds {value} at flat index {index}"
                ));
                Ok(())
            }
            Some((index, value)) => {
                let file = match &self.source {
                    Source::Safetensors { files, .. } => self.file_of(files, name),
                    _ => self.any_file(),
                };
                Err(Error::checkpoint_problem(
                    file,
                    CheckpointProblem::tensor_data(
                        shown,
                        format!("holds {value} at flat index {index}; --allow-nonfinite analyses a diverged checkpoint anyway"),
                    ),
                ))
            }
        }
    }

    /// The MXFP4 matrix `name` (`{name}_blocks` `[..., rows, in / 32, 16]` and
    /// `{name}_scales` `[..., rows, in / 32]`, bytes) dequantized to `expected` `[..., rows,
    /// in]` in the analysis dtype (safetensors only: GPT-OSS's experts).
    pub fn get_mxfp4(&self, name: &str, expected: &[usize]) -> Result<Tensor> {
        let (Some((&in_dim, outer)), Source::Safetensors { files, .. }) =
            (expected.split_last(), &self.source)
        else {
            return Err(Error::checkpoint_problem(
                self.any_file(),
                CheckpointProblem::tensor_data(
                    format!("{name}_blocks"),
                    "MXFP4 tensors are read from safetensors files only",
                ),
            ));
        };
        if in_dim % 32 != 0 {
            return Err(Error::checkpoint_problem(
                self.any_file(),
                CheckpointProblem::tensor_data(
                    format!("{name}_blocks"),
                    format!("an MXFP4 matrix's input size {in_dim} is not a multiple of 32"),
                ),
            ));
        }
        let groups = [outer, &[in_dim / 32]].concat();
        let blocks = format!("{name}_blocks");
        let scales = format!("{name}_scales");
        self.check_stored(
            &blocks,
            &[groups.as_slice(), &[super::mxfp4::GROUP_BYTES]].concat(),
        )?;
        self.check_stored(&scales, &groups)?;
        if self.shapes_only {
            return Ok(Tensor::zeros((), self.dtype, &self.device)?.broadcast_as(expected)?);
        }
        let mut bytes = Vec::new();
        for part in [&blocks, &scales] {
            let stored_name = self.stored_name(part);
            let stored = &files.tensors()[stored_name];
            if stored.dtype != safetensors::Dtype::U8 {
                return Err(Error::checkpoint_problem(
                    files.path(stored),
                    CheckpointProblem::tensor_data(
                        part.as_str(),
                        format!("has dtype {:?}, expected U8 (MXFP4)", stored.dtype),
                    ),
                ));
            }
            bytes.push(files.load_bytes(&self.shown(part), stored)?);
        }
        let values = super::mxfp4::dequantize(&bytes[0], &bytes[1]);
        let tensor = Tensor::from_vec(values, expected, &Device::Cpu)?.to_dtype(self.dtype)?;
        self.check_finite(&blocks, &self.shown(&blocks), &tensor)?;
        Ok(tensor.to_device(&self.device)?)
    }

    /// Checks that `name` exists once, with shape `expected` and a floating-point dtype.
    fn check(&self, name: &str, expected: &[usize]) -> Result<()> {
        self.check_stored(name, expected)?;
        if let Source::Safetensors { files, .. } = &self.source {
            // integers would be cast to floats as they are: weights are floating point
            let stored = &files.tensors()[self.stored_name(name)];
            if !matches!(
                stored.dtype,
                safetensors::Dtype::F16
                    | safetensors::Dtype::BF16
                    | safetensors::Dtype::F32
                    | safetensors::Dtype::F64
            ) {
                return Err(Error::checkpoint_problem(
                    files.path(stored),
                    CheckpointProblem::tensor_data(
                        self.shown(name),
                        format!(
                            "has dtype {:?}; weights must be F16, BF16, F32 or F64",
                            stored.dtype
                        ),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks that `name` exists once, with shape `expected`.
    fn check_stored(&self, name: &str, expected: &[usize]) -> Result<()> {
        if let Ok(mut read) = self.read.lock() {
            read.insert(self.stored_name(name).to_string());
        }
        let shown = self.shown(name);
        let Some(stored) = self.shape(name) else {
            return Err(Error::checkpoint_problem(
                self.any_file(),
                CheckpointProblem::MissingTensor {
                    tensor: shown.to_string(),
                },
            ));
        };
        let name = self.stored_name(name);
        if let Source::Safetensors { listing, files } = &self.source {
            // which copy the model would read is a guess: refuse
            if let Some((first, second)) = files.stored_twice(name) {
                return Err(Error::checkpoint_problem(
                    listing,
                    CheckpointProblem::tensor_data(
                        shown,
                        format!(
                            "is stored twice, in {} and {}",
                            first.display(),
                            second.display()
                        ),
                    ),
                ));
            }
        }
        if stored != expected {
            let (path, gguf_name) = match &self.source {
                Source::Safetensors { files, .. } => (self.file_of(files, name), String::new()),
                Source::Gguf(g) => (
                    g.path().to_path_buf(),
                    format!(" (GGUF {})", g.gguf_name(name).unwrap_or("?")),
                ),
                Source::Memory(_) => (PathBuf::from("<memory>"), String::new()),
            };
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::Shape {
                    tensor: format!("{shown}{gguf_name}"),
                    expected: expected.to_vec(),
                    got: stored.to_vec(),
                },
            ));
        }
        Ok(())
    }

    /// Rows `ids` of the matrix `name` (checked to be `expected` `[rows, cols]`), in the
    /// analysis dtype: from safetensors only those rows are read; other sources load the
    /// whole matrix and select the rows (the same values).
    pub fn get_rows(&self, name: &str, expected: &[usize], ids: &[u32]) -> Result<Tensor> {
        if let (Source::Safetensors { files, .. }, false) = (&self.source, self.shapes_only) {
            self.check(name, expected)?;
            let stored = &files.tensors()[self.stored_name(name)];
            let rows = files
                .gather_rows(&self.shown(name), stored, ids)?
                .to_dtype(self.dtype)?;
            self.check_finite(name, &self.shown(name), &rows)?;
            return Ok(rows.to_device(&self.device)?);
        }
        if let Some(gguf) = self
            .gguf()
            .filter(|g| g.reads_rows(name) && !self.shapes_only)
        {
            self.check(name, expected)?;
            let rows = gguf_rows(gguf, name, ids)?.to_dtype(self.dtype)?;
            self.check_finite(name, &self.shown(name), &rows)?;
            return Ok(rows.to_device(&self.device)?);
        }
        let whole = self.get(name, expected)?;
        let ids = Tensor::from_slice(ids, ids.len(), &self.device)?;
        Ok(whole.index_select(&ids, 0)?)
    }

    /// Rows `rows` of the matrix `name` (checked to be `expected`), in the analysis dtype:
    /// from safetensors only those rows are read.
    pub fn get_row_range(
        &self,
        name: &str,
        expected: &[usize],
        rows: std::ops::Range<usize>,
    ) -> Result<Tensor> {
        if let (Source::Safetensors { files, .. }, false) = (&self.source, self.shapes_only) {
            self.check(name, expected)?;
            let stored = &files.tensors()[self.stored_name(name)];
            let part = files
                .load_rows(&self.shown(name), stored, rows)?
                .to_dtype(self.dtype)?;
            self.check_finite(name, &self.shown(name), &part)?;
            return Ok(part.to_device(&self.device)?);
        }
        if let Some(gguf) = self
            .gguf()
            .filter(|g| g.reads_rows(name) && !self.shapes_only)
        {
            self.check(name, expected)?;
            let part = gguf.load_rows(name, rows)?.expect("checked: read by rows");
            let part = part.to_dtype(self.dtype)?;
            self.check_finite(name, &self.shown(name), &part)?;
            return Ok(part.to_device(&self.device)?);
        }
        Ok(self
            .get(name, expected)?
            .narrow(0, rows.start, rows.len())?)
    }

    /// Rows `rows` of the bf16 matrix `name` (checked to be `expected` `[rows, cols]`)
    /// packed for the bf16 GEMM straight from the file ([`PackedWeight::pack_rows`]): read a
    /// panel at a time into a buffer that stays in cache, so a layer's weights are never
    /// held unpacked nor copied again. `None` where that path does not apply (another
    /// source or dtype, a CPU without AVX-512 BF16, an odd width), or where a panel cannot
    /// be read or holds NaN or an infinity: [`WeightStore::get`] then reads the weight and
    /// says what is wrong with it.
    pub fn packed_rows(
        &self,
        name: &str,
        expected: &[usize],
        rows: std::ops::Range<usize>,
    ) -> Result<Option<PackedWeight>> {
        let Source::Safetensors { files, .. } = &self.source else {
            return Ok(None);
        };
        // what `get` would refuse is refused here too, on every CPU
        self.check(name, expected)?;
        let applies = self.dtype == DType::BF16
            && matches!(self.device, Device::Cpu)
            && !self.shapes_only
            && bf16_gemm::available();
        if !applies {
            return Ok(None);
        }
        let stored = &files.tensors()[self.stored_name(name)];
        let &[_, k] = expected else {
            return Ok(None);
        };
        if stored.dtype != safetensors::Dtype::BF16 || k % 2 == 1 {
            return Ok(None);
        }
        let shown = self.shown(name);
        let first = rows.start;
        Ok(PackedWeight::pack_rows(rows.len(), k, |panel, buffer| {
            let at = first + panel.start..first + panel.end;
            let bytes = bytemuck::cast_slice_mut(buffer);
            // finite: the exponent bits are not all ones (a branch-free pass that vectorises)
            let finite = |all: bool, v: &half::bf16| all & (v.to_bits() & 0x7f80 != 0x7f80);
            files.read_rows_into(&shown, stored, at, bytes).is_ok()
                && buffer.iter().fold(true, finite)
        }))
    }

    /// Whether rows of a matrix are read alone ([`WeightStore::get_row_range`]): safetensors,
    /// and GGUF matrices stored as they are used (embeddings and LM heads).
    pub fn reads_rows(&self) -> bool {
        match &self.source {
            Source::Safetensors { .. } => !self.shapes_only,
            Source::Gguf(g) => {
                let head = !g.contains("lm_head.weight") || g.reads_rows("lm_head.weight");
                !self.shapes_only && g.reads_rows("model.embed_tokens.weight") && head
            }
            Source::Memory(_) => false,
        }
    }

    /// Asks the OS to read ahead every stored tensor whose convention name starts with
    /// `prefix` (a layer's `model.layers.{l}.`): the next layer's bytes arrive while this
    /// one computes. Safetensors only (a no-op elsewhere).
    pub fn read_ahead(&self, prefix: &str) {
        let Source::Safetensors { files, .. } = &self.source else {
            return;
        };
        for (name, stored) in files.tensors() {
            let convention = self
                .aliases
                .iter()
                .find(|(_, s)| *s == name)
                .map_or(name.as_str(), |(c, _)| c.as_str());
            if convention.starts_with(prefix) {
                files.read_ahead(stored);
            }
        }
    }

    /// Bytes read from the checkpoint's files so far (safetensors; 0 elsewhere).
    pub fn bytes_read(&self) -> u64 {
        match &self.source {
            Source::Safetensors { files, .. } => files.bytes_read(),
            Source::Gguf(_) | Source::Memory(_) => 0,
        }
    }

    /// Bytes of every stored tensor whose convention name starts with `prefix`, in the
    /// analysis dtype (what loading them takes).
    pub fn footprint(&self, prefix: &str) -> u64 {
        let stored: Vec<(String, Vec<usize>, String)> = self.tensors();
        stored
            .iter()
            .filter(|(name, _, _)| {
                let convention = self
                    .aliases
                    .iter()
                    .find(|(_, s)| *s == name)
                    .map_or(name.as_str(), |(c, _)| c.as_str());
                convention.starts_with(prefix)
            })
            .map(|(name, shape, _)| {
                super::mxfp4::values_stored(name, shape) as u64 * self.dtype.size_in_bytes() as u64
            })
            .sum()
    }

    /// Loads `name` if present (see [`WeightStore::get`]).
    pub fn get_opt(&self, name: &str, expected: &[usize]) -> Result<Option<Tensor>> {
        if self.contains(name) {
            self.get(name, expected).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Every tensor name with its shape and stored dtype (a GGUF type such as `q4_1` for
    /// GGUF files).
    pub fn tensors(&self) -> Vec<(String, Vec<usize>, String)> {
        match &self.source {
            Source::Safetensors { files, .. } => files
                .tensors()
                .iter()
                .map(|(name, t)| {
                    let dtype = format!("{:?}", t.dtype).to_lowercase();
                    (name.clone(), t.shape.clone(), dtype)
                })
                .collect(),
            Source::Gguf(g) => g.tensors(),
            Source::Memory(map) => map
                .iter()
                .map(|(name, t)| {
                    let dtype = t.dtype().as_str().to_string();
                    (name.clone(), t.dims().to_vec(), dtype)
                })
                .collect(),
        }
    }

    /// The analysis dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device tensors are loaded to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The file of stored tensor `name`.
    fn file_of(&self, files: &SafetensorsFiles, name: &str) -> PathBuf {
        files
            .get(name)
            .map_or_else(|| self.any_file(), |t| files.path(t).to_path_buf())
    }

    pub(crate) fn any_file(&self) -> PathBuf {
        match &self.source {
            Source::Safetensors { listing, .. } => listing.clone(),
            Source::Gguf(g) => g.path().to_path_buf(),
            Source::Memory(_) => PathBuf::from("<memory>"),
        }
    }
}

/// The distinct shard files named by an index, in order, checked to exist.
fn shard_paths(dir: &Path, index: &Path) -> Result<Vec<PathBuf>> {
    let text = asa_core::input::read_text(index, asa_core::input::JSON_RECORD)?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(index, "invalid JSON", e).about(InputKind::Checkpoint))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| {
            let problem = CheckpointProblem::damaged("missing `weight_map` object");
            Error::checkpoint_problem(index, problem)
        })?;
    let mut files: Vec<String> = Vec::new();
    for value in map.values() {
        let file = value.as_str().ok_or_else(|| {
            let problem = CheckpointProblem::damaged("weight_map values must be file names");
            Error::checkpoint_problem(index, problem)
        })?;
        // a shard is a file of the checkpoint folder (a symlink there, as the Hugging Face
        // cache makes, is fine): no path that leads elsewhere
        let plain = Path::new(file).file_name().is_some_and(|n| n == file);
        if !plain || file == ".." || file == "." {
            return Err(Error::checkpoint_problem(
                index,
                CheckpointProblem::damaged(format!("weight_map names shard `{}`: shards must be plain file names in the checkpoint folder", asa_core::error::printable(file))),
            ));
        }
        if !files.iter().any(|f| f == file) {
            files.push(file.to_string());
        }
    }
    if files.is_empty() {
        return Err(Error::checkpoint_problem(
            index,
            CheckpointProblem::damaged("weight_map lists no shard file"),
        ));
    }
    files.sort();
    let paths: Vec<PathBuf> = files.iter().map(|f| dir.join(f)).collect();
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        let problem = CheckpointProblem::MissingFile {
            file: missing.display().to_string(),
            detail: String::new(),
        };
        return Err(Error::checkpoint_problem(index, problem));
    }
    Ok(paths)
}

/// Rows `ids` of the GGUF matrix `name`, in their order: the distinct ids read as runs of
/// consecutive rows, then selected.
fn gguf_rows(gguf: &GgufFile, name: &str, ids: &[u32]) -> Result<Tensor> {
    let mut sorted: Vec<u32> = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for &id in &sorted {
        match runs.last_mut() {
            Some(run) if run.end == id as usize => run.end += 1,
            _ => runs.push(id as usize..id as usize + 1),
        }
    }
    let mut parts = Vec::with_capacity(runs.len());
    for run in runs {
        parts.push(gguf.load_rows(name, run)?.expect("checked: read by rows"));
    }
    let distinct = Tensor::cat(&parts, 0)?;
    let at: Vec<u32> = ids
        .iter()
        .map(|id| {
            sorted
                .binary_search(id)
                .expect("every id is in the sorted list") as u32
        })
        .collect();
    let at = Tensor::from_slice(&at, at.len(), distinct.device())?;
    Ok(distinct.index_select(&at, 0)?)
}

/// A non-finite weight refused after the cast to `dtype` whose stored value is finite: not a
/// diverged checkpoint but a value past `dtype`'s range (f16 tops out at 65504), said so.
fn overflow_of_cast(err: Error, shown: &str, stored: &Tensor, dtype: DType) -> Error {
    let Error::Checkpoint { ref path, .. } = err else {
        return err;
    };
    let Ok(values) = stored
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
    else {
        return err;
    };
    let Some(largest) = values
        .iter()
        .filter(|v| v.is_finite())
        .map(|v| v.abs())
        .reduce(f32::max)
    else {
        return err;
    };
    if values.iter().any(|v| !v.is_finite()) {
        return err;
    }
    let detail = format!(
        "holds {largest}, past {}'s range: run with --dtype f32 or bf16",
        format!("{dtype:?}").to_lowercase()
    );
    Error::checkpoint_problem(path, CheckpointProblem::tensor_data(shown, detail))
}
