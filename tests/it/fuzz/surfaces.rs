//! Issue 54's fuzz targets: `watch` over run folders of odd step names and damaged
//! checkpoints, `report` of damaged tables into hostile destinations, and every numeric
//! option of `analyze`, `watch`, `spikes` and `grad-stats` at the edges of its type. The
//! cases run under `super::check_case`'s rules; a report case also proves that nothing but
//! its `--out` changed (the inputs byte for byte, a link's target, a FIFO).

use std::path::{Path, PathBuf};

use crate::common::{copy_fixture, fixtures};

/// Step folder names: numbers a trainer writes, numbers past i64 or u64, the same step
/// twice, signs, exponents, non-ASCII digits, temporary names.
const STEP_NAMES: [&str; 15] = [
    "checkpoint-10",
    "checkpoint-010",
    "checkpoint-0",
    "checkpoint-9223372036854775807",
    "checkpoint-9223372036854775808",
    "checkpoint-18446744073709551615",
    "checkpoint-18446744073709551616",
    "checkpoint--1",
    "checkpoint-1e3",
    "checkpoint-",
    "checkpoint-\u{663}",
    "step-5",
    "step_5",
    "checkpoint-5.tmp",
    "global_step7",
];

/// A `watch --once` of a run folder holding one to three step entries: complete
/// checkpoints, damaged ones (a mutated config.json, no weights), empty folders, plain
/// files and links to a checkpoint outside, with `--poll` sometimes at an edge.
pub(super) fn watch_case(rng: &mut fastrand::Rng, dir: &Path) -> Vec<String> {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    for _ in 0..rng.usize(1..4) {
        let step = run.join(STEP_NAMES[rng.usize(..STEP_NAMES.len())]);
        if step.exists() {
            continue;
        }
        match rng.usize(..8) {
            0..=2 => copy_fixture("llama_gqa", &step),
            3 => {
                copy_fixture("llama_gqa", &step);
                super::rewrite_json(&step.join("config.json"), rng);
            }
            4 => std::fs::create_dir_all(&step).unwrap(),
            5 => std::fs::write(&step, b"not a folder").unwrap(),
            6 => {
                let outside = dir.join("outside-ckpt");
                if !outside.exists() {
                    copy_fixture("llama_gqa", &outside);
                }
                std::os::unix::fs::symlink(&outside, &step).unwrap();
            }
            _ => {
                copy_fixture("llama_gqa", &step);
                for entry in std::fs::read_dir(&step).unwrap() {
                    let path = entry.unwrap().path();
                    if path.extension().is_some_and(|e| e == "safetensors") {
                        std::fs::remove_file(path).unwrap();
                    }
                }
            }
        }
    }
    let mut args: Vec<String> = [
        "watch",
        "run",
        "--once",
        "--seq-len",
        "16",
        "--num-seqs",
        "2",
        "--quiet",
        "--out",
        "out",
    ]
    .map(String::from)
    .to_vec();
    if rng.bool() {
        let poll = [
            "0", "1e19", "nan", "inf", "-1", "86400", "86401", "1e-300", "",
        ];
        args.push(format!("--poll={}", poll[rng.usize(..poll.len())]));
    }
    args
}

/// Two results folders (CSV with block_map, Parquet with head roles), analysed once per
/// test process, that report cases copy and damage.
fn prepared_results() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = super::fresh_prepared_dir("results");
        let model = fixtures().join("models/llama_gqa").display().to_string();
        for (out, format, extra) in [
            ("csv", "csv", "block_map"),
            ("parquet", "parquet", "head_role"),
        ] {
            let metrics = format!("first_token,entropy,weight_sum,qk_mean,heatmap,{extra}");
            crate::common::expect_success(&crate::common::run_cli(
                &dir,
                &[
                    "analyze",
                    &model,
                    "--seq-len",
                    "16",
                    "--num-seqs",
                    "2",
                    "--metrics",
                    &metrics,
                    "--format",
                    format,
                    "--out",
                    out,
                    "--quiet",
                ],
            ));
        }
        dir
    })
}

/// What a report case leaves outside its destination, to compare after the run.
const OUTSIDE: &[u8] = b"a file a link points at: never written through";

/// `report` of one or two results folders, one table damaged, into a destination that is
/// new, an existing file, an input table, a folder, a FIFO, a link to a file outside, a
/// path under a missing folder or empty.
pub(super) fn report_case(rng: &mut fastrand::Rng, dir: &Path) -> Vec<String> {
    let kind = ["csv", "parquet"][rng.usize(..2)];
    let res = dir.join("res");
    copy_tree(&prepared_results().join(kind), &res);
    let mut tables: Vec<PathBuf> = std::fs::read_dir(&res)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    tables.sort();
    let victim = &tables[rng.usize(..tables.len())];
    let mut bytes = std::fs::read(victim).unwrap();
    let len = bytes.len();
    for _ in 0..rng.usize(1..6) {
        super::mutate_bytes(rng, &mut bytes, 0..len);
    }
    std::fs::write(victim, bytes).unwrap();
    copy_tree(&res, &dir.join("res.before"));
    std::fs::write(dir.join("outside.txt"), OUTSIDE).unwrap();
    let victim_name = victim.file_name().unwrap().to_string_lossy().to_string();
    let out = match rng.usize(..8) {
        0 => "report.html".to_string(),
        1 => {
            std::fs::write(dir.join("old.html"), b"an earlier report").unwrap();
            "old.html".into()
        }
        2 => format!("res/{victim_name}"),
        3 => "res".into(),
        4 => {
            let fifo = std::ffi::CString::new(dir.join("fifo.html").to_str().unwrap()).unwrap();
            // SAFETY: makes a FIFO at a path of this case's own folder
            assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
            "fifo.html".into()
        }
        5 => {
            std::os::unix::fs::symlink(dir.join("outside.txt"), dir.join("link.html")).unwrap();
            "link.html".into()
        }
        6 => "missing/report.html".into(),
        _ => String::new(),
    };
    let mut args: Vec<String> = vec!["report".into(), "res".into()];
    if rng.usize(..4) == 0 {
        args.push("res".into()); // the same folder twice
    }
    args.extend(["--out".into(), out, "--quiet".into()]);
    args
}

/// A report case changed nothing but its destination: the results folder byte for byte,
/// the file a link points at, the FIFO still a FIFO.
pub(super) fn check_report_case(dir: &Path) -> Result<(), String> {
    let before = dir.join("res.before");
    for entry in std::fs::read_dir(&before).unwrap() {
        let name = entry.unwrap().file_name();
        let now = std::fs::read(dir.join("res").join(&name)).unwrap_or_default();
        if now != std::fs::read(before.join(&name)).unwrap() {
            return Err(format!("input {} was written", name.to_string_lossy()));
        }
    }
    if std::fs::read(dir.join("outside.txt")).unwrap_or_default() != OUTSIDE {
        return Err("the file a link points at was written".into());
    }
    let fifo = dir.join("fifo.html");
    if let Ok(meta) = std::fs::symlink_metadata(&fifo) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_fifo() {
            return Err("the FIFO was replaced".into());
        }
    }
    Ok(())
}

/// Whole numbers at the edges of u32, i64 and u64 (and past them), signs, fractions and
/// words where a whole number is expected.
const WHOLE: [&str; 19] = [
    "0",
    "1",
    "2",
    "3",
    "7",
    "17",
    "255",
    "65536",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "1.5",
    "1e3",
    "0x10",
    "",
    "nan",
];

/// Whole numbers for the options that size the work itself: no middle values, which would
/// run for minutes on purpose.
const SIZES: [&str; 12] = [
    "0",
    "1",
    "2",
    "3",
    "17",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "1.5",
    "",
    "1e3",
];

/// Real numbers at the edges of f64, and what is not one.
const REAL: [&str; 14] = [
    "0", "-0", "5e-324", "1e-300", "0.5", "1", "1e308", "1e309", "nan", "inf", "-inf", "-1", "",
    "0x1p3",
];

/// Memory sizes: zero, a byte, units, past u64, negative and non-numbers.
const BYTES: [&str; 10] = [
    "0",
    "1",
    "1K",
    "1G",
    "16E",
    "18446744073709551615",
    "99999999999999999999G",
    "-1G",
    "nanG",
    "1.5G",
];

/// `analyze`'s numeric options and the values each is given.
const ANALYZE_OPTIONS: [(&str, &[&str]); 20] = [
    ("--seq-len", &SIZES),
    ("--num-seqs", &SIZES),
    ("--batch-size", &WHOLE),
    ("--block-size", &WHOLE),
    ("--min-query", &WHOLE),
    ("--layer", &WHOLE),
    ("--size", &WHOLE),
    ("--map-size", &WHOLE),
    ("--profile-query", &WHOLE),
    ("--bins", &WHOLE),
    ("--role-local-window", &WHOLE),
    ("--seed", &WHOLE),
    ("--sink-eps", &REAL),
    ("--role-sink", &REAL),
    ("--role-local", &REAL),
    ("--role-prev", &REAL),
    ("--role-induction", &REAL),
    ("--max-memory", &BYTES),
    ("--memory-budget", &BYTES),
    (
        "--shard",
        &[
            "0/2",
            "2/2",
            "1/0",
            "18446744073709551615/2",
            "-1/2",
            "/",
            "1/2/3",
        ],
    ),
];

/// Step windows of the log commands.
const WINDOWS: [&str; 9] = [
    "0..500",
    "5..3",
    "0..0",
    "18446744073709551615..",
    "..18446744073709551616",
    "-1..5",
    "a..b",
    "all",
    "0..=18446744073709551615",
];

/// `analyze` of the tiny model with one to three numeric options at an edge (with
/// `block_map` or `head_role` asked for now and then, so that their options act), or a log
/// command with its numbers at an edge.
pub(super) fn options_case(rng: &mut fastrand::Rng, _dir: &Path) -> Vec<String> {
    let log = fixtures().join("logs/noisy.csv").display().to_string();
    let pick =
        |rng: &mut fastrand::Rng, values: &[&str]| values[rng.usize(..values.len())].to_string();
    match rng.usize(..6) {
        0 => {
            let mut args = vec!["spikes".to_string(), log, "--out".into(), "out".into()];
            if rng.bool() {
                let k: Vec<String> = (0..rng.usize(1..4)).map(|_| pick(rng, &REAL)).collect();
                args.push(format!("--k={}", k.join(",")));
            }
            if rng.bool() {
                args.push(format!("--mad-scale={}", pick(rng, &REAL)));
            }
            if rng.bool() {
                args.push(format!("--steps={}", pick(rng, &WINDOWS)));
            }
            args
        }
        1 => vec![
            "grad-stats".into(),
            log,
            format!("--steps={}", pick(rng, &WINDOWS)),
            format!("--ddof={}", pick(rng, &WHOLE)),
            "--out".into(),
            "out".into(),
        ],
        _ => {
            let model = fixtures().join("models/llama_gqa").display().to_string();
            let mut args: Vec<String> = vec!["analyze".into(), model, "--quiet".into()];
            let mut given = Vec::new();
            for _ in 0..rng.usize(1..4) {
                let (name, values) = ANALYZE_OPTIONS[rng.usize(..ANALYZE_OPTIONS.len())];
                if !given.contains(&name) {
                    given.push(name);
                    args.push(format!("{name}={}", pick(rng, values)));
                }
            }
            for (name, value) in [("--seq-len", "16"), ("--num-seqs", "2")] {
                if !given.contains(&name) {
                    args.push(format!("{name}={value}"));
                }
            }
            match rng.usize(..3) {
                0 => args.push("--metrics=first_token,block_map".into()),
                1 => args.push("--metrics=head_role,entropy".into()),
                _ => {}
            }
            args.extend(["--out".into(), "out".into()]);
            args
        }
    }
}

/// Copies the files of folder `from` into a new folder `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}
