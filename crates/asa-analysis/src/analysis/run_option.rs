//! Every option of a run declared once ([`RUN_OPTIONS`]): its name, kind, default, help and
//! how its text sets [`RunOptions`]. The command line's flags (`--map-size`), Python's
//! keyword arguments (`map_size`) and the package's stubs are made from this table, and a
//! value from either front end goes through the same parser, so both accept and refuse the
//! same values with the same words. Defaults are [`RunOptions::default`]'s.

use std::collections::BTreeMap;

use super::plan::parse_bytes;
use super::RunOptions;
use crate::corpus::induction::ProbeKind;
use crate::corpus::{BosMode, WindowMode};
use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;
use asa_engine::device::{parse_dtype, DeviceRequest};
use asa_metrics::entropy::EntropyOf;
use asa_metrics::Metric;

/// What an option's value is, for the front ends (clap's parser, Python's type).
#[derive(Debug, Clone, Copy)]
pub enum OptionKind {
    /// A whole number >= 0 (`usize`).
    Count,
    /// A whole number >= 0 up to 2^64 - 1 (a seed).
    Seed,
    /// A finite real number.
    Number,
    /// One of these names.
    Choice(&'static [&'static str]),
    /// Names of these, comma-separated (a list in Python).
    Choices(fn() -> &'static [&'static str]),
    /// Whole numbers, comma-separated (a list in Python).
    Counts,
    /// On or off (a flag on the command line).
    Flag,
    /// A memory size (`512M`, `4G`; bytes in Python).
    Bytes,
    /// A file's path.
    File,
    /// A device: `auto`, `cpu`, `cuda` or `cuda:N`.
    Device,
}

/// One option of a run.
pub struct RunOption {
    /// Python's keyword (`map_size`); the command line's flag is it with dashes
    /// (`--map-size`).
    pub name: &'static str,
    pub kind: OptionKind,
    /// What it does (clap's help, the package's docstring).
    pub help: &'static str,
    /// The default's text (`None`: unset), from [`RunOptions::default`].
    pub default: fn(&RunOptions) -> Option<String>,
    /// Sets the option from its text; the error says what is wrong with the value.
    pub set: fn(&mut RunOptions, &str) -> std::result::Result<(), String>,
}

impl RunOption {
    /// The command line's flag without its dashes (`map-size`).
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }

    /// The default's text, from [`RunOptions::default`].
    pub fn default_text(&self) -> Option<String> {
        (self.default)(&RunOptions::default())
    }
}

/// A front end's spelling of the options, for its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontEnd {
    /// `--map-size`.
    CommandLine,
    /// `map_size`.
    Python,
}

impl FrontEnd {
    /// How this front end spells option `name` (Python's keyword).
    pub fn spell(self, name: &str) -> String {
        match self {
            FrontEnd::CommandLine => format!("--{}", name.replace('_', "-")),
            FrontEnd::Python => name.to_string(),
        }
    }
}

/// The values given, by option name, as text (a front end's own conversion of its values).
pub type RunValues = BTreeMap<String, String>;

/// `RunOptions::default()` with each of `values` set; an error names the option as `front`
/// spells it. Names not in [`RUN_OPTIONS`] are the front end's to refuse (it knows its
/// own arguments); here they are a usage error.
pub fn run_options_from(values: &RunValues, front: FrontEnd) -> Result<RunOptions> {
    let mut options = RunOptions::default();
    for (name, text) in values {
        let Some(option) = RUN_OPTIONS.iter().find(|o| o.name == name) else {
            return Err(Error::usage(format!(
                "unknown option {}",
                front.spell(name)
            )));
        };
        (option.set)(&mut options, text).map_err(|why| Error::option(front.spell(name), why))?;
    }
    // the probe's own metric comes with the default set
    if options.spec.probe == Some(ProbeKind::Induction) && !values.contains_key("metrics") {
        options.spec.metrics.insert(Metric::INDUCTION_SCORE);
    }
    if values.contains_key("map_size") && !options.spec.metrics.contains(&Metric::BLOCK_MAP) {
        return Err(Error::option(
            front.spell("map_size"),
            format!(
                "sets block_map's side: add block_map to {}, or leave {} out",
                front.spell("metrics"),
                front.spell("map_size")
            ),
        ));
    }
    Ok(options)
}

/// A whole number >= 0.
fn count(text: &str) -> std::result::Result<usize, String> {
    text.trim()
        .parse::<usize>()
        .map_err(|_| format!("must be a whole number >= 0, got `{text}`"))
}

/// A finite real number.
fn number(text: &str) -> std::result::Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(format!("must be a finite number, got `{text}`")),
    }
}

/// On or off: `true` / `false` (Python's bool, a flag given).
fn flag(text: &str) -> std::result::Result<bool, String> {
    match text {
        "true" | "True" => Ok(true),
        "false" | "False" => Ok(false),
        _ => Err(format!("must be true or false, got `{text}`")),
    }
}

/// One name of a domain enum, by its `FromStr`.
fn named<T: std::str::FromStr>(text: &str) -> std::result::Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.parse::<T>().map_err(|e| e.to_string())
}

/// Comma-separated items, each by `item`.
fn list<T>(
    text: &str,
    item: impl Fn(&str) -> std::result::Result<T, String>,
) -> std::result::Result<Vec<T>, String> {
    text.split(',').map(|s| item(s.trim())).collect()
}

fn some(value: impl ToString) -> Option<String> {
    Some(value.to_string())
}

/// The name a domain enum serialises to (`auto`, `packed`, `effective`).
fn name_of<T: serde::Serialize>(value: &T) -> Option<String> {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
}

fn unset(_: &RunOptions) -> Option<String> {
    None
}

/// Every option of a run (the metric commands' and Python's `analyze`), in `--help`'s order.
pub const RUN_OPTIONS: &[RunOption] = &[
    RunOption {
        name: "probe",
        kind: OptionKind::Choice(&ProbeKind::NAMES),
        help: "A built-in probe instead of a corpus: `induction`, windows of BOS, L random token ids (from --seed) and the same L again, --seq-len 2L + 1; `analyze` adds induction_score",
        default: unset,
        set: |o, t| {
            o.spec.probe = Some(named(t)?);
            Ok(())
        },
    },
    RunOption {
        name: "tokenizer",
        kind: OptionKind::File,
        help: "tokenizer.json to use instead of the checkpoint's own (or its GGUF metadata)",
        default: unset,
        set: |o, t| {
            o.inputs.tokenizer = Some(t.into());
            Ok(())
        },
    },
    RunOption {
        name: "weight_map",
        kind: OptionKind::File,
        help: "JSON of \"convention name\": \"checkpoint name\" patterns ({l} placeholders) for checkpoints whose tensors are named otherwise",
        default: unset,
        set: |o, t| {
            o.inputs.weight_map = Some(t.into());
            Ok(())
        },
    },
    RunOption {
        name: "variant",
        kind: OptionKind::Choice(VariantKind::NAMES),
        help: "Analyse every checkpoint as this attention variant, whatever config.json names or the weights point to (e.g. off_by_one, which has no weights of its own)",
        default: unset,
        set: |o, t| {
            o.spec.variant = Some(named(t)?);
            Ok(())
        },
    },
    RunOption {
        name: "seq_len",
        kind: OptionKind::Count,
        help: "Tokens per sequence (BOS included)",
        default: |d| some(d.spec.seq_len),
        set: |o, t| {
            o.spec.seq_len = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "num_seqs",
        kind: OptionKind::Count,
        help: "Number of sequences",
        default: |d| some(d.spec.num_seqs),
        set: |o, t| {
            o.spec.num_seqs = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "bos",
        kind: OptionKind::Choice(&BosMode::NAMES),
        help: "Whether each sequence starts with BOS",
        default: |d| name_of(&d.spec.bos),
        set: |o, t| {
            o.spec.bos = named(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "windows",
        kind: OptionKind::Choice(&WindowMode::NAMES),
        help: "How windows are cut: packed (documents joined with EOS, cut into consecutive windows) or documents (each window the start of its own document, shorter ones skipped)",
        default: |d| name_of(&d.spec.windows),
        set: |o, t| {
            o.spec.windows = named(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "batch_size",
        kind: OptionKind::Count,
        help: "Sequences per forward pass",
        default: |d| some(d.execution.batch_size),
        set: |o, t| {
            o.execution.batch_size = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "seed",
        kind: OptionKind::Seed,
        help: "Seed of the built-in corpus",
        default: |d| some(d.spec.seed),
        set: |o, t| {
            let seed = t.trim().parse::<u64>();
            o.spec.seed =
                seed.map_err(|_| format!("must be a whole number from 0 to 2^64 - 1, got `{t}`"))?;
            Ok(())
        },
    },
    RunOption {
        name: "device",
        kind: OptionKind::Device,
        help: "auto, cpu, cuda or cuda:N",
        default: |d| some(d.execution.device),
        set: |o, t| {
            o.execution.device = named::<DeviceRequest>(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "dtype",
        kind: OptionKind::Choice(&["f32", "bf16", "f16"]),
        help: "Analysis dtype: f32, bf16, f16 (default f32 on CPU, bf16 on GPU)",
        default: unset,
        set: |o, t| {
            o.spec.dtype = Some(parse_dtype(t).map_err(|e| e.to_string())?);
            Ok(())
        },
    },
    RunOption {
        name: "max_memory",
        kind: OptionKind::Bytes,
        help: "Memory for attention blocks (e.g. 2G); default a quarter of available memory",
        default: unset,
        set: |o, t| {
            o.execution.max_memory = Some(parse_bytes(t).map_err(|e| e.to_string())?);
            Ok(())
        },
    },
    RunOption {
        name: "block_size",
        kind: OptionKind::Count,
        help: "Queries per attention block (overrides --max-memory)",
        default: unset,
        set: |o, t| {
            o.execution.block_size = Some(count(t)?);
            Ok(())
        },
    },
    RunOption {
        name: "stream_layers",
        kind: OptionKind::Flag,
        help: "Read one layer's weights at a time (layer-major: every window through a layer before the next); default: when the model's weights would not fit --memory-budget (CPU)",
        default: unset,
        set: |o, t| {
            o.execution.stream_layers = flag(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "allow_nonfinite",
        kind: OptionKind::Flag,
        help: "Analyse weights holding NaN or infinities (a diverged checkpoint; its metrics come out NaN) instead of refusing them",
        default: unset,
        set: |o, t| {
            o.spec.allow_nonfinite = flag(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "ignore_unused_weights",
        kind: OptionKind::Flag,
        help: "Analyse a checkpoint holding weights its config does not use (more layers than num_hidden_layers, another variant's weights) instead of refusing it",
        default: unset,
        set: |o, t| {
            o.spec.ignore_unused_weights = flag(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "memory_budget",
        kind: OptionKind::Bytes,
        help: "Memory the model's weights may take before layers are streamed (e.g. 8G); default 80% of the memory available when the run starts",
        default: unset,
        set: |o, t| {
            o.execution.memory_budget = Some(parse_bytes(t).map_err(|e| e.to_string())?);
            Ok(())
        },
    },
    RunOption {
        name: "min_query",
        kind: OptionKind::Count,
        help: "Queries i < min-query are left out of query averages",
        default: |d| some(d.spec.min_query),
        set: |o, t| {
            o.spec.min_query = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "layer",
        kind: OptionKind::Count,
        help: "Heatmap / profile layer, 1-based, a layer with attention (default the 8th attention layer, clipped to the model's last)",
        default: unset,
        set: |o, t| {
            o.spec.layer = Some(count(t)?);
            Ok(())
        },
    },
    RunOption {
        name: "size",
        kind: OptionKind::Count,
        help: "Heatmap size (queries and keys)",
        default: |d| some(d.spec.size),
        set: |o, t| {
            o.spec.size = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "map_size",
        kind: OptionKind::Count,
        help: "block_map side: G x G blocks of queries and keys (G = min(map-size, seq-len)); only with `block_map` among the metrics",
        default: |d| some(d.spec.map_size),
        set: |o, t| {
            o.spec.map_size = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "profile_query",
        kind: OptionKind::Count,
        help: "Query of the profile, 0-based (default: the last)",
        default: unset,
        set: |o, t| {
            o.spec.profile_query = Some(count(t)?);
            Ok(())
        },
    },
    RunOption {
        name: "bins",
        kind: OptionKind::Count,
        help: "Weight-sum histogram bins",
        default: |d| some(d.spec.bins),
        set: |o, t| {
            o.spec.bins = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "sink_eps",
        kind: OptionKind::Number,
        help: "Sink-rate threshold epsilon",
        default: |d| some(d.spec.sink_eps),
        set: |o, t| {
            o.spec.sink_eps = number(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "bands",
        kind: OptionKind::Counts,
        help: "Distance band edges after 0 (e.g. 1,10,100); default decades",
        default: unset,
        set: |o, t| {
            o.spec.bands = Some(list(t, count)?);
            Ok(())
        },
    },
    RunOption {
        name: "entropy_of",
        kind: OptionKind::Choice(&EntropyOf::NAMES),
        help: "Entropy of the effective weights (clamped, renormalised) or of the plain softmax",
        default: |d| name_of(&d.spec.entropy_of),
        set: |o, t| {
            o.spec.entropy_of = named(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "role_sink",
        kind: OptionKind::Number,
        help: "head_role: a head whose mean first-token mass reaches this is a sink head",
        default: |d| some(d.spec.roles.sink),
        set: |o, t| {
            o.spec.roles.sink = number(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "role_local_window",
        kind: OptionKind::Count,
        help: "head_role: local_mass is the mass on the last W keys (distances 0 .. W-1, key 0 not)",
        default: |d| some(d.spec.roles.local_window),
        set: |o, t| {
            o.spec.roles.local_window = count(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "role_local",
        kind: OptionKind::Number,
        help: "head_role: a head whose local_mass reaches this is a local head",
        default: |d| some(d.spec.roles.local),
        set: |o, t| {
            o.spec.roles.local = number(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "role_prev",
        kind: OptionKind::Number,
        help: "head_role: a head whose mass at distance 1 reaches this is a previous-token head",
        default: |d| some(d.spec.roles.prev),
        set: |o, t| {
            o.spec.roles.prev = number(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "role_induction",
        kind: OptionKind::Number,
        help: "head_role: a head whose induction_score reaches this is an induction head",
        default: |d| some(d.spec.roles.induction),
        set: |o, t| {
            o.spec.roles.induction = number(t)?;
            Ok(())
        },
    },
    RunOption {
        name: "metrics",
        kind: OptionKind::Choices(Metric::names),
        help: "`analyze` only: compute just these metrics (comma-separated), e.g. first_token,entropy,weight_sum,head_total,heatmap,nll",
        default: unset,
        set: |o, t| {
            o.spec.metrics = list(t, named::<Metric>)?.into_iter().collect();
            Ok(())
        },
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_option_is_declared_once_and_its_default_is_read_back() {
        let mut names: Vec<&str> = RUN_OPTIONS.iter().map(|o| o.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RUN_OPTIONS.len());
        let defaults = RunOptions::default();
        for option in RUN_OPTIONS {
            if let Some(text) = option.default_text() {
                let mut o = RunOptions::default();
                (option.set)(&mut o, &text).unwrap_or_else(|e| panic!("{}: {e}", option.name));
                assert_eq!(
                    serde_json::to_value(&o).unwrap(),
                    serde_json::to_value(&defaults).unwrap(),
                    "{}",
                    option.name
                );
            }
        }
    }

    #[test]
    fn a_bad_value_names_the_option_as_its_front_end_spells_it() {
        let values = RunValues::from([("map_size".to_string(), "-1".to_string())]);
        for (front, says) in [
            (
                FrontEnd::CommandLine,
                "--map-size must be a whole number >= 0, got `-1`",
            ),
            (
                FrontEnd::Python,
                "map_size must be a whole number >= 0, got `-1`",
            ),
        ] {
            let err = run_options_from(&values, front).unwrap_err();
            assert_eq!(err.to_string(), says);
            assert_eq!(err.option_name(), Some(front.spell("map_size").as_str()));
        }
        let values = RunValues::from([("dtype".to_string(), "bf16".to_string())]);
        let o = run_options_from(&values, FrontEnd::Python).unwrap();
        assert_eq!(o.spec.dtype, Some(candle_core::DType::BF16));
    }
}
