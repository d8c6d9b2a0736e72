//! With the `cuda` feature, compiles src/cuda/kernels.cu to PTX with the toolkit's nvcc
//! (`NVCC`, else `nvcc` on PATH) for `CUDA_COMPUTE_CAP` (e.g. 90; default 80: the driver
//! compiles the PTX for newer GPUs at load time). Without the feature it does nothing.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/cuda/kernels.cu");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("asa_kernels.ptx");
    let cap: String = std::env::var("CUDA_COMPUTE_CAP")
        .unwrap_or_else(|_| "80".into())
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17"])
        .arg(format!("-arch=compute_{cap}"))
        .arg("src/cuda/kernels.cu")
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap_or_else(|err| panic!("the cuda feature needs nvcc ({nvcc}): {err}"));
    assert!(status.success(), "nvcc failed on src/cuda/kernels.cu");
}
