//! Models handed over in memory from Python (a transformers model, or a config dict and a
//! state dict): each tensor's bytes are read in place from the host array that holds them
//! (numpy's, or a CPU torch tensor's seen through numpy), never copied into a second buffer
//! of the same precision; the array is kept alive until the analysis has finished with it.

use std::path::PathBuf;
use std::sync::Arc;

use asa_models::safetensors_file::MemoryTensor;
use asa_models::{HostCopy, MemoryModel};
use pyo3::prelude::*;

use crate::UsageError;

/// One tensor as Python hands it over (`asa_analyze._memory_models.HeldTensor`): name,
/// dtype (`F32`, `F16`, `BF16`, `F64`), shape, the C-contiguous host array holding it, its
/// data address and its length in bytes.
#[derive(FromPyObject)]
pub struct TensorArg {
    #[pyo3(attribute)]
    name: String,
    #[pyo3(attribute)]
    dtype: String,
    #[pyo3(attribute)]
    shape: Vec<usize>,
    #[pyo3(attribute)]
    array: Py<PyAny>,
    #[pyo3(attribute)]
    address: usize,
    #[pyo3(attribute)]
    nbytes: usize,
}

/// A host array's bytes, read in place.
struct HeldArray {
    /// The array that owns the bytes: alive (and its buffer where it is) while held.
    _owner: Py<PyAny>,
    address: usize,
    len: usize,
}

impl AsRef<[u8]> for HeldArray {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `address` and `len` are the data pointer and byte length of the
        // C-contiguous array `_owner`, which this value keeps alive; numpy never moves an
        // array's data while a reference to the array exists
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.len) }
    }
}

/// One model as Python hands it over (`asa_analyze._memory_models.Memory`): label,
/// config.json text, tensors, host copy.
#[derive(FromPyObject)]
pub struct MemoryArg {
    #[pyo3(attribute)]
    pub label: String,
    #[pyo3(attribute)]
    config_json: String,
    #[pyo3(attribute)]
    tensors: Vec<TensorArg>,
    #[pyo3(attribute)]
    host_copy: Option<HostCopyArg>,
}

/// The copy of a model's device tensors to the host as Python measured it
/// (`asa_analyze._memory_models.HostCopy`): the device, the tensors and bytes copied, and
/// the seconds it took.
#[derive(FromPyObject)]
pub struct HostCopyArg {
    #[pyo3(attribute)]
    device: String,
    #[pyo3(attribute)]
    tensors: usize,
    #[pyo3(attribute)]
    bytes: u64,
    #[pyo3(attribute)]
    seconds: f64,
}

/// The model a [`MemoryArg`] hands over: its config.json text, its tensors and the host copy
/// they needed.
pub fn memory_model(arg: MemoryArg) -> PyResult<MemoryModel> {
    let MemoryArg {
        label,
        config_json,
        tensors,
        host_copy,
    } = arg;
    let tensors = tensors
        .into_iter()
        .map(|t| {
            let TensorArg {
                name,
                dtype,
                shape,
                array: owner,
                address,
                nbytes: len,
            } = t;
            let dtype = MemoryTensor::dtype_named(&dtype).ok_or_else(|| {
                UsageError::new_err(format!(
                    "tensor {name} of model {label}: dtype {dtype} is not one of float32, float16, bfloat16, float64"
                ))
            })?;
            let bytes = Arc::new(HeldArray {
                _owner: owner,
                address,
                len,
            });
            Ok(MemoryTensor {
                name,
                dtype,
                shape,
                bytes,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(MemoryModel {
        origin: PathBuf::from(format!("<memory>/{label}")),
        config_json,
        tensors,
        host_copy: host_copy.map(|c| HostCopy {
            from: c.device,
            tensors: c.tensors,
            bytes: c.bytes,
            seconds: c.seconds,
        }),
    })
}
