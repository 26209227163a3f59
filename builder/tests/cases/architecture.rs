//! The workspace's shape, checked. Between crates: each depends only on crates below it
//! (Cargo's graph, read from the manifests). Inside the builder: no import circles between its
//! modules, and the package backends import nothing above them (read from the sources as text,
//! code only: comments and `#[cfg(test)]` modules left out). docs/architecture.md draws both.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`image::source`) -> the `crate::…` paths its code names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let module = rel.to_string_lossy().trim_end_matches("/mod").replace('/', "::");
            if module == "main" || module == "lib" {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let mut paths = BTreeSet::new();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                let mut rest = line;
                while let Some(i) = rest.find("crate::") {
                    rest = &rest[i + 7..];
                    let path: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_' || *c == ':')
                        .collect();
                    paths.insert(path.trim_end_matches(':').to_string());
                }
            }
            out.insert(module, paths);
        }
    }
    out
}

/// The module a `crate::` path names: its longest prefix that is a module.
fn module_of<'a>(path: &str, modules: &'a BTreeMap<String, BTreeSet<String>>) -> Option<&'a str> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|k| parts[..k].join("::"))
        .find_map(|c| modules.get_key_value(&c).map(|(k, _)| k.as_str()))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = imports();
    let mut g = BTreeMap::new();
    for (m, paths) in &modules {
        let deps: BTreeSet<String> = paths
            .iter()
            .filter_map(|p| module_of(p, &modules))
            .filter(|d| d != m && !m.starts_with(&format!("{d}::")))
            .map(str::to_string)
            .collect();
        g.insert(m.clone(), deps);
    }
    g
}

#[test]
fn no_import_circles() {
    let g = graph();
    assert!(g.contains_key("build") && g.contains_key("packages::apt::install"), "{:?}", g.keys());
    // Depth-first search; a module met again while still on the path closes a circle.
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
    for m in g.keys() {
        visit(m, &g, &mut Vec::new(), &mut done, &mut found);
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn layers_import_only_what_is_below_them() {
    let g = graph();
    // The leaves every layer may use: errors, and the sandbox that runs what cannot be
    // emulated (a tool that knows nothing of packages or builds).
    let leaves = ["error", "sandbox"];
    assert!(g["sandbox"].is_empty(), "the sandbox imports {:?}", g["sandbox"]);
    for (m, deps) in &g {
        let allowed = |d: &str| -> bool {
            if leaves.contains(&d) {
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

/// The workspace's crates, lowest first: a crate may depend (dev-dependencies too) only on crates
/// of a lower rank, so nothing low imports something above it. Cargo already refuses cycles.
const RANKS: &[&[&str]] = &[
    &["erdma-buildinfo", "erdma-common"],
    &["erdma-limits"],
    &["erdma-http"],
    &["erdma-openpgp", "erdma-oci"],
    &["erdma-deb", "erdma-rpm"],
    &["erdma-build", "erdma-oci-hook"],
    &["erdma-kube"],
    &["erdma-fuzz"],
];

#[test]
fn crates_depend_only_on_crates_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let mut manifests = vec![];
    for m in workspace["workspace"]["members"].as_array().unwrap() {
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
