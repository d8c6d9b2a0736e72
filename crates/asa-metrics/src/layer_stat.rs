//! A per-layer statistic: pooled mean and the standard deviation over sequences.

use super::rows::RowAccumulator;

/// One value per layer: pooled mean and std over sequences (ddof 0).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerStat {
    /// `[layer]` pooled mean over (sequence, head, query >= min_query).
    pub mean: Vec<f64>,
    /// `[layer]` std over sequences of each sequence's mean.
    pub std: Vec<f64>,
    /// `[layer]` first_token only: the share of the counted queries whose sliding window
    /// holds the first token (the mean is over those); absent without sliding windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visible_share: Option<Vec<f64>>,
}

impl LayerStat {
    /// Per-layer mean and std of a row accumulator.
    pub fn from_rows(rows: &RowAccumulator) -> Self {
        LayerStat {
            mean: (0..rows.layers()).map(|l| rows.layer_mean(l)).collect(),
            std: (0..rows.layers())
                .map(|l| rows.layer_std_over_seqs(l))
                .collect(),
            visible_share: None,
        }
    }
}

/// `[layer][head]` means of a row accumulator.
pub fn head_means(rows: &RowAccumulator) -> Vec<Vec<f64>> {
    (0..rows.layers())
        .map(|l| (0..rows.heads()).map(|h| rows.head_mean(l, h)).collect())
        .collect()
}
