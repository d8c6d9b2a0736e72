//! A GGUF file's hyperparameters (`{arch}.block_count`, `{arch}.attention.head_count`, ...)
//! as a config.json mirror ([`RawConfig`](super::config::RawConfig) JSON), so that GGUF and
//! Hugging Face checkpoints resolve through the same code and the same checks.

use std::fs::File;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use serde_json::json;

use super::gguf_rope::{llama3_from_freq_factors, read_factors, Recovered};
use super::gguf_rules::GgufRules;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

/// What the config needs from the tensor table (under HF names).
pub(crate) struct TensorFacts {
    /// Rows of `model.embed_tokens.weight`.
    pub vocab: usize,
    /// `output.weight` exists (else the embeddings are tied).
    pub has_output: bool,
    /// `blk.0.attn_q.bias` exists.
    pub has_q_bias: bool,
    /// `blk.0.attn_qkv.bias` exists (GPT-NeoX's `attention_bias`).
    pub has_qkv_bias: bool,
    /// Every tensor's HF name (a family's rules ask for the ones they need).
    pub names: std::collections::BTreeSet<String>,
}

impl TensorFacts {
    /// Whether any tensor's HF name ends with `suffix` (`mamba.conv1d.bias`).
    pub(crate) fn any_ends_with(&self, suffix: &str) -> bool {
        self.names.iter().any(|n| n.ends_with(suffix))
    }
}

/// Typed access to `{arch}.*` metadata, errors naming the file and the key; the family
/// reading the file (its `model_type`), and its GGUF rules.
pub(crate) struct Meta<'a> {
    pub content: &'a Content,
    pub path: &'a Path,
    pub model_type: &'static str,
    pub rules: &'static GgufRules,
}

impl Meta<'_> {
    /// llama.cpp's `general.architecture`, the metadata keys' prefix.
    pub(crate) fn arch(&self) -> &'static str {
        self.rules.arch
    }

    pub(crate) fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch())
    }

    pub(crate) fn opt_usize_key(&self, key: &str) -> Result<Option<usize>> {
        let full = self.key(key);
        match self.content.metadata.get(&full) {
            None => Ok(None),
            Some(v) => value_as_u64(v).map(|v| Some(v as usize)).ok_or_else(|| {
                let problem = CheckpointProblem::wrong_type(&full, "one integer", short(v));
                Error::checkpoint_problem(self.path, problem)
            }),
        }
    }

    /// A per-layer integer key (llama.cpp writes some as one value per block, e.g. LFM2's
    /// `attention.head_count_kv`, 0 on its convolution layers): an array of `block_count`
    /// values, or one value for every layer; `None` when absent.
    pub(crate) fn opt_per_layer_key(&self, key: &str) -> Result<Option<Vec<usize>>> {
        let full = self.key(key);
        let Some(Value::Array(items)) = self.content.metadata.get(&full) else {
            let layers = self.usize_key("block_count")?;
            return Ok(self.opt_usize_key(key)?.map(|v| vec![v; layers]));
        };
        let layers = self.usize_key("block_count")?;
        if items.len() != layers {
            let detail = format!(
                "metadata {full} has {} values for {layers} layers",
                items.len()
            );
            let problem =
                CheckpointProblem::inconsistent(&[&full, &self.key("block_count")], detail);
            return Err(Error::checkpoint_problem(self.path, problem));
        }
        let values: Option<Vec<usize>> = items
            .iter()
            .map(|v| value_as_u64(v).map(|v| v as usize))
            .collect();
        values.map(Some).ok_or_else(|| {
            let bad = items.iter().find(|v| value_as_u64(v).is_none());
            let got = bad.map_or_else(String::new, short);
            let problem = CheckpointProblem::wrong_type(&full, "integers", got);
            Error::checkpoint_problem(self.path, problem)
        })
    }

    /// A flag per layer (Qwen3-Next's `attention.recurrent_layers`, a sliding-window
    /// pattern): an array of `block_count` booleans, as llama.cpp's converter writes them, or
    /// of integers 0 and 1; `None` when absent. Any other value is refused naming the key.
    pub(crate) fn opt_layer_flags(&self, key: &str) -> Result<Option<Vec<bool>>> {
        let full = self.key(key);
        let Some(value) = self.content.metadata.get(&full) else {
            return Ok(None);
        };
        let layers = self.usize_key("block_count")?;
        let items = match value {
            Value::Array(items) if items.len() == layers => items,
            other => {
                let expected = format!("a flag for each of the {layers} layers");
                let problem = CheckpointProblem::wrong_type(&full, expected, short(other));
                return Err(Error::checkpoint_problem(self.path, problem));
            }
        };
        let flag = |v: &Value| match v {
            Value::Bool(b) => Some(*b),
            other => match value_as_u64(other) {
                Some(0) => Some(false),
                Some(1) => Some(true),
                _ => None,
            },
        };
        items
            .iter()
            .map(|v| {
                flag(v).ok_or_else(|| {
                    let expected = "booleans (or 0 and 1)";
                    let problem = CheckpointProblem::wrong_type(&full, expected, short(v));
                    Error::checkpoint_problem(self.path, problem)
                })
            })
            .collect::<Result<Vec<bool>>>()
            .map(Some)
    }

    /// The largest value of a per-layer key ([`Meta::opt_per_layer_key`]): the head count
    /// of the attention layers where the other layers have none.
    pub(crate) fn opt_max_per_layer_key(&self, key: &str) -> Result<Option<usize>> {
        // one value is every layer's, however many layers the file says (0 included: the
        // resolve refuses that count, not this one)
        if let Some(v) = self.content.metadata.get(&self.key(key)) {
            if !matches!(v, Value::Array(_)) {
                return self.opt_usize_key(key);
            }
        }
        Ok(self
            .opt_per_layer_key(key)?
            .map(|values| values.into_iter().max().unwrap_or(0)))
    }

    /// `block_count` against the tensor table, before anything is sized from it: every
    /// block has tensors (`blk.N.*`), so a count past the last stored block is a header's
    /// number no model has, refused naming the key (a count of 2^28 would otherwise size
    /// per-layer tables of gigabytes before any tensor is looked at).
    pub(crate) fn check_block_count(&self) -> Result<()> {
        let blocks = self.usize_key("block_count")?;
        let stored = self
            .content
            .tensor_infos
            .keys()
            .filter_map(|name| {
                name.strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .max()
            .map_or(0, |last| last + 1);
        if blocks > stored {
            let held = match stored {
                0 => "no block".to_string(),
                n => format!("{n} (blk.0 .. blk.{})", n - 1),
            };
            let key = self.key("block_count");
            let detail = format!("metadata {key} {blocks} but the tensor table holds {held}");
            let problem = CheckpointProblem::inconsistent(&[&key], detail);
            return Err(Error::checkpoint_problem(self.path, problem));
        }
        Ok(())
    }

    /// The sliding (or chunked) layers where the file names them, as llama.cpp's
    /// `load_swa_pattern` reads `attention.sliding_window_pattern`: a flag per layer (true:
    /// sliding), or a period n whose last layer is full (layer l sliding when l mod n < n -
    /// 1; 0: every layer); `None` when absent (the family's default pattern).
    pub(crate) fn opt_swa_layers(&self) -> Result<Option<Vec<bool>>> {
        let key = self.key("attention.sliding_window_pattern");
        let layers = self.trunk_layers()?;
        match self.content.metadata.get(&key) {
            None => Ok(None),
            Some(Value::Array(_)) => {
                let flags = self.opt_layer_flags("attention.sliding_window_pattern")?;
                Ok(flags.map(|f| f[..layers].to_vec()))
            }
            Some(_) => {
                let n = self.usize_key("attention.sliding_window_pattern")?;
                Ok(Some(swa_period(n, layers)))
            }
        }
    }

    /// The decoder layers the model runs: `block_count` less the multi-token-prediction
    /// blocks llama.cpp appends (`nextn_predict_layers`, GLM-4.5's), which a forward skips.
    pub(crate) fn trunk_layers(&self) -> Result<usize> {
        let blocks = self.usize_key("block_count")?;
        let nextn = self.opt_usize_key("nextn_predict_layers")?.unwrap_or(0);
        // no block at all is the resolve's to refuse (num_hidden_layers)
        if nextn > 0 && nextn >= blocks {
            let (key, count) = (self.key("nextn_predict_layers"), self.key("block_count"));
            let detail =
                format!("{key} {nextn} leaves none of the {blocks} blocks ({count}) to run");
            let problem = CheckpointProblem::inconsistent(&[&key, &count], detail);
            return Err(Error::checkpoint_problem(self.path, problem));
        }
        Ok(blocks - nextn)
    }

    pub(crate) fn usize_key(&self, key: &str) -> Result<usize> {
        self.opt_usize_key(key)?.ok_or_else(|| {
            Error::checkpoint_problem(self.path, CheckpointProblem::missing_key(self.key(key)))
        })
    }

    pub(crate) fn opt_f64_key(&self, key: &str) -> Result<Option<f64>> {
        let full = self.key(key);
        let value = match self.content.metadata.get(&full) {
            None => return Ok(None),
            // the decimal the converter was given (0.45, not 0.449999988...): the shortest
            // one that rounds to this f32
            Some(Value::F32(v)) => v.to_string().parse().unwrap_or(f64::from(*v)),
            Some(Value::F64(v)) => *v,
            Some(v) => value_as_u64(v).map(|v| v as f64).ok_or_else(|| {
                let problem = CheckpointProblem::wrong_type(&full, "a number", short(v));
                Error::checkpoint_problem(self.path, problem)
            })?,
        };
        // a present key is read as it is, never replaced by the default: no setting of a
        // model is NaN or infinite
        if !value.is_finite() {
            let problem = CheckpointProblem::out_of_range(full, value, "a finite number");
            return Err(Error::checkpoint_problem(self.path, problem));
        }
        Ok(Some(value))
    }
}

/// llama.cpp's `set_swa_pattern` of period `n` over `layers` layers: layer l sliding when
/// l mod n < n - 1 (the last of each period full; 0: every layer sliding).
pub(crate) fn swa_period(n: usize, layers: usize) -> Vec<bool> {
    (0..layers).map(|l| n == 0 || l % n < n - 1).collect()
}

/// Refuses what the GGUF loader does not implement: experts in a family that reads none,
/// RoPE scaling types.
fn refuse_unimplemented(meta: &Meta) -> Result<()> {
    let path = meta.path;
    if let Some(n) = meta.opt_usize_key("expert_count")? {
        if n > 0 && meta.rules.assembled.is_empty() {
            let problem = CheckpointProblem::unsupported(
                meta.key("expert_count"),
                n,
                format!("0: {} reads no experts", meta.arch()),
            );
            return Err(Error::checkpoint_problem(path, problem));
        }
    }
    if let Some(kind) = metadata_str(meta.content, &meta.key("rope.scaling.type")) {
        if !matches!(kind, "none" | "linear" | "yarn") {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unsupported(
                    meta.key("rope.scaling.type"),
                    kind,
                    "none, linear, yarn, llama3 rope_freqs",
                ),
            ));
        }
    }
    // YaRN's extrapolation mix and attention factor: transformers' and llama.cpp's defaults
    // agree; set ones are not read here
    for key in [
        "rope.scaling.yarn_ext_factor",
        "rope.scaling.yarn_attn_factor",
    ] {
        if meta.content.metadata.contains_key(&meta.key(key)) {
            let key = meta.key(key);
            let detail = format!(
                "{key} is not implemented (YaRN with its default mix and attention factor is)"
            );
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::unimplemented(&[&key], detail),
            ));
        }
    }
    Ok(())
}

/// `rope_parameters` for config.json: default RoPE at the dims' `theta`, or the Llama-3
/// scaling that the file's `rope_freqs.weight` factors encode (with what the recovery found).
fn rope_parameters(
    meta: &Meta,
    file: &mut File,
    dims: &Dims,
) -> Result<(serde_json::Value, Option<Recovered>)> {
    let (theta, rot_dim, context) = (dims.theta, dims.rot_dim, dims.context);
    let path = meta.path;
    let mut rope = json!({"rope_type": "default", "rope_theta": theta});
    let kind = metadata_str(meta.content, &meta.key("rope.scaling.type"));
    if let Some(kind @ ("linear" | "yarn")) = kind {
        let factor = meta.opt_f64_key("rope.scaling.factor")?.ok_or_else(|| {
            let problem = CheckpointProblem::MissingKey {
                key: meta.key("rope.scaling.factor"),
                detail: format!("{kind} rope scaling needs it"),
            };
            Error::checkpoint_problem(path, problem)
        })?;
        rope = json!({"rope_type": kind, "factor": factor, "rope_theta": theta});
        if kind == "yarn" {
            let original = meta
                .opt_usize_key("rope.scaling.original_context_length")?
                .unwrap_or(context);
            rope["original_max_position_embeddings"] = json!(original);
            for (key, name) in [
                ("yarn_beta_fast", "beta_fast"),
                ("yarn_beta_slow", "beta_slow"),
            ] {
                if let Some(v) = meta.opt_f64_key(&format!("rope.scaling.{key}"))? {
                    rope[name] = json!(v);
                }
            }
        }
    }
    let mut recovered = None;
    // unsound dims are the resolve's to refuse (rope_theta, partial_rotary_factor): no
    // recovery from them
    let sound = theta > 0.0 && rot_dim % 2 == 0 && rot_dim > 0 && rot_dim <= dims.head_dim;
    if let Some(info) = meta
        .content
        .tensor_infos
        .get("rope_freqs.weight")
        .filter(|_| sound)
    {
        let factors = read_factors(meta, file, info, rot_dim)?;
        let original = meta
            .opt_usize_key("rope.scaling.original_context_length")?
            .or(meta.rules.rope_freqs_original_context)
            .unwrap_or(context);
        match llama3_from_freq_factors(theta, rot_dim, &factors, original as f64) {
            Some(r) => {
                if let Some(params) = r.params.clone() {
                    rope = params;
                }
                recovered = Some(r);
            }
            None => return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::tensor_data(
                    "rope_freqs.weight",
                    "not a Llama-3 frequency scaling (the only per-frequency factors implemented)",
                ),
            )),
        }
    }
    Ok((rope, recovered))
}

/// The sizes and scalars the config is built from.
pub(crate) struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Dimensions rotated by RoPE.
    pub rot_dim: usize,
    pub theta: f64,
    pub context: usize,
    /// RMSNorm's epsilon, or LayerNorm's (GPT-2, GPT-NeoX).
    pub eps: f64,
}

/// The metadata as a config.json mirror, and the rope_freqs recovery when the file has them.
pub(crate) fn raw_config(
    meta: &Meta,
    file: &mut File,
    tensors: &TensorFacts,
    heads: usize,
    kv_heads: usize,
) -> Result<(serde_json::Value, Option<Recovered>)> {
    refuse_unimplemented(meta)?;
    // every value is checked once, on the resolved mirror (`gguf_keys` names the file's
    // keys in its refusals); only what JSON cannot carry is refused while reading
    let dims = read_dims(meta, heads, kv_heads)?;
    let (rope, recovered) = rope_parameters(meta, file, &dims)?;
    let mut raw = base_config(meta, tensors, &dims, rope)?;
    (meta.rules.config)(meta, tensors, &dims, &mut raw)?;
    Ok((raw, recovered))
}

/// Reads the sizes and scalars, with llama.cpp's defaults for the optional keys (head_dim
/// from `embedding_length / head_count`, which must divide).
fn read_dims(meta: &Meta, heads: usize, kv_heads: usize) -> Result<Dims> {
    let hidden = meta.usize_key("embedding_length")?;
    let head_dim = match meta.opt_usize_key("attention.key_length")? {
        Some(d) => d,
        None if heads > 0 && hidden % heads == 0 => hidden / heads,
        None => {
            let keys = [
                meta.key("embedding_length"),
                meta.key("attention.head_count"),
            ];
            let detail = format!(
                "{} {hidden} is not divisible by head_count {heads}",
                keys[0]
            );
            let problem = CheckpointProblem::inconsistent(&[&keys[0], &keys[1]], detail);
            return Err(Error::checkpoint_problem(meta.path, problem));
        }
    };
    let rot_dim = meta
        .opt_usize_key("rope.dimension_count")?
        .unwrap_or(head_dim);
    let theta = meta.opt_f64_key("rope.freq_base")?.unwrap_or(10000.0);
    let context = meta.opt_usize_key("context_length")?.unwrap_or(2048);
    let eps = match meta.opt_f64_key("attention.layer_norm_rms_epsilon")? {
        Some(eps) => eps,
        None => meta
            .opt_f64_key("attention.layer_norm_epsilon")?
            .unwrap_or(1e-5),
    };
    Ok(Dims {
        hidden,
        heads,
        kv_heads,
        head_dim,
        rot_dim,
        theta,
        context,
        eps,
    })
}

/// The config.json keys every architecture has, as for a Llama model (the family's rules
/// add and change keys: [`GgufRules::config`]).
fn base_config(
    meta: &Meta,
    tensors: &TensorFacts,
    d: &Dims,
    rope: serde_json::Value,
) -> Result<serde_json::Value> {
    let token = |key: &str| {
        meta.content
            .metadata
            .get(key)
            .and_then(value_as_u64)
            .map(|v| json!(v))
            .unwrap_or(serde_json::Value::Null)
    };
    Ok(json!({
        "model_type": meta.model_type,
        "hidden_size": d.hidden,
        "intermediate_size": meta.usize_key("feed_forward_length")?,
        "num_hidden_layers": meta.trunk_layers()?,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "vocab_size": tensors.vocab,
        "rms_norm_eps": d.eps,
        "max_position_embeddings": d.context,
        "tie_word_embeddings": !tensors.has_output,
        "attention_bias": false,
        // head_dim 0 is refused by the resolve before any rotary setting is read
        "partial_rotary_factor": (d.head_dim > 0).then(|| d.rot_dim as f64 / d.head_dim as f64),
        "rope_parameters": rope,
        "bos_token_id": token("tokenizer.ggml.bos_token_id"),
        "eos_token_id": token("tokenizer.ggml.eos_token_id"),
        "hidden_act": "silu",
        "sliding_window": meta.opt_usize_key("attention.sliding_window")?,
    }))
}

/// A string metadata value.
pub(crate) fn metadata_str<'a>(content: &'a Content, key: &str) -> Option<&'a str> {
    match content.metadata.get(key) {
        Some(Value::String(s)) => Some(s.as_str()),
        _ => None,
    }
}

/// A boolean metadata value.
pub(crate) fn metadata_bool(content: &Content, key: &str) -> Option<bool> {
    match content.metadata.get(key) {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

/// Any non-negative integer metadata value as u64.
pub(crate) fn value_as_u64(v: &Value) -> Option<u64> {
    match *v {
        Value::U8(x) => Some(u64::from(x)),
        Value::U16(x) => Some(u64::from(x)),
        Value::U32(x) => Some(u64::from(x)),
        Value::U64(x) => Some(x),
        Value::I8(x) => u64::try_from(x).ok(),
        Value::I16(x) => u64::try_from(x).ok(),
        Value::I32(x) => u64::try_from(x).ok(),
        Value::I64(x) => u64::try_from(x).ok(),
        _ => None,
    }
}

/// A metadata value for an error message, its GGUF type named: "u32 5", "`text`",
/// "an array of 3".
pub(crate) fn short(v: &Value) -> String {
    let (kind, value) = match v {
        Value::Array(items) => return format!("an array of {}", items.len()),
        Value::String(s) => return format!("`{s}`"),
        Value::U8(x) => ("u8", x.to_string()),
        Value::I8(x) => ("i8", x.to_string()),
        Value::U16(x) => ("u16", x.to_string()),
        Value::I16(x) => ("i16", x.to_string()),
        Value::U32(x) => ("u32", x.to_string()),
        Value::I32(x) => ("i32", x.to_string()),
        Value::U64(x) => ("u64", x.to_string()),
        Value::I64(x) => ("i64", x.to_string()),
        Value::F32(x) => ("f32", x.to_string()),
        Value::F64(x) => ("f64", x.to_string()),
        Value::Bool(x) => ("bool", x.to_string()),
    };
    format!("{kind} {value}")
}
