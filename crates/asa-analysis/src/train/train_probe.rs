//! The probe a training forward pass runs with: keeps the logits (with their graph), the
//! batch mean of alpha per layer and head (for the alpha_ma update), and qk_mean.

use candle_core::{DType, Tensor};

use asa_core::error::{Error, Result};
use asa_hooks::row_pass::QkSums;
use asa_hooks::{BlockCtx, Hook, Probe};
use asa_metrics::qk_mean::QkMean;

pub(crate) struct TrainProbe {
    logits: Vec<Tensor>,
    alpha: Vec<Option<Tensor>>,
    qk: QkMean,
}

impl TrainProbe {
    pub(crate) fn new(layers: usize) -> Self {
        TrainProbe {
            logits: Vec::new(),
            alpha: vec![None; layers],
            qk: QkMean::new(layers),
        }
    }

    /// Logits `[batch, T, vocab]`, differentiable.
    pub(crate) fn logits(&self) -> Result<Tensor> {
        match self.logits.as_slice() {
            [] => Err(Error::usage("the forward pass produced no logits")),
            [one] => Ok(one.clone()),
            many => Ok(Tensor::cat(many, 1)?),
        }
    }

    /// Per layer, the mean of alpha over batch and positions per head.
    pub(crate) fn alpha_means(&self) -> Result<Vec<Option<Vec<f32>>>> {
        self.alpha
            .iter()
            .map(|a| match a {
                // [b, h, T] -> [h]
                Some(a) => Ok(Some(
                    a.to_dtype(DType::F32)?.mean(2)?.mean(0)?.to_vec1::<f32>()?,
                )),
                None => Ok(None),
            })
            .collect()
    }

    pub(crate) fn qk_mean(&self) -> f64 {
        self.qk.finish().mean
    }
}

impl Probe for TrainProbe {
    fn wants(&self, hook: Hook, _layer: usize) -> bool {
        matches!(hook, Hook::Logits | Hook::Alpha | Hook::Qk)
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        match hook {
            Hook::Logits => self.logits.push(xs.clone()),
            Hook::Alpha => self.alpha[ctx.layer] = Some(xs.detach()),
            Hook::Qk => {
                let sums = QkSums::of_block(&xs.detach(), ctx.q_start, ctx.window)?;
                self.qk.add_sums(ctx.layer, sums);
            }
            _ => {}
        }
        Ok(())
    }
}
