//! A shard's partial result and `merge` (SPEC section 8). A partial folder holds
//! `partial.parquet` (one row per model: its label and the exact state of every metric
//! accumulator, with what finishing needs, as MessagePack bytes), `run.json` (the run
//! fingerprint and which shards of how many it covers) and `partial.complete`, written last.
//! Merging reads the partials' run.json first (refusing partials of other runs, missing or
//! doubled shards, unfinished ones), then their states one partial at a time, so memory
//! stays that of one partial whatever their number; a merge of some shards is a partial
//! itself (a tree of merges).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::record::{MergeRecord, ModelRecord, RunRecord};
use super::run::{ModelResult, RunOptions, RunOutput};
use super::shard::Shard;
use crate::error::{Error, Result};
use crate::export::{read_table, write_table, Column, Format, OutputDir, Table};
use crate::metrics::qk_mean::QkResult;
use crate::metrics::{Metric, MetricProbe, ProbeState, VariantTraits};

/// The states' table in a partial folder.
pub const STATES: &str = "partial.parquet";
/// Written last: the partial is whole.
pub const MARKER: &str = "partial.complete";
/// Bytes of each checkpoint file hashed for the fingerprint (headers and the start).
const HASHED_BYTES: u64 = 1 << 20;

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
    /// The model's part of the run fingerprint ([`model_fingerprint`]).
    pub fingerprint: Value,
    /// The step of a training series this checkpoint is (its QK^T point).
    pub step: Option<u64>,
    /// Its metrics are the model's tables (false: a series step giving only its QK^T point).
    pub model: bool,
    /// Its place among the run's checkpoints.
    pub order: usize,
}

/// What a shard's partial says of itself (its run.json's `partial` block).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PartialInfo {
    /// Shards covered (one for a shard, more for a merge of some).
    pub shards: Vec<usize>,
    pub count: usize,
    /// Everything that must agree between partials of one run.
    pub fingerprint: Value,
}

/// The fingerprint of one model of a run: its label, its checkpoint's files (name, size,
/// SHA-256 of the first MiB) and the windows it analyses (count, length, SHA-256 of the
/// token ids).
pub fn model_fingerprint(label: &str, path: &Path, windows: &[Vec<u32>]) -> Result<Value> {
    let mut files = Vec::new();
    let listed: Vec<PathBuf> = if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Error::io(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        entries
    } else {
        vec![path.to_path_buf()]
    };
    for file in listed {
        let size = std::fs::metadata(&file)
            .map_err(|e| Error::io(&file, e))?
            .len();
        let mut head = Vec::new();
        use std::io::Read;
        std::fs::File::open(&file)
            .and_then(|f| f.take(HASHED_BYTES).read_to_end(&mut head))
            .map_err(|e| Error::io(&file, e))?;
        let name = file.file_name().map(|n| n.to_string_lossy().to_string());
        files.push(json!({"file": name, "size": size, "sha256": hex(&Sha256::digest(&head))}));
    }
    let mut ids = Sha256::new();
    for w in windows {
        for id in w {
            ids.update(id.to_le_bytes());
        }
    }
    Ok(json!({
        "model": label,
        "files": files,
        "windows": windows.len(),
        "seq_len": windows.first().map_or(0, Vec::len),
        "windows_sha256": hex(&ids.finalize()),
    }))
}

/// The run's fingerprint: the tool's version, the analysis dtype, the options that change
/// the numbers (not where the files are, the device, the batch or block sizes or memory
/// limits), and each model's fingerprint.
pub fn run_fingerprint(options: &RunOptions, dtype: &str, models: Vec<Value>) -> Value {
    let mut opts = serde_json::to_value(options).unwrap_or(Value::Null);
    if let Value::Object(o) = &mut opts {
        for key in [
            "corpus",
            "tokenizer",
            "weight_map",
            "device",
            "batch_size",
            "max_memory",
            "block_size",
            "stream_layers",
            "memory_budget",
        ] {
            o.remove(key);
        }
    }
    json!({
        "asa_analyze_version": env!("CARGO_PKG_VERSION"),
        "dtype": dtype,
        "options": opts,
        "models": models,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Stages a partial result in `out`: the states' table, `record` (run.json, with `info`
/// as its `partial` block) and, last, the completion marker.
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
    let table = Table::new(
        "partial",
        vec![
            (
                "model",
                Column::Str(models.iter().map(|m| Some(m.label.clone())).collect()),
            ),
            ("state", Column::Bytes(states)),
        ],
    );
    write_table(&table, &out.staged_path(STATES)?, Format::Parquet)?;
    record.partial = Some(info.clone());
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

/// Opens the partial in `dir`: finished (the marker is there), with a run.json that has a
/// `partial` block.
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
    let text = std::fs::read_to_string(&run_json).map_err(|e| Error::io(&run_json, e))?;
    let record = RunRecord::parse(&text, &run_json)?;
    let info = record
        .partial
        .clone()
        .ok_or_else(|| Error::input(&run_json, "run.json has no valid `partial` block"))?;
    if info.count == 0 || info.shards.iter().any(|&k| k >= info.count) {
        return Err(Error::input(
            &run_json,
            format!(
                "shards {:?} of {} are not shards of the run",
                info.shards, info.count
            ),
        ));
    }
    Ok(Partial {
        dir: dir.to_path_buf(),
        info,
        record,
    })
}

/// The models' states of partial `dir`.
fn read_states(dir: &Path) -> Result<Vec<PartialModel>> {
    let path = dir.join(STATES);
    let table = read_table(&path)?;
    let Some(Column::Bytes(states)) = table.column("state") else {
        return Err(Error::input(&path, "no `state` column of bytes"));
    };
    states
        .iter()
        .map(|s| {
            let bytes = s
                .as_deref()
                .ok_or_else(|| Error::input(&path, "a model's state is missing"))?;
            rmp_serde::from_slice(bytes)
                .map_err(|e| Error::invalid(&path, "cannot read a model's saved state", e))
        })
        .collect()
}

/// The first place where two fingerprints differ, as a path such as
/// `options.seq_len` or `models[0].files[2].size`.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &here,
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}[{i}]"))),
        _ if a == b => None,
        _ => Some(at.to_string()),
    }
}

/// Checks that `partials` are of one run and cover no shard twice (and, when `complete`,
/// every shard): the run's shard count and the shards covered.
fn check_partials(partials: &[Partial], complete: bool) -> Result<(usize, Vec<usize>)> {
    let first = partials
        .first()
        .ok_or_else(|| Error::usage("merge needs at least one partial result"))?;
    let mut owner: BTreeMap<usize, &Path> = BTreeMap::new();
    for p in partials {
        if let Some(field) = first_difference(&first.info.fingerprint, &p.info.fingerprint, "") {
            return Err(Error::input(
                &p.dir,
                format!(
                    "a partial result of another run than {}: the runs differ in {field}",
                    first.dir.display()
                ),
            ));
        }
        if p.info.count != first.info.count {
            return Err(Error::input(
                &p.dir,
                format!(
                    "a shard of {} shards, {} is of {}",
                    p.info.count,
                    first.dir.display(),
                    first.info.count
                ),
            ));
        }
        for &k in &p.info.shards {
            if let Some(other) = owner.insert(k, &p.dir) {
                return Err(Error::input(
                    &p.dir,
                    format!(
                        "shard {k} of {} is also in {}",
                        p.info.count,
                        other.display()
                    ),
                ));
            }
        }
    }
    let count = first.info.count;
    let missing: Vec<String> = (0..count)
        .filter(|k| !owner.contains_key(k))
        .map(|k| k.to_string())
        .collect();
    if complete && !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(10).map(String::as_str).collect();
        let more = if missing.len() > 10 { ", ..." } else { "" };
        return Err(Error::usage(format!(
            "shard{} {}{more} of {count} missing: merge needs every shard (or --partial for a merge of some)",
            if missing.len() == 1 { "" } else { "s" },
            shown.join(", "),
        )));
    }
    Ok((count, owner.into_keys().collect()))
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
    for p in &partials {
        let models = read_states(&p.dir)?;
        if !merged.is_empty() && models.len() != merged.len() {
            return Err(Error::input(
                p.dir.join(STATES),
                format!(
                    "{} models where the other partials have {}",
                    models.len(),
                    merged.len()
                ),
            ));
        }
        for (k, model) in models.into_iter().enumerate() {
            let probe = MetricProbe::restore(model.probe.clone()).map_err(|e| {
                Error::input(p.dir.join(STATES), format!("model {}: {e}", model.label))
            })?;
            match merged.get_mut(k) {
                None => merged.push((model, probe)),
                Some((into, acc)) => {
                    if into.label != model.label {
                        return Err(Error::input(
                            p.dir.join(STATES),
                            format!(
                                "model {} where the other partials have {}",
                                model.label, into.label
                            ),
                        ));
                    }
                    acc.merge(&probe);
                    into.windows += model.windows;
                }
            }
        }
    }
    let models = merged
        .into_iter()
        .map(|(mut model, probe)| {
            model.probe = probe.state()?;
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
        },
        record: first.record.clone(),
    })
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_name_where_they_differ() {
        let a =
            json!({"options": {"seq_len": 16, "bins": 20}, "models": [{"files": [{"size": 1}]}]});
        let mut b = a.clone();
        assert_eq!(first_difference(&a, &b, ""), None);
        b["options"]["seq_len"] = json!(32);
        assert_eq!(
            first_difference(&a, &b, "").as_deref(),
            Some("options.seq_len")
        );
        let mut c = a.clone();
        c["models"][0]["files"][0]["size"] = json!(2);
        assert_eq!(
            first_difference(&a, &c, "").as_deref(),
            Some("models[0].files[0].size")
        );
    }
}
