//! The first non-finite activation of a run (issue 24): where the residual stream first
//! holds NaN or an infinity, so a diverged or overflowing checkpoint's NaN metrics come with
//! the layer and hook they started at.

use std::sync::OnceLock;

use candle_core::{DType, Tensor};
use serde::Serialize;

use asa_core::error::Result;

/// Where the first non-finite activation was seen.
#[derive(Debug, Clone, Serialize)]
pub struct NonFiniteAt {
    /// 1-based layer; `None` for the embedding and the final norm.
    pub layer: Option<usize>,
    /// TransformerLens's name of the activation: `hook_embed`, `hook_attn_out`,
    /// `hook_mlp_out`, `ln_final.hook_normalized`.
    pub hook: &'static str,
}

impl std::fmt::Display for NonFiniteAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layer {
            Some(l) => write!(f, "layer {l} {}", self.hook),
            None => f.write_str(self.hook),
        }
    }
}

/// Watches activations until the first non-finite one (then checks no more).
#[derive(Debug, Default)]
pub struct NonFiniteWatch(OnceLock<NonFiniteAt>);

impl NonFiniteWatch {
    /// Records `xs` as the first non-finite activation when it holds NaN or an infinity and
    /// none was seen before. `layer` is 0-based.
    pub fn check(&self, xs: &Tensor, layer: Option<usize>, hook: &'static str) -> Result<()> {
        if self.0.get().is_some() {
            return Ok(());
        }
        if self.holds_nonfinite(xs)? {
            let _ = self.0.set(NonFiniteAt {
                layer: layer.map(|l| l + 1),
                hook,
            });
        }
        Ok(())
    }

    /// Whether `xs` holds NaN or an infinity: a vectorised scan of a contiguous CPU tensor
    /// in its own dtype (candle's bf16 ops would convert every value twice); elsewhere on
    /// the device, where x - x is 0 for a finite x and NaN for NaN or an infinity, so that
    /// the sum is NaN exactly when some value is not finite.
    fn holds_nonfinite(&self, xs: &Tensor) -> Result<bool> {
        if let Some(first) = asa_kernels::cpu::host::first_nonfinite(xs) {
            return Ok(first.is_some());
        }
        #[allow(clippy::eq_op)]
        let differences = (xs - xs)?;
        let sum = differences
            .sum_all()?
            .to_dtype(DType::F32)?
            .to_scalar::<f32>()?;
        Ok(sum.is_nan())
    }

    /// The first non-finite activation seen, if any.
    pub fn first(&self) -> Option<&NonFiniteAt> {
        self.0.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_first_nan_or_infinity_is_kept_and_huge_finite_values_are_not_counted() {
        let watch = NonFiniteWatch::default();
        let big = Tensor::new(&[3e38f32, 3e38, -3e38], &Device::Cpu).unwrap();
        watch.check(&big, Some(0), "hook_attn_out").unwrap();
        assert!(watch.first().is_none(), "finite values whose sum overflows");
        let inf = Tensor::new(&[1f32, f32::INFINITY], &Device::Cpu).unwrap();
        watch.check(&inf, Some(2), "hook_mlp_out").unwrap();
        let nan = Tensor::new(&[f32::NAN], &Device::Cpu).unwrap();
        watch.check(&nan, None, "ln_final.hook_normalized").unwrap();
        assert_eq!(watch.first().unwrap().to_string(), "layer 3 hook_mlp_out");
    }
}
