//! Launcher of the GPU's flash-style attention (`flash.cu`): a query block's output and row
//! table from q, k and v on the device, the block's weights never held; the GPU side of
//! `attention::flash::causal_attention`, with the same tables.

use std::ops::Range;

use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute_enum;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorageSlice, WrapErr};
use candle_core::{DType, Layout, Storage, Tensor};

use super::rows::{band_table, BandTable};
use super::{device_tensor, with_cuda_storage};
use crate::beta_length::BetaLength;
use crate::qkv::{Qkv, QueryBlock};
use crate::row_table::RowWants;
use asa_core::error::{Error, Result};

/// PTX of `flash.cu`.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/asa_flash.ptx"));

/// Queries per thread block (`WARPS` in flash.cu: a warp per query).
const WARPS: usize = 8;

/// Keys per shared-memory tile (`KEY_TILE` in flash.cu).
const KEY_TILE: usize = 32;

/// Warps, and queries, per thread block of the tensor-core kernel (`MMA_WARPS` and
/// `MMA_ROWS` in flash_mma.cuh: 16 queries per warp).
const MMA_WARPS: usize = 4;
const MMA_ROWS: usize = MMA_WARPS * 16;

/// The largest head dimension the kernels are compiled for.
pub use crate::GPU_FLASH_HEAD_DIM as MAX_HEAD_DIM;

/// Row-table rows one launch writes at most (about 100 MB of table at 25 columns).
const LAUNCH_ROWS: usize = 1 << 20;

/// Queries per launch for `rows_per_query` rows per query (batch x heads) and sequences of
/// `t` tokens: the whole sequence where its row tables stay under [`LAUNCH_ROWS`] rows, never
/// fewer than the run's `block`. The kernel holds no map, so the run's block (sized for the
/// maps of the materialised kernels) would only cut the grid into launches too small to
/// fill the GPU (at 32k tokens, a block of 113 queries of SmolLM2's 9 heads is 18 thread
/// blocks on 132 multiprocessors).
pub fn launch_block(block: usize, rows_per_query: usize, t: usize) -> usize {
    (LAUNCH_ROWS / rows_per_query.max(1))
        .max(block)
        .min(t.max(1))
}

/// How the logits are made on the device (`flash::TileLogits`, its tables on the GPU as
/// f32 tensors): raw q.k times `scale`, then the rule.
#[derive(Debug, Clone)]
pub enum DeviceLogits {
    Plain,
    /// LogN: y = s * (s_h ln(i + 1)), `head_scale` `[heads]`.
    Logn {
        head_scale: Tensor,
    },
    /// y = cap tanh(s / cap).
    SoftCap {
        cap: f32,
    },
    /// Scale-invariant: y = s a_t + m_t, the tables `[t]` stored reversed
    /// (`crate::attention::reversed_coefficients`).
    Distance {
        a: Tensor,
        m: Tensor,
    },
}

/// Affine-Scaled weights alpha p + beta on the device: `alpha` `[batch, heads, t]`,
/// `alpha_ma` `[heads]` (f32), beta's N.
#[derive(Debug, Clone)]
pub struct DeviceAffine {
    pub alpha: Tensor,
    pub alpha_ma: Tensor,
    pub beta_length: BetaLength,
    pub seq_len: usize,
}

/// What one call computes besides q, k and v.
#[derive(Debug, Clone, Copy)]
pub struct FlashLogits<'a> {
    pub scale: f32,
    pub rule: &'a DeviceLogits,
    pub affine: Option<&'a DeviceAffine>,
    /// Per-head sink logits `[heads]` f32 in the denominator.
    pub sinks: Option<&'a Tensor>,
}

/// Shapes and settings of one launch (`struct FlashParams` in flash.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct FlashParams {
    heads: i32,
    kv: i32,
    t: i32,
    d: i32,
    q_start: i32,
    n: i32,
    window: i32,
    scale: f32,
    rule: i32,
    cap: f32,
    has_sink: i32,
    affine: i32,
    beta_visible: i32,
    seq_len: i32,
    want_rows: i32,
    width: i32,
    want_first: i32,
    want_sum: i32,
    want_entropy: i32,
    nbands: i32,
    max_logit_col: i32,
}

// SAFETY: plain old data, laid out as `struct FlashParams` in flash.cu
unsafe impl DeviceRepr for FlashParams {}

/// The block's output `[batch, heads, n, d]` in q's dtype and its row table
/// `[batch * heads * n, wants.width()]` f32 (with no `wants`, one column: the sink mass), left
/// on the device, from q `[batch, heads, t, d]` and k, v `[batch, kv, t, d]` (contiguous, one
/// dtype of f32, bf16 and f16, on a GPU). `None` where the kernel does not apply (another
/// device or dtype, a head dimension over [`MAX_HEAD_DIM`], more bands than the kernels hold,
/// shapes that do not fit): the caller's other kernels run.
pub fn causal_attention(
    qkv: Qkv<Tensor>,
    block: QueryBlock,
    logits: FlashLogits,
    wants: Option<&RowWants>,
) -> Result<Option<(Tensor, Tensor)>> {
    causal_attention_on(qkv, block, logits, wants, Engine::Fastest)
}

/// Which of flash.cu's kernels a call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The tensor cores where they apply (bf16 and f16, head dimension 64 or 128, aligned
    /// tensors), else the CUDA cores.
    Fastest,
    /// The CUDA cores' kernel (every dtype and head dimension up to 256): what the tests
    /// compare the tensor cores' with (`asa_engine`'s `attention::cuda_tests`).
    Cores,
}

/// [`causal_attention`] on the kernels `engine` allows.
pub fn causal_attention_on(
    qkv: Qkv<Tensor>,
    block: QueryBlock,
    logits: FlashLogits,
    wants: Option<&RowWants>,
    engine: Engine,
) -> Result<Option<(Tensor, Tensor)>> {
    let Some(params) = params(qkv, block, logits, wants)? else {
        return Ok(None);
    };
    let Some(bands) = band_table(wants.unwrap_or(&RowWants::default())) else {
        return Ok(None);
    };
    let Some(extras) = Extras::of(&logits, qkv.q)? else {
        return Ok(None);
    };
    let (k, v) = (qkv.k.contiguous()?, qkv.v.contiguous()?);
    let q = qkv.q.contiguous()?;
    with_cuda_storage(&q, |dev, qs, qr| {
        with_cuda_storage(&k, |_, ks, kr| {
            with_cuda_storage(&v, |_, vs, vr| {
                // the tensor cores read 16 bytes at a time
                let aligned = [&qr, &kr, &vr].iter().all(|r| r.start % 8 == 0);
                let ranges = [qr, kr, vr];
                let launch = Launch {
                    dev,
                    params,
                    bands,
                    extras: &extras,
                    tensor_cores: engine == Engine::Fastest && aligned,
                };
                match (qs, ks, vs) {
                    (
                        CudaStorageSlice::F32(q),
                        CudaStorageSlice::F32(k),
                        CudaStorageSlice::F32(v),
                    ) => launch.run_on("f32", Qkv { q, k, v }, ranges),
                    (
                        CudaStorageSlice::BF16(q),
                        CudaStorageSlice::BF16(k),
                        CudaStorageSlice::BF16(v),
                    ) => launch.run_on("bf16", Qkv { q, k, v }, ranges),
                    (
                        CudaStorageSlice::F16(q),
                        CudaStorageSlice::F16(k),
                        CudaStorageSlice::F16(v),
                    ) => launch.run_on("f16", Qkv { q, k, v }, ranges),
                    _ => Ok(None),
                }
            })
        })
    })
}

/// The launch's settings, or `None` where the shapes do not fit the kernels.
fn params(
    qkv: Qkv<Tensor>,
    block: QueryBlock,
    logits: FlashLogits,
    wants: Option<&RowWants>,
) -> Result<Option<FlashParams>> {
    let Qkv { q, k, v } = qkv;
    let (b, heads, t, d) = q.dims4()?;
    let kv = k.dim(1)?;
    let fits = block.n > 0
        && block.q_start + block.n <= t
        && kv > 0
        && heads % kv == 0
        && k.dims4()? == (b, kv, t, d)
        && v.dims4()? == (b, kv, t, d)
        && d > 0
        && d <= MAX_HEAD_DIM
        && t < i32::MAX as usize / MAX_HEAD_DIM
        && q.dtype() == k.dtype()
        && q.dtype() == v.dtype()
        && !(logits.affine.is_some() && logits.sinks.is_some())
        // the kernel masks sliding windows only (plan gives it no chunked layer)
        && !matches!(block.window, crate::KeyWindow::Chunked(_));
    if !fits {
        return Ok(None);
    }
    let (rule, cap) = match logits.rule {
        DeviceLogits::Plain => (0, 1.0),
        DeviceLogits::Logn { .. } => (1, 1.0),
        DeviceLogits::SoftCap { cap } => (2, *cap),
        DeviceLogits::Distance { .. } => (3, 1.0),
    };
    let default = RowWants::default();
    let w = wants.unwrap_or(&default);
    Ok(Some(FlashParams {
        heads: heads as i32,
        kv: kv as i32,
        t: t as i32,
        d: d as i32,
        q_start: block.q_start as i32,
        n: block.n as i32,
        window: block.window.sliding_size().map_or(0, |s| s.min(t) as i32),
        scale: logits.scale,
        rule,
        cap,
        has_sink: i32::from(logits.sinks.is_some()),
        affine: i32::from(logits.affine.is_some()),
        beta_visible: i32::from(
            logits
                .affine
                .is_some_and(|a| a.beta_length == BetaLength::Visible),
        ),
        seq_len: logits.affine.map_or(t, |a| a.seq_len) as i32,
        want_rows: i32::from(wants.is_some()),
        width: wants.map_or(1, RowWants::width) as i32,
        want_first: i32::from(w.first),
        want_sum: i32::from(w.sum),
        want_entropy: i32::from(w.entropy),
        nbands: w.bands.len() as i32,
        max_logit_col: wants
            .and_then(RowWants::max_logit_column)
            .map_or(-1, |c| c as i32),
    }))
}

/// The f32 device tensors a launch reads besides q, k and v (flattened, contiguous).
struct Extras {
    sinks: Option<Tensor>,
    head_scale: Option<Tensor>,
    dist: Option<(Tensor, Tensor)>,
    alpha: Option<(Tensor, Tensor)>,
}

impl Extras {
    /// The sinks, the LogN scales, the distance tables, alpha and alpha_ma, in the kernel's
    /// argument order.
    fn tensors(&self) -> impl Iterator<Item = Option<&Tensor>> {
        [
            self.sinks.as_ref(),
            self.head_scale.as_ref(),
            self.dist.as_ref().map(|d| &d.0),
            self.dist.as_ref().map(|d| &d.1),
            self.alpha.as_ref().map(|a| &a.0),
            self.alpha.as_ref().map(|a| &a.1),
        ]
        .into_iter()
    }

    /// The tables of `logits` for `q` `[b, heads, t, d]`; `None` where one is not f32 or
    /// shorter than the kernel reads (sinks, LogN scales and alpha_ma: `heads`; distance
    /// tables: `t`; alpha: `b * heads * t`).
    fn of(logits: &FlashLogits, q: &Tensor) -> Result<Option<Self>> {
        let (b, heads, t, _) = q.dims4()?;
        let flat_of = |x: &Tensor, len: usize| -> Result<Option<Tensor>> {
            let fits = x.dtype() == DType::F32 && x.elem_count() >= len;
            Ok(fits.then_some(x.flatten_all()?.contiguous()?))
        };
        let flat = |x: &Tensor| flat_of(x, heads);
        let mut extras = Extras {
            sinks: None,
            head_scale: None,
            dist: None,
            alpha: None,
        };
        if let Some(s) = logits.sinks {
            let Some(s) = flat(s)? else { return Ok(None) };
            extras.sinks = Some(s);
        }
        match logits.rule {
            DeviceLogits::Logn { head_scale } => {
                let Some(s) = flat(head_scale)? else {
                    return Ok(None);
                };
                extras.head_scale = Some(s);
            }
            DeviceLogits::Distance { a, m } => {
                let (Some(a), Some(m)) = (flat_of(a, t)?, flat_of(m, t)?) else {
                    return Ok(None);
                };
                extras.dist = Some((a, m));
            }
            DeviceLogits::Plain | DeviceLogits::SoftCap { .. } => {}
        }
        if let Some(affine) = logits.affine {
            let alpha = flat_of(&affine.alpha, b * heads * t)?;
            let (Some(a), Some(ma)) = (alpha, flat(&affine.alpha_ma)?) else {
                return Ok(None);
            };
            extras.alpha = Some((a, ma));
        }
        Ok(Some(extras))
    }
}

/// One launch on `dev`.
struct Launch<'a> {
    dev: &'a CudaDevice,
    params: FlashParams,
    bands: BandTable,
    extras: &'a Extras,
    /// The tensor-core kernel may run (it does for bf16 and f16 of head dimension 64, 128).
    tensor_cores: bool,
}

impl Launch<'_> {
    /// [`Launch::run`] on the parts `ranges` of q's, k's and v's device memory.
    fn run_on<T: DeviceRepr + CudaDType>(
        &self,
        name: &str,
        qkv: Qkv<CudaSlice<T>>,
        ranges: [Range<usize>; 3],
    ) -> Result<Option<(Tensor, Tensor)>> {
        let [qr, kr, vr] = ranges;
        let (q, k, v) = (qkv.q.slice(qr), qkv.k.slice(kr), qkv.v.slice(vr));
        self.run(
            name,
            Qkv {
                q: &q,
                k: &k,
                v: &v,
            },
        )
    }

    /// Runs the kernel for dtype `name` (f32, bf16, f16) on q, k and v: the kernel chosen,
    /// its outputs allocated, its arguments pushed, the launch, the outputs as tensors.
    fn run<T: DeviceRepr + CudaDType>(
        &self,
        name: &str,
        qkv: Qkv<CudaView<'_, T>>,
    ) -> Result<Option<(Tensor, Tensor)>> {
        let Qkv { q, k, v } = qkv;
        let (p, dev) = (self.params, self.dev);
        let choice = self.choose(name);
        let func = choice.load(dev)?;
        let b = q.len() / (p.heads * p.t * p.d) as usize;
        let rows = b * (p.heads * p.n) as usize;
        // SAFETY: the kernel writes every element of every row of the output
        let out: CudaSlice<T> = unsafe { dev.alloc::<T>(rows * p.d as usize)? };
        let table = dev.alloc_zeros::<f32>(rows * p.width as usize)?;
        let stream = dev.cuda_stream();
        let mut args = stream.launch_builder(&func);
        args.arg(q).arg(k).arg(v).arg(&out).arg(&table);
        // absent tables are never read, but each argument must be a valid pointer
        let guards: Vec<_> = self
            .extras
            .tensors()
            .map(|t| t.map(Tensor::storage_and_layout))
            .collect();
        let views = guards
            .iter()
            .map(|g| g.as_ref().map(|(s, l)| f32_view(s, l)).transpose())
            .collect::<Result<Vec<_>>>()?;
        for view in &views {
            match view {
                Some(view) => args.arg(view),
                None => args.arg(&table),
            };
        }
        args.arg(&p).arg(&self.bands);
        // SAFETY: the arguments match the kernel's signature; q holds b x heads x t x d
        // elements, k and v b x kv x t x d, out rows x d, the table rows x width floats, and
        // each table the length `params` checked; the kernel reads and writes inside them
        unsafe { args.launch(choice.config(&p, b)) }.w()?;
        let out_shape = (b, p.heads as usize, p.n as usize, p.d as usize);
        Ok(Some((
            device_tensor(out, dev, out_shape),
            device_tensor(table, dev, (rows, p.width as usize)),
        )))
    }

    /// The kernel for dtype `name`: the tensor cores' where they apply, else the CUDA
    /// cores' of the smallest compiled head dimension that holds `d`.
    fn choose(&self, name: &str) -> KernelChoice {
        let d = self.params.d as usize;
        if self.tensor_cores && name != "f32" && matches!(d, 64 | 128) {
            // static shared memory
            return KernelChoice {
                name: format!("flash_mma_{name}_d{d}"),
                rows_per_block: MMA_ROWS,
                threads: MMA_WARPS * 32,
                shared: 0,
            };
        }
        let dmax = [64, 128, 256]
            .into_iter()
            .find(|&m| d <= m)
            .unwrap_or(MAX_HEAD_DIM);
        KernelChoice {
            name: format!("flash_rows_{name}_d{dmax}"),
            rows_per_block: WARPS,
            threads: WARPS * 32,
            shared: (KEY_TILE * (dmax + 1) + KEY_TILE * dmax + WARPS * dmax) * 4,
        }
    }
}

/// One of flash.cu's kernels and how it is launched.
struct KernelChoice {
    name: String,
    /// Queries per thread block.
    rows_per_block: usize,
    threads: usize,
    /// Dynamic shared memory in bytes.
    shared: usize,
}

impl KernelChoice {
    /// The kernel on `dev`, allowed its shared memory.
    fn load(&self, dev: &CudaDevice) -> Result<CudaFunction> {
        let func = dev
            .get_or_load_custom_func(&self.name, "asa_analyze_flash", PTX)?
            .into_cuda_function();
        if self.shared > 48 * 1024 {
            let attribute =
                CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            func.set_attribute(attribute, self.shared as i32).w()?;
        }
        Ok(func)
    }

    /// The grid of `p`'s queries x heads x `b` sequences.
    fn config(&self, p: &FlashParams, b: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (
                (p.n as usize).div_ceil(self.rows_per_block) as u32,
                p.heads as u32,
                b as u32,
            ),
            block_dim: (self.threads as u32, 1, 1),
            shared_mem_bytes: self.shared as u32,
        }
    }
}

/// The f32 device memory of a contiguous tensor's storage.
fn f32_view<'a>(storage: &'a Storage, layout: &Layout) -> Result<CudaView<'a, f32>> {
    let range = layout.contiguous_offsets();
    match (storage, range) {
        (Storage::Cuda(cuda), Some((start, end))) => match &cuda.slice {
            CudaStorageSlice::F32(s) => Ok(s.slice(start..end)),
            _ => Err(unfit("a table is not f32")),
        },
        _ => Err(unfit("a table is not a contiguous CUDA tensor")),
    }
}

/// The error of a table that `Extras::of` should have refused.
fn unfit(what: &str) -> Error {
    candle_core::Error::Msg(format!(
        "internal error: flash attention on the GPU: {what}"
    ))
    .into()
}
