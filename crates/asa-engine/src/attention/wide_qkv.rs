//! A bf16 layer's q, k and v widened to f32 once, for the per-block products of the
//! materialised and fused-row kernels on a CPU without AVX-512 BF16. There the f32 GEMM
//! multiplies the bf16 values and each product is rounded to bf16 after (what candle's bf16
//! matmul computes, at about half its cost); widening per block instead re-widened every
//! key for every block of queries, t^2 / block conversions a layer (issue 54: bf16 must not
//! cost more than f32).

use candle_core::{DType, Tensor};

use asa_core::error::Result;
use asa_kernels::cpu::{bf16_elementwise, bf16_gemm};

/// q `[b, heads, t, d]`, k and v `[b, kv, t, d]` in f32: exactly the bf16 values.
pub struct WideQkv {
    pub q: Tensor,
    pub k: Tensor,
    pub v: Tensor,
}

impl WideQkv {
    /// The widened q, k, v of a bf16 CPU layer where the CPU lacks AVX-512 BF16; `None`
    /// elsewhere (the products run in the layer's dtype).
    pub fn of(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Option<Self>> {
        let bf16_cpu = |x: &Tensor| x.dtype() == DType::BF16 && x.device().is_cpu();
        if ![q, k, v].into_iter().all(bf16_cpu) || bf16_gemm::available() {
            return Ok(None);
        }
        Ok(Some(WideQkv {
            q: bf16_elementwise::to_f32(q)?,
            k: bf16_elementwise::to_f32(k)?,
            v: bf16_elementwise::to_f32(v)?,
        }))
    }
}

/// A product of widened bf16 values rounded as a bf16 product is: to bf16 values, kept in
/// f32 when `widened`, else as a bf16 tensor.
/// `product` must be just made (it is rounded in place when kept in f32).
pub fn rounded_product(product: Tensor, widened: bool) -> Result<Tensor> {
    match widened && bf16_elementwise::round_fresh_in_place(&product)? {
        true => Ok(product),
        false if widened => bf16_elementwise::rounded_f32(&product),
        false => bf16_elementwise::to_bf16(&product),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn values(t: &Tensor) -> Vec<f32> {
        let t = t.to_dtype(DType::F32).unwrap();
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    /// The widened products rounded are candle's bf16 matmul: bit for bit where the sums
    /// are exact (small integers), within one bf16 rounding elsewhere; the weights rounded
    /// to bf16 before the value product as candle's cast rounds them.
    #[test]
    fn the_rounded_products_are_candles_bf16_matmul() {
        let ints: Vec<f32> = (0..3 * 8 * 16)
            .map(|i| ((i * 7) % 13) as f32 - 6.0)
            .collect();
        let q = Tensor::from_vec(ints, (1, 3, 8, 16), &Device::Cpu).unwrap();
        let q = q.to_dtype(DType::BF16).unwrap();
        let noise: Vec<f32> = (0..3 * 8 * 16).map(|i| ((i as f32) * 0.37).sin()).collect();
        let v = Tensor::from_vec(noise, (1, 3, 8, 16), &Device::Cpu).unwrap();
        let v = v.to_dtype(DType::BF16).unwrap();
        let wide = |x: &Tensor| bf16_elementwise::to_f32(x).unwrap();
        let scores = || wide(&q).matmul(&wide(&q).t().unwrap()).unwrap();
        let candles = q.matmul(&q.t().unwrap()).unwrap();
        assert_eq!(
            values(&rounded_product(scores(), true).unwrap()),
            values(&candles)
        );
        let narrow = rounded_product(scores(), false).unwrap();
        assert_eq!(narrow.dtype(), DType::BF16);
        assert_eq!(values(&narrow), values(&candles));
        let noisy = wide(&v).matmul(&wide(&v).t().unwrap()).unwrap();
        let candles = values(&v.matmul(&v.t().unwrap()).unwrap());
        for (o, c) in values(&rounded_product(noisy, true).unwrap())
            .iter()
            .zip(candles)
        {
            assert!((o - c).abs() <= c.abs() / 128.0 + 1e-6, "{o} vs {c}");
        }
        let weights = (0..3 * 8 * 8)
            .map(|i| (i % 5) as f32 * 0.25 + 1.0 / 3.0)
            .collect();
        let weights = Tensor::from_vec(weights, (1, 3, 8, 8), &Device::Cpu).unwrap();
        let ours = bf16_elementwise::rounded_f32(&weights)
            .unwrap()
            .matmul(&wide(&v))
            .unwrap();
        let candles = weights.to_dtype(DType::BF16).unwrap().matmul(&v).unwrap();
        for (o, c) in values(&rounded_product(ours, false).unwrap())
            .iter()
            .zip(values(&candles))
        {
            assert!((o - c).abs() <= c.abs() / 128.0 + 1e-6, "{o} vs {c}");
        }
        // where the CPU has AVX-512 BF16 the layer's own dtype runs the products
        let of = WideQkv::of(&q, &q, &v).unwrap();
        assert_eq!(of.is_some(), !bf16_gemm::available());
    }
}
