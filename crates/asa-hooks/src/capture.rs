//! A probe that keeps full tensors of selected hooks and layers, reassembling query blocks
//! into `[batch, head, T, T]` maps (zeros above the diagonal). For tests, debugging and
//! small inputs: at long T, prefer a metric accumulator.

use std::collections::BTreeMap;

use candle_core::{DType, Tensor};

use super::{BlockCtx, Hook, Probe};
use asa_core::error::Result;

/// Captures the hooks it was built with, for all layers or a chosen set.
pub struct CaptureProbe {
    hooks: Vec<Hook>,
    layers: Option<Vec<usize>>,
    pieces: BTreeMap<(Hook, usize), Vec<Tensor>>,
}

impl CaptureProbe {
    /// Captures `hooks` in every layer.
    pub fn new(hooks: &[Hook]) -> Self {
        CaptureProbe {
            hooks: hooks.to_vec(),
            layers: None,
            pieces: BTreeMap::new(),
        }
    }

    /// Captures `hooks` in the given 0-based layers only.
    pub fn for_layers(hooks: &[Hook], layers: &[usize]) -> Self {
        CaptureProbe {
            layers: Some(layers.to_vec()),
            ..CaptureProbe::new(hooks)
        }
    }

    /// The captured tensor of `hook` in `layer`, blocks joined along the query axis.
    pub fn get(&self, hook: Hook, layer: usize) -> Result<Option<Tensor>> {
        match self.pieces.get(&(hook, layer)) {
            None => Ok(None),
            Some(parts) if parts.len() == 1 => Ok(Some(parts[0].clone())),
            Some(parts) => {
                let dim = if hook == Hook::Logits { 1 } else { 2 };
                Ok(Some(Tensor::cat(parts, dim)?))
            }
        }
    }
}

impl Probe for CaptureProbe {
    fn wants(&self, hook: Hook, layer: usize) -> bool {
        self.hooks.contains(&hook)
            && (hook == Hook::Logits || self.layers.as_ref().is_none_or(|ls| ls.contains(&layer)))
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        let keys_padded = matches!(
            hook,
            Hook::Qk | Hook::AttnScores | Hook::Pattern | Hook::Softmax
        );
        let xs = if keys_padded {
            let kv = ctx.q_start + ctx.q_len;
            let missing = ctx.seq_len - kv;
            let fill = if hook == Hook::AttnScores {
                f64::NEG_INFINITY
            } else {
                0.0
            };
            if missing > 0 {
                let (b, h, n, _) = xs.dims4()?;
                let pad = Tensor::full(fill as f32, (b, h, n, missing), xs.device())?
                    .to_dtype(xs.dtype())?;
                Tensor::cat(&[xs, &pad], 3)?
            } else {
                xs.clone()
            }
        } else {
            xs.clone()
        };
        let xs = if xs.dtype() == DType::F32 || xs.dtype() == DType::U32 {
            xs
        } else {
            xs.to_dtype(DType::F32)?
        };
        self.pieces.entry((hook, ctx.layer)).or_default().push(xs);
        Ok(())
    }
}
