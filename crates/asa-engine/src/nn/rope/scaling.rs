//! The RoPE scalings transformers computes in `modeling_rope_utils` besides Llama-3's:
//! `linear` (position interpolation), `dynamic` (NTK-aware base growth past the trained
//! length, computed for the run's length as transformers' `dynamic_rope_update` does for a
//! forward pass of T tokens), `yarn` (ramped blend of interpolated and extrapolated
//! frequencies, cos/sin times an attention factor) and `longrope` (Phi-3's per-frequency
//! factors, long ones for runs past the original length, as `longrope_frequency_update`
//! picks them). Each in f64 from the same formulas. The types and the math only: the
//! config keys they are read from are `crate::model::config::rope`'s.

use std::f64::consts::PI;

/// How p-RoPE spaces the frequencies of its rotating pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PRopeSpacing {
    /// Barbero et al. 2024: pair k keeps RoPE's own rope_theta^(-2k/d).
    Rope,
    /// The scale-invariant paper's modded-nanogpt code: rope_theta^(-k/(n-1)), from 1 down
    /// to 1/rope_theta (1 when n = 1).
    Log,
}

/// How rotary frequencies are derived from `rope_theta`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "rope_type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Plain RoPE: inv_freq_k = theta^(-2k/d).
    Default,
    /// Llama-3 frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
    /// Linear position interpolation: every inv_freq divided by `factor`.
    Linear { factor: f64 },
    /// Dynamic NTK: past `max_position_embeddings` tokens the base grows with the run's
    /// length T, theta' = theta (factor T / max - (factor - 1))^(d / (d - 2)).
    Dynamic {
        factor: f64,
        max_position_embeddings: f64,
    },
    /// YaRN: interpolated and extrapolated frequencies blended by a linear ramp between the
    /// correction dimensions of `beta_fast` and `beta_slow`, and cos/sin scaled by
    /// `attention_factor` (resolved from `mscale` / `mscale_all_dim` / `factor` as
    /// transformers does).
    Yarn {
        factor: f64,
        attention_factor: f64,
        beta_fast: f64,
        beta_slow: f64,
        original_max_position_embeddings: f64,
        truncate: bool,
    },
    /// LongRoPE (Phi-3 long-context): inv_freq_k = theta^(-2k/d) / f_k with f the
    /// `long_factor` list when the run is longer than `original_max_position_embeddings`,
    /// else `short_factor`; cos/sin times `attention_factor` (default
    /// sqrt(1 + ln(factor) / ln(original))).
    LongRope {
        long_factor: Vec<f64>,
        short_factor: Vec<f64>,
        original_max_position_embeddings: f64,
        attention_factor: f64,
    },
    /// p-RoPE (`rope_type: p_rope`): the first `rotating_pairs` = floor(p * d / 2) frequency
    /// pairs of each head rotate, the other d/2 - n have frequency 0. Not HF's
    /// `partial_rotary_factor` (which drops trailing dimensions, not frequencies).
    PRope {
        p: f64,
        spacing: PRopeSpacing,
        /// n = floor(p * head_dim / 2) >= 1.
        rotating_pairs: usize,
    },
}

/// The inverse frequencies of `rot_dim` rotating dimensions at base `theta` under
/// `scaling` (linear, dynamic, yarn) for a run of `seq_len` tokens; `None` for the others.
pub(crate) fn inverse_frequencies(
    scaling: &RopeScaling,
    theta: f64,
    rot_dim: usize,
    seq_len: usize,
) -> Option<Vec<f64>> {
    let dim = rot_dim as f64;
    let at_base = |base: f64| -> Vec<f64> {
        (0..rot_dim / 2)
            .map(|k| 1.0 / base.powf((2 * k) as f64 / dim))
            .collect()
    };
    Some(match *scaling {
        RopeScaling::Linear { factor } => at_base(theta).iter().map(|f| f / factor).collect(),
        RopeScaling::Dynamic {
            factor,
            max_position_embeddings: max,
        } => {
            let t = (seq_len as f64).max(max);
            at_base(theta * (factor * t / max - (factor - 1.0)).powf(dim / (dim - 2.0)))
        }
        RopeScaling::Yarn {
            factor,
            beta_fast,
            beta_slow,
            original_max_position_embeddings: original,
            truncate,
            ..
        } => {
            let correction = |rotations: f64| {
                dim * (original / (rotations * 2.0 * PI)).ln() / (2.0 * theta.ln())
            };
            let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
            if low == high {
                high += 0.001;
            }
            at_base(theta)
                .into_iter()
                .enumerate()
                .map(|(k, extrapolated)| {
                    let ramp = ((k as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let keep = 1.0 - ramp;
                    extrapolated / factor * (1.0 - keep) + extrapolated * keep
                })
                .collect()
        }
        RopeScaling::LongRope {
            ref long_factor,
            ref short_factor,
            original_max_position_embeddings: original,
            ..
        } => {
            // transformers picks the long factors once the run passes the original length
            let factors = match seq_len as f64 > original {
                true => long_factor,
                false => short_factor,
            };
            at_base(theta)
                .iter()
                .zip(factors)
                .map(|(f, ext)| f / ext)
                .collect()
        }
        _ => return None,
    })
}

/// The factor cos and sin are multiplied by (YaRN's and LongRoPE's attention factor; 1
/// otherwise).
pub fn attention_factor(scaling: &RopeScaling) -> f64 {
    match *scaling {
        RopeScaling::Yarn {
            attention_factor, ..
        }
        | RopeScaling::LongRope {
            attention_factor, ..
        } => attention_factor,
        _ => 1.0,
    }
}

/// The scaling in words (`inspect`); `None` for the kinds described elsewhere.
pub(crate) fn describe(scaling: &RopeScaling) -> Option<String> {
    Some(match *scaling {
        RopeScaling::Linear { factor } => format!("linearly scaled RoPE (factor {factor})"),
        RopeScaling::Dynamic {
            factor,
            max_position_embeddings,
        } => format!(
            "dynamic NTK RoPE (factor {factor}; the base grows past {max_position_embeddings} tokens)"
        ),
        RopeScaling::Yarn {
            factor,
            attention_factor,
            beta_fast,
            beta_slow,
            original_max_position_embeddings,
            truncate,
        } => format!(
            "YaRN RoPE (factor {factor}, original_max_position_embeddings \
             {original_max_position_embeddings}, beta_fast {beta_fast}, beta_slow {beta_slow}, \
             attention factor {attention_factor:.6}{})",
            if truncate { "" } else { ", not truncated" }
        ),
        RopeScaling::LongRope {
            original_max_position_embeddings,
            attention_factor,
            ..
        } => format!(
            "LongRoPE (long factors past {original_max_position_embeddings} tokens, short \
             ones up to it; attention factor {attention_factor:.6})"
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rotating dimensions have one frequency, base^0 = 1, whatever dynamic NTK makes
    /// of the base (its exponent dim / (dim - 2) is infinite there: transformers divides by
    /// zero); within and past the trained length.
    #[test]
    fn dynamic_ntk_with_two_rotating_dims_keeps_frequency_one() {
        let scaling = RopeScaling::Dynamic {
            factor: 4.0,
            max_position_embeddings: 16.0,
        };
        for seq_len in [8, 16, 64] {
            let f = inverse_frequencies(&scaling, 10_000.0, 2, seq_len).unwrap();
            assert_eq!(f, vec![1.0], "seq_len {seq_len}");
        }
    }
}
