//! Where a package gets resolved: apt's choices, for the small closed sets we install.
//!
//! Like apt: the newest candidate of the base's architecture (or `all`); `Depends` and
//! `Pre-Depends` with versions, alternatives in order and `Provides`; `Breaks`/`Conflicts`
//! against everything that will be installed, upgrading an installed package when a newer
//! candidate clears the conflict (that is how `libibverbs1` and `ibverbs-providers` move
//! together); packages the base already has at a satisfying version are not added again.
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::deb822::Paragraph;
use super::repo::IndexedPackage;
use super::version::{parse_relations, Dependency, Version};

/// A package the base image has installed (`Status: install ok installed`).
#[derive(Debug, Clone)]
pub struct Installed {
    pub name: String,
    pub arch: String,
    pub version: Version,
    pub paragraph: Paragraph,
}

impl Installed {
    /// The installed packages in a dpkg status file; other states are not "installed".
    pub fn from_status(paragraphs: &[Paragraph]) -> Vec<Installed> {
        paragraphs
            .iter()
            .filter(|p| p.get("Status").is_some_and(|s| s.split_whitespace().nth(2) == Some("installed")))
            .filter_map(|p| {
                Some(Installed {
                    name: p.get("Package")?.to_string(),
                    arch: p.get("Architecture").unwrap_or("all").to_string(),
                    version: p.get("Version")?.parse().ok()?,
                    paragraph: p.clone(),
                })
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Action {
    /// Not in the base.
    Install,
    /// The base has an older version.
    Upgrade { from: String },
    /// The base has another build of it (e.g. Mellanox OFED's): removed, then installed.
    Replace { from: String },
}

#[derive(Debug, Clone)]
pub struct Planned {
    pub pkg: IndexedPackage,
    pub name: String,
    pub arch: String,
    pub version: Version,
    pub action: Action,
}

#[derive(Debug, Clone, Default)]
pub struct Resolution {
    pub install: Vec<Planned>,
    /// Installed packages that go away (replaced, or in the recipe's remove list).
    pub remove: Vec<Installed>,
    /// Requested packages the base already has at a satisfying version.
    pub kept: Vec<Installed>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("unknown package `{name}`: no repository ({repos}) has it for {arch}")]
    UnknownPackage { name: String, repos: String, arch: String },
    #[error("cannot satisfy `{dependency}` of {package} {version}: no installed package or candidate provides it")]
    Unsatisfiable { package: String, version: String, dependency: String },
    #[error("{package} {version} {kind} {other} {other_version}, and no candidate resolves it")]
    Conflict { package: String, version: String, kind: &'static str, other: String, other_version: String },
    #[error("malformed {field} of {package}: {reason}")]
    Malformed { package: String, field: &'static str, reason: String },
}

/// What to install and replace.
pub struct Request<'a> {
    pub install: &'a [String],
    /// The recipe's remove list: installed builds of these are replaced or removed.
    pub replace: &'a [String],
    pub arch: &'a str,
}

fn relations(p: &Paragraph, field: &'static str, package: &str) -> Result<Vec<Vec<Dependency>>, ResolveError> {
    match p.get(field) {
        None => Ok(Vec::new()),
        Some(v) => parse_relations(v).map_err(|e| ResolveError::Malformed { package: package.into(), field, reason: e.to_string() }),
    }
}

fn dep_text(d: &Dependency) -> String {
    match &d.constraint {
        Some((rel, v)) => format!("{} ({} {})", d.name, rel, v),
        None => d.name.clone(),
    }
}

/// A version that a relation can be checked against, with what offers it.
struct Offer<'a> {
    name: &'a str,
    version: Option<Version>,
}

fn matches(dep: &Dependency, offer: &Offer) -> bool {
    if dep.name != offer.name {
        return false;
    }
    match (&dep.constraint, &offer.version) {
        (None, _) => true,
        (Some((rel, want)), Some(have)) => rel.satisfied_by(have, want),
        // An unversioned Provides never satisfies a versioned relation (Policy 7.5).
        (Some(_), None) => false,
    }
}

/// Everything a package offers: itself at its version, and its Provides.
fn offers<'a>(name: &'a str, version: &Version, provides: &'a [Vec<Dependency>]) -> Vec<Offer<'a>> {
    let mut out = vec![Offer { name, version: Some(version.clone()) }];
    for alt in provides.iter().flatten() {
        out.push(Offer { name: &alt.name, version: alt.constraint.as_ref().map(|(_, v)| v.clone()) });
    }
    out
}

struct Cand<'a> {
    pkg: &'a IndexedPackage,
    name: String,
    arch: String,
    version: Version,
    provides: Vec<Vec<Dependency>>,
}

pub fn resolve(req: &Request, installed: &[Installed], available: &[IndexedPackage]) -> Result<Resolution, ResolveError> {
    // Candidates of our architecture, newest first per name.
    let mut cands: BTreeMap<String, Vec<Cand>> = BTreeMap::new();
    for pkg in available {
        let p = &pkg.paragraph;
        let (Some(name), Some(version)) = (p.get("Package"), p.get("Version")) else { continue };
        let arch = p.get("Architecture").unwrap_or("all");
        if arch != req.arch && arch != "all" {
            continue;
        }
        let Ok(version) = version.parse::<Version>() else { continue };
        let provides = relations(p, "Provides", name)?;
        cands.entry(name.to_string()).or_default().push(Cand { pkg, name: name.to_string(), arch: arch.to_string(), version, provides });
    }
    for list in cands.values_mut() {
        list.sort_by(|a, b| b.version.cmp(&a.version));
    }
    let inst: BTreeMap<&str, &Installed> = installed.iter().map(|i| (i.name.as_str(), i)).collect();
    let mut inst_provides: BTreeMap<&str, Vec<Vec<Dependency>>> = BTreeMap::new();
    for i in installed {
        inst_provides.insert(i.name.as_str(), relations(&i.paragraph, "Provides", &i.name)?);
    }

    let mut chosen: BTreeMap<String, &Cand> = BTreeMap::new();
    let mut gone: BTreeSet<String> = BTreeSet::new();
    let mut res = Resolution::default();
    let repos = || {
        let mut r: Vec<&str> = available.iter().map(|p| p.repo.as_str()).collect();
        r.dedup();
        r.join(", ")
    };

    // Is `dep` met by what will be installed, or by what stays installed?
    let satisfied = |dep: &Dependency, chosen: &BTreeMap<String, &Cand>, gone: &BTreeSet<String>| -> bool {
        chosen.values().any(|c| offers(&c.name, &c.version, &c.provides).iter().any(|o| matches(dep, o)))
            || installed
                .iter()
                .filter(|i| !gone.contains(&i.name))
                .any(|i| offers(&i.name, &i.version, &inst_provides[i.name.as_str()]).iter().any(|o| matches(dep, o)))
    };
    // The newest candidate that meets `dep`: the package itself, else a provider.
    let find = |dep: &Dependency| -> Option<&Cand> {
        if let Some(c) = cands.get(&dep.name).and_then(|l| l.iter().find(|c| matches(dep, &Offer { name: &c.name, version: Some(c.version.clone()) }))) {
            return Some(c);
        }
        cands.values().flatten().filter(|c| c.provides.iter().flatten().any(|p| matches(dep, &Offer { name: &p.name, version: p.constraint.as_ref().map(|(_, v)| v.clone()) }))).max_by(|a, b| a.version.cmp(&b.version))
    };

    let mut queue: Vec<&Cand> = Vec::new();
    for name in req.install {
        let newest = cands.get(name).and_then(|l| l.first());
        if let Some(i) = inst.get(name.as_str()) {
            let replace = req.replace.contains(name) && newest.is_some_and(|c| c.version != i.version);
            let upgrade = newest.is_some_and(|c| c.version > i.version) && !replace;
            if !replace && !upgrade {
                res.kept.push((*i).clone());
                continue;
            }
        }
        let c = newest.ok_or_else(|| ResolveError::UnknownPackage { name: name.clone(), repos: repos(), arch: req.arch.into() })?;
        queue.push(c);
    }
    for name in req.replace {
        if inst.contains_key(name.as_str()) && !req.install.contains(name) {
            gone.insert(name.clone());
        }
    }

    // Dependencies, then conflicts, until nothing changes.
    for _round in 0..64 {
        while let Some(c) = queue.pop() {
            if chosen.contains_key(&c.name) {
                continue;
            }
            if inst.contains_key(c.name.as_str()) {
                gone.insert(c.name.clone());
            }
            chosen.insert(c.name.clone(), c);
            let p = &c.pkg.paragraph;
            for group in relations(p, "Pre-Depends", &c.name)?.into_iter().chain(relations(p, "Depends", &c.name)?) {
                if group.iter().any(|d| satisfied(d, &chosen, &gone) || queue.iter().any(|q| offers(&q.name, &q.version, &q.provides).iter().any(|o| matches(d, o)))) {
                    continue;
                }
                let pick = group.iter().find_map(find).ok_or_else(|| ResolveError::Unsatisfiable {
                    package: c.name.clone(),
                    version: c.version.to_string(),
                    dependency: group.iter().map(dep_text).collect::<Vec<_>>().join(" | "),
                })?;
                queue.push(pick);
            }
        }
        let mut changed = false;
        // Breaks/Conflicts of what we install, against everything that will be there.
        let chosen_now: Vec<&Cand> = chosen.values().copied().collect();
        for c in &chosen_now {
            for (kind, field) in [("breaks", "Breaks"), ("conflicts with", "Conflicts")] {
                for dep in relations(&c.pkg.paragraph, field, &c.name)?.into_iter().flatten() {
                    if let Some(other) = chosen_now.iter().find(|o| o.name != c.name && matches(&dep, &Offer { name: &o.name, version: Some(o.version.clone()) })) {
                        return Err(ResolveError::Conflict { package: c.name.clone(), version: c.version.to_string(), kind, other: other.name.clone(), other_version: other.version.to_string() });
                    }
                    let staying: Vec<&Installed> = installed.iter().filter(|i| !gone.contains(&i.name) && !chosen.contains_key(&i.name)).collect();
                    for i in staying {
                        if !matches(&dep, &Offer { name: &i.name, version: Some(i.version.clone()) }) {
                            continue;
                        }
                        // Upgrade the installed package to a candidate the relation does not hit.
                        let fix = cands.get(&i.name).and_then(|l| l.iter().find(|n| n.version > i.version && !matches(&dep, &Offer { name: &n.name, version: Some(n.version.clone()) })));
                        match fix {
                            Some(n) => {
                                queue.push(n);
                                changed = true;
                            }
                            None if req.replace.contains(&i.name) => {
                                gone.insert(i.name.clone());
                                changed = true;
                            }
                            None => {
                                return Err(ResolveError::Conflict { package: c.name.clone(), version: c.version.to_string(), kind, other: i.name.clone(), other_version: i.version.to_string() })
                            }
                        }
                    }
                }
            }
        }
        // Breaks/Conflicts of what stays installed, against what we install.
        for i in installed.iter().filter(|i| !gone.contains(&i.name) && !chosen.contains_key(&i.name)) {
            for (kind, field) in [("breaks", "Breaks"), ("conflicts with", "Conflicts")] {
                for dep in relations(&i.paragraph, field, &i.name)?.into_iter().flatten() {
                    let Some(c) = chosen_now.iter().find(|c| matches(&dep, &Offer { name: &c.name, version: Some(c.version.clone()) })) else { continue };
                    match cands.get(&i.name).and_then(|l| l.iter().find(|n| n.version > i.version)) {
                        Some(n) => {
                            queue.push(n);
                            changed = true;
                        }
                        None => {
                            return Err(ResolveError::Conflict { package: i.name.clone(), version: i.version.to_string(), kind, other: c.name.clone(), other_version: c.version.to_string() })
                        }
                    }
                }
            }
        }
        if !changed && queue.is_empty() {
            break;
        }
    }

    for c in chosen.values() {
        let action = match inst.get(c.name.as_str()) {
            None => Action::Install,
            Some(i) if req.replace.contains(&c.name) && c.version != i.version => Action::Replace { from: i.version.to_string() },
            Some(i) => Action::Upgrade { from: i.version.to_string() },
        };
        res.install.push(Planned { pkg: c.pkg.clone(), name: c.name.clone(), arch: c.arch.clone(), version: c.version.clone(), action });
    }
    res.remove = installed.iter().filter(|i| gone.contains(&i.name)).cloned().collect();
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::apt::deb822;

    fn pkg(text: &str) -> IndexedPackage {
        IndexedPackage {
            paragraph: deb822::parse(text).unwrap().remove(0),
            url: "http://repo.invalid/x.deb".into(),
            sha256: "0".repeat(64),
            size: 1,
            origin: "test".into(),
            repo: "http://repo.invalid bookworm".into(),
        }
    }

    fn installed(text: &str) -> Vec<Installed> {
        Installed::from_status(&deb822::parse(text).unwrap())
    }

    fn names(r: &Resolution) -> Vec<String> {
        r.install.iter().map(|p| format!("{} {} {:?}", p.name, p.version, p.action)).collect()
    }

    const REPO: &str = "Package: libibverbs1\nVersion: 44.0-2\nArchitecture: amd64\nDepends: libc6 (>= 2.34), libnl-3-200 (>= 3.2.7)\nBreaks: ibverbs-providers (<< 44.0-2)\n\n\
        Package: ibverbs-providers\nVersion: 44.0-2\nArchitecture: amd64\nDepends: libibverbs1 (>= 44.0-2)\n\n\
        Package: libnl-3-200\nVersion: 3.7.0-0.2+b1\nArchitecture: amd64\n\n\
        Package: libnl-3-200\nVersion: 3.5.0-1\nArchitecture: amd64\n\n\
        Package: arm-only\nVersion: 1\nArchitecture: arm64\n\n\
        Package: wants-virtual\nVersion: 1\nArchitecture: all\nDepends: some-virtual (>= 2) | missing-alt\n\n\
        Package: provider\nVersion: 5\nArchitecture: amd64\nProvides: some-virtual (= 2)\n";

    fn available() -> Vec<IndexedPackage> {
        REPO.split("\n\n").map(pkg).collect()
    }

    #[test]
    fn newest_candidates_and_dependencies() {
        let base = installed("Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9\n");
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        let r = resolve(&req, &base, &available()).unwrap();
        assert_eq!(names(&r), ["libibverbs1 44.0-2 Install", "libnl-3-200 3.7.0-0.2+b1 Install"]);
    }

    #[test]
    fn breaks_upgrade_the_installed_partner() {
        let base = installed(
            "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9\n\n\
             Package: libnl-3-200\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.7.0-0.2+b1\n\n\
             Package: ibverbs-providers\nStatus: install ok installed\nArchitecture: amd64\nVersion: 39.0-1\n",
        );
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        let r = resolve(&req, &base, &available()).unwrap();
        assert_eq!(names(&r), ["ibverbs-providers 44.0-2 Upgrade { from: \"39.0-1\" }", "libibverbs1 44.0-2 Install"]);
        assert_eq!(r.remove.len(), 1, "the old providers stanza goes");
    }

    #[test]
    fn other_builds_are_replaced_and_satisfying_ones_kept() {
        let base = installed(
            "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9\n\n\
             Package: libnl-3-200\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.7.0-0.2+b1\n\n\
             Package: libibverbs1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2307mlnx47-1.2310036\n",
        );
        let replace = vec!["libibverbs1".to_string()];
        let req = Request { install: &["libibverbs1".into(), "libnl-3-200".into()], replace: &replace, arch: "amd64" };
        let r = resolve(&req, &base, &available()).unwrap();
        assert_eq!(names(&r), ["libibverbs1 44.0-2 Replace { from: \"2307mlnx47-1.2310036\" }"]);
        assert_eq!(r.kept.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["libnl-3-200"]);
        // Without the replace list, apt keeps the newer-looking OFED build.
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        assert!(resolve(&req, &base, &available()).unwrap().install.is_empty());
    }

    #[test]
    fn versioned_provides_and_errors() {
        let req = Request { install: &["wants-virtual".into()], replace: &[], arch: "amd64" };
        let r = resolve(&req, &[], &available()).unwrap();
        assert_eq!(names(&r), ["provider 5 Install", "wants-virtual 1 Install"]);
        let req = Request { install: &["arm-only".into()], replace: &[], arch: "amd64" };
        assert!(matches!(resolve(&req, &[], &available()), Err(ResolveError::UnknownPackage { .. })));
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        let e = resolve(&req, &[], &available()).unwrap_err().to_string();
        assert!(e.contains("cannot satisfy `libc6 (>= 2.34)` of libibverbs1 44.0-2"), "{e}");
    }
}
