//! Which runs make which table, in the paper's order: Table 1 compares the baseline, the
//! attention sink and Affine-Scaled Attention per model size; Table 2 the baseline, gated
//! attention and Affine-Scaled + gated; Table 3 any methods the user names (the alpha
//! nonlinearities of Affine-Scaled Attention, say).

use std::collections::BTreeMap;

use super::method::Method;
use super::runs::RunSet;
use super::values::{parameters, run_values, RunValues, ValueOptions};
use asa_core::error::Result;
use asa_core::variant::VariantKind;
use asa_record::checkpoint_facts::CheckpointFacts;

/// A row: one run's cells.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperRow {
    pub size: String,
    pub method: Method,
    pub values: RunValues,
}

/// One of the paper's tables.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperTable {
    /// 1, 2 or 3.
    pub number: u8,
    /// The caption.
    pub caption: String,
    /// Rows grouped by size (smallest first), methods in the table's order.
    pub rows: Vec<PaperRow>,
    /// What the reader should know (detections, runs not given).
    pub notes: Vec<String>,
}

/// Reads every run's inputs (its checkpoint through `checkpoints`) and lays out the tables
/// they fill.
pub fn paper_tables(
    set: &RunSet,
    o: &ValueOptions,
    checkpoints: &dyn CheckpointFacts,
) -> Result<Vec<PaperTable>> {
    let params = set
        .runs
        .iter()
        .map(|run| parameters(run, checkpoints))
        .collect::<Result<Vec<_>>>()?;
    let baselines: BTreeMap<&str, usize> = set
        .runs
        .iter()
        .zip(&params)
        .filter(|(r, _)| r.method == Method::BASELINE)
        .filter_map(|(r, p)| p.map(|(count, _)| (r.size.as_str(), count)))
        .collect();
    let values = set
        .runs
        .iter()
        .zip(&params)
        .map(|(r, p)| run_values(r, *p, baselines.get(r.size.as_str()).copied(), o))
        .collect::<Result<Vec<_>>>()?;
    Ok(build_tables(set, &values))
}

/// The tables the runs fill, with `values[i]` the cells of `set.runs[i]`; a table none of
/// whose methods was given is left out.
pub fn build_tables(set: &RunSet, values: &[RunValues]) -> Vec<PaperTable> {
    let specs: [(u8, &str, Vec<Method>); 3] = [
        (
            1,
            "Baseline, attention sink and Affine-Scaled Attention by model size",
            vec![
                Method::BASELINE,
                Method::Variant(VariantKind::Sink),
                Method::Variant(VariantKind::AffineScaled),
            ],
        ),
        (
            2,
            "Gated attention with and without Affine-Scaled Attention",
            vec![
                Method::BASELINE,
                Method::Variant(VariantKind::Gated),
                Method::Variant(VariantKind::AffineScaledGated),
            ],
        ),
        (3, "Alpha nonlinearities compared", set.table3.clone()),
    ];
    let sizes = size_order_of_runs(set);
    let mut tables = Vec::new();
    for (number, caption, methods) in specs {
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        for size in &sizes {
            let present: Vec<&Method> = methods
                .iter()
                .filter(|m| set.runs.iter().any(|r| &r.size == size && &r.method == *m))
                .collect();
            // a size shows in a table when one of its methods other than the shared
            // baseline is there
            if !present
                .iter()
                .any(|m| **m != Method::BASELINE || methods.len() == 1)
            {
                continue;
            }
            for method in &methods {
                match set
                    .runs
                    .iter()
                    .position(|r| &r.size == size && &r.method == method)
                {
                    Some(i) => {
                        let run = &set.runs[i];
                        if let Some(source) = &run.method_source {
                            notes
                                .push(format!("{size} {}: method from {source}", method.display()));
                        }
                        rows.push(PaperRow {
                            size: size.clone(),
                            method: method.clone(),
                            values: values[i].clone(),
                        });
                    }
                    None => notes.push(format!(
                        "{size}: no {} run given (no row)",
                        method.display()
                    )),
                }
            }
        }
        if !rows.is_empty() {
            tables.push(PaperTable {
                number,
                caption: caption.to_string(),
                rows,
                notes,
            });
        }
    }
    tables
}

/// Sizes smallest first when every one reads as a number with an optional K/M/B/T suffix
/// (`135M`, `0.5B`, `1B`), else in the order given.
fn size_order_of_runs(set: &RunSet) -> Vec<String> {
    size_order(set.runs.iter().map(|r| r.size.clone()))
}

/// Distinct `sizes`, smallest first when every one reads as a number with an optional
/// K/M/B/T suffix (`135M`, `0.5B`, `1B`), else in the order given (the figures' per-size
/// panels share it).
pub fn size_order(sizes: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut distinct: Vec<String> = Vec::new();
    for s in sizes {
        if !distinct.contains(&s) {
            distinct.push(s);
        }
    }
    let parsed: Option<Vec<f64>> = distinct.iter().map(|s| parse_size(s)).collect();
    if let Some(values) = parsed {
        let mut order: Vec<usize> = (0..distinct.len()).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        return order.into_iter().map(|i| distinct[i].clone()).collect();
    }
    distinct
}

fn parse_size(size: &str) -> Option<f64> {
    let s = size.trim();
    let (number, scale) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1e3),
        'M' => (&s[..s.len() - 1], 1e6),
        'B' => (&s[..s.len() - 1], 1e9),
        'T' => (&s[..s.len() - 1], 1e12),
        _ => (s, 1.0),
    };
    number.trim().parse::<f64>().ok().map(|n| n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_sort_by_their_number() {
        assert_eq!(parse_size("0.5B"), Some(0.5e9));
        assert_eq!(parse_size("135M"), Some(135e6));
        assert_eq!(parse_size("big"), None);
    }
}
