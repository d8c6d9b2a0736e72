//! LogN scaling (Scalable-Softmax), the baseline scale-invariant attention is compared with:
//! the logits of query i are multiplied by s_h ln(n_i), n_i = i + 1 the number of keys it
//! sees, with s_h per head (`self_attn.logn_scale` [heads], or config `"logn": {"scale": s}`).

use candle_core::{DType, Tensor};

use asa_core::error::Result;

/// The logits s * s_h * ln(i + 1) `[b, h, n, keys]` of a block of scaled logits `scores`
/// (f32, queries `q_start .. q_start + n`); `scale` holds s_h, `[1, h, 1, 1]` f32.
pub fn logn_logits(scores: &Tensor, scale: &Tensor, q_start: usize) -> Result<Tensor> {
    let n = scores.dim(2)?;
    let ln: Vec<f32> = (0..n)
        .map(|r| ((q_start + r + 1) as f64).ln() as f32)
        .collect();
    let ln = Tensor::from_vec(ln, (1, 1, n, 1), scores.device())?;
    let factor = scale.to_dtype(DType::F32)?.broadcast_mul(&ln)?;
    Ok(scores.broadcast_mul(&factor)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn logits_scale_with_the_log_of_the_visible_keys() {
        // queries 0 and 2 (ln 1 = 0, ln 3 = 1.098612), s_h = 2: every logit 1 becomes 0 and
        // 2 ln 3 = 2.197225
        let scores = Tensor::ones((1, 1, 3, 3), DType::F32, &Device::Cpu).unwrap();
        let scale = Tensor::new(&[2f32], &Device::Cpu)
            .unwrap()
            .reshape((1, 1, 1, 1))
            .unwrap();
        let got = logn_logits(&scores, &scale, 0).unwrap().squeeze(0).unwrap();
        let got = got.to_vec3::<f32>().unwrap().remove(0);
        assert_eq!(got[0], vec![0.0; 3]);
        assert!((got[2][1] - 2.197225).abs() < 1e-6, "{:?}", got[2]);
    }
}
