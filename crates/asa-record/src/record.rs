//! run.json as types: [`RunRecord`] is what a run (`analyze`, a metric command, `merge`,
//! `demo`, Python's `Result.write()`) writes, and what `figures`, `merge` and the Python
//! package read back with serde, never by string keys. Unknown keys are ignored and missing
//! ones take their defaults, so a run.json of an older version still reads. Written through
//! [`RunRecord::to_json`]: keys in alphabetical order at every level, as run.json has always
//! had them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::capture_record::CaptureRecord;
use crate::probe_kind::ProbeKind;
use crate::shard::Shard;
use asa_core::error::{Error, Result};
use asa_core::run_facts::{HostCopy, LayerKind, LayerTiming};
use asa_metrics::Metric;

/// run.json.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    /// The command that wrote it (`analyze`, `entropy`, `merge`, `python analyze`, ...).
    pub command: String,
    pub asa_analyze_version: String,
    pub candle_version: String,
    /// The device the forward passes ran on (`cpu`, `cuda:0`).
    pub device: String,
    /// The analysis dtype (`f32`, `bf16`).
    pub dtype: String,
    pub metrics: BTreeSet<Metric>,
    /// The run's options as given (`RunOptions`, and the CLI's `format`): a record for the
    /// reader, never read back as options.
    pub options: Value,
    pub models: Vec<ModelRecord>,
    /// The steps of the training series analysed, per model.
    pub series: Vec<SeriesStep>,
    /// Wall-clock seconds of the whole command.
    pub seconds: f64,
    /// The shard of a partial result (`--shard K/N`); none for a whole run or a merge.
    pub shard: Option<Shard>,
    /// A partial result's own description (`analyze --shard`, `merge --partial`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialInfo>,
    /// `--profile`: calls, host and total seconds by phase (null without it).
    pub profile: Option<BTreeMap<String, ProfilePhase>>,
    /// A merge: the shards merged and the run's fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergeRecord>,
    /// A merge: the partial folders read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_seconds: Option<f64>,
}

/// One model of a run: what was analysed and how.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelRecord {
    /// The model's label (the tables' `model` column).
    pub model: String,
    pub path: String,
    pub architecture: String,
    pub variant: String,
    /// How the variant was found (config.json, the weights, `--variant`).
    pub variant_source: String,
    /// Variant weights the analysis does not use, said in a line.
    pub unused_weights: Option<String>,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The corpus and its windows, in a line.
    pub corpus: String,
    /// GGUF tensor types dequantized on load, with their counts.
    pub dequantized_from: Option<BTreeMap<String, usize>>,
    /// Tokens per window.
    pub seq_len: usize,
    /// N in Affine-Scaled Attention's beta (the window length).
    pub beta_length_n: usize,
    /// Queries per attention block.
    pub block_size: usize,
    /// Windows per forward pass.
    pub batch_size: usize,
    /// 1-based.
    pub heatmap_layer: usize,
    pub profile_query: usize,
    /// What each decoder layer is (mixer; for attention the keys a query sees and RoPE or
    /// NoPE).
    pub layer_kinds: Vec<LayerKind>,
    /// Kernel name -> the 0-based layers it computed.
    pub kernels: BTreeMap<String, Vec<usize>>,
    pub schedule: ScheduleRecord,
    pub first_nonfinite: NonFiniteRecord,
    pub peak_rss_bytes: Option<u64>,
    pub seconds: f64,
    pub tokens_per_second: f64,
    /// Windows merged into this model's tables (a merge only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<u64>,
    /// A model in memory whose tensors were on a device: the copy to the host, and its cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_copy: Option<HostCopy>,
    /// The built-in probe the windows were (`--probe`), with what rebuilds them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeRecord>,
    /// A model captured through its own forward pass (`asa.capture`): its class, the
    /// transformers version and each attention module.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureRecord>,
}

/// A built-in probe's windows: which probe, each copy's length L and the seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub probe: ProbeKind,
    /// L: each window is BOS, L random ids, the same L ids again (2L + 1 tokens).
    pub copy_len: usize,
    /// `--seed` of the ids.
    pub seed: u64,
}

/// The memory schedule a model ran under and why, with each streamed layer's times.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ScheduleRecord {
    /// `in-memory` or `layer-major (streamed)`.
    pub taken: String,
    /// Streamed because `--stream-layers` asked.
    pub forced: bool,
    pub in_memory_weight_bytes: u64,
    pub streamed_layer_bytes: u64,
    pub memory_budget_bytes: u64,
    pub residual_bytes: u64,
    /// Where the residual stream lives between layers: `memory` or `scratch file`.
    pub residuals: String,
    pub layers: Vec<LayerTiming>,
}

/// Where NaN or an infinity first entered a model's run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NonFiniteRecord {
    /// The first non-finite weight read (`--allow-nonfinite`).
    pub weight: Option<String>,
    /// The first non-finite activation.
    pub activation: Option<ActivationAt>,
}

/// An activation by layer (1-based; none for the embedding and the final norm) and hook.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ActivationAt {
    pub layer: Option<usize>,
    pub hook: String,
}

/// A step of a training series.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SeriesStep {
    pub model: String,
    pub step: u64,
}

/// One `--profile` phase.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ProfilePhase {
    pub calls: u64,
    pub host_s: f64,
    pub total_s: f64,
}

/// What a merge merged.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MergeRecord {
    pub shards: usize,
    pub fingerprint: Value,
}

impl RunRecord {
    /// run.json's text: pretty JSON, keys in alphabetical order at every level.
    pub fn to_json(&self) -> Result<String> {
        let value =
            serde_json::to_value(self).map_err(|e| Error::failed("cannot encode run.json", e))?;
        serde_json::to_string_pretty(&value).map_err(|e| Error::failed("cannot encode run.json", e))
    }

    /// The record in `text`, read from `file`.
    pub fn parse(text: &str, file: &Path) -> Result<RunRecord> {
        serde_json::from_str(text).map_err(|e| Error::invalid(file, "invalid run.json", e))
    }
}

/// What a shard's partial says of itself: its run.json's `partial` block, and (without
/// `states_sha256`) the identity in every row of its `partial.parquet`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PartialInfo {
    /// Shards covered (one for a shard, more for a merge of some), ascending.
    pub shards: Vec<usize>,
    pub count: usize,
    /// Everything that must agree between partials of one run.
    pub fingerprint: Value,
    /// SHA-256 of `partial.parquet` (run.json only; absent from partials written before
    /// asa-analyze recorded it, which `merge` refuses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states_sha256: Option<String>,
}

impl PartialInfo {
    /// The identity written into `partial.parquet`: this block without the states' hash.
    pub fn identity(&self) -> PartialInfo {
        PartialInfo {
            states_sha256: None,
            ..self.clone()
        }
    }
}
