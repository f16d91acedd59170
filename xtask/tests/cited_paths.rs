//! Tidy: every file path a document or a comment cites exists, so the repository stands alone and
//! its docs cannot rot silently. A citation is a token ending in a file extension we keep
//! (`.rs`, `.md`, `.sh`, `.py`, `.toml`, `.yml`, `.csv`, `.log`, `.snap`) in a Markdown file, a
//! script, or a comment of a Rust file: with a `/` it must resolve from the repository root, the
//! citing file's folder, its crate or `crates/`; a bare `*.md` name must name some tracked file
//! (other bare names — `manifest.toml`, `lib.rs` — are too generic to check). Placeholders
//! (`<key>`, `*`, `{…}`, `$VAR`) and URLs are not citations.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;

mod common;
use common::{files, root};

/// Files whose text may cite paths: sources, docs, scripts. Recorded data (logs, CSVs,
/// snapshots) quotes what it quotes.
fn citing(path: &str) -> bool {
    let kept = ["rs", "md", "sh", "py", "toml", "yml"].iter().any(|e| path.ends_with(&format!(".{e}")));
    kept && !path.starts_with("docs/perf/data/") && !path.contains("/snapshots/")
}

fn citations(text: &str) -> Vec<String> {
    let pattern = Regex::new(r"[A-Za-z0-9_./\-]*[A-Za-z0-9_\-]\.(?:rs|md|sh|py|toml|yml|csv|log|snap)\b").unwrap();
    pattern
        .find_iter(text)
        .filter(|m| {
            let before = &text[..m.start()];
            // Not part of a URL, a placeholder or a glob.
            !before.ends_with("://")
                && !before.ends_with('<')
                && !before.ends_with('*')
                && !before.ends_with('$')
                && !before.ends_with('{')
                && !before.ends_with('-')
                && !before.ends_with('~')
        })
        .map(|m| m.as_str().trim_start_matches("./").to_owned())
        .filter(|c| !c.starts_with('.') || c.starts_with(".ci") || c.starts_with(".github"))
        .filter(|c| c.chars().next().is_some_and(|ch| ch.is_ascii_alphanumeric() || ch == '.'))
        .collect()
}

fn resolves(root: &Path, from: &Path, cited: &str, names: &BTreeSet<String>) -> bool {
    if !cited.contains('/') {
        return !cited.ends_with(".md") || names.contains(cited);
    }
    let folder = from.parent().unwrap_or(Path::new(""));
    let krate: PathBuf = from.components().take(2).collect();
    [root.join(cited), root.join(folder).join(cited), root.join(krate).join(cited), root.join("crates").join(cited)]
        .iter()
        .any(|p| p.exists())
}

/// The text of `line` that may cite: all of it in docs and Python (docstrings), the comment of a
/// Rust or shell line (its marker at the start or after a space: a `//` inside a string, as in a
/// URL, starts no comment). Commands name paths that exist only when they run.
fn citing_text<'a>(file: &str, line: &'a str) -> &'a str {
    let marker = match file.rsplit_once('.').map(|(_, ext)| ext) {
        Some("rs") => "//",
        Some("sh") => "#",
        _ => return line,
    };
    let start =
        if line.trim_start().starts_with(marker) { line.find(marker) } else { line.find(&format!(" {marker}")) };
    start.map_or("", |at| &line[at..])
}

#[test]
fn every_cited_path_exists() {
    let root = root();
    let all = files(&root);
    let names: BTreeSet<String> =
        all.iter().filter_map(|p| Path::new(p).file_name()).map(|n| n.to_string_lossy().into()).collect();
    let mut missing = Vec::new();
    for file in all.iter().filter(|p| citing(p)) {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
        for (n, line) in text.lines().enumerate() {
            for cited in citations(citing_text(file, line)) {
                if !resolves(&root, Path::new(file), &cited, &names) {
                    missing.push(format!("{file}:{}: `{cited}`", n + 1));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{} citation(s) of paths that do not exist:\n{}", missing.len(), missing.join("\n"));
}

#[test]
fn citations_are_found_and_placeholders_skipped() {
    assert_eq!(citing_text("a.rs", r#"let s = "https://x/y.rs"; // see b.rs"#), " // see b.rs");
    assert_eq!(citing_text("a.rs", "    //! see c.rs"), "//! see c.rs");
    assert_eq!(citing_text("a.md", "see d.rs"), "see d.rs");
    assert_eq!(citing_text("a.sh", "unzip w.whl torch/version.py # e.sh"), " # e.sh");
    let found = citations("see docs/jit.md and `crates/x/src/lib.rs`, https://a.b/c.md, <key>.rs, *.rs, DESIGN.md");
    assert_eq!(found, ["docs/jit.md", "crates/x/src/lib.rs", "DESIGN.md"]);
}
