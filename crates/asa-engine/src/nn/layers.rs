//! Small building blocks of a decoder: RMSNorm and LayerNorm, the SwiGLU and GELU MLPs
//! (projections: [`super::Linear`]). Built from tensors; `model::layers` loads them from a checkpoint.

use candle_core::{DType, Module, Tensor};

use super::Linear;
use asa_core::error::Result;

/// Root-mean-square normalisation with a learned scale.
///
/// In f32 and f64 the whole norm runs in the analysis dtype. For bf16 and f16 activations
/// the statistics, the scale (`1 + w` included) and the product are f32 and the output is
/// rounded once, as transformers' Gemma norm computes it (its Llama norm rounds twice, the
/// normalised row and then its product with the scale; candle's half-precision kernel
/// would round the row's rms itself, an error shared by the whole row).
pub struct RmsNorm {
    weight: Tensor,
    eps: f32,
    /// Scaled by `1 + weight` (Gemma stores its scales as offsets from 1).
    plus_one: bool,
}

impl RmsNorm {
    /// The dtype of its scale (the analysis dtype).
    pub fn dtype(&self) -> DType {
        self.weight.dtype()
    }

    /// A norm with scale `weight` `[dim]`.
    pub fn new(weight: Tensor, eps: f64) -> Self {
        RmsNorm {
            weight,
            eps: eps as f32,
            plus_one: false,
        }
    }

    /// The same norm scaled by (1 + weight) (Gemma stores its scales as offsets from 1).
    pub fn plus_one(self) -> Self {
        RmsNorm {
            plus_one: true,
            ..self
        }
    }

    /// The scale in `dtype`: the weight, plus one where stored as an offset (added in
    /// `dtype`).
    fn scale(&self, dtype: DType) -> Result<Tensor> {
        let weight = self.weight.to_dtype(dtype)?;
        Ok(match self.plus_one {
            true => (weight + 1.0)?,
            false => weight,
        })
    }

    /// Normalises the last dimension. The fused kernel has no backward pass, so when
    /// gradients are tracked (training) the same formula runs as differentiable tensor ops.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let dtype = xs.dtype();
        if xs.track_op() || self.weight.track_op() {
            return Ok(candle_nn::ops::rms_norm_slow(
                xs,
                &self.scale(dtype)?,
                self.eps,
            )?);
        }
        if !is_half(dtype) {
            let xs = xs.contiguous()?;
            return Ok(candle_nn::ops::rms_norm(
                &xs,
                &self.scale(dtype)?,
                self.eps,
            )?);
        }
        let scale = self.scale(DType::F32)?;
        let host_scale = match xs.device().is_cpu() && dtype == DType::BF16 {
            true => Some(scale.to_vec1::<f32>()?),
            false => None,
        };
        if let Some(scale) = host_scale {
            let xs = xs.contiguous()?;
            if let Some(normed) = asa_kernels::cpu::bf16_rms_norm::rms_norm(&xs, &scale, self.eps)?
            {
                return Ok(normed);
            }
        }
        let wide = xs.to_dtype(DType::F32)?.contiguous()?;
        let normed = candle_nn::ops::rms_norm(&wide, &scale, self.eps)?;
        Ok(normed.to_dtype(dtype)?)
    }
}

/// bf16 or f16: the dtypes whose norms run in f32 and round once.
fn is_half(dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
}

/// A layer's norm: RMSNorm, or LayerNorm (mean removed, scale and bias; GPT-NeoX).
pub enum Norm {
    Rms(RmsNorm),
    /// LayerNorm (candle's kernel computes half activations in f32 and rounds once, as
    /// torch's CPU `layer_norm` does: tested below).
    Layer(candle_nn::LayerNorm),
}

impl Norm {
    /// LayerNorm with scale `weight` and `bias` `[dim]`, as torch's `nn.LayerNorm`.
    pub fn layer(weight: Tensor, bias: Tensor, eps: f64) -> Self {
        Norm::Layer(candle_nn::LayerNorm::new(weight, bias, eps))
    }

    /// The dtype of its scale (the analysis dtype).
    pub fn dtype(&self) -> DType {
        match self {
            Norm::Rms(norm) => norm.dtype(),
            Norm::Layer(norm) => norm.weight().dtype(),
        }
    }

    /// Normalises the last dimension.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Rms(norm) => norm.forward(xs),
            Norm::Layer(norm) => Ok(norm.forward(&xs.contiguous()?)?),
        }
    }
}

/// A layer's MLP: SwiGLU `down(silu(gate(x)) * up(x))` when it has a gate, else
/// `down(gelu(up(x)))` with the exact (erf) GELU or its tanh approximation.
pub struct Mlp {
    gate_proj: Option<Linear>,
    up_proj: Linear,
    down_proj: Linear,
    /// GELU's tanh approximation (GPT-2's `gelu_new`) rather than the exact one.
    tanh_gelu: bool,
    /// GPT-OSS's clamped SwiGLU instead of the plain one.
    clamped: Option<ClampedGlu>,
    /// The gate projection's output is multiplied by this (Falcon-H1's
    /// `mlp_multipliers[0]`).
    gate_scale: Option<f64>,
}

/// GPT-OSS's SwiGLU: `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g)` with
/// `g = min(gate, limit)` (`swiglu_alpha`, `swiglu_limit`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClampedGlu {
    pub alpha: f64,
    pub limit: f64,
}

impl ClampedGlu {
    /// The gated product of the gate and up projections' outputs.
    fn apply(self, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
        let gate = gate.minimum(self.limit)?;
        let up = up.clamp(-self.limit, self.limit)?;
        let glu = (&gate * candle_nn::ops::sigmoid(&(&gate * self.alpha)?)?)?;
        Ok(((up + 1.0)? * glu)?)
    }
}

impl Mlp {
    /// The SwiGLU MLP of its three projections.
    pub fn new(gate_proj: Linear, up_proj: Linear, down_proj: Linear) -> Self {
        Mlp {
            gate_proj: Some(gate_proj),
            up_proj,
            down_proj,
            tanh_gelu: false,
            clamped: None,
            gate_scale: None,
        }
    }

    /// The same MLP with its gate projection's output times `scale`, if any.
    pub fn with_gate_scale(self, scale: Option<f64>) -> Self {
        Mlp {
            gate_scale: scale,
            ..self
        }
    }

    /// GPT-OSS's clamped SwiGLU MLP of its three projections (with biases).
    pub fn clamped_swiglu(
        gate_proj: Linear,
        up_proj: Linear,
        down_proj: Linear,
        clamped: ClampedGlu,
    ) -> Self {
        Mlp {
            clamped: Some(clamped),
            ..Mlp::new(gate_proj, up_proj, down_proj)
        }
    }

    /// The GeGLU MLP of its three projections, `down(gelu_tanh(gate(x)) * up(x))` (Gemma).
    pub fn geglu(gate_proj: Linear, up_proj: Linear, down_proj: Linear) -> Self {
        Mlp {
            gate_proj: Some(gate_proj),
            up_proj,
            down_proj,
            tanh_gelu: true,
            clamped: None,
            gate_scale: None,
        }
    }

    /// The GELU MLP of its two projections (`tanh_gelu`: the tanh approximation).
    pub fn gelu(up_proj: Linear, down_proj: Linear, tanh_gelu: bool) -> Self {
        Mlp {
            gate_proj: None,
            up_proj,
            down_proj,
            tanh_gelu,
            clamped: None,
            gate_scale: None,
        }
    }

    /// Applies the MLP to `[batch, seq, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let unscaled = self.gate_scale.is_none();
        if let (Some(gate), None, false, true) =
            (&self.gate_proj, self.clamped, self.tanh_gelu, unscaled)
        {
            let (up, down) = (&self.up_proj, &self.down_proj);
            if let Some(ys) = super::linear::bf16_swiglu(gate, up, down, xs)? {
                return Ok(ys);
            }
            if let Some(ys) = super::linear::f32_products_swiglu(gate, up, down, xs)? {
                return Ok(ys);
            }
        }
        let up = self.up_proj.forward(xs)?;
        let inner = match (&self.gate_proj, self.clamped) {
            (Some(gate), Some(clamped)) => clamped.apply(&gate.forward(xs)?, &up)?,
            (Some(gate), None) if self.tanh_gelu => (gate.forward(xs)?.gelu()? * up)?,
            (Some(gate), None) => {
                let gate = match self.gate_scale {
                    Some(scale) => super::times(&gate.forward(xs)?, scale)?,
                    None => gate.forward(xs)?,
                };
                match asa_kernels::cpu::bf16_glu::silu_mul(&gate, &up)? {
                    Some(inner) => inner,
                    None => (candle_nn::ops::silu(&gate)? * up)?,
                }
            }
            (None, _) if self.tanh_gelu => up.gelu()?,
            (None, _) => up.gelu_erf()?,
        };
        self.down_proj.forward(&inner)
    }
}

/// How a router turns a token's logits `[experts]` into the chosen experts' weights.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// A softmax over every expert, the `top_k` largest kept, divided by their sum when
    /// `renormalise` (Mixtral; Qwen3-MoE's `norm_topk_prob`).
    SoftmaxTopK { renormalise: bool },
    /// The `top_k` largest logits, then a softmax over those alone (GPT-OSS).
    TopKSoftmax,
    /// The `top_k` largest logits, each expert weighted by the sigmoid of its logit, the
    /// weight multiplying the expert's input rather than its output (Llama 4).
    TopKSigmoidInput,
    /// DeepSeek-V3's `noaux_tc`: sigmoid scores; the choice ranks the scores plus the
    /// router's score-correction bias, within the `topk_group` of `groups` groups whose two
    /// best biased scores sum highest; the chosen experts' (unbiased) scores divided by
    /// their sum when `renormalise`, times `scaling` (GLM-4.5 too).
    GroupLimitedSigmoid {
        groups: usize,
        topk_group: usize,
        renormalise: bool,
        scaling: f64,
    },
}

impl Routing {
    /// The chosen experts of one token and their weights, ties to the lower expert (as
    /// torch.topk); `bias` is the router's score-correction bias.
    fn route(
        self,
        logits: &[f32],
        probs: Option<&[f32]>,
        bias: Option<&[f32]>,
        top_k: usize,
    ) -> Vec<(usize, f32)> {
        if let Routing::GroupLimitedSigmoid { .. } = self {
            return self.route_groups(logits, bias, top_k);
        }
        let score = probs.unwrap_or(logits);
        let chosen = top(score, top_k);
        match (self, probs) {
            (Routing::SoftmaxTopK { renormalise }, Some(probs)) => {
                let total: f32 = match renormalise {
                    true => chosen.iter().map(|&e| probs[e]).sum(),
                    false => 1.0,
                };
                chosen.iter().map(|&e| (e, probs[e] / total)).collect()
            }
            (Routing::TopKSigmoidInput, _) => {
                chosen.iter().map(|&e| (e, sigmoid(logits[e]))).collect()
            }
            _ => {
                let max = chosen.first().map_or(0.0, |&e| logits[e]);
                let exps: Vec<f32> = chosen.iter().map(|&e| (logits[e] - max).exp()).collect();
                let total: f32 = exps.iter().sum();
                chosen
                    .iter()
                    .zip(exps)
                    .map(|(&e, x)| (e, x / total))
                    .collect()
            }
        }
    }

    /// [`Routing::GroupLimitedSigmoid`] of one token, as transformers'
    /// `DeepseekV3MoE.route_tokens_to_experts` computes it (in f32).
    fn route_groups(self, logits: &[f32], bias: Option<&[f32]>, top_k: usize) -> Vec<(usize, f32)> {
        let Routing::GroupLimitedSigmoid {
            groups,
            topk_group,
            renormalise,
            scaling,
        } = self
        else {
            return Vec::new();
        };
        let scores: Vec<f32> = logits.iter().map(|&l| sigmoid(l)).collect();
        let biased: Vec<f32> = match bias {
            Some(bias) => scores.iter().zip(bias).map(|(s, b)| s + b).collect(),
            None => scores.clone(),
        };
        // each group's two best biased scores, summed; the best `topk_group` groups kept
        let per_group = biased.len() / groups.max(1);
        let group_scores: Vec<f32> = biased
            .chunks(per_group.max(1))
            .map(|g| top(g, 2).iter().map(|&e| g[e]).sum())
            .collect();
        let kept = top(&group_scores, topk_group);
        // the other groups' experts are out (masked_fill(~mask, -inf))
        let choice: Vec<f32> = biased
            .iter()
            .enumerate()
            .map(|(e, &s)| match kept.contains(&(e / per_group.max(1))) {
                true => s,
                false => f32::NEG_INFINITY,
            })
            .collect();
        let chosen = top(&choice, top_k);
        let total: f32 = match renormalise {
            true => chosen.iter().map(|&e| scores[e]).sum::<f32>() + 1e-20,
            false => 1.0,
        };
        chosen
            .iter()
            .map(|&e| (e, scores[e] / total * scaling as f32))
            .collect()
    }
}

/// 1 / (1 + e^-x) in f32, as torch's sigmoid of a float32 router's logits.
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The indices of the `k` largest of `score`, largest first, ties to the lower index.
fn top(score: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..score.len()).collect();
    order.sort_by(|&a, &c| score[c].total_cmp(&score[a]).then(a.cmp(&c)));
    order.truncate(k);
    order
}

/// A mixture-of-experts MLP: router logits `[experts]` per token (in f32, as transformers
/// routes), the `top_k` experts chosen and weighted as [`Routing`] says, and the output the
/// weighted sum of those experts' MLPs (Llama 4: the experts of the weighted inputs), plus
/// the shared experts' MLP where there is one. Only the chosen experts run, each on the
/// tokens routed to it.
pub struct MoeMlp {
    router: Linear,
    experts: Vec<Mlp>,
    top_k: usize,
    routing: Routing,
    /// The router's score-correction bias `[experts]` (DeepSeek-V3, GLM-4.5).
    score_bias: Option<Vec<f32>>,
    /// The MLP every token goes through beside the routed experts.
    shared: Option<SharedExpert>,
}

/// The experts' MLP every token goes through, its output scaled by sigmoid(`gate` x) where
/// it has a gate `[1, hidden]` (Qwen3-Next).
pub struct SharedExpert {
    pub mlp: Mlp,
    pub gate: Option<Linear>,
}

impl SharedExpert {
    /// Its output for tokens `flat` `[n, hidden]`.
    fn forward(&self, flat: &Tensor) -> Result<Tensor> {
        let out = self.mlp.forward(&flat.unsqueeze(0)?)?.squeeze(0)?;
        match &self.gate {
            Some(gate) => Ok(out.broadcast_mul(&candle_nn::ops::sigmoid(&gate.forward(flat)?)?)?),
            None => Ok(out),
        }
    }
}

impl MoeMlp {
    /// Experts, their router `[experts, hidden]`, how many each token uses and how they
    /// are weighted.
    pub fn new(router: Linear, experts: Vec<Mlp>, top_k: usize, routing: Routing) -> Self {
        MoeMlp {
            router,
            experts,
            top_k,
            routing,
            score_bias: None,
            shared: None,
        }
    }

    /// The same with the router's score-correction bias and a shared expert.
    pub fn with_bias_and_shared(
        self,
        score_bias: Option<Vec<f32>>,
        shared: Option<SharedExpert>,
    ) -> Self {
        MoeMlp {
            score_bias,
            shared,
            ..self
        }
    }

    /// Applies the MLP to `[batch, seq, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let (b, t, h) = xs.dims3()?;
        let flat = xs.reshape((b * t, h))?;
        let logits = self
            .router
            .forward(&flat)?
            .to_dtype(candle_core::DType::F32)?;
        let probs = match self.routing {
            Routing::SoftmaxTopK { .. } => {
                Some(candle_nn::ops::softmax_last_dim(&logits)?.to_vec2::<f32>()?)
            }
            _ => None,
        };
        let logits = logits.to_vec2::<f32>()?;
        let mut routed: Vec<(Vec<u32>, Vec<f32>)> =
            vec![(Vec::new(), Vec::new()); self.experts.len()];
        let bias = self.score_bias.as_deref();
        for (token, row) in logits.iter().enumerate() {
            let probs = probs.as_ref().map(|p| p[token].as_slice());
            for (e, weight) in self.routing.route(row, probs, bias, self.top_k) {
                routed[e].0.push(token as u32);
                routed[e].1.push(weight);
            }
        }
        let mut out = match &self.shared {
            Some(shared) => shared.forward(&flat)?,
            None => flat.zeros_like()?,
        };
        let scale_inputs = self.routing == Routing::TopKSigmoidInput;
        for (expert, (tokens, weights)) in self.experts.iter().zip(routed) {
            if tokens.is_empty() {
                continue;
            }
            let n = tokens.len();
            let index = Tensor::from_vec(tokens, n, flat.device())?;
            let weights =
                Tensor::from_vec(weights, (n, 1), flat.device())?.to_dtype(flat.dtype())?;
            let inputs = flat.index_select(&index, 0)?;
            let y = match scale_inputs {
                true => expert
                    .forward(&inputs.broadcast_mul(&weights)?.unsqueeze(0)?)?
                    .squeeze(0)?,
                false => expert
                    .forward(&inputs.unsqueeze(0)?)?
                    .squeeze(0)?
                    .broadcast_mul(&weights)?,
            };
            out = out.index_add(&index, &y, 0)?;
        }
        Ok(out.reshape((b, t, h))?)
    }
}

/// A layer's feed-forward block: one MLP, or a mixture of experts.
pub enum FeedForward {
    Dense(Mlp),
    Moe(MoeMlp),
}

impl FeedForward {
    /// Applies the block to `[batch, seq, hidden]`.
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        match self {
            FeedForward::Dense(mlp) => mlp.forward(xs),
            FeedForward::Moe(moe) => moe.forward(xs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// bf16 values of a smooth pseudo-random sequence.
    fn bf16_values(n: usize, seed: f32) -> Tensor {
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i as f32 + seed) * 0.731).sin() * 3.0)
            .collect();
        let xs = Tensor::from_vec(xs, n, &Device::Cpu).unwrap();
        xs.to_dtype(DType::BF16).unwrap()
    }

    #[test]
    fn half_rms_norms_compute_in_f32_and_round_once() {
        // against float64 from the same bf16 inputs: one rounding to bf16 (half an ulp, at
        // most 2^-8 relative) and no more; rounding the rms or the normalised row as well would
        // put some of these 4 x 256 values past it
        let (rows, dim, eps) = (4, 256, 1e-6);
        let x = bf16_values(rows * dim, 0.0).reshape((rows, dim)).unwrap();
        let w = bf16_values(dim, 17.0);
        let wide = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        let (xs, ws) = (
            wide(&x).to_vec2::<f64>().unwrap(),
            wide(&w).to_vec1::<f64>().unwrap(),
        );
        for plus_one in [false, true] {
            let norm = RmsNorm::new(w.clone(), eps);
            let norm = if plus_one { norm.plus_one() } else { norm };
            let got = norm.forward(&x).unwrap();
            assert_eq!(got.dtype(), DType::BF16);
            let got = wide(&got).to_vec2::<f64>().unwrap();
            for (row, out) in xs.iter().zip(&got) {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / dim as f64;
                let r = 1.0 / (ms + eps).sqrt();
                for ((v, s), y) in row.iter().zip(&ws).zip(out) {
                    let want = v * r * if plus_one { 1.0 + s } else { *s };
                    let tol = want.abs() * (1.0 / 256.0) * (1.0 + 1e-3) + 1e-30;
                    assert!(
                        (y - want).abs() <= tol,
                        "{y} vs {want} (plus_one {plus_one})"
                    );
                }
            }
        }
    }

    #[test]
    fn half_layer_norms_compute_in_f32_and_round_once() {
        let (rows, dim, eps) = (4, 256, 1e-5);
        let x = bf16_values(rows * dim, 3.0).reshape((rows, dim)).unwrap();
        let (w, b) = (bf16_values(dim, 5.0), bf16_values(dim, 9.0));
        let wide = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        let got = Norm::layer(w.clone(), b.clone(), eps).forward(&x).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let got = wide(&got).to_vec2::<f64>().unwrap();
        let (ws, bs) = (
            wide(&w).to_vec1::<f64>().unwrap(),
            wide(&b).to_vec1::<f64>().unwrap(),
        );
        for (row, out) in wide(&x).to_vec2::<f64>().unwrap().iter().zip(&got) {
            let mean = row.iter().sum::<f64>() / dim as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / dim as f64;
            for (i, (v, y)) in row.iter().zip(out).enumerate() {
                let want = (v - mean) / (var + eps).sqrt() * ws[i] + bs[i];
                let tol = want.abs() * (1.0 / 256.0) * (1.0 + 1e-3) + 1e-5;
                assert!((y - want).abs() <= tol, "{y} vs {want}");
            }
        }
    }
}
