//! Mixture-of-experts MLPs as transformers configures them: Mixtral (`block_sparse_moe`,
//! experts `w1`/`w3`/`w2`, every layer, the top-k probabilities renormalised) and Qwen3-MoE
//! (`mlp.gate`, experts `gate_proj`/`up_proj`/`down_proj` of `moe_intermediate_size`, on the
//! layers `decoder_sparse_step` and `mlp_only_layers` pick, renormalised only with
//! `norm_topk_prob`) and GPT-OSS (`mlp.router` with a bias, the top-k logits softmaxed, every
//! expert's tensors stacked in `mlp.experts.gate_up_proj` / `down_proj` with biases, gate
//! and up interleaved, a clamped SwiGLU). The router math is `asa_engine::nn::MoeMlp`.

use std::path::Path;

use super::config::Architecture;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
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

/// The model's sizes a family's experts rule reads: its layers and its dense MLP's
/// `intermediate_size` (Mixtral's experts take it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DenseSizes {
    pub num_layers: usize,
    pub intermediate_size: usize,
}

/// The raw config fields experts are read from.
pub(crate) struct RawExperts<'a> {
    pub num_local_experts: Option<usize>,
    pub num_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub moe_intermediate_size: Option<usize>,
    pub decoder_sparse_step: Option<usize>,
    pub mlp_only_layers: Option<&'a [usize]>,
    pub swiglu_alpha: Option<f64>,
    pub swiglu_limit: Option<f64>,
    /// Llama 4: the experts' size, and which layers have them.
    pub intermediate_size: Option<usize>,
    pub moe_layers: Option<&'a [usize]>,
    pub interleave_moe_layer_step: Option<usize>,
    /// DeepSeek-V3 / GLM-4.5.
    pub n_routed_experts: Option<usize>,
    pub n_shared_experts: Option<usize>,
    pub n_group: Option<usize>,
    pub topk_group: Option<usize>,
    pub routed_scaling_factor: Option<f64>,
    pub first_k_dense_replace: Option<usize>,
    pub topk_method: Option<&'a str>,
    pub scoring_func: Option<&'a str>,
    /// Qwen3-Next's shared expert, Granite's shared MLP.
    pub shared_expert_intermediate_size: Option<usize>,
    pub shared_intermediate_size: Option<usize>,
}

/// The experts of a config, as transformers reads them for `architecture` (its family's
/// `experts`, with the config class's defaults), checked; `None` for dense architectures.
pub(crate) fn resolve(
    raw: RawExperts<'_>,
    architecture: Architecture,
    sizes: DenseSizes,
    path: &Path,
) -> Result<Option<Experts>> {
    let Some(experts) = (architecture.family().experts)(&raw, sizes, path)? else {
        return Ok(None);
    };
    let (count, top_k) = (experts.count, experts.top_k);
    if experts.layers.is_empty() {
        return Ok(None);
    }
    if count == 0 || top_k == 0 || top_k > count {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range(
                "num_experts_per_tok",
                top_k,
                format!("between 1 and the {count} experts"),
            ),
        ));
    }
    if experts.intermediate == 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("moe_intermediate_size", 0, "at least 1"),
        ));
    }
    Ok(Some(experts))
}

/// `value` when finite, else an error naming `what`.
/// The product of two sizes a config states (`what` names them), refused where it would
/// wrap (`n_shared_experts` 2^60 + 1 times `moe_intermediate_size` 16 wrapped to 16).
pub(crate) fn checked_size(a: usize, b: usize, what: &str, path: &Path) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| {
        let problem = CheckpointProblem::out_of_range(
            what,
            format!("{a} x {b}"),
            "a product that fits a size (it is past any)",
        );
        Error::checkpoint_problem(path, problem)
    })
}

/// A scale factor the model's float32 arithmetic holds: finite, not 0, its magnitude within
/// f32's normal range (`routed_scaling_factor` 1e308 is finite, and inf in f32), checked
/// before any layer runs.
pub(crate) fn f32_factor(value: f64, what: &str, path: &Path) -> Result<f64> {
    let a = value.abs();
    match a >= f64::from(f32::MIN_POSITIVE) && a <= f64::from(f32::MAX) {
        true => Ok(value),
        false => Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range(
                what,
                value,
                "within what float32 holds (its magnitude between 1.2e-38 and 3.4e38)",
            ),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 6 layers, a dense MLP of 64.
    const SIZES: DenseSizes = DenseSizes {
        num_layers: 6,
        intermediate_size: 64,
    };

    fn arch(name: &str) -> Architecture {
        Architecture::parse(name).unwrap()
    }

    fn raw(step: Option<usize>, dense: Option<&[usize]>) -> RawExperts<'_> {
        RawExperts {
            num_local_experts: Some(4),
            num_experts: None,
            num_experts_per_tok: Some(2),
            norm_topk_prob: None,
            moe_intermediate_size: Some(24),
            decoder_sparse_step: step,
            mlp_only_layers: dense,
            swiglu_alpha: None,
            swiglu_limit: None,
            intermediate_size: None,
            moe_layers: None,
            interleave_moe_layer_step: None,
            n_routed_experts: None,
            n_shared_experts: None,
            n_group: None,
            topk_group: None,
            routed_scaling_factor: None,
            first_k_dense_replace: None,
            topk_method: None,
            scoring_func: None,
            shared_expert_intermediate_size: None,
            shared_intermediate_size: None,
        }
    }

    #[test]
    fn qwen3_moe_layers_follow_the_step_and_the_dense_list() {
        let path = Path::new("config.json");
        let at = |step, dense| {
            resolve(raw(step, dense), arch("qwen3_moe"), SIZES, path)
                .unwrap()
                .map(|e| e.layers)
        };
        // transformers: layer l has experts when l is not in mlp_only_layers and
        // (l + 1) % decoder_sparse_step == 0
        assert_eq!(at(None, None), Some(vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(at(Some(2), None), Some(vec![1, 3, 5]));
        assert_eq!(at(Some(2), Some(&[3])), Some(vec![1, 5]));
        assert_eq!(at(Some(1), Some(&[0, 1, 2, 3, 4, 5])), None);
        let e = resolve(raw(None, None), arch("qwen3_moe"), SIZES, path)
            .unwrap()
            .unwrap();
        assert!(
            e.routing == Routing::SoftmaxTopK { renormalise: false }
                && e.intermediate == 24
                && e.names == ExpertNames::Qwen
        );
        let err = resolve(raw(Some(0), None), arch("qwen3_moe"), SIZES, path).unwrap_err();
        assert_eq!(
            err.problem(),
            Some(&asa_core::CheckpointProblem::out_of_range(
                "decoder_sparse_step",
                0,
                "at least 1"
            ))
        );
        // Mixtral: every layer, renormalised, the dense intermediate size
        let m = resolve(raw(Some(2), None), arch("mixtral"), SIZES, path)
            .unwrap()
            .unwrap();
        assert_eq!(
            (m.layers.len(), m.routing, m.intermediate),
            (6, Routing::SoftmaxTopK { renormalise: true }, 64)
        );
        // GPT-OSS: every layer, softmax after top-k, its clamped SwiGLU
        let g = resolve(raw(None, None), arch("gpt_oss"), SIZES, path)
            .unwrap()
            .unwrap();
        assert_eq!((g.layers.len(), g.routing), (6, Routing::TopKSoftmax));
        assert_eq!(
            g.clamped,
            Some(ClampedGlu {
                alpha: 1.702,
                limit: 7.0
            })
        );
        assert_eq!(
            resolve(raw(None, None), arch("llama"), SIZES, path).unwrap(),
            None
        );
    }
}
