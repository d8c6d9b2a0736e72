//! A tensor times a scalar as torch multiplies a tensor by a Python float: the scalar kept
//! in f32 and the product rounded once to a half type (candle's `affine` would round the
//! scalar itself to bf16 first: 1.9 becomes 1.8984375).

use candle_core::{DType, Tensor};

use asa_core::error::Result;

/// `xs * factor`, computed in f32 for bf16 and f16 tensors.
pub fn times(xs: &Tensor, factor: f64) -> Result<Tensor> {
    Ok(match xs.dtype() {
        DType::BF16 | DType::F16 => xs
            .to_dtype(DType::F32)?
            .affine(factor, 0.0)?
            .to_dtype(xs.dtype())?,
        _ => xs.affine(factor, 0.0)?,
    })
}
