//! The decoder stack every family of `config/families/` runs: embeddings, layers
//! of a token mixer (attention, or a hybrid's Gated DeltaNet, Mamba-2 or short convolution,
//! or attention and Mamba-2 side by side) and an MLP or experts, with the norms, residual
//! order and multipliers the family's layout gives, then the final norm and the
//! language-model head. The families differ in data (the resolved config, its layout and
//! [`AttentionShape`]), not in code paths here.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Tensor};

use super::attention;
use super::config::ModelConfig;
use super::layers::{linear, mlp, moe_mlp, norm, MlpDims, ProjDims};
use super::mixer_loaders::{load_gated_delta_net, load_mamba2, load_short_conv};
use super::mixers::Mixer;
use super::multipliers::{scaled, Multipliers};
use super::nonfinite::{NonFiniteAt, NonFiniteWatch};
use super::residuals::Residuals;
use super::weights::WeightStore;
use asa_core::error::{Error, Result};
use asa_core::profile::phase;
use asa_engine::attention::{Attention, AttentionShape, VariantKind};
use asa_engine::mixer::{GatedDeltaNet, Mamba2, ShortConv};
use asa_engine::nn::rope::rope_tables;
use asa_engine::nn::Rope;
use asa_engine::nn::{FeedForward, Linear, Norm};
use asa_hooks::blocks::query_blocks;
use asa_hooks::{BlockCtx, Hook, Probe};

/// What mixes positions in a decoder layer, as loaded.
enum LayerMixer {
    /// Attention (`self_attn`), the probe's layer `ordinal` (its place among the model's
    /// attention layers).
    Attention {
        attention: Box<Attention>,
        ordinal: usize,
    },
    /// A short gated convolution (`conv`, LFM2).
    ShortConv(ShortConv),
    /// Gated DeltaNet (`linear_attn`, Qwen3-Next).
    GatedDeltaNet(Box<GatedDeltaNet>),
    /// Mamba-2 (`mamba`, Granite 4 hybrid).
    Mamba2(Box<Mamba2>),
    /// Attention and Mamba-2 on the same input, their outputs summed, each scaled by the
    /// multipliers (Falcon-H1).
    AttentionAndMamba2 {
        attention: Box<Attention>,
        ordinal: usize,
        mamba: Box<Mamba2>,
        scales: Multipliers,
    },
}

impl LayerMixer {
    /// Layer `l`'s mixer of `config` from `store`.
    fn load(
        store: &WeightStore,
        c: &ModelConfig,
        shape: &AttentionShape,
        l: usize,
    ) -> Result<Self> {
        let prefix = format!("model.layers.{l}");
        let attention = || -> Result<(Box<Attention>, usize)> {
            let layer_shape = AttentionShape {
                window: c.key_window(l),
                rotary: c.attention_layers.rotates(l),
                l2_qk_norm: c.attention_layers.l2_qk_norm_of(l),
                temperature: c.attention_layers.temperature_of(l),
                ..shape.clone()
            };
            let prefix = format!("{prefix}.self_attn");
            let loaded = attention::load_attention(store, &prefix, layer_shape, &c.layout)?;
            let ordinal = c.mixers[..l].iter().filter(|m| m.has_attention()).count();
            Ok((Box::new(loaded), ordinal))
        };
        let mamba = |shape| load_mamba2(store, &format!("{prefix}.mamba"), c, shape);
        Ok(match c.mixers[l] {
            Mixer::Attention => {
                let (attention, ordinal) = attention()?;
                LayerMixer::Attention { attention, ordinal }
            }
            Mixer::AttentionAndMamba2(shape) => {
                let (attention, ordinal) = attention()?;
                LayerMixer::AttentionAndMamba2 {
                    attention,
                    ordinal,
                    mamba: Box::new(mamba(shape)?),
                    scales: c.multipliers,
                }
            }
            Mixer::ShortConv(conv) => LayerMixer::ShortConv(load_short_conv(
                store,
                &format!("{prefix}.conv"),
                c.hidden_size,
                conv,
            )?),
            Mixer::GatedDeltaNet(shape) => {
                LayerMixer::GatedDeltaNet(Box::new(load_gated_delta_net(
                    store,
                    &format!("{prefix}.linear_attn"),
                    c.hidden_size,
                    shape,
                    c.rms_norm_eps,
                )?))
            }
            Mixer::Mamba2(shape) => LayerMixer::Mamba2(Box::new(mamba(shape)?)),
        })
    }

    /// The mixer's output for the normed stream `xs`; attention pushes its hooks to `probe`.
    fn forward(
        &self,
        xs: &Tensor,
        rope: &Rope,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Tensor> {
        match self {
            LayerMixer::Attention { attention, ordinal } => {
                attention.forward(xs, rope, *ordinal, block, probe)
            }
            LayerMixer::ShortConv(conv) => {
                let _p = phase("other mixers");
                conv.forward(xs)
            }
            LayerMixer::GatedDeltaNet(net) => {
                let _p = phase("other mixers");
                net.forward(xs)
            }
            LayerMixer::Mamba2(mamba) => {
                let _p = phase("other mixers");
                mamba.forward(xs)
            }
            LayerMixer::AttentionAndMamba2 {
                attention,
                ordinal,
                mamba,
                scales,
            } => {
                let input = scaled(xs.clone(), scales.attention_in)?;
                let attn = attention.forward(&input, rope, *ordinal, block, probe)?;
                let _p = phase("other mixers");
                let ssm = scaled(mamba.forward(xs)?, scales.ssm_out)?;
                Ok((ssm + scaled(attn, scales.attention_out)?)?)
            }
        }
    }
}

/// One decoder layer (`model.layers.{l}`).
pub struct DecoderLayer {
    /// The norm before the mixer (`input_layernorm`; none in a post-norm layout).
    pre_attention: Option<Norm>,
    mixer: LayerMixer,
    /// The norm of the attention's output (OLMo 2's `post_attention_layernorm`).
    post_attention: Option<Norm>,
    /// The norm before the MLP (`post_attention_layernorm` in the pre-norm layouts).
    pre_mlp: Option<Norm>,
    mlp: FeedForward,
    /// The norm of the MLP's output (OLMo 2's `post_feedforward_layernorm`).
    post_mlp: Option<Norm>,
    /// `x + attn(ln1(x)) + mlp(ln2(x))` (GPT-NeoX) rather than sequential.
    parallel_residual: bool,
    /// In the parallel residual, the MLP reads the attention's normed input (Cohere).
    shared_norm: bool,
    /// The mixer's and the MLP's outputs are multiplied by this (Granite's
    /// `residual_multiplier`).
    residual_scale: Option<f64>,
    /// The MLP's output is multiplied by this (Falcon-H1's `mlp_multipliers[1]`).
    mlp_scale: Option<f64>,
}

impl DecoderLayer {
    /// Layer `l` (0-based) of `config` from `store`.
    fn load(
        store: &WeightStore,
        c: &ModelConfig,
        shape: &AttentionShape,
        l: usize,
    ) -> Result<Self> {
        let prefix = format!("model.layers.{l}");
        let layout = c.layout;
        let norm = |name: &str| {
            norm(
                store,
                &format!("{prefix}.{name}"),
                c.hidden_size,
                c.rms_norm_eps,
                layout.norm,
            )
        };
        let (pre_attention, post_attention, pre_mlp, post_mlp) = match layout.post_norm {
            _ if layout.sandwich => (
                Some(norm("input_layernorm")?),
                Some(norm("post_attention_layernorm")?),
                Some(norm("pre_feedforward_layernorm")?),
                Some(norm("post_feedforward_layernorm")?),
            ),
            // one norm for attention and MLP (Cohere)
            false if layout.shared_norm => (Some(norm("input_layernorm")?), None, None, None),
            false => (
                Some(norm("input_layernorm")?),
                None,
                Some(norm("post_attention_layernorm")?),
                None,
            ),
            true => (
                None,
                Some(norm("post_attention_layernorm")?),
                None,
                Some(norm("post_feedforward_layernorm")?),
            ),
        };
        Ok(DecoderLayer {
            pre_attention,
            mixer: LayerMixer::load(store, c, shape, l)?,
            post_attention,
            pre_mlp,
            mlp: match c.experts.as_ref().filter(|e| e.layers.contains(&l)) {
                None => FeedForward::Dense(
                    mlp(
                        store,
                        &format!("{prefix}.mlp"),
                        MlpDims {
                            hidden: c.hidden_size,
                            intermediate: c.intermediate_size,
                        },
                        c.mlp_bias,
                        &layout,
                    )?
                    .with_gate_scale(c.multipliers.mlp_gate),
                ),
                Some(experts) => FeedForward::Moe(moe_mlp(store, &prefix, c.hidden_size, experts)?),
            },
            post_mlp,
            parallel_residual: layout.parallel_residual,
            shared_norm: layout.shared_norm,
            residual_scale: c.multipliers.residual,
            mlp_scale: c.multipliers.mlp_down,
        })
    }

    /// The residual stream `xs` after this layer (`l`, 0-based); its attention and MLP
    /// outputs are checked by `watch`.
    fn forward(
        &self,
        xs: &Tensor,
        rope: &Rope,
        l: usize,
        watch: &NonFiniteWatch,
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Tensor> {
        let normed = {
            let _p = phase("norms, residuals");
            apply(&self.pre_attention, xs)?
        };
        let attn = self.mixer.forward(&normed, rope, block, probe)?;
        let _p = phase("norms, residuals");
        let attn = scaled(apply(&self.post_attention, &attn)?, self.residual_scale)?;
        watch.check(&attn, Some(l), "hook_attn_out")?;
        // parallel: the MLP reads the layer's input (or its normed input, with a shared norm),
        // and both outputs join the residual
        let (mlp_in, xs) = match self.parallel_residual {
            true if self.shared_norm => (normed, residual_sum(xs, &attn)?),
            true => (xs.clone(), residual_sum(xs, &attn)?),
            false => {
                let xs = residual_sum(xs, &attn)?;
                (xs.clone(), xs)
            }
        };
        let normed = apply(&self.pre_mlp, &mlp_in)?;
        drop(_p);
        let _p = phase("mlp");
        let mlp = self.mlp.forward(&normed)?;
        let mlp = scaled(apply(&self.post_mlp, &mlp)?, self.residual_scale)?;
        let mlp = scaled(mlp, self.mlp_scale)?;
        watch.check(&mlp, Some(l), "hook_mlp_out")?;
        residual_sum(&xs, &mlp)
    }
}

/// `xs + out`: a block's output joining the residual stream (bf16 on the CPU in vector
/// registers, [`asa_kernels::cpu::bf16_elementwise::add`]; the same bits as candle's sum).
fn residual_sum(xs: &Tensor, out: &Tensor) -> Result<Tensor> {
    match asa_kernels::cpu::bf16_elementwise::add(xs, out)? {
        Some(sum) => Ok(sum),
        None => Ok((xs + out)?),
    }
}

/// `xs` through `norm`, or `xs` itself when there is none.
fn apply(norm: &Option<Norm>, xs: &Tensor) -> Result<Tensor> {
    match norm {
        Some(norm) => norm.forward(xs),
        None => Ok(xs.clone()),
    }
}

/// A model's RoPE tables: every layer's, or (Gemma 3) the global layers' and the
/// sliding-window layers'.
struct Ropes {
    all: Rope,
    sliding: Option<Rope>,
}

impl Ropes {
    /// The tables layer `l` rotates with.
    fn of_layer(&self, c: &ModelConfig, l: usize) -> &Rope {
        match (&self.sliding, &c.sliding_window) {
            (Some(sliding), Some(w)) if w.layers.contains(&l) => sliding,
            _ => &self.all,
        }
    }
}

pub use asa_core::run_facts::LayerTiming;

/// Vocabulary rows of the LM head read and applied at a time when layers are streamed.
const LM_HEAD_CHUNK: usize = 16384;

/// Bytes of logits (in the analysis dtype) a block of positions may hold when layers are
/// streamed (each block reads and packs the LM head from the file once).
const LOGIT_BLOCK_BYTES: usize = 256 << 20;

/// A loaded causal language model: every weight in memory, or (streamed) none but the
/// final norm, each layer read from the checkpoint when the run reaches it.
pub struct Model {
    /// The embedding matrix (resident models).
    embed_tokens: Option<candle_nn::Embedding>,
    /// Learned absolute position embeddings `[max_positions, hidden]` (GPT-2), read when
    /// the model is built, streamed or not.
    positions: Option<Tensor>,
    /// Every layer (resident models); empty when streamed.
    layers: Vec<DecoderLayer>,
    norm: Norm,
    /// The LM head (resident models).
    lm_head: Option<Linear>,
    shape: AttentionShape,
    config: ModelConfig,
    /// Where a layer-major pass keeps the residual stream between layers when it is
    /// spilled (`None`: in memory).
    spill_to: Option<PathBuf>,
    /// The first non-finite activation of the passes run so far.
    watch: NonFiniteWatch,
}

impl Model {
    /// Loads every layer from `store` for `config` with attention `variant` (its settings
    /// from config.json's blocks, [`crate::config::VariantSettings::variant`]).
    pub fn load(store: &WeightStore, config: &ModelConfig, variant: VariantKind) -> Result<Self> {
        let c = config;
        let mut model = Self::streamed(store, config, variant)?;
        let embed = store.get("model.embed_tokens.weight", &[c.vocab_size, c.hidden_size])?;
        for l in 0..c.num_layers {
            let layer = DecoderLayer::load(store, c, &model.shape, l)?;
            model.layers.push(layer);
        }
        model.lm_head = Some(if Self::tied(store, c) {
            Linear::from_weight(embed.clone())
        } else {
            let dims = ProjDims {
                in_dim: c.hidden_size,
                out_dim: c.vocab_size,
            };
            linear(store, "lm_head", dims, false)?
        });
        model.embed_tokens = Some(candle_nn::Embedding::new(embed, c.hidden_size));
        Ok(model)
    }

    /// A model whose layers, embedding rows and LM head are read from `store` as a run
    /// reaches them ([`Model::forward_layer_major`]); only the final norm is loaded here.
    pub fn streamed(
        store: &WeightStore,
        config: &ModelConfig,
        variant: VariantKind,
    ) -> Result<Self> {
        let c = config;
        let shape = AttentionShape {
            hidden: c.hidden_size,
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            qkv_bias: c.qkv_bias,
            o_bias: c.o_bias,
            variant: c.variant_settings.variant(variant),
            qk_norm: c.qk_norm,
            qk_norm_whole: c.layout.qk_norm_whole,
            qk_norm_plus_one: c.layout.norm == super::layout::NormKind::RmsPlusOne,
            rms_norm_eps: c.rms_norm_eps,
            window: asa_hooks::KeyWindow::CAUSAL,
            scale: c.query_scale(),
            softcap: c.attn_logit_softcap(),
            rotary: true,
            l2_qk_norm: false,
            temperature: None,
            latent: c.latent,
            key_scale: c.multipliers.key,
        };
        Ok(Model {
            embed_tokens: None,
            positions: match c.layout.learned_positions {
                true => Some(store.get(
                    "model.embed_positions.weight",
                    &[c.max_position_embeddings, c.hidden_size],
                )?),
                false => None,
            },
            layers: Vec::new(),
            norm: norm(
                store,
                "model.norm",
                c.hidden_size,
                c.rms_norm_eps,
                c.layout.norm,
            )?,
            lm_head: None,
            shape,
            config: config.clone(),
            spill_to: None,
            watch: NonFiniteWatch::default(),
        })
    }

    /// A streamed model whose layer-major passes keep the residual stream in the scratch
    /// file `path` between layers (created, and removed when each pass ends).
    pub fn spilling_residuals_to(mut self, path: PathBuf) -> Self {
        self.spill_to = Some(path);
        self
    }

    /// Whether the LM head is the embedding matrix: when `tie_word_embeddings` is set and no
    /// `lm_head.weight` is stored. A stored head is used even then, as transformers does (it
    /// does not tie a stored head that differs from the embedding; one equal to it gives
    /// the same logits either way).
    fn tied(store: &WeightStore, c: &ModelConfig) -> bool {
        c.tie_word_embeddings && !store.contains("lm_head.weight")
    }

    /// Where the LM head comes from, in words (for `inspect`).
    pub fn describe_lm_head(store: &WeightStore, c: &ModelConfig) -> &'static str {
        match (Self::tied(store, c), c.tie_word_embeddings) {
            (true, _) => "the embedding matrix (tie_word_embeddings, no lm_head.weight stored)",
            (false, false) => "lm_head.weight",
            (false, true) => {
                "lm_head.weight: tie_word_embeddings is true but a head is stored, and \
                 transformers uses a stored head rather than tie it to a different embedding"
            }
        }
    }

    /// The first activation of the passes so far that held NaN or an infinity.
    pub fn first_nonfinite(&self) -> Option<&NonFiniteAt> {
        self.watch.first()
    }

    /// Whether the model reads its weights as the run goes ([`Model::streamed`]).
    pub fn is_streamed(&self) -> bool {
        self.embed_tokens.is_none()
    }

    /// Runs the model on `input_ids` `[batch, seq]` (u32), `block` queries (and logit
    /// positions) at a time, pushing the hooks `probe` wants. Logits reach the probe as
    /// `hook_logits` blocks; nothing of size seq x seq or seq x vocab is kept. A resident
    /// model only.
    pub fn forward(&self, input_ids: &Tensor, block: usize, probe: &mut dyn Probe) -> Result<()> {
        let (Some(embed), Some(lm_head)) = (&self.embed_tokens, &self.lm_head) else {
            return Err(Error::usage(
                "a streamed model runs layer-major (Model::forward_layer_major)",
            ));
        };
        let (_, t) = input_ids.dims2()?;
        let rope = self.rope(t, input_ids.device())?;
        let mut xs = {
            let _p = phase("embedding");
            self.finish_embeddings(candle_core::Module::forward(embed, input_ids)?)?
        };
        self.watch.check(&xs, None, "hook_embed")?;
        for (l, layer) in self.layers.iter().enumerate() {
            let rope = rope.of_layer(&self.config, l);
            xs = layer.forward(&xs, rope, l, &self.watch, block, probe)?;
        }
        self.logits(&xs, block, probe, &mut |hidden| lm_head.forward(hidden))
    }

    /// Runs every batch of `batches` (`[batch, seq]` u32 ids, all of one length) through
    /// layer l before any goes through layer l + 1, reading each layer's weights from
    /// `store` when it starts (the next layer's bytes read ahead meanwhile) and dropping
    /// them after it; the residual stream of every batch is held between layers. The
    /// probe hears `on_batch(k)` before each batch's part of a layer. Returns what each
    /// layer's load and compute took. The metrics are those of [`Model::forward`] batch by
    /// batch, bit for bit on CPU f32.
    pub fn forward_layer_major(
        &self,
        store: &WeightStore,
        batches: &[Tensor],
        block: usize,
        probe: &mut dyn Probe,
    ) -> Result<Vec<LayerTiming>> {
        let c = &self.config;
        let Some(first) = batches.first() else {
            return Ok(Vec::new());
        };
        let (_, t) = first.dims2()?;
        let rope = self.rope(t, first.device())?;
        let mut timings = Vec::with_capacity(c.num_layers + 1);
        let mut stream = Residuals::new(self.spill_to.as_deref())?;
        for ids in batches {
            let flat = ids.flatten_all()?.to_vec1::<u32>()?;
            let rows = store.get_rows(
                "model.embed_tokens.weight",
                &[c.vocab_size, c.hidden_size],
                &flat,
            )?;
            let rows = self.finish_embeddings(rows.reshape((ids.dim(0)?, t, c.hidden_size))?)?;
            self.watch.check(&rows, None, "hook_embed")?;
            stream.push(rows)?;
        }
        for l in 0..c.num_layers {
            let (bytes, started) = (store.bytes_read(), Instant::now());
            let layer = DecoderLayer::load(store, c, &self.shape, l)?;
            store.read_ahead(&format!("model.layers.{}.", l + 1));
            let loaded = Instant::now();
            for k in 0..stream.len() {
                probe.on_batch(k);
                let rope = rope.of_layer(c, l);
                let xs = layer.forward(&stream.take(k)?, rope, l, &self.watch, block, probe)?;
                stream.put(k, xs)?;
            }
            timings.push(LayerTiming {
                layer: l,
                load_seconds: (loaded - started).as_secs_f64(),
                compute_seconds: loaded.elapsed().as_secs_f64(),
                bytes_read: store.bytes_read() - bytes,
            });
        }
        let (bytes, started) = (store.bytes_read(), Instant::now());
        let head = if Self::tied(store, c) {
            "model.embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        // each logit block reads the whole LM head: blocks of up to 256 MiB of logits
        let logit_bytes = self.norm_dtype().size_in_bytes() * c.vocab_size.max(1);
        let positions = (LOGIT_BLOCK_BYTES / logit_bytes).max(block);
        for k in 0..stream.len() {
            probe.on_batch(k);
            let xs = stream.take(k)?;
            self.logits(&xs, positions, probe, &mut |hidden| {
                self.lm_head_in_chunks(store, head, hidden)
            })?;
        }
        timings.push(LayerTiming {
            layer: c.num_layers,
            load_seconds: 0.0,
            compute_seconds: started.elapsed().as_secs_f64(),
            bytes_read: store.bytes_read() - bytes,
        });
        Ok(timings)
    }

    /// `hidden` `[batch, n, hidden]` times the LM head `name`, read from `store`
    /// [`LM_HEAD_CHUNK`] vocabulary rows at a time (never cast or dequantized whole; a
    /// GGUF head whose rows cannot be read alone is read whole once).
    fn lm_head_in_chunks(
        &self,
        store: &WeightStore,
        name: &str,
        hidden: &Tensor,
    ) -> Result<Tensor> {
        let c = &self.config;
        let chunk = if store.reads_rows() {
            LM_HEAD_CHUNK
        } else {
            c.vocab_size
        };
        let mut parts = Vec::new();
        for (start, n) in query_blocks(c.vocab_size, chunk) {
            let rows = start..start + n;
            let shape = [c.vocab_size, c.hidden_size];
            let head = match store.packed_rows(name, &shape, rows.clone())? {
                Some(packed) => Linear::packed(packed, None)?,
                None => Linear::from_weight(store.get_row_range(name, &shape, rows)?),
            };
            parts.push(head.forward(hidden)?);
        }
        Ok(Tensor::cat(&parts, 2)?)
    }

    /// RoPE tables for windows of `t` tokens: the model's, and its sliding-window layers'
    /// where they differ (Gemma 3).
    fn rope(&self, t: usize, device: &candle_core::Device) -> Result<Ropes> {
        let c = &self.config;
        let dtype = self.norm_dtype();
        // latent attention rotates the last rope_dim dims of each head
        let (rope_dim, last) = c.latent.map_or((c.head_dim, false), |l| (l.rope_dim, true));
        let tables = |rope| -> Result<Rope> {
            Ok(rope_tables(rope, rope_dim, t, dtype, device)?.arranged(c.layout.rope_pairs, last))
        };
        let all = match c.layout.learned_positions {
            // no rotary embedding: no frequency rotates
            true => Rope::new(&[], t, dtype, device)?,
            false => tables(&c.rope)?,
        };
        let sliding = match &c.rope_local {
            Some(local) => Some(tables(local)?),
            None => None,
        };
        Ok(Ropes { all, sliding })
    }

    /// Token embeddings `[batch, t, hidden]` times the embedding scale (Gemma's
    /// sqrt(hidden), rounded to the embeddings' dtype as transformers rounds it), plus the
    /// learned positions 0..t, if any.
    fn finish_embeddings(&self, xs: Tensor) -> Result<Tensor> {
        let xs = match self.config.gemma.map(|g| g.embedding_scale) {
            Some(scale) => {
                let scale = Tensor::new(scale as f32, xs.device())?.to_dtype(xs.dtype())?;
                xs.broadcast_mul(&scale)?
            }
            None => xs,
        };
        let xs = scaled(xs, self.config.multipliers.embedding)?;
        let Some(positions) = &self.positions else {
            return Ok(xs);
        };
        let t = xs.dim(1)?;
        if t > positions.dim(0)? {
            return Err(Error::option(
                "--seq-len",
                format!(
                    "{t} is longer than the model's {} learned positions",
                    positions.dim(0)?
                ),
            ));
        }
        Ok(xs.broadcast_add(&positions.narrow(0, 0, t)?)?)
    }

    /// The analysis dtype (the final norm's).
    fn norm_dtype(&self) -> candle_core::DType {
        self.norm.dtype()
    }

    /// Pushes the logits of the residual stream `xs` `[batch, T, hidden]` to `probe`, when
    /// it wants them, in blocks of positions, `head` applying the LM head to a block.
    fn logits(
        &self,
        xs: &Tensor,
        block: usize,
        probe: &mut dyn Probe,
        head: &mut dyn FnMut(&Tensor) -> Result<Tensor>,
    ) -> Result<()> {
        let c = &self.config;
        // the probe numbers the attention layers; the logits come after the last
        let layers = c.attention_layer_numbers().len();
        if !probe.wants(Hook::Logits, layers) {
            return Ok(());
        }
        let t = xs.dim(1)?;
        let hidden = self.norm.forward(xs)?;
        self.watch
            .check(&hidden, None, "ln_final.hook_normalized")?;
        // logit blocks hold as many values as an attention block ([heads, block, T]), so
        // the vocabulary never multiplies the sequence length in memory, and at least as
        // many positions as an attention block has queries: each block reads the whole
        // lm_head, so blocks of a few positions would read it again and again
        let logit_block = (block * c.num_heads * t / c.vocab_size.max(1))
            .max(block)
            .clamp(1, t);
        for (start, n) in query_blocks(t, logit_block) {
            let logits = {
                let _p = phase("logits (lm_head)");
                let logits = head(&hidden.narrow(1, start, n)?.contiguous()?)?;
                // Gemma 2: cap * tanh(logits / cap), in f32: a cap past the half types'
                // range (65504 in f16) would be inf there and every logit NaN
                let logits = match c.final_logit_softcap() {
                    Some(cap) => ((logits.to_dtype(DType::F32)? / cap)?.tanh()? * cap)?,
                    None => logits,
                };
                // Granite divides the logits by logits_scaling, Falcon-H1 and Cohere
                // multiply them
                let m = c.multipliers;
                let logits = match m.logits_divisor {
                    Some(d) => asa_engine::nn::times(&logits, 1.0 / d)?,
                    None => logits,
                };
                scaled(scaled(logits, m.logits_factor)?, m.logit_scale)?
            };
            let ctx = BlockCtx {
                layer: layers,
                q_start: start,
                q_len: n,
                seq_len: t,
                window: asa_hooks::KeyWindow::CAUSAL,
            };
            probe.on_tensor(Hook::Logits, &ctx, &logits)?;
        }
        Ok(())
    }

    /// The resolved config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The attention variant the model runs.
    pub fn variant(&self) -> VariantKind {
        self.shape.variant.kind()
    }
}
