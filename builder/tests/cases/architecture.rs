//! The workspace's shape, checked. Between crates: each depends only on crates below it
//! (Cargo's graph, read from the manifests). Inside every crate: no import circles between its
//! modules; inside the builder, the package backends import nothing above them. Imports are read
//! from the sources as text, code only (comments and `#[cfg(test)]` items left out), in every
//! form Rust has: `crate::`, `super::`, `self::`, `use` trees with braces, and names a module
//! re-exports (`pub use`), followed to the module that defines them. docs/architecture.md draws
//! both.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The library source folders of the workspace's crates (binaries import their library by
/// its crate name, so they take no part in a crate's module graph).
fn crate_sources() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut out = vec![];
    for top in std::fs::read_dir(root).unwrap() {
        let top = top.unwrap().path();
        for dir in [top.clone()].into_iter().chain(
            std::fs::read_dir(&top)
                .into_iter()
                .flatten()
                .map(|e| e.unwrap().path())
                .filter(|_| top.ends_with("crates")),
        ) {
            if dir.join("Cargo.toml").is_file() && dir.join("src/lib.rs").is_file() {
                out.push(dir.join("src"));
            }
        }
    }
    out.sort();
    out
}

/// The code of a Rust source: comments, string literals and `#[cfg(test)]` items removed
/// (their text must not count as imports).
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
        } else if b[i] == b'"' || (b[i] == b'r' && matches!(b.get(i + 1), Some(b'"' | b'#'))) {
            // A string literal (raw ones with their hashes); `r` only where it starts a token.
            let prev = out.chars().last().unwrap_or(' ');
            if b[i] == b'r' && (prev.is_alphanumeric() || prev == '_') {
                out.push('r');
                i += 1;
                continue;
            }
            let (hashes, start) = if b[i] == b'r' {
                let h = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                (h, i + 2 + h)
            } else {
                (usize::MAX, i + 1)
            };
            let mut j = start;
            loop {
                if j >= b.len() {
                    break;
                }
                if hashes == usize::MAX && b[j] == b'\\' {
                    j += 2;
                    continue;
                }
                if b[j] == b'"' {
                    let h = if hashes == usize::MAX { 0 } else { hashes };
                    if b[j + 1..].iter().take(h).filter(|&&c| c == b'#').count() == h {
                        j += 1 + h;
                        break;
                    }
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): keep lifetimes.
            if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else if b.get(i + 1) == Some(&b'\\') {
                i = text[i + 2..].find('\'').map_or(b.len(), |e| i + 2 + e + 1);
            } else {
                out.push('\'');
                i += 1;
            }
        } else if b[i..].starts_with(b"#[cfg(test)]") {
            i = skip_item(b, i + "#[cfg(test)]".len());
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The end of the item that starts at `i` (after its attributes): its `;` or its closing brace.
fn skip_item(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b';' if depth == 0 => return i + 1,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 && b[i] == b'}' {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// One crate's modules: their paths (`""` the root, `packages::apt`) and files.
fn modules_of(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p != src.join("bin") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let rel = rel.to_string_lossy();
            let module = match rel.as_ref() {
                "lib" => String::new(),
                "main" => continue,
                r => r.trim_end_matches("/mod").replace('/', "::"),
            };
            out.insert(module, p);
        }
    }
    out
}

/// A `use` tree's leaves as full paths: `a::{b, c::{self, d}}` gives `a::b`, `a::c`, `a::c::d`;
/// each with the name it binds (an `as` alias, or its last segment).
fn use_leaves(tree: &str) -> Vec<(String, String)> {
    fn walk(prefix: &str, tree: &str, out: &mut Vec<(String, String)>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim().trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let base = join_path(prefix, head);
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        walk(&base, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            walk(&base, &inner[start..], out);
            return;
        }
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim())),
            None => (tree, None),
        };
        let full = if path == "self" { prefix.to_string() } else { join_path(prefix, path) };
        let name = alias.unwrap_or_else(|| full.rsplit("::").next().unwrap()).to_string();
        out.push((full, name));
    }
    let mut out = vec![];
    walk("", tree, &mut out);
    out
}

/// What one module's code names: the paths it imports or writes out, and what it re-exports.
struct Source {
    /// Paths starting with `crate`, `super` or `self`, as written.
    paths: Vec<String>,
    /// `pub use` (any visibility) leaves: the name bound here -> the path it stands for; a glob's
    /// name is `*`.
    reexports: Vec<(String, String)>,
}

fn read_source(text: &str) -> Source {
    let code = code_of(text);
    let mut paths = vec![];
    let mut reexports = vec![];
    // `use` statements, with their trees.
    let mut rest = code.as_str();
    let mut uses_removed = String::new();
    while let Some(i) = find_word(rest, "use") {
        let before = &rest[..i];
        let end = rest[i..].find(';').map_or(rest.len(), |e| i + e);
        let tree = &rest[i + 3..end];
        let public = before.trim_end().ends_with(')') && before.trim_end().contains("pub")
            || before.trim_end().ends_with("pub");
        for (full, name) in use_leaves(tree) {
            if public {
                reexports.push((name, full.clone()));
            }
            paths.push(full);
        }
        uses_removed.push_str(before);
        rest = &rest[(end + 1).min(rest.len())..];
    }
    uses_removed.push_str(rest);
    // Paths written out in code: `crate::x::y`, `super::super::z`, `self::w`.
    let b = uses_removed.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(k) = uses_removed[from..].find(start) {
            let at = from + k;
            from = at + start.len();
            let prev = at.checked_sub(1).map(|p| b[p]);
            if prev.is_some_and(|p| p.is_ascii_alphanumeric() || p == b'_' || p == b':') {
                continue;
            }
            let path: String = uses_removed[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(path.trim_end_matches(':').to_string());
        }
    }
    Source { paths, reexports }
}

/// Where the keyword `word` starts a statement in `s` (not part of a longer identifier).
fn find_word(s: &str, word: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(k) = s[from..].find(word) {
        let at = from + k;
        from = at + word.len();
        let prev_ok = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
        let next_ok = b.get(at + word.len()).is_some_and(|c| c.is_ascii_whitespace());
        if prev_ok && next_ok {
            return Some(at);
        }
    }
    None
}

/// A crate's module graph: each module -> the modules of the crate whose items its code names
/// (its own ancestors left out: a parent is the namespace its children live in).
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn of(src: &Path) -> Graph {
        let files = modules_of(src);
        let sources: BTreeMap<String, Source> = files
            .iter()
            .map(|(m, p)| (m.clone(), read_source(&std::fs::read_to_string(p).unwrap())))
            .collect();
        let mut edges = BTreeMap::new();
        for (m, s) in &sources {
            let mut deps = BTreeSet::new();
            for p in &s.paths {
                if let Some(target) = resolve(m, p, &sources, 0) {
                    let ancestor = m.starts_with(&format!("{target}::")) || target.is_empty();
                    if &target != m && !ancestor {
                        deps.insert(target);
                    }
                }
            }
            edges.insert(m.clone(), deps);
        }
        Graph { edges }
    }

    /// Every circle, each as `a -> b -> a`.
    fn circles(&self) -> Vec<String> {
        fn visit(
            m: &str,
            g: &BTreeMap<String, BTreeSet<String>>,
            path: &mut Vec<String>,
            done: &mut BTreeSet<String>,
            found: &mut Vec<String>,
        ) {
            if let Some(i) = path.iter().position(|p| p == m) {
                found.push(format!("{} -> {m}", path[i..].join(" -> ")));
                return;
            }
            if !done.insert(m.to_string()) {
                return;
            }
            path.push(m.to_string());
            for d in g.get(m).into_iter().flatten() {
                visit(d, g, path, done, found);
            }
            path.pop();
        }
        let mut found = Vec::new();
        let mut done = BTreeSet::new();
        for m in self.edges.keys() {
            visit(m, &self.edges, &mut Vec::new(), &mut done, &mut found);
        }
        found
    }
}

/// Two paths joined by `::`, either of them possibly empty (the crate root).
fn join_path(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// The module of this crate that the path `p`, written in module `m`, names; re-exports are
/// followed to the module that defines the item. `None` for other crates' paths.
fn resolve(m: &str, p: &str, sources: &BTreeMap<String, Source>, depth: u32) -> Option<String> {
    let mut segs: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<&str> = if m.is_empty() { vec![] } else { m.split("::").collect() };
    match segs.first() {
        Some(&"crate") => {
            base.clear();
            segs.remove(0);
        }
        Some(&"super" | &"self") => {
            while let Some(&s) = segs.first() {
                match s {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                segs.remove(0);
            }
        }
        // A path relative to the module (`use child::Item`, as edition 2018 allows), when
        // its first segment is a child module; otherwise another crate's.
        Some(first) if sources.contains_key(&join_path(m, first)) => {}
        _ => return None,
    }
    let mut full = base;
    full.extend(segs);
    // The longest prefix that is a module.
    let k = (0..=full.len()).rev().find(|&k| sources.contains_key(&full[..k].join("::")))?;
    let module = full[..k].join("::");
    if depth < 8 {
        if let Some(name) = full.get(k) {
            let src = &sources[&module];
            let via = src.reexports.iter().find(|(n, _)| n == name).map(|(_, f)| f.clone());
            if let Some(target) = via {
                let rest = full[k + 1..].join("::");
                let path = if rest.is_empty() { target } else { format!("{target}::{rest}") };
                if let Some(r) = resolve(&module, &path, sources, depth + 1) {
                    return Some(r);
                }
            }
            for (_, glob) in src.reexports.iter().filter(|(n, _)| n == "*") {
                let inner = glob.trim_end_matches("::*");
                let path = format!("{inner}::{}", full[k..].join("::"));
                if let Some(r) = resolve(&module, &path, sources, depth + 1) {
                    if r != module {
                        return Some(r);
                    }
                }
            }
        }
    }
    Some(module)
}

#[test]
fn the_import_reader_sees_every_form() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| {
        let p = src.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\n");
    // a -> b through a `use` tree with braces and `self`.
    write("a/mod.rs", "mod inner;\nuse super::{b::{self, Thing as T}};\n");
    // a::inner -> c through `super::super::`, written out in code.
    write("a/inner.rs", "fn f() { super::super::c::go(); }\n");
    // b -> d through a name e re-exports from d.
    write(
        "b.rs",
        "use crate::e::Moved;\n// use crate::c::NotCode;\nconst S: &str = \"crate::c::x\";\n",
    );
    write("e/mod.rs", "mod leaf;\npub(crate) use self::super::d::Moved;\npub use leaf::Deep;\n");
    write("d.rs", "#[cfg(test)]\nmod tests { use crate::a::X; }\npub struct Moved;\n");
    write("c.rs", "use self::nothing::Here;\n");
    // f -> e::leaf through f's use of e's relative re-export (`pub use leaf::Deep`).
    write("f.rs", "use crate::e::Deep;\nuse serde::Serialize;\n");
    write("e/leaf.rs", "pub struct Deep;\n");
    let g = Graph::of(src);
    let e = |m: &str| g.edges[m].iter().cloned().collect::<Vec<_>>();
    assert_eq!(e("a"), ["b"]);
    assert_eq!(e("a::inner"), ["c"]);
    assert_eq!(e("b"), ["d"], "re-exports are followed; comments and strings are not code");
    assert_eq!(e("d"), Vec::<String>::new(), "#[cfg(test)] items are left out");
    assert_eq!(e("f"), ["e::leaf"], "relative re-exports are followed; other crates are none");
    assert!(g.circles().is_empty());
    // d -> a closes a circle a -> b -> d -> a.
    write("d.rs", "pub struct Moved;\nfn g() { let _ = crate::a::X; }\n");
    assert_eq!(Graph::of(src).circles(), ["a -> b -> d -> a"]);
}

#[test]
fn no_import_circles_in_any_crate() {
    let sources = crate_sources();
    assert!(sources.len() >= 10, "{sources:?}");
    let mut found = vec![];
    for src in &sources {
        let g = Graph::of(src);
        let name = src.parent().unwrap().strip_prefix(workspace_root()).unwrap().display();
        found.extend(g.circles().into_iter().map(|c| format!("{name}: {c}")));
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn layers_import_only_what_is_below_them() {
    let g = Graph::of(&workspace_root().join("builder/src")).edges;
    assert!(g.contains_key("build") && g.contains_key("packages::apt::install"), "{:?}", g.keys());
    // The leaves every layer may use: errors, and the sandbox that runs what cannot be
    // emulated (a tool that knows nothing of packages or builds).
    let leaves = ["error", "sandbox"];
    assert!(g["sandbox"].is_empty(), "the sandbox imports {:?}", g["sandbox"]);
    for (m, deps) in &g {
        let allowed = |d: &str| -> bool {
            if leaves.iter().any(|l| d == *l || d.starts_with(&format!("{l}::"))) {
                return true;
            }
            if m.starts_with("packages") {
                // Package backends: each other (and the crates below the builder); never
                // recipes or builds.
                d.starts_with("packages")
            } else {
                true
            }
        };
        let bad: Vec<&String> = deps.iter().filter(|d| !allowed(d)).collect();
        assert!(bad.is_empty(), "{m} imports {bad:?}, which are not below it");
    }
}

/// Every crate root (libraries, binaries, build scripts, test binaries) forbids unsafe code,
/// unless it says where it allows it (`#[allow(unsafe_code)]` on the item that needs it; the
/// workspace's lint denies it everywhere else).
#[test]
fn every_crate_root_forbids_unsafe_code() {
    let root = workspace_root();
    let mut roots = vec![];
    for src in crate_sources() {
        let krate = src.parent().unwrap();
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(krate.join("Cargo.toml")).unwrap()).unwrap();
        for f in ["src/lib.rs", "src/main.rs", "build.rs"] {
            roots.push(krate.join(f));
        }
        for e in std::fs::read_dir(krate.join("src/bin")).into_iter().flatten() {
            roots.push(e.unwrap().path());
        }
        // Test binaries: those the manifest names, or with autotests each file of tests/.
        let auto = manifest["package"].get("autotests").and_then(|a| a.as_bool()) != Some(false);
        for t in manifest.get("test").and_then(|t| t.as_array()).into_iter().flatten() {
            roots.push(krate.join(t["path"].as_str().unwrap()));
        }
        if auto {
            for e in std::fs::read_dir(krate.join("tests")).into_iter().flatten() {
                roots.push(e.unwrap().path());
            }
        }
    }
    let roots: Vec<PathBuf> = roots
        .into_iter()
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .collect();
    assert!(roots.len() >= 25, "{roots:?}");
    let missing: Vec<String> = roots
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            !text.contains("#![forbid(unsafe_code)]") && !text.contains("#[allow(unsafe_code)]")
        })
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(missing.is_empty(), "crate roots without #![forbid(unsafe_code)]: {missing:?}");
}

/// The workspace's crates, lowest first: a crate may depend (dev-dependencies too) only on crates
/// of a lower rank, so nothing low imports something above it. Cargo already refuses cycles.
const RANKS: &[&[&str]] = &[
    &["erdma-workspace-hack"],
    &["erdma-buildinfo", "erdma-common", "erdma-testkit"],
    &["erdma-limits"],
    &["erdma-http"],
    &["erdma-openpgp", "erdma-oci"],
    &["erdma-deb", "erdma-rpm"],
    &["erdma-build", "erdma-oci-hook"],
    &["erdma-kube"],
    &["erdma-fuzz"],
];

/// The workspace's root manifest.
fn root_manifest() -> toml::Table {
    toml::from_str(&std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap()).unwrap()
}

/// The path of each member's manifest.
fn member_manifests() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut manifests = vec![];
    for m in root_manifest()["workspace"]["members"].as_array().unwrap() {
        let m = m.as_str().unwrap();
        match m.strip_suffix("/*") {
            Some(dir) => {
                for e in std::fs::read_dir(root.join(dir)).unwrap() {
                    manifests.push(e.unwrap().path().join("Cargo.toml"));
                }
            }
            None => manifests.push(root.join(m).join("Cargo.toml")),
        }
    }
    manifests
}

/// Every proc-macro crate in the graph (this machine's target) is compiled unoptimised in test
/// builds, named in the root Cargo.toml (which says why), so that a new one does not quietly
/// come in at `package."*"`'s opt-level 3.
#[test]
fn proc_macros_are_not_optimised_in_test_builds() {
    let workspace = root_manifest();
    let named = workspace["profile"]["dev"]["package"].as_table().unwrap();
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let in_graph: BTreeSet<&str> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    let mut proc_macros = BTreeSet::new();
    for p in meta["packages"].as_array().unwrap() {
        let kinds = p["targets"].as_array().unwrap().iter().flat_map(|t| t["kind"].as_array());
        if in_graph.contains(p["id"].as_str().unwrap())
            && kinds.flatten().any(|k| k == "proc-macro")
        {
            proc_macros.insert(p["name"].as_str().unwrap().to_string());
        }
    }
    assert!(proc_macros.contains("serde_derive"), "{proc_macros:?}");
    let left: Vec<&String> = proc_macros
        .iter()
        .filter(|n| {
            named.get(n.as_str()).and_then(|p| p.get("opt-level")).and_then(|o| o.as_integer())
                != Some(0)
        })
        .collect();
    assert!(
        left.is_empty(),
        "proc-macros optimised in test builds (add a [profile.dev.package.NAME] with opt-level = 0 to Cargo.toml): {left:?}"
    );
}

#[test]
fn crates_depend_only_on_crates_below_them() {
    let manifests = member_manifests();
    let rank = |name: &str| RANKS.iter().position(|r| r.contains(&name));
    let mut seen = 0;
    for path in &manifests {
        let t: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let name = t["package"]["name"].as_str().unwrap();
        let own = rank(name).unwrap_or_else(|| panic!("{name} ({}) has no rank", path.display()));
        seen += 1;
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            for dep in t.get(section).and_then(|d| d.as_table()).into_iter().flat_map(|d| d.keys())
            {
                if let Some(r) = rank(dep) {
                    assert!(r < own, "{name} depends on {dep} ({section}), which is not below it");
                }
            }
        }
    }
    assert_eq!(seen, RANKS.iter().map(|r| r.len()).sum::<usize>(), "every ranked crate exists");
}

/// Each package of a member's build graph and the feature sets it is built with there (one per
/// unit: a package built for the host, as a build dependency, and for the target may differ),
/// as `cargo tree` resolves them for this machine's target.
fn feature_sets(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .current_dir(workspace_root())
        .args(["tree", "--locked", "--offline", "-e", "normal,build", "--prefix", "none"])
        .args(["--format", "{p}|{f}", "--target", "x86_64-unknown-linux-gnu"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let line = line.trim_end_matches(" (*)");
        let Some((package, features)) = line.split_once('|') else { continue };
        // Workspace members by their path; everything else by name and version.
        let package = package.split(" (").next().unwrap().to_string();
        sets.entry(package).or_default().insert(features.to_string());
    }
    sets
}

/// A build of one product alone (`cargo build -p erdma-build`, what scripts/demo runs) builds
/// every dependency with the features a workspace build gives it, so that switching between the
/// two recompiles nothing: the workspace-hack crate (`crates/erdma-workspace-hack`, which
/// `cargo hakari generate` writes) is a dependency of every product and carries the union.
///
/// `cargo tree` does not say which of a package's feature sets is its host build and which its
/// target build, so each set a member alone builds must be one the workspace builds too (the
/// workspace may build more: a package that one member uses as a build dependency and another
/// as a normal one).
#[test]
fn one_member_builds_its_dependencies_as_the_workspace_does() {
    let whole = feature_sets(&["--workspace"]);
    // The products but erdma-oci-hook (the root Cargo.toml says why); a library alone (`cargo
    // test -p erdma-rpm`) still unifies for itself: the workspace-hack would make each wait for
    // every dependency of the workspace.
    for member in ["erdma-build", "erdma-kube", "erdma-fuzz"] {
        let alone = feature_sets(&["-p", member]);
        let differ: Vec<String> = alone
            .iter()
            .filter(|(p, f)| whole.get(*p).is_some_and(|w| !f.is_subset(w)))
            .map(|(p, f)| format!("{p}: {f:?} alone, {:?} in the workspace", whole[p]))
            .collect();
        assert!(
            differ.is_empty(),
            "{member} alone builds these with other features than the workspace does (run `cargo hakari generate`):\n{}",
            differ.join("\n")
        );
    }
}
