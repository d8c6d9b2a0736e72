//! Device and dtype choice (`--device auto|cpu|cuda[:N]`, `--dtype f32|bf16|f16`).

use crate::parse_error::ParseError;
use candle_core::{DType, Device};

use crate::error::{Error, Result};

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
                return Err(Error::usage(format!(
                    "--device cuda:{n}: this asa-analyze was built without `cuda`; rebuild with `cargo build --release --features cuda`"
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
        crate::cuda::prepare(dev);
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

/// The memory this process may still take, in bytes: Linux `/proc/meminfo` MemAvailable,
/// less where the process's cgroup (`memory.max`) or address-space limit (`ulimit -v`)
/// leaves less. `None` when MemAvailable cannot be read.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    let free = kib * 1024;
    Some(
        [cgroup_headroom(), address_space_headroom()]
            .into_iter()
            .flatten()
            .fold(free, u64::min),
    )
}

/// What the process's cgroup v2 `memory.max` leaves above its `memory.current`.
fn cgroup_headroom() -> Option<u64> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(read("memory.max")?.saturating_sub(read("memory.current")?))
}

/// What `RLIMIT_AS` (`ulimit -v`) leaves above the process's present virtual size.
#[cfg(unix)]
fn address_space_headroom() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads the calling process's own limit into a local struct
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((limit.rlim_cur as u64).saturating_sub(kib * 1024))
}

#[cfg(not(unix))]
fn address_space_headroom() -> Option<u64> {
    None
}
