//! Writes the CUDA header of the row table's layout (`$OUT_DIR/row_table.h`, from
//! src/row_columns.rs, the one definition the library also reads). With the `cuda`
//! feature, compiles src/cuda/kernels.cu and src/cuda/flash.cu (which include that header)
//! to PTX, one module each, with the
//! toolkit's nvcc (`NVCC`, else `nvcc` on PATH) for `CUDA_COMPUTE_CAP` (e.g. 90; default
//! 80: the driver compiles the PTX for newer GPUs at load time).

use std::path::PathBuf;
use std::process::Command;

#[allow(dead_code)]
mod row_columns {
    include!("src/row_columns.rs");
}

fn main() {
    println!("cargo:rerun-if-changed=src/cuda/kernels.cu");
    println!("cargo:rerun-if-changed=src/cuda/flash.cu");
    println!("cargo:rerun-if-changed=src/cuda/flash_mma.cuh");
    println!("cargo:rerun-if-changed=src/cuda/common.cuh");
    println!("cargo:rerun-if-changed=src/row_columns.rs");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = out_dir.join("row_table.h");
    std::fs::write(&header, row_columns::cuda_header())
        .unwrap_or_else(|err| panic!("{}: {err}", header.display()));
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let cap: String = std::env::var("CUDA_COMPUTE_CAP")
        .unwrap_or_else(|_| "80".into())
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    for (source, ptx) in [("kernels", "asa_kernels"), ("flash", "asa_flash")] {
        let source = format!("src/cuda/{source}.cu");
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-std=c++17"])
            .arg(format!("-arch=compute_{cap}"))
            .arg("-I")
            .arg(&out_dir)
            .arg(&source)
            .arg("-o")
            .arg(out_dir.join(format!("{ptx}.ptx")))
            .status()
            .unwrap_or_else(|err| panic!("the cuda feature needs nvcc ({nvcc}): {err}"));
        assert!(status.success(), "nvcc failed on {source}");
    }
}
