//! The kernels of an attention layer from its q, k and v on: the plan's choice for the
//! layer, then query block by query block the logits, the variant's logit rule and
//! effective weights, the probe's hooks and row tables, and the value product. A model's
//! [`super::Attention`] calls it after its projections; a layer computed elsewhere (a
//! transformers module through the capture backend) calls [`AttentionCore::attend`] with
//! its own q, k and v.

use candle_core::{DType, Device, Tensor, D};

use super::affine_scaled::affine_weights;
use super::cpu_affine::affine_rows;
use super::cpu_softmax::causal_softmax;
use super::flash::{
    causal_attention, AffineTile, Logits, PackedKv, Qkv, QueryBlock, TileLogits, TileOutput, Tiles,
};
use super::fused_softmax::{causal_softmax_rows, SinkLogits};
use super::layer::AttentionShape;
use super::logn::logn_logits;
use super::plan::{plan, DeviceKind, Facts, Kernel};
use super::scale_invariant::{reversed_coefficients, DistanceTable};
use super::sink::softmax_with_sink;
use super::variant::{AffineConfig, Variant};
use super::wide_qkv::{rounded_product, WideQkv};
use asa_core::error::{Error, Result};
use asa_core::profile::phase;
use asa_hooks::blocks::{mask_invisible, query_blocks, row_max_logits, visibility, with_column};
use asa_hooks::{wants_attention, BlockCtx, Hook, KeyWindow, Probe};
use asa_kernels::cpu::host::{lane_max, with_cpu_f32};

/// How the scaled logits s_ij become the logits the variant normalises.
enum LogitRule {
    /// Unchanged.
    Plain,
    /// l = a_t s + m_t, t = i - j.
    ScaleInvariant { tau: f64 },
    /// l = s * s_h * ln(i + 1); `scale` `[1, heads, 1, 1]` f32.
    Logn { scale: Tensor },
    /// l = cap tanh(s / cap) (Gemma 2's soft-capping).
    SoftCap { cap: f64 },
}

/// The weights of one query block and what came with them.
struct BlockWeights {
    weights: Tensor,
    softmax: Option<Tensor>,
    sink_mass: Option<Tensor>,
}

/// An attention layer's kernels and what they read besides q, k and v: its shape and
/// variant, sink logits, stored alpha_ma and logit rule.
pub struct AttentionCore {
    /// Sink logits `[1, heads, 1, 1]` f32 (sink: stored; off_by_one: zeros).
    sink_logits: Option<Tensor>,
    /// Stored moving average of alpha `[heads]`, f32.
    alpha_ma: Option<Tensor>,
    logit_rule: LogitRule,
    pub(super) shape: AttentionShape,
}

impl AttentionCore {
    /// The kernels of a layer of `shape`, with its sink logits `[1, heads, 1, 1]`, stored
    /// alpha_ma `[heads]` and LogN scales `[1, heads, 1, 1]` where it has them.
    pub fn new(
        shape: AttentionShape,
        sink_logits: Option<Tensor>,
        alpha_ma: Option<Tensor>,
        logn_scale: Option<Tensor>,
    ) -> Self {
        let logit_rule = match (shape.variant, logn_scale) {
            (Variant::ScaleInvariant(settings), _) => {
                LogitRule::ScaleInvariant { tau: settings.tau }
            }
            (Variant::Logn { .. }, Some(scale)) => LogitRule::Logn { scale },
            _ => match shape.softcap {
                Some(cap) => LogitRule::SoftCap { cap },
                None => LogitRule::Plain,
            },
        };
        AttentionCore {
            sink_logits,
            alpha_ma,
            logit_rule,
            shape,
        }
    }

    /// The attention output `[b, heads, t, d]` of q `[b, heads, t, d]` and k, v
    /// `[b, kv, t, d]` (after any QK-norm and RoPE; no gate, no alpha), `block` queries at
    /// a time, with `layer`'s hooks and row tables pushed to `probe` (its kernel first and
    /// its end last, as a model's layer pushes them).
    pub fn attend(
        &self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Tensor> {
        let t = q.dim(2)?;
        let p = Projected {
            host_sinks: self.host_sinks(&q)?,
            q,
            k,
            v,
            gate: None,
            alpha: None,
            t,
        };
        self.attend_projected(&p, layer, block, probe)
    }

    /// [`AttentionCore::attend`] of a layer's projections: the kernel [`plan`] picks, the
    /// observers' blocks, the layer's end; the output `[b, heads, t, d]`.
    pub(super) fn attend_projected(
        &self,
        p: &Projected,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Tensor> {
        let kernel = plan(&self.facts(p, layer, &*probe));
        probe.on_kernel(layer, kernel);
        let outputs = match kernel {
            Kernel::FlashTiles => self.flash_blocks(p, layer, block, probe)?,
            Kernel::FusedRows => self.fused_row_blocks(p, layer, block, probe)?,
            Kernel::MaterialisedFused | Kernel::Materialised => {
                let fused = kernel == Kernel::MaterialisedFused;
                self.materialised_blocks(p, layer, block, fused, probe)?
            }
            Kernel::TorchBlocks => return Err(unplanned("torch blocks")),
        };
        self.observe_blocks(p, layer, block, probe)?;
        probe.on_layer_end(layer)?;
        Ok(Tensor::cat(&outputs, 2)?)
    }

    /// Host copies of the sink logits for the CPU kernels (not on other devices, where the
    /// copy would wait for the device, nor when the sinks are being trained).
    pub(super) fn host_sinks(&self, xs: &Tensor) -> Result<Option<Vec<f32>>> {
        match &self.sink_logits {
            Some(sink) if xs.device().is_cpu() && !sink.track_op() => Ok(Some(host_f32(sink)?)),
            _ => Ok(None),
        }
    }

    /// What [`plan`] decides from for this layer.
    fn facts(&self, p: &Projected, layer: usize, probe: &dyn Probe) -> Facts {
        let device = match p.q.device() {
            Device::Cpu => DeviceKind::Cpu,
            Device::Cuda(_) if cfg!(feature = "cuda") => DeviceKind::Cuda,
            _ => DeviceKind::Other,
        };
        let logn_trained =
            matches!(&self.logit_rule, LogitRule::Logn { scale } if scale.track_op());
        let sinks = self.sink_logits.as_ref();
        Facts {
            device,
            f32: p.q.dtype() == DType::F32,
            half: matches!(p.q.dtype(), DType::BF16 | DType::F16),
            qk_tracks: p.q.track_op() || p.k.track_op(),
            others_track: p.v.track_op()
                || sinks.is_some_and(Tensor::track_op)
                || p.alpha.as_ref().is_some_and(Tensor::track_op)
                || logn_trained,
            sinks: sinks.is_some(),
            host_sinks: p.host_sinks.is_some(),
            sinks_f32: sinks.is_none_or(|s| s.dtype() == DType::F32),
            plain_logits: matches!(self.logit_rule, LogitRule::Plain),
            windowed: self.shape.window.restricts(p.t),
            chunked: matches!(self.shape.window, KeyWindow::Chunked(_)),
            softcapped: matches!(self.logit_rule, LogitRule::SoftCap { .. }),
            head_dim: self.shape.head_dim,
            affine: p.alpha.is_some(),
            alpha_ma: self.alpha_ma.is_some(),
            rows: probe.row_request(layer),
            wants_attention: wants_attention(probe, layer),
            wants_scores: probe.wants(Hook::AttnScores, layer),
            wants_softmax: probe.wants(Hook::Softmax, layer),
        }
    }

    /// [`Kernel::FlashTiles`]: each block's output and row table from the tiles.
    fn flash_blocks(
        &self,
        p: &Projected,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Vec<Tensor>> {
        #[cfg(feature = "cuda")]
        if p.q.device().is_cuda() {
            return self.gpu_flash_blocks(p, layer, block, probe);
        }
        // the scale of the other kernels, rounded to f32
        let scale = self.shape.scale as f32;
        let (rule, affine) = self.tile_logits(p)?;
        let wants = probe.row_request(layer);
        let logits = Logits {
            scale,
            rule: &rule,
            affine: affine.as_ref(),
        };
        // a bf16 or f16 layer's tiles read f32 copies of q, k, v (exact) and multiply in bf16
        // (bf16 on AVX-512 BF16) or f32; the output is rounded back to the layer's dtype
        let dtype = p.q.dtype();
        let (q, k, v) = (
            p.q.to_dtype(DType::F32)?,
            p.k.to_dtype(DType::F32)?,
            p.v.to_dtype(DType::F32)?,
        );
        let packed = match dtype == DType::BF16 && asa_kernels::cpu::bf16_gemm::available() {
            true => PackedKv::pack(&k, &v)?,
            false => None,
        };
        let qkv = Qkv {
            q: &q,
            k: &k,
            v: &v,
        };
        let blocks = query_blocks(p.t, block);
        self.tile_blocks(p, layer, blocks, wants.is_some(), probe, |block| {
            let sinks = p.host_sinks.as_deref();
            let tiles = Tiles::default();
            let output = causal_attention(
                qkv,
                block,
                logits,
                sinks,
                wants.as_ref(),
                tiles,
                packed.as_ref(),
            )?
            .ok_or_else(|| unplanned("flash tiles"))?;
            Ok(TileOutput {
                out: output.out.to_dtype(dtype)?,
                ..output
            })
        })
    }

    /// Each query block of `blocks` through the tiles of `compute` (its output, row table
    /// and key sums), the table (after the key sums) handed to the probe when `rows`.
    fn tile_blocks(
        &self,
        p: &Projected,
        layer: usize,
        blocks: impl IntoIterator<Item = (usize, usize)>,
        rows: bool,
        probe: &mut dyn Probe,
        mut compute: impl FnMut(QueryBlock) -> Result<TileOutput>,
    ) -> Result<Vec<Tensor>> {
        let mut outputs = Vec::new();
        for (q_start, n) in blocks {
            let ctx = self.block_ctx(layer, q_start, n, p.t);
            let _p = phase("attention: flash tiles (q.k, softmax, row table, values)");
            let window = self.shape.window;
            let TileOutput {
                out,
                table,
                key_sums,
            } = compute(QueryBlock { q_start, n, window })?;
            if let Some(sums) = &key_sums {
                probe.on_key_sums(&ctx, sums)?;
            }
            if rows {
                probe.on_row_table(&ctx, &table)?;
            }
            outputs.push(out);
            probe.on_block_end(&ctx)?;
        }
        Ok(outputs)
    }

    /// [`Kernel::FlashTiles`] on a GPU (`cuda::flash`): each block's output and row table.
    #[cfg(feature = "cuda")]
    fn gpu_flash_blocks(
        &self,
        p: &Projected,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Vec<Tensor>> {
        use asa_kernels::cuda::flash::{causal_attention, launch_block, FlashLogits};
        let (rule, affine) = self.device_tile_logits(p)?;
        let sinks = match &self.sink_logits {
            Some(s) => Some(s.to_dtype(DType::F32)?),
            None => None,
        };
        let logits = FlashLogits {
            scale: self.shape.scale as f32,
            rule: &rule,
            affine: affine.as_ref(),
            sinks: sinks.as_ref(),
        };
        let wants = probe.row_request(layer);
        let (b, heads) = (p.q.dim(0)?, p.q.dim(1)?);
        let blocks = query_blocks(p.t, launch_block(block, b * heads, p.t));
        let qkv = Qkv {
            q: &p.q,
            k: &p.k,
            v: &p.v,
        };
        self.tile_blocks(p, layer, blocks, wants.is_some(), probe, |block| {
            let (out, table) = causal_attention(qkv, block, logits, wants.as_ref())?
                .ok_or_else(|| unplanned("flash tiles on the GPU"))?;
            // the plan gives the GPU's tiles no key sums to compute
            Ok(TileOutput {
                out,
                table,
                key_sums: None,
            })
        })
    }

    /// The GPU tiles' logit rule and Affine-Scaled alpha and alpha_ma, on the device.
    #[cfg(feature = "cuda")]
    fn device_tile_logits(
        &self,
        p: &Projected,
    ) -> Result<(
        asa_kernels::cuda::flash::DeviceLogits,
        Option<asa_kernels::cuda::flash::DeviceAffine>,
    )> {
        use asa_kernels::cuda::flash::{DeviceAffine, DeviceLogits};
        let affine = match (&p.alpha, &self.alpha_ma) {
            (Some(alpha), Some(alpha_ma)) => Some(DeviceAffine {
                alpha: alpha.to_dtype(DType::F32)?,
                alpha_ma: alpha_ma.to_dtype(DType::F32)?,
                beta_length: self.affine()?.beta_length,
                seq_len: p.t,
            }),
            (None, _) => None,
            (Some(_), None) => return Err(unplanned("Affine-Scaled tiles without alpha_ma")),
        };
        let rule = match &self.logit_rule {
            LogitRule::Plain => DeviceLogits::Plain,
            LogitRule::Logn { scale } => DeviceLogits::Logn {
                head_scale: scale.to_dtype(DType::F32)?,
            },
            LogitRule::ScaleInvariant { tau } => {
                let (a, m) = reversed_coefficients(*tau, p.t);
                let device = p.q.device();
                DeviceLogits::Distance {
                    a: Tensor::new(a.as_slice(), device)?,
                    m: Tensor::new(m.as_slice(), device)?,
                }
            }
            LogitRule::SoftCap { cap } => DeviceLogits::SoftCap { cap: *cap as f32 },
        };
        Ok((rule, affine))
    }

    /// [`Kernel::FusedRows`]: each block's weights and row table from the fused softmax of
    /// its raw q.k (plain logits), then the value product.
    fn fused_row_blocks(
        &self,
        p: &Projected,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Vec<Tensor>> {
        let scale = self.shape.scale;
        let wants = probe
            .row_request(layer)
            .ok_or_else(|| unplanned("fused softmax rows without a row request"))?;
        let sinks = SinkLogits {
            tensor: self.sink_logits.as_ref(),
            host: p.host_sinks.as_deref(),
        };
        let mut outputs = Vec::new();
        let wide = WideQkv::of(&p.q, &p.k, &p.v)?;
        for (q_start, n) in query_blocks(p.t, block) {
            let ctx = self.block_ctx(layer, q_start, n, p.t);
            let raw = self.raw_scores(p, &ctx, false, wide.as_ref())?;
            let (weights, table) = {
                let _p = phase("attention: fused softmax + row table");
                causal_softmax_rows(&raw, scale as f32, q_start, sinks, &wants)?
                    .ok_or_else(|| unplanned("fused softmax rows"))?
            };
            // the fused kernels leave the max-logit column to the logits (plain here)
            let table = match wants.max_logit_column() {
                Some(c) => with_column(
                    &table,
                    c,
                    &row_max_logits(&(&raw * scale)?, q_start, self.shape.window)?,
                )?,
                None => table,
            };
            probe.on_row_table(&ctx, &table)?;
            let _p = phase("attention: value products");
            outputs.push(self.value_product(p, &weights, &ctx, wide.as_ref())?);
            drop(_p);
            probe.on_block_end(&ctx)?;
        }
        Ok(outputs)
    }

    /// [`Kernel::MaterialisedFused`] / [`Kernel::Materialised`]: each block's weights in
    /// memory (from the CPU's fused softmax when `fused`, else candle ops), its hooks, then
    /// the value product.
    fn materialised_blocks(
        &self,
        p: &Projected,
        layer: usize,
        block: usize,
        fused: bool,
        probe: &mut dyn Probe,
    ) -> Result<Vec<Tensor>> {
        let table = self.distance_table(p)?;
        let wanted: Vec<Hook> = Hook::ATTENTION
            .into_iter()
            .filter(|&h| probe.wants(h, layer))
            .collect();
        let wants = |hook: Hook| wanted.contains(&hook);
        let mut outputs = Vec::new();
        let wide = WideQkv::of(&p.q, &p.k, &p.v)?;
        for (q_start, n) in query_blocks(p.t, block) {
            let ctx = self.block_ctx(layer, q_start, n, p.t);
            let softmax = phase("attention: softmax and block hooks");
            let raw = self.raw_scores(p, &ctx, true, wide.as_ref())?;
            let mut push = |hook: Hook, xs: &Tensor| probe.on_tensor(hook, &ctx, xs);
            if wants(Hook::Qk) {
                push(Hook::Qk, &raw)?;
            }
            // each row's largest logit, from the logits the block computes anyway
            let (bw, max_logit) = if fused {
                let want_max = wants(Hook::MaxLogit);
                let table = table.as_ref();
                self.fused_block_weights(p, &raw, &ctx, table, want_max)?
            } else {
                self.candle_block_weights(p, &raw, &ctx, table.as_ref(), &wants, &mut push)?
            };
            push_weight_hooks(&bw, max_logit.as_ref(), &wants, &mut push)?;
            drop(softmax);
            let _p = phase("attention: value products");
            outputs.push(self.value_product(p, &bw.weights, &ctx, wide.as_ref())?);
            drop(_p);
            probe.on_block_end(&ctx)?;
        }
        Ok(outputs)
    }

    /// The per-block attention tensors observers attached beside the planned probe want
    /// ([`Probe::observes`]), materialised with candle ops whatever kernel ran the layer:
    /// the layer's output and the planned probe's rows are the kernel's alone.
    fn observe_blocks(
        &self,
        p: &Projected,
        layer: usize,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<()> {
        let wanted: Vec<Hook> = Hook::ATTENTION
            .into_iter()
            .filter(|&h| probe.observes(h, layer))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let wants = |hook: Hook| wanted.contains(&hook);
        let _p = phase("attention: blocks materialised for observers");
        let table = self.distance_table(p)?;
        let wide = WideQkv::of(&p.q, &p.k, &p.v)?;
        for (q_start, n) in query_blocks(p.t, block) {
            let ctx = self.block_ctx(layer, q_start, n, p.t);
            let raw = self.raw_scores(p, &ctx, true, wide.as_ref())?;
            let mut push = |hook: Hook, xs: &Tensor| probe.on_observed(hook, &ctx, xs);
            if wants(Hook::Qk) {
                push(Hook::Qk, &raw)?;
            }
            let (bw, max_logit) =
                self.candle_block_weights(p, &raw, &ctx, table.as_ref(), &wants, &mut push)?;
            push_weight_hooks(&bw, max_logit.as_ref(), &wants, &mut push)?;
        }
        Ok(())
    }

    /// The scale-invariant rule's distance table for a layer of `p.t` tokens (none for
    /// other rules).
    fn distance_table(&self, p: &Projected) -> Result<Option<DistanceTable>> {
        match self.logit_rule {
            LogitRule::ScaleInvariant { tau } => {
                Ok(Some(DistanceTable::new(tau, p.t, p.q.device())?))
            }
            _ => Ok(None),
        }
    }

    /// A block's weights from its raw q.k (f32) with candle ops: the logits, masked, pushed
    /// as `AttnScores` when wanted, then the variant's weights (the plain softmax too when
    /// `Softmax` is wanted); with each row's largest logit when `MaxLogit` is wanted.
    fn candle_block_weights(
        &self,
        p: &Projected,
        raw: &Tensor,
        ctx: &BlockCtx,
        table: Option<&DistanceTable>,
        wants: &dyn Fn(Hook) -> bool,
        push: &mut dyn FnMut(Hook, &Tensor) -> Result<()>,
    ) -> Result<(BlockWeights, Option<Tensor>)> {
        let (scale, q_start, n) = (self.shape.scale, ctx.q_start, ctx.q_len);
        let visible = visibility(q_start, n, self.shape.window, p.q.device())?;
        let scores = mask_invisible(&self.logits(raw, scale, q_start, table)?, &visible)?;
        if wants(Hook::AttnScores) {
            push(Hook::AttnScores, &scores)?;
        }
        let max_logit = match (wants(Hook::MaxLogit), &self.logit_rule) {
            (false, _) => None,
            // before soft-capping (the capped maximum follows: tanh is monotone)
            (true, LogitRule::SoftCap { .. }) => {
                Some(row_max_logits(&(raw * scale)?, q_start, self.shape.window)?)
            }
            (true, _) => Some(scores.max(D::Minus1)?),
        };
        let want_softmax = wants(Hook::Softmax);
        let bw = self.block_weights(&scores, q_start, p.t, p.alpha.as_ref(), want_softmax)?;
        Ok((bw, max_logit))
    }

    /// The CPU's fused scale, mask and softmax of a block's raw q.k (f32), then the
    /// variant's weights; with `want_max`, each row's largest logit `[b, heads, n]` too.
    fn fused_block_weights(
        &self,
        p: &Projected,
        raw: &Tensor,
        ctx: &BlockCtx,
        table: Option<&DistanceTable>,
        want_max: bool,
    ) -> Result<(BlockWeights, Option<Tensor>)> {
        let (scale, q_start) = (self.shape.scale, ctx.q_start);
        let (logits, kernel_scale) = match self.logit_rule {
            LogitRule::Plain => (raw.clone(), scale as f32),
            _ => (self.logits(raw, scale, q_start, table)?, 1.0),
        };
        let max_logit = match want_max {
            true => Some(host_row_max(&logits, q_start, kernel_scale)?),
            false => None,
        };
        let fused = causal_softmax(&logits, kernel_scale, q_start, p.host_sinks.as_deref())?
            .ok_or_else(|| unplanned("fused CPU softmax"))?;
        let bw = match fused {
            (weights, Some(mass)) => BlockWeights {
                weights,
                softmax: None,
                sink_mass: Some(mass),
            },
            (softmax, None) => {
                self.weights_from_softmax(softmax, q_start, p.t, p.alpha.as_ref())?
            }
        };
        Ok((bw, max_logit))
    }

    /// Raw q.k `[b, heads, n, q_start + n]` of a block, without copying keys per group:
    /// the query heads of one kv head as extra rows, `[b, kv, groups * n, d] x [b, kv, d, keys]`;
    /// in f32 when `widened` (of bf16 q and k: bf16 values); from `wide` where a bf16 layer's
    /// products run in f32.
    fn raw_scores(
        &self,
        p: &Projected,
        ctx: &BlockCtx,
        widened: bool,
        wide: Option<&WideQkv>,
    ) -> Result<Tensor> {
        let (q_start, n) = (ctx.q_start, ctx.q_len);
        let s = &self.shape;
        let b = p.q.dim(0)?;
        let groups = s.heads / s.kv_heads;
        let keys = q_start + n;
        let (q, k) = wide.map_or((&p.q, &p.k), |w| (&w.q, &w.k));
        let qb = q
            .narrow(2, q_start, n)?
            .reshape((b, s.kv_heads, groups * n, s.head_dim))?;
        let kb = k.narrow(2, 0, keys)?;
        let _p = phase("attention: q.k products");
        let raw = qb.matmul(&kb.t()?)?;
        let raw = match (wide, widened) {
            (Some(_), widened) => rounded_product(raw, widened)?,
            (None, true) => asa_kernels::cpu::bf16_elementwise::to_f32(&raw)?,
            (None, false) => raw,
        };
        Ok(raw.reshape((b, s.heads, n, keys))?)
    }

    /// Weights `[b, heads, n, keys]` times the values the block sees, `[b, heads, n, d]`
    /// (the weights rounded to the values' dtype first); from `wide` where a bf16 layer's
    /// products run in f32.
    fn value_product(
        &self,
        p: &Projected,
        weights: &Tensor,
        ctx: &BlockCtx,
        wide: Option<&WideQkv>,
    ) -> Result<Tensor> {
        let (q_start, n) = (ctx.q_start, ctx.q_len);
        let s = &self.shape;
        let b = p.q.dim(0)?;
        let (groups, keys) = (s.heads / s.kv_heads, q_start + n);
        let grouped = (b, s.kv_heads, groups * n, keys);
        let out = match wide {
            Some(w) => {
                let weights = asa_kernels::cpu::bf16_elementwise::rounded_f32(weights)?;
                let product = weights.reshape(grouped)?.matmul(&w.v.narrow(2, 0, keys)?)?;
                rounded_product(product, false)?
            }
            None => {
                let vb = p.v.narrow(2, 0, keys)?;
                weights
                    .to_dtype(p.v.dtype())?
                    .reshape(grouped)?
                    .matmul(&vb)?
            }
        };
        Ok(out.reshape((b, s.heads, n, s.head_dim))?)
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
                let beta_length = self.affine()?.beta_length;
                let fused = affine_rows(&p, &alpha_block, alpha_ma, q_start, seq_len, beta_length)?;
                let weights = match fused {
                    Some(weights) => weights,
                    None => affine_weights(
                        &p,
                        &alpha_block,
                        alpha_ma,
                        &visibility(q_start, n, self.shape.window, p.device())?,
                        q_start,
                        seq_len,
                        self.affine()?,
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

    /// The flash tiles' logit rule and, for Affine-Scaled layers, their alpha and alpha_ma.
    fn tile_logits(&self, p: &Projected) -> Result<(TileLogits, Option<AffineTile>)> {
        let affine = match (&p.alpha, &self.alpha_ma) {
            (Some(alpha), Some(alpha_ma)) => Some(AffineTile {
                alpha: host_f32(alpha)?,
                alpha_ma: host_f32(alpha_ma)?,
                beta_length: self.affine()?.beta_length,
                seq_len: p.t,
            }),
            (None, _) => None,
            (Some(_), None) => return Err(unplanned("Affine-Scaled tiles without alpha_ma")),
        };
        let rule = match &self.logit_rule {
            LogitRule::Plain => TileLogits::Plain,
            LogitRule::Logn { scale } => TileLogits::Logn {
                head_scale: host_f32(scale)?,
            },
            LogitRule::ScaleInvariant { tau } => {
                let (a, m) = reversed_coefficients(*tau, p.t);
                TileLogits::Distance { a, m }
            }
            LogitRule::SoftCap { cap } => TileLogits::SoftCap { cap: *cap as f32 },
        };
        Ok((rule, affine))
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
            (LogitRule::SoftCap { cap }, _) => Ok(((scaled / *cap)?.tanh()? * *cap)?),
            _ => Ok(scaled),
        }
    }

    /// Where the block of `q_len` queries from `q_start` of `layer` sits in a sequence of
    /// `seq_len` tokens.
    pub(super) fn block_ctx(
        &self,
        layer: usize,
        q_start: usize,
        q_len: usize,
        seq_len: usize,
    ) -> BlockCtx {
        BlockCtx {
            layer,
            q_start,
            q_len,
            seq_len,
            window: self.shape.window,
        }
    }

    /// The Affine-Scaled settings of a layer with alpha (an affine variant's).
    pub(super) fn affine(&self) -> Result<&AffineConfig> {
        self.shape.variant.affine().ok_or_else(|| {
            candle_core::Error::Msg(
                "internal error: an alpha projection without Affine-Scaled settings".into(),
            )
            .into()
        })
    }
}

/// One layer's projections: q `[b, heads, t, d]` and k, v `[b, kv, t, d]` after QK-norm and
/// RoPE, the sigmoid gate, alpha `[b, heads, t]`, the sinks' host copy.
pub(super) struct Projected {
    pub(super) q: Tensor,
    pub(super) k: Tensor,
    pub(super) v: Tensor,
    pub(super) gate: Option<Tensor>,
    pub(super) alpha: Option<Tensor>,
    pub(super) host_sinks: Option<Vec<f32>>,
    pub(super) t: usize,
}

/// Pushes a block's row maxima and weights (effective, plain softmax, sink mass) where
/// `wants` them.
fn push_weight_hooks(
    bw: &BlockWeights,
    max_logit: Option<&Tensor>,
    wants: &dyn Fn(Hook) -> bool,
    push: &mut dyn FnMut(Hook, &Tensor) -> Result<()>,
) -> Result<()> {
    for (hook, xs) in [
        (Hook::MaxLogit, max_logit),
        (Hook::Pattern, Some(&bw.weights)),
        (Hook::Softmax, bw.softmax.as_ref()),
        (Hook::SinkMass, bw.sink_mass.as_ref()),
    ] {
        if let (Some(xs), true) = (xs, wants(hook)) {
            push(hook, xs)?;
        }
    }
    Ok(())
}

/// Each row's largest `scale * logit` over its visible keys, `[b, h, n]`, of `logits`
/// `[b, h, n, q_start + n]` (contiguous f32 on the CPU), as the flash tiles take it.
fn host_row_max(logits: &Tensor, q_start: usize, scale: f32) -> Result<Tensor> {
    let (b, h, n, keys) = logits.dims4()?;
    let maxima = with_cpu_f32(logits, |data| {
        data.chunks(keys.max(1))
            .enumerate()
            .map(|(r, row)| lane_max(&row[..=q_start + r % n], |v| v * scale))
            .collect::<Vec<f32>>()
    })
    .ok_or_else(|| unplanned("the host row maximum"))?;
    Ok(Tensor::from_vec(maxima, (b, h, n), logits.device())?)
}

/// A kernel handed a case the plan does not give it: a bug, never a fallback.
fn unplanned(kernel: &str) -> Error {
    candle_core::Error::Msg(format!(
        "internal error: {kernel} asked for a case it cannot serve"
    ))
    .into()
}

/// The values of `xs` (any float dtype) as f32 on the host, flattened.
fn host_f32(xs: &Tensor) -> Result<Vec<f32>> {
    Ok(xs.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
}
