//! One attention layer: projections, QK-norm, RoPE, then the query-block loop that computes
//! logits, the variant's logit transform and effective weights, the probe's hooks and the
//! output. The same code runs on every device; only the dtype differs.

use candle_core::{DType, Tensor, D};

use super::affine_scaled::{activate, affine_weights};
use super::blocks::{mask_invisible, query_blocks, visibility};
use super::cpu_affine::affine_rows;
use super::cpu_flash::{causal_attention, AffineTile, TileLogits, Tiles};
use super::cpu_softmax::causal_softmax;
use super::fused_softmax::causal_softmax_rows;
use super::gated::split_query_gate;
use super::logn::logn_logits;
use super::scale_invariant::{reversed_coefficients, DistanceTable};
use super::sink::softmax_with_sink;
use super::variant::{AffineConfig, ScaleInvariantConfig, VariantKind};
use crate::error::{Error, Result};
use crate::model::layers::{Linear, RmsNorm};
use crate::model::rope::Rope;
use crate::model::weights::WeightStore;
use crate::probe::{wants_attention, BlockCtx, Hook, Probe};
use crate::profile::phase;

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
    /// Whether `q_norm` / `k_norm` are required (Qwen3); other architectures use them when
    /// the checkpoint has `self_attn.q_norm.weight`.
    pub qk_norm: bool,
    /// epsilon of the QK-norm RMSNorm.
    pub rms_norm_eps: f64,
    /// scale_invariant settings (used by that variant only).
    pub scale_invariant: ScaleInvariantConfig,
    /// logn: s_h for every head from config.json, when no `self_attn.logn_scale` is stored.
    pub logn_scale: Option<f64>,
}

/// How the scaled logits s_ij become the logits the variant normalises.
enum LogitRule {
    /// Unchanged.
    Plain,
    /// l = a_t s + m_t, t = i - j.
    ScaleInvariant { tau: f64 },
    /// l = s * s_h * ln(i + 1); `scale` `[1, heads, 1, 1]` f32.
    Logn { scale: Tensor },
}

/// Parameters of one attention layer (`model.layers.{l}.self_attn`).
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// RMSNorm over each query / key head before RoPE (`[head_dim]` weights).
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    /// Sink logits `[1, heads, 1, 1]` f32 (sink: stored; off_by_one: zeros).
    sink_logits: Option<Tensor>,
    /// Affine-Scaled alpha projection `[heads, hidden]`.
    alpha_proj: Option<Linear>,
    /// Stored moving average of alpha `[heads]`, f32.
    alpha_ma: Option<Tensor>,
    logit_rule: LogitRule,
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
        let (q_norm, k_norm) = if s.qk_norm || store.contains(&format!("{prefix}.q_norm.weight")) {
            let norm = |name: &str| {
                RmsNorm::load(
                    store,
                    &format!("{prefix}.{name}"),
                    s.head_dim,
                    s.rms_norm_eps,
                )
            };
            (Some(norm("q_norm")?), Some(norm("k_norm")?))
        } else {
            (None, None)
        };
        let logit_rule = match s.variant {
            VariantKind::ScaleInvariant => LogitRule::ScaleInvariant {
                tau: s.scale_invariant.tau,
            },
            VariantKind::Logn => LogitRule::Logn {
                scale: load_logn_scale(store, prefix, s)?,
            },
            _ => LogitRule::Plain,
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
            q_norm,
            k_norm,
            sink_logits,
            alpha_proj,
            alpha_ma,
            logit_rule,
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
        let projections = phase("attention: q/k/v, norms, rope");
        let q_out = self.q_proj.forward(xs)?;
        let (q, gate) = if s.variant.is_gated() {
            let (q, gate) = split_query_gate(&q_out, s.heads, s.head_dim)?;
            (q, Some(gate))
        } else {
            (q_out.reshape((b, t, s.heads, s.head_dim))?, None)
        };
        let k = self
            .k_proj
            .forward(xs)?
            .reshape((b, t, s.kv_heads, s.head_dim))?;
        let (q, k) = match (&self.q_norm, &self.k_norm) {
            (Some(q_norm), Some(k_norm)) => (q_norm.forward(&q)?, k_norm.forward(&k)?),
            _ => (q, k),
        };
        let q = rope.apply(&q.transpose(1, 2)?.contiguous()?)?;
        let k = rope.apply(&k.transpose(1, 2)?.contiguous()?)?;
        let v = self
            .v_proj
            .forward(xs)?
            .reshape((b, t, s.kv_heads, s.head_dim))?
            .transpose(1, 2)?
            .contiguous()?;
        drop(projections);
        let whole = BlockCtx {
            layer,
            q_start: 0,
            q_len: t,
            seq_len: t,
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
        let distance_table = match self.logit_rule {
            LogitRule::ScaleInvariant { tau } => Some(DistanceTable::new(tau, t, xs.device())?),
            _ => None,
        };
        // host copies of the sink logits for the fused CPU softmax (not on other devices,
        // where the copy would wait for the device, nor when the sinks are being trained)
        let sinks = match &self.sink_logits {
            Some(sink) if xs.device().is_cpu() && !sink.track_op() => {
                Some(sink.flatten_all()?.to_vec1::<f32>()?)
            }
            _ => None,
        };
        // inference: the fused softmax (CPU or GPU) writes the weights and the probe's row
        // table in one pass, where the probe takes rows (plain logits, no affine step, no
        // training)
        let reads_scores =
            probe.wants(Hook::AttnScores, layer) || probe.wants(Hook::Softmax, layer);
        let row_wants = if matches!(self.logit_rule, LogitRule::Plain)
            && alpha.is_none()
            && !q.track_op()
            && !self.sink_logits.as_ref().is_some_and(Tensor::track_op)
            && !reads_scores
        {
            probe.row_request(layer)
        } else {
            None
        };
        // CPU f32 inference where no block's maps are wanted (the probe takes row tables,
        // or nothing): flash-style tiles that never hold a block's weights whole
        let flash = match self.flash_logits((&q, &k, &v), alpha.as_ref(), sinks.is_some(), t)? {
            Some(_) if reads_scores => None,
            Some(rule) => match probe.row_request(layer) {
                Some(wants) => Some((rule, Some(wants))),
                None if !wants_attention(&*probe, layer) => Some((rule, None)),
                None => None,
            },
            None => None,
        };
        let mut outputs = Vec::new();
        for (q_start, n) in query_blocks(t, block) {
            if let Some(((rule, affine), wants)) = &flash {
                let ctx = BlockCtx {
                    layer,
                    q_start,
                    q_len: n,
                    seq_len: t,
                };
                let flash = {
                    let _p = phase("attention: flash tiles (q.k, softmax, row table, values)");
                    let (qkv, block) = ((&q, &k, &v), (q_start, n));
                    let logits = (scale as f32, rule, affine.as_ref());
                    let tiles = Tiles::default();
                    causal_attention(qkv, block, logits, sinks.as_deref(), wants.as_ref(), tiles)?
                };
                if let Some((out, table)) = flash {
                    if wants.is_some() {
                        probe.on_row_table(&ctx, &table, self.sink_logits.is_some())?;
                    }
                    outputs.push(out);
                    probe.on_block_end(&ctx)?;
                    continue;
                }
            }
            let keys = q_start + n;
            let qb = q
                .narrow(2, q_start, n)?
                .reshape((b, s.kv_heads, groups * n, s.head_dim))?;
            let kb = k.narrow(2, 0, keys)?;
            let vb = v.narrow(2, 0, keys)?;
            // weights [b, heads, n, keys] times values, without copying keys per group
            let value_product = |weights: &Tensor| -> Result<Tensor> {
                Ok(weights
                    .to_dtype(v.dtype())?
                    .reshape((b, s.kv_heads, groups * n, keys))?
                    .matmul(&vb)?
                    .reshape((b, s.heads, n, s.head_dim))?)
            };
            let raw = {
                let _p = phase("attention: q.k products");
                qb.matmul(&kb.t()?)?.reshape((b, s.heads, n, keys))?
            };
            let ctx = BlockCtx {
                layer,
                q_start,
                q_len: n,
                seq_len: t,
            };
            // the fused kernels have no backward pass
            if let (Some(wants), false) = (&row_wants, raw.track_op()) {
                let sink_logits = self.sink_logits.as_ref();
                let fused = {
                    let _p = phase("attention: fused softmax + row table");
                    let sinks = (sink_logits, sinks.as_deref());
                    causal_softmax_rows(&raw, scale as f32, q_start, sinks, wants)?
                };
                if let Some((weights, table)) = fused {
                    probe.on_row_table(&ctx, &table, sink_logits.is_some())?;
                    let _p = phase("attention: value products");
                    outputs.push(value_product(&weights)?);
                    drop(_p);
                    probe.on_block_end(&ctx)?;
                    continue;
                }
            }
            let softmax = phase("attention: softmax and block hooks");
            let raw = raw.to_dtype(DType::F32)?;
            if probe.wants(Hook::Qk, layer) {
                probe.on_tensor(Hook::Qk, &ctx, &raw)?;
            }
            let want_softmax = probe.wants(Hook::Softmax, layer);
            // CPU f32 inference: scale, mask and softmax in one fused pass
            let sinks_unfused = self.sink_logits.is_some() && (sinks.is_none() || want_softmax);
            let fused = if !xs.device().is_cpu()
                || raw.track_op()
                || sinks_unfused
                || probe.wants(Hook::AttnScores, layer)
            {
                None
            } else {
                let (logits, kernel_scale) = match self.logit_rule {
                    LogitRule::Plain => (raw.clone(), scale as f32),
                    _ => (
                        self.logits(&raw, scale, q_start, distance_table.as_ref())?,
                        1.0,
                    ),
                };
                causal_softmax(&logits, kernel_scale, q_start, sinks.as_deref())?
            };
            let bw = match fused {
                Some((weights, Some(mass))) => BlockWeights {
                    weights,
                    softmax: None,
                    sink_mass: Some(mass),
                },
                Some((p, None)) => self.weights_from_softmax(p, q_start, t, alpha.as_ref())?,
                None => {
                    let visible = visibility(q_start, n, xs.device())?;
                    let logits = self.logits(&raw, scale, q_start, distance_table.as_ref())?;
                    let scores = mask_invisible(&logits, &visible)?;
                    if probe.wants(Hook::AttnScores, layer) {
                        probe.on_tensor(Hook::AttnScores, &ctx, &scores)?;
                    }
                    self.block_weights(&scores, q_start, t, alpha.as_ref(), want_softmax)?
                }
            };
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
            drop(softmax);
            let _p = phase("attention: value products");
            outputs.push(value_product(&bw.weights)?);
            drop(_p);
            probe.on_block_end(&ctx)?;
        }
        probe.on_layer_end(layer)?;
        let _p = phase("attention: gate, o_proj");
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
        q_start: usize,
        seq_len: usize,
        alpha: Option<&Tensor>,
        want_softmax: bool,
    ) -> Result<BlockWeights> {
        // the fused kernel has no backward pass: differentiable ops when training
        let softmax = || -> Result<Tensor> {
            Ok(if scores.track_op() {
                candle_nn::ops::softmax(scores, D::Minus1)?
            } else {
                candle_nn::ops::softmax_last_dim(scores)?
            })
        };
        if let Some(sink) = &self.sink_logits {
            let (weights, mass) = softmax_with_sink(scores, sink)?;
            let p = if want_softmax { Some(softmax()?) } else { None };
            return Ok(BlockWeights {
                weights,
                softmax: p,
                sink_mass: Some(mass),
            });
        }
        self.weights_from_softmax(softmax()?, q_start, seq_len, alpha)
    }

    /// The block's effective weights from its softmax `p` (no sink): Affine-Scaled
    /// weights for the affine variants, `p` itself otherwise.
    fn weights_from_softmax(
        &self,
        p: Tensor,
        q_start: usize,
        seq_len: usize,
        alpha: Option<&Tensor>,
    ) -> Result<BlockWeights> {
        match (alpha, &self.alpha_ma) {
            (Some(alpha), Some(alpha_ma)) => {
                let n = p.dim(2)?;
                let alpha_block = alpha.narrow(D::Minus1, q_start, n)?;
                let beta_length = self.shape.affine.beta_length;
                let fused = affine_rows(&p, &alpha_block, alpha_ma, q_start, seq_len, beta_length)?;
                let weights = match fused {
                    Some(weights) => weights,
                    None => affine_weights(
                        &p,
                        &alpha_block,
                        alpha_ma,
                        &visibility(q_start, n, p.device())?,
                        q_start,
                        seq_len,
                        &self.shape.affine,
                    )?,
                };
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

    /// The flash tiles' logit rule for `q`, `k`, `v` (sequence length `t`) and, with `alpha`
    /// `[b, heads, t]`, their Affine-Scaled weights, where the tiles can run: CPU f32
    /// inference and, with sinks, their host copy (`have_host_sinks`).
    fn flash_logits(
        &self,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        alpha: Option<&Tensor>,
        have_host_sinks: bool,
        t: usize,
    ) -> Result<Option<(TileLogits, Option<AffineTile>)>> {
        let logn_trained =
            matches!(&self.logit_rule, LogitRule::Logn { scale } if scale.track_op());
        let training = [q, k, v].iter().any(|x| x.track_op())
            || self.sink_logits.as_ref().is_some_and(Tensor::track_op)
            || alpha.is_some_and(Tensor::track_op)
            || logn_trained;
        if !q.device().is_cpu()
            || q.dtype() != DType::F32
            || training
            || (self.sink_logits.is_some() && !have_host_sinks)
        {
            return Ok(None);
        }
        let affine = match (alpha, &self.alpha_ma) {
            (Some(alpha), Some(alpha_ma)) => Some(AffineTile {
                alpha: alpha.flatten_all()?.to_vec1::<f32>()?,
                alpha_ma: alpha_ma.flatten_all()?.to_vec1::<f32>()?,
                beta_length: self.shape.affine.beta_length,
                seq_len: t,
            }),
            (None, _) => None,
            // alpha without its moving average: the candle path says what is missing
            (Some(_), None) => return Ok(None),
        };
        let rule = match &self.logit_rule {
            LogitRule::Plain => TileLogits::Plain,
            LogitRule::Logn { scale } => TileLogits::Logn {
                head_scale: scale.flatten_all()?.to_vec1::<f32>()?,
            },
            LogitRule::ScaleInvariant { tau } => {
                let (a, m) = reversed_coefficients(*tau, t);
                TileLogits::Distance { a, m }
            }
        };
        Ok(Some((rule, affine)))
    }

    /// The logits the variant normalises: raw q.k times `scale`, then the layer's rule.
    fn logits(
        &self,
        raw: &Tensor,
        scale: f64,
        q_start: usize,
        table: Option<&DistanceTable>,
    ) -> Result<Tensor> {
        let scaled = (raw * scale)?;
        match (&self.logit_rule, table) {
            (LogitRule::ScaleInvariant { .. }, Some(table)) => table.apply(&scaled, q_start),
            (LogitRule::Logn { scale }, _) => logn_logits(&scaled, scale, q_start),
            _ => Ok(scaled),
        }
    }

    /// The layer's shape and variant.
    pub fn shape(&self) -> &AttentionShape {
        &self.shape
    }
}

/// s_h `[1, heads, 1, 1]` f32 of a logn layer: the stored `{prefix}.logn_scale` [heads], else
/// config.json's `logn.scale` for every head.
fn load_logn_scale(store: &WeightStore, prefix: &str, s: &AttentionShape) -> Result<Tensor> {
    let name = format!("{prefix}.logn_scale");
    let scale = match s.logn_scale {
        Some(value) if !store.contains(&name) => {
            Tensor::full(value as f32, s.heads, store.device())?
        }
        _ => store
            .get_as(&name, &[s.heads], DType::F32)
            .map_err(|err| match err {
                Error::Input { path, message } => Error::Input {
                    path,
                    message: format!(
                        "{message} (logn needs it, or \"logn\": {{\"scale\": s}} in config.json)"
                    ),
                },
                other => other,
            })?,
    };
    Ok(scale.reshape((1, s.heads, 1, 1))?)
}
