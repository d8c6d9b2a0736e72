//! Every table a real `analyze` run and the log commands write has exactly the columns its
//! schema declares (`asa_tables::schema`), in order, of the declared kinds.

use std::path::Path;

use asa_tables::schema::{schema, ColumnKind};
use asa_tables::{read_table, Column};

use crate::common::{expect_success, model_dir, run_cli};

/// Whether `column`, as read back from CSV, holds values of `kind`: an empty column reads
/// as text, and a float column of only NaN may too.
fn holds(kind: ColumnKind, column: &Column) -> bool {
    match (kind, column) {
        (ColumnKind::Text, Column::Str(_)) => true,
        (ColumnKind::Int, Column::Int(_)) | (ColumnKind::Float, Column::Float(_)) => true,
        (ColumnKind::Int | ColumnKind::Float, Column::Str(v)) => v.iter().all(|c| {
            c.as_deref()
                .is_none_or(|c| kind == ColumnKind::Float && c.parse::<f64>().is_ok())
        }),
        _ => false,
    }
}

/// Checks every CSV table of `dir` that has a schema; the names of those checked.
pub fn check_tables(dir: &Path) -> Vec<String> {
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "csv") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        let Some(schema) = schema(&stem) else {
            continue;
        };
        let table = read_table(&path).unwrap();
        let names: Vec<&str> = table.columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, schema.names(), "{}", path.display());
        for (spec, (_, column)) in schema.columns.iter().zip(&table.columns) {
            assert!(
                holds(spec.kind, column),
                "{}: column {} is not {:?}",
                path.display(),
                spec.name,
                spec.kind
            );
        }
        checked.push(stem);
    }
    checked.sort();
    checked
}

#[test]
fn analyze_and_log_tables_have_their_schemas() {
    let tmp = tempfile::tempdir().unwrap();
    let model = format!("m={}", model_dir("llama_gqa").display());
    let metrics = "first_token,sink_rate,entropy,weight_sum,head_total,qk_mean,sink_mass,nll,\
                   heatmap,query_profile,distance_profile,max_logit,key_received";
    let out = run_cli(
        tmp.path(),
        &[
            "analyze",
            &model,
            "--seq-len",
            "32",
            "--num-seqs",
            "2",
            "--metrics",
            metrics,
            "--quiet",
            "--out",
            "a",
        ],
    );
    expect_success(&out);
    let checked = check_tables(&tmp.path().join("a"));
    for table in [
        "attention",
        "distance_profile",
        "heatmap",
        "key_received",
        "nll_bins",
        "nll_position",
        "query_profile",
        "weight_sum_hist",
    ] {
        assert!(checked.contains(&table.to_string()), "{table}: {checked:?}");
    }

    let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    let runs = ["hand.csv", "noisy.csv"].map(|f| logs.join(f).display().to_string());
    for (cmd, extra, tables) in [
        ("grad-stats", &["--steps", "all"][..], &["grad_stats"][..]),
        ("spikes", &[], &["spike_steps", "spikes"]),
        ("curves", &["--ema", "0.9"], &["curves"]),
    ] {
        let mut args = vec![cmd, &runs[0], &runs[1], "--quiet", "--out", cmd];
        args.extend(extra);
        expect_success(&run_cli(tmp.path(), &args));
        assert_eq!(check_tables(&tmp.path().join(cmd)), tables, "{cmd}");
    }
}
