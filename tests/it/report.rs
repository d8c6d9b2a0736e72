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

/// Issue 54: an output never lands on an input or through what is already there. A table of
/// the results read, a folder, a FIFO and a symlink as `--out` are refused before any work
/// (exit 2, nothing changed); a regular file is replaced whole.
#[cfg(unix)]
#[test]
fn a_report_never_replaces_an_input_or_writes_through_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = format!("m={}", model_dir("sink").display());
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
    expect_success(&run_cli(root, &args));
    let table = std::fs::read(root.join("res/attention.csv")).unwrap();
    std::fs::create_dir(root.join("folder")).unwrap();
    let fifo = root.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::write(root.join("victim"), b"keep me").unwrap();
    std::os::unix::fs::symlink(root.join("victim"), root.join("link.html")).unwrap();
    for (out, says) in [
        ("res/attention.csv", "a file of the results it reads"),
        ("folder", "not a regular file"),
        ("fifo", "not a regular file"),
        ("link.html", "not a regular file"),
    ] {
        let o = run_cli(root, &["report", "res", "--out", out]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{out}: {err}");
        assert!(
            err.contains(says) && err.trim().lines().count() == 1,
            "{out}: {err}"
        );
    }
    assert_eq!(
        std::fs::read(root.join("res/attention.csv")).unwrap(),
        table
    );
    assert_eq!(std::fs::read(root.join("victim")).unwrap(), b"keep me");
    // a regular file is replaced whole (the temporary file's planted names: a unit test)
    std::fs::write(root.join("page.html"), b"old page").unwrap();
    expect_success(&run_cli(root, &["report", "res", "--out", "page.html"]));
    let page = std::fs::read_to_string(root.join("page.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(std::fs::read(root.join("victim")).unwrap(), b"keep me");
}

/// Issue 54: memory bounded by what is written. A 20 KB block_map.parquet whose block edges
/// spread over 2,000 positions and whose rows each open a map of their own would lay out
/// 1,000 maps of 2 million cells (32 GB; a 281 KB file made `report` allocate 80 GB and
/// abort): refused in one line before any map is allocated, nothing written.
#[test]
fn a_block_map_claiming_more_cells_than_its_rows_is_refused_before_allocating() {
    use polars::prelude::*;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = format!("m={}", model_dir("sink").display());
    let args = [
        "analyze",
        &model,
        "--seq-len",
        "32",
        "--num-seqs",
        "2",
        "--metrics",
        "entropy",
        "--out",
        "res",
        "-q",
    ];
    expect_success(&run_cli(root, &args));
    let n = 1000i64;
    let lo: Vec<i64> = (0..n).map(|i| 2 * i).collect();
    let hi: Vec<i64> = (0..n).map(|i| 2 * i + 1).collect();
    let mut forged = df!(
        "model" => vec!["m"; n as usize],
        "layer" => (1..=n).collect::<Vec<i64>>(),
        "head" => vec![Some(1i64); n as usize],
        "q_lo" => lo.clone(),
        "q_hi" => hi.clone(),
        "k_lo" => lo,
        "k_hi" => hi,
        "stat" => vec!["mean"; n as usize],
        "value" => vec![0.5f64; n as usize],
    )
    .unwrap();
    let file = std::fs::File::create(root.join("res/block_map.parquet")).unwrap();
    ParquetWriter::new(file).finish(&mut forged).unwrap();
    let o = run_cli(root, &["report", "res", "--out", "page.html"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("block_map.parquet") && err.contains("far more than its 1000 rows describe"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!root.join("page.html").exists());
}

/// Issue 54: memory bounded by what is written, the fuzz hour's one defect. A page header
/// of attention.parquet claiming -37 values (a committed fixture: the fuzz case's folder)
/// made polars reserve 2^61 bytes: the binary's allocator backstop ended it with a message
/// about `--seq-len`, the Python interpreter aborted. The table's own counts are checked
/// first: one line naming the file, the column and the count; nothing written.
#[test]
fn a_parquet_page_claiming_values_its_column_has_not_is_refused_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let damaged = crate::common::fixtures().join("damaged/negative_page_values");
    let o = run_cli(
        root,
        &["report", damaged.to_str().unwrap(), "--out", "page.html"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("attention.parquet: damaged Parquet table: row group 0, column stat")
            && err.contains("values -37, outside 0..=16"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!root.join("page.html").exists());
}

/// Issue 54: numbers a model cannot have are refused. A table claiming layer 1e9 made a
/// page whose layers x heads grid hung the browser (exit 0 before).
#[test]
fn a_table_claiming_a_layer_no_model_has_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let model = format!("m={}", model_dir("sink").display());
    let args = [
        "analyze",
        &model,
        "--seq-len",
        "32",
        "--num-seqs",
        "2",
        "--metrics",
        "entropy",
        "--out",
        "res",
        "-q",
    ];
    expect_success(&run_cli(root, &args));
    let path = root.join("res/attention.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let (layer, head) = (
        header.iter().position(|h| *h == "layer").unwrap(),
        header.iter().position(|h| *h == "head").unwrap(),
    );
    let row = lines.iter().position(|l| {
        let f: Vec<&str> = l.split(',').collect();
        f.len() > head && !f[head].is_empty() && f[layer] != "layer"
    });
    let row = row.expect("a per-head row");
    let mut fields: Vec<String> = lines[row].split(',').map(str::to_string).collect();
    fields[layer] = "1000000000".into();
    lines[row] = fields.join(",");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let o = run_cli(root, &["report", "res", "--out", "page.html"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("attention: layer 1000000000") && err.contains("rows describe"),
        "{err}"
    );
    assert!(!root.join("page.html").exists());
}

/// The page's data and its block-map blob, read back from the file as a browser would
/// (base64, gzip), independently of the encoder.
fn page_payload(page: &str) -> (serde_json::Value, String) {
    use std::io::Read;
    let between = |open: &str| {
        let start = page.find(open).expect(open) + open.len();
        page[start..start + page[start..].find("</script>").unwrap()]
            .trim()
            .to_string()
    };
    let data = between(r#"<script id="report-data" type="application/octet-stream">"#);
    let mut json = String::new();
    flate2::read::GzDecoder::new(&gunbase64(&data)[..])
        .read_to_string(&mut json)
        .unwrap();
    let blob = between(r#"<script id="block-maps" type="application/octet-stream">"#);
    (serde_json::from_str(&json).unwrap(), blob)
}

fn gunbase64(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

/// One map's codes from its text in the blob: gunzip, then each row's differences from the
/// row above added back (docs/report.md states the format).
fn map_codes(blob: &str, at: usize, len: usize) -> Vec<u8> {
    use std::io::Read;
    let mut d = Vec::new();
    flate2::read::GzDecoder::new(&gunbase64(&blob[at..at + len])[..])
        .read_to_end(&mut d)
        .unwrap();
    let mut c = d.clone();
    let (mut row, mut start) = (0, 0);
    while start < d.len() {
        for b in 0..row {
            c[start + b] = d[start + b].wrapping_add(c[start - row + b]);
        }
        row += 1;
        start += row;
    }
    c
}

#[test]
fn a_reports_block_maps_read_back_within_their_stated_error() {
    use asa_tables::{read_table, Column};
    let dir = tempfile::tempdir().unwrap();
    let model = format!("m={}", model_dir("sink").display());
    let args = [
        "analyze",
        &model,
        "--seq-len",
        "48",
        "--num-seqs",
        "2",
        "--metrics",
        "first_token,heatmap,block_map",
        "--map-size",
        "12",
        "--out",
        "res",
        "-q",
    ];
    expect_success(&run_cli(dir.path(), &args));
    // heatmap on 48 <= 2048 tokens: the first window's tokens, for the tokens view
    let tokens = read_table(&dir.path().join("res/tokens.csv")).unwrap();
    assert_eq!(tokens.height(), 48);
    expect_success(&run_cli(
        dir.path(),
        &["report", "res", "--out", "page.html"],
    ));
    let page = std::fs::read_to_string(dir.path().join("page.html")).unwrap();
    let (data, blob) = page_payload(&page);
    assert_eq!(
        data["tables"]["tokens"]["position"]
            .as_array()
            .unwrap()
            .len(),
        48
    );
    assert!(
        data["tables"].get("block_map").is_none(),
        "the maps travel compact only"
    );
    let index = &data["block_maps"]["m"];
    // 48 positions in 12 blocks of 4
    let bounds: Vec<i64> = serde_json::from_value(index["bounds"].clone()).unwrap();
    assert_eq!(bounds, (0..=12).map(|b| b * 4).collect::<Vec<_>>());
    let table = read_table(&dir.path().join("res/block_map.parquet")).unwrap();
    let col = |n: &str| table.column(n).unwrap().clone();
    let (Column::Int(layer), Column::Int(head), Column::Int(q_lo), Column::Int(k_lo)) =
        (col("layer"), col("head"), col("q_lo"), col("k_lo"))
    else {
        panic!("block_map's columns")
    };
    let (Column::Str(stat), Column::Float(value)) = (col("stat"), col("value")) else {
        panic!("block_map's columns")
    };
    let maps = index["maps"].as_array().unwrap();
    // 2 layers x (4 heads + the map over heads) x {mean, max}
    assert_eq!(maps.len(), 2 * 5 * 2);
    let mut checked = 0;
    for m in maps {
        let codes = map_codes(
            &blob,
            m["at"].as_u64().unwrap() as usize,
            m["len"].as_u64().unwrap() as usize,
        );
        assert_eq!(codes.len(), 12 * 13 / 2);
        let (lo, hi, err) = (
            m["lo"].as_f64().unwrap(),
            m["hi"].as_f64().unwrap(),
            m["error"].as_f64().unwrap(),
        );
        assert_eq!(m["scale"], "log", "softmax weights are positive");
        // eight decades over 253 steps at most: exp(ln(1e8) / 506) - 1
        assert!(err > 0.0 && err <= 0.0371, "{err}");
        for i in 0..table.height() {
            let same = layer[i] == m["layer"].as_i64()
                && head[i] == m["head"].as_i64()
                && stat[i].as_deref() == m["stat"].as_str();
            if !same {
                continue;
            }
            let (a, b) = (
                (q_lo[i].unwrap() / 4) as usize,
                (k_lo[i].unwrap() / 4) as usize,
            );
            let k = codes[a * (a + 1) / 2 + b];
            let want = value[i].unwrap();
            assert!(
                (1..=254).contains(&k),
                "a cell with pairs is not empty: {k}"
            );
            // the value of code k on the map's log scale
            let got = (lo.ln() + f64::from(k - 1) * (hi.ln() - lo.ln()) / 253.0).exp();
            if k == 1 && m["clipped"] == true {
                assert!(want <= got * (1.0 + err));
            } else {
                assert!(
                    (got / want - 1.0).abs() <= err * (1.0 + 1e-9),
                    "{got} vs {want} (±{err})"
                );
            }
            checked += 1;
        }
    }
    // every row of the table, each once: 2 layers x 5 maps x 78 cells x 2 stats
    assert_eq!((checked, table.height()), (2 * 5 * 78 * 2, 2 * 5 * 78 * 2));
}
