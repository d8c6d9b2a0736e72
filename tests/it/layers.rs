//! The layering the compiler cannot hold by itself (issues 55 and 66, docs/architecture.md):
//! each crate depends only on the crates below it in one order, the metrics on the kernels and
//! the probe interface alone (so that a family's or the attention's edit rebuilds no metric),
//! and inside asa-engine and asa-models each module's code uses only the modules below it.

use std::path::{Path, PathBuf};

/// The crates from the bottom up; a crate may depend on any crate before it.
const CRATES: [&str; 12] = [
    "asa-core",
    "asa-kernels",
    "asa-hooks",
    "asa-engine",
    "asa-models",
    "asa-tables",
    "asa-logs",
    "asa-metrics",
    "asa-record",
    "asa-analysis",
    "asa-figures",
    "asa-cli",
];

/// asa-engine's modules from the bottom up, with their rank (equal ranks may use each other).
const ENGINE_MODULES: [(&str, usize); 4] =
    [("device", 0), ("nn", 0), ("attention", 1), ("mixer", 2)];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace crates a crate's Cargo.toml names as dependencies of its code: in
/// `[dependencies]`, `[build-dependencies]`, a target's dependencies, or a table of their
/// own (`[dependencies.asa-core]`); dev-dependencies are the tests' business.
fn internal_dependencies(manifest: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            let (table, named) = match header.rsplit_once("dependencies") {
                Some((table, named)) => (table, named.trim_start_matches('.')),
                None => ("dev-", ""),
            };
            // the root's `[workspace.dependencies]` declares versions, not a dependency
            let declared_only = table.ends_with("dev-") || table.starts_with("workspace");
            in_dependencies = !declared_only && named.is_empty();
            if !declared_only && CRATES.contains(&named) {
                found.push(named.to_string());
            }
        } else if in_dependencies {
            let name = line.split(['.', ' ', '=']).next().unwrap_or("");
            if CRATES.contains(&name) {
                found.push(name.to_string());
            }
        }
    }
    found
}

#[test]
fn each_crate_depends_only_on_crates_below_it() {
    for (rank, name) in CRATES.iter().enumerate() {
        let manifest = std::fs::read_to_string(root().join("crates").join(name).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for dependency in internal_dependencies(&manifest) {
            let below = CRATES[..rank].contains(&dependency.as_str());
            assert!(
                below,
                "{name} depends on {dependency}, which is not below it"
            );
        }
    }
    // the order is the whole workspace: no crate is left out of it
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = CRATES.iter().map(|c| c.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

/// The package at the root is the binary and the end-to-end tests: no library re-exports the
/// crates under other names, so tests, benches and python/ import each crate by its own name.
#[test]
fn the_root_package_is_the_binary_not_a_facade() {
    assert!(!root().join("src/lib.rs").exists(), "src/lib.rs is back");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("\n[lib]"),
        "the root package declares a library"
    );
    let mut dependencies = internal_dependencies(&manifest);
    dependencies.sort();
    assert_eq!(
        dependencies,
        ["asa-cli", "asa-core", "asa-kernels", "asa-tables"],
        "src/main.rs needs the CLI and the process' allocator, heap and panic settings only"
    );
}

/// `tests/it` holds what runs the built binary (and the checks of the workspace itself); the
/// library's tests sit beside their crates (asa-models' `tests/`, asa-analysis'
/// `tests/library/`), so every other module here runs `asa-analyze`.
/// What runs the built binary, written in a test or a helper of tests/it.
const RUNS_THE_BINARY: [&str; 4] = [
    "run_cli(",
    "CARGO_BIN_EXE",
    "analyze_briefly(",
    "run_bounded(",
];

/// Tests in tests/it that check the tests' own helpers (the golden comparator, the fixture
/// cases' coverage), not the library: they stay beside what they check.
const CHECKS_OF_THE_TESTS: [&str; 2] = [
    "golden.rs: the_tolerance_takes_last_bits_and_refuses_real_differences",
    "logs.rs: every_fixture_case_has_a_test",
];

/// The top-level functions of `source`, and the tests a `macro_rules!` writes (`fn $name`,
/// named so): (name, whether it is a `#[test]`, its text up to the next one).
fn functions(source: &str) -> Vec<(String, bool, String)> {
    let starts: Vec<usize> = source
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .filter(|&i| {
            let line = &source[i..];
            line.starts_with("fn ")
                || line.starts_with("pub fn ")
                || line.trim_start().starts_with("fn $")
        })
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(k, &at)| {
            let end = starts.get(k + 1).copied().unwrap_or(source.len());
            let text = &source[at..end];
            let name = text
                .trim_start()
                .trim_start_matches("pub ")
                .trim_start_matches("fn ")
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .next()
                .unwrap_or_default()
                .to_string();
            // the attributes and doc comments right above it (a macro's repeated docs too)
            let is_test = source[..at]
                .lines()
                .rev()
                .map(str::trim)
                .take_while(|l| l.starts_with("#[") || l.starts_with("//") || l.starts_with("$("))
                .any(|l| l == "#[test]");
            (name, is_test, text.to_string())
        })
        .collect()
}

/// The functions among `functions` that run the binary: directly, or by calling one that
/// does (here or among `helpers`).
fn running(functions: &[(String, bool, String)], helpers: &[String]) -> Vec<String> {
    let mut runs: Vec<String> = helpers.to_vec();
    loop {
        let more: Vec<String> = functions
            .iter()
            .filter(|(name, _, text)| {
                !runs.contains(name)
                    && (RUNS_THE_BINARY.iter().any(|r| text.contains(r))
                        || runs.iter().any(|r| text.contains(&format!("{r}("))))
            })
            .map(|(name, _, _)| name.clone())
            .collect();
        if more.is_empty() {
            return runs;
        }
        runs.extend(more);
    }
}

#[test]
fn the_binarys_tests_run_the_binary() {
    // every test of tests/it runs the binary (or calls a helper that does); a library test
    // runs beside its crate (crates/*/tests)
    let of_the_workspace = ["main.rs", "common.rs", "layers.rs", "docs.rs"];
    let common = std::fs::read_to_string(root().join("tests/it/common.rs")).unwrap();
    let helpers = running(&functions(&common), &[]);
    assert!(helpers.contains(&"run_cli".to_string()), "{helpers:?}");
    let mut library_only = Vec::new();
    let mut tests = 0;
    for entry in std::fs::read_dir(root().join("tests/it")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if !file.ends_with(".rs") || of_the_workspace.contains(&file.as_str()) {
            continue;
        }
        let functions = functions(&std::fs::read_to_string(&path).unwrap());
        let runs = running(&functions, &helpers);
        for (name, is_test, _) in &functions {
            let test = format!("{file}: {name}");
            tests += usize::from(*is_test);
            if *is_test && !runs.contains(name) && !CHECKS_OF_THE_TESTS.contains(&test.as_str()) {
                library_only.push(test);
            }
        }
    }
    assert!(tests > 150, "{tests} tests found");
    assert!(
        library_only.is_empty(),
        "library tests in tests/it (move them beside their crate): {library_only:?}"
    );
}

#[test]
fn the_checker_finds_a_library_test_among_the_binarys() {
    // a test calling a helper that runs the binary, a library test under two attributes,
    // and a test a macro writes
    let source = "use x;\n\n#[test]\nfn runs() {\n    helper();\n}\n\nfn helper() {\n    \
                  run_cli(dir, &[]);\n}\n\n#[test]\n#[should_panic]\nfn library() {\n    \
                  Checkpoint::open(dir);\n}\n\nmacro_rules! cases {\n    ($($name:ident),*) \
                  => {$(\n        #[test]\n        fn $name() {\n            \
                  Checkpoint::open(dir);\n        }\n    )*};\n}\n";
    let functions = functions(source);
    let tests: Vec<&str> = functions
        .iter()
        .filter(|f| f.1)
        .map(|f| f.0.as_str())
        .collect();
    assert_eq!(tests, ["runs", "library", "$name"]);
    assert_eq!(running(&functions, &[]), ["helper", "runs"]);
}

#[test]
fn the_metrics_depend_on_the_kernels_and_the_probe_interface_only() {
    let manifest = std::fs::read_to_string(root().join("crates/asa-metrics/Cargo.toml")).unwrap();
    let mut dependencies = internal_dependencies(&manifest);
    dependencies.sort();
    assert_eq!(
        dependencies,
        ["asa-core", "asa-hooks", "asa-kernels", "asa-tables"]
    );
}

/// `name`'s workspace dependencies, and theirs, and so on.
fn transitive_dependencies(name: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut todo = vec![name.to_string()];
    while let Some(next) = todo.pop() {
        let manifest = root().join("crates").join(&next).join("Cargo.toml");
        for dependency in internal_dependencies(&std::fs::read_to_string(manifest).unwrap()) {
            if !found.contains(&dependency) {
                found.push(dependency.clone());
                todo.push(dependency);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn neither_the_metrics_nor_the_figures_are_built_on_the_models() {
    // so that an edit of a family (asa-models) or of the attention (asa-engine) rebuilds
    // no metric and no figure
    for name in ["asa-metrics", "asa-figures"] {
        let below = transitive_dependencies(name);
        for model_code in ["asa-engine", "asa-models", "asa-analysis"] {
            assert!(
                !below.contains(&model_code.to_string()),
                "{name} is built on {model_code}: {below:?}"
            );
        }
    }
    assert!(transitive_dependencies("asa-analysis").contains(&"asa-models".to_string()));
}

#[test]
fn the_checker_sees_a_dependency_upwards() {
    let manifest = "[package]\nname = \"asa-engine\"\n\n[dependencies]\nasa-core.workspace = true\n\
        asa-metrics = { path = \"../asa-metrics\" }\ncandle-core.workspace = true\n\n\
        [target.'cfg(unix)'.dependencies]\nasa-logs.workspace = true\n\n[build-dependencies]\n\
        asa-tables.workspace = true\n\n[dependencies.asa-figures]\npath = \"../asa-figures\"\n\n\
        [dev-dependencies]\nasa-analysis.workspace = true\n\n[target.'cfg(unix)'.dev-dependencies]\n\
        asa-analysis.workspace = true\n";
    assert_eq!(
        internal_dependencies(manifest),
        [
            "asa-core",
            "asa-metrics",
            "asa-logs",
            "asa-tables",
            "asa-figures"
        ]
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `crate::<module>` uses in a file's code, with their line: comments skipped, and nothing
/// from a `#[cfg(test)]` module on (tests may compare a kernel with a higher layer's
/// reference). A use the checker cannot rank (`crate::{..}`, `super::super::..`) is
/// returned as the module `?`.
fn crate_uses(source: &str) -> Vec<(usize, String)> {
    let mut uses = Vec::new();
    let mut lines = source.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let code = line.trim();
        if code.starts_with("#[cfg(test)]") {
            let next = lines.peek().map_or("", |(_, l)| l.trim());
            if next.starts_with("mod ") || next.starts_with("pub mod ") {
                break;
            }
            lines.next(); // a test-only item of one line
            continue;
        }
        if code.starts_with("//") {
            continue;
        }
        if code.contains("super::super::") {
            uses.push((i + 1, "?".to_string()));
        }
        for (at, _) in code.match_indices("crate::") {
            if code[..at].ends_with('$') {
                continue;
            }
            let rest = &code[at + "crate::".len()..];
            let module: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            uses.push((
                i + 1,
                if module.is_empty() {
                    "?".into()
                } else {
                    module
                },
            ));
        }
    }
    uses
}

fn rank_of(ranks: &[(&str, usize)], module: &str) -> Option<usize> {
    ranks
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, rank)| *rank)
}

/// The uses in crate `dir`'s sources of a module ranked above the using module's, and the
/// top-level modules `ranks` leaves out (lib.rs aside); a top-level file's `super::x` is
/// its `crate::x`.
fn uses_upwards(dir: &str, ranks: &[(&str, usize)]) -> (Vec<String>, Vec<String>, usize) {
    let src = root().join(dir).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (mut upward, mut unranked) = (Vec::new(), Vec::new());
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs");
        if top == "lib" || file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let Some(rank) = rank_of(ranks, top) else {
            unranked.push(top.to_string());
            continue;
        };
        let mut source = std::fs::read_to_string(file).unwrap();
        if relative.components().count() == 1 {
            source = source.replace("super::", "crate::");
        }
        for (line, module) in crate_uses(&source) {
            if rank_of(ranks, &module).is_some_and(|used| used > rank) {
                upward.push(format!(
                    "{}:{line}: uses crate::{module}",
                    relative.display()
                ));
            }
        }
    }
    unranked.sort();
    unranked.dedup();
    (upward, unranked, files.len())
}

#[test]
fn engine_modules_use_only_modules_below_them() {
    let (upward, _, files) = uses_upwards("crates/asa-engine", &ENGINE_MODULES);
    assert!(
        upward.is_empty(),
        "uses of higher modules:\n{}",
        upward.join("\n")
    );
    assert!(files > 30, "{files} files: the walk missed the sources");
}

/// asa-models in one direction (issue 66): what a model is (0: its layout, its mixers,
/// experts, window and layer kinds, multipliers; no config, no format, no loader), its
/// formats (1: safetensors, the weight store, GGUF with the rules the families fill in,
/// tokenizers), its config (2: the keys every family shares, then the families) and what
/// builds it (3: layers, attention, the mixers' loaders, the decoder).
const MODEL_MODULES: [(&str, usize); 30] = [
    ("layout", 0),
    ("mixers", 0),
    ("experts", 0),
    ("sliding_window", 0),
    ("attention_layers", 0),
    ("multipliers", 0),
    ("weight_map", 1),
    ("mxfp4", 1),
    ("safetensors_file", 1),
    ("weights", 1),
    ("tokenizer_file", 1),
    ("gguf", 1),
    ("gguf_alignment", 1),
    ("gguf_config", 1),
    ("gguf_keys", 1),
    ("gguf_pieces", 1),
    ("gguf_rope", 1),
    ("gguf_rules", 1),
    ("gguf_sentencepiece", 1),
    ("gguf_tokenizer", 1),
    ("config", 2),
    ("multimodal", 2),
    ("layers", 3),
    ("attention", 3),
    ("latent", 3),
    ("mixer_loaders", 3),
    ("residuals", 3),
    ("nonfinite", 3),
    ("decoder", 3),
    ("detect", 3),
];

#[test]
fn model_modules_go_from_description_to_formats_to_config_to_build() {
    let (upward, unranked, files) = uses_upwards("crates/asa-models", &MODEL_MODULES);
    assert!(
        upward.is_empty(),
        "uses of higher modules:\n{}",
        upward.join("\n")
    );
    assert!(unranked.is_empty(), "modules without a rank: {unranked:?}");
    assert!(files > 50, "{files} files: the walk missed the sources");
}

#[test]
fn the_checker_sees_a_use_upwards_and_skips_comments_macros_and_tests() {
    let source = "use crate::nn::rope;\n// crate::mixer in a comment\nlet x = $crate::mixer::f();\n\
                  use crate::mixer::Mixer;\n#[cfg(test)]\nuse crate::nn::Other;\n\
                  use crate::{attention, nn};\nuse super::super::mixer;\n#[cfg(test)]\nmod tests {\n\
                  use crate::mixer::Fixture;\n}\n";
    let uses = crate_uses(source);
    let want = [(1, "nn"), (4, "mixer"), (7, "?"), (8, "?")];
    let want: Vec<(usize, String)> = want.iter().map(|&(l, m)| (l, m.to_string())).collect();
    assert_eq!(uses, want);
}
