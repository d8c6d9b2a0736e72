//! The experts a config states, read with its family's rule and the config class's
//! defaults, and checked: their count, width and routing (`crate::experts` describes them),
//! and the size and scale checks the families' rules share.

use std::path::Path;

use super::Architecture;
use crate::experts::Experts;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

/// The model's sizes a family's experts rule reads: its layers and its dense MLP's
/// `intermediate_size` (Mixtral's experts take it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DenseSizes {
    pub num_layers: usize,
    pub intermediate_size: usize,
}

/// The raw config fields experts are read from that several config classes share, and the
/// whole config for a family's own keys (GPT-OSS's clamp, the Qwen MoE classes' expert
/// layers, Llama 4's, DeepSeek's routing).
pub(crate) struct RawExperts<'a> {
    pub config: &'a super::RawConfig,
    pub num_local_experts: Option<usize>,
    pub num_experts: Option<usize>,
    pub num_experts_per_tok: Option<usize>,
    pub norm_topk_prob: Option<bool>,
    pub moe_intermediate_size: Option<usize>,
    /// The experts' size where the class has no key of its own for it (Llama 4, Granite).
    pub intermediate_size: Option<usize>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experts::ExpertNames;
    use asa_engine::nn::{ClampedGlu, Routing};

    /// 6 layers, a dense MLP of 64.
    const SIZES: DenseSizes = DenseSizes {
        num_layers: 6,
        intermediate_size: 64,
    };

    fn arch(name: &str) -> Architecture {
        Architecture::parse(name).unwrap()
    }

    /// A config of the Qwen MoE classes' expert layers (`null` where `None`).
    fn config(step: Option<usize>, dense: Option<&[usize]>) -> crate::config::RawConfig {
        let json = serde_json::json!({"decoder_sparse_step": step, "mlp_only_layers": dense});
        crate::config::RawConfig::from_value(json, Path::new("config.json"), "test").unwrap()
    }

    fn raw(config: &crate::config::RawConfig) -> RawExperts<'_> {
        RawExperts {
            config,
            num_local_experts: Some(4),
            num_experts: None,
            num_experts_per_tok: Some(2),
            norm_topk_prob: None,
            moe_intermediate_size: Some(24),
            intermediate_size: None,
        }
    }

    #[test]
    fn qwen3_moe_layers_follow_the_step_and_the_dense_list() {
        let path = Path::new("config.json");
        let at = |step, dense| {
            resolve(raw(&config(step, dense)), arch("qwen3_moe"), SIZES, path)
                .unwrap()
                .map(|e| e.layers)
        };
        // transformers: layer l has experts when l is not in mlp_only_layers and
        // (l + 1) % decoder_sparse_step == 0
        assert_eq!(at(None, None), Some(vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(at(Some(2), None), Some(vec![1, 3, 5]));
        assert_eq!(at(Some(2), Some(&[3])), Some(vec![1, 5]));
        assert_eq!(at(Some(1), Some(&[0, 1, 2, 3, 4, 5])), None);
        let e = resolve(raw(&config(None, None)), arch("qwen3_moe"), SIZES, path)
            .unwrap()
            .unwrap();
        assert!(
            e.routing == Routing::SoftmaxTopK { renormalise: false }
                && e.intermediate == 24
                && e.names == ExpertNames::Qwen
        );
        let err = resolve(raw(&config(Some(0), None)), arch("qwen3_moe"), SIZES, path).unwrap_err();
        assert_eq!(
            err.problem(),
            Some(&asa_core::CheckpointProblem::out_of_range(
                "decoder_sparse_step",
                0,
                "at least 1"
            ))
        );
        // Mixtral: every layer, renormalised, the dense intermediate size
        let m = resolve(raw(&config(Some(2), None)), arch("mixtral"), SIZES, path)
            .unwrap()
            .unwrap();
        assert_eq!(
            (m.layers.len(), m.routing, m.intermediate),
            (6, Routing::SoftmaxTopK { renormalise: true }, 64)
        );
        // GPT-OSS: every layer, softmax after top-k, its clamped SwiGLU
        let g = resolve(raw(&config(None, None)), arch("gpt_oss"), SIZES, path)
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
            resolve(raw(&config(None, None)), arch("llama"), SIZES, path).unwrap(),
            None
        );
    }
}
