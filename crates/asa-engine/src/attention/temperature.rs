//! Llama 4's temperature tuning of the queries of its NoPE layers, applied where the
//! attention layer scales its queries.

/// Llama 4's temperature tuning (arXiv 2501.19399) of its NoPE layers: the query at
/// position p is multiplied by `ln(1 + floor((p + 1) / floor_scale)) * attn_scale + 1`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TemperatureTuning {
    pub floor_scale: f64,
    pub attn_scale: f64,
}

impl TemperatureTuning {
    /// The factor of the query at 0-based position `position`, as transformers computes it
    /// (in f32: `torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) *
    /// attn_scale + 1.0`).
    pub fn factor(&self, position: usize) -> f32 {
        let steps = ((position as f32 + 1.0) / self.floor_scale as f32).floor();
        steps.ln_1p() * self.attn_scale as f32 + 1.0
    }
}
