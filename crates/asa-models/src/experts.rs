//! Mixture-of-experts MLPs as transformers configures them: Mixtral (`block_sparse_moe`,
//! experts `w1`/`w3`/`w2`, every layer, the top-k probabilities renormalised) and Qwen3-MoE
//! (`mlp.gate`, experts `gate_proj`/`up_proj`/`down_proj` of `moe_intermediate_size`, on the
//! layers `decoder_sparse_step` and `mlp_only_layers` pick, renormalised only with
//! `norm_topk_prob`) and GPT-OSS (`mlp.router` with a bias, the top-k logits softmaxed, every
//! expert's tensors stacked in `mlp.experts.gate_up_proj` / `down_proj` with biases, gate
//! and up interleaved, a clamped SwiGLU). The router math is `asa_engine::nn::MoeMlp`; the
//! experts a config states are read by `config::experts`.

use asa_engine::nn::{ClampedGlu, Routing};

/// How a family stores its experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertNames {
    /// `block_sparse_moe.gate`, `block_sparse_moe.experts.{e}.w1|w3|w2`.
    Mixtral,
    /// `mlp.gate`, `mlp.experts.{e}.gate_proj|up_proj|down_proj`.
    Qwen,
    /// `mlp.router` (with a bias), `mlp.experts.gate_up_proj` `[experts, hidden, 2 *
    /// intermediate]` (gate and up columns interleaved) and `down_proj` `[experts,
    /// intermediate, hidden]`, each with a bias; or their MXFP4 `_blocks` and `_scales`.
    GptOss,
    /// `feed_forward.router`, `feed_forward.experts.gate_up_proj` `[experts, hidden, 2 *
    /// intermediate]` (gate columns first, then up) and `down_proj` `[experts,
    /// intermediate, hidden]`, no biases; the shared expert `feed_forward.shared_expert`.
    Llama4,
    /// Qwen's names with one shared expert `mlp.shared_expert` whose output is scaled by
    /// sigmoid(`mlp.shared_expert_gate` x) (Qwen3-Next).
    QwenShared,
    /// Granite 4 hybrid's names as the loader reads them (the checkpoints' are renamed by
    /// its weight map): `mlp.gate`, stacked `mlp.experts.gate_up_proj` / `down_proj` as a
    /// Linear holds them, one shared MLP `mlp.shared_expert.gate_up_proj` / `down_proj`.
    Granite,
    /// `mlp.gate` with its `e_score_correction_bias`, `mlp.experts.{e}.gate_proj|up_proj|
    /// down_proj`, the shared experts `mlp.shared_experts` (DeepSeek-V3, GLM-4.5).
    DeepSeek,
}

impl ExpertNames {
    /// The block under a layer (`model.layers.{l}.<block>`).
    pub fn block(self) -> &'static str {
        match self {
            ExpertNames::Mixtral => "block_sparse_moe",
            ExpertNames::Llama4 => "feed_forward",
            ExpertNames::Qwen
            | ExpertNames::QwenShared
            | ExpertNames::Granite
            | ExpertNames::GptOss
            | ExpertNames::DeepSeek => "mlp",
        }
    }

    /// The router under the block.
    pub fn router(self) -> &'static str {
        match self {
            ExpertNames::GptOss | ExpertNames::Llama4 => "router",
            ExpertNames::Mixtral
            | ExpertNames::Qwen
            | ExpertNames::QwenShared
            | ExpertNames::Granite
            | ExpertNames::DeepSeek => "gate",
        }
    }

    /// The shared experts under the block, if the family has them.
    pub fn shared(self) -> Option<&'static str> {
        match self {
            ExpertNames::Llama4 | ExpertNames::QwenShared | ExpertNames::Granite => {
                Some("shared_expert")
            }
            ExpertNames::DeepSeek => Some("shared_experts"),
            _ => None,
        }
    }

    /// The shared expert's sigmoid gate `[1, hidden]` under the block, if it has one.
    pub fn shared_gate(self) -> Option<&'static str> {
        match self {
            ExpertNames::QwenShared => Some("shared_expert_gate"),
            _ => None,
        }
    }

    /// Whether the shared MLP holds gate and up as one `gate_up_proj` (gate rows first).
    pub fn shared_fused(self) -> bool {
        self == ExpertNames::Granite
    }

    /// An expert's gate, up and down projections.
    pub fn projections(self) -> [&'static str; 3] {
        match self {
            ExpertNames::Mixtral => ["w1", "w3", "w2"],
            _ => ["gate_proj", "up_proj", "down_proj"],
        }
    }
}

/// A mixture-of-experts MLP: its experts, how tokens are routed to them, and its layers.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Experts {
    pub count: usize,
    /// Experts each token uses.
    pub top_k: usize,
    /// How the chosen experts are weighted.
    pub routing: Routing,
    /// GPT-OSS's clamped SwiGLU (else the plain one).
    pub clamped: Option<ClampedGlu>,
    /// Each expert's intermediate size.
    pub intermediate: usize,
    /// The layers with experts, 0-based (the others have the dense MLP).
    pub layers: Vec<usize>,
    pub names: ExpertNames,
    /// The shared experts' intermediate size (all of them as one MLP), where there are some.
    pub shared_intermediate: Option<usize>,
}

impl Experts {
    /// What `inspect` says of them.
    pub fn describe(&self, num_layers: usize) -> String {
        let routing = match self.routing {
            Routing::SoftmaxTopK { renormalise: true } => "softmax, top-k, renormalised",
            Routing::SoftmaxTopK { renormalise: false } => "softmax, top-k, not renormalised",
            Routing::TopKSoftmax => "top-k logits, then softmax",
            Routing::TopKSigmoidInput => "top-k logits, sigmoid weights on the experts' inputs",
            Routing::GroupLimitedSigmoid { .. } => {
                "sigmoid scores, group-limited top-k with a score-correction bias"
            }
        };
        let kind = match self.clamped {
            Some(c) => format!(
                "clamped SwiGLU (alpha {}, limit {}) experts with biases",
                c.alpha, c.limit
            ),
            None => "SwiGLU experts".to_string(),
        };
        let layers = match self.layers.len() == num_layers {
            true => String::new(),
            false => format!(
                " on layers {} (dense elsewhere)",
                self.layers
                    .iter()
                    .map(|l| (l + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let shared = match self.shared_intermediate {
            Some(size) => format!(" and a shared SwiGLU of {size}"),
            None => String::new(),
        };
        format!(
            "a mixture of {} {kind} of {}, {} a token ({routing}){shared}{layers}",
            self.count, self.intermediate, self.top_k
        )
    }
}
