//! Issue 24: one regression test per class of defect a hostile-input probe found (the fuzz
//! harness in `fuzz.rs` keeps the classes closed in general).

use asa_core::checkpoint_problem::CheckpointProblem;
use candle_core::Device;

use crate::common::{
    analyze_briefly, copy_fixture, edit_config, expect_error, expect_success, fixtures, run_cli,
};

/// Class "silent garbage": a weight holding NaN is refused naming the tensor; with
/// `--allow-nonfinite` the run goes on and its metrics are NaN, the sink rate included (it
/// read 0.0 before: no head counted above the threshold).
#[test]
fn silent_garbage_nonfinite_weights_are_refused_or_give_nan_never_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("nan");
    copy_fixture("llama_gqa", &ckpt);
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ckpt.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let name = "model.layers.0.mlp.up_proj.weight";
    let shard = ckpt.join(index["weight_map"][name].as_str().unwrap());
    let mut tensors = candle_core::safetensors::load(&shard, &Device::Cpu).unwrap();
    let w = &tensors[name];
    let mut values = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[5] = f32::NAN;
    let poisoned = candle_core::Tensor::from_vec(values, w.dims(), &Device::Cpu).unwrap();
    tensors.insert(name.to_string(), poisoned);
    candle_core::safetensors::save(&tensors, &shard).unwrap();
    let run =
        |extra: &[&str], out: &str| analyze_briefly(tmp.path(), ckpt.to_str().unwrap(), out, extra);
    let stderr = expect_error(&run(&[], "refused"));
    assert!(
        stderr.contains(name) && stderr.contains("--allow-nonfinite"),
        "{stderr}"
    );
    let problem = crate::common::run_problem(&ckpt);
    assert_eq!(problem.tensor(), Some(name));
    assert!(
        matches!(&problem, CheckpointProblem::TensorData { detail, .. }
            if detail.starts_with("holds NaN at flat index 5")),
        "{problem:?}"
    );
    assert!(!tmp.path().join("refused").exists());
    expect_success(&run(&["--allow-nonfinite"], "allowed"));
    let table = std::fs::read_to_string(tmp.path().join("allowed/attention.csv")).unwrap();
    let sink_rate: Vec<&str> = table
        .lines()
        .filter(|l| l.split(',').nth(1) == Some("sink_rate"))
        .collect();
    assert_eq!(sink_rate.len(), 1, "{table}");
    let value = sink_rate[0].rsplit(',').next().unwrap();
    assert!(value.eq_ignore_ascii_case("nan"), "sink_rate {value}");
    // the weight and the first activation NaN entered at are named in run.json
    let run_json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("allowed/run.json")).unwrap(),
    )
    .unwrap();
    let first = &run_json["models"][0]["first_nonfinite"];
    assert!(first["weight"].as_str().unwrap().contains(name), "{first}");
    assert_eq!(first["activation"]["layer"], 1, "{first}");
    assert_eq!(first["activation"]["hook"], "hook_mlp_out", "{first}");
    // and on stderr, when not --quiet
    let loud = run_cli(
        tmp.path(),
        &[
            "nll",
            ckpt.to_str().unwrap(),
            "--seq-len",
            "16",
            "--num-seqs",
            "2",
            "--allow-nonfinite",
        ],
    );
    let stderr = String::from_utf8_lossy(&loud.stderr);
    assert!(
        stderr.contains("NaN or infinite from layer 1 hook_mlp_out on") && stderr.contains(name),
        "{stderr}"
    );
}

/// Class "concurrent runs": a second run into an `--out` that a live run is writing to is
/// refused, naming the first run's pid, and the first run's files are left alone.
#[test]
fn concurrent_runs_on_one_output_folder_are_refused_naming_the_first() {
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().unwrap();
    let model = crate::common::model_dir("llama_gqa");
    let args = |out: &str| {
        [
            "analyze",
            model.to_str().unwrap(),
            "--seq-len",
            "64",
            "--num-seqs",
            "100000",
            "--quiet",
            "--out",
            out,
        ]
        .map(String::from)
    };
    let mut first = Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(args("shared"))
        .current_dir(tmp.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let shared = tmp.path().join("shared");
    let started = std::time::Instant::now();
    let staging = || {
        std::fs::read_dir(&shared)
            .ok()
            .into_iter()
            .flatten()
            .any(|e| {
                let name = e.unwrap().file_name();
                name.to_string_lossy().starts_with(".asa-staging")
            })
    };
    while !staging() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the first run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let second = run_cli(tmp.path(), &args("shared").each_ref().map(String::as_str));
    let _ = first.kill();
    let _ = first.wait();
    let stderr = expect_error(&second);
    let pid = format!("pid {}", first.id());
    assert!(
        stderr.contains("another asa-analyze run") && stderr.contains(&pid),
        "{stderr}"
    );
}

/// Runs the binary with `args` in `dir`, killed after `limit`: `None` when it did not end.
fn run_within(
    dir: &std::path::Path,
    args: &[&str],
    limit: std::time::Duration,
) -> Option<std::process::Output> {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().unwrap())
}

/// Class "hang": values near the largest f64 in the tables (an attention value of 1.7e308
/// and -1.7e308, a grad norm of 1.7e308) are drawn as gaps; `figures` finishes.
#[test]
fn hang_figures_of_values_near_the_largest_float_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    std::fs::create_dir_all(&results).unwrap();
    for dir in ["tables/full", "tables/logs"] {
        for entry in std::fs::read_dir(crate::common::fixtures().join(dir)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), results.join(entry.file_name())).unwrap();
        }
    }
    let overflow = |file: &str, column: &str, values: &[&str]| {
        let path = results.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let at = lines[0].split(',').position(|c| c == column).unwrap();
        for (row, value) in values.iter().enumerate() {
            let mut cells: Vec<String> = lines[row + 1].split(',').map(String::from).collect();
            cells[at] = value.to_string();
            lines[row + 1] = cells.join(",");
        }
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    };
    overflow("attention.csv", "value", &["1.7e308", "-1.7e308"]);
    overflow("grad_stats.csv", "mean", &["1.7e308"]);
    overflow("curves.csv", "value", &["1.7e308"]);
    let figures = tmp.path().join("figures");
    let out = run_within(
        tmp.path(),
        &[
            "figures",
            results.to_str().unwrap(),
            "--out",
            figures.to_str().unwrap(),
        ],
        std::time::Duration::from_secs(120),
    )
    .expect("figures did not finish within 120 s");
    expect_success(&out);
    assert!(std::fs::read_dir(&figures).unwrap().count() > 3);
    // the values are gaps in the lines, and a note says so
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fig7_loss: 1 non-finite or overflowing loss values drawn as gaps"),
        "{stderr}"
    );
}

/// Class "panic": a GGUF header declaring an alignment of 0 (or one that is no power of
/// two) panicked with a division by zero inside the GGUF reader; it is a one-line error.
#[test]
fn panic_gguf_alignment_zero_or_not_a_power_of_two_is_an_error() {
    use candle_core::quantized::gguf_file::{self, Value};
    let source = crate::common::fixtures().join("gguf/llama_gqa.gguf");
    let mut file = std::fs::File::open(&source).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(&str, candle_core::quantized::QTensor)> = names
        .iter()
        .map(|n| {
            let t = content.tensor(&mut file, n, &Device::Cpu).unwrap();
            (n.as_str(), t)
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    for alignment in [0u32, 3] {
        let value = Value::U32(alignment);
        let mut metadata: Vec<(&str, &Value)> = content
            .metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        metadata.push(("general.alignment", &value));
        let path = tmp.path().join(format!("align{alignment}.gguf"));
        let mut out = std::fs::File::create(&path).unwrap();
        let refs: Vec<(&str, &candle_core::quantized::QTensor)> =
            tensors.iter().map(|(n, t)| (*n, t)).collect();
        gguf_file::write(&mut out, &metadata, &refs).unwrap();
        drop(out);
        let path = path.to_str().unwrap();
        for args in [vec!["inspect", path], vec!["analyze", path, "--out", "res"]] {
            let stderr = expect_error(&run_cli(tmp.path(), &args));
            assert!(stderr.contains("general.alignment"), "{stderr}");
        }
        assert_eq!(
            crate::common::open_problem(std::path::Path::new(path)),
            CheckpointProblem::out_of_range("general.alignment", alignment, "a power of two")
        );
    }
}

/// Class "odd corners": an index.json naming a shard outside the checkpoint folder is
/// refused (it opened the file). A CSV log or table starting with a UTF-8 byte-order mark is
/// read as without one: the csv crate and polars strip it (this guards that; the probe's
/// misleading BOM error was not reproduced here).
#[test]
fn odd_corners_shards_outside_the_folder_and_byte_order_marks() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("outside");
    copy_fixture("llama_gqa", &ckpt);
    let index_path = ckpt.join("model.safetensors.index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    let first = index["weight_map"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    std::fs::copy(
        ckpt.join(index["weight_map"][&first].as_str().unwrap()),
        tmp.path().join("elsewhere.safetensors"),
    )
    .unwrap();
    index["weight_map"][&first] = "../elsewhere.safetensors".into();
    std::fs::write(&index_path, index.to_string()).unwrap();
    let stderr = expect_error(&run_cli(tmp.path(), &["inspect", ckpt.to_str().unwrap()]));
    assert!(
        stderr.contains("model.safetensors.index.json: "),
        "{stderr}"
    );
    let problem = crate::common::open_problem(&ckpt);
    assert_eq!(problem.name(), "damaged");
    assert!(
        problem.to_string().contains("plain file names"),
        "{problem}"
    );

    let bom = |from: &std::path::Path, to: &std::path::Path| {
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend(std::fs::read(from).unwrap());
        std::fs::write(to, bytes).unwrap();
    };
    let log = tmp.path().join("bom.csv");
    bom(&crate::common::fixtures().join("logs/noisy.csv"), &log);
    expect_success(&run_cli(
        tmp.path(),
        &["spikes", log.to_str().unwrap(), "--out", "spikes"],
    ));
    let results = tmp.path().join("results");
    std::fs::create_dir_all(&results).unwrap();
    for entry in std::fs::read_dir(crate::common::fixtures().join("tables/full")).unwrap() {
        let entry = entry.unwrap();
        bom(&entry.path(), &results.join(entry.file_name()));
    }
    expect_success(&run_cli(
        tmp.path(),
        &["figures", results.to_str().unwrap(), "--out", "figs"],
    ));
}

/// Class "silent garbage": layers stored beyond `num_hidden_layers` were ignored without a
/// word (a perplexity of 51 became 357); they are refused, named, unless
/// `--ignore-unused-weights`.
#[test]
fn silent_garbage_layers_beyond_the_config_are_refused_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    copy_fixture("llama_gqa", &ckpt);
    crate::common::edit_config(&ckpt, |c| c["num_hidden_layers"] = 1.into());
    let args = [
        "analyze",
        "ckpt",
        "--seq-len",
        "16",
        "--num-seqs",
        "1",
        "--quiet",
        "--out",
        "res",
    ];
    let stderr = expect_error(&run_cli(tmp.path(), &args));
    assert!(
        stderr.contains("stored weights are not used by the config"),
        "{stderr}"
    );
    assert!(!tmp.path().join("res").exists());
    let CheckpointProblem::UnusedTensors { tensors } = crate::common::open_problem(&ckpt) else {
        panic!("not unused tensors")
    };
    assert!(
        !tensors.is_empty() && tensors.iter().all(|t| t.starts_with("model.layers.1.")),
        "{tensors:?}"
    );
    let mut ignoring = args.to_vec();
    ignoring.push("--ignore-unused-weights");
    expect_success(&run_cli(tmp.path(), &ignoring));
}

/// Class "malformed tables": a table cut off inside its last line (`24.53` left as `24`, a
/// number that reads as valid) was drawn from; `figures` refuses it, naming file and line.
/// So is a table lacking a column of the contract (SPEC section 6), named at its header.
#[test]
fn malformed_tables_a_truncated_table_is_refused_naming_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("results");
    std::fs::create_dir_all(&results).unwrap();
    for entry in std::fs::read_dir(crate::common::fixtures().join("tables/full")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), results.join(entry.file_name())).unwrap();
    }
    let path = results.join("attention.csv");
    let bytes = std::fs::read(&path).unwrap();
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let stderr = expect_error(&run_cli(
        tmp.path(),
        &["figures", results.to_str().unwrap(), "--out", "figs"],
    ));
    assert!(
        stderr.contains("attention.csv") && stderr.contains(&format!("line {lines} ")),
        "{stderr}"
    );
    assert!(!tmp.path().join("figs").exists());

    std::fs::write(&path, &bytes).unwrap();
    let heatmap = results.join("heatmap.csv");
    let text = std::fs::read_to_string(&heatmap).unwrap();
    let without_value: String = text
        .lines()
        .map(|l| l.rsplit_once(',').unwrap().0.to_string() + "\n")
        .collect();
    assert!(text.lines().next().unwrap().ends_with(",value"));
    std::fs::write(&heatmap, without_value).unwrap();
    let stderr = expect_error(&run_cli(
        tmp.path(),
        &["figures", results.to_str().unwrap(), "--out", "figs"],
    ));
    assert!(
        stderr.contains("heatmap.csv") && stderr.contains("line 1 (the header): no column `value`"),
        "{stderr}"
    );
    assert!(!tmp.path().join("figs").exists());
}

/// Class "abort": a model too large to train (`--hidden-size 1000000`, `--layers 100000000`)
/// aborted with exit 134 after growing for a while, its staging folder left behind; it is
/// refused before anything is allocated.
#[test]
fn abort_a_model_too_large_to_train_is_refused_before_allocating() {
    let tmp = tempfile::tempdir().unwrap();
    for size in [["--hidden-size", "1000000"], ["--layers", "100000000"]] {
        let mut args = vec![
            "train",
            "--variant",
            "softmax",
            "--steps",
            "1",
            "--out",
            "run",
        ];
        args.extend_from_slice(&size);
        let stderr = expect_error(&run_cli(tmp.path(), &args));
        assert!(
            stderr.contains("GiB to train") && stderr.contains("available"),
            "{stderr}"
        );
        assert!(!tmp.path().join("run").exists());
    }
}

/// Class "silent garbage": `rope_parameters` given as a string fell back to the default
/// RoPE; a legacy `rope_scaling` beside `rope_parameters` that disagrees with it was ignored.
/// Both are refused, naming the key.
#[test]
fn silent_garbage_rope_parameters_of_the_wrong_type_or_in_conflict_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(CheckpointProblem, fn(&mut serde_json::Value)); 2] = [
        (
            CheckpointProblem::wrong_type("rope_parameters", "an object (or null)", "\"llama3\""),
            |c| c["rope_parameters"] = "llama3".into(),
        ),
        (
            CheckpointProblem::inconsistent(
                &["rope_parameters.factor", "rope_scaling.factor"],
                "rope_parameters and the legacy rope_scaling disagree on `factor`; keep one of them",
            ),
            |c| {
                let mut legacy = c["rope_parameters"].clone();
                legacy["factor"] = 2.0.into();
                c["rope_scaling"] = legacy;
            },
        ),
    ];
    for (k, (problem, edit)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("case{k}"));
        copy_fixture("llama_gqa", &dir);
        crate::common::edit_config(&dir, edit);
        let stderr = expect_error(&run_cli(tmp.path(), &["inspect", dir.to_str().unwrap()]));
        assert!(stderr.contains("config.json: "), "{stderr}");
        assert_eq!(crate::common::open_problem(&dir), problem);
    }
}

/// Class "no memory bounds": a text corpus was tokenized whole (about 160 bytes of memory per
/// byte of text, 7.2 GB for 44 MB) even when two windows were asked. It is read and
/// tokenized in pieces, only as far as the windows need: 48 MB of text, with bytes that are
/// not UTF-8 past the 40th MB, give the same tables as the text's first 200 kB, under a
/// 3 GiB address-space cap.
#[test]
fn no_memory_bounds_a_long_text_corpus_is_read_only_as_far_as_the_windows_need() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/corpus/tinyshakespeare.txt"
    ))
    .unwrap();
    let mut long = Vec::new();
    while long.len() < 40 << 20 {
        long.extend_from_slice(&plain);
    }
    long.extend_from_slice(b"\xff\xfe not text");
    while long.len() < 48 << 20 {
        long.extend_from_slice(&plain);
    }
    std::fs::write(tmp.path().join("long.txt"), &long).unwrap();
    std::fs::write(tmp.path().join("short.txt"), &plain[..200_000]).unwrap();
    copy_fixture("llama_gqa", &tmp.path().join("ckpt"));
    let run = |corpus: &str, out: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
        command.current_dir(tmp.path()).args([
            "analyze",
            "ckpt",
            "--corpus",
            corpus,
            "--seq-len",
            "64",
            "--num-seqs",
            "3",
            "--quiet",
            "--out",
            out,
        ]);
        crate::common::cap_address_space(&mut command, 3 << 30);
        command.output().unwrap()
    };
    expect_success(&run("long.txt", "long"));
    expect_success(&run("short.txt", "short"));
    for table in ["attention.csv", "heatmap.csv", "query_profile.csv"] {
        let read = |out: &str| std::fs::read_to_string(tmp.path().join(out).join(table)).unwrap();
        assert_eq!(read("long"), read("short"), "{table}");
    }
    // The cut-off text itself is still refused as a whole: its bad bytes are named.
    let mut bad = plain[..1000].to_vec();
    bad.push(0xff);
    std::fs::write(tmp.path().join("bad.txt"), &bad).unwrap();
    let stderr = expect_error(&run("bad.txt", "bad"));
    assert!(
        stderr.contains("bad.txt") && stderr.contains("byte 1000"),
        "{stderr}"
    );
}

/// Class "silent garbage": `tie_word_embeddings: true` beside a stored `lm_head.weight` that
/// differs from the embedding used one of them without a word. transformers (5.24, checked
/// with `AutoModelForCausalLM.from_pretrained` on this very checkpoint) keeps the stored head
/// and warns; so does asa-analyze, and `inspect` says so. The numbers are those of the same
/// checkpoint untied, and differ from the tied ones (no head stored).
#[test]
fn silent_garbage_tied_embeddings_beside_a_stored_head_use_the_head_as_transformers_does() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, tie) in [("untied", false), ("both", true), ("tied", true)] {
        copy_fixture("llama_gqa", &tmp.path().join(name));
        crate::common::edit_config(&tmp.path().join(name), |c| {
            c["tie_word_embeddings"] = tie.into()
        });
    }
    let tied = tmp.path().join("tied");
    let index = tied.join("model.safetensors.index.json");
    let mut map: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index).unwrap()).unwrap();
    let shard = tied.join(map["weight_map"]["lm_head.weight"].as_str().unwrap());
    let mut tensors = candle_core::safetensors::load(&shard, &Device::Cpu).unwrap();
    tensors.remove("lm_head.weight");
    candle_core::safetensors::save(&tensors, &shard).unwrap();
    map["weight_map"]
        .as_object_mut()
        .unwrap()
        .remove("lm_head.weight");
    std::fs::write(&index, map.to_string()).unwrap();

    let inspect = expect_success(&run_cli(tmp.path(), &["inspect", "both"]));
    assert!(
        inspect.contains("transformers uses a stored head"),
        "{inspect}"
    );
    let ppl = |name: &str| {
        let out = format!("{name}-out");
        expect_success(&analyze_briefly(tmp.path(), name, &out, &[]));
        let table = std::fs::read_to_string(tmp.path().join(out).join("attention.csv")).unwrap();
        table
            .lines()
            .find(|l| l.split(',').nth(1) == Some("ppl"))
            .unwrap()
            .rsplit(',')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let (untied, both, tied) = (ppl("untied"), ppl("both"), ppl("tied"));
    assert_eq!(both, untied);
    assert!((tied - untied).abs() > 1e-3 * untied, "{tied} vs {untied}");
}

/// Class "silent garbage": a config field of the wrong type was an error that named a line
/// and column only; it names the field and the type expected.
#[test]
fn silent_garbage_config_fields_of_the_wrong_type_are_named_with_the_type_expected() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, serde_json::Value, &str); 4] = [
        ("hidden_size", "64".into(), "expected usize"),
        ("rms_norm_eps", serde_json::json!([1e-5]), "expected f64"),
        ("tie_word_embeddings", 1.into(), "expected a boolean"),
        ("num_attention_heads", 2.5.into(), "expected usize"),
    ];
    for (key, value, expected) in cases {
        let ckpt = tmp.path().join(key);
        copy_fixture("llama_gqa", &ckpt);
        crate::common::edit_config(&ckpt, |c| c[key] = value);
        let stderr = expect_error(&run_cli(tmp.path(), &["inspect", key]));
        assert!(
            stderr.contains("config.json")
                && stderr.contains(&format!("field `{key}`"))
                && stderr.contains(expected),
            "{stderr}"
        );
    }
}

/// Class "silent garbage": a GGUF tensor whose type was changed in the header (read as
/// another type, its weights are garbage) or whose offset is odd was read without a word;
/// the tensor table is checked against the data before any tensor is read.
#[test]
fn silent_garbage_a_gguf_tensor_table_that_does_not_match_its_data_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(crate::common::fixtures().join("gguf/llama_gqa.gguf")).unwrap();
    // the tensor info after the name: n_dims u32, dims u64 each, type u32, offset u64
    let name = b"blk.0.attn_q.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let type_at = at + 4 + 8 * n_dims;
    let offset_at = type_at + 4;
    assert_eq!(
        &bytes[type_at..type_at + 4],
        &0u32.to_le_bytes(),
        "an F32 tensor"
    );
    let offset = u64::from_le_bytes(bytes[offset_at..offset_at + 8].try_into().unwrap());
    let cases: [(&str, usize, Vec<u8>, &str); 3] = [
        (
            "f16.gguf",
            type_at,
            1u32.to_le_bytes().to_vec(),
            "gap larger than alignment padding",
        ),
        (
            "odd.gguf",
            offset_at,
            (offset + 1).to_le_bytes().to_vec(),
            "not a multiple of the alignment 32",
        ),
        (
            "overlap.gguf",
            offset_at,
            (offset - 32).to_le_bytes().to_vec(),
            "overlaps",
        ),
    ];
    for (file, at, patch, says) in cases {
        let mut patched = bytes.clone();
        patched[at..at + patch.len()].copy_from_slice(&patch);
        std::fs::write(tmp.path().join(file), &patched).unwrap();
        let stderr = expect_error(&run_cli(tmp.path(), &["inspect", file]));
        assert!(stderr.contains(file), "{stderr}");
        let problem = crate::common::open_problem(&tmp.path().join(file));
        assert!(
            matches!(problem.name(), "damaged" | "tensor_data")
                && problem.to_string().contains(says)
                && problem.to_string().contains("blk.0.attn_q.weight"),
            "{problem:?}"
        );
    }
}

/// Writes `dir/model.safetensors` holding `tensors` (name, shape) in BF16 as a sparse file:
/// the header is real, the data reads as zeros and takes no disk.
fn sparse_safetensors(dir: &std::path::Path, tensors: &[(String, Vec<u64>)]) {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, shape) in tensors {
        let bytes = 2 * shape.iter().product::<u64>();
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut text = serde_json::Value::Object(header).to_string().into_bytes();
    while text.len() % 8 != 0 {
        text.push(b' ');
    }
    let mut file = std::fs::File::create(dir.join("model.safetensors")).unwrap();
    use std::io::Write;
    file.write_all(&(text.len() as u64).to_le_bytes()).unwrap();
    file.write_all(&text).unwrap();
    file.set_len(8 + text.len() as u64 + offset).unwrap();
}

/// Class "no memory bounds": a checkpoint that cannot fit the machine was started anyway
/// (and aborted when an allocation failed). A one-layer model whose layer takes 256 GiB in
/// f32 (a sparse file: no disk used) is refused before any weight is read, even streamed;
/// with a `--memory-budget` above the machine's memory the in-memory schedule is refused.
#[test]
fn no_memory_bounds_a_model_larger_than_the_machine_is_refused_before_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("huge");
    std::fs::create_dir_all(&ckpt).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(
            crate::common::model_dir("llama_gqa").join(file),
            ckpt.join(file),
        )
        .unwrap();
    }
    let (hidden, inter, vocab) = (65536u64, 262144u64, 64u64);
    crate::common::edit_config(&ckpt, |c| {
        c["hidden_size"] = hidden.into();
        c["intermediate_size"] = inter.into();
        c["num_attention_heads"] = 512.into();
        c["num_key_value_heads"] = 512.into();
        c["head_dim"] = 128.into();
        c["num_hidden_layers"] = 1.into();
    });
    let l = |n: &str| format!("model.layers.0.{n}");
    let tensors = vec![
        ("model.embed_tokens.weight".to_string(), vec![vocab, hidden]),
        ("lm_head.weight".to_string(), vec![vocab, hidden]),
        ("model.norm.weight".to_string(), vec![hidden]),
        (l("input_layernorm.weight"), vec![hidden]),
        (l("post_attention_layernorm.weight"), vec![hidden]),
        (l("self_attn.q_proj.weight"), vec![hidden, hidden]),
        (l("self_attn.k_proj.weight"), vec![hidden, hidden]),
        (l("self_attn.v_proj.weight"), vec![hidden, hidden]),
        (l("self_attn.o_proj.weight"), vec![hidden, hidden]),
        (l("mlp.gate_proj.weight"), vec![inter, hidden]),
        (l("mlp.up_proj.weight"), vec![inter, hidden]),
        (l("mlp.down_proj.weight"), vec![hidden, inter]),
    ];
    sparse_safetensors(&ckpt, &tensors);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "analyze",
            "huge",
            "--seq-len",
            "8",
            "--num-seqs",
            "1",
            "--quiet",
            "--out",
            "res",
        ];
        args.extend_from_slice(extra);
        run_within(tmp.path(), &args, std::time::Duration::from_secs(60))
            .expect("refused at once, not after reading weights")
    };
    let stderr = expect_error(&run(&[]));
    assert!(
        stderr.contains("huge") && stderr.contains("its largest layer takes 256.0 GiB in f32"),
        "{stderr}"
    );
    let stderr = expect_error(&run(&["--memory-budget", "100000G"]));
    assert!(
        stderr.contains("its weights take") && stderr.contains("--stream-layers"),
        "{stderr}"
    );
    assert!(!tmp.path().join("res").exists());
}

/// Issue 40, class "odd corners": a bad `loss_window` in a manifest is named as the
/// manifest's field, with the manifest's file (it read as `--loss-window` before).
#[test]
fn odd_corners_a_bad_loss_window_in_a_manifest_names_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("paper.toml"),
        "loss_window = 0\n[[run]]\nsize = \"1B\"\nmethod = \"sink\"\n",
    )
    .unwrap();
    let err = expect_error(&run_cli(
        tmp.path(),
        &["tables", "--manifest", "paper.toml", "--out", "t"],
    ));
    assert!(
        err.contains("paper.toml") && err.contains("loss_window must be at least 1 step, got 0"),
        "{err}"
    );
    assert!(!err.contains("--loss-window"), "{err}");
    assert!(!tmp.path().join("t").exists());
}

/// Issue 54: a finite weight past f16's range (1e6 > 65504) becomes infinite only in the
/// f16 run: said so, naming the tensor and the way out, not called a diverged checkpoint.
#[test]
fn a_weight_past_f16s_range_is_named_as_such_not_as_divergence() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("big");
    copy_fixture("llama_gqa", &ckpt);
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ckpt.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let name = "model.layers.0.mlp.up_proj.weight";
    let shard = ckpt.join(index["weight_map"][name].as_str().unwrap());
    let mut tensors = candle_core::safetensors::load(&shard, &Device::Cpu).unwrap();
    let w = &tensors[name];
    let mut values = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[5] = 1e6;
    let big = candle_core::Tensor::from_vec(values, w.dims(), &Device::Cpu).unwrap();
    tensors.insert(name.to_string(), big);
    candle_core::safetensors::save(&tensors, &shard).unwrap();
    let stderr = expect_error(&analyze_briefly(
        tmp.path(),
        ckpt.to_str().unwrap(),
        "o",
        &["--dtype", "f16"],
    ));
    assert!(stderr.contains(name), "{stderr}");
    let loaded = asa_models::Checkpoint::open(&ckpt, &Device::Cpu, candle_core::DType::F16)
        .and_then(|c| c.load_model());
    let err = loaded.err().expect("f16 past its range loaded");
    assert_eq!(
        err.problem(),
        Some(&CheckpointProblem::tensor_data(
            name,
            "holds 1000000, past f16's range: run with --dtype f32 or bf16"
        )),
        "{err}"
    );
    assert!(!stderr.contains("diverged"), "{stderr}");
    assert!(!tmp.path().join("o").exists());
}

/// Issue 54: a failing `--dtype bf16` run says one line, its error; the note on a CPU
/// without AVX-512 BF16 (`ASA_SIMD=avx2` runs as one) comes only once a model runs.
#[test]
fn a_failing_bf16_run_says_one_line_and_a_running_one_its_kernel_note() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
    let run = |model: &str, out: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"))
            .args([
                "analyze",
                model,
                "--dtype",
                "bf16",
                "--seq-len",
                "16",
                "--num-seqs",
                "1",
                "--out",
                out,
            ])
            .current_dir(tmp.path())
            .env("ASA_SIMD", "avx2")
            .output()
            .unwrap()
    };
    let failed = run("bad", "o");
    let said = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(2), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    let model = crate::common::model_dir("llama_gqa").display().to_string();
    let ran = run(&model, "ok");
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{said}");
    assert!(
        said.contains("note: bf16: this CPU has no AVX-512 BF16"),
        "{said}"
    );
}

/// Class "no memory bounds" (issue 54): `--seq-len 1000001` under a memory limit aborted
/// (exit 134, Rust's "memory allocation failed") and left its staging folder. Windows whose
/// hidden states alone pass the memory the process may take (here `ulimit -v`) are refused
/// before any work, naming the need; a run the estimate lets through that then fails an
/// allocation ends as an interrupted run does: one line, exit 2, no staging folder, no
/// `--out` left behind.
#[test]
fn no_memory_bounds_windows_past_the_memory_limit_end_with_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    copy_fixture("llama_gqa", &tmp.path().join("ckpt"));
    let run = |seq_len: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_asa-analyze"));
        command.current_dir(tmp.path()).args([
            "analyze",
            "ckpt",
            "--seq-len",
            seq_len,
            "--num-seqs",
            "1",
            "--quiet",
            "--out",
            "out",
        ]);
        crate::common::cap_address_space(&mut command, 768 << 20);
        command.output().unwrap()
    };
    // 3 x 4M tokens x 32 floats: 1.4 GiB of hidden states, refused before reading a weight
    let stderr = expect_error(&run("4000000"));
    assert!(
        stderr.contains("ckpt")
            && stderr.contains("--seq-len 4000000")
            && stderr.contains("GiB of memory available"),
        "{stderr}"
    );
    assert!(!tmp.path().join("out").exists());
    // 0.36 GiB of hidden states pass the estimate; the attention blocks then do not fit
    let stderr = expect_error(&run("1000000"));
    assert!(
        stderr.starts_with("asa-analyze: out of memory:")
            && stderr.contains("unfinished output removed"),
        "{stderr}"
    );
    assert!(!tmp.path().join("out").exists(), "an --out was left");
}

/// Issue 65 item 3: settings float32 holds whose activations still overflow (Granite's
/// `attention_multiplier` 3e38) are an error naming the file and where the activations
/// turned non-finite, not tables of NaN with exit 0; `--allow-nonfinite` analyses them.
#[test]
fn settings_that_overflow_the_activations_are_refused_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("granite");
    copy_fixture("granitemoehybrid", &ckpt);
    edit_config(&ckpt, |c| {
        c["attention_multiplier"] = serde_json::json!(3e38)
    });
    let run =
        |extra: &[&str], out: &str| analyze_briefly(tmp.path(), ckpt.to_str().unwrap(), out, extra);
    let stderr = expect_error(&run(&[], "refused"));
    assert!(
        stderr.contains(ckpt.to_str().unwrap()) && stderr.contains("--allow-nonfinite"),
        "{stderr}"
    );
    let CheckpointProblem::NonFinite { at } = crate::common::run_problem(&ckpt) else {
        panic!("not non-finite activations")
    };
    assert!(at.starts_with("layer"), "{at}");
    assert!(!tmp.path().join("refused").exists());
    expect_success(&run(&["--allow-nonfinite"], "allowed"));
}

/// Issue 65 item 6, found by the coverage-guided fuzzing (fuzz/corpus/ holds both inputs):
/// a tokenizer.json whose decoder the tokenizers crate `expect`s to read panicked
/// `analyze` (exit 101, a backtrace); a Parquet footer stating 2^31 row groups made polars
/// reserve 136 GB. Each is one line naming the file, exit 2, nothing written.
#[test]
fn panic_third_party_readers_on_damaged_files_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("m");
    copy_fixture("qwen2", &model);
    std::fs::copy(
        fixtures().join("damaged/tokenizer_decoder_panics.json"),
        model.join("tokenizer.json"),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let err = expect_error(&run_cli(
        tmp.path(),
        &[
            "analyze",
            model.to_str().unwrap(),
            "--seq-len",
            "16",
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert!(
        err.contains("tokenizer.json: invalid tokenizer.json: the file is damaged"),
        "{err}"
    );
    assert!(!out.exists());
    // the second: a field whose header names another type, read by polars as the list its
    // field id has (passed a walk of the footer by its stated types)
    for name in [
        "footer_claims_2e31_row_groups.parquet",
        "footer_list_read_as_another_type.parquet",
    ] {
        let table = fixtures().join("damaged").join(name);
        let err = asa_tables::read_table(&table).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "{name}: damaged Parquet table: its footer states more than its"
            )),
            "{err}"
        );
    }
}
