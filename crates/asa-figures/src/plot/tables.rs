//! `tables4_5.md`: paper Table 4 (gradient-norm statistics, from `grad_stats.csv`) and
//! Table 5 (spike counts per k, from `spikes.csv`) as Markdown, from the exported tables.

use std::collections::BTreeMap;

use super::data::{Cols, Results};
use super::FigureError;
use asa_logs::num;

/// A run or metric name as a Markdown table cell (escaped as the paper's tables escape it).
fn name_cell(v: Option<&str>) -> String {
    crate::paper::typeset::markdown_cell(v.unwrap_or("-"))
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), num)
}

fn int_cell(v: Option<i64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// `6`, `4.5`: k as written in a header.
fn k_label(k: f64) -> String {
    if k.fract() == 0.0 && k.abs() < 1e15 {
        format!("{}", k as i64)
    } else {
        format!("{k}")
    }
}

/// Table 4 rows: one per run (and metric), Mean | Std | Var | CV | n over the window.
fn table4(res: &Results) -> std::result::Result<String, FigureError> {
    let t = res
        .get("grad_stats")
        .ok_or(FigureError::no_table("grad_stats"))?;
    let c = Cols::new(t, "grad_stats.csv");
    let (run, mean, std, var, cv) = (
        c.text("run")?,
        c.num("mean")?,
        c.num("std")?,
        c.num("var")?,
        c.num("cv")?,
    );
    let metric = c.text_or_empty("metric");
    let (start, end, n, ddof) = (
        c.int_or_empty("step_start"),
        c.int_or_empty("step_end"),
        c.int_or_empty("n"),
        c.int_or_empty("ddof"),
    );
    let window = |i: usize| window_cell(start[i], end[i]);
    let mut s = format!(
        "## Table 4: gradient-norm statistics\n\n\
         {STEPS_NOTE} Std and var with the ddof shown.\n\n\
         | Method | Metric | Steps | Mean | Std | Var | CV | n | ddof |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for i in 0..t.height() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            name_cell(run[i].as_deref()),
            name_cell(metric[i].as_deref()),
            window(i),
            cell(mean[i]),
            cell(std[i]),
            cell(var[i]),
            cell(cv[i]),
            int_cell(n[i]),
            int_cell(ddof[i]),
        ));
    }
    Ok(s)
}

/// A step window in the notation of `--steps`: `a..b` (from a up to but not including b,
/// as exported), `a..`, `..b`, or `all` when unbounded.
fn window_cell(start: Option<i64>, end: Option<i64>) -> String {
    match (start, end) {
        (Some(a), Some(b)) => format!("{a}..{b}"),
        (Some(a), None) => format!("{a}.."),
        (None, Some(b)) => format!("..{b}"),
        (None, None) => "all".into(),
    }
}

/// What the Steps column means, said once under each table's title.
const STEPS_NOTE: &str = "Steps: the step window as `--steps` writes it, a..b from step a \
                          up to but not including b (a.. and ..b open on one side); all: \
                          every logged step.";

/// Table 5 rows: one per run (and metric) and step window, the spike count for each k,
/// then median, MAD.
fn table5(res: &Results) -> std::result::Result<String, FigureError> {
    let t = res.get("spikes").ok_or(FigureError::no_table("spikes"))?;
    let c = Cols::new(t, "spikes.csv");
    let (run, k, count) = (c.text("run")?, c.num("k")?, c.num("count")?);
    let (metric, median, mad, scale) = (
        c.text_or_empty("metric"),
        c.num_or_empty("median"),
        c.num_or_empty("mad"),
        c.num_or_empty("mad_scale"),
    );
    let (start, end) = (c.int_or_empty("step_start"), c.int_or_empty("step_end"));
    let mut ks: Vec<f64> = k
        .iter()
        .flatten()
        .copied()
        .filter(|k| k.is_finite())
        .collect();
    ks.sort_by(f64::total_cmp);
    ks.dedup();
    // (run, metric, window) in first-seen order -> (k -> count, median, mad).
    let mut order: Vec<(String, String, String)> = Vec::new();
    type Row = (BTreeMap<u64, f64>, Option<f64>, Option<f64>);
    let mut rows: BTreeMap<(String, String, String), Row> = BTreeMap::new();
    for i in 0..t.height() {
        let key = (
            run[i].clone().unwrap_or_else(|| "-".into()),
            metric[i].clone().unwrap_or_else(|| "-".into()),
            window_cell(start[i], end[i]),
        );
        if !rows.contains_key(&key) {
            order.push(key.clone());
        }
        let row = rows.entry(key).or_default();
        if let (Some(k), Some(n)) = (k[i], count[i]) {
            row.0.insert(k.to_bits(), n);
        }
        row.1 = row.1.or(median[i]);
        row.2 = row.2.or(mad[i]);
    }
    let scales: Vec<f64> = scale.iter().flatten().copied().collect();
    let scale_note = match scales.first() {
        Some(&s) if s != 1.0 => format!("MAD scaled by {s}"),
        Some(_) => "MAD unscaled".into(),
        None => "MAD as exported".into(),
    };
    let mut s = format!(
        "## Table 5: gradient-norm spikes\n\n\
         Spikes: steps with g > median + k * MAD ({scale_note}), median and MAD over the \
         run's step window. {STEPS_NOTE}\n\n| Method | Metric | Steps |"
    );
    for &k in &ks {
        s.push_str(&format!(" k = {} |", k_label(k)));
    }
    s.push_str(" Median | MAD |\n|---|---|---|");
    s.push_str(&"---:|".repeat(ks.len() + 2));
    s.push('\n');
    for key in &order {
        let (counts, med, mad) = &rows[key];
        s.push_str(&format!(
            "| {} | {} | {} |",
            name_cell(Some(&key.0)),
            name_cell(Some(&key.1)),
            key.2
        ));
        for k in &ks {
            let n = counts
                .get(&k.to_bits())
                .map_or("-".into(), |n| format!("{n}"));
            s.push_str(&format!(" {n} |"));
        }
        s.push_str(&format!(" {} | {} |\n", cell(*med), cell(*mad)));
    }
    Ok(s)
}

/// The Markdown of Tables 4 and 5 and notes for a missing one; an error when both are
/// missing.
pub fn tables4_5(res: &Results) -> std::result::Result<(String, Vec<String>), FigureError> {
    let mut notes = Vec::new();
    let mut parts = Vec::new();
    for (made, what) in [(table4(res), "Table 4"), (table5(res), "Table 5")] {
        match made {
            Ok(text) => parts.push(text),
            Err(why) => notes.push(format!("{what} left out ({why})")),
        }
    }
    if parts.is_empty() {
        return Err(FigureError::NoTables {
            tables: &["grad_stats", "spikes"],
        });
    }
    let mut s = String::from(
        "# Tables 4 and 5\n\nRendered by `asa-analyze figures` from the exported tables.\n\n",
    );
    s.push_str(&parts.join("\n"));
    Ok((s, notes))
}
