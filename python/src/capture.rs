//! The capture backend's native half (`asa_analyze._capture`): each attention call of a
//! transformers model's forward pass hands its q, k and v (C-contiguous CPU tensors, f32 or
//! bf16, read from their addresses while Python holds them) to [`Capture::attend`]; the
//! output is written into the tensor Python allocated for it.

use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use pyo3::prelude::*;

use asa_analysis::analysis::capture::{
    AttentionCall, Capture, CaptureLayer, ExternalBlock, Placement,
};
use asa_analysis::analysis::capture_spans::Span;
use asa_analysis::analysis::run_option::{run_options_from, FrontEnd};
use asa_analysis::analysis::{RunOptions, RunOutput, RunSpec};
use asa_core::Error;
use asa_hooks::KeyWindow;
use pyo3::types::PyDict;

use crate::{no_panic, run_values, to_py, usage, AsaError, NativeResult};

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
            other => {
                return Err(usage(format!(
                    "dtype {other}: the capture takes F32 or BF16"
                )))
            }
        };
        tensor.map_err(|e| to_py(e.into()))
    }
}

/// One attention module as Python describes it: qualified name, 0-based layer number, the
/// keys its queries see (`causal`, `sliding`, `chunked`, `bidirectional`) with the window's
/// size (a bidirectional one's reach on either side; 0: every key), its
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
            // every key (size 0), or those within `size` positions on either side; the
            // length is the passes' (set at the first call)
            ("bidirectional", 0) => KeyWindow::bidirectional(usize::MAX),
            ("bidirectional", w) => KeyWindow::Around {
                before: w,
                after: w,
                len: usize::MAX,
            },
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

/// Each sequence's tokens `(start, len)` in a padded batch.
fn to_spans(spans: Vec<(usize, usize)>) -> Vec<Span> {
    spans
        .into_iter()
        .map(|(start, len)| Span { start, len })
        .collect()
}

/// A capture in progress (see `asa_analyze.capture`), callable from any thread (one call at
/// a time).
#[pyclass(module = "asa_analyze._native", name = "NativeCapture")]
pub struct NativeCapture {
    capture: Mutex<Capture>,
    spec: RunSpec,
}

impl NativeCapture {
    /// The capture, locked (a panic that poisoned it is an error).
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Capture>> {
        self.capture
            .lock()
            .map_err(|_| AsaError::new_err("internal error: a capture call panicked earlier"))
    }

    /// `f` of the capture, the lock held.
    fn with<T>(&self, f: impl FnOnce(&mut Capture) -> asa_core::Result<T>) -> PyResult<T> {
        f(&mut *self.lock()?).map_err(to_py)
    }
}

#[pymethods]
impl NativeCapture {
    #[new]
    #[pyo3(signature = (modules, stack = None, seq_len = None, **options))]
    fn new(
        modules: Vec<ModuleArg>,
        stack: Option<String>,
        seq_len: Option<usize>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        no_panic(|| {
            let values = run_values("capture", options)?;
            if let Some(name) = values
                .keys()
                .find(|n| !Capture::OPTIONS.contains(&n.as_str()))
            {
                return Err(to_py(Error::option(
                    name.clone(),
                    format!(
                        "does not apply to a capture, which reduces the model's own forward passes (its options: {})",
                        Capture::OPTIONS.join(", ")
                    ),
                )));
            }
            let run = run_options_from(&values, FrontEnd::Python).map_err(to_py)?;
            run.validate().map_err(to_py)?;
            let mut spec = run.spec;
            if !values.contains_key("metrics") {
                spec.metrics = Capture::default_metrics();
            }
            let layers = modules
                .into_iter()
                .map(ModuleArg::layer)
                .collect::<PyResult<Vec<_>>>()?;
            let mut capture = Capture::new(spec.clone(), layers, stack).map_err(to_py)?;
            if let Some(len) = seq_len {
                capture.set_length(len).map_err(to_py)?;
            }
            Ok(NativeCapture {
                capture: Mutex::new(capture),
                spec,
            })
        })
    }

    /// Module `layer`'s output for q, k, v (and its sink logits), written into `out`
    /// (a C-contiguous CPU tensor of q's shape and dtype); in a padded batch `spans` gives
    /// each sequence's tokens `(start, len)` (its padded rows of `out` are zeros).
    #[pyo3(signature = (layer, q, k, v, scale, out, sinks = None, spans = None))]
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        py: Python<'_>,
        layer: usize,
        q: HostTensor,
        k: HostTensor,
        v: HostTensor,
        scale: f64,
        out: HostTensor,
        sinks: Option<HostTensor>,
        spans: Option<Vec<(usize, usize)>>,
    ) -> PyResult<()> {
        no_panic(|| {
            let call = AttentionCall {
                q: q.tensor()?,
                k: k.tensor()?,
                v: v.tensor()?,
                scale,
                sinks: sinks.map(|s| s.tensor()).transpose()?,
                spans: spans.map(to_spans),
            };
            let result = py.detach(|| self.with(|c| c.attend(layer, call)))?;
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
    /// key heads, q's dtype `F32` or `BF16`, each sequence's tokens `(start, len)` in a
    /// padded batch): the row table each block comes with, as a dict (`width`; `bands`, the
    /// distance ranges `[lo, hi)` after the `first` band's column 6; `max_logit_column`;
    /// `key_blocks` G and `key_block_column`, over `positions`; `key_sums_from`),
    /// `weight_rows`, the query ranges `[start, end)` whose weights are read (a block holding
    /// one hands its weights over), and `groups`: `(first, count, start, len)`, sequences
    /// `first .. first + count` holding positions `start .. start + len`, whose blocks come in
    /// turn, each group's positions from 0.
    #[pyo3(signature = (layer, dims, kv, dtype, spans = None))]
    fn begin_blocks<'py>(
        &self,
        py: Python<'py>,
        layer: usize,
        dims: [usize; 4],
        kv: usize,
        dtype: &str,
        spans: Option<Vec<(usize, usize)>>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        no_panic(|| {
            let dtype = if dtype == "BF16" {
                DType::BF16
            } else {
                DType::F32
            };
            let spans = spans.map(to_spans);
            let (wants, weight_rows, groups) =
                self.with(|c| c.begin_blocks(layer, dims, kv, dtype, spans.as_deref()))?;
            let layout = pyo3::types::PyDict::new(py);
            layout.set_item("width", wants.width())?;
            layout.set_item("bands", wants.bands.clone())?;
            layout.set_item("max_logit_column", wants.max_logit_column())?;
            layout.set_item("key_blocks", wants.key_blocks.map(|k| k.blocks))?;
            layout.set_item("key_block_column", wants.key_block_columns())?;
            layout.set_item("key_sums_from", wants.key_sums_from)?;
            let weight_rows: Vec<(usize, usize)> =
                weight_rows.iter().map(|r| (r.start, r.end)).collect();
            layout.set_item("weight_rows", weight_rows)?;
            layout.set_item("positions", wants.key_blocks.map(|k| k.seq_len))?;
            let groups: Vec<(usize, usize, usize, usize)> = groups
                .iter()
                .map(|g| (g.first, g.count, g.start, g.len))
                .collect();
            layout.set_item("groups", groups)?;
            Ok(layout)
        })
    }

    /// One block of group `group` of the open call (host f32 tensors): its row table, and
    /// its key sums, weights and sink mass where the layout asks for them.
    #[pyo3(signature = (layer, group, q_start, n, table, key_sums = None, pattern = None, sink_mass = None))]
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        py: Python<'_>,
        layer: usize,
        group: usize,
        q_start: usize,
        n: usize,
        table: HostTensor,
        key_sums: Option<HostTensor>,
        pattern: Option<HostTensor>,
        sink_mass: Option<HostTensor>,
    ) -> PyResult<()> {
        no_panic(|| {
            let f32_tensor = |t: &HostTensor| -> PyResult<Tensor> {
                if t.dtype != "F32" {
                    return Err(usage(format!("a block tensor is {}, not F32", t.dtype)));
                }
                t.tensor()
            };
            let block = ExternalBlock {
                table: f32_tensor(&table)?,
                key_sums: key_sums.as_ref().map(f32_tensor).transpose()?,
                pattern: pattern.as_ref().map(f32_tensor).transpose()?,
                sink_mass: sink_mass.as_ref().map(f32_tensor).transpose()?,
            };
            py.detach(|| self.with(|c| c.block(layer, group, q_start, n, block)))
        })
    }

    /// The end of the open call.
    fn end_blocks(&self, py: Python<'_>, layer: usize) -> PyResult<()> {
        no_panic(|| py.detach(|| self.with(|c| c.end_blocks(layer))))
    }

    /// Places this process's sequences among those of `world` data-parallel ranks (before
    /// the first call): each pass's sequences rank after rank, so the ranks' states merge.
    fn place(&self, rank: usize, world: usize) -> PyResult<()> {
        no_panic(|| self.with(|c| c.place(Placement { rank, world })))
    }

    /// The pooled state (bytes), for `merge_state` on rank 0.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        no_panic(|| {
            let bytes = self.with(|c| c.state())?;
            Ok(pyo3::types::PyBytes::new(py, &bytes))
        })
    }

    /// Folds in another rank's `state()`.
    fn merge_state(&self, state: &[u8]) -> PyResult<()> {
        no_panic(|| self.with(|c| c.merge_state(state)))
    }

    /// The result of a model's stacks, each captured by one of `captures` (in that order):
    /// one model per stack that was called, its tables with a `stack` column.
    #[staticmethod]
    fn stacked_result(
        captures: Vec<PyRef<'_, NativeCapture>>,
        label: &str,
        model_class: &str,
        transformers_version: &str,
        device: &str,
    ) -> PyResult<NativeResult> {
        no_panic(|| {
            let guards = captures
                .iter()
                .map(|c| c.lock())
                .collect::<PyResult<Vec<_>>>()?;
            let each: Vec<&Capture> = guards.iter().map(|g| &**g).collect();
            let output =
                Capture::stacked_output(&each, label, model_class, transformers_version, device)
                    .map_err(to_py)?;
            let spec = captures.first().map(|c| c.spec.clone()).unwrap_or_default();
            Ok(captured_result(output, spec))
        })
    }

    /// The captured model's result, labelled `label`.
    fn result(
        &self,
        label: &str,
        model_class: &str,
        transformers_version: &str,
        device: &str,
    ) -> PyResult<NativeResult> {
        no_panic(|| {
            let output =
                self.with(|c| c.output(label, model_class, transformers_version, device))?;
            Ok(captured_result(output, self.spec.clone()))
        })
    }
}

/// A capture's output with its run.json record (the capture's settings `spec`).
fn captured_result(output: RunOutput, spec: RunSpec) -> NativeResult {
    let options = RunOptions {
        spec,
        ..RunOptions::default()
    };
    let record = output.record("python capture", &options);
    NativeResult { output, record }
}

/// Writes `values` (f32 or bf16, as `out`'s dtype) into the memory of `out`.
fn write_into(values: &Tensor, out: &HostTensor) -> asa_core::Result<()> {
    let values = values.flatten_all()?;
    match out.dtype.as_str() {
        "BF16" => {
            let data = values.to_dtype(DType::BF16)?.to_vec1::<half::bf16>()?;
            // SAFETY: `out` is a C-contiguous CPU bfloat16 tensor of as many values, which
            // Python holds and nobody else touches during this call
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    out.address as *mut half::bf16,
                    data.len(),
                )
            };
        }
        _ => {
            let data = values.to_dtype(DType::F32)?.to_vec1::<f32>()?;
            // SAFETY: as above, a float32 tensor
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), out.address as *mut f32, data.len())
            };
        }
    }
    Ok(())
}
