//! Issue 55: the README and `docs/` stay true to the tool. Every relative link leads to a
//! file of the repository (and an `#anchor` to one of its headings), and every
//! `asa-analyze ...` command in a code block parses with the CLI's own argument parser
//! (nothing runs): an option renamed or removed fails here, not in a reader's shell.

use std::path::{Path, PathBuf};

use clap::Parser;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// GitHub's anchor of a heading: lower case, spaces to dashes, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(page: &Path) -> Vec<String> {
    std::fs::read_to_string(page)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The targets of the markdown links `[text](target)` of `text`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_somewhere() {
    let mut checked = 0;
    let mut dead = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path = match file.is_empty() {
                true => page.clone(),
                false => page.parent().unwrap().join(file),
            };
            checked += 1;
            if !path.exists() {
                dead.push(format!("{}: {target} (no such file)", page.display()));
            } else if let Some(anchor) = anchor {
                if !anchors(&path).contains(&anchor.to_string()) {
                    dead.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
    assert!(
        checked >= 25,
        "only {checked} links found: the extraction is broken"
    );
}

/// The `asa-analyze ...` commands of the pages' code blocks (indented or fenced), with
/// continued lines joined and trailing comments dropped; those holding shell variables or
/// `...` placeholders are left out.
fn documented_commands() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut fenced = false;
        let mut pending = String::new();
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let code = fenced || line.starts_with("    ");
            if !code {
                pending.clear();
                continue;
            }
            let mut line = line.trim().trim_start_matches("$ ").to_string();
            if !pending.is_empty() {
                line = format!("{pending} {line}");
                pending.clear();
            }
            if let Some(stripped) = line.strip_suffix('\\') {
                pending = stripped.to_string();
                continue;
            }
            let command = match line.find(" #") {
                Some(at) => line[..at].trim().to_string(),
                None => line,
            };
            if command.starts_with("asa-analyze ")
                && !command.contains('$')
                && !command.contains("...")
            {
                out.push((page.clone(), command));
            }
        }
    }
    out
}

#[test]
fn every_documented_command_parses_with_the_clis_own_parser() {
    let commands = documented_commands();
    let mut broken = Vec::new();
    for (page, command) in &commands {
        let words = shlex::split(command).unwrap_or_default();
        match asa_cli::Cli::try_parse_from(&words) {
            Ok(_) => {}
            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {}
            Err(e) => broken.push(format!(
                "{}: `{command}`: {}",
                page.display(),
                e.to_string().lines().next().unwrap_or_default()
            )),
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    assert!(
        commands.len() >= 30,
        "only {} commands found: the extraction is broken",
        commands.len()
    );
}

/// The repository paths the pages name in backticks (`crates/...`, `src/...`, `tools/...`,
/// `benches/...`, `tests/...`, `python/...`, `examples/...`), without a trailing `:line`.
fn named_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 7] = [
        "crates/",
        "src/",
        "tools/",
        "benches/",
        "tests/",
        "python/",
        "examples/",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|quoted| quoted.split(':').next().unwrap_or(quoted))
        .filter(|p| ROOTS.iter().any(|r| p.starts_with(r)))
        .filter(|p| !p.contains(['*', '<', '{', ' ', '$']))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_file_the_readme_and_docs_name_exists() {
    let mut checked = 0;
    let mut missing = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for path in named_paths(&text) {
            checked += 1;
            if !root().join(&path).exists() {
                missing.push(format!("{}: {path}", page.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named but missing:\n{}",
        missing.join("\n")
    );
    assert!(
        checked >= 20,
        "only {checked} paths found: the extraction is broken"
    );
}

#[test]
fn named_paths_are_the_quoted_repository_paths() {
    let text = "see `crates/asa-core/src/error.rs:40` and `src/main.rs`, not `--out DIR`, \
                `crates/*/Cargo.toml` or `src/<module>`";
    assert_eq!(
        named_paths(text),
        ["crates/asa-core/src/error.rs", "src/main.rs"]
    );
}
