//! What an analysis is asked for, in three parts: the [`RunSpec`] (every setting that
//! changes the numbers, with its default: each option is declared once in
//! [`super::run_option::RUN_OPTIONS`], whose defaults are [`RunSpec::default`]'s, and the
//! CLI's flags, the Python keyword arguments and the stubs are made from it; a shard's
//! fingerprint is its serialisation), the [`RunInputs`] (the corpus, tokenizer and weight map, named by path:
//! a fingerprint hashes what they hold, not where they lie) and the [`Execution`] (device,
//! memory, batching, sharding: how the numbers are computed, never what they are).

use std::collections::BTreeSet;
use std::path::PathBuf;

use candle_core::DType;

use super::plan::check_block;
use super::shard::Shard;
use crate::corpus::induction::{copy_len, ProbeKind};
use crate::corpus::{BosMode, WindowMode};
use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;
use asa_engine::device::DeviceRequest;
use asa_metrics::entropy::EntropyOf;
use asa_metrics::head_role::RoleThresholds;
use asa_metrics::Metric;

/// Everything an analysis is asked for, as plain values (the CLI's flags, Python's keyword
/// arguments); [`RunOptions::default`] is what `analyze` does without options. Serialised
/// flat (`run.json`'s `options`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunOptions {
    #[serde(flatten)]
    pub spec: RunSpec,
    #[serde(flatten)]
    pub inputs: RunInputs,
    #[serde(flatten)]
    pub execution: Execution,
}

/// The settings that change the numbers, with their defaults ([`RunSpec::default`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunSpec {
    pub metrics: BTreeSet<Metric>,
    /// A built-in probe instead of a corpus (`--probe induction`: BOS, L random ids, the
    /// same L again, `seq_len = 2L + 1`, ids from `seed`).
    pub probe: Option<ProbeKind>,
    /// Analyse every checkpoint as this variant, whatever config.json names or the weights
    /// point to (a checkpoint trained with off-by-one whose config does not say so).
    pub variant: Option<VariantKind>,
    pub seq_len: usize,
    pub num_seqs: usize,
    pub bos: BosMode,
    /// Windows packed from the joined documents (default) or one per document.
    pub windows: WindowMode,
    pub seed: u64,
    /// The analysis dtype (`None`: the checkpoint's, as the device allows); recorded and
    /// fingerprinted as the dtype the run resolved.
    #[serde(skip)]
    pub dtype: Option<DType>,
    /// Analyse weights holding NaN or infinities (a diverged checkpoint) instead of
    /// refusing them.
    pub allow_nonfinite: bool,
    /// Analyse a checkpoint holding weights its config does not use instead of refusing it.
    pub ignore_unused_weights: bool,
    pub min_query: usize,
    /// Heatmap / profile layer, 1-based, a decoder layer with attention (default the 8th
    /// attention layer, clipped to the last).
    pub layer: Option<usize>,
    pub size: usize,
    /// block_map side G: query and key blocks (clipped to the window length).
    pub map_size: usize,
    pub profile_query: Option<usize>,
    pub bins: usize,
    pub sink_eps: f64,
    /// Distance band edges after 0; `None`: decades.
    pub bands: Option<Vec<usize>>,
    pub entropy_of: EntropyOf,
    /// The head-role thresholds (`--role-*`).
    pub roles: RoleThresholds,
}

/// The inputs besides the checkpoints, by path.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunInputs {
    /// Text (.txt, .jsonl) or token ids (.npy, .json); `None`: the built-in generated prose.
    pub corpus: Option<PathBuf>,
    pub tokenizer: Option<PathBuf>,
    pub weight_map: Option<PathBuf>,
}

/// How the numbers are computed: the same numbers (within float summation order) whatever
/// these are.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Execution {
    pub batch_size: usize,
    #[serde(serialize_with = "display")]
    pub device: DeviceRequest,
    /// Attention block memory budget in bytes (default: a share of free memory).
    pub max_memory: Option<u64>,
    pub block_size: Option<usize>,
    /// Read one layer's weights at a time (layer-major), whatever the budget.
    pub stream_layers: bool,
    /// Bytes the model's weights may take in memory before layers are streamed (default:
    /// `schedule::default_memory_budget`).
    pub memory_budget: Option<u64>,
    /// Where a streamed run's residual stream is spilled when it passes the budget (the
    /// CLI: `--out`'s staging folder; default the system's temporary folder).
    #[serde(skip)]
    pub scratch_dir: Option<PathBuf>,
    /// Analyse shard K of N of each model's windows and keep the exact metric states (a
    /// partial result for `merge`) instead of finishing them alone.
    #[serde(skip)]
    pub shard: Option<Shard>,
}

fn display<S: serde::Serializer>(d: &DeviceRequest, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&d.to_string())
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            metrics: Metric::defaults().into_iter().collect(),
            probe: None,
            variant: None,
            seq_len: 1024,
            num_seqs: 10,
            bos: BosMode::Auto,
            windows: WindowMode::Packed,
            seed: 0,
            dtype: None,
            allow_nonfinite: false,
            ignore_unused_weights: false,
            min_query: 1,
            layer: None,
            size: 30,
            map_size: Self::DEFAULT_MAP_SIZE,
            profile_query: None,
            bins: 20,
            sink_eps: 0.3,
            bands: None,
            entropy_of: EntropyOf::Effective,
            roles: RoleThresholds::default(),
        }
    }
}

impl RunSpec {
    /// `block_map`'s side when not given (`--map-size`, Python's `map_size`).
    pub const DEFAULT_MAP_SIZE: usize = 256;
}

impl Default for Execution {
    fn default() -> Self {
        Execution {
            batch_size: 1,
            device: DeviceRequest::Auto,
            max_memory: None,
            block_size: None,
            stream_layers: false,
            memory_budget: None,
            scratch_dir: None,
            shard: None,
        }
    }
}

/// More histogram bins than any figure can show; each is a table row (10^7 wrote 0.5 GB).
const MAX_BINS: usize = 100_000;
/// Beyond any analysis that finishes; refused before the built-in text is generated.
const MAX_TOKENS: usize = 1 << 28;

impl RunOptions {
    /// The options' own errors, before anything is read (the model-dependent ones, such as
    /// a layer past the depth, come with each model).
    pub fn validate(&self) -> Result<()> {
        if let Some(b) = self.execution.block_size {
            check_block(b)?;
        }
        for (name, value) in [
            ("--bins", self.spec.bins),
            ("--size", self.spec.size),
            ("--map-size", self.spec.map_size),
            ("--batch-size", self.execution.batch_size),
        ] {
            if value == 0 {
                return Err(Error::option(name, "must be at least 1"));
            }
        }
        if self.spec.bins > MAX_BINS {
            let bins = self.spec.bins;
            return Err(Error::option(
                "--bins",
                format!("{bins} is more than {MAX_BINS}"),
            ));
        }
        if self.spec.seq_len.saturating_mul(self.spec.num_seqs) > MAX_TOKENS {
            return Err(Error::option(
                "--seq-len",
                format!(
                    "{} x --num-seqs {} asks for more than {MAX_TOKENS} tokens",
                    self.spec.seq_len, self.spec.num_seqs
                ),
            ));
        }
        if !self.spec.sink_eps.is_finite() {
            return Err(Error::option(
                "--sink-eps",
                format!("must be a finite number, got {}", self.spec.sink_eps),
            ));
        }
        self.validate_probe()?;
        validate_roles(&self.spec.roles)?;
        match &self.inputs.tokenizer {
            Some(file) if !file.is_file() => Err(Error::not_a_file(file, "--tokenizer")),
            _ => Ok(()),
        }
    }

    /// The probe's own errors: a probe replaces the corpus and shapes the windows, and
    /// induction_score is only measured on the induction probe.
    fn validate_probe(&self) -> Result<()> {
        let Some(probe) = self.spec.probe else {
            if self.spec.metrics.contains(&Metric::INDUCTION_SCORE) {
                return Err(Error::usage(
                    "induction_score is measured on the induction probe: add --probe induction \
                     (with an odd --seq-len, 2L + 1)",
                ));
            }
            return Ok(());
        };
        if let Some(corpus) = &self.inputs.corpus {
            return Err(Error::option(
                "--probe",
                format!(
                    "{probe} makes its own windows: drop --corpus {}",
                    corpus.display()
                ),
            ));
        }
        if self.spec.windows == WindowMode::Documents {
            return Err(Error::option(
                "--probe",
                format!("{probe} makes its own windows: --windows documents applies to a corpus"),
            ));
        }
        copy_len(self.spec.seq_len).map(|_| ())
    }
}

/// The thresholds' own errors: finite numbers, a window of at least one key.
fn validate_roles(roles: &RoleThresholds) -> Result<()> {
    for (name, value) in [
        ("--role-sink", roles.sink),
        ("--role-local", roles.local),
        ("--role-prev", roles.prev),
        ("--role-induction", roles.induction),
    ] {
        if !value.is_finite() {
            return Err(Error::option(
                name,
                format!("must be a finite number, got {value}"),
            ));
        }
    }
    if roles.local_window == 0 {
        return Err(Error::option("--role-local-window", "must be at least 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: serde_json::Value) -> Vec<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    /// `run.json`'s `options` stay one flat object (what earlier runs wrote and `merge`
    /// reads), and a shard's fingerprint holds the settings that change the numbers: these
    /// keys exactly. A field renamed or moved between the parts fails here, by name, instead
    /// of silently changing which partials `merge` accepts.
    #[test]
    fn the_options_serialise_flat_and_the_fingerprint_holds_the_spec() {
        let all = keys(serde_json::to_value(RunOptions::default()).unwrap());
        let spec = keys(serde_json::to_value(RunSpec::default()).unwrap());
        let mut want_spec = [
            "allow_nonfinite",
            "bands",
            "bins",
            "bos",
            "entropy_of",
            "ignore_unused_weights",
            "layer",
            "map_size",
            "metrics",
            "min_query",
            "num_seqs",
            "probe",
            "profile_query",
            "roles",
            "seed",
            "seq_len",
            "sink_eps",
            "size",
            "variant",
            "windows",
        ]
        .map(String::from)
        .to_vec();
        want_spec.sort();
        assert_eq!(spec, want_spec);
        let rest = [
            "batch_size",
            "block_size",
            "corpus",
            "device",
            "max_memory",
            "memory_budget",
            "stream_layers",
            "tokenizer",
            "weight_map",
        ];
        let mut want_all: Vec<String> = want_spec.iter().cloned().collect();
        want_all.extend(rest.map(String::from));
        want_all.sort();
        assert_eq!(all, want_all);
    }

    /// An option's own error is a usage error naming that option as a field; one about a
    /// combination names none.
    #[test]
    fn an_invalid_option_is_a_usage_error_naming_it() {
        use asa_core::ErrorKind;
        let refused = |edit: fn(&mut RunOptions)| {
            let mut options = RunOptions::default();
            edit(&mut options);
            options.validate().expect_err("validated")
        };
        let cases: [(fn(&mut RunOptions), &str); 6] = [
            (|o| o.spec.bins = 0, "--bins"),
            (|o| o.spec.bins = MAX_BINS + 1, "--bins"),
            (|o| o.spec.map_size = 0, "--map-size"),
            (|o| o.spec.sink_eps = f64::NAN, "--sink-eps"),
            (|o| o.spec.roles.local_window = 0, "--role-local-window"),
            (|o| o.spec.roles.prev = f64::INFINITY, "--role-prev"),
        ];
        for (edit, option) in cases {
            let err = refused(edit);
            assert_eq!(err.kind(), ErrorKind::Usage, "{err}");
            assert_eq!(err.option_name(), Some(option), "{err}");
            assert!(err.to_string().starts_with(&format!("{option} ")), "{err}");
        }
        let err = refused(|o| o.spec.metrics = BTreeSet::from([Metric::INDUCTION_SCORE]));
        assert_eq!(
            (err.kind(), err.option_name()),
            (ErrorKind::Usage, None),
            "{err}"
        );
    }
}
