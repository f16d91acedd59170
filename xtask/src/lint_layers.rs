//! `cargo xtask lint-layers`: the layer invariants of docs/ARCHITECTURE.md ("Invariants") as a check
//! that fails the build rather than a review comment. It reads `cargo metadata` (declared
//! dependencies and the resolved graph) and scans sources with comments and string literals
//! blanked out, so prose about `std::` or `candle_core::` never counts.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use anyhow::{Context, Result};
use cargo_metadata::{CargoOpt, DependencyKind, Metadata, MetadataCommand, Package, PackageId};
use regex::Regex;

const KERNELS: &str = "ferrinfer-kernels";
const FFI: &str = "ferrinfer-ffi";
const PY: &str = "ferrinfer-py";
const BENCH: &str = "ferrinfer-bench";
const FACADE: &str = "ferrinfer";
const XTASK: &str = "xtask";

/// Every workspace crate but xtask, with its layer; a crate may depend only on lower layers.
/// ferrinfer-py is the Python face of the ffi layer, hence its layer 3 (and see `may_depend`); the
/// `ferrinfer` facade re-exports launch and ffi for users, from the top.
const LAYERS: &[(&str, u8)] =
    &[(KERNELS, 0), ("ferrinfer-jit", 1), ("ferrinfer-launch", 2), (FFI, 3), (PY, 3), (BENCH, 4), (FACADE, 4)];

/// The only crates whose dependency graph and sources may contain a framework.
const FRAMEWORK_HOSTS: &[&str] = &[FFI, PY];

/// One broken invariant. `path` says where: a dependency path (`a -> b -> c`) or `file:line: code`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub krate: String,
    pub path: String,
    pub rule: Rule,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    Unlayered,
    Upward,
    DependsOnFfi,
    DependsOnXtask,
    KernelsDependency,
    KernelsNotNoStd,
    KernelsStd,
    FrameworkDependency,
    FrameworkSource,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Unlayered => "every workspace crate has a layer: add it to LAYERS in xtask/src/lint_layers.rs",
            Rule::Upward => "dependencies only point down: kernels <- jit <- launch <- ffi <- bench",
            Rule::DependsOnFfi => {
                "nothing depends on ferrinfer-ffi but ferrinfer-bench, ferrinfer-py and the ferrinfer facade"
            }
            Rule::DependsOnXtask => "nothing depends on xtask: it is tooling",
            Rule::KernelsDependency => {
                "kernels depends on nothing but `half` with default features, `std` and `alloc` off"
            }
            Rule::KernelsNotNoStd => "kernels' lib.rs declares `#![no_std]`",
            Rule::KernelsStd => "kernels uses neither `std` nor `alloc`",
            Rule::FrameworkDependency => "framework crates appear only under ferrinfer-ffi and ferrinfer-py",
            Rule::FrameworkSource => "no source file outside ferrinfer-ffi and ferrinfer-py names a framework",
        })
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (rule: {})", self.krate, self.path, self.rule)
    }
}

/// Checks the workspace whose root manifest is `<root>/Cargo.toml`; returns violations sorted.
pub fn lint(root: &Path) -> Result<Vec<Violation>> {
    // Absolute, so that the paths cargo reports start with it and print relative to it.
    let root = &root.canonicalize().with_context(|| format!("workspace root {}", root.display()))?;
    let meta = metadata(root)?;
    let members = meta.workspace_packages();
    let names: BTreeSet<&str> = members.iter().map(|p| p.name.as_str()).collect();
    let mut found = Vec::new();
    for pkg in members.iter().filter(|p| p.name.as_str() != XTASK) {
        found.extend(unlayered(pkg));
        found.extend(edges(pkg, &names));
        found.extend(framework_paths(&meta, pkg, &names)?);
        found.extend(framework_sources(root, pkg)?);
        if pkg.name.as_str() == KERNELS {
            found.extend(kernels_dependencies(pkg));
            found.extend(kernels_sources(root, pkg)?);
        }
    }
    found.sort();
    Ok(found)
}

/// `cargo metadata` with every feature on, so optional dependencies are in the resolved graph.
pub(crate) fn metadata(root: &Path) -> Result<Metadata> {
    let mut cmd = MetadataCommand::new();
    cmd.manifest_path(root.join("Cargo.toml")).features(CargoOpt::AllFeatures);
    // Offline first: the lock file and the local registry cache normally suffice (also for the
    // tests' copies of the workspace), and some machines here have no network. Online only if not.
    let offline = cmd.clone().other_options(vec!["--offline".into()]).exec();
    offline.or_else(|_| cmd.exec()).with_context(|| format!("cargo metadata in {}", root.display()))
}

fn layer(name: &str) -> Option<u8> {
    LAYERS.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
}

fn violation(krate: &str, path: String, rule: Rule) -> Violation {
    Violation { krate: krate.to_owned(), path, rule }
}

fn unlayered(pkg: &Package) -> Option<Violation> {
    let name = pkg.name.as_str();
    layer(name).is_none().then(|| violation(name, name.to_owned(), Rule::Unlayered))
}

fn may_depend(from: &str, to: &str) -> bool {
    // ferrinfer-py wraps ferrinfer-ffi from inside the same layer.
    let ffi_face = from == PY && to == FFI;
    match (layer(from), layer(to)) {
        (Some(f), Some(t)) => t < f || ffi_face,
        // An unlayered crate is reported once by `unlayered`; its edges cannot be ordered.
        _ => true,
    }
}

/// Rules on edges between workspace crates; dev-dependencies count too.
fn edges(pkg: &Package, members: &BTreeSet<&str>) -> Vec<Violation> {
    let from = pkg.name.as_str();
    let mut found = Vec::new();
    for to in pkg.dependencies.iter().map(|d| d.name.as_str()) {
        if !members.contains(to) {
            continue;
        }
        let path = format!("{from} -> {to}");
        let broken = [
            (to == XTASK, Rule::DependsOnXtask),
            (to == FFI && ![BENCH, PY, FACADE].contains(&from), Rule::DependsOnFfi),
            (!may_depend(from, to), Rule::Upward),
        ];
        for (_, rule) in broken.into_iter().filter(|(hit, _)| *hit) {
            found.push(violation(from, path.clone(), rule));
        }
    }
    found
}

/// Normal, build and optional dependencies of kernels: `half`, default features off, or nothing.
fn kernels_dependencies(pkg: &Package) -> Vec<Violation> {
    let allowed = |d: &cargo_metadata::Dependency| {
        d.name == "half" && !d.uses_default_features && !d.features.iter().any(|f| f == "std" || f == "alloc")
    };
    pkg.dependencies
        .iter()
        .filter(|d| d.kind != DependencyKind::Development && !allowed(d))
        .map(|d| violation(KERNELS, format!("{KERNELS} -> {}", d.name), Rule::KernelsDependency))
        .collect()
}

fn is_framework(name: &str) -> bool {
    ["tch", "torch-sys", "pyo3", "numpy", "dlpark"].contains(&name)
        || name.starts_with("pyo3-")
        || name.starts_with("candle")
}

/// Shortest path in the resolved graph (normal and build edges) from `pkg` to each framework crate
/// it reaches. The walk stops at workspace crates: ffi and py are allowed frameworks, and any
/// other member is walked from its own root, so each offending edge is reported once, where it is.
fn framework_paths(meta: &Metadata, pkg: &Package, members: &BTreeSet<&str>) -> Result<Vec<Violation>> {
    if FRAMEWORK_HOSTS.contains(&pkg.name.as_str()) {
        return Ok(Vec::new());
    }
    let resolve = meta.resolve.as_ref().context("cargo metadata gave no resolve graph")?;
    let nodes: HashMap<&PackageId, _> = resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let mut parent: HashMap<&PackageId, &PackageId> = HashMap::new();
    let mut queue = VecDeque::from([&pkg.id]);
    let mut found = Vec::new();
    while let Some(id) = queue.pop_front() {
        for dep in &nodes[id].deps {
            let not_dev = dep.dep_kinds.iter().any(|k| k.kind != DependencyKind::Development);
            if !not_dev || dep.pkg == pkg.id || parent.contains_key(&dep.pkg) {
                continue;
            }
            parent.insert(&dep.pkg, id);
            let name = meta[&dep.pkg].name.as_str();
            if is_framework(name) {
                let path = path_to(meta, &parent, &pkg.id, &dep.pkg);
                found.push(violation(&pkg.name, path, Rule::FrameworkDependency));
            } else if !members.contains(name) {
                queue.push_back(&dep.pkg);
            }
        }
    }
    Ok(found)
}

fn path_to(meta: &Metadata, parent: &HashMap<&PackageId, &PackageId>, root: &PackageId, end: &PackageId) -> String {
    let mut names = vec![meta[end].name.as_str()];
    let mut at = end;
    while at != root {
        at = parent[at];
        names.push(meta[at].name.as_str());
    }
    names.reverse();
    names.join(" -> ")
}

static FRAMEWORK_SOURCE: LazyLock<[Regex; 2]> = LazyLock::new(|| {
    let names = r"(candle\w*|tch|torch_sys|pyo3\w*|numpy|dlpark)";
    [
        Regex::new(&format!(r"\b(use|extern\s+crate)\s+(::)?{names}\b")).unwrap(),
        // Not after `::` or an identifier: `foo::tch::` is someone's module, `::tch::` is the crate.
        Regex::new(&format!(r"(^|[^:\w])(::)?{names}::")).unwrap(),
    ]
});

static STD_SOURCE: LazyLock<[Regex; 3]> = LazyLock::new(|| {
    [
        Regex::new(r"\bextern\s+crate\s+(std|alloc)\b").unwrap(),
        Regex::new(r"\buse\s+(::)?(std|alloc)\b").unwrap(),
        // `core::alloc::Layout` is core's and fine, hence "not after `::` or an identifier".
        Regex::new(r"(^|[^:\w])(::)?(std|alloc)::").unwrap(),
    ]
});

static NO_STD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"#!\[\s*no_std\s*\]").unwrap());

fn framework_sources(root: &Path, pkg: &Package) -> Result<Vec<Violation>> {
    if FRAMEWORK_HOSTS.contains(&pkg.name.as_str()) {
        return Ok(Vec::new());
    }
    let dir = pkg.manifest_path.parent().context("manifest has no parent")?;
    scan(root, &pkg.name, dir.as_std_path(), &*FRAMEWORK_SOURCE, Rule::FrameworkSource)
}

fn kernels_sources(root: &Path, pkg: &Package) -> Result<Vec<Violation>> {
    let src = pkg.manifest_path.parent().context("manifest has no parent")?.join("src");
    let mut found = scan(root, KERNELS, src.as_std_path(), &*STD_SOURCE, Rule::KernelsStd)?;
    let lib = src.join("lib.rs");
    let text = fs::read_to_string(&lib).with_context(|| format!("reading {lib}"))?;
    if !NO_STD.is_match(&strip_comments_and_strings(&text)) {
        found.push(violation(KERNELS, relative(root, lib.as_std_path()), Rule::KernelsNotNoStd));
    }
    Ok(found)
}

/// One violation per offending line of every `.rs` file under `dir`.
fn scan(root: &Path, krate: &str, dir: &Path, patterns: &[Regex], rule: Rule) -> Result<Vec<Violation>> {
    let mut found = Vec::new();
    for file in rs_files(dir)? {
        let text = fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let code = strip_comments_and_strings(&text);
        // Stripping keeps every newline, so line numbers of `code` are those of `text`.
        for (n, (line, original)) in code.lines().zip(text.lines()).enumerate() {
            if patterns.iter().any(|p| p.is_match(line)) {
                let at = format!("{}:{}: {}", relative(root, &file), n + 1, original.trim());
                found.push(violation(krate, at, rule));
            }
        }
    }
    Ok(found)
}

/// `.rs` files under `dir`, skipping build output and hidden directories.
fn rs_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() && name != "target" && !name.starts_with('.') {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn relative(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.to_string_lossy().replace('\\', "/")
}

/// `src` with comments (line, doc, nested block) and string, raw-string and char literals replaced
/// by spaces. Newlines stay, so line numbers do not move.
fn strip_comments_and_strings(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < s.len() {
        let end = match s[i] {
            '/' if s.get(i + 1) == Some(&'/') => Some(line_end(&s, i)),
            '/' if s.get(i + 1) == Some(&'*') => Some(block_comment_end(&s, i)),
            '"' => Some(string_end(&s, i + 1)),
            'r' | 'b' | 'c' if i == 0 || !is_ident(s[i - 1]) => raw_string_end(&s, i),
            '\'' => char_literal_end(&s, i),
            _ => None,
        };
        match end {
            Some(end) => {
                out.extend(s[i..end].iter().map(|&c| if c == '\n' { c } else { ' ' }));
                i = end;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn line_end(s: &[char], from: usize) -> usize {
    s[from..].iter().position(|&c| c == '\n').map_or(s.len(), |p| from + p)
}

fn block_comment_end(s: &[char], from: usize) -> usize {
    let (mut depth, mut i) = (0usize, from);
    while i < s.len() {
        match (s[i], s.get(i + 1)) {
            ('/', Some('*')) => (depth, i) = (depth + 1, i + 2),
            ('*', Some('/')) if depth == 1 => return i + 2,
            ('*', Some('/')) => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
    }
    s.len()
}

/// End of a `"…"` literal whose body starts at `from` (escapes honoured).
fn string_end(s: &[char], from: usize) -> usize {
    let mut i = from;
    while i < s.len() {
        match s[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    s.len()
}

/// End of `r"…"`, `r#"…"#`, `br…`, `cr…` starting at `from`; `None` if this is not one
/// (`r#ident` included). Plain `b"…"` and `c"…"` are left to the `"` case.
fn raw_string_end(s: &[char], from: usize) -> Option<usize> {
    let mut i = from + usize::from(s[from] != 'r');
    if s.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = s[i..].iter().take_while(|&&c| c == '#').count();
    i += hashes;
    if s.get(i) != Some(&'"') {
        return None;
    }
    let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    let body = i + 1;
    let at = s[body..].windows(close.len()).position(|w| w == close.as_slice());
    Some(at.map_or(s.len(), |p| body + p + close.len()))
}

/// End of a char literal at `from` (`'x'`, `'\n'`, `'\u{1F600}'`); `None` for a lifetime or label.
fn char_literal_end(s: &[char], from: usize) -> Option<usize> {
    match s.get(from + 1)? {
        '\\' => {
            let rest = s.get(from + 3..)?;
            rest.iter().position(|&c| c == '\'').map(|p| from + 3 + p + 1)
        }
        _ => (s.get(from + 2) == Some(&'\'')).then_some(from + 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_comments_and_literals_but_keeps_lines() {
        let src = "use core::x; // std::a\n/* alloc:: /* nested */ std:: */ let s = \"std::\\\"\";\n\
                   let r = r#\"std::\"#; let c = '\"'; fn f<'a>(x: &'a u8) {}\n/// doc std::\nstd::x";
        let out = strip_comments_and_strings(src);
        assert_eq!(out.lines().count(), src.lines().count());
        assert!(!out.contains("std::a") && !out.contains("alloc::") && !out.contains("doc"));
        assert_eq!(out.matches("std::").count(), 1, "{out}");
        assert!(out.contains("fn f<'a>(x: &'a u8) {}"), "{out}");
    }

    #[test]
    fn std_patterns_spare_core_alloc_and_lookalikes() {
        let hits = |line: &str| STD_SOURCE.iter().any(|p| p.is_match(line));
        assert!(hits("extern crate alloc;") && hits("use ::std::vec::Vec;") && hits("x: std::f32"));
        assert!(!hits("use core::alloc::Layout;") && !hits("stdarch_nvptx") && !hits("my_std::x"));
    }
}
