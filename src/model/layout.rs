//! How an architecture arranges a decoder layer around the shared attention kernels: the
//! norm, the residual wiring, the MLP, the q/k/v projections and the checkpoint's tensor
//! names (issue 25).

use super::config::Architecture;
use super::weight_map::WeightMap;

/// The norm of the layers and the final norm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// RMSNorm with a scale (Llama, Qwen, Mistral).
    Rms,
    /// LayerNorm with a scale and a bias (GPT-NeoX).
    Layer,
}

/// The MLP of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpKind {
    /// `down(silu(gate(x)) * up(x))`.
    SwiGlu,
    /// `down(gelu(up(x)))`, GELU with the exact erf (transformers' `gelu`).
    Gelu,
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
}

/// An architecture's layer layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    pub norm: NormKind,
    pub mlp: MlpKind,
    /// `x + attn(ln1(x)) + mlp(ln2(x))` (GPT-NeoX `use_parallel_residual`) instead of
    /// `h = x + attn(ln1(x)); h + mlp(ln2(h))`.
    pub parallel_residual: bool,
    pub qkv: QkvLayout,
    /// The MLP's gate and up projections are one `gate_up_proj`, gate rows first (Phi-3).
    pub fused_gate_up: bool,
    /// Norms after the attention and the MLP, none before (OLMo 2: `post_attention_layernorm`
    /// and `post_feedforward_layernorm` on the outputs), instead of pre-norms.
    pub post_norm: bool,
    /// QK-norm over the whole q and k projections (OLMo 2, `[heads * head_dim]` scales)
    /// rather than per head (Qwen3).
    pub qk_norm_whole: bool,
}

impl Layout {
    /// The Llama layout (Llama, Mistral, Qwen2, Qwen3).
    pub const LLAMA: Layout = Layout {
        norm: NormKind::Rms,
        mlp: MlpKind::SwiGlu,
        parallel_residual: false,
        qkv: QkvLayout::Separate,
        fused_gate_up: false,
        post_norm: false,
        qk_norm_whole: false,
    };

    /// The layout in words (for `inspect`).
    pub fn describe(&self) -> String {
        let norm = match self.norm {
            NormKind::Rms => "RMSNorm",
            NormKind::Layer => "LayerNorm with biases",
        };
        let mlp = match self.mlp {
            MlpKind::SwiGlu => "SwiGLU MLP",
            MlpKind::Gelu => "GELU MLP",
        };
        let residual = match self.parallel_residual {
            true => "parallel residual (attention and MLP read the same input)",
            false => "sequential residual",
        };
        let qkv = match self.qkv {
            QkvLayout::FusedPerHead => "fused per-head q/k/v",
            QkvLayout::Fused => "fused q/k/v",
            QkvLayout::Separate => "separate q/k/v",
        };
        let mlp = match self.fused_gate_up {
            true => format!("{mlp} (fused gate/up)"),
            false => mlp.to_string(),
        };
        let place = match self.post_norm {
            true => "post-norm",
            false => "pre-norm",
        };
        let qk = match self.qk_norm_whole {
            true => ", QK-norm over the whole q and k projections",
            false => "",
        };
        format!("{place} {norm}, {qkv}{qk}, {mlp}, {residual}")
    }

    /// The layout of `architecture`; `parallel_residual` as its config says (GPT-NeoX).
    pub fn of(architecture: Architecture, parallel_residual: bool) -> Layout {
        match architecture {
            Architecture::GptNeox => Layout {
                norm: NormKind::Layer,
                mlp: MlpKind::Gelu,
                parallel_residual,
                qkv: QkvLayout::FusedPerHead,
                fused_gate_up: false,
                post_norm: false,
                qk_norm_whole: false,
            },
            Architecture::Phi3 => Layout {
                qkv: QkvLayout::Fused,
                fused_gate_up: true,
                ..Layout::LLAMA
            },
            Architecture::Olmo2 => Layout {
                post_norm: true,
                qk_norm_whole: true,
                ..Layout::LLAMA
            },
            _ => Layout::LLAMA,
        }
    }
}

/// The tensor names of `architecture`'s checkpoints as the names the loader reads (the
/// Llama conventions, `self_attn.qkv_proj` for a fused projection): a built-in weight
/// map, empty for the Llama layout.
pub fn builtin_weight_map(architecture: Architecture) -> WeightMap {
    let rules: &[(&str, &str)] = match architecture {
        Architecture::GptNeox => &[
            ("model.embed_tokens.weight", "gpt_neox.embed_in.weight"),
            ("lm_head.weight", "embed_out.weight"),
            ("model.norm.{p}", "gpt_neox.final_layer_norm.{p}"),
            (
                "model.layers.{l}.input_layernorm.{p}",
                "gpt_neox.layers.{l}.input_layernorm.{p}",
            ),
            (
                "model.layers.{l}.post_attention_layernorm.{p}",
                "gpt_neox.layers.{l}.post_attention_layernorm.{p}",
            ),
            (
                "model.layers.{l}.self_attn.qkv_proj.{p}",
                "gpt_neox.layers.{l}.attention.query_key_value.{p}",
            ),
            (
                "model.layers.{l}.self_attn.o_proj.{p}",
                "gpt_neox.layers.{l}.attention.dense.{p}",
            ),
            (
                "model.layers.{l}.mlp.up_proj.{p}",
                "gpt_neox.layers.{l}.mlp.dense_h_to_4h.{p}",
            ),
            (
                "model.layers.{l}.mlp.down_proj.{p}",
                "gpt_neox.layers.{l}.mlp.dense_4h_to_h.{p}",
            ),
        ],
        _ => &[],
    };
    let json: serde_json::Map<String, serde_json::Value> = rules
        .iter()
        .map(|(convention, stored)| (convention.to_string(), (*stored).into()))
        .collect();
    let what = format!("the built-in {} names", architecture.name());
    WeightMap::parse(
        &serde_json::Value::Object(json).to_string(),
        std::path::Path::new(&what),
    )
    .expect("the built-in weight maps are valid")
}

/// Endings of stored names transformers skips on load for `architecture` (old GPT-NeoX
/// files keep their causal-mask and RoPE buffers): not weights the config leaves unused.
pub fn ignored_on_load(architecture: Architecture) -> &'static [&'static str] {
    match architecture {
        Architecture::GptNeox => &[
            ".attention.bias",
            ".attention.masked_bias",
            ".attention.rotary_emb.inv_freq",
        ],
        _ => &[],
    }
}
