//! How an architecture arranges a decoder layer around the shared attention kernels: the
//! norm, the residual wiring, the MLP, the q/k/v projections and the checkpoint's tensor
//! names (issue 25).

/// The norm of the layers and the final norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// RMSNorm with a scale (Llama, Qwen, Mistral).
    Rms,
    /// LayerNorm with a scale and a bias (GPT-NeoX).
    Layer,
    /// LayerNorm with a scale and no bias (Cohere's `CohereLayerNorm`).
    LayerNoBias,
    /// RMSNorm scaled by (1 + w) (Gemma: weights stored as offsets from 1).
    RmsPlusOne,
}

/// The MLP of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpKind {
    /// `down(silu(gate(x)) * up(x))`.
    SwiGlu,
    /// `down(gelu(up(x)))`, GELU with the exact erf (transformers' `gelu`).
    Gelu,
    /// `down(gelu(up(x)))`, GELU's tanh approximation (GPT-2's `gelu_new`).
    GeluTanh,
    /// `down(gelu_tanh(gate(x)) * up(x))` (Gemma's `gelu_pytorch_tanh` GeGLU).
    GeGluTanh,
}

/// How q, k and v are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QkvLayout {
    /// `q_proj`, `k_proj`, `v_proj`.
    Separate,
    /// One `qkv_proj` whose rows are, head by head, `[q, k, v]` (GPT-NeoX
    /// `query_key_value`).
    FusedPerHead,
    /// One `qkv_proj` whose rows are all of q, then k, then v (Phi-3).
    Fused,
    /// Multi-head latent attention (DeepSeek-V3): `q_a_proj`, `q_a_layernorm`, `q_b_proj` (or
    /// `q_proj`), `kv_a_proj_with_mqa`, `kv_a_layernorm`, `kv_b_proj`.
    Latent,
}

/// An architecture's layer layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    pub norm: NormKind,
    pub mlp: MlpKind,
    /// `x + attn(ln1(x)) + mlp(ln2(x))` (GPT-NeoX `use_parallel_residual`) instead of
    /// `h = x + attn(ln1(x)); h + mlp(ln2(h))`.
    pub parallel_residual: bool,
    /// In a parallel residual, the MLP reads the attention's normed input: one
    /// `input_layernorm` a layer, `x + attn(ln(x)) + mlp(ln(x))` (Cohere).
    pub shared_norm: bool,
    pub qkv: QkvLayout,
    /// The MLP's gate and up projections are one `gate_up_proj`, gate rows first (Phi-3).
    pub fused_gate_up: bool,
    /// Norms after the attention and the MLP, none before (OLMo 2: `post_attention_layernorm`
    /// and `post_feedforward_layernorm` on the outputs), instead of pre-norms.
    pub post_norm: bool,
    /// Norms before and after both the attention and the MLP (Gemma 2's sandwich:
    /// `input_layernorm`, `post_attention_layernorm`, `pre_feedforward_layernorm`,
    /// `post_feedforward_layernorm`).
    pub sandwich: bool,
    /// QK-norm over the whole q and k projections (OLMo 2, `[heads * head_dim]` scales)
    /// rather than per head (Qwen3).
    pub qk_norm_whole: bool,
    /// Learned absolute positions added to the embedding (`model.embed_positions`, GPT-2's
    /// `wpe`) and no rotary embedding.
    pub learned_positions: bool,
    /// Projection weights are stored `[in, out]` (GPT-2's Conv1D), transposed on load.
    pub conv1d: bool,
    /// Which dims RoPE turns together: the halves (k, k + d/2), or interleaved pairs (Llama
    /// 4's complex rotation; DeepSeek's, written back de-interleaved).
    pub rope_pairs: asa_engine::nn::RopePairs,
}

impl Layout {
    /// The Llama layout (Llama, Mistral, Qwen2, Qwen3).
    pub const LLAMA: Layout = Layout {
        norm: NormKind::Rms,
        mlp: MlpKind::SwiGlu,
        parallel_residual: false,
        shared_norm: false,
        qkv: QkvLayout::Separate,
        fused_gate_up: false,
        post_norm: false,
        sandwich: false,
        qk_norm_whole: false,
        learned_positions: false,
        conv1d: false,
        rope_pairs: asa_engine::nn::RopePairs::Halves,
    };

    /// The layout in words (for `inspect`).
    pub fn describe(&self) -> String {
        let norm = match self.norm {
            NormKind::Rms => "RMSNorm",
            NormKind::Layer => "LayerNorm with biases",
            NormKind::LayerNoBias => "LayerNorm without biases",
            NormKind::RmsPlusOne => "RMSNorm scaled by (1 + w)",
        };
        let mlp = match self.mlp {
            MlpKind::SwiGlu => "SwiGLU MLP",
            MlpKind::Gelu => "GELU MLP",
            MlpKind::GeluTanh => "tanh-GELU MLP",
            MlpKind::GeGluTanh => "tanh-GELU GeGLU MLP",
        };
        let residual = match (self.parallel_residual, self.shared_norm) {
            (true, true) => "parallel residual (attention and MLP read the same normed input)",
            (true, false) => "parallel residual (attention and MLP read the same input)",
            (false, _) => "sequential residual",
        };
        let qkv = match self.qkv {
            QkvLayout::FusedPerHead => "fused per-head q/k/v",
            QkvLayout::Fused => "fused q/k/v",
            QkvLayout::Separate => "separate q/k/v",
            QkvLayout::Latent => {
                "multi-head latent attention (low-rank q, one compressed kv latent)"
            }
        };
        let mlp = match self.fused_gate_up {
            true => format!("{mlp} (fused gate/up)"),
            false => mlp.to_string(),
        };
        let place = match (self.post_norm, self.sandwich) {
            (_, true) => "sandwich-norm (before and after attention and MLP)",
            (true, false) => "post-norm",
            (false, false) => "pre-norm",
        };
        let qk = match self.qk_norm_whole {
            true => ", QK-norm over the whole q and k projections",
            false => "",
        };
        let positions = match (self.learned_positions, self.conv1d) {
            (true, true) => ", learned absolute positions (no RoPE), Conv1D weights",
            (true, false) => ", learned absolute positions (no RoPE)",
            (false, true) => ", Conv1D weights",
            (false, false) => "",
        };
        let pairs = match self.rope_pairs {
            asa_engine::nn::RopePairs::Halves => "",
            asa_engine::nn::RopePairs::Interleaved => ", RoPE on interleaved pairs",
            asa_engine::nn::RopePairs::Deinterleaved => {
                ", RoPE on interleaved pairs written back de-interleaved"
            }
        };
        format!("{place} {norm}, {qkv}{qk}, {mlp}, {residual}{positions}{pairs}")
    }
}
