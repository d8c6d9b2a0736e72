//! The keys of hybrid models' config.json (LFM2) beside [`super::RawConfig`]'s, flattened
//! into it: every field optional, unknown fields ignored.

use serde::Deserialize;

/// The hybrid families' keys of config.json.
#[derive(Debug, Deserialize, Default)]
pub struct RawHybrid {
    /// LFM2: its norm epsilon's key, the short convolution's width and biases, the MLP
    /// width rule, and the attention layers (else `layer_types`).
    pub norm_eps: Option<f64>,
    #[serde(rename = "conv_L_cache")]
    pub conv_l_cache: Option<usize>,
    pub conv_bias: Option<bool>,
    pub block_auto_adjust_ff_dim: Option<bool>,
    pub block_ffn_dim_multiplier: Option<f64>,
    pub block_multiple_of: Option<usize>,
    pub full_attn_idxs: Option<Vec<usize>>,
    /// LFM2's legacy names of `tie_word_embeddings` and `intermediate_size`, which win over
    /// them.
    pub tie_embedding: Option<bool>,
    pub block_ff_dim: Option<usize>,
    /// Qwen3-Next: the Gated DeltaNet's heads, sizes and convolution, the attention
    /// layers (else `layer_types`), the shared expert's size.
    pub linear_num_key_heads: Option<usize>,
    pub linear_num_value_heads: Option<usize>,
    pub linear_key_head_dim: Option<usize>,
    pub linear_value_head_dim: Option<usize>,
    pub linear_conv_kernel_dim: Option<usize>,
    pub full_attention_interval: Option<usize>,
    pub shared_expert_intermediate_size: Option<usize>,
}
