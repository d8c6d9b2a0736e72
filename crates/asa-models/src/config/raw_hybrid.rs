//! The keys of hybrid models' config.json (LFM2) beside [`super::RawConfig`]'s, flattened
//! into it: every field optional, unknown fields ignored.

use serde::Deserialize;
use serde_json::Value;

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
    /// Mamba-2 layers (Granite 4 hybrid, Falcon-H1): heads, head size (`"auto"`: inner /
    /// heads), state, groups, convolution, inner size (`mamba_expand` x hidden; Falcon-H1's
    /// `mamba_d_ssm` first), biases, dt's clamp (`[min, max]`, an infinity written as
    /// `{"__float__": "Infinity"}`), the gate's norm (Falcon-H1).
    pub mamba_n_heads: Option<usize>,
    pub mamba_d_head: Option<Value>,
    pub mamba_d_state: Option<usize>,
    pub mamba_n_groups: Option<usize>,
    pub mamba_d_conv: Option<usize>,
    pub mamba_expand: Option<f64>,
    #[serde(default, deserialize_with = "super::raw::present")]
    pub mamba_d_ssm: Option<Value>,
    pub mamba_conv_bias: Option<bool>,
    pub mamba_proj_bias: Option<bool>,
    pub projectors_bias: Option<bool>,
    pub mamba_rms_norm: Option<bool>,
    pub mamba_norm_before_gate: Option<bool>,
    #[serde(default, deserialize_with = "super::raw::present")]
    pub time_step_limit: Option<Value>,
    /// Granite's muP multipliers, its attention layers' RoPE (`"rope"`; else NoPE) and its
    /// shared MLP.
    pub embedding_multiplier: Option<f64>,
    pub residual_multiplier: Option<f64>,
    pub attention_multiplier: Option<f64>,
    pub logits_scaling: Option<f64>,
    pub position_embedding_type: Option<String>,
    pub shared_intermediate_size: Option<usize>,
    /// Falcon-H1's multipliers.
    pub lm_head_multiplier: Option<f64>,
    pub attention_in_multiplier: Option<f64>,
    pub attention_out_multiplier: Option<f64>,
    pub ssm_in_multiplier: Option<f64>,
    pub ssm_out_multiplier: Option<f64>,
    pub key_multiplier: Option<f64>,
    pub ssm_multipliers: Option<Vec<f64>>,
    pub mlp_multipliers: Option<Vec<f64>>,
}
