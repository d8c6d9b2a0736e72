//! The capture backend's native half (`asa_analyze._capture`): each attention call of a
//! transformers model's forward pass hands its q, k and v (C-contiguous CPU tensors, f32 or
//! bf16, read from their addresses while Python holds them) to [`Capture::attend`]; the
//! output is written into the tensor Python allocated for it.

use candle_core::{DType, Device, Tensor};
use pyo3::prelude::*;

use asa_analyze::analysis::capture::{AttentionCall, Capture, CaptureLayer};
use asa_analyze::analysis::{RunOptions, RunSpec};
use asa_analyze::hooks::{Hook, KeyWindow};
use asa_analyze::metrics::Metric;

use crate::{no_panic, to_py, usage, NativeResult, UsageError};

/// One CPU tensor as Python hands it over, `(address, shape, dtype)`: its data address,
/// shape and dtype (`F32` or `BF16`), C-contiguous, held by Python for the call.
#[derive(FromPyObject)]
pub struct HostTensor {
    #[pyo3(item(0))]
    address: usize,
    #[pyo3(item(1))]
    shape: Vec<usize>,
    #[pyo3(item(2))]
    dtype: String,
}

impl HostTensor {
    /// A candle tensor holding a copy of its values.
    fn tensor(&self) -> PyResult<Tensor> {
        let n: usize = self.shape.iter().product();
        if n > 0 && self.address == 0 {
            return Err(usage(format!("a tensor of {n} values at address 0")));
        }
        let tensor = match self.dtype.as_str() {
            "F32" => {
                // SAFETY: Python passes the data pointer of a C-contiguous CPU float32 tensor
                // of `shape`, which it holds (and does not write) for this call
                let values = unsafe { std::slice::from_raw_parts(self.address as *const f32, n) };
                Tensor::from_slice(values, self.shape.as_slice(), &Device::Cpu)
            }
            "BF16" => {
                // SAFETY: as above, a bfloat16 tensor (16-bit words)
                let values =
                    unsafe { std::slice::from_raw_parts(self.address as *const half::bf16, n) };
                Tensor::from_slice(values, self.shape.as_slice(), &Device::Cpu)
            }
            other => return Err(usage(format!("dtype {other}: the capture takes F32 or BF16"))),
        };
        tensor.map_err(|e| to_py(e.into()))
    }
}

/// One attention module as Python describes it: qualified name, 0-based layer number, the
/// keys its queries see (`causal`, `sliding`, `chunked`) with the window's size, its
/// soft-cap and whether it has sinks.
#[derive(FromPyObject)]
pub struct ModuleArg {
    #[pyo3(attribute)]
    name: String,
    #[pyo3(attribute)]
    number: usize,
    #[pyo3(attribute)]
    keys: String,
    #[pyo3(attribute)]
    size: usize,
    #[pyo3(attribute)]
    softcap: Option<f64>,
    #[pyo3(attribute)]
    sinks: bool,
}

impl ModuleArg {
    fn layer(self) -> PyResult<CaptureLayer> {
        let window = match (self.keys.as_str(), self.size) {
            ("causal", _) => KeyWindow::CAUSAL,
            ("sliding", w) if w > 0 => KeyWindow::sliding(w),
            ("chunked", c) if c > 0 => KeyWindow::chunked(c),
            (keys, size) => {
                return Err(usage(format!(
                    "{}: keys {keys} of size {size} (causal, or sliding / chunked of at least 1)",
                    self.name
                )))
            }
        };
        Ok(CaptureLayer {
            name: self.name,
            number: self.number,
            window,
            softcap: self.softcap,
            sinks: self.sinks,
        })
    }
}

/// A capture in progress (see `asa_analyze.capture`).
#[pyclass(module = "asa_analyze._native", name = "NativeCapture", unsendable)]
pub struct NativeCapture {
    capture: Capture,
    spec: RunSpec,
}

#[pymethods]
impl NativeCapture {
    #[new]
    #[pyo3(signature = (modules, stack = None, metrics = None, min_query = RunSpec::default().min_query, map_size = RunSpec::DEFAULT_MAP_SIZE, layer = None))]
    fn new(
        modules: Vec<ModuleArg>,
        stack: Option<String>,
        metrics: Option<Vec<String>>,
        min_query: usize,
        map_size: usize,
        layer: Option<usize>,
    ) -> PyResult<Self> {
        no_panic(|| {
            let mut spec = RunSpec {
                min_query,
                map_size,
                layer,
                metrics: Capture::default_metrics(),
                ..RunSpec::default()
            };
            if let Some(names) = metrics {
                spec.metrics = names
                    .iter()
                    .map(|n| n.parse::<Metric>().map_err(usage))
                    .collect::<PyResult<_>>()?;
            }
            if map_size == 0 {
                return Err(UsageError::new_err("map_size must be at least 1"));
            }
            let layers = modules
                .into_iter()
                .map(ModuleArg::layer)
                .collect::<PyResult<Vec<_>>>()?;
            let capture = Capture::new(spec.clone(), layers, stack).map_err(to_py)?;
            Ok(NativeCapture { capture, spec })
        })
    }

    /// Module `layer`'s output for q, k, v (and its sink logits), written into `out`
    /// (a C-contiguous CPU tensor of q's shape and dtype).
    #[pyo3(signature = (layer, q, k, v, scale, out, sinks = None))]
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        py: Python<'_>,
        layer: usize,
        q: HostTensor,
        k: HostTensor,
        v: HostTensor,
        scale: f64,
        out: HostTensor,
        sinks: Option<HostTensor>,
    ) -> PyResult<()> {
        no_panic(|| {
            let call = AttentionCall {
                q: q.tensor()?,
                k: k.tensor()?,
                v: v.tensor()?,
                scale,
                sinks: sinks.map(|s| s.tensor()).transpose()?,
            };
            let capture = &mut self.capture;
            let result = py.detach(|| capture.attend(layer, call));
            let result = result.map_err(to_py)?;
            if result.dims() != out.shape.as_slice() || out.dtype != q.dtype {
                return Err(usage(format!(
                    "the output tensor is {:?} {}, the attention output {:?} {}",
                    out.shape,
                    out.dtype,
                    result.dims(),
                    q.dtype
                )));
            }
            write_into(&result, &out).map_err(to_py)
        })
    }

    /// The start of a call whose blocks torch computes (q's `dims` `[b, heads, t, d]`, `kv`
    /// key heads, q's dtype `F32` or `BF16`): the block tensors wanted, by their short names
    /// (`qk`, `attn_scores`, `pattern`, `softmax`, `sink_mass`, `max_logit`).
    fn begin_blocks(&mut self, layer: usize, dims: [usize; 4], kv: usize, dtype: &str) -> PyResult<Vec<&'static str>> {
        no_panic(|| {
            let dtype = if dtype == "BF16" { DType::BF16 } else { DType::F32 };
            let hooks = self.capture.begin_blocks(layer, dims, kv, dtype).map_err(to_py)?;
            Ok(hooks.into_iter().map(short_name).collect())
        })
    }

    /// One block of the open call: `(short name, host tensor)` pairs (f32).
    fn block(&mut self, py: Python<'_>, layer: usize, q_start: usize, n: usize, tensors: Vec<(String, HostTensor)>) -> PyResult<()> {
        no_panic(|| {
            let mut held = Vec::with_capacity(tensors.len());
            for (name, tensor) in &tensors {
                let hook = Hook::ATTENTION
                    .into_iter()
                    .find(|&h| short_name(h) == name.as_str())
                    .ok_or_else(|| usage(format!("no block hook {name}")))?;
                if tensor.dtype != "F32" {
                    return Err(usage(format!("block tensor {name} is {}, not F32", tensor.dtype)));
                }
                held.push((hook, tensor.tensor()?));
            }
            let capture = &mut self.capture;
            py.detach(|| capture.block(layer, q_start, n, held)).map_err(to_py)
        })
    }

    /// The end of the open call.
    fn end_blocks(&mut self, py: Python<'_>, layer: usize) -> PyResult<()> {
        no_panic(|| {
            let capture = &mut self.capture;
            py.detach(|| capture.end_blocks(layer)).map_err(to_py)
        })
    }

    /// The captured model's result, labelled `label`.
    fn result(&self, label: &str, model_class: &str, transformers_version: &str, device: &str) -> PyResult<NativeResult> {
        no_panic(|| {
            let output = self
                .capture
                .output(label, model_class, transformers_version, device)
                .map_err(to_py)?;
            let options = RunOptions {
                spec: self.spec.clone(),
                ..RunOptions::default()
            };
            let record = output.record("python capture", &options);
            Ok(NativeResult { output, record })
        })
    }
}

/// A block hook's short name, as Python names it.
fn short_name(hook: Hook) -> &'static str {
    match hook {
        Hook::Qk => "qk",
        Hook::AttnScores => "attn_scores",
        Hook::Pattern => "pattern",
        Hook::Softmax => "softmax",
        Hook::SinkMass => "sink_mass",
        Hook::MaxLogit => "max_logit",
        _ => "other",
    }
}

/// Writes `values` (f32 or bf16, as `out`'s dtype) into the memory of `out`.
fn write_into(values: &Tensor, out: &HostTensor) -> asa_analyze::Result<()> {
    let values = values.flatten_all()?;
    match out.dtype.as_str() {
        "BF16" => {
            let data = values.to_dtype(DType::BF16)?.to_vec1::<half::bf16>()?;
            // SAFETY: `out` is a C-contiguous CPU bfloat16 tensor of as many values, which
            // Python holds and nobody else touches during this call
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), out.address as *mut half::bf16, data.len())
            };
        }
        _ => {
            let data = values.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            // SAFETY: as above, a float32 tensor
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), out.address as *mut f32, data.len()) };
        }
    }
    Ok(())
}
