//! One attention layer: its projections, QK-norm and RoPE, then the kernels of
//! [`super::core::AttentionCore`] (query block by query block, feeding the probe), then the
//! gate and the output projection. The same code runs on every device; only the dtype differs.

use candle_core::{DType, Tensor};

use super::affine_scaled::activate;
use super::core::{AttentionCore, Projected};
use super::gated::split_query_gate;
use super::variant::Variant;
use crate::nn::{Linear, RmsNorm, Rope};
use asa_core::error::Result;
use asa_core::profile::phase;
use asa_hooks::{BlockCtx, Hook, KeyWindow, Probe};

/// Shapes and variant of an attention layer.
#[derive(Debug, Clone)]
pub struct AttentionShape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub qkv_bias: bool,
    pub o_bias: bool,
    /// The variant and its settings.
    pub variant: Variant,
    /// Whether `q_norm` / `k_norm` are required (Qwen3); other architectures use them when
    /// the checkpoint has `self_attn.q_norm.weight`.
    pub qk_norm: bool,
    /// The QK-norm scales the whole q and k projections (`[heads * head_dim]`, OLMo 2)
    /// rather than each head (`[head_dim]`, Qwen3).
    pub qk_norm_whole: bool,
    /// The QK-norm scales by (1 + w) (Gemma 3).
    pub qk_norm_plus_one: bool,
    /// epsilon of the QK-norm RMSNorm.
    pub rms_norm_eps: f64,
    /// The keys each query sees: a sliding window in windowed layers, else every earlier key.
    pub window: KeyWindow,
    /// The factor of q.k: 1/sqrt(head_dim), or Gemma's query_pre_attn_scalar^-1/2.
    pub scale: f64,
    /// Logit soft-capping (Gemma 2): the logits are cap * tanh(s / cap).
    pub softcap: Option<f64>,
    /// The layer rotates q and k (false: a NoPE layer).
    pub rotary: bool,
    /// q and k are RMS-normalised per head without a scale after RoPE (Llama 4's L2
    /// norm, `q_norm`/`k_norm` of unit scales) rather than by a QK-norm before it.
    pub l2_qk_norm: bool,
    /// Llama 4's temperature tuning of the queries (its NoPE layers).
    pub temperature: Option<super::temperature::TemperatureTuning>,
    /// Multi-head latent attention (DeepSeek-V3): q/k of `head_dim` = nope + rope, values
    /// of `latent.v_dim`, one key/value head per head.
    pub latent: Option<super::latent::LatentShape>,
    /// The keys are multiplied by this (Falcon-H1's `key_multiplier`).
    pub key_scale: Option<f64>,
}

/// How q, k and v are projected from the hidden states.
pub enum QkvProjections {
    /// `q_proj`, `k_proj`, `v_proj` (fused ones are split on load).
    Separate {
        q_proj: Linear,
        k_proj: Linear,
        v_proj: Linear,
    },
    /// Multi-head latent attention.
    Latent(super::latent::LatentProjections),
}

/// q, k and v of a layer, and a gated layer's gate logits.
type QueriesAndKeys = (Tensor, Tensor, Tensor, Option<Tensor>);

/// The tensors of one attention layer (`model.layers.{l}.self_attn`), as loaded.
pub struct AttentionWeights {
    pub qkv: QkvProjections,
    pub o_proj: Linear,
    pub q_norm: Option<RmsNorm>,
    pub k_norm: Option<RmsNorm>,
    /// Sink logits `[1, heads, 1, 1]` f32 (sink: stored; off_by_one: zeros).
    pub sink_logits: Option<Tensor>,
    /// Affine-Scaled alpha projection `[heads, hidden]` and stored alpha_ma `[heads]` f32.
    pub alpha_proj: Option<Linear>,
    pub alpha_ma: Option<Tensor>,
    /// LogN's s_h `[1, heads, 1, 1]` f32 (logn only).
    pub logn_scale: Option<Tensor>,
}

/// Parameters of one attention layer (`model.layers.{l}.self_attn`).
pub struct Attention {
    qkv: QkvProjections,
    o_proj: Linear,
    /// RMSNorm over each query / key head before RoPE (`[head_dim]` weights).
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    /// Affine-Scaled alpha projection `[heads, hidden]`.
    alpha_proj: Option<Linear>,
    /// The kernels, from q, k and v on.
    core: AttentionCore,
}

impl Attention {
    /// The layer of its weights (`model::attention` loads them from a checkpoint).
    pub fn new(w: AttentionWeights, shape: AttentionShape) -> Self {
        Attention {
            qkv: w.qkv,
            o_proj: w.o_proj,
            q_norm: w.q_norm,
            k_norm: w.k_norm,
            alpha_proj: w.alpha_proj,
            core: AttentionCore::new(shape, w.sink_logits, w.alpha_ma, w.logn_scale),
        }
    }

    /// Attention output `[b, t, hidden]` for the normed hidden states `xs` `[b, t, hidden]`,
    /// computing `block` queries at a time and pushing hooks of `layer` to `probe`: the
    /// projections, then the kernel [`super::plan::plan`] picks for the layer, then the output.
    pub fn forward(
        &self,
        xs: &Tensor,
        rope: &Rope,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Tensor> {
        let s = &self.core.shape;
        let (b, t, _) = xs.dims3()?;
        let p = self.project(xs, rope, layer, probe)?;
        let out = self.core.attend_projected(&p, layer, block, probe)?;
        let _p = phase("attention: gate, o_proj");
        // latent attention's values fill the first v_dim dims of each head (zeros after)
        let v_dim = s.latent.map_or(s.head_dim, |l| l.v_dim);
        let out = match v_dim < s.head_dim {
            true => out.narrow(3, 0, v_dim)?,
            false => out,
        };
        let out = out.transpose(1, 2)?.reshape((b, t, s.heads * v_dim))?;
        let out = match p.gate {
            Some(g) => (out * g)?,
            None => out,
        };
        self.o_proj.forward(&out)
    }

    /// q, k, v (after QK-norm and RoPE), the gate and alpha of `xs`, with their hooks.
    fn project(
        &self,
        xs: &Tensor,
        rope: &Rope,
        layer: usize,
        probe: &mut dyn Probe,
    ) -> Result<Projected> {
        let s = &self.core.shape;
        let (b, t, _) = xs.dims3()?;
        let _p = phase("attention: q/k/v, norms, rope");
        let (q, k, v, gate) = self.queries_and_keys(xs)?;
        let whole = self.core.block_ctx(layer, 0, t, t);
        // TransformerLens' hook points and layout: [batch, pos, head, d_head], before and
        // after RoPE
        push(probe, Hook::Q, &whole, || Ok(q.clone()))?;
        push(probe, Hook::K, &whole, || Ok(k.clone()))?;
        let (q, k) = self.rotate(&q, &k, rope)?;
        push(probe, Hook::RotQ, &whole, || Ok(q.transpose(1, 2)?))?;
        push(probe, Hook::RotK, &whole, || Ok(k.transpose(1, 2)?))?;
        let v = v
            .reshape((b, t, s.kv_heads, s.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let alpha = self.alpha(xs, &whole, probe)?;
        let gate = self.gate(gate, &whole, probe)?;
        Ok(Projected {
            q,
            k,
            v,
            gate,
            alpha,
            host_sinks: self.core.host_sinks(xs)?,
            t,
        })
    }

    /// q `[b, t, heads, d]` and k `[b, t, kv, d]` of `xs` after their QK-norm (of the whole
    /// projections for OLMo 2, per head otherwise), v `[b, t, kv * d]` (latent attention's
    /// made with its keys), and the gate's logits of a gated layer (split from the query
    /// projection).
    fn queries_and_keys(&self, xs: &Tensor) -> Result<QueriesAndKeys> {
        let s = &self.core.shape;
        let (b, t, _) = xs.dims3()?;
        let (q_proj, k_proj, v_proj) = match &self.qkv {
            QkvProjections::Separate {
                q_proj,
                k_proj,
                v_proj,
            } => (q_proj, k_proj, v_proj),
            QkvProjections::Latent(latent) => {
                let (q, k, v) = latent.forward(xs)?;
                return Ok((q, k, v, None));
            }
        };
        let q_out = q_proj.forward(xs)?;
        let k_out = match s.key_scale {
            Some(scale) => crate::nn::times(&k_proj.forward(xs)?, scale)?,
            None => k_proj.forward(xs)?,
        };
        // OLMo 2 normalises the whole projections, before they are split into heads
        let (q_out, k_out) = match (&self.q_norm, &self.k_norm, s.qk_norm_whole) {
            (Some(q_norm), Some(k_norm), true) => {
                (q_norm.forward(&q_out)?, k_norm.forward(&k_out)?)
            }
            _ => (q_out, k_out),
        };
        let (q, gate) = if s.variant.kind().is_gated() {
            let (q, gate) = split_query_gate(&q_out, s.heads, s.head_dim)?;
            (q, Some(gate))
        } else {
            (q_out.reshape((b, t, s.heads, s.head_dim))?, None)
        };
        let k = k_out.reshape((b, t, s.kv_heads, s.head_dim))?;
        let (q, k) = match (&self.q_norm, &self.k_norm, s.qk_norm_whole) {
            (Some(q_norm), Some(k_norm), false) if !s.l2_qk_norm => {
                (q_norm.forward(&q)?, k_norm.forward(&k)?)
            }
            _ => (q, k),
        };
        Ok((q, k, v_proj.forward(xs)?, gate))
    }

    /// q `[b, heads, t, d]` and k `[b, kv, t, d]` of q `[b, t, heads, d]` and k: rotated
    /// (not in a NoPE layer), then normalised where the QK-norm follows RoPE (Llama 4), then
    /// the queries scaled by the layer's temperature at their positions (Llama 4's NoPE
    /// layers), as transformers orders them.
    fn rotate(&self, q: &Tensor, k: &Tensor, rope: &Rope) -> Result<(Tensor, Tensor)> {
        let s = &self.core.shape;
        let q = q.transpose(1, 2)?.contiguous()?;
        let k = k.transpose(1, 2)?.contiguous()?;
        let (q, k) = match s.rotary {
            true => (rope.apply(&q)?, rope.apply(&k)?),
            false => (q, k),
        };
        let (q, k) = match (&self.q_norm, &self.k_norm) {
            (Some(q_norm), Some(k_norm)) if s.l2_qk_norm => {
                (q_norm.forward(&q)?, k_norm.forward(&k)?)
            }
            _ => (q, k),
        };
        let Some(temperature) = s.temperature else {
            return Ok((q, k));
        };
        // the factors in f32, each query multiplied and rounded to its dtype once
        let t = q.dim(2)?;
        let factors: Vec<f32> = (0..t).map(|p| temperature.factor(p)).collect();
        let factors = Tensor::from_vec(factors, (1, 1, t, 1), q.device())?;
        let q = q
            .to_dtype(DType::F32)?
            .broadcast_mul(&factors)?
            .to_dtype(q.dtype())?;
        Ok((q, k))
    }

    /// Affine-Scaled alpha `[b, heads, t]` of `xs` (f32), pushed as `Alpha`; none for other
    /// variants.
    fn alpha(
        &self,
        xs: &Tensor,
        whole: &BlockCtx,
        probe: &mut dyn Probe,
    ) -> Result<Option<Tensor>> {
        let Some(proj) = &self.alpha_proj else {
            return Ok(None);
        };
        // in f32: a bf16 projection's sums are not rounded (alpha is a statistic)
        let raw = proj.forward_f32(xs)?;
        let alpha = activate(&raw, self.core.affine()?.activation)?
            .transpose(1, 2)?
            .contiguous()?;
        push(probe, Hook::Alpha, whole, || Ok(alpha.clone()))?;
        Ok(Some(alpha))
    }

    /// The sigmoid gate of the gate's logits `gate`, pushed as `Gate` (f32).
    fn gate(
        &self,
        gate: Option<Tensor>,
        whole: &BlockCtx,
        probe: &mut dyn Probe,
    ) -> Result<Option<Tensor>> {
        let Some(g) = gate else {
            return Ok(None);
        };
        let g = candle_nn::ops::sigmoid(&g.contiguous()?)?;
        push(probe, Hook::Gate, whole, || Ok(g.to_dtype(DType::F32)?))?;
        Ok(Some(g))
    }

    /// The layer's shape and variant.
    pub fn shape(&self) -> &AttentionShape {
        &self.core.shape
    }
}

/// Pushes `make()` as `hook` of `ctx` when the probe wants it (nothing is made otherwise).
fn push(
    probe: &mut dyn Probe,
    hook: Hook,
    ctx: &BlockCtx,
    make: impl FnOnce() -> Result<Tensor>,
) -> Result<()> {
    if probe.wants(hook, ctx.layer) {
        probe.on_tensor(hook, ctx, &make()?)?;
    }
    Ok(())
}
