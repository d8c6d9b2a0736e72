//! Qwen3-Next's Gated DeltaNet (`Qwen3NextGatedDeltaNet`): a linear-attention mixer whose
//! per-head state S `[key_dim, value_dim]` decays by exp(g_t) and takes a delta-rule
//! update at each position, read out by the query; then a gated RMSNorm and `out_proj`.
//! The recurrent form of transformers' `torch_recurrent_gated_delta_rule` (its chunked rule
//! computes the same sums in another order).

use candle_core::{DType, Tensor, D};
use rayon::prelude::*;

use super::mamba2::softplus;
use super::CausalConv;
use crate::nn::Linear;
use asa_core::error::Result;

/// The heads and sizes of a Gated DeltaNet layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DeltaNetShape {
    /// Query/key heads (`linear_num_key_heads`) and value heads (`linear_num_value_heads`,
    /// a multiple of them: value head j reads key head j / (value_heads / key_heads)).
    pub key_heads: usize,
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    /// The causal convolution's width (`linear_conv_kernel_dim`).
    pub conv_kernel: usize,
}

impl DeltaNetShape {
    /// Value heads per key head.
    fn ratio(&self) -> usize {
        self.value_heads / self.key_heads
    }

    /// Key heads, value heads, key and value dims, value heads per key head.
    fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        let s = self;
        (
            s.key_heads,
            s.value_heads,
            s.key_dim,
            s.value_dim,
            s.ratio(),
        )
    }

    /// Rows of `in_proj_qkvz`: q, k (key heads) and v, z (value heads).
    pub fn qkvz_rows(&self) -> usize {
        2 * self.key_heads * self.key_dim + 2 * self.value_heads * self.value_dim
    }

    /// Channels of the convolution: q, k and v.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }
}

/// The l2norm's epsilon (`l2norm(x, eps=1e-6)` in transformers).
const L2_EPS: f64 = 1e-6;

/// One layer's Gated DeltaNet.
pub struct GatedDeltaNet {
    pub shape: DeltaNetShape,
    /// `[qkvz_rows, hidden]`, grouped by key head: q, k, then the group's v and z.
    pub in_proj_qkvz: Linear,
    /// `[2 value_heads, hidden]`, grouped by key head: the group's b, then its a.
    pub in_proj_ba: Linear,
    pub conv: CausalConv,
    /// `exp(A_log)` and `dt_bias` per value head.
    pub a: Vec<f64>,
    pub dt_bias: Vec<f64>,
    /// The gated RMSNorm's weight `[value_dim]` and epsilon.
    pub norm_weight: Tensor,
    pub eps: f64,
    pub out_proj: Linear,
}

/// One sequence's inputs of the delta rule, host f64, row-major by (position, head, dim).
struct RuleInputs {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    /// `[t, value_heads]`
    beta: Vec<f64>,
    decay: Vec<f64>,
}

impl GatedDeltaNet {
    /// The mixer's output for `xs` `[batch, T, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let s = self.shape;
        let (b, t, _) = xs.dims3()?;
        let (nk, nv, dk, dv, r) = (
            s.key_heads,
            s.value_heads,
            s.key_dim,
            s.value_dim,
            s.ratio(),
        );
        let qkvz = self
            .in_proj_qkvz
            .forward(xs)?
            .reshape((b, t, nk, 2 * dk + 2 * r * dv))?;
        let part = |start: usize, len: usize| qkvz.narrow(D::Minus1, start, len);
        let (q, k) = (part(0, dk)?, part(dk, dk)?);
        let v = part(2 * dk, r * dv)?;
        let z = part(2 * dk + r * dv, r * dv)?.reshape((b, t, nv, dv))?;
        let ba = self.in_proj_ba.forward(xs)?.reshape((b, t, nk, 2 * r))?;
        let beta = ba.narrow(D::Minus1, 0, r)?.reshape((b, t, nv))?;
        let a = ba.narrow(D::Minus1, r, r)?.reshape((b, t, nv))?;
        let mixed = Tensor::cat(
            &[
                q.reshape((b, t, nk * dk))?,
                k.reshape((b, t, nk * dk))?,
                v.reshape((b, t, nv * dv))?,
            ],
            D::Minus1,
        )?;
        let mixed = candle_nn::ops::silu(&self.conv.forward(&mixed)?.to_dtype(DType::F32)?)?;
        // the delta rule in f64: its sums run over every position
        let host = |x: Tensor| -> Result<Vec<f64>> {
            Ok(x.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
        };
        let (mixed, beta, a) = (host(mixed)?, host(beta)?, host(a)?);
        let width = s.conv_channels();
        let out: Vec<Vec<f64>> = (0..b)
            .into_par_iter()
            .map(|seq| {
                let rows = &mixed[seq * t * width..(seq + 1) * t * width];
                let gates = seq * t * nv..(seq + 1) * t * nv;
                let inputs = self.rule_inputs(rows, &beta[gates.clone()], &a[gates], t);
                self.delta_rule(&inputs, t)
            })
            .collect();
        let out =
            Tensor::from_vec(out.concat(), (b, t, nv, dv), xs.device())?.to_dtype(DType::F32)?;
        let normed = self.gated_norm(&out, &z)?.to_dtype(xs.dtype())?;
        self.out_proj.forward(&normed.reshape((b, t, nv * dv))?)
    }

    /// q and k L2-normalised (q also scaled by key_dim^-1/2), v, beta = sigmoid(b) and
    /// the decay exp(g), g = -exp(A_log) softplus(a + dt_bias), of one sequence's `t`
    /// convolved rows `[t, conv_channels]` and raw gates `[t, value_heads]`.
    fn rule_inputs(&self, rows: &[f64], b: &[f64], a: &[f64], t: usize) -> RuleInputs {
        let s = self.shape;
        let (nk, nv, dk, dv) = (s.key_heads, s.value_heads, s.key_dim, s.value_dim);
        let width = s.conv_channels();
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        let scale = (dk as f64).powf(-0.5);
        for row in rows.chunks_exact(width) {
            for h in 0..nk {
                let (qh, kh) = (
                    &row[h * dk..(h + 1) * dk],
                    &row[(nk + h) * dk..(nk + h + 1) * dk],
                );
                q.extend(l2_normalised(qh).into_iter().map(|x| x * scale));
                k.extend(l2_normalised(kh));
            }
            v.extend_from_slice(&row[2 * nk * dk..2 * nk * dk + nv * dv]);
        }
        let beta = b.iter().map(|&x| sigmoid(x)).collect();
        let decay = (0..t * nv)
            .map(|i| {
                let j = i % nv;
                (-self.a[j] * softplus(a[i] + self.dt_bias[j])).exp()
            })
            .collect();
        RuleInputs {
            q,
            k,
            v,
            beta,
            decay,
        }
    }

    /// The read-out `[t, value_heads, value_dim]` of one sequence: per value head j (key
    /// head j / ratio), S = S exp(g_t); S += k_t ((v_t - S^T k_t) beta_t)^T; o_t = S^T q_t.
    fn delta_rule(&self, x: &RuleInputs, t: usize) -> Vec<f64> {
        let (nk, nv, dk, dv, r) = self.shape.sizes();
        let mut out = vec![0f64; t * nv * dv];
        let mut state = vec![0f64; dk * dv];
        let (mut kv, mut delta) = (vec![0f64; dv], vec![0f64; dv]);
        for j in 0..nv {
            state.fill(0.0);
            let h = j / r;
            for p in 0..t {
                let q = &x.q[(p * nk + h) * dk..(p * nk + h + 1) * dk];
                let k = &x.k[(p * nk + h) * dk..(p * nk + h + 1) * dk];
                let v = &x.v[(p * nv + j) * dv..(p * nv + j + 1) * dv];
                let (decay, beta) = (x.decay[p * nv + j], x.beta[p * nv + j]);
                state.iter_mut().for_each(|w| *w *= decay);
                kv.fill(0.0);
                for (i, &ki) in k.iter().enumerate() {
                    let row = &state[i * dv..(i + 1) * dv];
                    kv.iter_mut().zip(row).for_each(|(acc, &w)| *acc += w * ki);
                }
                for d in 0..dv {
                    delta[d] = (v[d] - kv[d]) * beta;
                }
                let o = &mut out[(p * nv + j) * dv..(p * nv + j + 1) * dv];
                for (i, (&ki, &qi)) in k.iter().zip(q).enumerate() {
                    let row = &mut state[i * dv..(i + 1) * dv];
                    for d in 0..dv {
                        row[d] += ki * delta[d];
                        o[d] += qi * row[d];
                    }
                }
            }
        }
        out
    }

    /// `Qwen3NextRMSNormGated`: `w * rms_normalised(o)` times silu(z), in f32.
    fn gated_norm(&self, o: &Tensor, z: &Tensor) -> Result<Tensor> {
        let o = o.to_dtype(DType::F32)?;
        let ms = o.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = o.broadcast_div(&(ms + self.eps)?.sqrt()?)?;
        let w = self.norm_weight.to_dtype(DType::F32)?;
        let gate = candle_nn::ops::silu(&z.to_dtype(DType::F32)?)?;
        Ok((normed.broadcast_mul(&w)? * gate)?)
    }
}

/// `x * rsqrt(sum(x^2) + 1e-6)`.
fn l2_normalised(x: &[f64]) -> Vec<f64> {
    let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() + L2_EPS).sqrt();
    x.iter().map(|v| v * inv).collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
