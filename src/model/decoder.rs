//! The decoder stack shared by Llama-family, Qwen2 and Qwen3 checkpoints: embeddings, layers
//! of (RMSNorm, attention, RMSNorm, MLP), final norm, language-model head. The architectures
//! differ only in attention (biases, QK-norm), which [`AttentionShape`] carries.

use candle_core::Tensor;

use super::attention;
use super::config::ModelConfig;
use super::layers::{linear, mlp, rms_norm};
use super::rope::rope_tables;
use super::weights::WeightStore;
use crate::attention::{Attention, AttentionShape, VariantKind};
use crate::error::Result;
use crate::nn::{Linear, Mlp, RmsNorm};
use crate::probe::blocks::query_blocks;
use crate::probe::{BlockCtx, Hook, Probe};
use crate::profile::phase;

/// One decoder layer (`model.layers.{l}`).
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

/// A loaded causal language model.
pub struct Model {
    embed_tokens: candle_nn::Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Linear,
    config: ModelConfig,
    variant: VariantKind,
}

impl Model {
    /// Loads every layer from `store` for `config` with attention `variant`.
    pub fn load(store: &WeightStore, config: &ModelConfig, variant: VariantKind) -> Result<Self> {
        let c = config;
        let embed = store.get("model.embed_tokens.weight", &[c.vocab_size, c.hidden_size])?;
        let shape = AttentionShape {
            hidden: c.hidden_size,
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            qkv_bias: c.qkv_bias,
            o_bias: c.o_bias,
            variant,
            affine: c.affine,
            qk_norm: c.qk_norm,
            rms_norm_eps: c.rms_norm_eps,
            scale_invariant: c.scale_invariant,
            logn_scale: c.logn_scale,
        };
        let mut layers = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let prefix = format!("model.layers.{l}");
            layers.push(DecoderLayer {
                input_layernorm: rms_norm(
                    store,
                    &format!("{prefix}.input_layernorm"),
                    c.hidden_size,
                    c.rms_norm_eps,
                )?,
                self_attn: attention::load_attention(
                    store,
                    &format!("{prefix}.self_attn"),
                    shape.clone(),
                )?,
                post_attention_layernorm: rms_norm(
                    store,
                    &format!("{prefix}.post_attention_layernorm"),
                    c.hidden_size,
                    c.rms_norm_eps,
                )?,
                mlp: mlp(
                    store,
                    &format!("{prefix}.mlp"),
                    c.hidden_size,
                    c.intermediate_size,
                    c.mlp_bias,
                )?,
            });
        }
        let lm_head = if c.tie_word_embeddings && !store.contains("lm_head.weight") {
            Linear::from_weight(embed.clone())
        } else {
            linear(store, "lm_head", c.hidden_size, c.vocab_size, false)?
        };
        Ok(Model {
            embed_tokens: candle_nn::Embedding::new(embed, c.hidden_size),
            layers,
            norm: rms_norm(store, "model.norm", c.hidden_size, c.rms_norm_eps)?,
            lm_head,
            config: config.clone(),
            variant,
        })
    }

    /// Runs the model on `input_ids` `[batch, seq]` (u32), `block` queries (and logit
    /// positions) at a time, pushing the hooks `probe` wants. Logits reach the probe as
    /// `hook_logits` blocks; nothing of size seq x seq or seq x vocab is kept.
    pub fn forward(&self, input_ids: &Tensor, block: usize, probe: &mut dyn Probe) -> Result<()> {
        let (_, t) = input_ids.dims2()?;
        let c = &self.config;
        let device = input_ids.device();
        let dtype = self.embed_tokens.embeddings().dtype();
        let rope = rope_tables(&c.rope, c.head_dim, t, dtype, device)?;
        let mut xs = {
            let _p = phase("embedding");
            candle_core::Module::forward(&self.embed_tokens, input_ids)?
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let normed = {
                let _p = phase("norms, residuals");
                layer.input_layernorm.forward(&xs)?
            };
            let attn = layer.self_attn.forward(&normed, &rope, l, block, probe)?;
            let _p = phase("norms, residuals");
            xs = (xs + attn)?;
            let normed = layer.post_attention_layernorm.forward(&xs)?;
            drop(_p);
            let _p = phase("mlp");
            xs = (&xs + layer.mlp.forward(&normed)?)?;
        }
        if probe.wants(Hook::Logits, self.layers.len()) {
            let hidden = self.norm.forward(&xs)?;
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
                    self.lm_head
                        .forward(&hidden.narrow(1, start, n)?.contiguous()?)?
                };
                let ctx = BlockCtx {
                    layer: self.layers.len(),
                    q_start: start,
                    q_len: n,
                    seq_len: t,
                };
                probe.on_tensor(Hook::Logits, &ctx, &logits)?;
            }
        }
        Ok(())
    }

    /// The resolved config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The attention variant the model runs.
    pub fn variant(&self) -> VariantKind {
        self.variant
    }
}
