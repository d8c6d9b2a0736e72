//! Safetensors files read tensor by tensor with positioned reads. Each file's header is
//! parsed and checked by the `safetensors` crate when opened (every tensor's byte range lies
//! in the file, ranges are contiguous, sizes match dtype x shape); a tensor's bytes are then
//! read with `pread` into memory of our own and dropped after use, so a file's pages stay in
//! the page cache, not in the process's resident memory (an mmap would count every touched
//! page there). Rows of a matrix can be read alone (the embedding rows of the tokens used,
//! a chunk of the LM head's vocabulary), and a layer's ranges can be read ahead.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{Device, Tensor};
use safetensors::{Dtype, SafeTensors};

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};

/// Where one tensor's bytes are.
#[derive(Debug, Clone)]
pub struct StoredTensor {
    /// Index of its file.
    file: usize,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Absolute offset of its first byte in the file.
    start: u64,
    /// Its bytes.
    len: usize,
}

/// Bytes held in memory by someone else (a trainer's parameters handed over from Python),
/// read in place.
pub type SharedBytes = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// One tensor held in memory: its dtype, shape and little-endian bytes (bf16 as its raw
/// 16-bit words), under its Hugging Face name.
#[derive(Clone)]
pub struct MemoryTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: SharedBytes,
}

impl MemoryTensor {
    /// The dtype called `name` (`F32`, `F16`, `BF16`, `F64`, as safetensors names them).
    pub fn dtype_named(name: &str) -> Option<Dtype> {
        match name {
            "F32" => Some(Dtype::F32),
            "F16" => Some(Dtype::F16),
            "BF16" => Some(Dtype::BF16),
            "F64" => Some(Dtype::F64),
            _ => None,
        }
    }
}

impl std::fmt::Debug for MemoryTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTensor")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .finish()
    }
}

/// Where a "file"'s bytes are: an open file read with `pread`, or a tensor's bytes in memory.
enum Backing {
    File(File),
    Memory(SharedBytes),
}

/// The tensors of one or more safetensors files (the shards of one checkpoint), or of
/// tensors held in memory, each then its own "file" at offset 0.
pub struct SafetensorsFiles {
    files: Vec<(PathBuf, Backing)>,
    tensors: BTreeMap<String, StoredTensor>,
    /// Tensors stored in two files (a stale shard): `(first file, second file)`.
    twice: BTreeMap<String, (PathBuf, PathBuf)>,
    /// Bytes read so far (all threads).
    bytes_read: AtomicU64,
}

impl SafetensorsFiles {
    /// Opens `paths` and checks their headers.
    pub fn open(paths: &[PathBuf]) -> Result<Self> {
        let mut files = Vec::with_capacity(paths.len());
        let mut tensors: BTreeMap<String, StoredTensor> = BTreeMap::new();
        let mut twice = BTreeMap::new();
        for (index, path) in paths.iter().enumerate() {
            let file = asa_core::input::open(path)?;
            for (name, tensor) in read_header(path, &file, index)? {
                if let Some(first) = tensors.get(&name) {
                    let first = paths[first.file].clone();
                    twice.insert(name.clone(), (first, path.clone()));
                } else {
                    tensors.insert(name, tensor);
                }
            }
            files.push((path.clone(), Backing::File(file)));
        }
        Ok(SafetensorsFiles {
            files,
            tensors,
            twice,
            bytes_read: AtomicU64::new(0),
        })
    }

    /// Serves `tensors` held in memory, checked as a file's header is (a floating-point or
    /// byte dtype, as many bytes as dtype x shape; a name given twice is an error), each
    /// named `origin/name` in messages.
    pub fn from_memory(tensors: Vec<MemoryTensor>, origin: &Path) -> Result<Self> {
        let mut files = Vec::with_capacity(tensors.len());
        let mut stored: BTreeMap<String, StoredTensor> = BTreeMap::new();
        for (index, t) in tensors.into_iter().enumerate() {
            let path = origin.join(&t.name);
            let elements = t.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
            let bytes = elements.and_then(|n| n.checked_mul(t.dtype.bitsize()).map(|b| b / 8));
            let len = t.bytes.as_ref().as_ref().len();
            if bytes != Some(len) {
                let detail = format!(
                    "of shape {:?} and dtype {:?} holds {len} bytes, not {}",
                    t.shape,
                    t.dtype,
                    bytes.map_or("a countable number".into(), |b| b.to_string())
                );
                return Err(Error::checkpoint_problem(
                    &path,
                    CheckpointProblem::tensor_data(&t.name, detail),
                ));
            }
            let tensor = StoredTensor {
                file: index,
                dtype: t.dtype,
                shape: t.shape,
                start: 0,
                len,
            };
            if stored.insert(t.name.clone(), tensor).is_some() {
                return Err(Error::checkpoint_problem(
                    &path,
                    CheckpointProblem::tensor_data(&t.name, "is given twice"),
                ));
            }
            files.push((path, Backing::Memory(t.bytes)));
        }
        Ok(SafetensorsFiles {
            files,
            tensors: stored,
            twice: BTreeMap::new(),
            bytes_read: AtomicU64::new(0),
        })
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&StoredTensor> {
        self.tensors.get(name)
    }

    /// Every tensor, by name.
    pub fn tensors(&self) -> &BTreeMap<String, StoredTensor> {
        &self.tensors
    }

    /// The two files of a tensor stored twice.
    pub fn stored_twice(&self, name: &str) -> Option<&(PathBuf, PathBuf)> {
        self.twice.get(name)
    }

    /// The file holding `tensor`.
    pub fn path(&self, tensor: &StoredTensor) -> &Path {
        &self.files[tensor.file].0
    }

    /// Bytes read from the files so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// `name` as stored, on the CPU.
    pub fn load(&self, name: &str, tensor: &StoredTensor) -> Result<Tensor> {
        let rows = tensor.shape.first().copied().unwrap_or(1);
        self.load_rows(name, tensor, 0..rows)
    }

    /// `name`'s bytes as stored (e.g. MXFP4 blocks), fallibly allocated.
    pub fn load_bytes(&self, name: &str, tensor: &StoredTensor) -> Result<Vec<u8>> {
        self.read(tensor, 0, tensor.len, name)
    }

    /// Rows `rows` (along the first dimension) of `tensor` as stored, on the CPU.
    pub fn load_rows(
        &self,
        name: &str,
        tensor: &StoredTensor,
        rows: std::ops::Range<usize>,
    ) -> Result<Tensor> {
        let (row_bytes, mut shape) = row_layout(tensor);
        if let Some(first) = shape.first_mut() {
            *first = rows.len();
        }
        let len = rows.len() * row_bytes;
        filled_tensor(
            len,
            tensor.dtype,
            &shape,
            self.path(tensor),
            name,
            |bytes| self.read_rows_into(name, tensor, rows, bytes),
        )
    }

    /// Rows `rows` (along the first dimension) of `tensor`'s bytes as stored, read into
    /// `out` (exactly their size).
    pub fn read_rows_into(
        &self,
        name: &str,
        tensor: &StoredTensor,
        rows: std::ops::Range<usize>,
        out: &mut [u8],
    ) -> Result<()> {
        let (row_bytes, _) = row_layout(tensor);
        if out.len() != rows.len() * row_bytes || rows.end * row_bytes > tensor.len {
            return Err(Error::checkpoint_problem(
                self.path(tensor),
                CheckpointProblem::tensor_data(name, format!("rows {rows:?} do not fit it")),
            ));
        }
        self.read_into(tensor, rows.start * row_bytes, out, name)
    }

    /// Rows `ids` (in that order, repeats allowed) of the matrix `tensor`, on the CPU: the
    /// embedding rows of the tokens a run uses.
    pub fn gather_rows(&self, name: &str, tensor: &StoredTensor, ids: &[u32]) -> Result<Tensor> {
        let (row_bytes, mut shape) = row_layout(tensor);
        let rows = shape.first().copied().unwrap_or(1);
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= rows) {
            return Err(Error::checkpoint_problem(
                self.path(tensor),
                CheckpointProblem::tensor_data(
                    name,
                    format!("token id {bad} is outside its {rows} rows"),
                ),
            ));
        }
        if let Some(first) = shape.first_mut() {
            *first = ids.len();
        }
        let len = ids.len() * row_bytes;
        filled_tensor(
            len,
            tensor.dtype,
            &shape,
            self.path(tensor),
            name,
            |bytes| {
                for (chunk, &id) in bytes.chunks_mut(row_bytes.max(1)).zip(ids) {
                    self.read_into(tensor, id as usize * row_bytes, chunk, name)?;
                }
                Ok(())
            },
        )
    }

    /// Asks the kernel to read `tensor`'s bytes ahead (into the page cache, not into this
    /// process's memory), so that the next [`SafetensorsFiles::load`] finds them there.
    pub fn read_ahead(&self, tensor: &StoredTensor) {
        let Backing::File(file) = &self.files[tensor.file].1 else {
            return; // already in memory
        };
        let fd = file.as_raw_fd();
        // SAFETY: a valid open descriptor; the call only advises the kernel.
        unsafe {
            libc::posix_fadvise(
                fd,
                tensor.start as libc::off_t,
                tensor.len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }

    fn read(
        &self,
        tensor: &StoredTensor,
        offset: usize,
        len: usize,
        name: &str,
    ) -> Result<Vec<u8>> {
        let mut bytes = zeroed(len, self.path(tensor), name)?;
        self.read_into(tensor, offset, &mut bytes, name)?;
        Ok(bytes)
    }

    fn read_into(
        &self,
        tensor: &StoredTensor,
        offset: usize,
        out: &mut [u8],
        name: &str,
    ) -> Result<()> {
        let (path, backing) = &self.files[tensor.file];
        match backing {
            Backing::File(file) => file
                .read_exact_at(out, tensor.start + offset as u64)
                .map_err(|e| match e.kind() {
                    // a file shorter than its header says is the checkpoint's fault
                    std::io::ErrorKind::UnexpectedEof => {
                        Error::invalid(path, format!("cannot read tensor {name}"), e)
                            .about(InputKind::Checkpoint)
                    }
                    _ => Error::io(path, e),
                })?,
            Backing::Memory(bytes) => {
                let from = tensor.start as usize + offset;
                let bytes: &[u8] = bytes.as_ref().as_ref();
                let part = bytes.get(from..from + out.len()).ok_or_else(|| {
                    let problem = CheckpointProblem::tensor_data(name, "a read past its bytes");
                    Error::checkpoint_problem(path, problem)
                })?;
                out.copy_from_slice(part);
            }
        }
        self.bytes_read
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Bytes per row (first dimension) and the shape of `tensor`.
fn row_layout(tensor: &StoredTensor) -> (usize, Vec<usize>) {
    let rows = tensor.shape.first().copied().unwrap_or(1).max(1);
    (tensor.len / rows, tensor.shape.clone())
}

/// The tensors of one file's header, checked against the file's length.
fn read_header(path: &Path, file: &File, index: usize) -> Result<Vec<(String, StoredTensor)>> {
    // SAFETY: read-only; only the header's pages are touched (the crate checks the data's
    // length against the mapping's without reading it).
    let map = unsafe { memmap2::Mmap::map(file) }.map_err(|e| Error::io(path, e))?;
    let (header_len, metadata) = SafeTensors::read_metadata(&map).map_err(|e| {
        Error::invalid(path, "invalid or truncated safetensors file", e)
            .about(InputKind::Checkpoint)
    })?;
    let data_start = (8 + header_len) as u64;
    let mut out = Vec::new();
    for (name, info) in metadata.tensors() {
        let (begin, end) = info.data_offsets;
        out.push((
            name,
            StoredTensor {
                file: index,
                dtype: info.dtype,
                shape: info.shape.clone(),
                start: data_start + begin as u64,
                len: end - begin,
            },
        ));
    }
    Ok(out)
}

/// A CPU tensor of `shape` and the stored `dtype` (floating point only) whose `len`
/// little-endian bytes `fill` writes: read straight into the tensor's own memory, allocated
/// zeroed by the allocator (fresh pages, no pass over them) and never copied again.
fn filled_tensor(
    len: usize,
    dtype: Dtype,
    shape: &[usize],
    path: &Path,
    name: &str,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<Tensor> {
    let at = (len, shape, path, name);
    match dtype {
        Dtype::BF16 => filled::<half::bf16>(at, fill),
        Dtype::F16 => filled::<half::f16>(at, fill),
        Dtype::F32 => filled::<f32>(at, fill),
        Dtype::F64 => filled::<f64>(at, fill),
        other => Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::tensor_data(
                name,
                format!("has dtype {other:?}; weights must be F16, BF16, F32 or F64"),
            ),
        )),
    }
}

/// [`filled_tensor`] for element type `T`.
fn filled<T: bytemuck::Pod + candle_core::WithDType>(
    (len, shape, path, name): (usize, &[usize], &Path, &str),
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<Tensor> {
    let size = std::mem::size_of::<T>();
    if len % size != 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::tensor_data(
                name,
                format!("{len} bytes is not a whole number of {size}-byte values"),
            ),
        ));
    }
    let mut values = bytemuck::allocation::try_zeroed_vec::<T>(len / size)
        .map_err(|_| out_of_memory(len, path, name))?;
    fill(bytemuck::cast_slice_mut(&mut values))?;
    Ok(Tensor::from_vec(values, shape, &Device::Cpu)?)
}

/// The error of an allocation of `len` bytes for tensor `name` that failed.
fn out_of_memory(len: usize, path: &Path, name: &str) -> Error {
    let detail = format!("cannot allocate the {len} bytes to read it: not enough memory");
    Error::checkpoint_problem(path, CheckpointProblem::tensor_data(name, detail))
}

/// `len` zero bytes for tensor `name`, allocated fallibly (and zeroed by the allocator): a
/// size read from a header that the machine cannot hold is an error naming the file, not
/// an abort.
fn zeroed(len: usize, path: &Path, name: &str) -> Result<Vec<u8>> {
    bytemuck::allocation::try_zeroed_vec(len).map_err(|_| out_of_memory(len, path, name))
}
