//! Checkpoints: config.json, weights, variant detection, and the decoder they build. A
//! checkpoint is a Hugging Face folder (config.json + safetensors) or a GGUF file
//! ([`gguf`]); both end up as a [`ModelConfig`] and a [`WeightStore`] serving HF names.
//!
//! The modules go one way (docs/architecture.md; `tests/it/layers.rs` checks it): what a
//! model is (`layout`, `mixers`, `experts`, `sliding_window`, `attention_layers`,
//! `multipliers`) < its formats (`safetensors_file`, `weights`, `weight_map`, `gguf*`,
//! tokenizers) < its config ([`config`], the families) < what builds it (`layers`,
//! `attention`, `mixer_loaders`, the decoder).

mod attention;
pub mod attention_layers;
pub mod config;
mod decoder;
mod detect;
pub mod experts;
pub mod gguf;
mod gguf_alignment;
mod gguf_config;
mod gguf_keys;
mod gguf_pieces;
mod gguf_rope;
mod gguf_rules;
mod gguf_sentencepiece;
pub mod gguf_tokenizer;
mod latent;
pub mod layers;
pub mod layout;
mod mixer_loaders;
pub mod mixers;
mod multimodal;
pub mod multipliers;
pub mod mxfp4;
pub mod nonfinite;
mod residuals;
pub mod safetensors_file;
pub mod sliding_window;
pub mod tokenizer_file;
pub mod weight_map;
pub mod weights;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use tokenizers::Tokenizer;

pub use config::{Architecture, ModelConfig};
pub use decoder::{LayerTiming, Model};
pub use detect::{declared_variant, detect_variant, DetectedVariant};
pub use gguf::GgufFile;
pub use gguf_tokenizer::tokenizer_from_gguf;
pub use weight_map::WeightMap;
pub use weights::WeightStore;

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;

/// A model held in memory: its config.json as text and its tensors under their Hugging Face
/// names, `origin` naming it in messages (e.g. `<memory>/model`).
#[derive(Debug, Clone)]
pub struct MemoryModel {
    pub origin: PathBuf,
    pub config_json: String,
    pub tensors: Vec<safetensors_file::MemoryTensor>,
    /// The copy to the host that tensors held on a device (a GPU) needed before they could
    /// be read, if any: recorded in run.json as the model's `host_copy`.
    pub host_copy: Option<HostCopy>,
}

pub use asa_core::run_facts::HostCopy;

/// A checkpoint opened for analysis: config, weights, detected variant.
pub struct Checkpoint {
    /// The path as given: a checkpoint folder, or a `.gguf` file (see [`Checkpoint::gguf`]
    /// for the file a folder holding one resolved to).
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub variant: DetectedVariant,
    pub store: WeightStore,
}

impl Checkpoint {
    /// Opens `path`, weights cast to `dtype` on `device` when loaded: a folder with
    /// config.json + safetensors, a `.gguf` file, or a folder without config.json holding
    /// exactly one `.gguf` file.
    pub fn open(path: &Path, device: &Device, dtype: DType) -> Result<Self> {
        Self::open_mapped(path, device, dtype, &WeightMap::default())
    }

    /// Like [`Checkpoint::open`], the tensors that `map` (`--weight-map`) renames known by
    /// their convention names, variant detection included.
    pub fn open_mapped(
        path: &Path,
        device: &Device,
        dtype: DType,
        map: &WeightMap,
    ) -> Result<Self> {
        let (config, store) = match checkpoint_kind(path)? {
            Kind::HuggingFace => (
                ModelConfig::from_dir(path)?,
                WeightStore::open(path, device, dtype)?,
            ),
            Kind::Gguf(file) => {
                let (gguf, config) = config::open_gguf(&file)?;
                (config, WeightStore::from_gguf(gguf, device, dtype))
            }
        };
        Self::assemble(path, config, store, map)
    }

    /// A model held in memory (its config.json text and its tensors, say a trainer's), read
    /// as the checkpoint saved from it would be: the same config resolution, loader,
    /// validation and variant detection; `origin` names it in messages.
    pub fn from_memory(
        model: &MemoryModel,
        device: &Device,
        dtype: DType,
        map: &WeightMap,
    ) -> Result<Self> {
        let origin = &model.origin;
        let config = ModelConfig::from_json(&model.config_json, &origin.join("config.json"))?;
        let files = safetensors_file::SafetensorsFiles::from_memory(model.tensors.clone(), origin)?;
        let store = WeightStore::from_memory(files, origin, device, dtype);
        Self::assemble(origin, config, store, map)
    }

    /// The checkpoint of `config` and `store` at `path`, its tensors renamed by `map` and the
    /// architecture's own names, its variant detected.
    fn assemble(
        path: &Path,
        config: ModelConfig,
        store: WeightStore,
        map: &WeightMap,
    ) -> Result<Self> {
        // the architecture's own tensor names (GPT-NeoX), after any --weight-map rules
        let map = map
            .clone()
            .or_else(&config::builtin_weight_map(config.architecture));
        let map = match config.multimodal {
            true => map.or_else(&multimodal::weight_map()),
            false => map,
        };
        let store = if map.is_empty() {
            store
        } else {
            store.renamed(&map)?
        };
        let variant = detect_variant(&config, &store);
        Ok(Checkpoint {
            dir: path.to_path_buf(),
            config,
            variant,
            store,
        })
    }

    /// The checkpoint analysed as `kind` whatever config.json names or its weights point to
    /// (`--variant`); the detection says so, and what `kind` leaves unused.
    pub fn with_variant(mut self, kind: VariantKind) -> Self {
        let declared = self.config.variant_settings.declared.replace(kind);
        let mut variant = declared_variant(&self.config, &self.store, kind, "--variant");
        if let Some(d) = declared.filter(|&d| d != kind) {
            variant.source = format!("--variant (config.json declares {})", d.name());
        }
        self.variant = variant;
        self
    }

    /// The GGUF file the weights come from, if the checkpoint is one.
    pub fn gguf(&self) -> Option<&GgufFile> {
        self.store.gguf()
    }

    /// For GGUF checkpoints: the stored tensor types and how many tensors each (e.g.
    /// `{"F32": 61, "Q4_1": 210, "Q8_0": 1}`), all dequantized to the analysis dtype on load.
    pub fn dequantized_from(&self) -> Option<BTreeMap<String, usize>> {
        self.gguf().map(GgufFile::type_counts)
    }

    /// Where the tokenizer of a Hugging Face checkpoint would be (`tokenizer.json`, which
    /// may not exist); `None` for GGUF files, whose tokenizer is [`Checkpoint::tokenizer`].
    pub fn tokenizer_json(&self) -> Option<PathBuf> {
        match self.gguf() {
            Some(_) => None,
            None => Some(self.dir.join("tokenizer.json")),
        }
    }

    /// The checkpoint's own tokenizer: `tokenizer.json` of the folder, or the one built from
    /// the GGUF metadata. A missing tokenizer is an error naming the file.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        match self.gguf() {
            Some(g) => gguf_tokenizer::tokenizer_from_content(g.content(), g.path()),
            None => {
                let path = self.dir.join("tokenizer.json");
                if !path.is_file() {
                    let problem = CheckpointProblem::MissingFile {
                        file: "tokenizer.json".into(),
                        detail: String::new(),
                    };
                    return Err(Error::checkpoint_problem(&path, problem));
                }
                tokenizer_file::read_tokenizer(&path)
            }
        }
    }

    /// Builds the model (loads every tensor).
    pub fn load_model(&self) -> Result<Model> {
        Model::load(&self.store, &self.config, self.variant.kind)
    }

    /// The model with only its final norm loaded: layers, embedding rows and LM head are
    /// read as the run reaches them ([`Model::streamed`]).
    pub fn load_streamed(&self) -> Result<Model> {
        Model::streamed(&self.store, &self.config, self.variant.kind)
    }

    /// Stored tensors the model does not read (call after [`Checkpoint::validate`]): a
    /// checkpoint of more layers than its config says, or weights of another variant.
    pub fn unused_weights(&self) -> Vec<String> {
        let ignored = config::ignored_on_load(self.config.architecture);
        let mut unread = self.store.unread();
        unread.retain(|name| !ignored.iter().any(|suffix| name.ends_with(suffix)));
        if self.config.multimodal {
            unread.retain(|name| !multimodal::is_vision_weight(name));
        }
        unread
    }

    /// Refuses a checkpoint holding weights its config does not use (layers past
    /// `num_hidden_layers`, another variant's weights: what they change would be lost without
    /// a word), naming them ([`CheckpointProblem::UnusedTensors`]); call after
    /// [`Checkpoint::validate`].
    pub fn refuse_unused(&self) -> Result<()> {
        let tensors = self.unused_weights();
        match tensors.is_empty() {
            true => Ok(()),
            false => Err(Error::checkpoint_problem(
                &self.dir,
                CheckpointProblem::UnusedTensors { tensors },
            )),
        }
    }

    /// Checks that every tensor the model needs exists with the right shape, reading no data.
    pub fn validate(self) -> Result<Self> {
        let Checkpoint {
            dir,
            config,
            variant,
            store,
        } = self;
        let store = store.shapes_only();
        let other_rule = matches!(
            variant.kind,
            VariantKind::Logn | VariantKind::ScaleInvariant
        );
        if let (true, Some(_)) = (other_rule, config.attn_logit_softcap()) {
            return Err(Error::checkpoint_problem(
                dir.join("config.json"),
                CheckpointProblem::unimplemented(
                    &["attention_variant", "attn_logit_softcapping"],
                    format!(
                        "{} attention with logit soft-capping is not implemented",
                        variant.kind.name()
                    ),
                ),
            ));
        }
        if let (true, Some(window)) = (variant.kind.is_affine(), &config.sliding_window) {
            // beta spreads alpha's remainder over N keys: which N a window means is undefined
            return Err(Error::checkpoint_problem(
                dir.join("config.json"),
                CheckpointProblem::unimplemented(
                    &["attention_variant", "sliding_window"],
                    format!(
                        "{} attention with a sliding window (layers {}) is not implemented",
                        variant.kind.name(),
                        window.describe_layers()
                    ),
                ),
            ));
        }
        Model::load(&store, &config, variant.kind)?;
        if variant.kind.is_affine() {
            // read when the analysis finishes (the stored alpha moving average)
            for l in 0..config.num_layers {
                let name = format!("model.layers.{l}.self_attn.alpha_ma");
                store.get_as(&name, &[config.num_heads], DType::F32)?;
            }
        }
        Ok(Checkpoint {
            dir,
            config,
            variant,
            store: store.with_data(),
        })
    }

    /// Parameters the variant adds to the plain architecture (the paper's "Delta Params").
    pub fn delta_params(&self) -> usize {
        let c = &self.config;
        let gate = c.num_heads * c.head_dim * c.hidden_size;
        let per_layer = match self.variant.kind {
            VariantKind::Sink => c.num_heads,
            VariantKind::AffineScaled => self.alpha_params(),
            VariantKind::Gated => gate,
            VariantKind::AffineScaledGated => self.alpha_params() + gate,
            // learnable s_h per head when stored (a config scalar adds nothing)
            VariantKind::Logn if self.store.contains("model.layers.0.self_attn.logn_scale") => {
                c.num_heads
            }
            VariantKind::Logn
            | VariantKind::Softmax
            | VariantKind::OffByOne
            | VariantKind::ScaleInvariant => 0,
        };
        per_layer * c.num_layers
    }

    fn alpha_params(&self) -> usize {
        let c = &self.config;
        let bias = self
            .store
            .contains("model.layers.0.self_attn.alpha_proj.bias");
        c.num_heads * c.hidden_size + if bias { c.num_heads } else { 0 }
    }

    /// Total stored parameters (buffers such as alpha_ma excluded).
    pub fn parameter_count(&self) -> usize {
        self.store
            .tensors()
            .iter()
            .filter(|(name, _, _)| !name.ends_with("alpha_ma"))
            .filter(|(name, _, _)| !(self.config.multimodal && multimodal::is_vision_weight(name)))
            .map(|(name, shape, _)| mxfp4::values_stored(name, shape))
            .sum()
    }
}

/// What kind of checkpoint a path holds.
enum Kind {
    HuggingFace,
    Gguf(PathBuf),
}

fn checkpoint_kind(path: &Path) -> Result<Kind> {
    if path.is_file() {
        if gguf::is_gguf_path(path) || has_gguf_magic(path) {
            return Ok(Kind::Gguf(path.to_path_buf()));
        }
        return Err(not_a_checkpoint(
            path,
            "not a checkpoint: expected a folder (config.json + safetensors) or a .gguf file",
        ));
    }
    if !path.is_dir() {
        return Err(not_a_checkpoint(
            path,
            "not a checkpoint (no such folder or .gguf file)",
        ));
    }
    if path.join("config.json").is_file() {
        return Ok(Kind::HuggingFace);
    }
    match gguf::gguf_files_in(path)?.as_slice() {
        [] => Ok(Kind::HuggingFace),
        [one] => Ok(Kind::Gguf(one.clone())),
        several => Err(not_a_checkpoint(
            path,
            format!(
                "the folder holds {} .gguf files ({}); name the one to analyse",
                several.len(),
                several
                    .iter()
                    .filter_map(|p| p.file_name())
                    .map(|n| n.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Whether a file starts with the GGUF magic (a `.gguf` file renamed).
/// `path` is not a checkpoint, as `detail` says.
fn not_a_checkpoint(path: &Path, detail: impl Into<String>) -> Error {
    let detail = detail.into();
    Error::checkpoint_problem(path, CheckpointProblem::NotACheckpoint { detail })
}

fn has_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    asa_core::input::open(path).is_ok_and(|mut f| f.read_exact(&mut magic).is_ok())
        && &magic == b"GGUF"
}

/// What went wrong, inside the path, backtrace and context candle may wrap an error in: the
/// error kept as the cause of ours (our message already names the file and the operation).
pub(crate) fn root_cause(err: candle_core::Error) -> candle_core::Error {
    match err {
        candle_core::Error::WithPath { inner, .. }
        | candle_core::Error::WithBacktrace { inner, .. }
        | candle_core::Error::Context { inner, .. } => root_cause(*inner),
        other => other,
    }
}
