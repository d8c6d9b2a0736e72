//! Linear projections `y = x W^T (+ b)`: candle's matmul, or, for a bf16 weight on a CPU
//! with AVX-512 BF16, the packed bf16 GEMM of [`asa_kernels::cpu::bf16_gemm`].

use candle_core::{DType, Device, Module, Storage, Tensor};
use half::bf16;

use asa_core::error::Result;
use asa_kernels::cpu::bf16_panels::{round_to_bf16, PackedWeight};
use asa_kernels::cpu::bf16_row_tiles::RowTiles;
use asa_kernels::cpu::{bf16_elementwise, bf16_gemm, bf16_glu};

/// `y = x W^T (+ b)`, weights `[out, in]`.
pub struct Linear {
    kind: Kind,
}

enum Kind {
    /// candle's matmul (f32, f16, f64, every device; bf16 where the kernel is missing).
    Candle(candle_nn::Linear),
    /// A bf16 weight packed once for the bf16 GEMM: products of bf16 values summed in
    /// f32, the bias added in f32, the output rounded once to the input's dtype (as torch's
    /// bf16 `linear` on the CPU rounds it).
    Bf16 {
        weight: PackedWeight,
        bias: Option<Vec<f32>>,
    },
    /// A bf16 CPU weight on a CPU without AVX-512 BF16 (candle's CPU matmul has no bf16):
    /// held in f32, the products of the same bf16 values in f32, the output rounded back to
    /// the input's dtype.
    F32Products(candle_nn::Linear),
}

impl Linear {
    /// A projection with weight `[out, in]` and an optional bias `[out]`. A bf16 CPU weight
    /// that no gradient flows through is packed for the bf16 GEMM when the CPU has it (the
    /// tensor itself is then dropped: packed, it takes the same memory).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        if !bf16_on_cpu(&weight) {
            return Linear::candle(weight, bias);
        }
        let kind = match bf16_gemm::available() {
            true => pack(&weight, bias.as_ref()),
            false => f32_products(&weight, bias.as_ref()),
        };
        match kind {
            Ok(kind) => Linear { kind },
            Err(_) => Linear::candle(weight, bias),
        }
    }

    /// A projection whose bf16 weight was packed as it was read
    /// ([`crate::model::weights::WeightStore::packed_rows`]), with an optional bias `[out]`.
    pub fn packed(weight: PackedWeight, bias: Option<&Tensor>) -> Result<Self> {
        let bias = match bias {
            Some(b) => Some(b.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?),
            None => None,
        };
        Ok(Linear {
            kind: Kind::Bf16 { weight, bias },
        })
    }

    /// candle's own linear layer.
    fn candle(weight: Tensor, bias: Option<Tensor>) -> Self {
        Linear {
            kind: Kind::Candle(candle_nn::Linear::new(weight, bias)),
        }
    }

    /// A projection from an already-loaded weight (e.g. tied embeddings).
    pub fn from_weight(weight: Tensor) -> Self {
        Linear::new(weight, None)
    }

    /// The projections of the first `rows` output rows and of the rest (a fused weight
    /// split, e.g. Phi-3's `gate_up_proj`).
    pub fn split_rows(&self, rows: usize) -> Result<(Linear, Linear)> {
        let (w, b) = self.weight_and_bias()?;
        let out = w.dim(0)?;
        let part = |start: usize, len: usize| -> Result<Linear> {
            let b = match &b {
                Some(b) => Some(b.narrow(0, start, len)?.contiguous()?),
                None => None,
            };
            Ok(Linear::new(w.narrow(0, start, len)?.contiguous()?, b))
        };
        Ok((part(0, rows)?, part(rows, out - rows)?))
    }

    /// Applies the projection to `[..., in]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        match &self.kind {
            Kind::Candle(inner) => Ok(inner.forward(xs)?),
            Kind::Bf16 { weight, bias } => bf16_forward(xs, weight, bias.as_deref(), xs.dtype()),
            Kind::F32Products(inner) => {
                let ys = inner.forward(&bf16_elementwise::to_f32(xs)?)?;
                match xs.dtype() == DType::BF16 && ys.device().is_cpu() {
                    true => bf16_elementwise::to_bf16(&ys),
                    false => Ok(ys.to_dtype(xs.dtype())?),
                }
            }
        }
    }

    /// Applies the projection with its output in f32: for a bf16 CPU weight the products'
    /// f32 sums, not rounded to bf16 (SPEC section 12 rounds a product's inputs only), for
    /// projections whose outputs are statistics (Affine-Scaled alpha); elsewhere
    /// [`Linear::forward`] widened.
    pub fn forward_f32(&self, xs: &Tensor) -> Result<Tensor> {
        match &self.kind {
            Kind::Bf16 { weight, bias } => bf16_forward(xs, weight, bias.as_deref(), DType::F32),
            Kind::F32Products(inner) => Ok(inner.forward(&bf16_elementwise::to_f32(xs)?)?),
            Kind::Candle(_) => Ok(self.forward(xs)?.to_dtype(DType::F32)?),
        }
    }

    /// The weight `[out, in]` and bias as tensors (unpacked again for the bf16 GEMM's).
    fn weight_and_bias(&self) -> Result<(Tensor, Option<Tensor>)> {
        Ok(match &self.kind {
            Kind::Candle(inner) => (inner.weight().clone(), inner.bias().cloned()),
            Kind::F32Products(inner) => {
                let bf16 = |t: &Tensor| t.to_dtype(DType::BF16);
                (bf16(inner.weight())?, inner.bias().map(bf16).transpose()?)
            }
            Kind::Bf16 { weight, bias } => {
                let w = Tensor::from_vec(weight.unpack(), (weight.n, weight.k), &Device::Cpu)?;
                let b = match bias {
                    Some(b) => {
                        Some(Tensor::new(b.as_slice(), &Device::Cpu)?.to_dtype(DType::BF16)?)
                    }
                    None => None,
                };
                (w, b)
            }
        })
    }
}

/// A 2-D bf16 CPU weight outside any gradient: packed for the bf16 GEMM, or held in f32
/// where the CPU lacks it.
fn bf16_on_cpu(weight: &Tensor) -> bool {
    weight.dtype() == DType::BF16
        && matches!(weight.device(), Device::Cpu)
        && weight.rank() == 2
        && !weight.is_variable()
        // a broadcast placeholder (a shapes-only store's, while a checkpoint is validated)
        // is left as it is: packing or casting would allocate the whole model
        && weight.stride().iter().all(|&s| s != 0)
}

/// The weight and bias in f32 for [`Kind::F32Products`].
fn f32_products(weight: &Tensor, bias: Option<&Tensor>) -> Result<Kind> {
    let bias = bias.map(|b| b.to_dtype(DType::F32)).transpose()?;
    Ok(Kind::F32Products(candle_nn::Linear::new(
        weight.to_dtype(DType::F32)?,
        bias,
    )))
}

fn pack(weight: &Tensor, bias: Option<&Tensor>) -> Result<Kind> {
    let (n, k) = weight.dims2()?;
    let weight = weight.contiguous()?;
    // packed from the tensor's own storage (no copy of a layer's weights on the way)
    let (storage, layout) = weight.storage_and_layout();
    let packed = match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(cpu), Some((start, end))) => {
            PackedWeight::pack(&cpu.as_slice::<bf16>()?[start..end], n, k)
        }
        _ => PackedWeight::pack(&weight.flatten_all()?.to_vec1::<bf16>()?, n, k),
    };
    Ok(Linear::packed(packed, bias)?.kind)
}

/// `xs [..., k]` (bf16 or f32, on the CPU) times the packed weight, in `dtype`.
fn bf16_forward(
    xs: &Tensor,
    weight: &PackedWeight,
    bias: Option<&[f32]>,
    dtype: DType,
) -> Result<Tensor> {
    let m = cpu_rows_of(xs, weight)?;
    let rows = bf16_rows(&xs.contiguous()?, m, weight.k)?;
    product_tensor(&rows, weight, bias, dtype, out_dims(xs, weight.n))
}

/// The rows of `xs [..., k]` against a bf16 weight `[n, k]`: an error for another k or a
/// tensor off the CPU.
fn cpu_rows_of(xs: &Tensor, weight: &PackedWeight) -> Result<usize> {
    let k = xs.dims().last().copied().unwrap_or(0);
    if xs.rank() == 0 || k != weight.k || !matches!(xs.device(), Device::Cpu) {
        let msg = format!(
            "linear: input {:?} against a bf16 weight [{}, {}]",
            xs.shape(),
            weight.n,
            weight.k
        );
        return Err(candle_core::Error::Msg(msg).into());
    }
    Ok(xs.elem_count() / k.max(1))
}

/// The dims of `xs [..., k]` projected to `n`.
fn out_dims(xs: &Tensor, n: usize) -> Vec<usize> {
    let mut dims = xs.dims().to_vec();
    dims.pop();
    dims.push(n);
    dims
}

/// `rows` times the packed weight, the bias added in f32, as a `dims` tensor in `dtype`.
fn product_tensor(
    rows: &RowTiles,
    weight: &PackedWeight,
    bias: Option<&[f32]>,
    dtype: DType,
    dims: Vec<usize>,
) -> Result<Tensor> {
    let mut out = bf16_gemm::matmul(rows, weight);
    if let Some(bias) = bias {
        for row in out.chunks_exact_mut(weight.n) {
            for (y, b) in row.iter_mut().zip(bias) {
                *y += b;
            }
        }
    }
    Ok(match dtype {
        DType::BF16 => Tensor::from_vec(round_to_bf16(&out), dims, &Device::Cpu)?,
        dtype => Tensor::from_vec(out, dims, &Device::Cpu)?.to_dtype(dtype)?,
    })
}

/// `down(silu(gate(xs)) * up(xs))` of bf16 `xs` on three packed bf16 projections, gate and
/// up without biases, in one pass from the products to the down projection's rows
/// ([`bf16_glu::swiglu_rows`]; the same bits as the projections and
/// [`bf16_glu::silu_mul`] one after the other). `None` for any other projections or input
/// (the caller composes the ops).
pub fn bf16_swiglu(
    gate: &Linear,
    up: &Linear,
    down: &Linear,
    xs: &Tensor,
) -> Result<Option<Tensor>> {
    let (
        Kind::Bf16 {
            weight: g,
            bias: None,
        },
        Kind::Bf16 {
            weight: u,
            bias: None,
        },
        Kind::Bf16 { weight: d, bias },
    ) = (&gate.kind, &up.kind, &down.kind)
    else {
        return Ok(None);
    };
    if xs.dtype() != DType::BF16 || u.k != g.k || u.n != g.n || d.k != g.n {
        return Ok(None);
    }
    let m = cpu_rows_of(xs, g)?;
    let rows = bf16_rows(&xs.contiguous()?, m, g.k)?;
    let inner = bf16_glu::swiglu_rows(&rows, g, u);
    let dims = out_dims(xs, d.n);
    Ok(Some(product_tensor(
        &inner,
        d,
        bias.as_deref(),
        DType::BF16,
        dims,
    )?))
}

/// [`bf16_swiglu`] on a CPU without AVX-512 BF16, where the three projections hold f32
/// products of the bf16 values: the same bits as the projections, [`bf16_glu::silu_mul`]
/// and the down projection one after the other (each product's sums rounded to bf16, the
/// SwiGLU in f32 from those, rounded once), with `xs` widened once and every rounding done
/// in f32 in vector registers instead of through bf16 tensors. `None` for any other
/// projections or input.
pub fn f32_products_swiglu(
    gate: &Linear,
    up: &Linear,
    down: &Linear,
    xs: &Tensor,
) -> Result<Option<Tensor>> {
    let (Kind::F32Products(g), Kind::F32Products(u), Kind::F32Products(d)) =
        (&gate.kind, &up.kind, &down.kind)
    else {
        return Ok(None);
    };
    let cpu_bf16 = xs.dtype() == DType::BF16 && xs.device().is_cpu();
    if !cpu_bf16 || g.bias().is_some() || u.bias().is_some() {
        return Ok(None);
    }
    let wide = bf16_elementwise::to_f32(xs)?;
    let (gate_sums, up_sums) = (g.forward(&wide)?, u.forward(&wide)?);
    let dims = up_sums.dims().to_vec();
    let inner = asa_kernels::cpu::host::with_cpu_f32(&gate_sums, |gs| {
        asa_kernels::cpu::host::with_cpu_f32(&up_sums, |us| bf16_glu::silu_mul_rounded(gs, us))
    })
    .flatten();
    let Some(inner) = inner else {
        return Ok(None);
    };
    let inner = Tensor::from_vec(inner, dims, &Device::Cpu)?;
    Ok(Some(bf16_elementwise::to_bf16(&d.forward(&inner)?)?))
}

/// The rows of a contiguous CPU tensor as bf16 (bf16 as they are, other dtypes rounded).
fn bf16_rows(xs: &Tensor, m: usize, k: usize) -> Result<RowTiles> {
    if xs.dtype() == DType::BF16 {
        let (storage, layout) = xs.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) {
            return Ok(RowTiles::from_bf16(
                &cpu.as_slice::<bf16>()?[start..end],
                m,
                k,
            ));
        }
    }
    let values = xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(RowTiles::from_f32(&values, m, k))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback of a CPU without AVX-512 BF16 (f32 products of the same bf16 values)
    /// and the bf16 kernel give the same bf16 outputs, to one rounding.
    #[test]
    fn f32_products_agree_with_the_bf16_kernel() {
        let (m, k, n) = (5, 70, 37);
        let values = |len: usize, seed: f32| -> Vec<f32> {
            (0..len).map(|i| ((i as f32 + seed) * 0.37).sin()).collect()
        };
        let tensor = |v: Vec<f32>, shape: &[usize]| {
            Tensor::from_vec(v, shape, &Device::Cpu)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap()
        };
        let w = tensor(values(n * k, 1.0), &[n, k]);
        let b = tensor(values(n, 2.0), &[n]);
        let x = tensor(values(m * k, 3.0), &[m, k]);
        let fallback = Linear {
            kind: f32_products(&w, Some(&b)).unwrap(),
        };
        let packed = Linear {
            kind: pack(&w, Some(&b)).unwrap(),
        };
        let f32_of = |y: Tensor| -> Vec<f32> {
            assert_eq!(y.dtype(), DType::BF16);
            y.to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        let (a, b) = (
            f32_of(fallback.forward(&x).unwrap()),
            f32_of(packed.forward(&x).unwrap()),
        );
        for (a, b) in a.iter().zip(&b) {
            assert!(
                (a - b).abs() <= 2f32.powi(-7) * a.abs().max(1.0),
                "{a} vs {b}"
            );
        }
    }

    /// A bf16 tensor of `shape` holding `len` values of a sine from `seed`.
    fn tensor(len: usize, seed: f32, shape: &[usize]) -> Tensor {
        let v: Vec<f32> = (0..len)
            .map(|i| ((i as f32 + seed) * 0.37).sin() * 2.0)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    }

    /// The bf16 bits of a tensor, in order.
    fn bits(t: &Tensor) -> Vec<u16> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    /// The fused SwiGLU gives the bits of the projections and the SwiGLU one after the
    /// other (both round each product to bf16, then the SwiGLU once).
    #[test]
    fn the_fused_swiglu_is_the_composed_ops_bit_for_bit() {
        // 3 x 5 tokens (a partial row tile), 70 wide, an inner width of 300 (past one
        // rounding piece, a partial panel), a down projection with a bias
        let (k, inner) = (70, 300);
        let gate = Linear::new(tensor(inner * k, 1.0, &[inner, k]), None);
        let up = Linear::new(tensor(inner * k, 2.0, &[inner, k]), None);
        let bias = tensor(k, 4.0, &[k]);
        let down = Linear::new(tensor(k * inner, 3.0, &[k, inner]), Some(bias));
        let xs = tensor(3 * 5 * k, 5.0, &[3, 5, k]);
        let Some(fused) = bf16_swiglu(&gate, &up, &down, &xs).unwrap() else {
            // no AVX-512 BF16: the projections hold f32 products and the MLP composes
            assert!(!bf16_gemm::available());
            return;
        };
        let g = gate.forward(&xs).unwrap();
        let u = up.forward(&xs).unwrap();
        let h = bf16_glu::silu_mul(&g, &u).unwrap().unwrap();
        let composed = down.forward(&h).unwrap();
        assert_eq!(fused.dims(), &[3, 5, k]);
        assert_eq!(bits(&fused), bits(&composed));
        // an f32 input is not fused
        let f = xs.to_dtype(DType::F32).unwrap();
        assert!(bf16_swiglu(&gate, &up, &down, &f).unwrap().is_none());
    }

    /// Issue 54: on a CPU without AVX-512 BF16 the fused SwiGLU of f32 products gives the
    /// bits of its projections, `silu_mul` and the down projection one after the other
    /// (each rounding through a bf16 tensor), on any CPU (the projections are built as
    /// that CPU builds them).
    #[test]
    fn the_f32_products_swiglu_is_the_composed_ops_bit_for_bit() {
        let (k, inner) = (70, 300);
        let products = |w: Tensor, b: Option<Tensor>| Linear {
            kind: f32_products(&w, b.as_ref()).unwrap(),
        };
        let gate = products(tensor(inner * k, 1.0, &[inner, k]), None);
        let up = products(tensor(inner * k, 2.0, &[inner, k]), None);
        let down = products(
            tensor(k * inner, 3.0, &[k, inner]),
            Some(tensor(k, 4.0, &[k])),
        );
        let xs = tensor(3 * 5 * k, 5.0, &[3, 5, k]);
        let fused = f32_products_swiglu(&gate, &up, &down, &xs)
            .unwrap()
            .unwrap();
        // the composition, each step through candle's own cast to bf16
        let through_candle = |l: &Linear, x: &Tensor| -> Tensor {
            let Kind::F32Products(inner) = &l.kind else {
                unreachable!()
            };
            let wide = x.to_dtype(DType::F32).unwrap();
            inner.forward(&wide).unwrap().to_dtype(DType::BF16).unwrap()
        };
        let g = through_candle(&gate, &xs);
        let u = through_candle(&up, &xs);
        let h = bf16_glu::silu_mul(&g, &u).unwrap().unwrap();
        let composed = through_candle(&down, &h);
        assert_eq!(fused.dims(), &[3, 5, k]);
        assert_eq!(bits(&fused), bits(&composed));
        assert_eq!(bits(&down.forward(&h).unwrap()), bits(&composed));
    }
}
