//! A shard's partial result and `merge` (SPEC section 8). A partial folder holds
//! `partial.parquet` (one row per model: its label, the partial's identity — run
//! fingerprint, shards of how many — and the exact state of every metric accumulator, with
//! what finishing needs and the windows it covers, as MessagePack bytes), `run.json` (the
//! same identity and the SHA-256 of `partial.parquet`) and `partial.complete`, written last.
//! Merging reads the partials' run.json first (refusing partials of other runs, missing or
//! doubled shards, unfinished ones), then their states one partial at a time, each checked
//! against its run.json and the others' ([`super::partial_checks`]), so memory stays that of
//! one partial whatever their number; a merge of some shards is a partial itself (a tree of
//! merges).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::fingerprint::{sha256_file, windows_sha256};
use super::partial_checks::{check_info, check_partials, check_states, Coverage};
use super::record::{MergeRecord, ModelRecord, PartialInfo, RunRecord};
use super::run::{ModelResult, RunOutput};
use super::shard::Shard;
use asa_core::error::{Error, Result};
use asa_metrics::qk_mean::QkResult;
use asa_metrics::{Metric, MetricProbe, ProbeState, VariantTraits};
use asa_tables::{read_table, write_table, Column, Format, OutputDir, Table};

/// The states' table in a partial folder.
pub const STATES: &str = "partial.parquet";
/// Written last: the partial is whole.
pub const MARKER: &str = "partial.complete";

/// One model's part of a shard: everything its metrics need to be finished without the
/// checkpoint.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PartialModel {
    pub label: String,
    pub probe: ProbeState,
    /// The stored moving average of alpha (Affine-Scaled variants).
    pub alpha_ma: Option<Vec<Vec<f64>>>,
    pub traits: VariantTraits,
    /// run.json's record of the model (from the shard that analysed its first windows).
    pub record: String,
    /// Windows analysed by the shards merged so far, of `total`.
    pub windows: u64,
    pub total: u64,
    /// The model's part of the run fingerprint ([`super::fingerprint::model_fingerprint`]).
    pub fingerprint: Value,
    /// The step of a training series this checkpoint is (its QK^T point).
    pub step: Option<u64>,
    /// Its metrics are the model's tables (false: a series step giving only its QK^T point).
    pub model: bool,
    /// Its place among the run's checkpoints.
    pub order: usize,
    /// The windows the state holds: one range per shard merged into it, in shard order.
    pub covers: Vec<Covered>,
    /// The first window's tokens as text (the `tokens` table), from the shard holding it.
    #[serde(default)]
    pub tokens: Vec<(u32, String)>,
}

/// The windows of one shard that a state holds: `start..end` of the model's windows and
/// the SHA-256 of their token ids.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Covered {
    pub shard: usize,
    pub start: u64,
    pub end: u64,
    pub sha256: String,
}

impl Covered {
    /// The windows `shard` analyses of `windows` (every window of the model).
    pub fn of(shard: &Shard, windows: &[Vec<u32>]) -> Covered {
        let c = Covered::range(shard, windows.len());
        Covered {
            sha256: windows_sha256(&windows[c.start as usize..c.end as usize]),
            ..c
        }
    }

    /// The range `shard` analyses of `total` windows, with no hash.
    pub fn range(shard: &Shard, total: usize) -> Covered {
        let range = shard.units(total);
        Covered {
            shard: shard.index,
            start: range.start as u64,
            end: range.end as u64,
            sha256: String::new(),
        }
    }
}

/// Stages a partial result in `out`: the states' table (each row with `info`'s identity),
/// `record` (run.json, with `info` and the table's SHA-256 as its `partial` block) and,
/// last, the completion marker.
pub fn stage_partial(
    out: &mut OutputDir,
    models: &[PartialModel],
    info: &PartialInfo,
    mut record: RunRecord,
) -> Result<()> {
    let states = models
        .iter()
        .map(|m| {
            rmp_serde::to_vec(m)
                .map(Some)
                .map_err(|e| Error::failed("saving a partial result", e))
        })
        .collect::<Result<Vec<_>>>()?;
    let identity = serde_json::to_string(&info.identity())
        .map_err(|e| Error::failed("saving a partial result", e))?;
    let table = Table::new(
        "partial",
        vec![
            (
                "model",
                Column::Str(models.iter().map(|m| Some(m.label.clone())).collect()),
            ),
            (
                "identity",
                Column::Str(models.iter().map(|_| Some(identity.clone())).collect()),
            ),
            ("state", Column::Bytes(states)),
        ],
    );
    let path = out.staged_path(STATES)?;
    write_table(&table, &path, Format::Parquet)?;
    record.partial = Some(PartialInfo {
        states_sha256: Some(sha256_file(&path, u64::MAX)?),
        ..info.identity()
    });
    out.write_bytes("run.json", record.to_json()?.as_bytes())?;
    out.write_bytes(MARKER, b"complete\n")
}

/// A partial folder as its run.json describes it (its states are read when merged).
#[derive(Debug, Clone)]
pub struct Partial {
    pub dir: PathBuf,
    pub info: PartialInfo,
    pub record: RunRecord,
}

/// Opens the partial in `dir`: finished (the marker is there), with a run.json whose
/// `partial` block is whole and within its own bounds ([`check_info`]).
pub fn open_partial(dir: &Path) -> Result<Partial> {
    let run_json = dir.join("run.json");
    if !dir.join(MARKER).is_file() {
        let what = match dir.join(STATES).exists() || run_json.exists() {
            true => "an unfinished partial result (no partial.complete: the shard did not finish)",
            false => {
                "not a partial result (no partial.complete; run `analyze --shard K/N --out` first)"
            }
        };
        return Err(Error::input(dir, what));
    }
    let text = asa_core::input::read_text(&run_json, asa_core::input::JSON_RECORD)?;
    let record = RunRecord::parse(&text, &run_json)?;
    let info = record
        .partial
        .clone()
        .ok_or_else(|| Error::input(&run_json, "run.json has no valid `partial` block"))?;
    check_info(&run_json, &info)?;
    Ok(Partial {
        dir: dir.to_path_buf(),
        info,
        record,
    })
}

/// The models' states of `partial`, after its `partial.parquet` is found to be the file its
/// run.json records and to say of itself what run.json says.
fn read_states(partial: &Partial) -> Result<Vec<PartialModel>> {
    let path = partial.dir.join(STATES);
    let sha256 = sha256_file(&path, u64::MAX)?;
    if partial.info.states_sha256.as_deref() != Some(sha256.as_str()) {
        return Err(Error::input(
            &path,
            "not the partial.parquet its run.json records (SHA-256 differs): the folder's files come from different shards or runs; re-run the shard",
        ));
    }
    let table = read_table(&path)?;
    let (Some(Column::Str(identities)), Some(Column::Bytes(states))) =
        (table.column("identity"), table.column("state"))
    else {
        return Err(Error::input(
            &path,
            "no `identity` column of text and `state` column of bytes",
        ));
    };
    let models = states
        .iter()
        .map(|s| {
            let bytes = s
                .as_deref()
                .ok_or_else(|| Error::input(&path, "a model's state is missing"))?;
            rmp_serde::from_slice(bytes)
                .map_err(|e| Error::invalid(&path, "cannot read a model's saved state", e))
        })
        .collect::<Result<Vec<PartialModel>>>()?;
    check_states(&path, &partial.info, identities, &models)?;
    Ok(models)
}

/// A merge of partials: each model's merged state, and what the merged partials cover.
pub struct Merged {
    pub models: Vec<PartialModel>,
    pub info: PartialInfo,
    /// run.json of the first partial (command, options, models' records).
    pub record: RunRecord,
}

/// Merges the partials in `dirs` (every shard when `complete`), reading one partial's
/// states at a time.
pub fn merge_partials(dirs: &[PathBuf], complete: bool) -> Result<Merged> {
    let partials = dirs
        .iter()
        .map(|d| open_partial(d))
        .collect::<Result<Vec<_>>>()?;
    let (count, shards) = check_partials(&partials, complete)?;
    let mut merged: Vec<(PartialModel, MetricProbe)> = Vec::new();
    let mut coverage = Coverage::new(count);
    for p in &partials {
        let path = p.dir.join(STATES);
        let models = read_states(p)?;
        if !merged.is_empty() && models.len() != merged.len() {
            return Err(Error::input(
                &path,
                format!(
                    "{} models where the other partials have {}",
                    models.len(),
                    merged.len()
                ),
            ));
        }
        for (k, model) in models.into_iter().enumerate() {
            coverage.add(k, &model, &p.dir)?;
            merge_model(&mut merged, k, model, &path)?;
        }
    }
    coverage.check(complete)?;
    let models = merged
        .into_iter()
        .map(|(mut model, probe)| {
            model.probe = probe.state()?;
            model.covers.sort_by_key(|c| c.shard);
            Ok(model)
        })
        .collect::<Result<Vec<_>>>()?;
    let first = &partials[0];
    Ok(Merged {
        models,
        info: PartialInfo {
            shards,
            count,
            fingerprint: first.info.fingerprint.clone(),
            states_sha256: None,
        },
        record: first.record.clone(),
    })
}

/// Merges `model` (the `k`-th of the partial whose states are at `path`) into `merged`.
fn merge_model(
    merged: &mut Vec<(PartialModel, MetricProbe)>,
    k: usize,
    model: PartialModel,
    path: &Path,
) -> Result<()> {
    let probe = MetricProbe::restore(model.probe.clone())
        .map_err(|e| Error::input(path, format!("model {}: {e}", model.label)))?;
    match merged.get_mut(k) {
        None => merged.push((model, probe)),
        Some((into, acc)) => {
            if into.label != model.label {
                return Err(Error::input(
                    path,
                    format!(
                        "model {} where the other partials have {}",
                        model.label, into.label
                    ),
                ));
            }
            acc.merge(&probe);
            into.windows += model.windows;
            into.covers.extend(model.covers);
            if into.tokens.is_empty() {
                into.tokens = model.tokens;
            }
        }
    }
    Ok(())
}

impl Merged {
    /// The merged run's run.json, named `command`: the first partial's record with no shard
    /// or partial block, the merged models' records (`output`'s) and what was merged.
    pub fn run_record(&self, output: &RunOutput, command: &str) -> RunRecord {
        RunRecord {
            command: command.to_string(),
            shard: None,
            partial: None,
            merged: Some(MergeRecord {
                shards: self.info.count,
                fingerprint: self.info.fingerprint.clone(),
            }),
            models: output.models.iter().map(|m| m.record.clone()).collect(),
            ..self.record.clone()
        }
    }

    /// The run's results: each model's metrics finished from its merged state.
    pub fn output(&self) -> Result<RunOutput> {
        let qk_asked = self.info.fingerprint["options"]["metrics"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m == Metric::QK_MEAN.name()));
        let (mut models, mut series) = (Vec::new(), Vec::new());
        for m in &self.models {
            let probe = MetricProbe::restore(m.probe.clone())
                .map_err(|e| Error::failed(format!("model {}", m.label), e))?;
            let mut metrics = probe.finish(m.alpha_ma.clone(), m.traits);
            if let Some(step) = m.step {
                // a series step: its QK^T point; the last step's other metrics are the model's
                let qk = metrics.get::<QkResult>(Metric::QK_MEAN).ok_or_else(|| {
                    Error::usage(format!("{} step {step}: no QK^T state", m.label))
                })?;
                series.push((m.label.clone(), step, qk.mean, qk.abs_mean));
                if !qk_asked {
                    metrics.remove(Metric::QK_MEAN);
                }
            }
            if !m.model {
                continue;
            }
            let mut record: ModelRecord = serde_json::from_str(&m.record).unwrap_or_default();
            record.windows = Some(m.windows);
            models.push(ModelResult {
                label: m.label.clone(),
                metrics,
                record,
                partial: None,
                tokens: m.tokens.clone(),
            });
        }
        Ok(RunOutput {
            models,
            series,
            device: self.record.device.clone(),
            dtype: self.record.dtype.clone(),
            seconds: 0.0,
            shard: None,
            fingerprint: Some(self.info.fingerprint.clone()),
            partials: Vec::new(),
        })
    }
}

/// The shard and fingerprint block a shard's run.json carries.
pub fn shard_info(shard: &Shard, fingerprint: Value) -> PartialInfo {
    PartialInfo {
        shards: vec![shard.index],
        count: shard.count,
        fingerprint,
        states_sha256: None,
    }
}
