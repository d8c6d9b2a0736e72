//! Which attention variant a checkpoint uses: named in config.json, or detected from its
//! weights (sinks, alpha_proj, a doubled q_proj, logn_scale), and how we know.
//! scale_invariant has no weights of its own: only config.json can name it.

use serde::Serialize;

use super::config::ModelConfig;
use super::weights::WeightStore;
use asa_engine::attention::VariantKind;

/// A variant and the evidence for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DetectedVariant {
    pub kind: VariantKind,
    /// e.g. "config.json attention_variant" or "weights: model.layers.0.self_attn.sinks".
    pub source: String,
    /// When config.json names a variant other than the one its weights point to: what the
    /// declared variant leaves unused (the declared one is analysed, as transformers would
    /// load it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unused_weights: Option<String>,
}

/// The variant of a checkpoint with `config` and weights `store`.
pub fn detect_variant(config: &ModelConfig, store: &WeightStore) -> DetectedVariant {
    match config.variant_settings.declared {
        Some(kind) => declared_variant(config, store, kind, "config.json attention_variant"),
        None => {
            let (kind, source) = from_weights(config, store);
            DetectedVariant {
                kind,
                source,
                unused_weights: None,
            }
        }
    }
}

/// `kind`, named by `source` (config.json or `--variant`), with what it leaves unused of the
/// variant weights the checkpoint holds.
pub fn declared_variant(
    config: &ModelConfig,
    store: &WeightStore,
    kind: VariantKind,
    source: &str,
) -> DetectedVariant {
    let (found, _) = from_weights(config, store);
    let unused = unused_markers(config, store, kind);
    let named = match source {
        "--variant" => format!("--variant {}", kind.name()),
        _ => format!("config.json declares {}", kind.name()),
    };
    DetectedVariant {
        kind,
        source: source.into(),
        unused_weights: (!unused.is_empty()).then(|| {
            format!(
                "{named}; it does not use {} (the weights point to {})",
                unused.join(", "),
                found.name()
            )
        }),
    }
}

/// The variant weights of the first attention layer that `kind` does not read.
fn unused_markers(config: &ModelConfig, store: &WeightStore, kind: VariantKind) -> Vec<String> {
    use VariantKind::{AffineScaled, AffineScaledGated, Gated, Logn, Sink};
    let m = Markers::of(config, store);
    let mut unused = Vec::new();
    if store.contains(&m.sinks) && kind != Sink {
        unused.push(m.sinks);
    }
    if store.contains(&m.alpha) && !matches!(kind, AffineScaled | AffineScaledGated) {
        unused.push(m.alpha);
    }
    if m.doubled_q && !matches!(kind, Gated | AffineScaledGated) {
        unused.push(format!("the gate rows of {}", m.q));
    }
    if store.contains(&m.logn) && kind != Logn {
        unused.push(m.logn);
    }
    unused
}

/// The names whose presence marks a variant (the first attention layer's), and whether
/// q_proj holds the gate.
struct Markers {
    sinks: String,
    alpha: String,
    logn: String,
    q: String,
    doubled_q: bool,
}

impl Markers {
    fn of(config: &ModelConfig, store: &WeightStore) -> Markers {
        let first = config
            .attention_layer_numbers()
            .first()
            .copied()
            .unwrap_or(0);
        let attn = format!("model.layers.{first}.self_attn");
        let q = format!("{attn}.q_proj.weight");
        let doubled_q = store
            .shape(&q)
            .is_some_and(|s| s.first() == Some(&(2 * config.num_heads * config.head_dim)));
        Markers {
            sinks: format!("{attn}.sinks"),
            alpha: format!("{attn}.alpha_proj.weight"),
            logn: format!("{attn}.logn_scale"),
            q,
            doubled_q,
        }
    }
}

/// The variant the weights point to, and the evidence.
fn from_weights(config: &ModelConfig, store: &WeightStore) -> (VariantKind, String) {
    let Markers {
        sinks,
        alpha,
        logn,
        q,
        doubled_q,
    } = Markers::of(config, store);
    let (kind, source) = if store.contains(&sinks) {
        (VariantKind::Sink, format!("weights: {sinks}"))
    } else if store.contains(&alpha) && doubled_q {
        (
            VariantKind::AffineScaledGated,
            format!("weights: {alpha} and {q} with 2 x heads x head_dim rows"),
        )
    } else if store.contains(&alpha) {
        (VariantKind::AffineScaled, format!("weights: {alpha}"))
    } else if doubled_q {
        (
            VariantKind::Gated,
            format!("weights: {q} has 2 x heads x head_dim rows (query + gate)"),
        )
    } else if store.contains(&logn) {
        (VariantKind::Logn, format!("weights: {logn}"))
    } else {
        (
            VariantKind::Softmax,
            "no attention_variant in config.json and no variant weights: standard softmax".into(),
        )
    };
    (kind, source)
}
