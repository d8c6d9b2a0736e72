//! Training small Llama-style models with candle, for every attention variant of SPEC
//! section 3.
//!
//! There is one attention implementation: the trainer builds the analysis [`Model`] from
//! candle [`Var`]s served by an in-memory [`WeightStore`], so the forward pass that is
//! analysed is the one that is trained (the fused kernels without a backward pass switch to
//! differentiable tensor ops when gradients are tracked). Affine-Scaled's `alpha_ma` is a
//! buffer, not a parameter: the forward pass reads it, and after each optimizer step it
//! moves towards the batch mean of alpha ([`alpha_ma_update`]).
//!
//! [`Model`]: asa_models::Model
//! [`WeightStore`]: asa_models::WeightStore

pub mod checkpoint;
pub mod data;
pub mod lr_schedule;
pub mod params;
pub mod run;
pub mod tokenizer;
mod train_probe;

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};

use asa_core::error::{Error, Result};
use asa_engine::attention::{Variant, VariantKind};
use asa_models::{Model, ModelConfig, WeightStore};
use train_probe::TrainProbe;

pub use lr_schedule::Schedule;
pub use params::Arch;
pub use run::{train, TrainOptions, TrainSummary};

/// alpha_ma_t = rho * alpha_ma_{t-1} + (1 - rho) * mean_batch(alpha_t), per head.
pub fn alpha_ma_update(previous: &[f32], batch_mean: &[f32], rho: f64) -> Vec<f32> {
    previous
        .iter()
        .zip(batch_mean)
        .map(|(&ma, &a)| (rho * ma as f64 + (1.0 - rho) * a as f64) as f32)
        .collect()
}

/// Optimizer settings.
#[derive(Debug, Clone, Copy)]
pub struct OptimConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW weight decay, applied to matrices (embeddings and projections); norms and
    /// sink logits are not decayed.
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    /// Clip the global gradient norm to this value (`None`: no clipping).
    pub grad_clip: Option<f64>,
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            lr: 3e-3,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.95,
            grad_clip: Some(1.0),
        }
    }
}

/// One forward pass of the training model: the loss (with its graph) and what is logged.
pub struct Forward {
    /// Mean next-token cross-entropy (nats), scalar f32, differentiable.
    pub loss: Tensor,
    /// Per layer: the batch mean of alpha per head (affine variants), `[heads]`.
    pub alpha_means: Vec<Option<Vec<f32>>>,
    /// Mean raw q . k over causal pairs, layers, heads and sequences.
    pub qk_mean: f64,
}

/// What one optimizer step logged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepLog {
    /// 1-based step.
    pub step: usize,
    pub loss: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    pub lr: f64,
    pub qk_mean: f64,
}

/// A model being trained: parameters as `Var`s, `alpha_ma` buffers, two AdamW optimizers
/// (decayed matrices, undecayed vectors).
pub struct Trainer {
    config: ModelConfig,
    /// The variant trained, with its settings.
    variant: Variant,
    vars: BTreeMap<String, Var>,
    /// `model.layers.{l}.self_attn.alpha_ma` `[heads]` (affine variants).
    alpha_ma: BTreeMap<usize, Vec<f32>>,
    device: Device,
    decayed: AdamW,
    plain: AdamW,
    optim: OptimConfig,
    step: usize,
}

impl Trainer {
    /// A trainer over `params` (HF names; every parameter the variant needs, f32). An
    /// `alpha_ma` entry among them sets the buffer's start (default 0); it is never trained.
    pub fn new(
        config: ModelConfig,
        variant: VariantKind,
        params: BTreeMap<String, Tensor>,
        optim: OptimConfig,
        device: &Device,
    ) -> Result<Self> {
        let mut vars = BTreeMap::new();
        let mut alpha_ma = BTreeMap::new();
        for l in 0..config.num_layers {
            if variant.is_affine() {
                alpha_ma.insert(l, vec![0f32; config.num_heads]);
            }
        }
        for (name, tensor) in params {
            if let Some(l) = alpha_ma_layer(&name) {
                alpha_ma.insert(l, tensor.to_dtype(DType::F32)?.to_vec1::<f32>()?);
                continue;
            }
            let t = tensor.to_dtype(DType::F32)?.to_device(device)?;
            vars.insert(name, Var::from_tensor(&t)?);
        }
        let adam = |decay: bool| -> Result<AdamW> {
            let chosen: Vec<Var> = vars
                .values()
                .filter(|v| (v.rank() >= 2) == decay)
                .cloned()
                .collect();
            Ok(AdamW::new(
                chosen,
                ParamsAdamW {
                    lr: optim.lr,
                    beta1: optim.beta1,
                    beta2: optim.beta2,
                    eps: 1e-8,
                    weight_decay: if decay { optim.weight_decay } else { 0.0 },
                },
            )?)
        };
        let decayed = adam(true)?;
        let plain = adam(false)?;
        let trainer = Trainer {
            variant: config.variant_settings.variant(variant),
            config,
            vars,
            alpha_ma,
            device: device.clone(),
            decayed,
            plain,
            optim,
            step: 0,
        };
        // every tensor present with the right shape: build once
        trainer.model()?;
        Ok(trainer)
    }

    /// The resolved config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The variant trained.
    pub fn variant(&self) -> VariantKind {
        self.variant.kind()
    }

    /// Steps taken.
    pub fn steps_done(&self) -> usize {
        self.step
    }

    /// The variable behind parameter `name`.
    pub fn var(&self, name: &str) -> Option<&Var> {
        self.vars.get(name)
    }

    /// The alpha_ma buffer of layer `layer` (0-based), affine variants.
    pub fn alpha_ma(&self, layer: usize) -> Option<&[f32]> {
        self.alpha_ma.get(&layer).map(Vec::as_slice)
    }

    /// Every parameter and buffer under its HF name (what a checkpoint stores).
    pub fn tensors(&self) -> Result<BTreeMap<String, Tensor>> {
        let mut map: BTreeMap<String, Tensor> = self
            .vars
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        for (l, ma) in &self.alpha_ma {
            map.insert(
                format!("model.layers.{l}.self_attn.alpha_ma"),
                Tensor::from_vec(ma.clone(), ma.len(), &self.device)?,
            );
        }
        Ok(map)
    }

    /// The analysis model over the current parameters (gradients flow to the `Var`s).
    pub fn model(&self) -> Result<Model> {
        let store = WeightStore::from_tensors(self.tensors()?, &self.device, DType::F32);
        Model::load(&store, &self.config, self.variant.kind())
    }

    /// Forward pass on `ids` `[batch, T + 1]` (u32): inputs are the first T ids, targets
    /// the last T.
    pub fn forward(&self, ids: &Tensor) -> Result<Forward> {
        let (b, t1) = ids.dims2()?;
        if t1 < 2 {
            return Err(Error::usage("training windows need at least 2 tokens"));
        }
        let t = t1 - 1;
        let input = ids.narrow(1, 0, t)?;
        let target = ids.narrow(1, 1, t)?;
        let model = self.model()?;
        let mut probe = TrainProbe::new(self.config.num_layers);
        model.forward(&input, t, &mut probe)?;
        let logits = probe.logits()?;
        let vocab = logits.dim(D::Minus1)?;
        let loss = candle_nn::loss::cross_entropy(
            &logits.reshape((b * t, vocab))?,
            &target.flatten_all()?,
        )?;
        Ok(Forward {
            loss,
            alpha_means: probe.alpha_means()?,
            qk_mean: probe.qk_mean(),
        })
    }

    /// One optimizer step on `ids` `[batch, T + 1]` at learning rate `lr`: forward,
    /// backward, global gradient norm (logged before clipping), optional clipping, AdamW,
    /// then the alpha_ma update.
    pub fn step(&mut self, ids: &Tensor, lr: f64) -> Result<StepLog> {
        let fwd = self.forward(ids)?;
        let mut grads = fwd.loss.backward()?;
        let mut sq = 0f64;
        for var in self.vars.values() {
            if let Some(g) = grads.get(var.as_tensor()) {
                sq += g
                    .sqr()?
                    .sum_all()?
                    .to_dtype(DType::F64)?
                    .to_scalar::<f64>()?;
            }
        }
        let grad_norm = sq.sqrt();
        if let Some(max) = self.optim.grad_clip {
            if max > 0.0 && grad_norm > max {
                let scale = max / (grad_norm + 1e-6);
                for var in self.vars.values() {
                    if let Some(g) = grads.remove(var.as_tensor()) {
                        grads.insert(var.as_tensor(), (g * scale)?);
                    }
                }
            }
        }
        self.decayed.set_learning_rate(lr);
        self.plain.set_learning_rate(lr);
        self.decayed.step(&grads)?;
        self.plain.step(&grads)?;
        if let Some(affine) = self.variant.affine() {
            for (l, mean) in fwd.alpha_means.iter().enumerate() {
                if let (Some(mean), Some(ma)) = (mean, self.alpha_ma.get_mut(&l)) {
                    *ma = alpha_ma_update(ma, mean, affine.momentum);
                }
            }
        }
        self.step += 1;
        Ok(StepLog {
            step: self.step,
            loss: fwd.loss.to_dtype(DType::F64)?.to_scalar::<f64>()?,
            grad_norm,
            lr,
            qk_mean: fwd.qk_mean,
        })
    }
}

/// `l` of `model.layers.{l}.self_attn.alpha_ma`.
fn alpha_ma_layer(name: &str) -> Option<usize> {
    name.strip_prefix("model.layers.")?
        .strip_suffix(".self_attn.alpha_ma")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_ma_follows_the_formula() {
        // rho 0.9: 0.9 * 0 + 0.1 * 0.5 = 0.05; 0.9 * 0.05 + 0.1 * 0.7 = 0.115
        let one = alpha_ma_update(&[0.0], &[0.5], 0.9);
        assert!((one[0] - 0.05).abs() < 1e-7);
        let two = alpha_ma_update(&one, &[0.7], 0.9);
        assert!((two[0] - 0.115).abs() < 1e-7);
        assert_eq!(
            alpha_ma_layer("model.layers.12.self_attn.alpha_ma"),
            Some(12)
        );
        assert_eq!(alpha_ma_layer("model.layers.1.self_attn.sinks"), None);
    }
}
