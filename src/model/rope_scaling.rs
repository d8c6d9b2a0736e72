//! The RoPE scalings transformers computes in `modeling_rope_utils` besides Llama-3's:
//! `linear` (position interpolation), `dynamic` (NTK-aware base growth past the trained
//! length, computed for the run's length as transformers' `dynamic_rope_update` does for a
//! forward pass of T tokens), `yarn` (ramped blend of interpolated and extrapolated
//! frequencies, cos/sin times an attention factor) and `longrope` (Phi-3's per-frequency
//! factors, long ones for runs past the original length, as `longrope_frequency_update`
//! picks them). Each in f64 from the same formulas.

use std::f64::consts::PI;
use std::path::Path;

use serde_json::Value;

use super::config::{float_field, positive, RopeScaling};
use crate::error::{Error, Result};

/// The scaling `kind` (linear, dynamic, yarn, longrope) from its rope parameters `p`;
/// `max_position_embeddings` is the config's (dynamic's reference length, YaRN's default
/// original length), `original_max` a top-level `original_max_position_embeddings`, which
/// transformers prefers, and `pairs` the rotating frequency pairs (longrope's factor lists
/// have one factor each).
pub(crate) fn resolve(
    kind: &str,
    p: &Value,
    (max_position_embeddings, original_max, pairs): (f64, Option<f64>, usize),
    path: &Path,
) -> Result<RopeScaling> {
    if kind == "longrope" {
        return resolve_longrope(p, (max_position_embeddings, original_max, pairs), path);
    }
    let factor = |required: bool| -> Result<Option<f64>> {
        match float_field(p, "factor", path)? {
            Some(f) if f >= 1.0 && f.is_finite() => Ok(Some(f)),
            Some(f) => Err(Error::input(
                path,
                format!("{kind} rope scaling `factor` {f} must be a number >= 1"),
            )),
            None if required => Err(Error::input(
                path,
                format!("{kind} rope scaling is missing `factor`"),
            )),
            None => Ok(None),
        }
    };
    Ok(match kind {
        "linear" => RopeScaling::Linear {
            factor: factor(true)?.expect("required"),
        },
        "dynamic" => RopeScaling::Dynamic {
            factor: factor(true)?.expect("required"),
            max_position_embeddings,
        },
        _ => {
            let original = match original_max {
                Some(o) => o,
                None => float_field(p, "original_max_position_embeddings", path)?
                    .unwrap_or(max_position_embeddings),
            };
            let original = positive(original, "yarn `original_max_position_embeddings`", path)?;
            let factor = factor(false)?.unwrap_or(max_position_embeddings / original);
            let get = |key: &str| float_field(p, key, path);
            // transformers: `mscale and mscale_all_dim` (both given and non-zero)
            let attention_factor = match get("attention_factor")? {
                Some(a) => positive(a, "yarn `attention_factor`", path)?,
                None => match (get("mscale")?, get("mscale_all_dim")?) {
                    (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                        yarn_mscale(factor, m) / yarn_mscale(factor, all)
                    }
                    _ => yarn_mscale(factor, 1.0),
                },
            };
            let truncate = match p.get("truncate") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(Error::input(
                        path,
                        format!("yarn `truncate` must be true or false, got {v}"),
                    ))
                }
            };
            RopeScaling::Yarn {
                factor,
                attention_factor,
                // transformers: `get("beta_fast") or 32` (0 falls back too)
                beta_fast: get("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0),
                beta_slow: get("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0),
                original_max_position_embeddings: original,
                truncate,
            }
        }
    })
}

/// LongRoPE's factor lists (one positive number per rotating pair), original length and
/// attention factor.
fn resolve_longrope(
    p: &Value,
    (max_position_embeddings, original_max, pairs): (f64, Option<f64>, usize),
    path: &Path,
) -> Result<RopeScaling> {
    let list = |key: &str| -> Result<Vec<f64>> {
        let values: Option<Vec<f64>> = p
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_f64).collect());
        match values {
            Some(v) if v.len() == pairs && v.iter().all(|f| f.is_finite() && *f > 0.0) => Ok(v),
            Some(v) if v.len() != pairs => Err(Error::input(
                path,
                format!(
                    "longrope `{key}` has {} factors for {pairs} rotating frequency pairs",
                    v.len()
                ),
            )),
            _ => Err(Error::input(
                path,
                format!("longrope `{key}` must be a list of positive numbers"),
            )),
        }
    };
    let original = match original_max {
        Some(o) => o,
        None => float_field(p, "original_max_position_embeddings", path)?
            .ok_or_else(|| Error::input(path, "longrope needs original_max_position_embeddings"))?,
    };
    let original = positive(
        original,
        "longrope `original_max_position_embeddings`",
        path,
    )?;
    let factor = match float_field(p, "factor", path)? {
        Some(f) => f,
        None => max_position_embeddings / original,
    };
    let attention_factor = match float_field(p, "attention_factor", path)? {
        Some(a) => positive(a, "longrope `attention_factor`", path)?,
        None if factor <= 1.0 => 1.0,
        None => (1.0 + factor.ln() / original.ln()).sqrt(),
    };
    Ok(RopeScaling::LongRope {
        long_factor: list("long_factor")?,
        short_factor: list("short_factor")?,
        original_max_position_embeddings: original,
        attention_factor,
    })
}

/// YaRN's attention scale for a context stretched `scale` times: 0.1 m ln(scale) + 1.
fn yarn_mscale(scale: f64, m: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * m * scale.ln() + 1.0
    }
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
pub(crate) fn attention_factor(scaling: &RopeScaling) -> f64 {
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
