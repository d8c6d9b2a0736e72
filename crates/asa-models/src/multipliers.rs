//! The muP multipliers of Granite 4 hybrid and Falcon-H1 checkpoints: scalars on the
//! embeddings, the residual branches, the attention's input, keys, scale and output, the
//! MLP's gate and output, the Mamba output and the logits. The default multiplies nothing.

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::Error;

/// A model's multipliers; `None` multiplies by 1 (the op is not applied).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Multipliers {
    /// The embeddings are multiplied by this.
    pub embedding: Option<f64>,
    /// Each mixer's and MLP's output, before the residual sum (Granite's
    /// `residual_multiplier`).
    pub residual: Option<f64>,
    /// The softmax scale instead of head_dim^-1/2 (Granite's `attention_multiplier`).
    pub attention_scale: Option<f64>,
    /// The logits are divided by this (Granite's `logits_scaling`)...
    pub logits_divisor: Option<f64>,
    /// ... or multiplied by this (Falcon-H1's `lm_head_multiplier`)...
    pub logits_factor: Option<f64>,
    /// ... or by this (Cohere's `logit_scale`).
    pub logit_scale: Option<f64>,
    /// Falcon-H1: the attention's input and output, its keys, the Mamba output, the MLP's
    /// gate projection and its output.
    pub attention_in: Option<f64>,
    pub attention_out: Option<f64>,
    pub key: Option<f64>,
    pub ssm_out: Option<f64>,
    pub mlp_gate: Option<f64>,
    pub mlp_down: Option<f64>,
    /// Falcon-H1's Mamba input factor and its muP vector's factors of z, x, B, C and dt.
    pub ssm_in: Option<f64>,
    pub ssm_rows: Option<[f64; 5]>,
}

impl Multipliers {
    /// Each multiplier there is, with its words and its config key.
    fn entries(&self) -> Vec<(f64, &'static str, &'static str)> {
        let all = [
            (self.embedding, "embeddings x {}", "embedding_multiplier"),
            (
                self.residual,
                "mixer and MLP outputs x {}",
                "residual_multiplier",
            ),
            (self.attention_scale, "", "attention_multiplier"),
            (
                self.attention_in,
                "attention input x {}",
                "attention_in_multiplier",
            ),
            (self.key, "keys x {}", "key_multiplier"),
            (
                self.attention_out,
                "attention output x {}",
                "attention_out_multiplier",
            ),
            (self.ssm_in, "Mamba input x {}", "ssm_in_multiplier"),
            (self.ssm_out, "Mamba output x {}", "ssm_out_multiplier"),
            (self.mlp_gate, "MLP gate x {}", "mlp_multipliers[0]"),
            (self.mlp_down, "MLP output x {}", "mlp_multipliers[1]"),
            (
                self.logits_divisor,
                "next-token logits / {}",
                "logits_scaling",
            ),
            (
                self.logits_factor,
                "next-token logits x {}",
                "lm_head_multiplier",
            ),
            (self.logit_scale, "next-token logits x {}", "logit_scale"),
        ];
        let mut entries: Vec<(f64, &str, &str)> = all
            .into_iter()
            .filter_map(|(v, words, key)| v.map(|v| (v, words, key)))
            .collect();
        for (v, key) in self.ssm_rows.into_iter().flatten().zip([
            "ssm_multipliers[0]",
            "ssm_multipliers[1]",
            "ssm_multipliers[2]",
            "ssm_multipliers[3]",
            "ssm_multipliers[4]",
        ]) {
            entries.push((v, "", key));
        }
        entries
    }

    /// What they multiply besides the softmax scale, in words ("embeddings x 2.7; mixer
    /// and MLP outputs x 0.5 (residual_multiplier); ..."); empty when nothing.
    pub fn describe(&self) -> String {
        let mut words: Vec<String> = self
            .entries()
            .iter()
            .filter(|(_, words, _)| !words.is_empty())
            .map(|(v, words, key)| format!("{} ({key})", words.replace("{}", &v.to_string())))
            .collect();
        if let Some([z, x, b, c, dt]) = self.ssm_rows {
            words.push(format!(
                "Mamba in_proj's z, x, B, C, dt x {z}, {x}, {b}, {c}, {dt} (ssm_multipliers)"
            ));
        }
        words.join("; ")
    }

    /// Every multiplier a number the model's float32 arithmetic holds: finite, not 0, its
    /// magnitude within f32's normal range (1e300, finite in the config, is inf in f32 and
    /// could only give NaN activations), checked before any layer runs; refused naming the
    /// key and `path`.
    pub fn check(&self, path: &std::path::Path) -> asa_core::error::Result<()> {
        for (v, _, key) in self.entries() {
            let a = v.abs();
            if !(a >= f64::from(f32::MIN_POSITIVE) && a <= f64::from(f32::MAX)) {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::out_of_range(
                        key,
                        v,
                        "within what float32 holds (its magnitude between 1.2e-38 and 3.4e38): the model could only compute inf, NaN or 0 from it",
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `xs` times `factor`, when there is one (in `xs`'s dtype, as torch multiplies a tensor
/// by a Python float).
pub fn scaled(
    xs: candle_core::Tensor,
    factor: Option<f64>,
) -> candle_core::Result<candle_core::Tensor> {
    match factor {
        Some(f) => xs.affine(f, 0.0),
        None => Ok(xs),
    }
}
