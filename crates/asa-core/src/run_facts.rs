//! What a run reports of a model, as plain data: each decoder layer's kind, the copy of a
//! device's tensors to the host, a streamed layer's times. Defined here, below both the
//! models that fill them (asa-models) and the run records that keep them (asa-record), so
//! that reading a record needs no model code.

/// What one decoder layer is, for `inspect` and run.json: its mixer and, for attention,
/// the keys a query sees and whether it rotates.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LayerKind {
    /// 1-based, as the tables number layers.
    pub layer: usize,
    /// `attention`, or a hybrid's other mixer (`short conv`).
    pub mixer: String,
    /// Attention: causal, sliding or chunked (`KeyWindow`'s words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<String>,
    /// Attention: RoPE, or NoPE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope: Option<bool>,
    /// The queries are temperature-tuned (Llama 4's NoPE layers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub temperature_tuned: bool,
}

impl LayerKind {
    /// An attention layer `l` (0-based) of `mixer` (its name), whose queries see `keys`
    /// (a key window in words), rotating when `rope`.
    pub fn attention(
        l: usize,
        mixer: &str,
        keys: String,
        rope: bool,
        temperature_tuned: bool,
    ) -> Self {
        LayerKind {
            layer: l + 1,
            mixer: mixer.to_string(),
            keys: Some(keys),
            rope: Some(rope),
            temperature_tuned,
        }
    }

    /// Layer `l` (0-based) of a mixer other than attention (its name).
    pub fn other(l: usize, mixer: &str) -> Self {
        LayerKind {
            layer: l + 1,
            mixer: mixer.to_string(),
            keys: None,
            rope: None,
            temperature_tuned: false,
        }
    }

    /// The kind in words, without its number ("attention, RoPE, causal"; "short conv").
    fn words(&self) -> String {
        let (Some(keys), Some(rope)) = (&self.keys, self.rope) else {
            return self.mixer.clone();
        };
        let rope = match rope {
            true => "RoPE",
            false => "NoPE",
        };
        let tuned = match self.temperature_tuned {
            true => ", temperature-tuned queries",
            false => "",
        };
        format!("{}, {rope}, {keys}{tuned}", self.mixer)
    }

    /// Runs of layers of one kind, in a line ("1-3: attention, RoPE, chunks of 8
    /// positions; 4: attention, NoPE, causal").
    pub fn describe_all(kinds: &[LayerKind]) -> String {
        let mut runs: Vec<(usize, usize, String)> = Vec::new();
        for kind in kinds {
            let words = kind.words();
            match runs.last_mut() {
                Some((_, last, w)) if *w == words && *last + 1 == kind.layer => *last = kind.layer,
                _ => runs.push((kind.layer, kind.layer, words)),
            }
        }
        runs.iter()
            .map(|(first, last, words)| match first == last {
                true => format!("{first}: {words}"),
                false => format!("{first}-{last}: {words}"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Tensors of a model in memory copied from a device to the host before the analysis.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostCopy {
    /// The device they were copied from (e.g. `cuda:0`).
    pub from: String,
    pub tensors: usize,
    pub bytes: u64,
    pub seconds: f64,
}

/// What streaming one layer took: its load (reading and casting its weights) and its
/// compute over every window, and the bytes read from the checkpoint's files.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct LayerTiming {
    /// 0-based layer; the number of layers for the embedding and LM head reads.
    pub layer: usize,
    pub load_seconds: f64,
    pub compute_seconds: f64,
    pub bytes_read: u64,
}
