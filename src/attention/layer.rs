//! One attention layer: projections, RoPE, then the query-block loop that computes logits,
//! the variant's effective weights, the probe's hooks and the output. The same code runs on
//! every device; only the dtype differs.

use candle_core::{DType, Tensor, D};

use super::affine_scaled::{activate, affine_weights};
use super::blocks::{mask_invisible, query_blocks, visibility};
use super::gated::split_query_gate;
use super::sink::softmax_with_sink;
use super::variant::{AffineConfig, VariantKind};
use crate::error::Result;
use crate::model::layers::Linear;
use crate::model::rope::Rope;
use crate::model::weights::WeightStore;
use crate::probe::{BlockCtx, Hook, Probe};

/// Shapes and variant of an attention layer.
#[derive(Debug, Clone)]
pub struct AttentionShape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub variant: VariantKind,
    pub affine: AffineConfig,
}

/// Parameters of one attention layer (`model.layers.{l}.self_attn`).
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// Sink logits `[1, heads, 1, 1]` f32 (sink: stored; off_by_one: zeros).
    sink_logits: Option<Tensor>,
    /// Affine-Scaled alpha projection `[heads, hidden]`.
    alpha_proj: Option<Linear>,
    /// Stored moving average of alpha `[heads]`, f32.
    alpha_ma: Option<Tensor>,
    shape: AttentionShape,
}

/// The weights of one query block and what came with them.
struct BlockWeights {
    weights: Tensor,
    softmax: Option<Tensor>,
    sink_mass: Option<Tensor>,
}

impl Attention {
    /// Loads the layer under `prefix` (e.g. `model.layers.3.self_attn`).
    pub fn load(store: &WeightStore, prefix: &str, shape: AttentionShape) -> Result<Self> {
        let s = &shape;
        let q_out = if s.variant.is_gated() { 2 } else { 1 } * s.heads * s.head_dim;
        let kv_out = s.kv_heads * s.head_dim;
        let q_proj = Linear::load(
            store,
            &format!("{prefix}.q_proj"),
            s.hidden,
            q_out,
            s.qkv_bias,
        )?;
        let k_proj = Linear::load(
            store,
            &format!("{prefix}.k_proj"),
            s.hidden,
            kv_out,
            s.qkv_bias,
        )?;
        let v_proj = Linear::load(
            store,
            &format!("{prefix}.v_proj"),
            s.hidden,
            kv_out,
            s.qkv_bias,
        )?;
        let o_proj = Linear::load(
            store,
            &format!("{prefix}.o_proj"),
            s.heads * s.head_dim,
            s.hidden,
            s.o_bias,
        )?;
        let sink_logits = match s.variant {
            VariantKind::Sink => Some(
                store
                    .get_as(&format!("{prefix}.sinks"), &[s.heads], DType::F32)?
                    .reshape((1, s.heads, 1, 1))?,
            ),
            VariantKind::OffByOne => Some(Tensor::zeros(
                (1, s.heads, 1, 1),
                DType::F32,
                store.device(),
            )?),
            _ => None,
        };
        let (alpha_proj, alpha_ma) = if s.variant.is_affine() {
            let bias = store.contains(&format!("{prefix}.alpha_proj.bias"));
            (
                Some(Linear::load(
                    store,
                    &format!("{prefix}.alpha_proj"),
                    s.hidden,
                    s.heads,
                    bias,
                )?),
                Some(store.get_as(&format!("{prefix}.alpha_ma"), &[s.heads], DType::F32)?),
            )
        } else {
            (None, None)
        };
        Ok(Attention {
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            sink_logits,
            alpha_proj,
            alpha_ma,
            shape,
        })
    }

    /// Attention output `[b, t, hidden]` for the normed hidden states `xs` `[b, t, hidden]`,
    /// computing `block` queries at a time and pushing hooks of `layer` to `probe`.
    pub fn forward(
        &self,
        xs: &Tensor,
        rope: &Rope,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Tensor> {
        let s = &self.shape;
        let (b, t, _) = xs.dims3()?;
        let groups = s.heads / s.kv_heads;
        let q_out = self.q_proj.forward(xs)?;
        let (q, gate) = if s.variant.is_gated() {
            let (q, gate) = split_query_gate(&q_out, s.heads, s.head_dim)?;
            (q, Some(gate))
        } else {
            (q_out.reshape((b, t, s.heads, s.head_dim))?, None)
        };
        let q = rope.apply(&q.transpose(1, 2)?.contiguous()?)?;
        let k = self
            .k_proj
            .forward(xs)?
            .reshape((b, t, s.kv_heads, s.head_dim))?;
        let k = rope.apply(&k.transpose(1, 2)?.contiguous()?)?;
        let v = self
            .v_proj
            .forward(xs)?
            .reshape((b, t, s.kv_heads, s.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        let whole = BlockCtx {
            layer,
            q_start: 0,
            q_len: t,
            seq_len: t,
            visible: None,
        };
        if probe.wants(Hook::Q, layer) {
            probe.on_tensor(Hook::Q, &whole, &q)?;
        }
        if probe.wants(Hook::K, layer) {
            probe.on_tensor(Hook::K, &whole, &k)?;
        }
        let alpha = match &self.alpha_proj {
            Some(proj) => {
                let raw = proj.forward(xs)?.to_dtype(DType::F32)?;
                let alpha = activate(&raw, s.affine.activation)?
                    .transpose(1, 2)?
                    .contiguous()?;
                if probe.wants(Hook::Alpha, layer) {
                    probe.on_tensor(Hook::Alpha, &whole, &alpha)?;
                }
                Some(alpha)
            }
            None => None,
        };
        let gate = match gate {
            Some(g) => {
                let g = candle_nn::ops::sigmoid(&g.contiguous()?)?;
                if probe.wants(Hook::Gate, layer) {
                    probe.on_tensor(Hook::Gate, &whole, &g.to_dtype(DType::F32)?)?;
                }
                Some(g)
            }
            None => None,
        };

        // Grouped-query attention without copying keys: view the query heads of one kv
        // head as extra rows, [b, kv, groups * n, d] x [b, kv, d, keys].
        let scale = 1.0 / (s.head_dim as f64).sqrt();
        let mut outputs = Vec::new();
        for (q_start, n) in query_blocks(t, block) {
            let keys = q_start + n;
            let qb = q
                .narrow(2, q_start, n)?
                .reshape((b, s.kv_heads, groups * n, s.head_dim))?;
            let kb = k.narrow(2, 0, keys)?;
            let vb = v.narrow(2, 0, keys)?;
            let raw = qb
                .matmul(&kb.t()?)?
                .reshape((b, s.heads, n, keys))?
                .to_dtype(DType::F32)?;
            let visible = visibility(q_start, n, xs.device())?;
            let ctx = BlockCtx {
                layer,
                q_start,
                q_len: n,
                seq_len: t,
                visible: Some(&visible),
            };
            if probe.wants(Hook::Qk, layer) {
                probe.on_tensor(Hook::Qk, &ctx, &raw)?;
            }
            let scores = mask_invisible(&(raw * scale)?, &visible)?;
            if probe.wants(Hook::AttnScores, layer) {
                probe.on_tensor(Hook::AttnScores, &ctx, &scores)?;
            }
            let bw = self.block_weights(
                &scores,
                &visible,
                q_start,
                t,
                alpha.as_ref(),
                probe.wants(Hook::Softmax, layer),
            )?;
            if probe.wants(Hook::Pattern, layer) {
                probe.on_tensor(Hook::Pattern, &ctx, &bw.weights)?;
            }
            if let Some(p) = &bw.softmax {
                if probe.wants(Hook::Softmax, layer) {
                    probe.on_tensor(Hook::Softmax, &ctx, p)?;
                }
            }
            if let Some(mass) = &bw.sink_mass {
                if probe.wants(Hook::SinkMass, layer) {
                    probe.on_tensor(Hook::SinkMass, &ctx, mass)?;
                }
            }
            let out = bw
                .weights
                .to_dtype(v.dtype())?
                .reshape((b, s.kv_heads, groups * n, keys))?
                .matmul(&vb)?
                .reshape((b, s.heads, n, s.head_dim))?;
            outputs.push(out);
        }
        probe.on_layer_end(layer)?;
        let out =
            Tensor::cat(&outputs, 2)?
                .transpose(1, 2)?
                .reshape((b, t, s.heads * s.head_dim))?;
        let out = match gate {
            Some(g) => (out * g)?,
            None => out,
        };
        self.o_proj.forward(&out)
    }

    fn block_weights(
        &self,
        scores: &Tensor,
        visible: &Tensor,
        q_start: usize,
        seq_len: usize,
        alpha: Option<&Tensor>,
        want_softmax: bool,
    ) -> Result<BlockWeights> {
        let softmax = || -> Result<Tensor> { Ok(candle_nn::ops::softmax_last_dim(scores)?) };
        if let Some(sink) = &self.sink_logits {
            let (weights, mass) = softmax_with_sink(scores, sink)?;
            let p = if want_softmax { Some(softmax()?) } else { None };
            return Ok(BlockWeights {
                weights,
                softmax: p,
                sink_mass: Some(mass),
            });
        }
        let p = softmax()?;
        match (alpha, &self.alpha_ma) {
            (Some(alpha), Some(alpha_ma)) => {
                let n = scores.dim(2)?;
                let alpha_block = alpha.narrow(D::Minus1, q_start, n)?;
                let weights = affine_weights(
                    &p,
                    &alpha_block,
                    alpha_ma,
                    visible,
                    q_start,
                    seq_len,
                    &self.shape.affine,
                )?;
                Ok(BlockWeights {
                    weights,
                    softmax: Some(p),
                    sink_mass: None,
                })
            }
            _ => Ok(BlockWeights {
                weights: p.clone(),
                softmax: Some(p),
                sink_mass: None,
            }),
        }
    }

    /// The layer's shape and variant.
    pub fn shape(&self) -> &AttentionShape {
        &self.shape
    }
}
