//! Models handed over in memory from Python (a transformers model, or a config dict and a
//! state dict): each tensor's bytes are read in place from the host array that holds them
//! (numpy's, or a CPU torch tensor's seen through numpy), never copied into a second buffer
//! of the same precision; the array is kept alive until the analysis has finished with it.

use std::path::PathBuf;
use std::sync::Arc;

use asa_analyze::model::safetensors_file::MemoryTensor;
use asa_analyze::model::{HostCopy, MemoryModel};
use pyo3::prelude::*;

use crate::UsageError;

/// One tensor as Python hands it over: name, dtype (`F32`, `F16`, `BF16`, `F64`), shape,
/// the C-contiguous host array holding it, its data address and its length in bytes.
pub type TensorArg = (String, String, Vec<usize>, Py<PyAny>, usize, usize);

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

/// One model as Python hands it over: label, config.json text, tensors, host copy.
pub type MemoryArg = (String, String, Vec<TensorArg>, Option<HostCopyArg>);

/// The copy of a model's device tensors to the host as Python measured it: the device, the
/// tensors and bytes copied, and the seconds it took.
pub type HostCopyArg = (String, usize, u64, f64);

/// The model `label`: its config.json text, its tensors and the host copy they needed.
pub fn memory_model(
    label: &str,
    config_json: String,
    tensors: Vec<TensorArg>,
    host_copy: Option<HostCopyArg>,
) -> PyResult<MemoryModel> {
    let tensors = tensors
        .into_iter()
        .map(|(name, dtype, shape, owner, address, len)| {
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
        host_copy: host_copy.map(|(from, tensors, bytes, seconds)| HostCopy {
            from,
            tensors,
            bytes,
            seconds,
        }),
    })
}
