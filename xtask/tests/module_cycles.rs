//! Tidy: within each crate, modules depend on one another without a cycle, so that every crate
//! reads bottom-up — a module can be understood, tested and moved with only the modules below it.
//!
//! A module depends on another where its source names it: a path from `crate::`, `super::` or
//! `self::`, in a `use` or anywhere in the code, tests included. A path is followed through the
//! names it passes — child modules, and the items `use` brings into a module (so a re-export,
//! `crate::BuildError` or `super::Partial`, leads to the module that defines the item) — to the
//! last module it reaches. Comments, strings and `$crate` in macros name nothing. Inline modules
//! (`mod tests { … }`) belong to their file: the graph is one node a file.
//!
//! Every crate root of every package is checked — its `lib.rs` and `main.rs`, the `.rs` files of
//! its `src/bin`, `tests`, `benches` and `examples` folders and its `build.rs` — with the file
//! modules their `mod` declarations reach.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Cycles not broken yet, as `(crate root, cycle)`: no other may appear, and each must still be
/// there (its entry goes once it is broken).
const KNOWN_CYCLES: &[(&str, &str)] = &[
    ("crates/ferrinfer-launch/src/lib.rs", "error → tensor → error"),
    ("crates/ferrinfer-launch/src/lib.rs", "logging → op → logging"),
];

#[test]
fn no_crate_has_a_module_cycle() {
    let root = workspace_root();
    let found: Vec<Cycle> = crate_roots(&root).iter().flat_map(|file| module_cycles(&root, file)).collect();
    let known = |c: &Cycle| KNOWN_CYCLES.contains(&(c.crate_root.as_str(), c.modules.as_str()));
    let new: Vec<&str> = found.iter().filter(|c| !known(c)).map(|c| c.text.as_str()).collect();
    assert!(new.is_empty(), "module cycles (move the shared piece into a lower module):\n{}", new.join("\n"));
    let broken = KNOWN_CYCLES.iter().filter(|&&(r, m)| !found.iter().any(|c| c.crate_root == r && c.modules == m));
    let broken: Vec<String> = broken.map(|(r, m)| format!("{r}: {m}")).collect();
    assert!(broken.is_empty(), "cycles gone, remove them from KNOWN_CYCLES:\n{}", broken.join("\n"));
}

/// The crate roots of every package of the workspace (`crates/*`, `xtask`).
fn crate_roots(root: &Path) -> Vec<PathBuf> {
    let mut packages: Vec<PathBuf> = fs::read_dir(root.join("crates")).unwrap().map(|e| e.unwrap().path()).collect();
    packages.push(root.join("xtask"));
    packages.sort();
    let mut roots = Vec::new();
    for package in packages.iter().filter(|p| p.join("Cargo.toml").is_file()) {
        roots.extend(
            ["src/lib.rs", "src/main.rs", "build.rs"].map(|f| package.join(f)).into_iter().filter(|p| p.is_file()),
        );
        for folder in ["src/bin", "tests", "benches", "examples"] {
            roots.extend(rust_files(&package.join(folder)));
        }
    }
    roots
}

/// The `.rs` files directly in `dir`, sorted (none if it does not exist).
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "rs")).collect();
    files.sort();
    files
}

/// A cycle of modules within a crate.
#[derive(Debug)]
struct Cycle {
    /// The crate's root file, from the workspace root.
    crate_root: String,
    /// The modules of a shortest cycle, `a → b → a`.
    modules: String,
    /// The cycle and the reference behind each of its steps, for a reader.
    text: String,
}

/// Each cycle among the modules of the crate rooted at `crate_root` (a shortest one through each
/// set of modules that depend on one another).
fn module_cycles(root: &Path, crate_root: &Path) -> Vec<Cycle> {
    let graph = ModuleTree::load(crate_root).file_graph();
    let shown = |file: &Path| file.strip_prefix(root).unwrap_or(file).display().to_string();
    let describe = |members: Vec<usize>| {
        let cycle = shortest_cycle(&graph.edges, &members);
        let modules: Vec<&str> = cycle.iter().map(|&f| graph.names[f].as_str()).collect();
        let modules = modules.join(" → ");
        let mut text = format!("{}: {modules}", shown(crate_root));
        for step in cycle.windows(2) {
            let why = &graph.edges[&step[0]][&step[1]];
            let (from, to) = (&graph.names[step[0]], &graph.names[step[1]]);
            text += &format!("\n    {from} → {to}: {}:{} `{}`", shown(&graph.files[step[0]]), why.line, why.path);
        }
        if members.len() > cycle.len() - 1 {
            let all: Vec<&str> = members.iter().map(|&f| graph.names[f].as_str()).collect();
            text += &format!("\n    (all of {} depend on one another)", all.join(", "));
        }
        Cycle { crate_root: shown(crate_root), modules, text }
    };
    strongly_connected(&graph.edges).into_iter().filter(|members| members.len() > 1).map(describe).collect()
}

/// A token of Rust source as the graph needs it; comments, literals and lifetimes are dropped.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// Splits source into [`Token`]s, each with its line.
struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    tokens: Vec<(Token, usize)>,
}

impl Lexer {
    fn tokenize(text: &str) -> Vec<(Token, usize)> {
        let mut lexer = Lexer { chars: text.chars().collect(), at: 0, line: 1, tokens: Vec::new() };
        while lexer.at < lexer.chars.len() {
            lexer.step();
        }
        lexer.tokens
    }

    fn peek(&self, k: usize) -> char {
        self.chars.get(self.at + k).copied().unwrap_or('\0')
    }

    /// Consumes one token, comment, literal or space.
    fn step(&mut self) {
        match (self.peek(0), self.peek(1)) {
            ('/', '/') => self.skip_while(|c| c != '\n'),
            ('/', '*') => self.skip_block_comment(),
            ('"', _) => self.skip_literal(1, "\"", true),
            ('b' | 'c', '"') => self.skip_literal(2, "\"", true),
            ('b', '\'') => self.skip_literal(2, "'", true),
            ('\'', _) => self.skip_char_or_lifetime(),
            (c, _) if c.is_alphabetic() || c == '_' => self.word(),
            (c, _) if c.is_ascii_digit() => self.skip_number(),
            (':', ':') => self.push(Token::PathSep, 2),
            (c, _) if c.is_whitespace() => self.skip_char(),
            (c, _) => self.push(Token::Punct(c), 1),
        }
    }

    fn push(&mut self, token: Token, width: usize) {
        self.tokens.push((token, self.line));
        self.at += width;
    }

    /// One character, counting lines.
    fn skip_char(&mut self) {
        self.line += (self.peek(0) == '\n') as usize;
        self.at += 1;
    }

    fn skip_while(&mut self, keep: impl Fn(char) -> bool) {
        while self.at < self.chars.len() && keep(self.chars[self.at]) {
            self.at += 1;
        }
    }

    /// Skips `open` characters, then to just past `close`, counting lines; with `escapes`, a
    /// backslash escapes the next character.
    fn skip_literal(&mut self, open: usize, close: &str, escapes: bool) {
        let close: Vec<char> = close.chars().collect();
        for _ in 0..open {
            self.skip_char();
        }
        while self.at < self.chars.len() && !self.chars[self.at..].starts_with(&close) {
            self.at += (escapes && self.peek(0) == '\\') as usize;
            self.skip_char();
        }
        self.at += close.len();
    }

    /// `1_000`, `0x7f`, `1.5e3`; not the `..` of a range.
    fn skip_number(&mut self) {
        while self.peek(0).is_alphanumeric()
            || self.peek(0) == '_'
            || (self.peek(0) == '.' && self.peek(1).is_ascii_digit())
        {
            self.at += 1;
        }
    }

    fn skip_block_comment(&mut self) {
        let mut depth = 0;
        loop {
            match (self.peek(0), self.peek(1)) {
                ('/', '*') => (depth, self.at) = (depth + 1, self.at + 2),
                ('*', '/') => (depth, self.at) = (depth - 1, self.at + 2),
                ('\0', _) => return,
                (c, _) => (self.line, self.at) = (self.line + (c == '\n') as usize, self.at + 1),
            }
            if depth == 0 {
                return;
            }
        }
    }

    /// A char literal (`'x'`, `'\n'`), or a lifetime or label (`'a`), which names nothing of ours.
    fn skip_char_or_lifetime(&mut self) {
        if self.peek(1) == '\\' {
            self.skip_literal(1, "'", true);
        } else if self.peek(2) == '\'' {
            self.at += 3;
        } else {
            self.at += 1;
            self.skip_while(|c| c.is_alphanumeric() || c == '_');
        }
    }

    /// A raw string (`r"…"`, `br#"…"#`, `cr"…"`), a raw identifier (`r#name`: its name) or a
    /// name.
    fn word(&mut self) {
        let prefix = matches!(self.peek(0), 'b' | 'c') as usize;
        if self.peek(prefix) == 'r' {
            let hashes = self.chars[self.at + prefix + 1..].iter().take_while(|&&c| c == '#').count();
            if self.peek(prefix + 1 + hashes) == '"' {
                return self.skip_literal(prefix + hashes + 2, &format!("\"{}", "#".repeat(hashes)), false);
            }
            if prefix == 0 && hashes == 1 {
                self.at += 2;
            }
        }
        let start = self.at;
        self.skip_while(|c| c.is_alphanumeric() || c == '_');
        self.tokens.push((Token::Ident(self.chars[start..self.at].iter().collect()), self.line));
    }
}

/// Keywords that introduce an item and its name.
const ITEM_KEYWORDS: &[&str] = &["fn", "struct", "enum", "trait", "type", "const", "static", "union"];
/// What a path within the crate starts with.
const PATH_STARTS: &[&str] = &["crate", "super", "self"];

/// A module: a file, or an inline `mod name { … }` within one.
#[derive(Default)]
struct Module {
    parent: Option<usize>,
    /// The file it is written in (its node in the graph); none for a `mod` without a file.
    file: Option<usize>,
    /// Where the files of its child modules are.
    dir: PathBuf,
    children: BTreeMap<String, usize>,
    /// The names of the items it defines.
    defined: BTreeSet<String>,
    /// The names `use` brings in, each to the path it stands for.
    imports: BTreeMap<String, Vec<String>>,
    /// The paths of its glob imports (`use path::*`).
    globs: Vec<Vec<String>>,
}

/// A path from `crate::`, `super::` or `self::`, where it is written.
struct Reference {
    module: usize,
    path: Vec<String>,
    line: usize,
}

/// A crate's modules, from its root file down its `mod` declarations.
struct ModuleTree {
    modules: Vec<Module>,
    files: Vec<PathBuf>,
    references: Vec<Reference>,
}

/// The first reference that makes one file's module depend on another's.
struct Why {
    line: usize,
    path: String,
}

/// The modules' dependencies, one node a file.
struct FileGraph {
    files: Vec<PathBuf>,
    /// Each file's module path (`crate` for the root).
    names: Vec<String>,
    edges: BTreeMap<usize, BTreeMap<usize, Why>>,
}

/// One file's tokens, read from `at`.
struct Reader<'t> {
    tokens: &'t [(Token, usize)],
    at: usize,
}

impl<'t> Reader<'t> {
    fn ident(&self, k: usize) -> Option<&'t str> {
        match self.tokens.get(self.at + k) {
            Some((Token::Ident(name), _)) => Some(name),
            _ => None,
        }
    }

    fn is(&self, k: usize, token: &Token) -> bool {
        self.tokens.get(self.at + k).is_some_and(|(t, _)| t == token)
    }

    fn line(&self) -> usize {
        self.tokens.get(self.at).map_or(0, |t| t.1)
    }

    /// Whether a path within the crate starts here: not `$crate::` (a macro's) nor the
    /// `in crate::…` of a visibility.
    fn at_path(&self) -> bool {
        let before = self.at.checked_sub(1).map(|b| &self.tokens[b].0);
        self.ident(0).is_some_and(|s| PATH_STARTS.contains(&s))
            && self.is(1, &Token::PathSep)
            && before != Some(&Token::Punct('$'))
            && before != Some(&Token::Ident("in".into()))
    }

    /// The path `a::b::c` from here.
    fn path(&mut self) -> Vec<String> {
        let mut path = vec![self.ident(0).unwrap_or_default().to_owned()];
        self.at += 1;
        while self.is(0, &Token::PathSep)
            && let Some(segment) = self.ident(1)
        {
            path.push(segment.to_owned());
            self.at += 2;
        }
        path
    }

    /// The leaves of the use tree from here under `prefix`: each path with its alias (`*` for a
    /// glob).
    fn use_tree(&mut self, mut prefix: Vec<String>, leaves: &mut Vec<(Vec<String>, Option<String>)>) {
        while self.is(0, &Token::PathSep) {
            self.at += 1;
        }
        if let Some(segment) = self.ident(0) {
            prefix.push(segment.to_owned());
            self.at += 1;
            if self.is(0, &Token::PathSep) {
                return self.use_tree(prefix, leaves);
            }
            let alias = (self.ident(0) == Some("as")).then(|| self.ident(1)).flatten();
            self.at += 2 * alias.is_some() as usize;
            leaves.push((prefix, alias.map(str::to_owned)));
        } else if self.is(0, &Token::Punct('*')) {
            self.at += 1;
            leaves.push((prefix, Some("*".to_owned())));
        } else if self.is(0, &Token::Punct('{')) {
            self.at += 1;
            while self.at < self.tokens.len() && !self.is(0, &Token::Punct('}')) {
                let before = self.at;
                self.use_tree(prefix.clone(), leaves);
                self.at += (self.at == before || self.is(0, &Token::Punct(','))) as usize;
            }
            self.at += 1;
        }
    }
}

impl ModuleTree {
    fn load(crate_root: &Path) -> Self {
        let mut tree = ModuleTree { modules: Vec::new(), files: Vec::new(), references: Vec::new() };
        let dir = crate_root.parent().unwrap().to_path_buf();
        tree.modules.push(Module { dir, ..Module::default() });
        tree.load_file(0, crate_root);
        tree
    }

    /// Reads `path`, the file of module `module`: its items, imports, references and modules.
    fn load_file(&mut self, module: usize, path: &Path) {
        self.files.push(path.to_path_buf());
        let file = self.files.len() - 1;
        self.modules[module].file = Some(file);
        let tokens = Lexer::tokenize(&fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
        let mut reader = Reader { tokens: &tokens, at: 0 };
        // The inline modules open here, each with the brace depth outside it.
        let mut scopes = vec![(module, 0usize)];
        let mut depth = 0usize;
        while reader.at < tokens.len() {
            let current = scopes.last().unwrap().0;
            match (reader.ident(0), reader.ident(1)) {
                (Some("mod"), Some(name)) if reader.is(2, &Token::Punct(';')) => {
                    self.file_module(current, name);
                    reader.at += 3;
                }
                (Some("mod"), Some(name)) if reader.is(2, &Token::Punct('{')) => {
                    scopes.push((self.add_module(current, name, Some(file)), depth));
                    depth += 1;
                    reader.at += 3;
                }
                // Not `impl Trait + use<…>` (precise capturing).
                (Some("use"), _) if !reader.is(1, &Token::Punct('<')) => {
                    reader.at += 1;
                    self.read_use(current, &mut reader);
                }
                _ if reader.at_path() => {
                    let line = reader.line();
                    self.references.push(Reference { module: current, path: reader.path(), line });
                }
                (Some("macro_rules"), _) if reader.is(1, &Token::Punct('!')) => {
                    self.modules[current].defined.extend(reader.ident(2).map(str::to_owned));
                    reader.at += 1;
                }
                (Some(keyword), Some(name)) if ITEM_KEYWORDS.contains(&keyword) && !ITEM_KEYWORDS.contains(&name) => {
                    self.modules[current].defined.insert(name.to_owned());
                    reader.at += 1;
                }
                _ if reader.is(0, &Token::Punct('{')) => {
                    depth += 1;
                    reader.at += 1;
                }
                _ if reader.is(0, &Token::Punct('}')) => {
                    let unbalanced = || panic!("{}:{}: a `}}` closes nothing", path.display(), reader.line());
                    depth = depth.checked_sub(1).unwrap_or_else(unbalanced);
                    if scopes.len() > 1 && scopes.last().unwrap().1 == depth {
                        scopes.pop();
                    }
                    reader.at += 1;
                }
                _ => reader.at += 1,
            }
        }
    }

    fn add_module(&mut self, parent: usize, name: &str, file: Option<usize>) -> usize {
        let dir = self.modules[parent].dir.join(name);
        self.modules.push(Module { parent: Some(parent), file, dir, ..Module::default() });
        let child = self.modules.len() - 1;
        self.modules[parent].children.insert(name.to_owned(), child);
        child
    }

    /// `mod name;` in `parent`: `<dir>/name.rs` or `<dir>/name/mod.rs`, read now.
    fn file_module(&mut self, parent: usize, name: &str) {
        let dir = self.modules[parent].dir.clone();
        let child = self.add_module(parent, name, None);
        let file = [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")].into_iter().find(|p| p.is_file());
        if let Some(file) = file {
            self.load_file(child, &file);
        }
    }

    /// The use declaration from `reader` to its `;`: its names into `module`'s imports, its paths
    /// from `crate::`, `super::` or `self::` as references.
    fn read_use(&mut self, module: usize, reader: &mut Reader) {
        let line = reader.line();
        let mut leaves = Vec::new();
        reader.use_tree(Vec::new(), &mut leaves);
        for (mut path, alias) in leaves {
            if path.first().is_some_and(|s| PATH_STARTS.contains(&s.as_str())) {
                self.references.push(Reference { module, path: path.clone(), line });
            }
            if alias.as_deref() == Some("*") {
                self.modules[module].globs.push(path);
                continue;
            }
            if path.len() > 1 && path.last().is_some_and(|s| s == "self") {
                path.pop();
            }
            let name = alias.unwrap_or_else(|| path.last().cloned().unwrap_or_default());
            self.modules[module].imports.insert(name, path);
        }
    }

    fn parent(&self, module: usize) -> usize {
        self.modules[module].parent.unwrap_or(module)
    }

    /// The last module `path`, written in `module`, reaches (following imports, `depth` deep);
    /// None where it leaves the crate.
    fn resolve(&self, module: usize, path: &[String], depth: usize) -> Option<usize> {
        let mut at = module;
        for (k, segment) in path.iter().enumerate() {
            let here = &self.modules[at];
            match segment.as_str() {
                "crate" if k == 0 => at = 0,
                "super" => at = self.parent(at),
                "self" => {}
                name if here.children.contains_key(name) => at = here.children[name],
                name if here.defined.contains(name) || depth > 32 => return Some(at),
                name if here.imports.contains_key(name) => {
                    let whole: Vec<String> = here.imports[name].iter().chain(&path[k + 1..]).cloned().collect();
                    return self.resolve(at, &whole, depth + 1);
                }
                name => return self.resolve_through_globs(at, name, &path[k..], depth).or((k > 0).then_some(at)),
            }
        }
        Some(at)
    }

    /// `path`, from `module`'s name `name` that none of its own is: through the glob import that
    /// brings it in, if one does.
    fn resolve_through_globs(&self, module: usize, name: &str, path: &[String], depth: usize) -> Option<usize> {
        let source = self.modules[module].globs.iter().find_map(|glob| {
            let source = self.resolve(module, glob, depth + 1)?;
            self.names(source).contains(name).then_some(source)
        })?;
        self.resolve(source, path, depth + 1)
    }

    /// The names a module has: its children, items and imports.
    fn names(&self, module: usize) -> BTreeSet<&str> {
        let m = &self.modules[module];
        m.children.keys().chain(&m.defined).chain(m.imports.keys()).map(String::as_str).collect()
    }

    fn file_graph(&self) -> FileGraph {
        let mut names = vec![String::new(); self.files.len()];
        for (index, module) in self.modules.iter().enumerate() {
            let inline = index > 0 && self.modules[self.parent(index)].file == module.file;
            if let (Some(file), false) = (module.file, inline) {
                names[file] = self.module_path(index);
            }
        }
        let mut edges: BTreeMap<usize, BTreeMap<usize, Why>> = BTreeMap::new();
        for reference in &self.references {
            let target = self.resolve(reference.module, &reference.path, 0);
            let (from, to) = (self.modules[reference.module].file, target.and_then(|t| self.modules[t].file));
            if let (Some(from), Some(to)) = (from, to)
                && from != to
            {
                let why = || Why { line: reference.line, path: reference.path.join("::") };
                edges.entry(from).or_default().entry(to).or_insert_with(why);
            }
        }
        FileGraph { files: self.files.clone(), names, edges }
    }

    fn module_path(&self, module: usize) -> String {
        let mut segments = Vec::new();
        let mut at = module;
        while let Some(parent) = self.modules[at].parent {
            let name = self.modules[parent].children.iter().find(|&(_, &c)| c == at).unwrap().0;
            segments.push(name.as_str());
            at = parent;
        }
        segments.reverse();
        if segments.is_empty() { "crate".to_owned() } else { segments.join("::") }
    }
}

/// The strongly connected components of `edges` (Tarjan's algorithm), each sorted.
fn strongly_connected(edges: &BTreeMap<usize, BTreeMap<usize, Why>>) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a BTreeMap<usize, BTreeMap<usize, Why>>,
        index: BTreeMap<usize, usize>,
        low: BTreeMap<usize, usize>,
        stack: Vec<usize>,
        on_stack: BTreeSet<usize>,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, node: usize) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for &next in s.edges.get(&node).map(|e| e.keys().copied().collect::<Vec<_>>()).unwrap_or_default().iter() {
            if !s.index.contains_key(&next) {
                visit(s, next);
                s.low.insert(node, s.low[&node].min(s.low[&next]));
            } else if s.on_stack.contains(&next) {
                s.low.insert(node, s.low[&node].min(s.index[&next]));
            }
        }
        if s.low[&node] == s.index[&node] {
            let mut component = Vec::new();
            while let Some(member) = s.stack.pop() {
                s.on_stack.remove(&member);
                component.push(member);
                if member == node {
                    break;
                }
            }
            component.sort();
            s.components.push(component);
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &node in edges.keys() {
        if !state.index.contains_key(&node) {
            visit(&mut state, node);
        }
    }
    state.components
}

/// A shortest cycle through the first of `members` (a strongly connected component), as the
/// nodes it visits, back to the first.
fn shortest_cycle(edges: &BTreeMap<usize, BTreeMap<usize, Why>>, members: &[usize]) -> Vec<usize> {
    let start = members[0];
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &next in edges.get(&node).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                let mut cycle = vec![start, node];
                while let Some(&previous) = came_from.get(cycle.last().unwrap()) {
                    cycle.push(previous);
                }
                cycle.reverse();
                return cycle;
            }
            if members.contains(&next) && next != start && !came_from.contains_key(&next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    unreachable!("a strongly connected component of several nodes has a cycle through each")
}

/// A crate of `files` (`(path under the crate, text)`, the root `lib.rs`) in a new folder.
fn crate_of(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    dir
}

/// The cycles of the crate in `dir`, as `a → b → a`.
fn cycles_in(dir: &Path) -> Vec<String> {
    module_cycles(dir, &dir.join("lib.rs")).into_iter().map(|c| c.modules).collect()
}

#[test]
fn a_planted_cycle_is_named_with_the_references_that_make_it() {
    let dir = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        ("b.rs", "pub struct B;\n\nfn make() -> super::a::A {\n    super::a::A\n}\n"),
        ("c.rs", "use crate::{a::A, b::B};\n"),
    ]);
    let cycles = module_cycles(dir.path(), &dir.path().join("lib.rs"));
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].modules, "a → b → a");
    assert!(cycles[0].text.contains("a → b: a.rs:1 `crate::b::B`"), "{}", cycles[0].text);
    assert!(cycles[0].text.contains("b → a: b.rs:3 `super::a::A`"), "{}", cycles[0].text);
}

#[test]
fn a_cycle_through_a_re_export_is_found() {
    let dir = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\npub use b::B;\n"),
        ("a.rs", "use crate::B;\npub struct A;\n"),
        ("b.rs", "pub struct B(crate::a::A);\n"),
    ]);
    assert_eq!(cycles_in(dir.path()), ["a → b → a"]);
}

#[test]
fn siblings_in_a_folder_reached_through_their_parents_re_exports_are_found() {
    let dir = crate_of(&[
        ("lib.rs", "pub mod family;\n"),
        ("family/mod.rs", "mod one;\nmod two;\n\npub use one::One;\npub use two::{Two, three::Three};\n"),
        ("family/one.rs", "use super::Three;\npub struct One;\n"),
        ("family/two.rs", "mod three;\npub struct Two;\n"),
        ("family/two/three.rs", "pub struct Three(crate::family::One);\n"),
    ]);
    assert_eq!(cycles_in(dir.path()), ["family::one → family::two::three → family::one"]);
}

#[test]
fn comments_strings_macros_lifetimes_and_a_files_own_test_module_name_no_module() {
    let a = r###"
// crate::b::B
/// [`crate::b::B`] /* crate::b */
/* nested /* crate::b::B */ crate::b::B */
const S: &str = "crate::b::B \" crate::b";
const R: &str = r#"crate::b::B"#;
const C: char = '"';
macro_rules! m {
    () => {
        $crate::b::B
    };
}
pub struct A<'a>(&'a str);
fn f<'b>(x: &'b str) -> impl Fn() + use<'b> {
    move || drop(x)
}
#[cfg(test)]
mod tests {
    use super::*;
    fn g(_: A<'_>) {}
}
"###;
    let dir = crate_of(&[("lib.rs", "mod a;\nmod b;\n"), ("a.rs", a), ("b.rs", "use crate::a::A;\npub struct B;\n")]);
    assert!(cycles_in(dir.path()).is_empty());
}

#[test]
fn the_element_vector_cycle_planted_again_in_the_kernels_crate_is_found() {
    let src = workspace_root().join("crates/ferrinfer-kernels/src");
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&src, dir.path());
    let element = dir.path().join("element.rs");
    let text = fs::read_to_string(&element).unwrap() + "\npub(crate) use crate::vector::Packed;\n";
    fs::write(&element, text).unwrap();
    assert!(cycles_in(dir.path()).iter().any(|c| c == "element → vector → element"), "{:?}", cycles_in(dir.path()));
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() { copy_tree(&path, &target) } else { fs::copy(&path, &target).map(drop).unwrap() }
    }
}
