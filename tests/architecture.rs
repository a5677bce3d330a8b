//! The shape of the source tree: no module imports, directly or through
//! others, a module that imports it.
//!
//! Every file under `src/` is a node. An edge runs from a file to each file
//! of ours it names: `use crate::a::b::C`, `super::x`, a child module's
//! items (`use child::Item`), and paths written inline in code
//! (`crate::metrics::Metrics::new()`). A path resolves to the deepest module
//! file it names, so `crate::proxy::rules::forward::Peer` is an edge to
//! `src/proxy/rules/forward.rs`. A folder's `mod.rs` therefore may declare
//! and re-export its children, but a child that needs something shared with
//! its siblings finds it in a sibling, never in the `mod.rs` above it.
//!
//! The parse is deliberately small: comments and string literals are
//! removed, then `use` trees are expanded and `crate::`/`super::`/`self::`
//! paths read. The first test checks the parse itself on a fixture, so that
//! a parser that found nothing could not make the real check pass.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path, `["proxy", "rules", "forward"]`; the crate root is `[]`.
type Module = Vec<String>;

struct Tree {
    /// Every module that has a file, with its file.
    files: BTreeMap<Module, PathBuf>,
}

impl Tree {
    fn load(src: &Path) -> Tree {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                    continue;
                }
                let relative = path.strip_prefix(src).unwrap();
                let mut module: Module = relative
                    .with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let last = module.last().cloned().unwrap_or_default();
                if last == "mod" || last == "lib" {
                    module.pop();
                }
                if last == "main" {
                    // The binary is its own crate; it uses the library as
                    // `waitgate::`, not `crate::`.
                    continue;
                }
                files.insert(module, path);
            }
        }
        Tree { files }
    }

    /// The deepest module with a file that `path` starts with.
    fn resolve(&self, path: &[String]) -> Option<Module> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|m| self.files.contains_key(m))
    }

    /// The modules each module imports (self-imports left out).
    fn edges(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut edges = BTreeMap::new();
        for (module, file) in &self.files {
            let text = strip(&std::fs::read_to_string(file).unwrap());
            let is_folder = file
                .file_name()
                .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
            let children = children(&text);
            let inline = inline_modules(&text);
            let mut out = BTreeSet::new();
            for (at, path) in paths(&text) {
                // Inside `mod tests { ... }`, `super` is this file's module.
                let depth = inline.iter().filter(|r| r.contains(&at)).count();
                let mut here = module.clone();
                here.extend(std::iter::repeat_n(String::from("{inline}"), depth));
                let absolute = absolute(&here, is_folder, &children, &path).map(|mut p| {
                    if let Some(i) = p.iter().position(|s| s == "{inline}") {
                        p.truncate(i);
                    }
                    p
                });
                if let Some(absolute) = absolute {
                    if let Some(target) = self.resolve(&absolute) {
                        if &target != module && !target.is_empty() {
                            out.insert(target);
                        }
                    }
                }
            }
            edges.insert(module.clone(), out);
        }
        edges
    }
}

/// `path` (as written in `module`) made absolute from the crate root, or
/// `None` when it is not ours (`std::`, `pingora::`, a local name).
fn absolute(
    module: &Module,
    is_folder: bool,
    children: &BTreeSet<String>,
    path: &[String],
) -> Option<Vec<String>> {
    let first = path.first()?;
    // A file `a/b.rs` is module `a::b`, whose `super` is `a`; a folder
    // `a/b/mod.rs` is also `a::b`. Both take `self` as themselves.
    let _ = is_folder;
    let mut base: Vec<String>;
    let mut rest = path;
    match first.as_str() {
        "crate" => {
            base = Vec::new();
            rest = &path[1..];
        }
        "self" => {
            base = module.clone();
            rest = &path[1..];
        }
        "super" => {
            base = module.clone();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        name if children.contains(name) => base = module.clone(),
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The child modules a file declares (`mod x;`, `pub mod x;`), not inline
/// ones (`mod tests { ... }`): those live in the same file.
fn children(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        let rest = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("pub(crate) mod "))
            .or_else(|| line.strip_prefix("mod "));
        if let Some(name) = rest.and_then(|r| r.strip_suffix(';')) {
            out.insert(name.trim().to_string());
        }
    }
    out
}

/// Removes comments, string and character literals, so that neither a doc
/// line nor a message that mentions `crate::x` counts as an import.
fn strip(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            i += end;
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|&c| c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..]
                .find(&close)
                .map_or(rest.len(), |e| body + e + close.len());
            out.push_str("\"\"");
            i += end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                if bytes[j] == b'\\' {
                    j += 1;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if bytes[i] == b'\'' && is_char_literal(&bytes[i..]) {
            let mut j = i + 1;
            if bytes[j] == b'\\' {
                j += 1;
            }
            while j < bytes.len() && bytes[j] != b'\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// A `'` that opens a character literal rather than a lifetime.
fn is_char_literal(bytes: &[u8]) -> bool {
    match bytes.get(1) {
        Some(b'\\') => true,
        Some(_) => bytes.get(2) == Some(&b'\'') || !bytes[1].is_ascii(),
        None => false,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The byte ranges of the inline modules (`mod tests { ... }`) of a file.
fn inline_modules(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("mod ") {
        let start = from + at;
        from = start + 4;
        if text[..start].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &text[start + 4..];
        let name_len = rest.chars().take_while(|&c| is_ident(c)).count();
        let after = rest[name_len..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let open = start + 4 + name_len + (rest[name_len..].len() - after.len());
        let mut depth = 0;
        let mut end = text.len();
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push(open..end);
    }
    out
}

/// Every path a file names, with where: expanded `use` trees and inline
/// paths.
fn paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    // `use` trees, up to their `;`.
    let mut search = 0;
    while let Some(at) = text[search..].find("use ") {
        let start = search + at;
        search = start + 4;
        let before = text[..start].chars().next_back();
        if before.is_some_and(is_ident) {
            continue;
        }
        let Some(end) = text[start..].find(';') else {
            break;
        };
        let tree = text[start + 4..start + end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut expanded = Vec::new();
        expand(&tree, &mut Vec::new(), &mut expanded);
        out.extend(expanded.into_iter().map(|p| (start, p)));
        search = start + end;
    }
    // Inline paths: every `crate::`, `super::` or `self::` outside those.
    for anchor in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(anchor) {
            let start = from + at;
            from = start + anchor.len();
            if text[..start].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let path: String = text[start..]
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            let segments: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            out.push((start, segments));
        }
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d as e, *}}`) into its paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let depth = prefix.len();
        prefix.extend(
            head.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        for part in split_top(inner) {
            expand(part, prefix, out);
        }
        prefix.truncate(depth);
        return;
    }
    let tree = tree.split(" as ").next().unwrap_or(tree);
    let mut path = prefix.clone();
    path.extend(
        tree.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*" && *s != "self")
            .map(str::to_string),
    );
    out.push(path);
}

/// Splits `a, b::{c, d}, e` at its top-level commas.
fn split_top(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The cycles of the graph: each strongly connected set of two or more
/// modules, found with Tarjan's algorithm.
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        next: usize,
        found: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            let Some((w, _)) = edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.clone());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.found.push(set);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}

fn show(cycle: &[Module]) -> String {
    cycle
        .iter()
        .map(|m| m.join("::"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes a fixture tree with one cycle (`a` → `b::c` → `a`) and one
/// acyclic import through a grouped `use`, and checks the parse finds both.
#[test]
fn the_checker_finds_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("waitgate-arch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).unwrap();
    let write = |p: &str, t: &str| std::fs::write(dir.join(p), t).unwrap();
    write("lib.rs", "pub mod a;\npub mod b;\npub mod leaf;\n");
    write(
        "a.rs",
        "//! Mentions crate::leaf only in a comment.\nuse crate::{b::c::Thing, leaf};\n",
    );
    write(
        "b/mod.rs",
        "pub mod c;\npub use c::Thing;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    );
    write(
        "b/c.rs",
        "pub struct Thing;\nfn f() -> &'static str { let _ = crate::a::x(); \"crate::leaf\" }\n",
    );
    write(
        "leaf.rs",
        "// use crate::a;\nconst S: &str = \"use crate::a;\";\nmod tests { use super::*; }\n",
    );
    let tree = Tree::load(&dir);
    let edges = tree.edges();
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Module>();
    assert_eq!(
        edges[&m("a")],
        [m("b::c"), m("leaf")].into_iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(edges[&m("b")], [m("b::c")].into_iter().collect());
    assert!(edges[&m("leaf")].is_empty(), "{:?}", edges[&m("leaf")]);
    assert_eq!(cycles(&edges), vec![vec![m("a"), m("b::c")]]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `edges` have no cycle; else the cycles, as `what`.
fn assert_no_cycles(edges: &BTreeMap<Module, BTreeSet<Module>>, what: &str) {
    let found = cycles(edges);
    let report: Vec<String> = found.iter().map(|c| show(c)).collect();
    assert!(
        found.is_empty(),
        "{what} (each line is a set of modules that reach each other):\n{}",
        report.join("\n")
    );
}

#[test]
fn no_module_imports_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let tree = Tree::load(&src);
    assert!(tree.files.len() > 20, "found {} files", tree.files.len());
    let edges = tree.edges();
    assert_no_cycles(&edges, "import cycles");
}

/// The leaf modules import nothing of ours: the rules everything else
/// shares.
#[test]
fn leaf_modules_import_nothing_of_ours() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let tree = Tree::load(&src);
    let edges = tree.edges();
    for leaf in [
        "path",
        "user",
        "error",
        "shutdown",
        "time",
        "edge::revoked",
        "wire::length",
    ] {
        let module: Module = leaf.split("::").map(String::from).collect();
        let out = edges
            .get(&module)
            .unwrap_or_else(|| panic!("the module {leaf} is missing"));
        assert!(out.is_empty(), "{leaf} imports {out:?}");
    }
}

/// The same at the top: the crate's top-level modules (`queue`, `control`,
/// `proxy`, ...), each taken whole, import no module that imports them,
/// through inline paths (`crate::queue_api::register::handle(..)`) as much as
/// through `use`. The crate root (`lib.rs`, which declares them all) is
/// left out.
#[test]
fn no_top_level_module_imports_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let tree = Tree::load(&src);
    let mut top: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, to) in tree.edges() {
        let Some(head) = from.first() else { continue };
        let entry = top.entry(vec![head.clone()]).or_default();
        for target in to {
            if let Some(other) = target.first().filter(|t| *t != head) {
                entry.insert(vec![other.clone()]);
            }
        }
    }
    assert_no_cycles(&top, "top-level import cycles");
}
