//! `asa-analyze demo` end to end with a reduced budget (issue 6): every table and every
//! figure is produced, the summary is printed, and a second run reuses the training.

use std::path::Path;
use std::process::Command;

use asa_figures::plot::FIGURES;

fn demo(out: &Path, extra: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(["demo", "--steps", "20", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn demo_produces_every_table_and_figure_and_reuses_training() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("demo");
    let first = demo(&out, &["--quiet"]);
    let stdout = String::from_utf8_lossy(&first.stdout);
    for method in ["baseline", "sink", "asa", "gated", "asa_gated"] {
        let run = out.join("runs").join(method);
        assert!(
            run.join("log.csv").is_file() && run.join("train.json").is_file(),
            "{method}"
        );
        // a checkpoint series: step-2 .. step-20 every 2 steps
        for step in (2..=20).step_by(2) {
            let ckpt = run.join(format!("checkpoints/step-{step}"));
            for file in ["config.json", "model.safetensors", "tokenizer.json"] {
                assert!(ckpt.join(file).is_file(), "{}", ckpt.join(file).display());
            }
        }
        assert!(
            stdout.lines().any(|l| l.starts_with(method)),
            "summary lacks {method}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("final_loss") && stdout.contains("perplexity"),
        "{stdout}"
    );
    let page = std::fs::read_to_string(out.join("report.html")).expect("the demo's report");
    assert!(page.starts_with("<!DOCTYPE html>"));
    let results = out.join("results");
    for table in [
        "attention/attention.csv",
        "attention/weight_sum_hist.csv",
        "attention/heatmap.csv",
        "attention/query_profile.csv",
        "attention/distance_profile.csv",
        "attention/nll_position.csv",
        "attention/qk_series.csv",
        "grad_stats/grad_stats.csv",
        "spikes/spikes.csv",
        "spikes/spike_steps.csv",
        "curves/curves.csv",
    ] {
        let path = results.join(table);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{table} missing"));
        assert!(text.lines().count() >= 2, "{table} has no rows");
    }
    // every table has its schema's columns (qk_series and paper_tables only here)
    let checked: Vec<String> = ["attention", "grad_stats", "spikes", "curves", "tables"]
        .iter()
        .flat_map(|sub| crate::schema::check_tables(&results.join(sub)))
        .collect();
    for table in ["qk_series", "paper_tables", "grad_stats", "curves"] {
        assert!(checked.iter().any(|t| t == table), "{table}: {checked:?}");
    }
    // the paper's Tables 1-2 of the demo's models: Delta Params, loss, perplexity; the
    // accuracy columns empty with their footnote (no --lm-eval)
    for (n, rows) in [
        (1, ["Baseline", "Sink", "Affine-Scaled"]),
        (2, ["Baseline", "Gated", "Affine-Scaled + Gated"]),
    ] {
        let md = std::fs::read_to_string(results.join(format!("tables/table{n}.md"))).unwrap();
        for row in rows {
            let line = md
                .lines()
                .find(|l| l.contains(&format!("| {row} |")))
                .unwrap_or_else(|| panic!("{row}: {md}"));
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // | size | method | delta | loss | ppl | 6 tasks | avg |
            assert!(
                cells[3].parse::<f64>().is_ok()
                    && cells[4].parse::<f64>().is_ok()
                    && cells[5].parse::<f64>().is_ok(),
                "{line}"
            );
            assert!(cells[6..13].iter().all(|c| c.is_empty()), "{line}");
        }
        assert!(md.contains("every row: WinoGrande, PIQA, HellaSwag, ARC-c, ARC-e, BoolQ, Avg. empty: no lm-eval-harness result"), "{md}");
        assert!(results.join(format!("tables/table{n}.tex")).is_file());
    }
    let qk = std::fs::read_to_string(results.join("attention/qk_series.csv")).unwrap();
    assert_eq!(
        qk.lines().count(),
        1 + 5 * 10,
        "ten checkpoints per method:\n{qk}"
    );
    for (name, _) in FIGURES {
        for ext in ["png", "svg"] {
            let path = out.join("figures").join(format!("{name}.{ext}"));
            assert!(path.is_file(), "{} missing", path.display());
        }
    }
    assert!(out.join("figures/tables4_5.md").is_file());

    // a second run reuses the finished training
    let log = out.join("runs/asa/log.csv");
    let before = std::fs::metadata(&log).unwrap().modified().unwrap();
    // with an lm-eval result for one model: its accuracy columns filled, the others empty
    let lm = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lm_eval/asa.json");
    let arg = format!("asa={}", lm.display());
    let second = demo(&out, &["--lm-eval", &arg]);
    assert!(String::from_utf8_lossy(&second.stderr).contains("reusing the finished asa run"));
    assert_eq!(std::fs::metadata(&log).unwrap().modified().unwrap(), before);
    let md = std::fs::read_to_string(results.join("tables/table1.md")).unwrap();
    let asa = md
        .lines()
        .find(|l| l.contains("| Affine-Scaled |"))
        .unwrap();
    let winogrande = asa.split('|').map(str::trim).nth(6).unwrap();
    assert_eq!(winogrande.trim_matches('*'), "50.00", "{md}");
    assert!(md.contains("demo Baseline; demo Sink: WinoGrande"), "{md}");
}
