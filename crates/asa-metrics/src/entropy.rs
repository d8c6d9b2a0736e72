//! entropy (paper Fig. 6): H_i = -sum_j q_ij ln q_ij in nats, q = max(a, 0) renormalised to
//! sum 1 (or the plain softmax p with `--entropy-of softmax`). A row with no positive mass
//! is NaN: counted, left out of averages.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::TableRows;
use super::Metric;
use asa_core::parse_error::ParseError;
use asa_kernels::row_table::{RowWants, ENTROPY};

use super::layer_stat::{head_means, LayerStat};
use super::rows::{Pool, RowAccumulator};
use asa_core::error::Result;
use asa_kernels::row_table::Column;

/// Which weights the entropy is taken of (`--entropy-of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntropyOf {
    /// The effective weights a_ij, clamped at 0 and renormalised.
    #[default]
    Effective,
    /// The plain softmax p_ij.
    Softmax,
}

impl EntropyOf {
    /// The names `--entropy-of` takes.
    pub const NAMES: [&'static str; 2] = ["effective", "softmax"];
}

impl std::str::FromStr for EntropyOf {
    type Err = ParseError;

    /// The entropy source named as in the CLI and the tables ([`EntropyOf::NAMES`]).
    fn from_str(s: &str) -> std::result::Result<Self, ParseError> {
        serde_json::from_value(serde_json::Value::String(s.to_string()))
            .map_err(|_| ParseError::unknown("entropy source", s, &EntropyOf::NAMES))
    }
}

/// Accumulates row entropies.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Entropy {
    rows: RowAccumulator,
}

/// Entropy results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EntropyResult {
    pub per_layer: LayerStat,
    /// `[layer][head]` mean entropy.
    pub per_head: Vec<Vec<f64>>,
    /// Rows with no positive mass (NaN), all layers.
    pub nan_count: u64,
}

impl Entropy {
    /// For `layers` x `seqs` x `heads`.
    pub fn new(layers: usize, seqs: usize, heads: usize, min_query: usize) -> Self {
        Entropy {
            rows: RowAccumulator::new(layers, seqs, heads, min_query),
        }
    }

    /// Adds a block's row entropies `[batch, head, n]`.
    pub fn add<'v>(
        &mut self,
        layer: usize,
        seq_offset: usize,
        q_start: usize,
        n: usize,
        values: impl Into<Column<'v>>,
    ) {
        self.rows.add(layer, seq_offset, q_start, n, values);
    }

    /// Adds a block's pools `[batch * head]` over its counted rows
    /// ([`RowAccumulator::counted_rows`]).
    pub fn add_pools(&mut self, layer: usize, seq_offset: usize, pools: &[Pool]) {
        self.rows.add_pools(layer, seq_offset, pools);
    }

    /// Per-layer and per-head entropy.
    pub fn finish(&self) -> EntropyResult {
        EntropyResult {
            per_layer: LayerStat::from_rows(&self.rows),
            per_head: head_means(&self.rows),
            nan_count: (0..self.rows.layers())
                .map(|l| self.rows.nan_count(l))
                .sum(),
        }
    }
}

impl Merge for Entropy {
    fn merge(&mut self, other: &Entropy) {
        self.rows.merge(&other.rows);
    }
}

impl Metric {
    /// entropy: row entropy in nats, per layer and head (paper Fig. 6).
    pub const ENTROPY: Metric = Metric::by_default("entropy");
}

/// The entropy accumulator (of the pattern, or of the plain softmax with
/// `--entropy-of softmax`).
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    Box::new(EntropyAcc {
        of: s.opts.entropy_of,
        entropy: Entropy::new(s.layers, s.windows.len(), s.heads, s.opts.min_query),
    })
}

/// [`Entropy`] of the weights `--entropy-of` names.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct EntropyAcc {
    of: EntropyOf,
    entropy: Entropy,
}

impl Merge for EntropyAcc {
    fn merge(&mut self, other: &EntropyAcc) {
        self.entropy.merge(&other.entropy);
    }
}

impl Accumulator for EntropyAcc {
    fn needs(&self, _layer: usize) -> Needs {
        let effective = self.of == EntropyOf::Effective;
        Needs {
            rows: RowWants {
                entropy: effective,
                ..RowWants::default()
            },
            softmax_entropy: !effective,
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        let pools = match self.of {
            EntropyOf::Effective => b.rows.map(|r| r.pools),
            EntropyOf::Softmax => b.softmax_rows,
        };
        if let Some(p) = pools {
            self.entropy
                .add_pools(b.layer, b.seq_offset, &p.counted[ENTROPY]);
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::ENTROPY, self.entropy.finish());
    }
}

impl MetricResult for EntropyResult {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        let m = &self.per_layer;
        out.per_layer(model, metric.name(), &m.mean, &m.std);
        out.per_head(model, metric.name(), &self.per_head);
    }
}

#[cfg(test)]
mod tests {
    use asa_hooks::row_pass::weight_rows;
    use asa_hooks::KeyWindow;
    use asa_kernels::row_table::{RowWants, ENTROPY};
    use candle_core::{Device, Tensor};

    #[test]
    fn entropy_clamps_negative_weights_and_renormalises() {
        // row 1: (0.5, 0.5) -> ln 2 = 0.693147; row 2: (0.6, -0.2, 0.2) -> q = (0.75, 0, 0.25):
        // -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335; row 3: no positive mass -> NaN
        let wants = RowWants {
            entropy: true,
            ..RowWants::default()
        };
        let entropy = |row: &[f32]| {
            // the last query of a block sees every key
            let a = Tensor::from_vec(row.to_vec(), (1, 1, 1, row.len()), &Device::Cpu).unwrap();
            weight_rows(&a, row.len() - 1, KeyWindow::CAUSAL, &wants)
                .unwrap()
                .unwrap()[ENTROPY]
        };
        assert!((entropy(&[0.5, 0.5]) - std::f64::consts::LN_2 as f32).abs() < 1e-6);
        assert!((entropy(&[0.6, -0.2, 0.2]) - 0.562335).abs() < 1e-6);
        assert!(entropy(&[-0.1, 0.0, -0.3]).is_nan());
    }
}
