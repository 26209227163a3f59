//! Which packages to install, upgrade and remove: dnf's choices, for the small closed sets
//! we install.
//!
//! Not a SAT solver (libsolv is one): a greedy walk that makes the choices dnf makes for
//! sets like rdma-core's, learnt from libdnf (`libdnf/sack/query.cpp`, `goal/Goal.cpp`) and
//! libsolv's `src/policy.c` (best candidate: newest EVR, then the native arch), checked
//! against rpm's own rules (`lib/depends.c`: Obsoletes match package names, Conflicts
//! match provides). In short:
//! - a request is kept when the image already has it at a fitting version (no upgrade
//!   unless asked for, or needed);
//! - otherwise the newest candidate of the target arch (or `noarch`) is installed, and its
//!   `Requires` (versioned, sonames, arch-qualified, file paths, rich) are met first by
//!   what is installed or already chosen, then by the newest provider in the repositories;
//! - an installed package of the same name is upgraded (or downgraded, or replaced); one
//!   named by a chosen package's `Obsoletes` is removed;
//! - an installed package whose `Requires` the change would break is upgraded too when a
//!   repository has it, else resolution fails naming both;
//! - `Conflicts` fail with both packages named (dnf would too, without `--allowerasing`).
//!
//! File requires: dnf counts only files some package owns. Images are often trimmed or
//! built by hand, so a file require no installed or chosen package lists is also met when
//! the base has the file; [`Resolution::base_files`] reports each such file.
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use serde::Serialize;

use erdma_rpm::version::{
    compare_evr, overlaps, parse_evr, parse_rich, parse_rich_conflict, RichDep,
};
use erdma_rpm::{Dep, Evr, PackageMeta};

pub use crate::packages::Action;

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// `hint`: what else there is ([`ResolveError::hint`]).
    #[error("no package {name} available for {arch} (repositories: {repos})")]
    UnknownPackage { name: String, arch: String, repos: String, hint: Option<String> },

    #[error("no version {version} of {name} available for {arch} (available: {available})")]
    UnknownVersion { name: String, version: String, arch: String, available: String },

    /// dnf: "package X is a virtual package provided by …".
    #[error("{name} is provided by several packages ({providers}); name the one to install")]
    Virtual { name: String, providers: String },

    /// dnf's own wording: "nothing provides libnl3 >= 3.5 needed by rdma-core-44.0-2.al8.x86_64".
    #[error("nothing provides {dependency} needed by {package} (from {origin})")]
    NothingProvides { dependency: String, package: String, origin: String, hint: Option<String> },

    #[error(
        "{package} needs {dependency}, but {chosen} is already chosen and does not provide it"
    )]
    Clash { package: String, dependency: String, chosen: String },

    #[error("{package} conflicts with {other} ({dependency})")]
    Conflict { package: String, other: String, other_name: String, dependency: String },

    #[error("installing {by} breaks installed {installed}, which requires {dependency}, and no repository has another {name}")]
    Breaks { installed: String, name: String, dependency: String, by: String },

    #[error("removing {removed} breaks installed {installed}, which requires {dependency}")]
    RemovalBreaks { removed: String, installed: String, name: String, dependency: String },

    #[error("malformed rich dependency `{dependency}` of {package}: {reason}")]
    Rich { dependency: String, package: String, reason: String },

    #[error("invalid package request `{request}`: {reason}")]
    Request { request: String, reason: String },
}

impl ResolveError {
    /// What the user can do about it, where there is something to say (see
    /// [`crate::error::hint`]).
    pub fn hint(&self) -> Option<String> {
        match self {
            ResolveError::UnknownPackage { hint, .. }
            | ResolveError::NothingProvides { hint, .. } => hint.clone(),
            ResolveError::Conflict { other_name, .. } => Some(format!(
                "add {other_name} to the packages to remove, or install a build without the conflict"
            )),
            ResolveError::Breaks { name, .. } => {
                Some(format!("add {name} to the packages to remove or to install"))
            }
            ResolveError::RemovalBreaks { name, .. } => Some(format!("remove {name} too")),
            _ => None,
        }
    }
}

/// A replace rule: the installed package `installed` goes and `with` (a repository
/// package) comes, whatever their versions: how Mellanox OFED's `libibverbs-58mlnx43`
/// (newer than any distribution build by EVR) makes way for `libibverbs-44.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replace {
    pub installed: String,
    pub with: String,
}

/// What to resolve.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `NAME`, `NAME=VERSION` (`[E:]V[-R]`), `NAME-V[-R]` as dnf takes it, `NAME.ARCH`
    /// (`.i686` lets that arch in for this package), or a provide (`libibverbs.so.1()(64bit)`).
    pub install: &'a [String],
    /// Installed package names to remove.
    pub remove: &'a [String],
    pub replace: &'a [Replace],
    /// The image's rpm arch: `x86_64`, `aarch64`. `noarch` is always allowed; other arches
    /// (`i686`) only for packages requested with `.ARCH`.
    pub arch: &'a str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    pub package: PackageMeta,
    pub action: Action,
}

/// Why an installed package goes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum RemoveReason {
    /// In the request's remove list.
    Requested,
    /// A chosen package's `Obsoletes` names it.
    Obsoleted { by: String },
    /// A [`Replace`] rule.
    Replaced { by: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct Removal {
    pub name: String,
    pub evr: Evr,
    pub arch: String,
    pub nevra: String,
    #[serde(flatten)]
    pub reason: RemoveReason,
}

/// Which package met a requirement of a chosen package: for `--explain`-like output.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Satisfied {
    /// NEVRA of the requiring package.
    pub package: String,
    pub requires: String,
    /// NEVRA of the provider, or `base file PATH`.
    pub by: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Resolution {
    /// Dependencies before what needs them (cycles broken by name order).
    pub install: Vec<Planned>,
    pub remove: Vec<Removal>,
    /// Requested packages the image already has at a fitting version.
    pub kept: Vec<PackageMeta>,
    pub satisfied: Vec<Satisfied>,
    /// File requires met only by a file in the base that no package lists.
    pub base_files: Vec<String>,
}

/// A package: installed (index into `installed`) or a repository's (into `available`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Id {
    Installed(usize),
    Avail(usize),
}

/// Why an installed package is gone from the result.
#[derive(Debug, Clone, Copy)]
enum Gone {
    Requested,
    /// By the chosen package (available index) of the same name.
    SameName(usize),
    Obsoleted(usize),
    Replaced(usize),
}

struct Pool<'a> {
    installed: &'a [PackageMeta],
    available: &'a [PackageMeta],
    arch: &'a str,
    /// Provide name → packages with such a provide (`None`: the package's own `name = EVR`).
    provides: HashMap<&'a str, Vec<(Id, Option<&'a Dep>)>>,
    files: HashMap<&'a str, Vec<Id>>,
    /// Available packages by name, best first.
    by_name: HashMap<&'a str, Vec<usize>>,
    installed_by_name: HashMap<&'a str, Vec<usize>>,
}

fn arch_rank(arch: &str, target: &str) -> u8 {
    if arch == target {
        0
    } else if arch == "noarch" {
        1
    } else {
        2
    }
}

impl<'a> Pool<'a> {
    fn new(
        installed: &'a [PackageMeta],
        available: &'a [PackageMeta],
        arch: &'a str,
        extra_arches: &BTreeSet<(String, String)>,
    ) -> Pool<'a> {
        let mut pool = Pool {
            installed,
            available,
            arch,
            provides: HashMap::new(),
            files: HashMap::new(),
            by_name: HashMap::new(),
            installed_by_name: HashMap::new(),
        };
        let add = |pool: &mut Pool<'a>, id: Id, p: &'a PackageMeta| {
            pool.provides.entry(p.name.as_str()).or_default().push((id, None));
            for d in &p.provides {
                pool.provides.entry(d.name.as_str()).or_default().push((id, Some(d)));
            }
            for f in &p.files {
                pool.files.entry(f.as_str()).or_default().push(id);
            }
        };
        for (i, p) in installed.iter().enumerate() {
            add(&mut pool, Id::Installed(i), p);
            pool.installed_by_name.entry(p.name.as_str()).or_default().push(i);
        }
        for (i, p) in available.iter().enumerate() {
            let allowed = p.arch == arch
                || p.arch == "noarch"
                || extra_arches.contains(&(p.name.clone(), p.arch.clone()));
            if allowed {
                add(&mut pool, Id::Avail(i), p);
                pool.by_name.entry(p.name.as_str()).or_default().push(i);
            }
        }
        for list in pool.by_name.values_mut() {
            list.sort_by(|&x, &y| pool_order(&available[x], &available[y], arch).then(x.cmp(&y)));
        }
        pool
    }

    fn pkg(&self, id: Id) -> &'a PackageMeta {
        match id {
            Id::Installed(i) => &self.installed[i],
            Id::Avail(i) => &self.available[i],
        }
    }

    /// Every package (of either kind) that provides `dep`, in index order.
    fn providers(&self, dep: &Dep) -> Vec<Id> {
        let mut out: Vec<Id> = Vec::new();
        if let Some(list) = self.provides.get(dep.name.as_str()) {
            for &(id, prov) in list {
                let ok = match prov {
                    Some(prov) => overlaps(dep, prov),
                    None => {
                        let p = self.pkg(id);
                        overlaps(dep, &Dep::this(&p.name, &p.evr))
                    }
                };
                if ok {
                    out.push(id);
                }
            }
        }
        if dep.name.starts_with('/') {
            out.extend(self.files.get(dep.name.as_str()).into_iter().flatten().copied());
        }
        out.sort();
        out.dedup();
        out
    }
}

/// Best candidate first: newest EVR, then the target arch before `noarch`, then repository order.
fn pool_order(a: &PackageMeta, b: &PackageMeta, arch: &str) -> Ordering {
    compare_evr(&b.evr, &a.evr).then(arch_rank(&a.arch, arch).cmp(&arch_rank(&b.arch, arch)))
}

/// What a request names.
struct Asked {
    text: String,
    name: String,
    arch: Option<String>,
    version: Option<Evr>,
}

const ARCHES: &[&str] =
    &["x86_64", "aarch64", "noarch", "i686", "i586", "i386", "ppc64le", "s390x"];

/// Reads `NAME`, `NAME=EVR`, `NAME.ARCH`, or dnf's `NAME-V[-R]` (taken only when `NAME` is
/// a package name and the whole is not).
fn parse_request(text: &str, known: &dyn Fn(&str) -> bool) -> Result<Asked, ResolveError> {
    let bad = |reason: &str| ResolveError::Request {
        request: text.to_string(),
        reason: reason.to_string(),
    };
    let t = text.trim();
    if t.is_empty() {
        return Err(bad("empty"));
    }
    let (mut name, mut version) = match t.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => {
            (n.trim().to_string(), Some(parse_evr(v.trim())))
        }
        Some(_) => return Err(bad("expected NAME=VERSION")),
        None => (t.to_string(), None),
    };
    let mut arch = None;
    if let Some((n, a)) = name.rsplit_once('.') {
        if ARCHES.contains(&a) && !known(&name) {
            arch = Some(a.to_string());
            name = n.to_string();
        }
    }
    if version.is_none() && !known(&name) {
        // NAME-VERSION or NAME-VERSION-RELEASE.
        let dashes: Vec<usize> = name.match_indices('-').map(|(i, _)| i).collect();
        for &d in dashes.iter().rev().take(2) {
            if known(&name[..d]) {
                version = Some(parse_evr(&name[d + 1..]));
                name.truncate(d);
                break;
            }
        }
    }
    Ok(Asked { text: t.to_string(), name, arch, version })
}

struct Solver<'a, 'p> {
    pool: &'p Pool<'a>,
    base_has: &'p dyn Fn(&str) -> bool,
    gone: BTreeMap<usize, Gone>,
    /// Chosen available packages by name.
    chosen: BTreeMap<&'a str, usize>,
    chosen_set: BTreeSet<usize>,
    queue: VecDeque<usize>,
    satisfied: Vec<Satisfied>,
    base_files: BTreeSet<String>,
    repos: String,
}

impl<'a, 'p> Solver<'a, 'p> {
    fn alive(&self, id: Id) -> bool {
        match id {
            Id::Installed(i) => !self.gone.contains_key(&i),
            Id::Avail(a) => self.chosen_set.contains(&a),
        }
    }

    /// Providers of `dep` in the result as it stands: installed and not gone, or chosen.
    fn world_providers(&self, dep: &Dep) -> Vec<Id> {
        self.pool.providers(dep).into_iter().filter(|&id| self.alive(id)).collect()
    }

    fn candidates(&self, dep: &Dep) -> Vec<usize> {
        let mut c: Vec<usize> = self
            .pool
            .providers(dep)
            .into_iter()
            .filter_map(|id| if let Id::Avail(a) = id { Some(a) } else { None })
            .collect();
        let av = self.pool.available;
        // libsolv's policy: a package of the dependency's own name first, then newest, the
        // native arch, shortest name, name order, repository order.
        c.sort_by(|&x, &y| {
            let (px, py) = (&av[x], &av[y]);
            (px.name != dep.name)
                .cmp(&(py.name != dep.name))
                .then(pool_order(px, py, self.pool.arch))
                .then(px.name.len().cmp(&py.name.len()))
                .then(px.name.cmp(&py.name))
                .then(x.cmp(&y))
        });
        c
    }

    /// Adds `a` to the plan: an installed package of the same name makes way, and so do the
    /// installed packages its Obsoletes name (rpm `lib/depends.c`: by package name).
    fn choose(&mut self, a: usize) {
        if !self.chosen_set.insert(a) {
            return;
        }
        let p = &self.pool.available[a];
        self.chosen.insert(p.name.as_str(), a);
        for &i in self.pool.installed_by_name.get(p.name.as_str()).into_iter().flatten() {
            // Multilib: an i686 build stays beside an x86_64 one.
            let q = &self.pool.installed[i];
            let same_slot = q.arch == p.arch || q.arch == "noarch" || p.arch == "noarch";
            if same_slot {
                self.gone.entry(i).or_insert(Gone::SameName(a));
            }
        }
        for obs in &p.obsoletes {
            for &i in self.pool.installed_by_name.get(obs.name.as_str()).into_iter().flatten() {
                let q = &self.pool.installed[i];
                if q.name != p.name && overlaps(obs, &Dep::this(&q.name, &q.evr)) {
                    self.gone.entry(i).or_insert(Gone::Obsoleted(a));
                }
            }
        }
        self.queue.push_back(a);
    }

    fn nothing(&self, dep: &Dep, by: &PackageMeta) -> ResolveError {
        // A hint when a provider exists but at the wrong version or arch.
        let named = Dep::named(&dep.name);
        let near: Vec<String> = self
            .pool
            .available
            .iter()
            .filter(|p| p.name == dep.name || p.provides.iter().any(|d| overlaps(&named, d)))
            .take(5)
            .map(|p| format!("{} (from {})", p.nevra(), p.origin))
            .collect();
        let hint =
            (!near.is_empty()).then(|| format!("available but not fitting: {}", near.join(", ")));
        ResolveError::NothingProvides {
            dependency: dep.to_string(),
            package: by.nevra(),
            origin: by.origin.clone(),
            hint,
        }
    }

    /// Meets one plain requirement of `by`: already met, or the best candidate chosen.
    fn require(&mut self, dep: &Dep, by: &PackageMeta, record: bool) -> Result<(), ResolveError> {
        if dep.name.starts_with("rpmlib(") {
            return Ok(());
        }
        let have = self.world_providers(dep);
        if let Some(&id) = have.first() {
            if record {
                self.satisfied.push(Satisfied {
                    package: by.nevra(),
                    requires: dep.to_string(),
                    by: self.pool.pkg(id).nevra(),
                });
            }
            return Ok(());
        }
        let cands = self.candidates(dep);
        // A name can be chosen once; a candidate whose name is taken by another build is out.
        let pick = cands.iter().copied().find(|&a| {
            self.chosen.get(self.pool.available[a].name.as_str()).is_none_or(|&c| c == a)
        });
        if let Some(a) = pick {
            self.choose(a);
            if record {
                self.satisfied.push(Satisfied {
                    package: by.nevra(),
                    requires: dep.to_string(),
                    by: self.pool.available[a].nevra(),
                });
            }
            return Ok(());
        }
        if dep.name.starts_with('/') && (self.base_has)(&dep.name) {
            self.base_files.insert(dep.name.clone());
            if record {
                self.satisfied.push(Satisfied {
                    package: by.nevra(),
                    requires: dep.to_string(),
                    by: format!("base file {}", dep.name),
                });
            }
            return Ok(());
        }
        if let Some(&a) = cands.first() {
            let taken = self.chosen[self.pool.available[a].name.as_str()];
            return Err(ResolveError::Clash {
                package: by.nevra(),
                dependency: dep.to_string(),
                chosen: self.pool.available[taken].nevra(),
            });
        }
        Err(self.nothing(dep, by))
    }

    /// Meets a rich requirement: when it does not hold yet, the parts it needs are chosen
    /// (`or`: the first alternative that can be had).
    fn require_rich(&mut self, rich: &RichDep, by: &PackageMeta) -> Result<(), ResolveError> {
        if self.holds(rich) {
            return Ok(());
        }
        match rich {
            RichDep::Atom(d) => self.require(d, by, true),
            RichDep::And(all) | RichDep::With(all) => {
                all.iter().try_for_each(|d| self.require_rich(d, by))
            }
            RichDep::Without(a, _) => self.require_rich(a, by),
            RichDep::Or(any) => {
                for alt in any {
                    if self.obtainable(alt) {
                        return self.require_rich(alt, by);
                    }
                }
                Err(self.nothing(&Dep::named(&rich.to_string()), by))
            }
            RichDep::If { then, cond, otherwise } => {
                if self.holds(cond) {
                    self.require_rich(then, by)
                } else {
                    otherwise.as_ref().map_or(Ok(()), |o| self.require_rich(o, by))
                }
            }
            RichDep::Unless { then, cond, otherwise } => {
                if self.holds(cond) {
                    otherwise.as_ref().map_or(Ok(()), |o| self.require_rich(o, by))
                } else {
                    self.require_rich(then, by)
                }
            }
        }
    }

    /// Whether a rich dependency holds in the result as it stands (exactly, `with` too).
    fn holds(&self, rich: &RichDep) -> bool {
        let mut sets = |d: &Dep| -> Vec<usize> {
            let mut v: Vec<usize> = self
                .world_providers(d)
                .into_iter()
                .map(|id| match id {
                    Id::Installed(i) => i << 1,
                    Id::Avail(a) => (a << 1) | 1,
                })
                .collect();
            if v.is_empty() && d.name.starts_with('/') && (self.base_has)(&d.name) {
                v.push(usize::MAX);
            }
            v
        };
        rich.eval_exact(&mut sets)
    }

    /// Whether every atom of an alternative has a provider somewhere.
    fn obtainable(&self, rich: &RichDep) -> bool {
        let mut any = |d: &Dep| {
            !self.pool.providers(d).is_empty()
                || (d.name.starts_with('/') && (self.base_has)(&d.name))
        };
        rich.eval(&mut any)
    }

    /// Works through the chosen packages' requirements until none is left.
    fn drain(&mut self) -> Result<(), ResolveError> {
        while let Some(a) = self.queue.pop_front() {
            let p = &self.pool.available[a];
            for dep in &p.requires {
                if dep.is_rich() {
                    let rich = parse_rich(&dep.name).map_err(|reason| ResolveError::Rich {
                        dependency: dep.name.clone(),
                        package: p.nevra(),
                        reason,
                    })?;
                    self.require_rich(&rich, p)?;
                } else {
                    self.require(dep, p, true)?;
                }
            }
        }
        Ok(())
    }

    /// Whether `dep` (of an installed package) was met before anything changed.
    fn was_met(&self, dep: &Dep) -> bool {
        if dep.name.starts_with("rpmlib(") {
            return true;
        }
        if dep.is_rich() {
            let Ok(rich) = parse_rich(&dep.name) else { return true };
            let mut sets = |d: &Dep| -> Vec<usize> {
                let mut v: Vec<usize> = self
                    .pool
                    .providers(d)
                    .into_iter()
                    .filter_map(|id| if let Id::Installed(i) = id { Some(i) } else { None })
                    .collect();
                if v.is_empty() && d.name.starts_with('/') && (self.base_has)(&d.name) {
                    v.push(usize::MAX);
                }
                v
            };
            return rich.eval_exact(&mut sets);
        }
        self.pool.providers(dep).iter().any(|id| matches!(id, Id::Installed(_)))
            || (dep.name.starts_with('/') && (self.base_has)(&dep.name))
    }

    fn met_now(&self, dep: &Dep) -> bool {
        if dep.name.starts_with("rpmlib(") {
            return true;
        }
        if dep.is_rich() {
            return parse_rich(&dep.name).map_or(true, |r| self.holds(&r));
        }
        !self.world_providers(dep).is_empty()
            || (dep.name.starts_with('/') && (self.base_has)(&dep.name))
    }

    /// The package that took away what `dep` was met by, for messages.
    fn culprit(&self, dep: &Dep) -> String {
        let gone_provider = self.pool.providers(dep).into_iter().find_map(|id| match id {
            Id::Installed(i) => self.gone.get(&i).map(|g| (i, *g)),
            Id::Avail(_) => None,
        });
        match gone_provider {
            Some((_, Gone::SameName(a) | Gone::Obsoleted(a) | Gone::Replaced(a))) => {
                self.pool.available[a].nevra()
            }
            Some((i, Gone::Requested)) => format!("(removing) {}", self.pool.installed[i].nevra()),
            None => "the chosen packages".into(),
        }
    }

    /// Installed packages that stay but whose requirements the plan breaks: each is
    /// upgraded to its best candidate (true when something was chosen), or an error.
    fn repair_installed(&mut self) -> Result<bool, ResolveError> {
        let mut changed = false;
        for (i, q) in self.pool.installed.iter().enumerate() {
            if self.gone.contains_key(&i) {
                continue;
            }
            let Some(dep) = q.requires.iter().find(|d| !self.met_now(d) && self.was_met(d)) else {
                continue;
            };
            let removed_only = self.pool.providers(dep).into_iter().all(|id| !matches!(id, Id::Installed(j) if matches!(self.gone.get(&j), Some(Gone::SameName(_) | Gone::Obsoleted(_) | Gone::Replaced(_)))));
            // The newest build of the same name that is not the installed one.
            let cand =
                self.pool.by_name.get(q.name.as_str()).into_iter().flatten().copied().find(|&a| {
                    compare_evr(&self.pool.available[a].evr, &q.evr) != Ordering::Equal
                        && self.chosen.get(q.name.as_str()).is_none_or(|&c| c == a)
                });
            match cand {
                Some(a) if !self.chosen_set.contains(&a) => {
                    self.choose(a);
                    changed = true;
                }
                _ if removed_only => {
                    let removed = self.culprit(dep);
                    return Err(ResolveError::RemovalBreaks {
                        removed: removed.trim_start_matches("(removing) ").to_string(),
                        installed: q.nevra(),
                        name: q.name.clone(),
                        dependency: dep.to_string(),
                    });
                }
                _ => {
                    return Err(ResolveError::Breaks {
                        installed: q.nevra(),
                        name: q.name.clone(),
                        dependency: dep.to_string(),
                        by: self.culprit(dep),
                    })
                }
            }
        }
        Ok(changed)
    }

    /// Whether package `p`'s plain Conflicts hit `q` (by what `q` provides, or a file it has).
    fn conflicts(&self, p: &PackageMeta, q_id: Id) -> Option<String> {
        let q = self.pool.pkg(q_id);
        p.conflicts
            .iter()
            .filter(|c| !c.is_rich())
            .find(|c| {
                (q.name == c.name && overlaps(c, &Dep::this(&q.name, &q.evr)))
                    || q.provides.iter().any(|d| overlaps(c, d))
                    || (c.name.starts_with('/') && q.files.contains(&c.name))
            })
            .map(|c| c.to_string())
    }

    /// A rich Conflicts of `x` that holds over the result (less `x` itself), and a chosen
    /// package it involves: `(libibverbs < 50 and rdma-core)` is about the set, not one
    /// package (libsolv evaluates it so too).
    fn rich_conflict(&self, x_id: Id) -> Result<Option<(String, usize)>, ResolveError> {
        let x = self.pool.pkg(x_id);
        for c in x.conflicts.iter().filter(|c| c.is_rich()) {
            let rich = parse_rich_conflict(&c.name).map_err(|reason| ResolveError::Rich {
                dependency: c.name.clone(),
                package: x.nevra(),
                reason,
            })?;
            if !self.holds_without(&rich, x_id) {
                continue;
            }
            let involved =
                rich.atoms().into_iter().flat_map(|d| self.world_providers(d)).find_map(|id| {
                    match id {
                        Id::Avail(a) if id != x_id => Some(a),
                        _ => None,
                    }
                });
            if let Some(a) = involved {
                return Ok(Some((c.to_string(), a)));
            }
        }
        Ok(None)
    }

    fn holds_without(&self, rich: &RichDep, except: Id) -> bool {
        let mut sets = |d: &Dep| -> Vec<usize> {
            self.world_providers(d)
                .into_iter()
                .filter(|&id| id != except)
                .map(|id| match id {
                    Id::Installed(i) => i << 1,
                    Id::Avail(a) => (a << 1) | 1,
                })
                .collect()
        };
        rich.eval_exact(&mut sets)
    }

    /// Conflicts between a chosen package and anything in the result. An installed party is
    /// upgraded when a repository has another build (true when one was chosen).
    fn check_conflicts(&mut self) -> Result<bool, ResolveError> {
        let chosen: Vec<usize> = self.chosen_set.iter().copied().collect();
        let mut world: Vec<Id> = (0..self.pool.installed.len())
            .filter(|i| !self.gone.contains_key(i))
            .map(Id::Installed)
            .collect();
        world.extend(chosen.iter().map(|&a| Id::Avail(a)));
        for &a in &chosen {
            let p = &self.pool.available[a];
            for &other in &world {
                if other == Id::Avail(a) {
                    continue;
                }
                let q = self.pool.pkg(other);
                let hit = match self.conflicts(p, other) {
                    Some(c) => Some((p, q, c)),
                    None => self.conflicts(q, Id::Avail(a)).map(|c| (q, p, c)),
                };
                let Some((x, y, dep)) = hit else { continue };
                if let Id::Installed(_) = other {
                    let next =
                        self.pool.by_name.get(q.name.as_str()).into_iter().flatten().copied().find(
                            |&b| {
                                compare_evr(&self.pool.available[b].evr, &q.evr)
                                    == Ordering::Greater
                            },
                        );
                    if let Some(b) = next {
                        if !self.chosen_set.contains(&b)
                            && !self.chosen.contains_key(q.name.as_str())
                        {
                            self.choose(b);
                            return Ok(true);
                        }
                    }
                }
                return Err(ResolveError::Conflict {
                    package: x.nevra(),
                    other: y.nevra(),
                    other_name: y.name.clone(),
                    dependency: dep,
                });
            }
        }
        for &x in &world {
            if let Some((dep, a)) = self.rich_conflict(x)? {
                let (xp, ap) = (self.pool.pkg(x), &self.pool.available[a]);
                return Err(ResolveError::Conflict {
                    package: xp.nevra(),
                    other: ap.nevra(),
                    other_name: ap.name.clone(),
                    dependency: dep,
                });
            }
        }
        Ok(false)
    }
}

/// Resolves `req` against the image's packages (`installed`, from its rpm database) and the
/// repositories' (`available`). `base_has` tells whether the image has a file (for file
/// requires no package lists). The same inputs always give the same result.
pub fn resolve(
    req: &Request,
    installed: &[PackageMeta],
    available: &[PackageMeta],
    base_has: &dyn Fn(&str) -> bool,
) -> Result<Resolution, ResolveError> {
    let known =
        |n: &str| available.iter().any(|p| p.name == n) || installed.iter().any(|p| p.name == n);
    let asked: Vec<Asked> =
        req.install.iter().map(|t| parse_request(t, &known)).collect::<Result<_, _>>()?;
    let extra: BTreeSet<(String, String)> = asked
        .iter()
        .filter_map(|a| a.arch.as_ref().map(|arch| (a.name.clone(), arch.clone())))
        .collect();
    let pool = Pool::new(installed, available, req.arch, &extra);
    let mut repos: Vec<&str> = available.iter().map(|p| p.origin.as_str()).collect();
    repos.sort();
    repos.dedup();
    let mut s = Solver {
        pool: &pool,
        base_has,
        gone: BTreeMap::new(),
        chosen: BTreeMap::new(),
        chosen_set: BTreeSet::new(),
        queue: VecDeque::new(),
        satisfied: Vec::new(),
        base_files: BTreeSet::new(),
        repos: repos.join(", "),
    };

    for name in req.remove {
        for &i in pool.installed_by_name.get(name.as_str()).into_iter().flatten() {
            s.gone.insert(i, Gone::Requested);
        }
    }
    let mut kept: Vec<PackageMeta> = Vec::new();
    let mut wanted: Vec<(String, usize)> = Vec::new();
    for rule in req.replace {
        let a = pool.by_name.get(rule.with.as_str()).and_then(|l| l.first().copied()).ok_or_else(
            || ResolveError::UnknownPackage {
                name: rule.with.clone(),
                arch: req.arch.into(),
                repos: s.repos.clone(),
                hint: Some(format!("it replaces {}", rule.installed)),
            },
        )?;
        for &i in pool.installed_by_name.get(rule.installed.as_str()).into_iter().flatten() {
            s.gone.insert(
                i,
                if rule.installed == rule.with { Gone::SameName(a) } else { Gone::Replaced(a) },
            );
        }
        wanted.push((rule.with.clone(), a));
    }
    for ask in &asked {
        s.ask(ask, &mut wanted, &mut kept)?;
    }
    for &(_, a) in &wanted {
        if let Some(&c) = s.chosen.get(available[a].name.as_str()) {
            if c != a {
                return Err(ResolveError::Request {
                    request: available[a].name.clone(),
                    reason: format!(
                        "asked for both {} and {}",
                        available[c].nevra(),
                        available[a].nevra()
                    ),
                });
            }
        }
        s.choose(a);
    }
    // Until nothing changes: requirements of the chosen, installed packages they break,
    // conflicts an upgrade can clear. Each round chooses at least one more package, so
    // this ends.
    loop {
        s.drain()?;
        if s.repair_installed()? {
            continue;
        }
        if s.check_conflicts()? {
            continue;
        }
        break;
    }
    Ok(finish(&s, kept))
}

impl<'a> Solver<'a, '_> {
    /// One name of the request: kept where an installed package fits it, else the available
    /// package it names (or the one provider of the name) added to `wanted`.
    fn ask(
        &self,
        ask: &Asked,
        wanted: &mut Vec<(String, usize)>,
        kept: &mut Vec<PackageMeta>,
    ) -> Result<(), ResolveError> {
        let (pool, installed, available) = (self.pool, self.pool.installed, self.pool.available);
        let fits = |p: &PackageMeta| {
            ask.arch.as_ref().is_none_or(|a| *a == p.arch)
                && ask.version.as_ref().is_none_or(|v| compare_evr(&p.evr, v) == Ordering::Equal)
        };
        if wanted.iter().any(|(n, _)| *n == ask.name) {
            return Ok(());
        }
        // Already there at a fitting version: kept.
        let here = pool
            .installed_by_name
            .get(ask.name.as_str())
            .into_iter()
            .flatten()
            .copied()
            .find(|&i| !self.gone.contains_key(&i) && fits(&installed[i]));
        if let Some(i) = here {
            kept.push(installed[i].clone());
            return Ok(());
        }
        let by_name = pool.by_name.get(ask.name.as_str());
        if let Some(list) = by_name {
            let a = list.iter().copied().find(|&a| fits(&available[a])).ok_or_else(|| {
                ResolveError::UnknownVersion {
                    name: ask.name.clone(),
                    version: ask
                        .version
                        .as_ref()
                        .map_or_else(|| ask.text.clone(), |v| v.to_string()),
                    arch: ask.arch.clone().unwrap_or_else(|| self.pool.arch.to_string()),
                    available: list
                        .iter()
                        .map(|&a| available[a].nevra())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            })?;
            wanted.push((ask.name.clone(), a));
            return Ok(());
        }
        // A provide (virtual name, soname): kept when installed, else its one provider.
        let dep = Dep {
            name: ask.name.clone(),
            version: ask.version.clone().map(|v| (erdma_rpm::Cmp::Eq, v)),
            pre: false,
        };
        if let Some(Id::Installed(i)) = self.world_providers(&dep).first() {
            kept.push(installed[*i].clone());
            return Ok(());
        }
        let cands = self.candidates(&dep);
        let names: BTreeSet<&str> = cands.iter().map(|&a| available[a].name.as_str()).collect();
        match names.len() {
            0 => {
                let other_arch: Vec<String> = available
                    .iter()
                    .filter(|p| p.name == ask.name)
                    .map(PackageMeta::nevra)
                    .take(3)
                    .collect();
                let hint = (!other_arch.is_empty())
                    .then(|| format!("there is {} (ask for NAME.ARCH)", other_arch.join(", ")));
                return Err(ResolveError::UnknownPackage {
                    name: ask.text.clone(),
                    arch: self.pool.arch.into(),
                    repos: self.repos.clone(),
                    hint,
                });
            }
            1 => wanted.push((ask.name.clone(), cands[0])),
            _ => {
                return Err(ResolveError::Virtual {
                    name: ask.text.clone(),
                    providers: names.into_iter().collect::<Vec<_>>().join(", "),
                })
            }
        }
        Ok(())
    }
}

fn finish(s: &Solver, kept: Vec<PackageMeta>) -> Resolution {
    let pool = s.pool;
    let av = pool.available;
    // Dependencies first: Kahn's algorithm over "requires something chosen", ready ones in
    // name order; what is left (cycles) in name order too.
    let chosen: Vec<usize> = {
        let mut v: Vec<usize> = s.chosen_set.iter().copied().collect();
        v.sort_by(|&x, &y| av[x].name.cmp(&av[y].name).then(x.cmp(&y)));
        v
    };
    let mut needs: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for &a in &chosen {
        let mut deps = BTreeSet::new();
        for d in &av[a].requires {
            let atoms: Vec<Dep> = if d.is_rich() {
                parse_rich(&d.name)
                    .map(|r| r.atoms().into_iter().cloned().collect())
                    .unwrap_or_default()
            } else {
                vec![d.clone()]
            };
            for atom in &atoms {
                for id in pool.providers(atom) {
                    if let Id::Avail(b) = id {
                        if b != a && s.chosen_set.contains(&b) {
                            deps.insert(b);
                        }
                    }
                }
            }
        }
        needs.insert(a, deps);
    }
    let mut order: Vec<usize> = Vec::new();
    let mut done: BTreeSet<usize> = BTreeSet::new();
    while order.len() < chosen.len() {
        let ready = chosen
            .iter()
            .copied()
            .find(|a| !done.contains(a) && needs[a].iter().all(|b| done.contains(b)));
        // A cycle: the first left in name order goes next.
        let next =
            ready.unwrap_or_else(|| *chosen.iter().find(|a| !done.contains(a)).expect("some left"));
        done.insert(next);
        order.push(next);
    }
    let install = order
        .into_iter()
        .map(|a| {
            let p = &av[a];
            let displaced: Vec<(usize, Gone)> = s.gone.iter().filter(|(_, g)| matches!(g, Gone::SameName(b) | Gone::Obsoleted(b) | Gone::Replaced(b) if *b == a)).map(|(&i, &g)| (i, g)).collect();
            let same: Vec<usize> = displaced.iter().filter(|(_, g)| matches!(g, Gone::SameName(_))).map(|(i, _)| *i).collect();
            let action = if displaced.len() > same.len() {
                Action::Replace { from: displaced.iter().map(|(i, _)| pool.installed[*i].nevra()).collect() }
            } else if let Some(&i) = same.first() {
                let from = &pool.installed[i];
                match compare_evr(&p.evr, &from.evr) {
                    Ordering::Greater => Action::Upgrade { from: from.evr.to_string() },
                    Ordering::Less => Action::Downgrade { from: from.evr.to_string() },
                    Ordering::Equal => Action::Replace { from: vec![from.nevra()] },
                }
            } else {
                Action::Install
            };
            Planned { package: p.clone(), action }
        })
        .collect();
    let remove = s
        .gone
        .iter()
        .filter_map(|(&i, g)| {
            let reason = match g {
                Gone::Requested => RemoveReason::Requested,
                Gone::Obsoleted(a) => RemoveReason::Obsoleted { by: av[*a].nevra() },
                Gone::Replaced(a) => RemoveReason::Replaced { by: av[*a].nevra() },
                Gone::SameName(_) => return None,
            };
            let q = &pool.installed[i];
            Some(Removal {
                name: q.name.clone(),
                evr: q.evr.clone(),
                arch: q.arch.clone(),
                nevra: q.nevra(),
                reason,
            })
        })
        .collect();
    Resolution {
        install,
        remove,
        kept,
        satisfied: s.satisfied.clone(),
        base_files: s.base_files.iter().cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package from a compact description: `NAME EVR ARCH` then lines `R: dep`,
    /// `P: dep`, `O: dep`, `C: dep`, `F: /path`.
    fn pkg(origin: &str, text: &str) -> PackageMeta {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        let evr = parse_evr(head[1]);
        let mut p = PackageMeta {
            name: head[0].into(),
            evr: evr.clone(),
            arch: head[2].into(),
            provides: vec![Dep::this(head[0], &evr)],
            requires: vec![],
            obsoletes: vec![],
            conflicts: vec![],
            recommends: vec![],
            files: vec![],
            origin: origin.into(),
            location: None,
            checksum: None,
            size: 0,
        };
        if p.arch != "noarch" {
            let isa = if p.arch == "x86_64" { "x86-64" } else { "aarch-64" };
            p.provides.push(Dep::this(&format!("{}({isa})", p.name), &evr));
        }
        for l in lines {
            let (k, v) = l.split_once(": ").unwrap();
            let d = Dep::parse(v);
            match k {
                "R" => p.requires.push(d),
                "P" => p.provides.push(d),
                "O" => p.obsoletes.push(d),
                "C" => p.conflicts.push(d),
                "F" => p.files.push(v.into()),
                _ => panic!("{k}"),
            }
        }
        p
    }

    /// rdma-core 44.0 as Alibaba Cloud Linux 3 / EL8 builds it (redhat/rdma-core.spec:
    /// `Requires: libibverbs%{?_isa} = %{version}-%{release}`, `Provides`/`Obsoletes` of the
    /// old provider packages, `/sbin/ldconfig` scriptlets) and a later 46.0.
    fn repo() -> Vec<PackageMeta> {
        let mut v = Vec::new();
        for (ver, rel) in [("44.0", "2.al8"), ("46.0", "1.al8")] {
            let evr = format!("{ver}-{rel}");
            v.push(pkg("erdma", &format!("rdma-core {evr} x86_64\nR: /bin/sh\nR: pciutils\nR: (systemd if systemd-udev)\nR: libnl3 >= 3.5\nP: rdma = {evr}\nO: rdma < {evr}\nC: infiniband-diags <= 1.6.7\nF: /etc/rdma/rdma.conf\nF: /usr/sbin/rdma-ndd")));
            v.push(pkg("erdma", &format!("libibverbs {evr} x86_64\nR: rdma-core(x86-64) = {evr}\nR: libnl3 >= 3.5\nR: /sbin/ldconfig\nR: libnl-3.so.200()(64bit)\nP: libibverbs.so.1()(64bit)\nP: liberdma = {evr}\nO: liberdma < {evr}\nP: libmlx5 = {evr}\nO: libmlx5 < {evr}\nF: /etc/libibverbs.d/erdma.driver")));
            v.push(pkg("erdma", &format!("librdmacm {evr} x86_64\nR: libibverbs(x86-64) = {evr}\nR: libibverbs.so.1()(64bit)\nP: librdmacm.so.1()(64bit)")));
            v.push(pkg("erdma", &format!("libibverbs-utils {evr} x86_64\nR: libibverbs(x86-64) = {evr}\nR: libibverbs.so.1()(64bit)\nF: /usr/bin/ibv_devinfo")));
        }
        v.push(pkg(
            "baseos",
            "libnl3 3.5.0-1.el8 x86_64\nP: libnl-3.so.200()(64bit)\nR: /sbin/ldconfig",
        ));
        v.push(pkg("baseos", "libnl3 3.5.0-1.el8 i686\nP: libnl-3.so.200"));
        v.push(pkg("baseos", "pciutils 3.7.0-1.el8 x86_64\nR: pciutils-libs = 3.7.0-1.el8"));
        v.push(pkg("baseos", "pciutils-libs 3.7.0-1.el8 x86_64"));
        v.push(pkg("baseos", "systemd 239-68.el8 x86_64\nF: /usr/bin/systemctl"));
        v
    }

    /// A minimal EL8 image: glibc, bash (owning /bin/sh), but no /sbin/ldconfig owner.
    fn base() -> Vec<PackageMeta> {
        vec![
            pkg("installed", "bash 4.4.20-4.el8 x86_64\nF: /bin/sh\nF: /usr/bin/bash"),
            pkg("installed", "glibc 2.28-225.el8 x86_64\nP: libc.so.6()(64bit)"),
        ]
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(
        install: &[&str],
        remove: &[&str],
        replace: &[Replace],
        installed: &[PackageMeta],
        available: &[PackageMeta],
    ) -> Result<Resolution, ResolveError> {
        let (i, r) = (strings(install), strings(remove));
        let req = Request { install: &i, remove: &r, replace, arch: "x86_64" };
        resolve(&req, installed, available, &|f| f == "/sbin/ldconfig")
    }

    fn plan(r: &Resolution) -> Vec<String> {
        r.install
            .iter()
            .map(|p| match &p.action {
                Action::Install => p.package.nevra(),
                Action::Upgrade { from } => format!("{} (upgrade from {from})", p.package.nevra()),
                Action::Downgrade { from } => {
                    format!("{} (downgrade from {from})", p.package.nevra())
                }
                Action::Replace { from: of } => {
                    format!("{} (replaces {})", p.package.nevra(), of.join(" "))
                }
            })
            .collect()
    }

    #[test]
    fn newest_candidates_dependencies_first() {
        let r = run(&["libibverbs-utils", "librdmacm"], &[], &[], &base(), &repo()).unwrap();
        assert_eq!(
            plan(&r),
            [
                "libnl3-3.5.0-1.el8.x86_64",
                "pciutils-libs-3.7.0-1.el8.x86_64",
                "pciutils-3.7.0-1.el8.x86_64",
                "rdma-core-46.0-1.al8.x86_64",
                "libibverbs-46.0-1.al8.x86_64",
                "libibverbs-utils-46.0-1.al8.x86_64",
                "librdmacm-46.0-1.al8.x86_64"
            ]
        );
        // /bin/sh from bash; /sbin/ldconfig only from the base's files (reported).
        assert!(r.satisfied.contains(&Satisfied {
            package: "rdma-core-46.0-1.al8.x86_64".into(),
            requires: "/bin/sh".into(),
            by: "bash-4.4.20-4.el8.x86_64".into()
        }));
        assert_eq!(r.base_files, ["/sbin/ldconfig"]);
        // `(systemd if systemd-udev)`: no systemd-udev, so no systemd.
        assert!(!plan(&r).iter().any(|p| p.starts_with("systemd")));
        assert!(r.remove.is_empty() && r.kept.is_empty());
        // Without the base's ldconfig, nothing provides it: dnf's message.
        let (i, none) = (strings(&["libibverbs"]), Vec::new());
        let e = resolve(
            &Request { install: &i, remove: &none, replace: &[], arch: "x86_64" },
            &base(),
            &repo(),
            &|_| false,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "nothing provides /sbin/ldconfig needed by libibverbs-46.0-1.al8.x86_64 (from erdma)"
        );
    }

    #[test]
    fn pinned_versions_and_request_forms() {
        for form in [
            "librdmacm=44.0",
            "librdmacm-44.0",
            "librdmacm-44.0-2.al8",
            "librdmacm=44.0-2.al8",
            "librdmacm.x86_64=44.0",
        ] {
            let r = run(&[form], &[], &[], &base(), &repo()).unwrap();
            assert_eq!(
                r.install
                    .iter()
                    .find(|p| p.package.name == "librdmacm")
                    .unwrap()
                    .package
                    .evr
                    .to_string(),
                "44.0-2.al8",
                "{form}"
            );
            // The dependency `libibverbs(x86-64) = 44.0-2.al8` takes libibverbs 44 too.
            assert_eq!(
                r.install
                    .iter()
                    .find(|p| p.package.name == "libibverbs")
                    .unwrap()
                    .package
                    .evr
                    .to_string(),
                "44.0-2.al8",
                "{form}"
            );
        }
        let e = run(&["librdmacm=45"], &[], &[], &base(), &repo()).unwrap_err();
        assert!(matches!(e, ResolveError::UnknownVersion { .. }), "{e}");
        let e = run(&["nosuch"], &[], &[], &base(), &repo()).unwrap_err();
        assert!(matches!(e, ResolveError::UnknownPackage { .. }), "{e}");
        // i686 only when asked for.
        let e = run(&["libnl-3.so.200"], &[], &[], &base(), &repo()).unwrap_err();
        assert!(matches!(e, ResolveError::UnknownPackage { .. }), "{e}");
        let r = run(&["libnl3.i686"], &[], &[], &base(), &repo()).unwrap();
        assert_eq!(plan(&r), ["libnl3-3.5.0-1.el8.i686"]);
        // A soname names its one provider.
        let r = run(&["librdmacm.so.1()(64bit)"], &[], &[], &base(), &repo()).unwrap();
        assert!(plan(&r).contains(&"librdmacm-46.0-1.al8.x86_64".to_string()));
    }

    #[test]
    fn installed_ones_are_kept_and_broken_partners_upgraded() {
        let mut installed = base();
        installed.extend(repo().into_iter().filter(|p| {
            p.evr.version == "44.0"
                || p.name.starts_with("libnl3") && p.arch == "x86_64"
                || p.name.starts_with("pciutils")
        }));
        installed.retain(|p| p.name != "libibverbs-utils");
        // Requested and already there: kept, nothing else touched.
        let r = run(&["librdmacm"], &[], &[], &installed, &repo()).unwrap();
        assert_eq!(
            r.kept.iter().map(PackageMeta::nevra).collect::<Vec<_>>(),
            ["librdmacm-44.0-2.al8.x86_64"]
        );
        assert!(r.install.is_empty());
        // A new libibverbs-utils pulls libibverbs 46, which breaks librdmacm 44's
        // `libibverbs(x86-64) = 44.0-2.al8`: librdmacm is upgraded too, and rdma-core.
        let r = run(&["libibverbs-utils"], &[], &[], &installed, &repo()).unwrap();
        assert_eq!(
            plan(&r),
            [
                "rdma-core-46.0-1.al8.x86_64 (upgrade from 44.0-2.al8)",
                "libibverbs-46.0-1.al8.x86_64 (upgrade from 44.0-2.al8)",
                "libibverbs-utils-46.0-1.al8.x86_64",
                "librdmacm-46.0-1.al8.x86_64 (upgrade from 44.0-2.al8)"
            ]
        );
        // No librdmacm 46 in the repository: an error naming both.
        let partial: Vec<PackageMeta> = repo()
            .into_iter()
            .filter(|p| !(p.name == "librdmacm" && p.evr.version == "46.0"))
            .collect();
        let e = run(&["libibverbs-utils"], &[], &[], &installed, &partial).unwrap_err();
        assert_eq!(format!("{e}; hint: {}", e.hint().unwrap()), "installing libibverbs-46.0-1.al8.x86_64 breaks installed librdmacm-44.0-2.al8.x86_64, which requires libibverbs(x86-64) = 44.0-2.al8, and no repository has another librdmacm; hint: add librdmacm to the packages to remove or to install");
    }

    /// MLNX_OFED's user space: `libibverbs-58mlnx43-1.58101`, newer by EVR than any
    /// distribution build, and a package of the image linking against its soname.
    fn ofed_image() -> Vec<PackageMeta> {
        let mut v = base();
        v.push(pkg("installed", "libibverbs 58mlnx43-1.58101 x86_64\nP: libibverbs.so.1()(64bit)\nP: libmlx5 = 58mlnx43-1.58101\nF: /etc/libibverbs.d/mlx5.driver"));
        v.push(pkg("installed", "librdmacm 58mlnx43-1.58101 x86_64\nR: libibverbs = 58mlnx43-1.58101\nP: librdmacm.so.1()(64bit)"));
        v.push(pkg("installed", "liberdma 1.0-1 x86_64\nR: libibverbs.so.1()(64bit)"));
        v.push(pkg(
            "installed",
            "ucx 1.15.0-1.58101 x86_64\nR: libibverbs.so.1()(64bit)\nR: librdmacm.so.1()(64bit)",
        ));
        v.push(pkg("installed", "mlnx-tools 5.8-1 x86_64\nR: python3"));
        v
    }

    #[test]
    fn mellanox_builds_are_replaced() {
        let installed = ofed_image();
        // Asked for plainly, the OFED builds satisfy the request: kept (as dnf would).
        let r = run(&["libibverbs", "librdmacm"], &[], &[], &installed, &repo()).unwrap();
        assert_eq!(r.kept.len(), 2);
        // Replace rules take them out whatever their version; liberdma goes by Obsoletes;
        // ucx keeps its sonames from the new builds; the remove list takes mlnx-tools.
        let rules = [
            Replace { installed: "libibverbs".into(), with: "libibverbs".into() },
            Replace { installed: "librdmacm".into(), with: "librdmacm".into() },
        ];
        let r = run(
            &["libibverbs-utils"],
            &["mlnx-tools", "not-installed"],
            &rules,
            &installed,
            &repo(),
        )
        .unwrap();
        assert_eq!(
            plan(&r),
            [
                "libnl3-3.5.0-1.el8.x86_64",
                "pciutils-libs-3.7.0-1.el8.x86_64",
                "pciutils-3.7.0-1.el8.x86_64",
                "rdma-core-46.0-1.al8.x86_64",
                "libibverbs-46.0-1.al8.x86_64 (replaces libibverbs-58mlnx43-1.58101.x86_64 liberdma-1.0-1.x86_64)",
                "libibverbs-utils-46.0-1.al8.x86_64",
                "librdmacm-46.0-1.al8.x86_64 (downgrade from 58mlnx43-1.58101)"
            ]
        );
        let removed: Vec<(String, RemoveReason)> =
            r.remove.iter().map(|x| (x.nevra.clone(), x.reason.clone())).collect();
        assert_eq!(
            removed,
            [
                (
                    "liberdma-1.0-1.x86_64".to_string(),
                    RemoveReason::Obsoleted { by: "libibverbs-46.0-1.al8.x86_64".into() }
                ),
                ("mlnx-tools-5.8-1.x86_64".to_string(), RemoveReason::Requested)
            ]
        );
        // Without a rule for librdmacm, the OFED librdmacm's `libibverbs = 58mlnx43` breaks:
        // the repository's librdmacm is taken in its place.
        let r = run(&["libibverbs"], &[], &rules[..1], &installed, &repo()).unwrap();
        assert!(
            plan(&r).contains(
                &"librdmacm-46.0-1.al8.x86_64 (downgrade from 58mlnx43-1.58101)".to_string()
            ),
            "{:?}",
            plan(&r)
        );
        // Removing what ucx needs, with nothing to take its place, names both.
        let e = run(&[], &["librdmacm"], &[], &installed, &[]).unwrap_err();
        assert_eq!(format!("{e}; hint: {}", e.hint().unwrap()), "removing librdmacm-58mlnx43-1.58101.x86_64 breaks installed ucx-1.15.0-1.58101.x86_64, which requires librdmacm.so.1()(64bit); hint: remove ucx too");
    }

    #[test]
    fn conflicts_are_refused_or_upgraded_away() {
        let mut installed = base();
        installed.push(pkg("installed", "infiniband-diags 1.6.7-1 x86_64"));
        let e = run(&["rdma-core"], &[], &[], &installed, &repo()).unwrap_err();
        assert_eq!(format!("{e}; hint: {}", e.hint().unwrap()), "rdma-core-46.0-1.al8.x86_64 conflicts with infiniband-diags-1.6.7-1.x86_64 (infiniband-diags <= 1.6.7); hint: add infiniband-diags to the packages to remove, or install a build without the conflict");
        // Removed: fine.
        assert!(run(&["rdma-core"], &["infiniband-diags"], &[], &installed, &repo()).is_ok());
        // A newer build in a repository clears it.
        let mut avail = repo();
        avail.push(pkg("baseos", "infiniband-diags 44.0-2.al8 x86_64"));
        let r = run(&["rdma-core"], &[], &[], &installed, &avail).unwrap();
        assert!(plan(&r)
            .contains(&"infiniband-diags-44.0-2.al8.x86_64 (upgrade from 1.6.7-1)".to_string()));
        // An installed package's Conflicts count too, and rich ones.
        let mut installed = base();
        installed.push(pkg("installed", "old-tool 1-1 x86_64\nC: (libibverbs < 50 and rdma-core)"));
        let e = run(&["libibverbs"], &[], &[], &installed, &repo()).unwrap_err();
        assert!(e.to_string().starts_with("old-tool-1-1.x86_64 conflicts with "), "{e}");
        assert!(run(&["libnl3"], &[], &[], &installed, &repo()).is_ok());
    }

    #[test]
    fn rich_epoch_and_file_requires() {
        let mut avail = repo();
        // `(a or b)`: the first that can be had; an alternative already installed is enough.
        avail.push(pkg("x", "app 1-1 noarch\nR: (libfabric or librdmacm >= 44)\nR: /usr/bin/ibv_devinfo\nR: (perl if bash)"));
        avail.push(pkg("x", "perl 5.26-1 x86_64\nF: /usr/bin/perl"));
        let r = run(&["app"], &[], &[], &base(), &avail).unwrap();
        let p = plan(&r);
        for want in [
            "librdmacm-46.0-1.al8.x86_64",
            "libibverbs-utils-46.0-1.al8.x86_64",
            "perl-5.26-1.x86_64",
            "app-1-1.noarch",
        ] {
            assert!(p.contains(&want.to_string()), "{want} in {p:?}");
        }
        assert_eq!(p.last().unwrap(), "app-1-1.noarch");
        // Epoch beats version: 1:1.0 is newer than 2.0.
        let avail = vec![
            pkg("x", "tool 2.0-1 x86_64"),
            pkg("x", "tool 1:1.0-1 x86_64"),
            pkg("x", "user 1-1 x86_64\nR: tool >= 1:0.5"),
        ];
        let r = run(&["user"], &[], &[], &base(), &avail).unwrap();
        assert_eq!(plan(&r), ["tool-1:1.0-1.x86_64", "user-1-1.x86_64"]);
        let e = run(&["tool=3"], &[], &[], &base(), &avail).unwrap_err();
        assert!(e.to_string().contains("available: tool-1:1.0-1.x86_64, tool-2.0-1.x86_64"), "{e}");
        // Same version, the native arch wins over noarch.
        let avail = vec![
            pkg("x", "dual 1-1 noarch"),
            pkg("x", "dual 1-1 x86_64"),
            pkg("x", "dual 1-1 aarch64"),
        ];
        assert_eq!(plan(&run(&["dual"], &[], &[], &base(), &avail).unwrap()), ["dual-1-1.x86_64"]);
        // Versioned requires with a hint for what does exist.
        let avail = vec![
            pkg("x", "old 1-1 x86_64\nR: libnl3 >= 3.6"),
            pkg("baseos", "libnl3 3.5.0-1.el8 x86_64"),
        ];
        let e = run(&["old"], &[], &[], &base(), &avail).unwrap_err();
        assert_eq!(format!("{e}; hint: {}", e.hint().unwrap()), "nothing provides libnl3 >= 3.6 needed by old-1-1.x86_64 (from x); hint: available but not fitting: libnl3-3.5.0-1.el8.x86_64 (from baseos)");
    }

    #[test]
    fn resolution_is_deterministic() {
        let rules = [Replace { installed: "libibverbs".into(), with: "libibverbs".into() }];
        let once = || {
            let r = run(
                &["librdmacm", "libibverbs-utils", "rdma-core"],
                &["mlnx-tools"],
                &rules,
                &ofed_image(),
                &repo(),
            )
            .unwrap();
            serde_json::to_string(&r).unwrap()
        };
        let first = once();
        for _ in 0..5 {
            assert_eq!(once(), first);
        }
        // Repository order does not matter for what is chosen.
        let mut rev = repo();
        rev.reverse();
        let a = run(&["libibverbs-utils"], &[], &[], &base(), &repo()).unwrap();
        let b = run(&["libibverbs-utils"], &[], &[], &base(), &rev).unwrap();
        assert_eq!(plan(&a), plan(&b));
    }
}
