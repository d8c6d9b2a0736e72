//! Which kernel computed a layer's blocks: what a probe is told before a layer's first block
//! (`attention::plan` decides it), and what `--verbose` and run.json show.

/// How a layer's query blocks are computed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// Inference where the probe takes row tables or nothing: flash-style tiles that never
    /// hold a block's weights (CPU f32: `attention::flash`; CUDA, f32/bf16/f16:
    /// `cuda/flash.cu`); every logit rule, sinks and Affine-Scaled weights.
    FlashTiles,
    /// Plain softmax logits (with or without sinks) whose fused kernel (CPU f32, or CUDA)
    /// writes the weights and the probe's row table in one pass.
    FusedRows,
    /// The block's weights in memory, from the CPU's fused softmax (f32 inference).
    MaterialisedFused,
    /// The block's weights in memory, from candle ops (any device and dtype, autograd).
    Materialised,
    /// The block's weights in memory, computed by torch on the device a captured
    /// transformers model sits on (`asa.capture`'s device path) and handed over as tensors.
    TorchBlocks,
}

impl Kernel {
    /// What `--verbose` and run.json call it.
    pub fn describe(self) -> &'static str {
        match self {
            Kernel::FlashTiles => "flash tiles (no block map held)",
            Kernel::FusedRows => "fused softmax with row table",
            Kernel::MaterialisedFused => "materialised blocks, fused CPU softmax",
            Kernel::Materialised => "materialised blocks, candle ops",
            Kernel::TorchBlocks => "materialised blocks, torch on the model's device",
        }
    }
}
