//! Tidy: shared code knows no op family (docs/ARCHITECTURE.md, "Invariants"). A shared file's
//! code and string literals (not its comments: a doc naming `rmsnorm` as an example is fine)
//! name no family's vocabulary:
//! - a family's name, alone or as a word of an identifier (`page`, `PAGE_SIZE`, `NormModule`,
//!   `Domain::PageIds`);
//! - an op's name, from the families' op tables (`op_table! { $ <family>_ops, family <family>; … }` in
//!   `crates/ferrinfer-launch/src/<family>.rs`);
//! - a public name a family's own files declare at their top level (`pub struct KvLayout`, …),
//!   unless another family declares it too (`FAMILY`, `OPS`: conventions) or shared code declares
//!   it in its own sense (an item, binding, field or variant: a warp's `lanes`).
//!
//! Shared files: every source file of the kernels, jit, launch, ffi and bench crates that is not a
//! family's (`src/<family>.rs`, `src/<family>/…`), and the launch tests' harness. A crate root
//! (`lib.rs`, `main.rs`) registers families: `mod <family>;`, `use <family>::…;` and
//! `<family>::OPS` / `<family>::FAMILY` are allowed there; anywhere, so is applying a family's
//! table to a callback (`ferrinfer_launch::norm_ops!(tch_functions);`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use regex::Regex;

/// A word in a string literal: what could name something.
static WORD: std::sync::LazyLock<Regex> =
    std::sync::LazyLock::new(|| Regex::new(r"[\p{Alphabetic}_][\p{Alphabetic}\p{Nd}_]*").unwrap());

/// Files that still name a family, as `(file, word)`: the shared modules being reworked to hand
/// their family's parts to the family's own files. Empty it as they are; a pair no longer found
/// fails the test, so the list only shrinks.
const NOT_YET_FAMILY_FREE: &[(&str, &str)] = &[
    // the peers' grids, keyed by family name
    ("crates/ferrinfer-bench/src/grid.rs", "activation"),
    ("crates/ferrinfer-bench/src/grid.rs", "cascade"),
    ("crates/ferrinfer-bench/src/grid.rs", "norm"),
    ("crates/ferrinfer-bench/src/grid.rs", "page"),
    ("crates/ferrinfer-bench/src/grid.rs", "rope"),
    ("crates/ferrinfer-bench/src/grid.rs", "sampling"),
    // a unit test builds a norm module
    ("crates/ferrinfer-jit/src/builder.rs", "NormKernel"),
    ("crates/ferrinfer-jit/src/builder.rs", "NormModule"),
    ("crates/ferrinfer-jit/src/builder.rs", "norm"),
    // `bench-cache` times a norm module
    ("crates/ferrinfer-jit/src/main.rs", "NormKernel"),
    ("crates/ferrinfer-jit/src/main.rs", "NormModule"),
    ("crates/ferrinfer-jit/src/main.rs", "norm"),
];

/// Crates whose `src/` holds families' files (`<family>.rs`) and shared ones.
const LAYERED_CRATES: &[&str] = &["ferrinfer-kernels", "ferrinfer-jit", "ferrinfer-launch"];
/// Crates above the families, every source file of which is shared.
const SHARED_CRATES: &[&str] = &["ferrinfer-ffi", "ferrinfer-bench"];
/// Shared files outside the crates' `src/`.
const SHARED_FILES: &[&str] = &["crates/ferrinfer-launch/tests/support/mod.rs"];
/// Paths that registration lines may follow a family's module name with.
const REGISTRATION_ITEMS: &[&str] = &["OPS", "FAMILY"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Every `.rs` file under `dir`, as paths relative to `root`, sorted.
fn rust_files(root: &Path, dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.join(dir)];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    found.sort();
    found
}

/// The family owning `file` (`crates/<crate>/src/<family>.rs` or `…/src/<family>/…`), if any.
fn owner<'a>(file: &str, families: &'a [String]) -> Option<&'a String> {
    let (_, in_src) = file.split_once("/src/")?;
    let first = in_src.split('/').next()?;
    families.iter().find(|f| first == format!("{f}.rs") || (first == f.as_str() && in_src.contains('/')))
}

fn shared_files(root: &Path, families: &[String]) -> Vec<String> {
    let mut files: Vec<String> = LAYERED_CRATES
        .iter()
        .chain(SHARED_CRATES)
        .flat_map(|krate| rust_files(root, &format!("crates/{krate}/src")))
        .filter(|file| owner(file, families).is_none())
        .collect();
    files.extend(SHARED_FILES.iter().map(|f| f.to_string()));
    files
}

/// A file that registers families: a crate root, or the test harness's root, whose
/// `pub mod <family>;` lines list the families' own test support (`tests/support/<family>.rs`).
fn is_crate_root(file: &str) -> bool {
    file.ends_with("/src/lib.rs") || file.ends_with("/src/main.rs") || file.ends_with("/tests/support/mod.rs")
}

// ---- Tokens: the code and string literals of a Rust file, comments dropped ----

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    /// An identifier of the code.
    Ident,
    /// A word (identifier-like run) inside a string literal.
    Word,
    /// Any other character of the code (numbers and char literals are skipped).
    Punct,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    text: String,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The tokens of `source`. A lexer for this check only: it knows comments (nested block ones
/// too), strings (raw, byte and C ones), char literals and lifetimes, and nothing of the grammar.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let (mut at, mut line, mut out) = (0, 1, Vec::new());
    while at < chars.len() {
        let start = at;
        let c = chars[at];
        at = if let Some(end) = comment_end(&chars, at) {
            end
        } else if let Some(string) = string_literal(&chars, at) {
            let body: String = chars[string.body.0..string.body.1].iter().collect();
            for (n, text) in body.split('\n').enumerate() {
                let words =
                    WORD.find_iter(text).map(|w| Token { kind: Kind::Word, text: w.as_str().into(), line: line + n });
                out.extend(words);
            }
            string.next
        } else if c == '\'' {
            char_or_lifetime_end(&chars, at)
        } else if is_ident_start(c) {
            let end = run_end(&chars, at, |i| is_ident_char(chars[i]));
            out.push(Token { kind: Kind::Ident, text: chars[at..end].iter().collect(), line });
            end
        } else if c.is_ascii_digit() {
            let fraction = |i: usize| chars[i] == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit);
            run_end(&chars, at, |i| is_ident_char(chars[i]) || fraction(i))
        } else {
            if !c.is_whitespace() {
                out.push(Token { kind: Kind::Punct, text: c.to_string(), line });
            }
            at + 1
        };
        line += chars[start..at].iter().filter(|&&c| c == '\n').count();
    }
    out
}

/// The index of the first character from `at` on that is not `in_run`.
fn run_end(chars: &[char], at: usize, in_run: impl Fn(usize) -> bool) -> usize {
    (at..chars.len()).find(|&i| !in_run(i)).unwrap_or(chars.len())
}

/// The index after the comment starting at `at` (`// …` to the line's end, `/* … */` nested), if
/// one does.
fn comment_end(chars: &[char], at: usize) -> Option<usize> {
    let pair = |i: usize, a: char, b: char| chars.get(i) == Some(&a) && chars.get(i + 1) == Some(&b);
    if pair(at, '/', '/') {
        return Some(run_end(chars, at, |i| chars[i] != '\n'));
    }
    if !pair(at, '/', '*') {
        return None;
    }
    let (mut i, mut depth) = (at, 0);
    while i < chars.len() {
        if pair(i, '/', '*') {
            (depth, i) = (depth + 1, i + 2);
        } else if pair(i, '*', '/') {
            (depth, i) = (depth - 1, i + 2);
            if depth == 0 {
                return Some(i);
            }
        } else {
            i += 1;
        }
    }
    Some(chars.len())
}

struct StringEnd {
    /// The literal's contents, `[start, end)`.
    body: (usize, usize),
    /// The index after the literal.
    next: usize,
}

/// The string literal starting at `at` (`"…"`, `r#"…"#`, `b"…"`, `br"…"`, `c"…"`), if one does.
fn string_literal(chars: &[char], at: usize) -> Option<StringEnd> {
    if at > 0 && is_ident_char(chars[at - 1]) {
        return None; // a prefix starts a token, never ends an identifier
    }
    let mut i = at;
    if matches!(chars.get(i), Some('b' | 'c')) {
        i += 1;
    }
    let raw = chars.get(i) == Some(&'r');
    if raw {
        i += 1;
    }
    let hashes = if raw { chars[i..].iter().take_while(|&&c| c == '#').count() } else { 0 };
    if chars.get(i + hashes) != Some(&'"') {
        return None;
    }
    let body_start = i + hashes + 1;
    let closes =
        |j: usize| chars[j] == '"' && chars[j + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes;
    let mut j = body_start;
    while j < chars.len() && !closes(j) {
        j += if chars[j] == '\\' && !raw { 2 } else { 1 };
    }
    let body_end = j.min(chars.len());
    Some(StringEnd { body: (body_start, body_end), next: (body_end + 1 + hashes).min(chars.len()) })
}

/// The index after the char literal (`'a'`, `'\n'`, `'\u{1F600}'`) or lifetime (`'a`) at `at`.
fn char_or_lifetime_end(chars: &[char], at: usize) -> usize {
    if chars.get(at + 1) == Some(&'\\') {
        // The escaped character is at + 2 (itself a quote in '\''); the closing quote follows.
        let close = run_end(chars, at + 3, |i| chars[i] != '\'');
        return (close + 1).min(chars.len());
    }
    if chars.get(at + 2) == Some(&'\'') {
        return at + 3;
    }
    run_end(chars, at + 1, |i| is_ident_char(chars[i]))
}

// ---- The families' vocabulary ----

struct Vocabulary {
    families: Vec<String>,
    /// Op names → their family.
    ops: BTreeMap<String, String>,
    /// The families' own item names → their family.
    items: BTreeMap<String, String>,
}

impl Vocabulary {
    /// The family `word` names, if it does: an op, a family's item, or a family's name as one of
    /// its words (`snake_case`, `CamelCase`, `SCREAMING_CASE`). In a string, an item counts only
    /// where it reads as an identifier (`KvLayout`, `page_table`), not as an English word an
    /// item is also called (`Filter`, `frequencies`).
    fn family_of(&self, word: &str, in_string: bool) -> Option<&str> {
        let identifier_like = word.contains('_') || word.chars().skip(1).any(char::is_uppercase);
        let item = self.items.get(word).filter(|_| identifier_like || !in_string);
        if let Some(family) = self.ops.get(word).or(item) {
            return Some(family);
        }
        let parts = words(word);
        self.families.iter().find(|f| parts.iter().any(|p| p == *f)).map(String::as_str)
    }
}

/// The lower-case words of an identifier: `PageIds` → page, ids; `PAGE_SIZE` → page, size.
fn words(identifier: &str) -> Vec<String> {
    let mut found = Vec::new();
    for part in identifier.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<char> = part.chars().collect();
        let mut word = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let after_lower = i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let acronym_end =
                i > 0 && chars[i - 1].is_uppercase() && chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if c.is_uppercase() && (after_lower || acronym_end) && !word.is_empty() {
                found.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
        }
        found.push(word);
    }
    found
}

/// The op names of `family`'s table in its launch file.
fn op_names(root: &Path, family: &str) -> Vec<String> {
    let path = root.join(format!("crates/ferrinfer-launch/src/{family}.rs"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let table_start = format!("{family}_ops, family {family};");
    let start = text.find(&table_start).unwrap_or_else(|| panic!("{}: no `{table_start}`", path.display()));
    let table = &text[start..];
    let table = &table[..table.find("\n}\n").unwrap_or(table.len())];
    let op = Regex::new(r"(?m)^\s*fn\s+([A-Za-z_]\w*)\s*\(").unwrap();
    op.captures_iter(table).map(|c| c[1].to_owned()).collect()
}

/// The names `text` declares public at its top level.
fn public_items(text: &str) -> BTreeSet<String> {
    let item = r"(?m)^pub(?:\([^)]*\))?\s+(?:unsafe\s+)?(?:const\s+fn|fn|struct|enum|trait|const|static|type|union)\s+([A-Za-z_]\w*)";
    Regex::new(item).unwrap().captures_iter(text).map(|c| c[1].to_owned()).collect()
}

/// Keywords after which an identifier is declared.
const DECLARING: &[&str] = &["fn", "let", "mut", "struct", "enum", "union", "trait", "type", "const", "static", "mod"];

/// The identifiers `tokens` declare: items, bindings, fields and parameters (`name:`), enum
/// variants. A family's item of the same name as one of these is a word shared code uses in its
/// own sense (a warp's `lanes`, the grammar's `Extent::Segments`), not the family's vocabulary.
fn declared(tokens: &[Token]) -> BTreeSet<String> {
    let text = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    let mut names = BTreeSet::new();
    let mut enum_depth: Option<usize> = None;
    let mut depth: usize = 0;
    for (i, token) in tokens.iter().enumerate() {
        match token.text.as_str() {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if enum_depth == Some(depth) {
                    enum_depth = None;
                }
            }
            _ => {}
        }
        if token.kind != Kind::Ident {
            continue;
        }
        if token.text == "enum" {
            enum_depth = Some(depth);
        }
        let before = if i > 0 { text(i - 1) } else { "" };
        let field = text(i + 1) == ":" && text(i + 2) != ":" && before != ":";
        let variant = enum_depth.is_some_and(|d| depth == d + 1) && matches!(before, "{" | "," | "]");
        if (DECLARING.contains(&before) || field || variant) && !DECLARING.contains(&token.text.as_str()) {
            names.insert(token.text.clone());
        }
    }
    names
}

fn vocabulary(root: &Path) -> Vocabulary {
    let families = xtask::ci::families(root).unwrap();
    let family_files: Vec<(String, String)> = LAYERED_CRATES
        .iter()
        .flat_map(|krate| rust_files(root, &format!("crates/{krate}/src")))
        .filter_map(|file| owner(&file, &families).map(|f| (f.clone(), file)))
        .collect();
    let mut declared_by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (family, file) in &family_files {
        for name in public_items(&fs::read_to_string(root.join(file)).unwrap()) {
            declared_by.entry(name).or_default().insert(family.clone());
        }
    }
    let shared_names: BTreeSet<String> = shared_files(root, &families)
        .iter()
        .flat_map(|file| declared(&tokens(&fs::read_to_string(root.join(file)).unwrap())))
        .collect();
    let items = declared_by
        .into_iter()
        .filter(|(name, owners)| owners.len() == 1 && !shared_names.contains(name))
        .map(|(name, owners)| (name, owners.into_iter().next().unwrap()))
        .collect();
    let ops = families.iter().flat_map(|f| op_names(root, f).into_iter().map(move |op| (op, f.clone()))).collect();
    Vocabulary { families, ops, items }
}

// ---- The check ----

/// The indices of `tokens` that register families (see the module docs), which may name them.
fn registration(tokens: &[Token], crate_root: bool, vocabulary: &Vocabulary) -> BTreeSet<usize> {
    let is_family = |i: usize| tokens.get(i).is_some_and(|t| vocabulary.families.contains(&t.text));
    let text = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    let mut allowed = BTreeSet::new();
    for i in 0..tokens.len() {
        let table = text(i).strip_suffix("_ops").is_some_and(|f| vocabulary.families.iter().any(|x| x == f));
        if tokens[i].kind == Kind::Ident && table && text(i + 1) == "!" {
            allowed.insert(i);
        }
        if !crate_root {
            continue;
        }
        if text(i) == "mod" && is_family(i + 1) && text(i + 2) == ";" {
            allowed.insert(i + 1);
        }
        if is_family(i) && text(i + 1) == ":" && text(i + 2) == ":" && REGISTRATION_ITEMS.contains(&text(i + 3)) {
            allowed.insert(i);
        }
        let path_start = if text(i + 1) == "crate" && text(i + 2) == ":" { i + 4 } else { i + 1 };
        if text(i) == "use" && is_family(path_start) {
            let end = (i..tokens.len()).find(|&j| text(j) == ";").unwrap_or(tokens.len());
            allowed.extend(i..end);
        }
    }
    allowed
}

/// `file:line: \`word\` …` for each family word in `source`'s code and strings.
fn violations(file: &str, source: &str, vocabulary: &Vocabulary) -> Vec<(String, String)> {
    let tokens = tokens(source);
    let allowed = registration(&tokens, is_crate_root(file), vocabulary);
    tokens
        .iter()
        .enumerate()
        .filter(|(i, t)| t.kind != Kind::Punct && !allowed.contains(i))
        .filter_map(|(_, t)| {
            let family = vocabulary.family_of(&t.text, t.kind == Kind::Word)?;
            let what = if t.kind == Kind::Word { "a string names" } else { "names" };
            Some((t.text.clone(), format!("{file}:{}: `{}` {what} the family {family}", t.line, t.text)))
        })
        .collect()
}

#[test]
fn shared_code_names_no_family() {
    let root = root();
    let vocabulary = vocabulary(root);
    let mut found = Vec::new();
    let mut used = BTreeSet::new();
    for file in shared_files(root, &vocabulary.families) {
        let source = fs::read_to_string(root.join(&file)).unwrap();
        for (word, message) in violations(&file, &source, &vocabulary) {
            match NOT_YET_FAMILY_FREE.iter().find(|&&(f, w)| f == file && w == word) {
                Some(entry) => {
                    used.insert(*entry);
                }
                None => found.push(message),
            }
        }
    }
    let stale: Vec<_> = NOT_YET_FAMILY_FREE.iter().filter(|entry| !used.contains(*entry)).collect();
    assert!(
        found.is_empty(),
        "{} family word(s) in shared code (move them into the family's own files):\n{}",
        found.len(),
        found.join("\n")
    );
    assert!(stale.is_empty(), "NOT_YET_FAMILY_FREE lists pairs no longer found; remove them: {stale:?}");
}

fn sample_vocabulary() -> Vocabulary {
    let pairs = |list: &[(&str, &str)]| list.iter().map(|(n, f)| (n.to_string(), f.to_string())).collect();
    Vocabulary {
        families: vec!["norm".into(), "page".into()],
        ops: pairs(&[("rmsnorm", "norm")]),
        items: pairs(&[("KvLayout", "page"), ("Filter", "norm")]),
    }
}

#[test]
fn a_planted_family_word_is_found_in_code_and_strings_not_comments() {
    let vocabulary = sample_vocabulary();
    let source = r##"
/// Runs an op such as `rmsnorm` (a comment may name one).
pub fn launch(x: u32) -> u32 { // page tables? /* nested */ not here
    /* a block comment: rmsnorm /* nested */ KvLayout */
    let s = "FERRINFER_NORM_LAYOUT: Filter";
    let c = ['"', '\'', '\u{22}']; let l: &'static str = r#"a "raw" rmsnorm"#;
    x + PAGE_SIZE + Domain::PageIds as u32 + layout::<KvLayout>() + Filter
}
"##;
    let found: Vec<String> =
        violations("crates/x/src/op.rs", source, &vocabulary).into_iter().map(|(_, m)| m).collect();
    assert_eq!(
        found,
        [
            "crates/x/src/op.rs:5: `FERRINFER_NORM_LAYOUT` a string names the family norm",
            "crates/x/src/op.rs:6: `rmsnorm` a string names the family norm",
            "crates/x/src/op.rs:7: `PAGE_SIZE` names the family page",
            "crates/x/src/op.rs:7: `PageIds` names the family page",
            "crates/x/src/op.rs:7: `KvLayout` names the family page",
            "crates/x/src/op.rs:7: `Filter` names the family norm",
        ]
    );
}

#[test]
fn crate_roots_may_register_families_and_nothing_else() {
    let vocabulary = sample_vocabulary();
    let root = "pub mod norm;\nmod page;\npub use norm::{rmsnorm, Other};\npub use crate::page::KvLayout;\n\
                pub const ALL: &[X] = &[norm::FAMILY, page::OPS];\nferrinfer_launch::norm_ops!(tch_functions);\n";
    assert!(violations("crates/x/src/lib.rs", root, &vocabulary).is_empty());
    let found: Vec<String> = violations("crates/x/src/op.rs", root, &vocabulary).into_iter().map(|(w, _)| w).collect();
    assert_eq!(found, ["norm", "page", "norm", "rmsnorm", "page", "KvLayout", "norm", "page"], "only roots register");
    let misuse = "fn f() { norm::NormKernel::Rms; page::helper(); }\nuse other::rmsnorm;\n";
    let found: Vec<String> =
        violations("crates/x/src/lib.rs", misuse, &vocabulary).into_iter().map(|(w, _)| w).collect();
    assert_eq!(found, ["norm", "NormKernel", "page", "rmsnorm"]);
}

#[test]
fn declarations_are_found() {
    let source = "pub enum E { A, #[x] B(u8), C { f: u8 } }\nfn g(lanes: u32) { let mut n = 1; let m = X { y: 2 }; }";
    let found: Vec<String> = declared(&tokens(source)).into_iter().collect();
    assert_eq!(found, ["A", "B", "C", "E", "f", "g", "lanes", "m", "n", "y"]);
}

#[test]
fn identifiers_split_into_words() {
    assert_eq!(words("PageIds"), ["page", "ids"]);
    assert_eq!(words("PAGE_SIZE"), ["page", "size"]);
    assert_eq!(words("page_table"), ["page", "table"]);
    assert_eq!(words("NormModule"), ["norm", "module"]);
    assert_eq!(words("HTTPServer2x"), ["http", "server2x"]);
    assert_eq!(words("rmsnorm"), ["rmsnorm"], "an op name is vocabulary by the tables, not by its words");
}

#[test]
fn the_vocabulary_comes_from_the_families_files() {
    let vocabulary = vocabulary(root());
    for (op, family) in [("rmsnorm", "norm"), ("append_paged_kv_cache", "page"), ("softmax", "sampling")] {
        assert_eq!(vocabulary.ops.get(op).map(String::as_str), Some(family), "{op}");
    }
    assert_eq!(vocabulary.items.get("KvLayout").map(String::as_str), Some("page"));
    for convention in ["FAMILY", "OPS", "LAYOUT_VAR"] {
        assert!(!vocabulary.items.contains_key(convention), "{convention} is every family's");
    }
    for shared_sense in ["lanes", "Segments", "Positions"] {
        assert!(!vocabulary.items.contains_key(shared_sense), "shared code declares {shared_sense} in its own sense");
    }
}
