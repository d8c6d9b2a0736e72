//! The tables as the paper lays them out (Markdown and LaTeX booktabs, best accuracy within
//! a size in bold, missing cells empty with a footnote) and as one tidy table (one row per
//! table x size x method x column) for polars.

use std::fmt::Write;

use super::layout::{PaperRow, PaperTable};
use super::values::{Cell, RunValues, TASKS};
use asa_tables::{schema, Column, Table};

/// A column of the tables.
struct Col {
    key: &'static str,
    title: &'static str,
    latex: &'static str,
    unit: &'static str,
    /// Accuracy columns: the best within a size is bold.
    accuracy: bool,
}

fn columns() -> Vec<Col> {
    let mut cols = vec![
        Col {
            key: "delta_params_m",
            title: "ΔParams (M)",
            latex: r"$\Delta$Params (M)",
            unit: "M",
            accuracy: false,
        },
        Col {
            key: "loss",
            title: "Loss",
            latex: "Loss",
            unit: "nats",
            accuracy: false,
        },
        Col {
            key: "ppl",
            title: "PPL",
            latex: "PPL",
            unit: "",
            accuracy: false,
        },
    ];
    cols.extend(TASKS.iter().map(|t| Col {
        key: t.key,
        title: t.display,
        latex: t.display,
        unit: "%",
        accuracy: true,
    }));
    cols.push(Col {
        key: "avg",
        title: "Avg.",
        latex: "Avg.",
        unit: "%",
        accuracy: true,
    });
    cols
}

/// A row's cells in column order.
fn cells(v: &RunValues) -> Vec<&Cell> {
    let mut out = vec![&v.delta_params_m, &v.loss, &v.ppl];
    out.extend(v.accuracy.iter());
    out.push(&v.average);
    out
}

/// The number as the table shows it.
fn shown(col: &Col, value: f64) -> String {
    match col.key {
        "delta_params_m" if value == 0.0 => "0".into(),
        "delta_params_m" => {
            // four significant digits, never in exponent form
            let digits = 3 - value.abs().log10().floor() as i32;
            let text = format!("{value:.*}", digits.clamp(0, 9) as usize);
            match text.contains('.') {
                true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
                false => text,
            }
        }
        "loss" => format!("{value:.3}"),
        _ => format!("{value:.2}"),
    }
}

/// Per row and column, whether the cell is the best accuracy of its size (ties all bold;
/// nothing bold in a size with one value).
fn bold(table: &PaperTable) -> Vec<Vec<bool>> {
    let cols = columns();
    let mut marks = vec![vec![false; cols.len()]; table.rows.len()];
    for (c, col) in cols.iter().enumerate() {
        if !col.accuracy {
            continue;
        }
        for size in sizes(&table.rows) {
            let group: Vec<(usize, f64)> = table
                .rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.size == size)
                .filter_map(|(i, r)| cells(&r.values)[c].value().map(|v| (i, v)))
                .collect();
            if group.len() < 2 {
                continue;
            }
            let best = group.iter().map(|(_, v)| *v).fold(f64::MIN, f64::max);
            for (i, v) in group {
                // as shown: two decimals that print the same are a tie
                if shown(col, v) == shown(col, best) {
                    marks[i][c] = true;
                }
            }
        }
    }
    marks
}

fn sizes(rows: &[PaperRow]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        if !out.contains(&r.size) {
            out.push(r.size.clone());
        }
    }
    out
}

/// The footnotes: the table's notes, each value's caveat, and the empty cells grouped by
/// reason (rows with the same empty columns for the same reason in one note).
fn footnotes(table: &PaperTable) -> Vec<String> {
    let cols = columns();
    let mut notes = table.notes.clone();
    // (reason, columns) -> rows
    type Empty<'a> = ((String, Vec<&'a str>), Vec<String>);
    let mut empty: Vec<Empty> = Vec::new();
    for row in &table.rows {
        let name = format!("{} {}", row.size, row.method.display());
        let mut by_reason: Vec<(String, Vec<&str>)> = Vec::new();
        for (col, cell) in cols.iter().zip(cells(&row.values)) {
            match cell {
                Cell::Missing(reason) => match by_reason.iter_mut().find(|(r, _)| r == reason) {
                    Some((_, titles)) => titles.push(col.title),
                    None => by_reason.push((reason.clone(), vec![col.title])),
                },
                Cell::Value {
                    note: Some(note), ..
                } => notes.push(format!("{name}: {note}")),
                Cell::Value { .. } => {}
            }
        }
        for key in by_reason {
            match empty.iter_mut().find(|(k, _)| *k == key) {
                Some((_, rows)) => rows.push(name.clone()),
                None => empty.push((key, vec![name.clone()])),
            }
        }
    }
    for ((reason, titles), rows) in empty {
        let which = match rows.len() == table.rows.len() && rows.len() > 1 {
            true => "every row".to_string(),
            false => rows.join("; "),
        };
        notes.push(format!("{which}: {} empty: {reason}", titles.join(", ")));
    }
    notes
}

/// A row's cells as shown, the bold ones through `bold`, empty ones empty.
fn row_texts(row: &PaperRow, bold_marks: &[bool], bold: impl Fn(String) -> String) -> Vec<String> {
    columns()
        .iter()
        .zip(cells(&row.values))
        .zip(bold_marks)
        .map(|((col, cell), &b)| match cell.value() {
            Some(v) if b => bold(shown(col, v)),
            Some(v) => shown(col, v),
            None => String::new(),
        })
        .collect()
}

/// The table in Markdown, its caption first and its footnotes after.
pub fn markdown(table: &PaperTable) -> String {
    let cols = columns();
    let marks = bold(table);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "**Table {}.** {}. Zero-shot accuracy (%) from lm-eval-harness; the best accuracy within a size in bold.\n",
        table.number, table.caption
    );
    let titles: Vec<&str> = cols.iter().map(|c| c.title).collect();
    let _ = writeln!(out, "| Size | Method | {} |", titles.join(" | "));
    let _ = writeln!(out, "|---|---|{}", "---:|".repeat(cols.len()));
    let mut last_size = None;
    for (i, row) in table.rows.iter().enumerate() {
        let size = match last_size == Some(&row.size) {
            true => String::new(),
            false => markdown_cell(&row.size),
        };
        last_size = Some(&row.size);
        let shown_cells = row_texts(row, &marks[i], |t| format!("**{t}**"));
        let _ = writeln!(
            out,
            "| {size} | {} | {} |",
            markdown_cell(row.method.display()),
            shown_cells.join(" | ")
        );
    }
    let notes = footnotes(table);
    if !notes.is_empty() {
        out.push('\n');
        for (i, note) in notes.iter().enumerate() {
            let _ = writeln!(out, "{}. {note}", i + 1);
        }
    }
    out
}

/// A name as a Markdown table cell: the characters that would end the cell (`|`) or format
/// it (`\`, `*`, `` ` ``, `<`, `>`, `[`, `]`) backslash-escaped, control characters (a line
/// break would end the row) as spaces.
pub fn markdown_cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\\' | '|' | '*' | '`' | '<' | '>' | '[' | ']' => {
                out.push('\\');
                out.push(ch);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// LaTeX special characters escaped.
fn tex(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str(r"\textbackslash{}"),
            '_' | '%' | '&' | '#' | '$' | '{' | '}' => {
                out.push('\\');
                out.push(ch);
            }
            '~' => out.push_str(r"\textasciitilde{}"),
            '|' => out.push_str(r"\textbar{}"),
            '<' => out.push_str(r"\textless{}"),
            '>' => out.push_str(r"\textgreater{}"),
            '^' => out.push_str(r"\textasciicircum{}"),
            'Δ' => out.push_str(r"$\Delta$"),
            _ => out.push(ch),
        }
    }
    out
}

/// The table in LaTeX (booktabs), ready to paste: a rule between sizes, bold bests, the
/// footnotes under the tabular.
pub fn latex(table: &PaperTable) -> String {
    let cols = columns();
    let marks = bold(table);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "% Table {} (asa-analyze tables); needs \\usepackage{{booktabs}}",
        table.number
    );
    let _ = writeln!(out, "\\begin{{table}}[t]\n\\centering\\small");
    let _ = writeln!(
        out,
        "\\caption{{{}. Zero-shot accuracy (\\%) from lm-eval-harness; the best accuracy within a size in bold.}}",
        tex(&table.caption)
    );
    let _ = writeln!(out, "\\label{{tab:asa-table{}}}", table.number);
    let _ = writeln!(out, "\\begin{{tabular}}{{ll{}}}", "r".repeat(cols.len()));
    let _ = writeln!(out, "\\toprule");
    let titles: Vec<&str> = cols.iter().map(|c| c.latex).collect();
    let _ = writeln!(out, "Size & Method & {} \\\\", titles.join(" & "));
    let _ = writeln!(out, "\\midrule");
    let mut last_size: Option<&String> = None;
    for (i, row) in table.rows.iter().enumerate() {
        let size = match last_size {
            Some(s) if s == &row.size => String::new(),
            Some(_) => {
                let _ = writeln!(out, "\\midrule");
                tex(&row.size)
            }
            None => tex(&row.size),
        };
        last_size = Some(&row.size);
        let shown_cells = row_texts(row, &marks[i], |t| format!("\\textbf{{{t}}}"));
        let _ = writeln!(
            out,
            "{size} & {} & {} \\\\",
            tex(row.method.display()),
            shown_cells.join(" & ")
        );
    }
    let _ = writeln!(out, "\\bottomrule\n\\end{{tabular}}");
    let notes = footnotes(table);
    if !notes.is_empty() {
        let _ = writeln!(out, "\\par\\smallskip\\footnotesize");
        for (i, note) in notes.iter().enumerate() {
            let _ = writeln!(out, "{}. {}\\\\", i + 1, tex(note));
        }
    }
    let _ = writeln!(out, "\\end{{table}}");
    out
}

/// Every table as one tidy table `paper_tables`: table, size, method, method_name, column,
/// value (as shown: accuracies in percent, Delta Params in millions), stderr, unit, source,
/// missing (why a value is empty).
pub fn tidy(tables: &[PaperTable]) -> Table {
    let cols = columns();
    let (mut number, mut size, mut method, mut name) = (vec![], vec![], vec![], vec![]);
    let (mut column, mut value, mut stderr, mut unit) = (vec![], vec![], vec![], vec![]);
    let (mut source, mut missing) = (vec![], vec![]);
    for t in tables {
        for row in &t.rows {
            for (col, cell) in cols.iter().zip(cells(&row.values)) {
                number.push(Some(t.number as i64));
                size.push(Some(row.size.clone()));
                method.push(Some(row.method.key().to_string()));
                name.push(Some(row.method.display().to_string()));
                column.push(Some(col.key.to_string()));
                unit.push(Some(col.unit.to_string()));
                match cell {
                    Cell::Value {
                        value: v,
                        stderr: e,
                        source: s,
                        ..
                    } => {
                        value.push(Some(*v));
                        stderr.push(*e);
                        source.push(Some(s.clone()));
                        missing.push(None);
                    }
                    Cell::Missing(reason) => {
                        value.push(None);
                        stderr.push(None);
                        source.push(None);
                        missing.push(Some(reason.clone()));
                    }
                }
            }
        }
    }
    schema::PAPER_TABLES.build(vec![
        ("table", Column::Int(number)),
        ("size", Column::Str(size)),
        ("method", Column::Str(method)),
        ("method_name", Column::Str(name)),
        ("column", Column::Str(column)),
        ("value", Column::Float(value)),
        ("stderr", Column::Float(stderr)),
        ("unit", Column::Str(unit)),
        ("source", Column::Str(source)),
        ("missing", Column::Str(missing)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paper::Method;
    use asa_core::variant::VariantKind;

    fn value(v: f64) -> Cell {
        Cell::Value {
            value: v,
            stderr: None,
            source: String::new(),
            note: None,
        }
    }

    fn row(method: Method, acc: [Option<f64>; 6]) -> PaperRow {
        let accuracy: Vec<Cell> = acc
            .iter()
            .map(|a| a.map_or(Cell::Missing("no lm-eval".into()), value))
            .collect();
        PaperRow {
            size: "1B".into(),
            method,
            values: RunValues {
                delta_params_m: value(0.000512),
                loss: value(2.5),
                ppl: Cell::Missing("no analyze results".into()),
                average: Cell::Missing("n/a".into()),
                accuracy,
            },
        }
    }

    #[test]
    fn best_in_bold_empty_cells_with_notes() {
        let table = PaperTable {
            number: 1,
            caption: "c".into(),
            rows: vec![
                row(
                    Method::BASELINE,
                    [Some(50.0), Some(60.004), None, None, None, None],
                ),
                row(
                    Method::Variant(VariantKind::AffineScaled),
                    [Some(51.0), Some(60.001), None, None, None, None],
                ),
            ],
            notes: vec![],
        };
        let md = markdown(&table);
        let lines: Vec<&str> = md.lines().collect();
        let base = lines.iter().find(|l| l.contains("| Baseline |")).unwrap();
        let asa = lines
            .iter()
            .find(|l| l.contains("| Affine-Scaled |"))
            .unwrap();
        assert!(base.contains("| 50.00 | **60.00** |"), "{base}");
        assert!(asa.contains("| **51.00** | **60.00** |"), "{asa}");
        assert!(
            base.starts_with("| 1B | Baseline | 0.000512 | 2.500 |  |"),
            "{base}"
        );
        assert!(asa.starts_with("|  | Affine-Scaled |"), "{asa}");
        assert!(
            md.contains("every row: PPL empty: no analyze results"),
            "{md}"
        );
        assert!(
            md.contains("every row: HellaSwag, ARC-c, ARC-e, BoolQ empty: no lm-eval"),
            "{md}"
        );
        let tex = latex(&table);
        assert!(
            tex.contains(r"\textbf{51.00}") && tex.contains(r"\toprule"),
            "{tex}"
        );
        let t = tidy(&[table]);
        assert_eq!(t.height(), 2 * 10);
    }
}
