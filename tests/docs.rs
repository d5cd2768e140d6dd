//! Docs that name files of this repository name files that exist: README.md
//! files, docs/*.md and every crate's `//!` documentation. A path is a word
//! whose first segment is a top-level entry of the repository (`fold/src/…`,
//! `docs/DESIGN.md`) or, in a crate's docs, a folder of that crate
//! (`src/elf/plt.rs`); Markdown links are resolved from the linking file.
//! Globs (`*`), placeholders (`<…>`, `{…}`, `…`) and build outputs
//! (`target/…`) are not checked, nor the few words in [`NOT_PATHS`]. No
//! sampling: exact.

use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Top-level names of the repository that a path may start with.
fn top_level(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root)
        .expect("read the repository's root")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect();
    names.sort();
    names
}

/// The files whose text is checked, with the folder bare paths may also be
/// relative to (a crate's root for its docs).
fn documents(root: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
    let mut docs: Vec<(PathBuf, Option<PathBuf>)> = markdown(root);
    docs.extend(markdown(&root.join("docs")));
    for name in top_level(root) {
        let dir = root.join(&name);
        if !dir.is_dir() || name.starts_with('.') || name == "docs" {
            continue;
        }
        docs.extend(
            markdown(&dir)
                .into_iter()
                .map(|(p, _)| (p, Some(dir.clone()))),
        );
        // A crate's documentation: the `//!` lines of its library and binary roots.
        for file in ["src/lib.rs", "src/main.rs"] {
            let path = dir.join(file);
            if path.is_file() {
                docs.push((path, Some(dir.clone())));
            }
        }
    }
    for file in ["src/main.rs", "src/lib.rs"] {
        let path = root.join(file);
        if path.is_file() {
            docs.push((path, Some(root.to_path_buf())));
        }
    }
    docs
}

/// The Markdown files directly in `dir`, sorted.
fn markdown(dir: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    paths.sort();
    paths.into_iter().map(|p| (p, None)).collect()
}

/// The text of a document that is documentation: all of a Markdown file,
/// the `//!` lines of a Rust file.
fn doc_text(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    if path.extension().is_some_and(|x| x == "rs") {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        text
    }
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '*' | '{' | '}' | '<' | '>')
}

/// Words of `text` that contain a `/`, with the character before each
/// (a path after `/`, `~`, `:` or `$` is absolute, a URL or a variable).
fn words(text: &str) -> Vec<(Option<char>, String)> {
    let mut out = Vec::new();
    let mut prev: Option<char> = None;
    let mut word = String::new();
    let mut before = None;
    for c in text.chars().chain(std::iter::once(' ')) {
        if is_path_char(c) {
            if word.is_empty() {
                before = prev;
            }
            word.push(c);
        } else {
            if word.contains('/') {
                out.push((before, std::mem::take(&mut word)));
            }
            word.clear();
        }
        prev = Some(c);
    }
    out
}

/// Markdown link targets: `](target)`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_owned());
        }
    }
    out
}

/// Words that look like paths and are not: pprof's sample type and unit.
const NOT_PATHS: &[&str] = &["samples/count"];

fn checkable(path: &str) -> bool {
    let placeholder = |seg: &str| seg.len() > 1 && seg.chars().all(|c| c.is_ascii_uppercase());
    !path.contains(['*', '{', '}', '<', '>'])
        && !path.contains("...")
        && !path.contains('…')
        && !NOT_PATHS.contains(&path)
        && !path
            .split('/')
            .any(|seg| placeholder(seg.split('.').next().unwrap_or("")))
}

/// `path` with a trailing sentence dot or slash dropped.
fn trimmed(path: &str) -> &str {
    path.trim_end_matches(['.', '/'])
}

#[test]
fn docs_name_only_paths_that_exist() {
    let root = repo();
    let tops = top_level(&root);
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, crate_dir) in documents(&root) {
        let text = doc_text(&doc);
        let shown = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        for target in links(&text) {
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !checkable(target) {
                continue;
            }
            checked += 1;
            let base = doc.parent().expect("a document's folder");
            if !base.join(target).exists() {
                missing.push(format!("{shown}: link to {target}"));
            }
        }
        for (before, word) in words(&text) {
            if matches!(before, Some('/' | '~' | ':' | '$' | '@' | '.')) {
                continue;
            }
            let word = trimmed(&word);
            let first = word.split('/').next().unwrap_or("");
            if !checkable(word) || first.is_empty() {
                continue;
            }
            let mut bases = Vec::new();
            if let Some(dir) = crate_dir
                .as_ref()
                .filter(|d| first != "target" && d.join(first).is_dir())
            {
                bases.push(dir.clone());
            }
            if tops.iter().any(|t| t == first) {
                bases.push(root.clone());
            }
            if bases.is_empty() {
                continue;
            }
            checked += 1;
            if !bases.iter().any(|b| b.join(word).exists()) {
                missing.push(format!("{shown}: {word}"));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found in the docs: the scan itself is broken"
    );
    assert!(
        missing.is_empty(),
        "docs name {} path(s) that do not exist:\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}
