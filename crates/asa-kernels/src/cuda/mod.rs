//! CUDA kernels of the metric reductions (feature `cuda`): `kernels.cu`, compiled to PTX by
//! build.rs with the toolkit's nvcc, loaded once per device.

pub mod flash;
pub mod nll;
pub mod rows;
pub mod softmax;

use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaSlice, CudaView};
use std::ops::Range;

use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorageSlice};
use candle_core::{Device, Storage, Tensor};

use asa_core::error::Result;

/// Sets up `dev` for analysis on its one stream: freed device memory stays in the
/// allocator's pool for the next query block (the default pool hands it back to the driver
/// at every synchronisation, and the next block maps it again), and allocations carry no
/// events (one stream orders every use). Call before any tensor is made on `dev`.
pub fn prepare(dev: &CudaDevice) {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let ctx = dev.cuda_stream().context().clone();
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: plain driver calls on the context's own device with valid out-pointers; a
    // failure leaves the pool's default in place, which is only slower
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) == sys::CUresult::CUDA_SUCCESS
        {
            let attribute = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
            let value = (&mut threshold as *mut u64).cast();
            let _ = sys::cuMemPoolSetAttribute(pool, attribute, value);
        }
        // SAFETY: the analysis uses the device's one stream only
        dev.disable_event_tracking();
    }
}

/// A tensor of `shape` over the device memory `slice` of `dev` (no copy).
fn device_tensor<T: CudaDType>(
    slice: CudaSlice<T>,
    dev: &CudaDevice,
    shape: impl Into<candle_core::Shape>,
) -> Tensor {
    Tensor::from_storage(
        Storage::Cuda(T::wrap_cuda_slice(slice, dev.clone())),
        shape,
        candle_core::op::BackpropOp::none(),
        false,
    )
}

/// PTX of `kernels.cu`.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/asa_kernels.ptx"));

/// The kernel `name` of `kernels.cu` on `dev` (the module is loaded at the first call).
fn kernel(dev: &CudaDevice, name: &str) -> Result<CudaFunction> {
    Ok(dev
        .get_or_load_custom_func(name, "asa_analyze_kernels", PTX)?
        .into_cuda_function())
}

/// Runs `f` on the device storage of a contiguous CUDA tensor without copying: the storage's
/// slice and the range of the tensor's elements in it; `None` for other devices and
/// layouts (those use candle ops).
fn with_cuda_storage<R>(
    xs: &Tensor,
    f: impl FnOnce(&CudaDevice, &CudaStorageSlice, Range<usize>) -> Result<Option<R>>,
) -> Result<Option<R>> {
    let Device::Cuda(dev) = xs.device() else {
        return Ok(None);
    };
    let (storage, layout) = xs.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Ok(None);
    };
    let Storage::Cuda(cuda) = &*storage else {
        return Ok(None);
    };
    f(dev, &cuda.slice, start..end)
}

/// Runs `f` on the device memory of a contiguous f32 CUDA tensor without copying; `None`
/// for other devices, dtypes or layouts (those use candle ops).
fn with_cuda_f32<R>(
    xs: &Tensor,
    f: impl FnOnce(&CudaDevice, &CudaView<'_, f32>) -> Result<R>,
) -> Result<Option<R>> {
    with_cuda_storage(xs, |dev, slice, range| match slice {
        CudaStorageSlice::F32(s) => f(dev, &s.slice(range)).map(Some),
        _ => Ok(None),
    })
}
