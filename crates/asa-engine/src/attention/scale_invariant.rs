//! Scale-invariant attention (Anson, Wang, Aitchison, arXiv 2505.17083): for query i and key
//! j <= i at distance t = i - j, the logit fed to the softmax is l_ij = a_t s_ij + m_t with
//! a_t = sqrt(1 + 2 ln(1 + t / tau)) and m_t = -2 ln(1 + t / tau) (natural log); the diagonal
//! (t = 0) is unchanged. The coefficients depend on t alone, so they are computed once per
//! forward pass in f64 and gathered per query block on the device.

use candle_core::{DType, Device, Tensor};

use asa_core::error::Result;

/// (a_t, m_t) for distance `t` and temperature `tau` (> 0; `f64::INFINITY` gives (1, 0)).
pub fn distance_coefficients(t: usize, tau: f64) -> (f64, f64) {
    let log = (t as f64 / tau).ln_1p();
    ((1.0 + 2.0 * log).sqrt(), -2.0 * log)
}

/// a_t and m_t (f32) for the distances `ts`.
fn coefficient_lists(tau: f64, ts: impl Iterator<Item = usize>) -> (Vec<f32>, Vec<f32>) {
    ts.map(|t| {
        let (a, m) = distance_coefficients(t, tau);
        (a as f32, m as f32)
    })
    .unzip()
}

/// a_t and m_t (f32) for t = len - 1 down to 0: reversed, so that the keys 0..=i of query
/// i read the slice from `len - 1 - i` on in key order (the CPU's flash tiles).
pub fn reversed_coefficients(tau: f64, len: usize) -> (Vec<f32>, Vec<f32>) {
    coefficient_lists(tau, (0..len).rev())
}

/// a_t and m_t for t = 0 .. len - 1, as f32 tensors `[len]` on the device.
pub struct DistanceTable {
    a: Tensor,
    m: Tensor,
}

impl DistanceTable {
    /// Coefficients for every distance of a sequence of `len` tokens.
    pub fn new(tau: f64, len: usize, device: &Device) -> Result<Self> {
        let (a, m) = coefficient_lists(tau, 0..len.max(1));
        let n = a.len();
        Ok(DistanceTable {
            a: Tensor::from_vec(a, n, device)?,
            m: Tensor::from_vec(m, n, device)?,
        })
    }

    /// The logits a_t s + m_t `[b, h, n, keys]` of a block of scaled logits `scores`
    /// (f32, queries `q_start .. q_start + n`, keys `0 .. keys`). Keys after the query get
    /// t = 0 (a = 1, m = 0) and are left for the causal mask.
    pub fn apply(&self, scores: &Tensor, q_start: usize) -> Result<Tensor> {
        let (_, _, n, keys) = scores.dims4()?;
        let device = scores.device();
        let i = Tensor::arange(q_start as u32, (q_start + n) as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((n, 1))?;
        let j = Tensor::arange(0u32, keys as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((1, keys))?;
        let t = i
            .broadcast_sub(&j)?
            .relu()?
            .to_dtype(DType::U32)?
            .flatten_all()?;
        let a = self.a.index_select(&t, 0)?.reshape((1, 1, n, keys))?;
        let m = self.m.index_select(&t, 0)?.reshape((1, 1, n, keys))?;
        Ok(scores.broadcast_mul(&a)?.broadcast_add(&m)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_coefficients() {
        // tau = 10, t = 10: ln(1 + 10/10) = ln 2 = 0.693147;
        // a = sqrt(1 + 2 ln 2) = sqrt(2.386294) = 1.544763, m = -2 ln 2 = -1.386294
        let (a, m) = distance_coefficients(10, 10.0);
        assert!((a - 1.54476).abs() < 1e-5, "{a}");
        assert!((m + 1.38629).abs() < 1e-5, "{m}");
        // the diagonal is unchanged
        assert_eq!(distance_coefficients(0, 10.0), (1.0, -0.0));
        // tau -> infinity: a = 1, m = 0 at every distance
        assert_eq!(distance_coefficients(1000, f64::INFINITY), (1.0, -0.0));
    }

    #[test]
    fn block_logits_follow_the_distance() {
        // one head, queries 2..4 against keys 0..4, every scaled logit 1:
        // l = a_t + m_t at t = i - j, and 1 (t clamped to 0) where j > i
        let table = DistanceTable::new(10.0, 4, &Device::Cpu).unwrap();
        let scores = Tensor::ones((1, 1, 2, 4), DType::F32, &Device::Cpu).unwrap();
        let got = table.apply(&scores, 2).unwrap().squeeze(0).unwrap();
        let got = got.to_vec3::<f32>().unwrap();
        let l = |t| {
            let (a, m) = distance_coefficients(t, 10.0);
            a as f32 + m as f32 // as the device computes it: f32 table values
        };
        assert_eq!(got[0][0], vec![l(2), l(1), l(0), 1.0]);
        assert_eq!(got[0][1], vec![l(3), l(2), l(1), l(0)]);
    }
}
