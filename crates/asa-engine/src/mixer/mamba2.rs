//! The Mamba-2 mixer (`GraniteMoeHybridMambaLayer`, `FalconH1Mixer`): `in_proj` gives the
//! gate z, the convolution's input (x, B, C) and one dt per head; x, B and C go through a
//! causal depthwise convolution and SiLU; each head's state S `[head_dim, state]` decays by
//! exp(dt A) and takes dt x B^T at each position, read out by C, plus D x; then the gate
//! (with or without a grouped RMSNorm) and `out_proj`. The recurrent form of the SSD scan
//! transformers computes in chunks (the same sums in another order).

use candle_core::{DType, Tensor, D};
use rayon::prelude::*;

use super::CausalConv;
use crate::nn::Linear;
use asa_core::error::Result;

/// How the scan's output is gated by z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Mamba2Gate {
    /// `y silu(z)`, then an RMSNorm over each group's channels (Granite's
    /// `GraniteMoeHybridRMSNormGated`).
    ThenGroupNorm,
    /// `y silu(z)` alone (Falcon-H1 without `mamba_rms_norm`).
    Only,
}

/// The sizes of a Mamba-2 layer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Mamba2Shape {
    pub heads: usize,
    pub head_dim: usize,
    /// `mamba_d_state`, per group.
    pub state: usize,
    /// B and C are shared by `heads / groups` heads each.
    pub groups: usize,
    pub conv_kernel: usize,
    pub conv_bias: bool,
    /// A bias on `in_proj`, and on `out_proj`.
    pub in_bias: bool,
    pub out_bias: bool,
    /// dt is clamped to `[min, max]` (`time_step_limit`).
    pub dt_min: f64,
    pub dt_max: f64,
    pub gate: Mamba2Gate,
}

impl Mamba2Shape {
    /// The scan's channels: heads x head_dim.
    pub fn inner(&self) -> usize {
        self.heads * self.head_dim
    }

    /// The convolution's channels: x, B and C.
    pub fn conv_channels(&self) -> usize {
        self.inner() + 2 * self.groups * self.state
    }

    /// Rows of `in_proj`: z, the convolution's input, dt.
    pub fn in_rows(&self) -> usize {
        self.inner() + self.conv_channels() + self.heads
    }
}

/// One layer's Mamba-2 mixer.
pub struct Mamba2 {
    pub shape: Mamba2Shape,
    pub in_proj: Linear,
    /// The input is multiplied by this first (Falcon-H1's `ssm_in_multiplier`).
    pub input_scale: Option<f64>,
    /// Factors of `in_proj`'s output rows (Falcon-H1's muP vector), if any.
    pub in_scale: Option<Tensor>,
    pub conv: CausalConv,
    /// `-exp(A_log)`, `dt_bias` and `D` per head.
    pub a: Vec<f64>,
    pub dt_bias: Vec<f64>,
    pub d: Vec<f64>,
    /// The grouped RMSNorm's weight `[inner]` and epsilon ([`Mamba2Gate::ThenGroupNorm`]).
    pub norm: Option<(Tensor, f64)>,
    pub out_proj: Linear,
}

impl Mamba2 {
    /// The mixer's output for `xs` `[batch, T, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let s = self.shape;
        let (b, t, _) = xs.dims3()?;
        let zxbcdt = match self.input_scale {
            Some(f) => self.in_proj.forward(&crate::nn::times(xs, f)?)?,
            None => self.in_proj.forward(xs)?,
        };
        let zxbcdt = match &self.in_scale {
            Some(scale) => zxbcdt.broadcast_mul(&scale.to_dtype(zxbcdt.dtype())?)?,
            None => zxbcdt,
        };
        let (inner, channels) = (s.inner(), s.conv_channels());
        let z = zxbcdt.narrow(D::Minus1, 0, inner)?;
        let xbc = zxbcdt.narrow(D::Minus1, inner, channels)?;
        let dt = zxbcdt.narrow(D::Minus1, inner + channels, s.heads)?;
        let xbc = candle_nn::ops::silu(&self.conv.forward(&xbc)?.to_dtype(DType::F32)?)?;
        let host = |x: Tensor| -> Result<Vec<f64>> {
            Ok(x.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
        };
        let (xbc, dt) = (host(xbc)?, host(dt)?);
        let y: Vec<Vec<f64>> = (0..b)
            .into_par_iter()
            .map(|seq| {
                let rows = &xbc[seq * t * channels..(seq + 1) * t * channels];
                self.scan(rows, &dt[seq * t * s.heads..(seq + 1) * t * s.heads], t)
            })
            .collect();
        let y = Tensor::from_vec(y.concat(), (b, t, inner), xs.device())?.to_dtype(DType::F32)?;
        let gated = self.gate(&y, &z)?.to_dtype(xs.dtype())?;
        self.out_proj.forward(&gated)
    }

    /// The scan's output `[t, inner]` of one sequence's convolved rows `[t, conv_channels]`
    /// and raw dt `[t, heads]`: per head h (group h / (heads / groups)), dt =
    /// clamp(softplus(dt + dt_bias)); S = exp(dt A) S + dt x B^T; y = S C + D x.
    fn scan(&self, rows: &[f64], dt: &[f64], t: usize) -> Vec<f64> {
        let s = self.shape;
        let (p, n, inner) = (s.head_dim, s.state, s.inner());
        let per_group = s.heads / s.groups;
        let channels = s.conv_channels();
        let mut y = vec![0f64; t * inner];
        let mut state = vec![0f64; p * n];
        for h in 0..s.heads {
            state.fill(0.0);
            let g = h / per_group;
            for pos in 0..t {
                let row = &rows[pos * channels..(pos + 1) * channels];
                let x = &row[h * p..(h + 1) * p];
                let bm = &row[inner + g * n..inner + (g + 1) * n];
                let cm = &row[inner + s.groups * n + g * n..inner + s.groups * n + (g + 1) * n];
                let step =
                    softplus(dt[pos * s.heads + h] + self.dt_bias[h]).clamp(s.dt_min, s.dt_max);
                let decay = (step * self.a[h]).exp();
                let out = &mut y[pos * inner + h * p..pos * inner + (h + 1) * p];
                for (i, &xi) in x.iter().enumerate() {
                    let row = &mut state[i * n..(i + 1) * n];
                    let mut read = 0.0;
                    for k in 0..n {
                        row[k] = decay * row[k] + step * xi * bm[k];
                        read += row[k] * cm[k];
                    }
                    out[i] = read + self.d[h] * xi;
                }
            }
        }
        y
    }

    /// The scan's output `y` `[b, t, inner]` gated by silu(z), in f32, normalised per group
    /// where the layer has its norm.
    fn gate(&self, y: &Tensor, z: &Tensor) -> Result<Tensor> {
        let gated = (y * candle_nn::ops::silu(&z.to_dtype(DType::F32)?)?)?;
        let Some((weight, eps)) = &self.norm else {
            return Ok(gated);
        };
        let s = self.shape;
        let (b, t, inner) = gated.dims3()?;
        let grouped = gated.reshape((b, t, s.groups, inner / s.groups))?;
        let ms = grouped.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = grouped
            .broadcast_div(&(ms + *eps)?.sqrt()?)?
            .reshape((b, t, inner))?;
        Ok(normed.broadcast_mul(&weight.to_dtype(DType::F32)?)?)
    }
}

/// torch's softplus (beta 1, threshold 20): x above 20, else ln(1 + e^x).
pub(crate) fn softplus(x: f64) -> f64 {
    match x > 20.0 {
        true => x,
        false => x.exp().ln_1p(),
    }
}
