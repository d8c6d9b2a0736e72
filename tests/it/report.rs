//! `report`: one self-contained HTML file, or none. What the page shows is tested in a real
//! browser (python/tests/test_report.py); here, the file itself: it embeds everything (no
//! URL it could load), the labels only inside the base64 data, and bad input writes nothing.

use crate::common::{expect_success, model_dir, run_cli};

#[test]
fn a_report_embeds_its_code_and_data_and_loads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let label = "a<b>c&d";
    let model = format!("{label}={}", model_dir("sink").display());
    let args = [
        "analyze",
        &model,
        "--seq-len",
        "32",
        "--num-seqs",
        "2",
        "--out",
        "res",
        "-q",
    ];
    expect_success(&run_cli(dir.path(), &args));
    expect_success(&run_cli(
        dir.path(),
        &["report", "res", "--out", "page.html"],
    ));
    let page = std::fs::read_to_string(dir.path().join("page.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("echarts"));
    assert!(
        page.contains("default-src 'none'"),
        "the page's policy allows no request"
    );
    for loads in [
        "src=\"http",
        "href=\"http",
        "src='http",
        "<link",
        "@import",
        "url(http",
    ] {
        assert!(!page.contains(loads), "{loads}");
    }
    assert!(!page.contains(label), "labels are data, not markup");
    // nothing is left beside the page
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn a_report_of_no_tables_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let o = run_cli(dir.path(), &["report", "empty", "--out", "page.html"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("empty: no tables to report"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);
    let o = run_cli(dir.path(), &["report", "missing", "--out", "page.html"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!dir.path().join("page.html").exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}
