//! RoPE settings resolved in one place: transformers 5 `rope_parameters` or the older
//! `rope_theta` + `rope_scaling` (+ `partial_rotary_factor`, GPT-NeoX's `rotary_pct` and
//! `rotary_emb_base`) into a [`RopeConfig`]. The math (`asa_engine::nn::rope`,
//! `asa_engine::nn::rope::scaling`) owns the types and reads no config.

use std::path::Path;

use serde_json::Value;

use super::raw::{float_field, positive, RawConfig};
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::nn::rope::{rotated_dims, RopeConfig};
use asa_engine::nn::rope::{PRopeSpacing, RopeScaling};

/// The object the RoPE parameters are read from, as transformers 5 names it (the legacy
/// `rope_scaling` is read the same way) and as the keys of its problems say.
const ROPE: &str = "rope_parameters";
const ORIGINAL_MAX: &str = "rope_parameters.original_max_position_embeddings";

/// `key`, which `rope_type`'s scaling needs, is absent.
fn missing_for(key: &str, rope_type: &str) -> CheckpointProblem {
    CheckpointProblem::MissingKey {
        key: key.to_string(),
        detail: format!("{rope_type} rope scaling needs it"),
    }
}

impl RawConfig {
    /// RoPE from transformers 5 `rope_parameters` or older `rope_theta` + `rope_scaling`.
    pub(crate) fn resolve_rope(&self, path: &Path, head_dim: usize) -> Result<RopeConfig> {
        self.resolve_rope_with_theta(path, head_dim, 10000.0)
    }

    /// [`RawConfig::resolve_rope`] with the config class's `default_theta` when the config
    /// names none.
    pub(crate) fn resolve_rope_with_theta(
        &self,
        path: &Path,
        head_dim: usize,
        default_theta: f64,
    ) -> Result<RopeConfig> {
        self.resolve_rope_with_defaults(path, head_dim, default_theta, 1.0)
    }

    /// [`RawConfig::resolve_rope`] with the config class's `default_theta` and
    /// `default_partial` rotary factor when the config names neither (GLM-4.5: 0.5).
    pub(crate) fn resolve_rope_with_defaults(
        &self,
        path: &Path,
        head_dim: usize,
        default_theta: f64,
        default_partial: f64,
    ) -> Result<RopeConfig> {
        self.check_rope_objects(path)?;
        let params = self.rope_parameters.as_ref().or(self.rope_scaling.as_ref());
        let params = params.filter(|v| !v.is_null());
        let field = |key: &str| -> Result<Option<f64>> {
            params.map_or(Ok(None), |p| float_field(p, ROPE, key, path))
        };
        let theta = field("rope_theta")?
            .or(self.rope_theta)
            .or(self.rotary_emb_base)
            .unwrap_or(default_theta);
        let theta = positive(theta, "rope_theta", path)?;
        let partial_rotary_factor = field("partial_rotary_factor")?
            .or(self.partial_rotary_factor)
            .or(self.rotary_pct)
            .unwrap_or(default_partial);
        check_partial_rotary(partial_rotary_factor, head_dim, path)?;
        let scaling = self.scaling(params, head_dim, partial_rotary_factor, path)?;
        Ok(RopeConfig {
            theta,
            scaling,
            partial_rotary_factor,
        })
    }

    /// `rope_parameters` and `rope_scaling` are objects (or null), and agree on the keys
    /// they share.
    fn check_rope_objects(&self, path: &Path) -> Result<()> {
        // a string or a number here would otherwise be read as "no scaling" without a word
        for (key, value) in [
            ("rope_parameters", &self.rope_parameters),
            ("rope_scaling", &self.rope_scaling),
        ] {
            if let Some(v) = value.as_ref().filter(|v| !v.is_null() && !v.is_object()) {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::wrong_type(key.to_string(), "an object (or null)", v),
                ));
            }
        }
        // both given: a key they share must agree (which one transformers would read is a
        // guess otherwise)
        if let (Some(Value::Object(new)), Some(Value::Object(old))) =
            (&self.rope_parameters, &self.rope_scaling)
        {
            if let Some(key) = new
                .keys()
                .find(|k| old.get(*k).is_some_and(|v| v != &new[*k]))
            {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::inconsistent(
                        &[&format!("rope_parameters.{key}"), &format!("rope_scaling.{key}")],
                        format!("rope_parameters and the legacy rope_scaling disagree on `{key}`; keep one of them"),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The frequency scaling `rope_type` (or `type`) of `params` names.
    fn scaling(
        &self,
        params: Option<&Value>,
        head_dim: usize,
        partial_rotary_factor: f64,
        path: &Path,
    ) -> Result<RopeScaling> {
        let rope_type = match params.and_then(|p| p.get("rope_type").or_else(|| p.get("type"))) {
            None | Some(Value::Null) => "default",
            Some(Value::String(t)) => t.as_str(),
            Some(other) => {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::wrong_type("rope_parameters.rope_type", "a string", other),
                ))
            }
        };
        Ok(match rope_type {
            "default" => RopeScaling::Default,
            "llama3" => resolve_llama3(params.expect("rope_type came from params"), path)?,
            "p_rope" => {
                let p = params.expect("rope_type came from params");
                resolve_p_rope(p, head_dim, partial_rotary_factor, path)?
            }
            "linear" | "dynamic" | "yarn" | "longrope" => {
                let p = params.expect("rope_type came from params");
                let lengths = ScalingLengths {
                    max_position_embeddings: self.max_position_embeddings.unwrap_or(2048) as f64,
                    original_max: self.original_max_position_embeddings.map(|o| o as f64),
                    pairs: rotated_dims(head_dim, partial_rotary_factor) / 2,
                };
                resolve_scaled(rope_type, p, lengths, path)?
            }
            other => {
                let supported = "default, linear, dynamic, yarn, longrope, llama3, p_rope";
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::unsupported("rope_type", other, supported),
                ));
            }
        })
    }
}

/// `partial_rotary_factor` in (0, 1], rotating at least one pair of `head_dim`.
fn check_partial_rotary(partial_rotary_factor: f64, head_dim: usize, path: &Path) -> Result<()> {
    if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range(
                "partial_rotary_factor",
                partial_rotary_factor,
                "in (0, 1]",
            ),
        ));
    }
    // transformers rotates int(head_dim x factor) dimensions in pairs: an odd count fits
    // no pair (its model fails on it), never read as the pairs below it
    let stated = (head_dim as f64 * partial_rotary_factor) as usize;
    if stated % 2 != 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["partial_rotary_factor", "head_dim"],
                format!("partial_rotary_factor {partial_rotary_factor} of head_dim {head_dim} rotates {stated} dimensions, not an even number"),
            ),
        ));
    }
    if rotated_dims(head_dim, partial_rotary_factor) == 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["partial_rotary_factor", "head_dim"],
                format!("partial_rotary_factor {partial_rotary_factor} of head_dim {head_dim} rotates no dimension pair"),
            ),
        ));
    }
    Ok(())
}

/// Llama-3's four parameters, each required and positive.
fn resolve_llama3(p: &Value, path: &Path) -> Result<RopeScaling> {
    let get = |key: &str| {
        let key = format!("{ROPE}.{key}");
        let value = float_field(p, ROPE, &key[ROPE.len() + 1..], path)?
            .ok_or_else(|| Error::checkpoint_problem(path, missing_for(&key, "llama3")))?;
        positive(value, &key, path)
    };
    Ok(RopeScaling::Llama3 {
        factor: get("factor")?,
        low_freq_factor: get("low_freq_factor")?,
        high_freq_factor: get("high_freq_factor")?,
        original_max_position_embeddings: get("original_max_position_embeddings")?,
    })
}

/// p-RoPE's `p` and `spacing` (SPEC section 2), checked: p in (0, 1], n = floor(p d/2) >= 1.
fn resolve_p_rope(
    params: &Value,
    head_dim: usize,
    partial_rotary_factor: f64,
    path: &Path,
) -> Result<RopeScaling> {
    let p = match params.get("p") {
        None => {
            return Err(Error::checkpoint_problem(
                path,
                missing_for("rope_parameters.p", "p_rope"),
            ))
        }
        Some(v) => v.as_f64().ok_or_else(|| {
            Error::checkpoint_problem(
                path,
                CheckpointProblem::wrong_type("rope_parameters.p", "a number", v),
            )
        })?,
    };
    if !(p > 0.0 && p <= 1.0) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("rope_parameters.p", p, "in (0, 1]"),
        ));
    }
    let rotating_pairs = p_rope_pairs(p, head_dim);
    if rotating_pairs == 0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["rope_parameters.p", "head_dim"],
                format!("p_rope p = {p} rotates no frequency pair: n = floor({p} * {head_dim} / 2) = 0 (head_dim {head_dim})"),
            ),
        ));
    }
    let spacing = match params.get("spacing") {
        None => PRopeSpacing::Rope,
        Some(v) => match v.as_str() {
            Some("rope") => PRopeSpacing::Rope,
            Some("log") => PRopeSpacing::Log,
            _ => {
                return Err(Error::checkpoint_problem(
                    path,
                    CheckpointProblem::unsupported(
                        "rope_parameters.spacing",
                        v.as_str().map_or_else(|| v.to_string(), str::to_string),
                        "rope, log",
                    ),
                ))
            }
        },
    };
    if partial_rotary_factor != 1.0 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::unimplemented(
                &["rope_parameters.rope_type", "partial_rotary_factor"],
                format!("p_rope cannot be combined with partial_rotary_factor {partial_rotary_factor} (two different rules for which dimensions rotate)"),
            ),
        ));
    }
    Ok(RopeScaling::PRope {
        p,
        spacing,
        rotating_pairs,
    })
}

/// n = floor(p * head_dim / 2), the p-RoPE pairs that rotate. A product within 1e-9 below
/// an integer counts as that integer (p = 0.29, d/2 = 100 gives 29, not 28.999...).
pub fn p_rope_pairs(p: f64, head_dim: usize) -> usize {
    (p * (head_dim / 2) as f64 + 1e-9).floor() as usize
}

/// What a scaled RoPE's parameters are resolved against, from the config beside them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScalingLengths {
    /// The config's `max_position_embeddings` (dynamic's reference length, YaRN's default
    /// original length).
    pub max_position_embeddings: f64,
    /// A top-level `original_max_position_embeddings`, which transformers prefers to the
    /// rope parameters' own.
    pub original_max: Option<f64>,
    /// The rotating frequency pairs (longrope's factor lists have one factor each).
    pub pairs: usize,
}

/// The scaling `kind` (linear, dynamic, yarn, longrope) from its rope parameters `p`,
/// against the config's `lengths`.
pub(crate) fn resolve_scaled(
    kind: &str,
    p: &Value,
    lengths: ScalingLengths,
    path: &Path,
) -> Result<RopeScaling> {
    if kind == "longrope" {
        return resolve_longrope(p, lengths, path);
    }
    let factor = |required: bool| -> Result<Option<f64>> {
        match float_field(p, ROPE, "factor", path)? {
            Some(f) if f >= 1.0 && f.is_finite() => Ok(Some(f)),
            Some(f) => Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range("rope_parameters.factor", f, "a number >= 1"),
            )),
            None if required => Err(Error::checkpoint_problem(
                path,
                missing_for("rope_parameters.factor", kind),
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
            max_position_embeddings: lengths.max_position_embeddings,
        },
        _ => resolve_yarn(p, factor, lengths, path)?,
    })
}

/// YaRN's factor (`factor(false)`, checked, default max / original), attention factor (from `attention_factor`, or
/// `mscale` and `mscale_all_dim`, as transformers reads them), betas and truncation.
fn resolve_yarn(
    p: &Value,
    factor: impl Fn(bool) -> Result<Option<f64>>,
    lengths: ScalingLengths,
    path: &Path,
) -> Result<RopeScaling> {
    let max_position_embeddings = lengths.max_position_embeddings;
    let original = match lengths.original_max {
        Some(o) => o,
        None => float_field(p, ROPE, "original_max_position_embeddings", path)?
            .unwrap_or(max_position_embeddings),
    };
    let original = positive(original, ORIGINAL_MAX, path)?;
    let factor = factor(false)?.unwrap_or(max_position_embeddings / original);
    let get = |key: &str| float_field(p, ROPE, key, path);
    // transformers: `mscale and mscale_all_dim` (both given and non-zero)
    let attention_factor = match get("attention_factor")? {
        Some(a) => positive(a, "rope_parameters.attention_factor", path)?,
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
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::wrong_type("rope_parameters.truncate", "true or false", v),
            ))
        }
    };
    Ok(RopeScaling::Yarn {
        factor,
        attention_factor,
        // transformers: `get("beta_fast") or 32` (0 falls back too)
        beta_fast: get("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0),
        beta_slow: get("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0),
        original_max_position_embeddings: original,
        truncate,
    })
}

/// LongRoPE's factor lists (one positive number per rotating pair), original length and
/// attention factor.
fn resolve_longrope(p: &Value, lengths: ScalingLengths, path: &Path) -> Result<RopeScaling> {
    let ScalingLengths {
        max_position_embeddings,
        original_max,
        pairs,
    } = lengths;
    let list = |key: &str| -> Result<Vec<f64>> {
        let values: Option<Vec<f64>> = p
            .get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_f64).collect());
        match values {
            Some(v) if v.len() == pairs && v.iter().all(|f| f.is_finite() && *f > 0.0) => Ok(v),
            Some(v) if v.len() != pairs => Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::inconsistent(
                    &[&format!("{ROPE}.{key}"), "head_dim"],
                    format!(
                        "longrope `{key}` has {} factors for {pairs} rotating frequency pairs",
                        v.len()
                    ),
                ),
            )),
            _ => Err(Error::checkpoint_problem(
                path,
                match p.get(key) {
                    None => missing_for(&format!("{ROPE}.{key}"), "longrope"),
                    Some(v) => CheckpointProblem::wrong_type(
                        format!("{ROPE}.{key}"),
                        "a list of positive numbers",
                        v,
                    ),
                },
            )),
        }
    };
    let original =
        match original_max {
            Some(o) => o,
            None => float_field(p, ROPE, "original_max_position_embeddings", path)?.ok_or_else(
                || Error::checkpoint_problem(path, missing_for(ORIGINAL_MAX, "longrope")),
            )?,
        };
    let original = positive(original, ORIGINAL_MAX, path)?;
    let factor = match float_field(p, ROPE, "factor", path)? {
        Some(f) => f,
        None => max_position_embeddings / original,
    };
    let attention_factor = match float_field(p, ROPE, "attention_factor", path)? {
        Some(a) => positive(a, "rope_parameters.attention_factor", path)?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::resolve::tests::{resolve, BASE};
    use crate::config::ModelConfig;

    #[test]
    fn legacy_and_v5_rope_fields_resolve_alike() {
        let legacy = resolve(&format!(
                r#"{{{BASE}, "rope_theta": 500000.0, "rope_scaling": {{"rope_type": "llama3", "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
            ))
            .unwrap();
        let v5 = resolve(&format!(
                r#"{{{BASE}, "rope_parameters": {{"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
            ))
            .unwrap();
        assert_eq!(legacy.rope, v5.rope);
        assert_eq!(v5.rope.theta, 500000.0);
        assert_eq!(v5.head_dim, 16); // 64 / 4
    }

    #[test]
    fn unimplemented_rope_types_are_errors() {
        for kind in ["proportional", "mrope"] {
            let err = resolve(&format!(
                r#"{{{BASE}, "rope_scaling": {{"rope_type": "{kind}", "factor": 2.0}}}}"#
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains(kind) && err.contains("config.json"), "{err}");
        }
    }

    #[test]
    fn scaled_rope_types_are_read_as_transformers_reads_them() {
        let rope = |params: &str| {
            resolve(&format!(r#"{{{BASE}, "rope_scaling": {{{params}}}}}"#)).map(|c| c.rope.scaling)
        };
        assert_eq!(
            rope(r#""rope_type": "linear", "factor": 4.0"#).unwrap(),
            RopeScaling::Linear { factor: 4.0 }
        );
        // dynamic NTK grows from the config's max_position_embeddings (2048 when absent)
        assert_eq!(
            rope(r#""type": "dynamic", "factor": 2.0"#).unwrap(),
            RopeScaling::Dynamic {
                factor: 2.0,
                max_position_embeddings: 2048.0
            }
        );
        // YaRN: attention factor 0.1 ln(factor) + 1, or the mscale ratio when both are given
        let RopeScaling::Yarn {
            attention_factor, ..
        } = rope(r#""rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512"#)
            .unwrap()
        else {
            panic!("not yarn")
        };
        assert!((attention_factor - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
        let RopeScaling::Yarn {
            attention_factor, ..
        } = rope(r#""rope_type": "yarn", "factor": 4.0, "mscale": 0.5, "mscale_all_dim": 1.0"#)
            .unwrap()
        else {
            panic!("not yarn")
        };
        let m = |s: f64| 0.1 * s * 4f64.ln() + 1.0;
        assert!((attention_factor - m(0.5) / m(1.0)).abs() < 1e-15);
        for (params, want) in [
            (
                r#""rope_type": "linear""#,
                missing_for("rope_parameters.factor", "linear"),
            ),
            (
                r#""rope_type": "dynamic", "factor": 0.5"#,
                CheckpointProblem::out_of_range("rope_parameters.factor", 0.5, "a number >= 1"),
            ),
            (
                r#""rope_type": "yarn", "factor": 2.0, "truncate": 1"#,
                CheckpointProblem::wrong_type("rope_parameters.truncate", "true or false", 1),
            ),
        ] {
            assert_eq!(rope(params).unwrap_err().problem(), Some(&want), "{params}");
        }
    }

    fn p_rope(params: &str) -> Result<ModelConfig> {
        resolve(&format!(
            r#"{{{BASE}, "rope_parameters": {{"rope_type": "p_rope", "rope_theta": 1024, {params}}}}}"#
        ))
    }

    #[test]
    fn p_rope_resolves_pairs_and_spacing() {
        // head_dim 16: p = 0.5 gives n = floor(0.5 * 16 / 2) = 4
        let cfg = resolve(&format!(
            r#"{{{BASE}, "head_dim": 16, "rope_parameters": {{"rope_type": "p_rope", "p": 0.5,
                "rope_theta": 1024, "spacing": "log"}}}}"#
        ))
        .unwrap();
        assert_eq!(
            cfg.rope.scaling,
            RopeScaling::PRope {
                p: 0.5,
                spacing: PRopeSpacing::Log,
                rotating_pairs: 4
            }
        );
        assert_eq!(cfg.rope.theta, 1024.0);
        assert_eq!(cfg.rope.partial_rotary_factor, 1.0);
        // spacing defaults to rope; head_dim 16 (64 / 4): p = 0.3 gives floor(2.4) = 2
        let cfg = p_rope(r#""p": 0.3"#).unwrap();
        assert_eq!(
            cfg.rope.scaling,
            RopeScaling::PRope {
                p: 0.3,
                spacing: PRopeSpacing::Rope,
                rotating_pairs: 2
            }
        );
        // floor(p d/2) on the intended integer: 0.29 * 100 = 28.999999999999996 in f64
        assert_eq!(p_rope_pairs(0.29, 200), 29);
    }

    #[test]
    fn bad_p_rope_settings_name_the_value() {
        let p = "rope_parameters.p";
        for (params, problem) in [
            (r#""p": 0"#, CheckpointProblem::out_of_range(p, 0, "in (0, 1]")),
            (r#""p": 1.5"#, CheckpointProblem::out_of_range(p, 1.5, "in (0, 1]")),
            (r#""p": -0.5"#, CheckpointProblem::out_of_range(p, -0.5, "in (0, 1]")),
            (
                r#""p": 0.1"#,
                CheckpointProblem::inconsistent(
                    &[p, "head_dim"],
                    "p_rope p = 0.1 rotates no frequency pair: n = floor(0.1 * 16 / 2) = 0 (head_dim 16)",
                ),
            ),
            (
                r#""p": 0.5, "spacing": "linear""#,
                CheckpointProblem::unsupported("rope_parameters.spacing", "linear", "rope, log"),
            ),
            (r#""spacing": "log""#, missing_for(p, "p_rope")),
            (r#""p": "half""#, CheckpointProblem::wrong_type(p, "a number", "\"half\"")),
        ] {
            let err = p_rope(params).unwrap_err();
            assert_eq!(err.path(), Some(Path::new("config.json")), "{params}");
            assert_eq!(err.problem(), Some(&problem), "{params}");
        }
        let err = resolve(&format!(
            r#"{{{BASE}, "partial_rotary_factor": 0.5, "rope_parameters": {{"rope_type": "p_rope",
                "p": 0.5}}}}"#
        ))
        .unwrap_err();
        let problem = err.problem().unwrap();
        assert_eq!(
            problem.keys(),
            ["rope_parameters.rope_type", "partial_rotary_factor"]
        );
        assert!(
            problem.to_string().contains("partial_rotary_factor 0.5"),
            "{err}"
        );
    }

    #[test]
    fn partial_rotary_factor_stays_apart_from_p_rope() {
        let cfg = resolve(&format!(r#"{{{BASE}, "partial_rotary_factor": 0.5}}"#)).unwrap();
        assert_eq!(cfg.rope.scaling, RopeScaling::Default);
        assert_eq!(cfg.rope.partial_rotary_factor, 0.5);
    }
}
