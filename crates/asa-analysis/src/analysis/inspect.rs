//! What a checkpoint is, without running it: `inspect` as a table and as JSON (the CLI's
//! `inspect`, the Python package's `inspect`).

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device};
use serde_json::json;

use super::hub_cache::{self, HubModel};
use super::schedule::Schedule;
use super::RunOptions;
use asa_core::error::{Error, Result};
use asa_engine::nn::rope;
use asa_models::{Checkpoint, Model, ModelConfig, WeightMap};

/// `inspect --json` of `checkpoint` (a folder, a GGUF file or a Hub id).
pub fn report(checkpoint: &Path) -> Result<serde_json::Value> {
    let ckpt = open(checkpoint, None)?;
    let stored = stored_dtypes(&ckpt);
    Ok(json_report(checkpoint, &ckpt, &stored))
}

/// `inspect --json` of a model held in memory (`model.origin` names it), as for the
/// checkpoint `save_pretrained` would write of it.
pub fn report_memory(model: &asa_models::MemoryModel) -> Result<serde_json::Value> {
    let ckpt = Checkpoint::from_memory(model, &Device::Cpu, DType::F32, &WeightMap::default())?
        .validate()?;
    let stored = stored_dtypes(&ckpt);
    Ok(json_report(&model.origin, &ckpt, &stored))
}

/// The checkpoint `checkpoint` names (a folder, a GGUF file or a Hub id), checked, its
/// names read through `weight_map` (a JSON file of name patterns) when given.
pub fn open(checkpoint: &Path, weight_map: Option<&Path>) -> Result<Checkpoint> {
    let map = WeightMap::from_option(weight_map)?;
    // a Hub id (`org/name`, `org/name@revision`) from the local Hugging Face cache
    let path = match hub_cache::resolve(checkpoint)? {
        Some(HubModel::Checkpoint(dir)) => dir,
        Some(HubModel::Series(_)) => {
            return Err(Error::usage(format!(
                "{}: inspect takes one checkpoint (one revision)",
                checkpoint.display()
            )))
        }
        None => checkpoint.to_path_buf(),
    };
    Checkpoint::open_mapped(&path, &Device::Cpu, DType::F32, &map)?.validate()
}

/// Tensors by stored dtype; for GGUF the llama.cpp tensor types (Q4_1, Q8_0, ...) the
/// weights are dequantized from.
pub fn stored_dtypes(ckpt: &Checkpoint) -> BTreeMap<String, usize> {
    if let Some(types) = ckpt.dequantized_from() {
        return types;
    }
    let mut stored = BTreeMap::new();
    for (_, _, dtype) in ckpt.store.tensors() {
        *stored.entry(dtype).or_default() += 1;
    }
    stored
}

/// `inspect --json` of `ckpt` opened from `checkpoint`: the same facts as the table, as
/// values (the RoPE settings as config fields).
pub fn json_report(
    checkpoint: &Path,
    ckpt: &Checkpoint,
    stored: &BTreeMap<String, usize>,
) -> serde_json::Value {
    let c = &ckpt.config;
    let gguf = ckpt.gguf();
    let mut report = json!({
        "checkpoint": checkpoint.display().to_string(),
        "format": if gguf.is_some() { "gguf" } else { "safetensors" },
        "architecture": c.architecture.name(),
        "multimodal": c.multimodal,
        "variant": ckpt.variant.kind.name(),
        "variant_source": ckpt.variant.source,
        "unused_weights": ckpt.variant.unused_weights,
        "layers": c.num_layers,
        "heads": c.num_heads,
        "kv_heads": c.num_kv_heads,
        "head_dim": c.head_dim,
        "hidden_size": c.hidden_size,
        "vocab_size": c.vocab_size,
        "rope": c.rope,
        "tie_word_embeddings": c.tie_word_embeddings,
        "layout": c.layout,
        "lm_head": lm_head(ckpt),
        "sliding_window": c.sliding_window,
        "layer_kinds": c.layer_kinds(),
        "parameters": ckpt.parameter_count(),
        "delta_parameters": ckpt.delta_params(),
        "stored_dtypes": stored,
    });
    let plan = Schedule::plan(ckpt, &RunOptions::default(), &Device::Cpu);
    report["schedule"] = json!(plan.record(&[]));
    report["unused_weights"] = json!(ckpt.unused_weights());
    if let Some(g) = gguf {
        report["gguf_file"] = json!(g.path().display().to_string());
        report["gguf_tensor_types"] = json!(stored);
        report["rope_source"] = json!(g.rope_source());
    }
    report
}

/// The table `inspect` prints of `ckpt` opened from `checkpoint`: a name and a phrase per
/// line.
pub fn table_rows(
    checkpoint: &Path,
    ckpt: &Checkpoint,
    stored: &BTreeMap<String, usize>,
) -> Vec<(&'static str, String)> {
    let c = &ckpt.config;
    let format = match ckpt.gguf() {
        Some(g) => format!(
            "gguf {} (tensors dequantized to {} on load; rope from {})",
            g.path().display(),
            ckpt.store.dtype().as_str(),
            g.rope_source()
        ),
        None => "safetensors".to_string(),
    };
    let kind = ckpt.variant.kind.name();
    let delta = format!("{} ({kind} adds them)", format_count(ckpt.delta_params()));
    let dtypes = stored
        .iter()
        .map(|(k, v)| format!("{k} x{v}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        ("checkpoint", checkpoint.display().to_string()),
        ("format", format),
        (
            "architecture",
            match c.multimodal {
                true => format!(
                    "{} (the text model of a multimodal checkpoint; its vision tower is not read)",
                    c.architecture.name()
                ),
                false => c.architecture.name().to_string(),
            },
        ),
        ("layout", layout(c)),
        ("variant", format!("{kind} ({})", ckpt.variant.source)),
        ("layers", c.num_layers.to_string()),
        (
            "heads",
            format!("{} query, {} key/value", c.num_heads, c.num_kv_heads),
        ),
        ("head dim", c.head_dim.to_string()),
        ("hidden size", c.hidden_size.to_string()),
        ("vocab size", c.vocab_size.to_string()),
        ("lm head", lm_head(ckpt).to_string()),
        ("attention", attention_span(c)),
        (
            "layer kinds",
            asa_models::attention_layers::LayerKind::describe_all(&c.layer_kinds()),
        ),
        ("logits", logit_transforms(c)),
        ("rope", positions(c)),
        ("parameters", format_count(ckpt.parameter_count())),
        ("delta params", delta),
        ("stored dtypes", dtypes),
        ("memory", memory_plan(ckpt)),
        ("unused", unused_line(ckpt)),
    ]
}

/// The layer layout, with the mixture of experts when there is one.
fn layout(c: &ModelConfig) -> String {
    match &c.experts {
        None => c.layout.describe(),
        Some(e) => format!("{}; MLP: {}", c.layout.describe(), e.describe(c.num_layers)),
    }
}

/// The rotary embedding, or the learned positions that replace it (GPT-2).
fn positions(c: &ModelConfig) -> String {
    let attention = c.attention_layer_numbers();
    if attention.iter().all(|&l| !c.attention_layers.rotates(l)) {
        return "none: every attention layer is NoPE".to_string();
    }
    match c.layout.learned_positions {
        true => format!(
            "none: learned absolute positions (up to {} tokens)",
            c.max_position_embeddings
        ),
        false => match &c.rope_local {
            Some(local) => format!(
                "global layers: {}; sliding-window layers: {}",
                rope::describe(&c.rope, c.head_dim),
                rope::describe(local, c.head_dim)
            ),
            None => rope::describe(&c.rope, c.head_dim),
        },
    }
}

/// How q.k becomes the logits, and what happens to the next-token logits (Gemma 2's
/// query scale and soft-caps).
fn logit_transforms(c: &ModelConfig) -> String {
    let gemma = c.gemma;
    let scale = match (gemma.map(|g| g.query_pre_attn_scalar), &c.latent) {
        _ if c.multipliers.attention_scale.is_some() => {
            format!("q.k x {} (attention_multiplier)", c.query_scale())
        }
        (Some(s), _) => format!("q.k / sqrt({s}) (query_pre_attn_scalar)"),
        (None, Some(l)) => format!(
            "q.k x {:.7} (latent attention: q.k = q_nope.k_nope + q_rope.k_rope over {} + {} dims, \
             scaled by {}^-1/2 times YaRN's mscale^2 {:.6}; values of {} dims)",
            l.softmax_scale,
            l.nope_dim,
            l.rope_dim,
            l.qk_dim(),
            l.softmax_scale * (l.qk_dim() as f64).sqrt(),
            l.v_dim
        ),
        (None, None) => format!("q.k / sqrt({}) (head_dim)", c.head_dim),
    };
    let attn = match (
        c.attn_logit_softcap(),
        gemma.and_then(|g| g.attn_logit_softcap),
    ) {
        (Some(cap), _) => format!(
            ", soft-capped at {cap}: {cap} tanh(s / {cap}) (max_logit is before the cap, \
             max_logit_capped after)"
        ),
        (None, Some(cap)) => format!(", {}", identity_cap("attn_logit_softcapping", cap)),
        (None, None) => String::new(),
    };
    let embed = match gemma.map(|g| g.embedding_scale) {
        Some(s) => format!("; embeddings times {s:.6}"),
        None => String::new(),
    };
    let last = match (
        c.final_logit_softcap(),
        gemma.and_then(|g| g.final_logit_softcap),
    ) {
        (Some(cap), _) => format!("; next-token logits soft-capped at {cap}"),
        (None, Some(cap)) => format!("; {}", identity_cap("final_logit_softcapping", cap)),
        (None, None) => String::new(),
    };
    let multipliers = match c.multipliers.describe() {
        words if words.is_empty() => words,
        words => format!("; {words}"),
    };
    format!("{scale}{attn}{embed}{last}{multipliers}")
}

/// A soft-cap beyond f32, not applied: what it is.
fn identity_cap(key: &str, cap: f64) -> String {
    format!("{key} {cap:e} is beyond f32: the identity on every logit below 1.4e35 (not applied)")
}

/// Which keys a query sees: all earlier ones, or a sliding window on some layers.
fn attention_span(c: &ModelConfig) -> String {
    if let Some(chunks) = &c.attention_layers.chunked {
        let layers: Vec<String> = chunks.layers.iter().map(|l| (l + 1).to_string()).collect();
        return format!(
            "chunks of {} positions on layers {} (query i sees the keys j <= i of its own \
             chunk: floor(j / {}) = floor(i / {}); first-token metrics count only the queries \
             of the first chunk); other layers causal",
            chunks.size,
            layers.join(", "),
            chunks.size,
            chunks.size
        );
    }
    match &c.sliding_window {
        None => "causal, every earlier key".to_string(),
        Some(w) => format!(
            "sliding window of {} keys on layers {} (query i sees keys i - {} < j <= i; \
             key tiles outside it are skipped; first-token metrics count only the queries \
             that still see the first token); other layers causal",
            w.size,
            w.describe_layers(),
            w.size
        ),
    }
}

/// Where the LM head comes from.
fn lm_head(ckpt: &Checkpoint) -> &'static str {
    Model::describe_lm_head(&ckpt.store, &ckpt.config)
}

/// The stored weights the config does not use (`analyze` refuses them unless
/// `--ignore-unused-weights`).
fn unused_line(ckpt: &Checkpoint) -> String {
    let unused = ckpt.unused_weights();
    match unused.len() {
        0 => "none: every stored weight is read".to_string(),
        n => format!(
            "{n} stored weights the config does not use: {}{}",
            unused
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if n > 3 { ", ..." } else { "" }
        ),
    }
}

/// The planned weight memory of each schedule (f32 on the CPU) and which `analyze` would
/// take with the default budget.
fn memory_plan(ckpt: &Checkpoint) -> String {
    let plan = Schedule::plan(ckpt, &RunOptions::default(), &Device::Cpu);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    format!(
        "weights {:.2} GiB in memory, {:.2} GiB a layer streamed; budget {:.2} GiB: {}",
        gib(plan.in_memory),
        gib(plan.largest_layer),
        gib(plan.budget),
        plan.name()
    )
}

fn format_count(n: usize) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{n} ({:.2}B)", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{n} ({:.2}M)", n as f64 / 1e6),
        n if n >= 1_000 => format!("{n} ({:.1}K)", n as f64 / 1e3),
        n => n.to_string(),
    }
}
