//! Rotary position embeddings from config.json, in Hugging Face's rotate-half convention: default RoPE,
//! Llama-3 frequency scaling, `partial_rotary_factor` (only the first fraction of each
//! head's dimensions rotates) and p-RoPE (only the first n frequency pairs rotate, the
//! others have frequency 0; SPEC section 2).

use candle_core::{DType, Device};

use super::scaling::{PRopeSpacing, RopeScaling};
use super::Rope;
use asa_core::error::Result;

/// Resolved rotary-embedding settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RopeConfig {
    /// Base of the frequencies.
    pub theta: f64,
    /// Frequency scaling rule.
    pub scaling: RopeScaling,
    /// HF `partial_rotary_factor`: the first `fraction * head_dim` dimensions rotate.
    pub partial_rotary_factor: f64,
}

/// The inverse frequencies theta_k of one head, `rot_dim / 2` values (after scaling; p-RoPE's
/// non-rotating pairs are 0), for runs no longer than the trained length (dynamic NTK
/// scaling depends on the run's length: [`inverse_frequencies_for`]).
pub fn inverse_frequencies(rope: &RopeConfig, head_dim: usize) -> Vec<f64> {
    inverse_frequencies_for(rope, head_dim, 0)
}

/// [`inverse_frequencies`] for a run of `seq_len` tokens.
pub fn inverse_frequencies_for(rope: &RopeConfig, head_dim: usize, seq_len: usize) -> Vec<f64> {
    let rot_dim = rotary_dim(rope, head_dim);
    if let Some(inv) =
        super::scaling::inverse_frequencies(&rope.scaling, rope.theta, rot_dim, seq_len)
    {
        return inv;
    }
    let base: Vec<f64> = (0..rot_dim / 2)
        .map(|k| 1.0 / rope.theta.powf((2 * k) as f64 / rot_dim as f64))
        .collect();
    match rope.scaling {
        RopeScaling::Default
        | RopeScaling::Linear { .. }
        | RopeScaling::Dynamic { .. }
        | RopeScaling::Yarn { .. }
        | RopeScaling::LongRope { .. } => base,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => {
            let low_freq_wavelen = old / low_freq_factor;
            let high_freq_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_freq_wavelen {
                        f
                    } else if wavelen > low_freq_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
        RopeScaling::PRope {
            spacing,
            rotating_pairs: n,
            ..
        } => base
            .into_iter()
            .enumerate()
            .map(|(k, f)| match spacing {
                _ if k >= n => 0.0,
                PRopeSpacing::Rope => f,
                PRopeSpacing::Log if n == 1 => 1.0,
                PRopeSpacing::Log => 1.0 / rope.theta.powf(k as f64 / (n - 1) as f64),
            })
            .collect(),
    }
}

/// How many leading dimensions of a head rotate (`int(head_dim * partial_rotary_factor)`).
pub fn rotary_dim(rope: &RopeConfig, head_dim: usize) -> usize {
    rotated_dims(head_dim, rope.partial_rotary_factor)
}

/// The rotary settings in words, for people (`inspect`): "RoPE, theta 10000",
/// "p-RoPE, p = 0.5, log spacing, 4 of 8 pairs rotate, theta 1024", with how many
/// dimensions rotate under `partial_rotary_factor`.
pub fn describe(rope: &RopeConfig, head_dim: usize) -> String {
    let kind = match &rope.scaling {
        RopeScaling::Default => "RoPE".to_string(),
        other @ (RopeScaling::Linear { .. }
        | RopeScaling::Dynamic { .. }
        | RopeScaling::Yarn { .. }
        | RopeScaling::LongRope { .. }) => {
            super::scaling::describe(other).expect("a scaling it describes")
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => format!(
            "Llama-3 scaled RoPE (factor {factor}, low_freq_factor {low_freq_factor}, \
             high_freq_factor {high_freq_factor}, original_max_position_embeddings \
             {original_max_position_embeddings})"
        ),
        RopeScaling::PRope {
            p,
            spacing,
            rotating_pairs,
        } => {
            let spacing = match spacing {
                PRopeSpacing::Rope => "RoPE spacing",
                PRopeSpacing::Log => "log spacing",
            };
            let pairs = head_dim / 2;
            format!("p-RoPE, p = {p}, {spacing}, {rotating_pairs} of {pairs} pairs rotate")
        }
    };
    let mut text = format!("{kind}, theta {}", rope.theta);
    let f = rope.partial_rotary_factor;
    if f < 1.0 {
        let rotating = rotary_dim(rope, head_dim);
        text += &format!(", partial_rotary_factor {f} ({rotating} of {head_dim} dims rotate)");
    }
    text
}

/// `int(head_dim * partial_rotary_factor)`, rounded down to whole pairs.
pub fn rotated_dims(head_dim: usize, partial_rotary_factor: f64) -> usize {
    let d = (head_dim as f64 * partial_rotary_factor) as usize;
    d - d % 2
}

/// The cos/sin tables of `rope` for `seq_len` positions of heads of `head_dim`.
pub fn rope_tables(
    rope: &RopeConfig,
    head_dim: usize,
    seq_len: usize,
    dtype: DType,
    device: &Device,
) -> Result<Rope> {
    let inv = inverse_frequencies_for(rope, head_dim, seq_len);
    let scale = super::scaling::attention_factor(&rope.scaling);
    Rope::scaled(&inv, seq_len, scale, dtype, device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    fn config(theta: f64, scaling: RopeScaling) -> RopeConfig {
        RopeConfig {
            theta,
            scaling,
            partial_rotary_factor: 1.0,
        }
    }

    #[test]
    fn describe_says_the_rope_in_words() {
        let p_rope = RopeScaling::PRope {
            p: 0.5,
            spacing: PRopeSpacing::Log,
            rotating_pairs: 4,
        };
        assert_eq!(
            describe(&config(1024.0, p_rope), 16),
            "p-RoPE, p = 0.5, log spacing, 4 of 8 pairs rotate, theta 1024"
        );
        let mut partial = config(10000.0, RopeScaling::Default);
        partial.partial_rotary_factor = 0.5;
        assert_eq!(
            describe(&partial, 12),
            "RoPE, theta 10000, partial_rotary_factor 0.5 (6 of 12 dims rotate)"
        );
        let llama3 = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let text = describe(&config(500000.0, llama3), 64);
        assert!(
            text.starts_with("Llama-3 scaled RoPE (factor 8, "),
            "{text}"
        );
        assert!(!text.contains('{'), "{text}");
    }

    #[test]
    fn p_rope_with_rope_spacing_and_p_1_is_standard_rope() {
        let plain = config(10000.0, RopeScaling::Default);
        let p_rope = config(
            10000.0,
            RopeScaling::PRope {
                p: 1.0,
                spacing: PRopeSpacing::Rope,
                rotating_pairs: 4,
            },
        );
        assert_eq!(
            inverse_frequencies(&plain, 8),
            inverse_frequencies(&p_rope, 8)
        );
        let xs = Tensor::arange(0f32, 2.0 * 3.0 * 16.0 * 8.0, &Device::Cpu)
            .unwrap()
            .affine(0.01, -1.0)
            .unwrap()
            .reshape((2, 3, 16, 8))
            .unwrap();
        let rotate = |cfg: &RopeConfig| {
            let rope = rope_tables(cfg, 8, 16, DType::F32, &Device::Cpu).unwrap();
            let out = rope.apply(&xs).unwrap();
            out.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        };
        assert_eq!(rotate(&plain), rotate(&p_rope)); // bit for bit
    }

    #[test]
    fn p_rope_rope_spacing_zeroes_the_lowest_frequencies() {
        // d = 8, p = 0.5: n = 2 of 4 pairs rotate at 1e4^(-0/8) = 1 and 1e4^(-2/8) = 0.1
        let cfg = config(
            10000.0,
            RopeScaling::PRope {
                p: 0.5,
                spacing: PRopeSpacing::Rope,
                rotating_pairs: 2,
            },
        );
        let inv = inverse_frequencies(&cfg, 8);
        assert_eq!(inv[0], 1.0);
        assert!((inv[1] - 0.1).abs() < 1e-15);
        assert_eq!(&inv[2..], &[0.0, 0.0]);
    }

    #[test]
    fn p_rope_log_spacing_angles() {
        // d = 16, p = 0.5, rope_theta 1024: n = floor(0.5 * 8) = 4 pairs rotate at
        // 1024^(-k/3), k = 0..3: 1, 1024^(-1/3) = 0.0992126, 1024^(-2/3) = 0.00984313,
        // 1024^(-1) = 0.000976563; pairs 4..7 have frequency 0. At position 5 the angles are
        // 5, 0.496063, 0.0492157, 0.00488281 and 0.
        let cfg = config(
            1024.0,
            RopeScaling::PRope {
                p: 0.5,
                spacing: PRopeSpacing::Log,
                rotating_pairs: 4,
            },
        );
        let inv = inverse_frequencies(&cfg, 16);
        let want = [1.0, 0.0992126, 0.00984313, 0.000976563, 0.0, 0.0, 0.0, 0.0];
        assert_eq!(inv.len(), 8);
        for (k, (got, want)) in inv.iter().zip(want).enumerate() {
            assert!(
                (got - want).abs() <= 1e-6 * want,
                "pair {k}: {got} vs {want}"
            );
        }
        let angles: Vec<f64> = inv.iter().map(|f| 5.0 * f).collect();
        let want = [5.0, 0.496063, 0.0492157, 0.00488281];
        for (got, want) in angles.iter().zip(want) {
            assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
        }
        // one rotating pair: frequency 1
        let one = config(
            1024.0,
            RopeScaling::PRope {
                p: 0.25,
                spacing: PRopeSpacing::Log,
                rotating_pairs: 1,
            },
        );
        assert_eq!(inverse_frequencies(&one, 8), vec![1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn non_rotating_pairs_are_left_unchanged() {
        let cfg = config(
            1024.0,
            RopeScaling::PRope {
                p: 0.5,
                spacing: PRopeSpacing::Log,
                rotating_pairs: 2,
            },
        );
        let rope = rope_tables(&cfg, 8, 6, DType::F32, &Device::Cpu).unwrap();
        let xs = Tensor::arange(1f32, 1.0 + 6.0 * 8.0, &Device::Cpu)
            .unwrap()
            .reshape((1, 1, 6, 8))
            .unwrap();
        let out = rope.apply(&xs).unwrap();
        // rotate-half pairs (k, k + 4) for k = 2, 3: dims 2, 3, 6, 7 pass through exactly
        for dim in [2, 3, 6, 7] {
            let a = xs.narrow(3, dim, 1).unwrap().flatten_all().unwrap();
            let b = out.narrow(3, dim, 1).unwrap().flatten_all().unwrap();
            assert_eq!(a.to_vec1::<f32>().unwrap(), b.to_vec1::<f32>().unwrap());
        }
    }
}
