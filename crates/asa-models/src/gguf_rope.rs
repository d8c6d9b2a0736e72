//! Llama-3.x RoPE scaling in GGUF files. llama.cpp's converter evaluates the Llama-3 rule
//! once and stores the result as `rope_freqs.weight`, one factor per frequency pair; at run
//! time it divides inverse frequency k by factor k. The rule (transformers'
//! `_compute_llama3_parameters`, [`asa_engine::nn::rope::inverse_frequencies`]) gives, with
//! s(f) = (old * f / 2 pi - low) / (high - low):
//!   factor_k = 1 (s > 1), `factor` (s < 0), 1 / ((1 - s) / factor + s) otherwise.
//! s is linear in the frequency f, so the factors pin down `factor` and the line s(f) (up to
//! the choice of `old`, which only scales low and high), and we resolve them back into
//! `rope_type: llama3` parameters. The recovered parameters are then checked to reproduce
//! every stored factor through the forward pass's own frequency code; anything else is an
//! error, never an approximation.

use std::fs::File;
use std::path::Path;

use candle_core::quantized::gguf_file::TensorInfo;
use candle_core::Device;
use serde_json::json;

use super::gguf_config::Meta;
use super::root_cause;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};

/// Relative tolerance of a recovered frequency against base / factor (factors are stored in
/// f32: 6e-8; the fit adds rounding of the same order).
const MATCH_RTOL: f64 = 1e-5;
/// Classification tolerance on s.
const S_TOL: f64 = 1e-6;

/// `rope_freqs.weight` and what it resolved to.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// `rope_parameters` for config resolution; `None` when every factor is 1.
    pub params: Option<serde_json::Value>,
    pub theta: f64,
    pub rot_dim: usize,
    pub factors: Vec<f64>,
}

impl Recovered {
    /// For `inspect`: where the RoPE settings came from.
    pub fn describe(&self) -> String {
        match &self.params {
            None => "rope_freqs.weight (every factor 1: no scaling)".into(),
            Some(p) => format!(
                "rope_freqs.weight read as llama3 scaling: factor {}, low_freq_factor {:.6}, high_freq_factor {:.6}, original_max_position_embeddings {}",
                p["factor"], p["low_freq_factor"], p["high_freq_factor"], p["original_max_position_embeddings"]
            ),
        }
    }
}

/// Reads the `rot_dim / 2` factors.
pub(crate) fn read_factors(
    meta: &Meta,
    file: &mut File,
    info: &TensorInfo,
    rot_dim: usize,
) -> Result<Vec<f64>> {
    let path = meta.path;
    if info.shape.dims() != [rot_dim / 2] {
        let problem = CheckpointProblem::Shape {
            tensor: "rope_freqs.weight".into(),
            expected: vec![rot_dim / 2],
            got: info.shape.dims().to_vec(),
        };
        let note = format!("rope dimension {rot_dim} / 2");
        return Err(Error::checkpoint_problem(path, problem).with_note(note));
    }
    let q = info
        .read(file, meta.content.tensor_data_offset, &Device::Cpu)
        .map_err(|e| {
            Error::invalid(path, "cannot read tensor rope_freqs.weight", root_cause(e))
                .about(InputKind::Checkpoint)
        })?;
    let factors: Vec<f32> = q.dequantize(&Device::Cpu)?.to_vec1()?;
    Ok(factors.into_iter().map(f64::from).collect())
}

/// The Llama-3 parameters that reproduce `factors` for RoPE base `theta` over `rot_dim`
/// rotating dimensions, with `original_max_position_embeddings = old`; `None` when no
/// Llama-3 rule gives these factors.
pub fn llama3_from_freq_factors(
    theta: f64,
    rot_dim: usize,
    factors: &[f64],
    old: f64,
) -> Option<Recovered> {
    let freqs: Vec<f64> = (0..rot_dim / 2)
        .map(|k| 1.0 / theta.powf((2 * k) as f64 / rot_dim as f64))
        .collect();
    if freqs.len() != factors.len() || factors.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
        return None;
    }
    let recovered = |params| Recovered {
        params,
        theta,
        rot_dim,
        factors: factors.to_vec(),
    };
    let factor = factors.iter().copied().fold(f64::MIN, f64::max);
    if factors.iter().all(|r| (r - 1.0).abs() <= S_TOL) {
        return Some(recovered(None));
    }
    if factor <= 1.0 {
        return None;
    }
    // s_k from factor_k = 1 / ((1 - s) / factor + s)
    let s = |r: f64| (1.0 / r - 1.0 / factor) / (1.0 - 1.0 / factor);
    let (mut high, mut low, mut mid) = (Vec::new(), Vec::new(), Vec::new());
    for (&f, &r) in freqs.iter().zip(factors) {
        match s(r) {
            v if v >= 1.0 - S_TOL => high.push(f),
            v if v <= S_TOL => low.push(f),
            v => mid.push((f, v)),
        }
    }
    let (a, b) = fit_line(&high, &low, &mid)?;
    // s = a f + b = (old f / 2 pi - low) / (high - low)
    let width = old / (2.0 * std::f64::consts::PI * a);
    let low_freq_factor = -b * width;
    let high_freq_factor = low_freq_factor + width;
    if !(a > 0.0 && low_freq_factor > 0.0 && width.is_finite()) {
        return None;
    }
    Some(recovered(Some(json!({
        "rope_type": "llama3",
        "rope_theta": theta,
        "factor": factor,
        "low_freq_factor": low_freq_factor,
        "high_freq_factor": high_freq_factor,
        "original_max_position_embeddings": old,
    }))))
}

/// A line s = a f + b through the smooth points (least squares), above 1 at every
/// unscaled frequency and below 0 at every fully scaled one.
fn fit_line(high: &[f64], low: &[f64], mid: &[(f64, f64)]) -> Option<(f64, f64)> {
    let (a, b) = match mid {
        [] => {
            let f_low = low.iter().copied().fold(f64::MIN, f64::max);
            match high.iter().copied().reduce(f64::min) {
                // between the fastest scaled and the slowest unscaled frequency
                Some(f_high) if f_high > f_low => {
                    let a = 1.0 / (f_high - f_low);
                    (a, -a * f_low)
                }
                Some(_) => return None,
                // everything scaled: any line below 0 on [0, f_low]
                None => (1.0 / f_low, -2.0),
            }
        }
        [(f1, s1)] => {
            // the steepest constraint through (f1, s1); steeper is always allowed
            let mut a = 2.0 * s1 / f1;
            for &f in low {
                if f < *f1 {
                    a = a.max(s1 / (f1 - f));
                }
            }
            for &f in high {
                if f > *f1 {
                    a = a.max((1.0 - s1) / (f - f1));
                }
            }
            (a, s1 - a * f1)
        }
        points => {
            let n = points.len() as f64;
            let mf = points.iter().map(|p| p.0).sum::<f64>() / n;
            let ms = points.iter().map(|p| p.1).sum::<f64>() / n;
            let sff: f64 = points.iter().map(|p| (p.0 - mf).powi(2)).sum();
            let sfs: f64 = points.iter().map(|p| (p.0 - mf) * (p.1 - ms)).sum();
            let a = sfs / sff;
            (a, ms - a * mf)
        }
    };
    let ok =
        high.iter().all(|f| a * f + b >= 1.0 - S_TOL) && low.iter().all(|f| a * f + b <= S_TOL);
    ok.then_some((a, b))
}

/// Checks that the resolved config's inverse frequencies (`got`) are llama.cpp's base /
/// factor.
pub(crate) fn check_resolved(path: &Path, r: &Recovered, got: &[f64]) -> Result<()> {
    let mismatch = got.len() != r.factors.len()
        || (0..got.len()).any(|k| {
            let want = 1.0 / r.theta.powf((2 * k) as f64 / r.rot_dim as f64) / r.factors[k];
            (got[k] - want).abs() > MATCH_RTOL * want
        });
    if mismatch {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::tensor_data(
                "rope_freqs.weight",
                "not a Llama-3 frequency scaling (the only per-frequency factors implemented)",
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors).
    fn llama_cpp_factors(
        theta: f64,
        dim: usize,
        factor: f64,
        low: f64,
        high: f64,
        old: f64,
    ) -> Vec<f64> {
        (0..dim / 2)
            .map(|k| {
                let f = 1.0 / theta.powf((2 * k) as f64 / dim as f64);
                let wavelen = 2.0 * std::f64::consts::PI / f;
                if wavelen < old / high {
                    1.0
                } else if wavelen > old / low {
                    factor
                } else {
                    let smooth = (old / wavelen - low) / (high - low);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                }
            })
            .map(|r| r as f32 as f64)
            .collect()
    }

    fn llama3_rule(theta: f64, dim: usize, p: &serde_json::Value) -> Vec<f64> {
        let get = |k: &str| p[k].as_f64().unwrap();
        let (factor, low, high, old) = (
            get("factor"),
            get("low_freq_factor"),
            get("high_freq_factor"),
            get("original_max_position_embeddings"),
        );
        llama_cpp_factors(theta, dim, factor, low, high, old)
    }

    #[test]
    fn llama_3_1_factors_are_recovered() {
        // Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4, old 8192
        let factors = llama_cpp_factors(500000.0, 128, 8.0, 1.0, 4.0, 8192.0);
        let r = llama3_from_freq_factors(500000.0, 128, &factors, 8192.0).unwrap();
        let p = r.params.unwrap();
        assert!(
            (p["low_freq_factor"].as_f64().unwrap() - 1.0).abs() < 1e-4,
            "{p}"
        );
        assert!(
            (p["high_freq_factor"].as_f64().unwrap() - 4.0).abs() < 1e-4,
            "{p}"
        );
        for (a, b) in llama3_rule(500000.0, 128, &p).iter().zip(&factors) {
            assert!((a - b).abs() <= 1e-6 * b, "{a} vs {b}");
        }
    }

    #[test]
    fn one_or_no_smooth_frequency_still_resolves() {
        // head_dim 8, theta 1e4: frequencies 1, 0.1, 0.01, 0.001; old 64 puts 0.1 in the
        // smooth band (wavelength 62.8 in [16, 64]) and 0.01, 0.001 below it
        let factors = llama_cpp_factors(10000.0, 8, 8.0, 1.0, 4.0, 64.0);
        let p = llama3_from_freq_factors(10000.0, 8, &factors, 64.0)
            .unwrap()
            .params
            .unwrap();
        for (a, b) in llama3_rule(10000.0, 8, &p).iter().zip(&factors) {
            assert!((a - b).abs() <= 1e-6 * b, "{a} vs {b}");
        }
        // no smooth band: [1, 1, 8, 8]
        let factors = [1.0, 1.0, 8.0, 8.0];
        let p = llama3_from_freq_factors(10000.0, 8, &factors, 64.0)
            .unwrap()
            .params
            .unwrap();
        assert_eq!(llama3_rule(10000.0, 8, &p), factors);
        // all ones: no scaling
        assert!(llama3_from_freq_factors(10000.0, 8, &[1.0; 4], 64.0)
            .unwrap()
            .params
            .is_none());
    }

    #[test]
    fn factors_no_llama3_rule_gives_are_refused() {
        // scaled above an unscaled frequency
        assert!(llama3_from_freq_factors(10000.0, 8, &[8.0, 1.0, 8.0, 8.0], 64.0).is_none());
        // shrinking
        assert!(llama3_from_freq_factors(10000.0, 8, &[0.5, 1.0, 1.0, 1.0], 64.0).is_none());
    }
}
