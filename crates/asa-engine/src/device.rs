//! Device and dtype choice (`--device auto|cpu|cuda[:N]`, `--dtype f32|bf16|f16`).

use asa_core::parse_error::ParseError;
use candle_core::{DType, Device};

use asa_core::error::{Error, Result};

/// Where the forward pass runs, as the user asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRequest {
    /// CUDA device 0 when the build and machine have one, else CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA device N.
    Cuda(usize),
}

impl std::str::FromStr for DeviceRequest {
    type Err = ParseError;

    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        match s {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" => Ok(DeviceRequest::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceRequest::Cuda(n)),
                _ => Err(ParseError::not_a(
                    "a device",
                    other,
                    "auto, cpu, cuda, cuda:N",
                )),
            },
        }
    }
}

/// As the option spells it: `auto`, `cpu`, `cuda:N`.
impl std::fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Resolves a request into a candle device, with a clear error when CUDA is unavailable.
pub fn resolve_device(request: DeviceRequest) -> Result<Device> {
    match request {
        DeviceRequest::Cpu => Ok(Device::Cpu),
        DeviceRequest::Auto => {
            if cfg!(feature = "cuda") {
                Ok(prepared(
                    Device::cuda_if_available(0).unwrap_or(Device::Cpu),
                ))
            } else {
                Ok(Device::Cpu)
            }
        }
        DeviceRequest::Cuda(n) => {
            if !cfg!(feature = "cuda") {
                return Err(Error::option("--device", format!(
                    "cuda:{n}: this asa-analyze was built without `cuda`; rebuild with `cargo build --release --features cuda`"
                )));
            }
            let device = Device::new_cuda(n).map_err(|e| {
                Error::failed(format!("--device cuda:{n}: no usable CUDA device"), e)
            })?;
            Ok(prepared(device))
        }
    }
}

/// `device`, set up for analysis where it is a GPU (`cuda::prepare`).
fn prepared(device: Device) -> Device {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = &device {
        asa_kernels::cuda::prepare(dev);
    }
    device
}

/// Bytes free on a GPU now (`None` on the CPU, or where it cannot be read).
pub fn free_device_memory(device: &Device) -> Option<u64> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => {
            let (free, _total) = dev.cuda_stream().context().mem_get_info().ok()?;
            Some(free as u64)
        }
        _ => None,
    }
}

/// The analysis dtype (`--dtype`); `None` means f32 on CPU and bf16 on GPU.
pub fn resolve_dtype(requested: Option<DType>, device: &Device) -> DType {
    requested.unwrap_or(if device.is_cuda() {
        DType::BF16
    } else {
        DType::F32
    })
}

/// Parses `f32`, `bf16`, `f16`.
pub fn parse_dtype(s: &str) -> std::result::Result<DType, ParseError> {
    match s {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        "f16" => Ok(DType::F16),
        other => Err(ParseError::not_a(
            "an analysis dtype",
            other,
            "f32, bf16, f16",
        )),
    }
}
