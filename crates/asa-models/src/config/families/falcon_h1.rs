//! Falcon-H1: attention and Mamba-2 side by side in every layer on the same normed input
//! (their outputs summed), the Llama layout under its names (`pre_ff_layernorm`,
//! `feed_forward`, `final_layernorm`), and muP multipliers on the embeddings, the
//! attention's input, keys and output, the Mamba's input, in_proj rows (`ssm_multipliers`)
//! and output, the MLP's gate and output, and the logits.
//!
//! llama.cpp's `falcon-h1` GGUF files (`convert_hf_to_gguf.py` FalconH1Model,
//! `src/models/falcon-h1.cpp`): every multiplier is multiplied into the weights by the
//! converter and none is written, so the file is read with every multiplier 1 (what
//! llama.cpp computes from it); Mamba-2 as Granite's ([`GGUF_MAMBA2_BLOCKS`]);
//! `pre_ff_layernorm` as `blk.N.ffn_norm` without `.weight`; no q/k permutation. Refused:
//! attention biases (the converter multiplied them by `attention_in_multiplier`, which the
//! checkpoint adds after its input scaling: the file's model is not the checkpoint's), and
//! a Mamba norm as for config.json.

use std::path::Path;

use serde::Deserialize;

use super::granitemoehybrid::{
    mamba2_gguf_keys, mamba2_shape, undo_mamba2, Mamba2Keys, GGUF_MAMBA2_BLOCKS, GGUF_MAMBA2_WHOLE,
};
use super::llama;
use crate::config::family::{Family, GgufRules};
use crate::config::raw::own_keys_readable;
use crate::config::RawConfig;
use crate::gguf_config::{Dims, Meta, TensorFacts};
use crate::mixers::Mixer;
use crate::multipliers::Multipliers;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::mixer::Mamba2Gate;

pub(crate) const FAMILY: Family = Family {
    name: "falcon_h1",
    keys,
    check,
    norm_eps,
    default_max_position_embeddings: 8192,
    mixers,
    multipliers,
    gguf: Some(&GGUF),
    weight_names: &[
        ("model.norm.{p}", "model.final_layernorm.{p}"),
        (
            "model.layers.{l}.post_attention_layernorm.{p}",
            "model.layers.{l}.pre_ff_layernorm.{p}",
        ),
        (
            "model.layers.{l}.mlp.gate_proj.{p}",
            "model.layers.{l}.feed_forward.gate_proj.{p}",
        ),
        (
            "model.layers.{l}.mlp.up_proj.{p}",
            "model.layers.{l}.feed_forward.up_proj.{p}",
        ),
        (
            "model.layers.{l}.mlp.down_proj.{p}",
            "model.layers.{l}.feed_forward.down_proj.{p}",
        ),
    ],
    ..llama::FAMILY
};

/// The keys only FalconH1Config has: the Mamba's optional norm, and the multipliers.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FalconH1Keys {
    mamba_rms_norm: Option<bool>,
    embedding_multiplier: Option<f64>,
    lm_head_multiplier: Option<f64>,
    attention_in_multiplier: Option<f64>,
    attention_out_multiplier: Option<f64>,
    key_multiplier: Option<f64>,
    ssm_in_multiplier: Option<f64>,
    ssm_out_multiplier: Option<f64>,
    ssm_multipliers: Option<Vec<f64>>,
    mlp_multipliers: Option<Vec<f64>>,
}

/// Its own keys and the Mamba-2 layers' ([`Mamba2Keys`]), each read as its struct.
fn keys(raw: &RawConfig, path: &Path) -> Result<()> {
    own_keys_readable::<FalconH1Keys>(raw, path)?;
    own_keys_readable::<Mamba2Keys>(raw, path)
}

/// FalconH1Config's `mamba_d_ssm` when absent.
const D_SSM: usize = 1024;

fn norm_eps(raw: &RawConfig) -> f64 {
    raw.rms_norm_eps.unwrap_or(1e-5)
}

/// Refuses Falcon-H1's optional Mamba norm (`mamba_rms_norm`: not implemented) and
/// multiplier lists of the wrong length.
fn check(raw: &RawConfig, path: &Path) -> Result<()> {
    let h: FalconH1Keys = raw.family_keys(path)?;
    if h.mamba_rms_norm == Some(true) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::unsupported(
                "mamba_rms_norm",
                true,
                "false: the Mamba's gated RMSNorm is not implemented for falcon_h1",
            ),
        ));
    }
    for (key, list, len) in [
        ("ssm_multipliers", &h.ssm_multipliers, 5),
        ("mlp_multipliers", &h.mlp_multipliers, 2),
    ] {
        if list.as_ref().is_some_and(|l| l.len() != len) {
            let got = list.as_ref().map_or(0, Vec::len);
            let problem = CheckpointProblem::wrong_type(
                key,
                format!("a list of {len} values"),
                format!("{got} values"),
            );
            return Err(Error::checkpoint_problem(path, problem));
        }
    }
    Ok(())
}

/// Attention beside a Mamba-2 mixer in every layer.
fn mixers(raw: &RawConfig, num_layers: usize, path: &Path) -> Result<Vec<Mixer>> {
    let shape = mamba2_shape(raw, Mamba2Gate::Only, Some(D_SSM), path)?;
    Ok(vec![Mixer::AttentionAndMamba2(shape); num_layers])
}

/// FalconH1Config's multipliers, 1 by default.
fn multipliers(raw: &RawConfig, path: &Path) -> Result<Multipliers> {
    let h: FalconH1Keys = raw.family_keys(path)?;
    let finite = |v: Option<f64>, key: &str| -> Result<Option<f64>> {
        let v = v.unwrap_or(1.0);
        match v.is_finite() {
            true => Ok(Some(v)),
            false => Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range(key, v, "a finite number"),
            )),
        }
    };
    let mlp = h.mlp_multipliers.clone().unwrap_or(vec![1.0, 1.0]);
    let ssm = h.ssm_multipliers.clone().unwrap_or(vec![1.0; 5]);
    if mlp.iter().chain(&ssm).any(|v| !v.is_finite()) {
        let (key, bad) = match mlp.iter().find(|v| !v.is_finite()) {
            Some(v) => ("mlp_multipliers", v),
            None => (
                "ssm_multipliers",
                ssm.iter().find(|v| !v.is_finite()).unwrap_or(&f64::NAN),
            ),
        };
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range(key, bad, "finite numbers"),
        ));
    }
    Ok(Multipliers {
        embedding: finite(h.embedding_multiplier, "embedding_multiplier")?,
        logits_factor: finite(h.lm_head_multiplier, "lm_head_multiplier")?,
        attention_in: finite(h.attention_in_multiplier, "attention_in_multiplier")?,
        attention_out: finite(h.attention_out_multiplier, "attention_out_multiplier")?,
        key: finite(h.key_multiplier, "key_multiplier")?,
        ssm_in: finite(h.ssm_in_multiplier, "ssm_in_multiplier")?,
        ssm_out: finite(h.ssm_out_multiplier, "ssm_out_multiplier")?,
        mlp_gate: mlp.first().copied(),
        mlp_down: mlp.get(1).copied(),
        ssm_rows: ssm.try_into().ok(),
        ..Multipliers::default()
    })
}

/// llama.cpp's `falcon-h1`.
const GGUF: GgufRules = GgufRules {
    blocks: &[GGUF_MAMBA2_BLOCKS, llama::GGUF_BLOCKS],
    whole: &[
        &[("ffn_norm", Some("post_attention_layernorm.weight"))],
        GGUF_MAMBA2_WHOLE,
    ],
    undo: undo_mamba2,
    config: gguf_config,
    ..llama::gguf_rules("falcon-h1")
};

/// The Mamba-2 sizes, the Mamba norm where the file has one (llama.cpp applies it after
/// the gate: refused by [`check`]), MLP biases where it has them; attention biases refused.
fn gguf_config(
    meta: &Meta,
    tensors: &TensorFacts,
    _: &Dims,
    raw: &mut serde_json::Value,
) -> Result<()> {
    if tensors.has_q_bias {
        return Err(Error::checkpoint_problem(
            meta.path,
            CheckpointProblem::unimplemented(
                &[],
                "attention biases in a falcon-h1 GGUF are not implemented: llama.cpp's converter multiplied them by attention_in_multiplier, so the checkpoint's biases cannot be recovered",
            ),
        ));
    }
    let norm = tensors.any_ends_with("mamba.norm.weight");
    raw["mamba_rms_norm"] = serde_json::json!(norm);
    raw["mamba_norm_before_gate"] = serde_json::json!(false);
    raw["mlp_bias"] = serde_json::json!(tensors.any_ends_with("mlp.gate_proj.bias"));
    raw["projectors_bias"] = serde_json::json!(false);
    mamba2_gguf_keys(meta, tensors, raw)
}
