//! What changes from one attention layer to the next besides a sliding window
//! (`super::sliding_window`): NoPE layers that do not rotate (SmolLM3's and Llama 4's
//! `no_rope_layers`), chunked layers (Llama 4's `chunked_attention` of
//! `attention_chunk_size` positions), Llama 4's attention temperature tuning of its NoPE
//! layers and its L2 QK-norm of its RoPE layers. A family reads them from its config in its
//! own file (`super::config::Family::attention_layers`); the loader reads them here.

use std::path::Path;

use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, Result};

/// Chunked attention: query i sees the keys j <= i of its own chunk of `size` positions.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChunkedLayers {
    pub size: usize,
    /// The chunked layers, 0-based.
    pub layers: Vec<usize>,
}

pub use asa_engine::attention::temperature::TemperatureTuning;

/// The per-layer attention settings of a config beyond its window; the default is every
/// layer rotating, causal, with no temperature and no L2 norm.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct AttentionLayers {
    /// Layers without RoPE (NoPE), 0-based.
    pub no_rope: Vec<usize>,
    pub chunked: Option<ChunkedLayers>,
    /// Temperature tuning of the NoPE layers' queries.
    pub temperature: Option<TemperatureTuning>,
    /// q and k of the RoPE layers are RMS-normalised per head without a scale, after RoPE
    /// (Llama 4's `use_qk_norm`: `Llama4TextL2Norm`).
    pub l2_qk_norm: bool,
}

impl AttentionLayers {
    /// Whether layer `l` (0-based) rotates its queries and keys.
    pub fn rotates(&self, l: usize) -> bool {
        !self.no_rope.contains(&l)
    }

    /// Whether layer `l`'s q and k are L2-normalised after RoPE (the RoPE layers only).
    pub fn l2_qk_norm_of(&self, l: usize) -> bool {
        self.l2_qk_norm && self.rotates(l)
    }

    /// The temperature tuning of layer `l`'s queries (the NoPE layers only).
    pub fn temperature_of(&self, l: usize) -> Option<TemperatureTuning> {
        self.temperature.filter(|_| !self.rotates(l))
    }

    /// The chunk of layer `l`, if it is chunked.
    pub fn chunk_of(&self, l: usize) -> Option<usize> {
        self.chunked
            .as_ref()
            .filter(|c| c.layers.contains(&l))
            .map(|c| c.size)
    }
}

pub use asa_core::run_facts::LayerKind;

/// The NoPE layers of a `no_rope_layers` list as SmolLM3Config and Llama4TextConfig write it
/// (one entry a layer, 1 where the layer uses RoPE, 0 where it does not), or, absent, the
/// classes' rule: every `interval`-th layer is NoPE.
pub(crate) fn no_rope_layers(
    listed: Option<&[i64]>,
    interval: Option<usize>,
    num_layers: usize,
    path: &Path,
) -> Result<Vec<usize>> {
    let Some(listed) = listed.filter(|l| !l.is_empty()) else {
        let interval = interval.unwrap_or(4);
        if interval == 0 {
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::out_of_range("no_rope_layer_interval", 0, "at least 1"),
            ));
        }
        return Ok((0..num_layers)
            .filter(|l| (l + 1) % interval == 0)
            .collect());
    };
    if listed.len() != num_layers {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::inconsistent(
                &["no_rope_layers", "num_hidden_layers"],
                format!(
                    "no_rope_layers has {} entries for num_hidden_layers {num_layers}",
                    listed.len()
                ),
            ),
        ));
    }
    if let Some(bad) = listed.iter().find(|&&v| v != 0 && v != 1) {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::out_of_range("no_rope_layers", bad, "1 (RoPE) or 0 (NoPE) each"),
        ));
    }
    Ok((0..num_layers).filter(|&l| listed[l] == 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use asa_hooks::KeyWindow;

    #[test]
    fn no_rope_layers_from_the_list_or_the_interval() {
        let path = Path::new("config.json");
        assert_eq!(no_rope_layers(None, None, 8, path).unwrap(), vec![3, 7]);
        assert_eq!(no_rope_layers(None, Some(2), 5, path).unwrap(), vec![1, 3]);
        // an empty list is the classes' rule too (`self.no_rope_layers if self.no_rope_layers`)
        assert_eq!(no_rope_layers(Some(&[]), None, 4, path).unwrap(), vec![3]);
        assert_eq!(
            no_rope_layers(Some(&[1, 0, 1]), None, 3, path).unwrap(),
            vec![1]
        );
        let err = no_rope_layers(Some(&[1, 2, 1]), None, 3, path).unwrap_err();
        assert_eq!(
            err.problem(),
            Some(&CheckpointProblem::out_of_range(
                "no_rope_layers",
                2,
                "1 (RoPE) or 0 (NoPE) each"
            ))
        );
        let err = no_rope_layers(Some(&[1, 1]), None, 3, path).unwrap_err();
        let problem = err.problem().unwrap();
        assert_eq!(problem.keys(), ["no_rope_layers", "num_hidden_layers"]);
        assert!(problem.to_string().contains("2 entries"), "{err}");
    }

    #[test]
    fn runs_of_one_kind_are_described_together() {
        let kinds: Vec<LayerKind> = (0..4)
            .map(|l| match l {
                3 => {
                    LayerKind::attention(l, "attention", KeyWindow::CAUSAL.describe(), false, true)
                }
                _ => LayerKind::attention(
                    l,
                    "attention",
                    KeyWindow::chunked(8).describe(),
                    true,
                    false,
                ),
            })
            .collect();
        assert_eq!(
            LayerKind::describe_all(&kinds),
            "1-3: attention, RoPE, chunks of 8 positions; 4: attention, NoPE, causal, temperature-tuned queries"
        );
    }

    #[test]
    fn temperature_grows_by_steps_of_floor_scale() {
        let t = TemperatureTuning {
            floor_scale: 4.0,
            attn_scale: 0.5,
        };
        // positions 0-2: floor(p + 1 / 4) = 0; 3-6: 1; 7: 2
        assert_eq!(t.factor(0), 1.0);
        assert_eq!(t.factor(2), 1.0);
        assert!((t.factor(3) - (1.0 + 0.5 * 2f32.ln())).abs() < 1e-7);
        assert!((t.factor(7) - (1.0 + 0.5 * 3f32.ln())).abs() < 1e-7);
    }
}
