//! Where a package gets resolved: apt's choices, for the small closed sets we install.
//!
//! Like apt: the newest candidate of the base's architecture (or `all`); `Depends` and
//! `Pre-Depends` with versions, alternatives in order and `Provides`; `Breaks`/`Conflicts`
//! against everything that will be installed, upgrading an installed package when a newer
//! candidate clears the conflict (that is how `libibverbs1` and `ibverbs-providers` move
//! together); packages the base already has at a satisfying version are not added again.
use std::cell::OnceCell;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use crate::packages::{Action, Selected};
use erdma_deb::deb822::Paragraph;
use erdma_deb::repo::{IndexedPackage, RepoError};
use erdma_deb::version::{parse_relations, Dependency, Version};

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
            .filter(|p| {
                p.get("Status").is_some_and(|s| s.split_whitespace().nth(2) == Some("installed"))
            })
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

#[derive(Debug, Clone)]
pub struct Planned {
    pub pkg: IndexedPackage,
    pub name: String,
    pub arch: String,
    pub version: Version,
    pub action: Action,
    /// Held in dpkg (`apt-mark hold`): a later `apt-get upgrade` in the image must not swap
    /// it for another build (NCCL: a newer `+cuda13` build on a CUDA 12 image).
    pub hold: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Resolution {
    pub install: Vec<Planned>,
    /// Installed packages that go away (replaced, or in the recipe's remove list).
    pub remove: Vec<Installed>,
    /// Requested packages the base already has at a satisfying version.
    pub kept: Vec<Installed>,
    /// Requested names that no package has, taken as their one provider (`librdmacm1` ->
    /// `librdmacm1t64`), as apt's "Note, selecting 'X' instead of 'Y'".
    pub selected: Vec<Selected>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("unknown package `{name}`: no repository ({repos}) has it for {arch}")]
    UnknownPackage { name: String, repos: String, arch: String },
    /// apt: "Package X is a virtual package provided by: … You should explicitly select one".
    #[error(
        "package `{name}` is a virtual package provided by {providers}; name the one to install"
    )]
    Virtual { name: String, providers: String },
    #[error("no repository ({repos}) has {name} version {version} for {arch}")]
    UnknownVersion { name: String, version: String, repos: String, arch: String },
    #[error("cannot satisfy `{dependency}` of {package} {version}: no installed package or candidate provides it")]
    Unsatisfiable { package: String, version: String, dependency: String },
    #[error("{package} {version} {kind} {other} {other_version}, and no candidate resolves it")]
    Conflict {
        package: String,
        version: String,
        kind: &'static str,
        other: String,
        other_version: String,
    },
    #[error("malformed {field} of {package}")]
    Malformed {
        package: String,
        field: &'static str,
        #[source]
        reason: crate::error::Cause,
    },
    /// A stanza the resolver reads in full did not parse.
    #[error(transparent)]
    Index(#[from] RepoError),
}

/// What to install and replace.
pub struct Request<'a> {
    /// Package names, or `name=version` for exactly that version (as `apt-get install` takes
    /// them): the newest candidate otherwise.
    pub install: &'a [String],
    /// The recipe's remove list: installed builds of these are replaced or removed.
    pub replace: &'a [String],
    pub arch: &'a str,
}

pub(super) fn parse_field(
    value: Option<&str>,
    field: &'static str,
    package: &str,
) -> Result<Vec<Vec<Dependency>>, ResolveError> {
    match value {
        None => Ok(Vec::new()),
        Some(v) => parse_relations(v).map_err(|e| ResolveError::Malformed {
            package: package.into(),
            field,
            reason: e.into(),
        }),
    }
}

pub(super) fn relations(
    p: &Paragraph,
    field: &'static str,
    package: &str,
) -> Result<Vec<Vec<Dependency>>, ResolveError> {
    parse_field(p.get(field), field, package)
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
    version: Option<&'a Version>,
}

fn matches(dep: &Dependency, offer: &Offer) -> bool {
    if dep.name != offer.name {
        return false;
    }
    match (&dep.constraint, offer.version) {
        (None, _) => true,
        (Some((rel, want)), Some(have)) => rel.satisfied_by(have, want),
        // An unversioned Provides never satisfies a versioned relation (Policy 7.5).
        (Some(_), None) => false,
    }
}

/// Whether a package offers what `dep` asks for: itself at its version, or its Provides.
pub(super) fn offered(
    dep: &Dependency,
    name: &str,
    version: &Version,
    provides: &[Vec<Dependency>],
) -> bool {
    matches(dep, &Offer { name, version: Some(version) }) || provided(dep, provides)
}

/// Whether one of a package's Provides meets `dep`.
fn provided(dep: &Dependency, provides: &[Vec<Dependency>]) -> bool {
    provides.iter().flatten().any(|p| {
        matches(dep, &Offer { name: &p.name, version: p.constraint.as_ref().map(|(_, v)| v) })
    })
}

struct Cand<'a> {
    pkg: &'a IndexedPackage,
    name: &'a str,
    arch: &'a str,
    version: Version,
    /// Parsed when first needed: most candidates are never asked.
    provides: OnceCell<Vec<Vec<Dependency>>>,
}

impl Cand<'_> {
    fn provides(&self) -> Result<&[Vec<Dependency>], ResolveError> {
        if let Some(p) = self.provides.get() {
            return Ok(p);
        }
        let parsed = parse_field(self.pkg.provides(), "Provides", self.name)?;
        Ok(self.provides.get_or_init(|| parsed))
    }

    fn offers(&self, dep: &Dependency) -> Result<bool, ResolveError> {
        Ok(offered(dep, self.name, &self.version, self.provides()?))
    }

    fn is(&self, dep: &Dependency) -> bool {
        matches(dep, &Offer { name: self.name, version: Some(&self.version) })
    }
}

/// The candidates of our architecture, by name, newest first; a name's list is built (its
/// versions parsed and sorted) the first time the name is looked up, as a resolution looks
/// at a few dozen names of the tens of thousands an index has.
struct Candidates<'a> {
    arch: &'a str,
    available: &'a [IndexedPackage],
    by_name: HashMap<&'a str, usize>,
    /// Per name: the first and last package of that name in `available`; `next` chains them
    /// in index order.
    ends: Vec<(u32, u32)>,
    next: Vec<u32>,
    lists: Vec<OnceCell<Vec<Cand<'a>>>>,
}

impl<'a> Candidates<'a> {
    const END: u32 = u32::MAX;

    fn new(available: &'a [IndexedPackage], arch: &'a str) -> Self {
        let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(available.len());
        let mut ends: Vec<(u32, u32)> = Vec::new();
        let mut next = vec![Self::END; available.len()];
        for (i, pkg) in available.iter().enumerate() {
            let i = i as u32;
            match by_name.entry(pkg.name()) {
                Entry::Occupied(e) => {
                    let (_, last) = &mut ends[*e.get()];
                    next[*last as usize] = i;
                    *last = i;
                }
                Entry::Vacant(e) => {
                    e.insert(ends.len());
                    ends.push((i, i));
                }
            }
        }
        let lists = std::iter::repeat_with(OnceCell::new).take(ends.len()).collect();
        Candidates { arch, available, by_name, ends, next, lists }
    }

    /// The candidates named `name`, newest first (in index order among equal versions).
    fn get(&self, name: &str) -> &[Cand<'a>] {
        let Some(&slot) = self.by_name.get(name) else { return &[] };
        self.lists[slot].get_or_init(|| {
            let mut list = Vec::new();
            let mut i = self.ends[slot].0;
            while i != Self::END {
                let pkg = &self.available[i as usize];
                i = self.next[i as usize];
                let Some(version) = pkg.version() else { continue };
                let arch = pkg.arch().unwrap_or("all");
                if arch != self.arch && arch != "all" {
                    continue;
                }
                let Ok(version) = version.parse::<Version>() else { continue };
                list.push(Cand { pkg, name: pkg.name(), arch, version, provides: OnceCell::new() });
            }
            list.sort_by(|a, b| b.version.cmp(&a.version));
            list
        })
    }

    /// The candidates whose Provides meet `dep`, per package (in name order), newest first.
    fn providers(&self, dep: &Dependency) -> Result<Vec<Vec<&Cand<'a>>>, ResolveError> {
        // Only a stanza whose Provides text names the package can provide it.
        let names: BTreeSet<&str> = self
            .available
            .iter()
            .filter(|p| p.provides().is_some_and(|v| v.contains(dep.name.as_str())))
            .map(|p| p.name())
            .collect();
        let mut out = Vec::new();
        for name in names {
            let mut list = Vec::new();
            for c in self.get(name) {
                if provided(dep, c.provides()?) {
                    list.push(c);
                }
            }
            if !list.is_empty() {
                out.push(list);
            }
        }
        Ok(out)
    }

    /// The packages that provide `name` (any version), each as its newest such candidate:
    /// what apt lists for a virtual package.
    fn providers_of(&self, name: &str) -> Result<Vec<&Cand<'a>>, ResolveError> {
        let dep = Dependency { name: name.to_string(), arch: None, constraint: None };
        Ok(self.providers(&dep)?.into_iter().map(|list| list[0]).collect())
    }

    /// The newest candidate whose Provides meets `dep` (the last of equal versions, in name
    /// order).
    fn newest_provider(&self, dep: &Dependency) -> Result<Option<&Cand<'a>>, ResolveError> {
        let mut best: Option<&Cand> = None;
        for c in self.providers(dep)?.into_iter().flatten() {
            if best.is_none_or(|b| c.version >= b.version) {
                best = Some(c);
            }
        }
        Ok(best)
    }
}

pub fn resolve(
    req: &Request,
    installed: &[Installed],
    available: &[IndexedPackage],
) -> Result<Resolution, ResolveError> {
    let cands = Candidates::new(available, req.arch);
    let mut solver = Solver::new(req, installed, available, &cands)?;
    for item in req.install {
        solver.request(item)?;
    }
    for name in &solver.replaceable {
        if !solver.requested.contains(&name.as_str()) {
            solver.gone.insert(name.clone());
        }
    }
    // Dependencies, then conflicts, until nothing changes.
    for _round in 0..64 {
        solver.depends()?;
        let changed = solver.conflicts()?;
        if !changed && solver.queue.is_empty() {
            break;
        }
    }
    Ok(solver.resolution())
}

/// The repositories read, for errors.
fn repos_of(available: &[IndexedPackage]) -> String {
    let mut r: Vec<&str> = available.iter().map(|p| p.repo()).collect();
    r.dedup();
    r.join(", ")
}

/// What [`resolve`] knows while it goes: the candidates chosen, the installed packages that go,
/// the candidates still to look at.
struct Solver<'s, 'a> {
    req: &'s Request<'s>,
    installed: &'a [Installed],
    available: &'a [IndexedPackage],
    cands: &'s Candidates<'a>,
    inst: BTreeMap<&'a str, &'a Installed>,
    inst_provides: BTreeMap<&'a str, Vec<Vec<Dependency>>>,
    chosen: BTreeMap<&'a str, &'s Cand<'a>>,
    gone: BTreeSet<String>,
    res: Resolution,
    /// Installed packages the remove list names, by their own name or by what they provide
    /// (a `librdmacm1t64` for `librdmacm1`): replaced by the candidates, or removed.
    replaceable: BTreeSet<String>,
    queue: Vec<&'s Cand<'a>>,
    /// The names asked for, after a virtual name is taken as its one provider.
    requested: Vec<&'s str>,
}

impl<'s, 'a: 's> Solver<'s, 'a> {
    fn new(
        req: &'s Request<'s>,
        installed: &'a [Installed],
        available: &'a [IndexedPackage],
        cands: &'s Candidates<'a>,
    ) -> Result<Self, ResolveError> {
        let inst: BTreeMap<&str, &Installed> =
            installed.iter().map(|i| (i.name.as_str(), i)).collect();
        let mut inst_provides: BTreeMap<&str, Vec<Vec<Dependency>>> = BTreeMap::new();
        for i in installed {
            inst_provides.insert(i.name.as_str(), relations(&i.paragraph, "Provides", &i.name)?);
        }
        let replaceable: BTreeSet<String> = installed
            .iter()
            .filter(|i| {
                req.replace.contains(&i.name)
                    || inst_provides[i.name.as_str()]
                        .iter()
                        .flatten()
                        .any(|p| req.replace.contains(&p.name))
            })
            .map(|i| i.name.clone())
            .collect();
        Ok(Solver {
            req,
            installed,
            available,
            cands,
            inst,
            inst_provides,
            chosen: BTreeMap::new(),
            gone: BTreeSet::new(),
            res: Resolution::default(),
            replaceable,
            queue: Vec::new(),
            requested: Vec::new(),
        })
    }

    /// Is `dep` met by what will be installed, or by what stays installed?
    fn satisfied(&self, dep: &Dependency) -> Result<bool, ResolveError> {
        for c in self.chosen.values() {
            if c.offers(dep)? {
                return Ok(true);
            }
        }
        Ok(self
            .installed
            .iter()
            .filter(|i| !self.gone.contains(&i.name))
            .any(|i| offered(dep, &i.name, &i.version, &self.inst_provides[i.name.as_str()])))
    }

    /// The newest candidate that meets `dep`: the package itself, else a provider.
    fn find(&self, dep: &Dependency) -> Result<Option<&'s Cand<'a>>, ResolveError> {
        let cands: &'s Candidates<'a> = self.cands;
        if let Some(c) = cands.get(&dep.name).iter().find(|c| c.is(dep)) {
            return Ok(Some(c));
        }
        cands.newest_provider(dep)
    }

    /// One name of the request (`name` or `name=version`): kept where apt keeps what is
    /// installed, else its candidate queued.
    fn request(&mut self, item: &'s str) -> Result<(), ResolveError> {
        let (req, cands): (&'s Request<'s>, &'s Candidates<'a>) = (self.req, self.cands);
        let available = self.available;
        let (asked, pin) = match item.split_once('=') {
            Some((n, v)) => (
                n,
                Some(v.parse::<Version>().map_err(|e| ResolveError::Malformed {
                    package: n.into(),
                    field: "requested version",
                    reason: e.into(),
                })?),
            ),
            None => (item, None),
        };
        let unknown = || ResolveError::UnknownPackage {
            name: asked.into(),
            repos: repos_of(available),
            arch: req.arch.into(),
        };
        let mut name = asked;
        if cands.get(asked).is_empty() {
            // Installed, in no repository and not to be replaced: apt leaves it as it is.
            if let Some(i) =
                self.inst.get(asked).filter(|_| !self.replaceable.contains(asked) && pin.is_none())
            {
                self.res.kept.push((*i).clone());
                return Ok(());
            }
            // A name only Provides offer (the 64-bit time_t renames: `librdmacm1` is
            // `librdmacm1t64` in Debian 13 and Ubuntu 24.04): apt installs its one provider,
            // and asks the user to choose between several.
            let providers = cands.providers_of(asked)?;
            match providers.as_slice() {
                [] => return Err(unknown()),
                [one] if pin.is_none() => {
                    self.res.selected.push(Selected {
                        requested: asked.to_string(),
                        package: one.name.to_string(),
                    });
                    // The remove list's name stands for its provider too (an OFED build of it).
                    if req.replace.iter().any(|r| r == asked) && self.inst.contains_key(one.name) {
                        self.replaceable.insert(one.name.to_string());
                    }
                    name = one.name;
                }
                many => {
                    return Err(ResolveError::Virtual {
                        name: asked.into(),
                        providers: many
                            .iter()
                            .map(|c| format!("{} {}", c.name, c.version))
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
                }
            }
        }
        self.requested.push(name);
        let chosen_cand = match &pin {
            None => cands.get(name).first(),
            Some(v) => {
                let found = cands.get(name).iter().find(|c| &c.version == v);
                Some(found.ok_or_else(|| ResolveError::UnknownVersion {
                    name: name.into(),
                    version: v.to_string(),
                    repos: repos_of(available),
                    arch: req.arch.into(),
                })?)
            }
        };
        if let Some(i) = self.inst.get(name) {
            let keep = match (&pin, chosen_cand) {
                (Some(v), _) => &i.version == v,
                (None, c) => {
                    let replace = self.replaceable.contains(name)
                        && c.is_some_and(|c| c.version != i.version);
                    let upgrade = c.is_some_and(|c| c.version > i.version) && !replace;
                    !replace && !upgrade
                }
            };
            if keep {
                self.res.kept.push((*i).clone());
                return Ok(());
            }
        }
        self.queue.push(chosen_cand.ok_or_else(unknown)?);
        Ok(())
    }

    /// The queued candidates chosen, each one's Pre-Depends and Depends met by what is
    /// chosen or stays installed, else by the first alternative a candidate meets.
    fn depends(&mut self) -> Result<(), ResolveError> {
        while let Some(c) = self.queue.pop() {
            if self.chosen.contains_key(c.name) {
                continue;
            }
            if self.inst.contains_key(c.name) {
                self.gone.insert(c.name.to_string());
            }
            self.chosen.insert(c.name, c);
            let p = c.pkg.paragraph()?;
            for group in relations(p, "Pre-Depends", c.name)?
                .into_iter()
                .chain(relations(p, "Depends", c.name)?)
            {
                let mut met = false;
                'alternatives: for d in &group {
                    if self.satisfied(d)? {
                        met = true;
                        break;
                    }
                    for q in &self.queue {
                        if q.offers(d)? {
                            met = true;
                            break 'alternatives;
                        }
                    }
                }
                if met {
                    continue;
                }
                let mut pick = None;
                for d in &group {
                    if let Some(c) = self.find(d)? {
                        pick = Some(c);
                        break;
                    }
                }
                let pick = pick.ok_or_else(|| ResolveError::Unsatisfiable {
                    package: c.name.to_string(),
                    version: c.version.to_string(),
                    dependency: group.iter().map(dep_text).collect::<Vec<_>>().join(" | "),
                })?;
                self.queue.push(pick);
            }
        }
        Ok(())
    }

    /// Breaks and Conflicts, of what is chosen against everything that will be there, and of
    /// what stays installed against what is chosen: an installed package hit is upgraded to a
    /// candidate the relation misses (or removed, when the remove list names it). Whether
    /// anything changed.
    fn conflicts(&mut self) -> Result<bool, ResolveError> {
        let (installed, cands): (&'a [Installed], &'s Candidates<'a>) =
            (self.installed, self.cands);
        let mut changed = false;
        let chosen_now: Vec<&'s Cand<'a>> = self.chosen.values().copied().collect();
        for c in &chosen_now {
            for (kind, field) in [("breaks", "Breaks"), ("conflicts with", "Conflicts")] {
                for dep in relations(c.pkg.paragraph()?, field, c.name)?.into_iter().flatten() {
                    if let Some(other) = chosen_now.iter().find(|o| o.name != c.name && o.is(&dep))
                    {
                        return Err(ResolveError::Conflict {
                            package: c.name.to_string(),
                            version: c.version.to_string(),
                            kind,
                            other: other.name.to_string(),
                            other_version: other.version.to_string(),
                        });
                    }
                    let staying: Vec<&Installed> = installed
                        .iter()
                        .filter(|i| {
                            !self.gone.contains(&i.name)
                                && !self.chosen.contains_key(i.name.as_str())
                        })
                        .collect();
                    for i in staying {
                        if !matches(&dep, &Offer { name: &i.name, version: Some(&i.version) }) {
                            continue;
                        }
                        // Upgrade the installed package to a candidate the relation does not hit.
                        let fix = cands
                            .get(&i.name)
                            .iter()
                            .find(|n| n.version > i.version && !n.is(&dep));
                        match fix {
                            Some(n) => {
                                self.queue.push(n);
                                changed = true;
                            }
                            None if self.replaceable.contains(&i.name) => {
                                self.gone.insert(i.name.clone());
                                changed = true;
                            }
                            None => {
                                return Err(ResolveError::Conflict {
                                    package: c.name.to_string(),
                                    version: c.version.to_string(),
                                    kind,
                                    other: i.name.clone(),
                                    other_version: i.version.to_string(),
                                })
                            }
                        }
                    }
                }
            }
        }
        // Breaks/Conflicts of what stays installed, against what we install.
        let staying: Vec<&Installed> = installed
            .iter()
            .filter(|i| !self.gone.contains(&i.name) && !self.chosen.contains_key(i.name.as_str()))
            .collect();
        for i in staying {
            for (kind, field) in [("breaks", "Breaks"), ("conflicts with", "Conflicts")] {
                for dep in relations(&i.paragraph, field, &i.name)?.into_iter().flatten() {
                    let Some(c) = chosen_now.iter().find(|c| c.is(&dep)) else { continue };
                    match cands.get(&i.name).iter().find(|n| n.version > i.version) {
                        Some(n) => {
                            self.queue.push(n);
                            changed = true;
                        }
                        None => {
                            return Err(ResolveError::Conflict {
                                package: i.name.clone(),
                                version: i.version.to_string(),
                                kind,
                                other: c.name.to_string(),
                                other_version: c.version.to_string(),
                            })
                        }
                    }
                }
            }
        }
        Ok(changed)
    }

    /// The plan: each chosen candidate with what it does to the image, and what goes.
    fn resolution(self) -> Resolution {
        let mut res = self.res;
        for c in self.chosen.values() {
            let action = match self.inst.get(c.name) {
                None => Action::Install,
                Some(i) if self.replaceable.contains(c.name) && c.version != i.version => {
                    Action::Replace { from: vec![i.version.to_string()] }
                }
                Some(i) if c.version < i.version => {
                    Action::Downgrade { from: i.version.to_string() }
                }
                Some(i) => Action::Upgrade { from: i.version.to_string() },
            };
            res.install.push(Planned {
                pkg: c.pkg.clone(),
                name: c.name.to_string(),
                arch: c.arch.to_string(),
                version: c.version.clone(),
                action,
                hold: false,
            });
        }
        res.remove =
            self.installed.iter().filter(|i| self.gone.contains(&i.name)).cloned().collect();
        res
    }
}

/// `name version (origin)`: how an error about a package's payload names it.
pub(crate) fn package_label(planned: &Planned) -> String {
    format!("{} {} ({})", planned.name, planned.version, planned.pkg.origin())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use erdma_deb::deb822;

    /// Index stanzas (`Package`, `Version`, `Architecture`, relations) as a repository's.
    pub(in crate::packages::apt) fn available_from(text: &str) -> Vec<IndexedPackage> {
        let stanzas: Vec<String> = text
            .split("\n\n")
            .map(|s| {
                format!(
                    "{}\nFilename: pool/x.deb\nSHA256: {}\nSize: 1\n",
                    s.trim_end(),
                    "0".repeat(64)
                )
            })
            .collect();
        IndexedPackage::read_index(
            stanzas.join("\n"),
            "http://repo.invalid/Packages",
            "http://repo.invalid",
            "test",
            "http://repo.invalid bookworm",
        )
        .unwrap()
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
        available_from(REPO)
    }

    #[test]
    fn newest_candidates_and_dependencies() {
        let base = installed(
            "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9\n",
        );
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
        assert_eq!(
            names(&r),
            ["ibverbs-providers 44.0-2 Upgrade { from: \"39.0-1\" }", "libibverbs1 44.0-2 Install"]
        );
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
        let req = Request {
            install: &["libibverbs1".into(), "libnl-3-200".into()],
            replace: &replace,
            arch: "amd64",
        };
        let r = resolve(&req, &base, &available()).unwrap();
        assert_eq!(names(&r), ["libibverbs1 44.0-2 Replace { from: [\"2307mlnx47-1.2310036\"] }"]);
        assert_eq!(r.kept.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["libnl-3-200"]);
        // Without the replace list, apt keeps the newer-looking OFED build.
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        assert!(resolve(&req, &base, &available()).unwrap().install.is_empty());
    }

    #[test]
    fn only_what_the_resolution_touches_is_parsed() {
        // A malformed relation in a stanza nothing needs does not stop the resolution.
        let text = format!("{REPO}\n\nPackage: broken\nVersion: 1\nArchitecture: amd64\nProvides: ,,\nDepends: ((\n");
        let available = available_from(&text);
        let base = installed(
            "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9\n",
        );
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        let r = resolve(&req, &base, &available).unwrap();
        assert_eq!(names(&r), ["libibverbs1 44.0-2 Install", "libnl-3-200 3.7.0-0.2+b1 Install"]);
        let parsed: Vec<&str> =
            available.iter().filter(|p| p.is_parsed()).map(|p| p.name()).collect();
        assert_eq!(parsed, ["libibverbs1", "libnl-3-200"], "the chosen stanzas only");
        // One that is needed is reported.
        let req = Request { install: &["wants-virtual".into()], replace: &[], arch: "amd64" };
        let text = text.replace("Provides: ,,", "Provides: some-virtual (= 2),,");
        // The parser's own error is its cause.
        let e = resolve(&req, &[], &available_from(&text)).unwrap_err();
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        assert!(e.to_string() == "malformed Provides of broken" && cause.is_some(), "{e}");
        let req = Request { install: &["broken".into()], replace: &[], arch: "amd64" };
        let e = resolve(&req, &[], &available_from(&text)).unwrap_err();
        let cause = std::error::Error::source(&e).map(ToString::to_string);
        assert!(e.to_string() == "malformed Depends of broken" && cause.is_some(), "{e}");
    }

    #[test]
    fn providers_of_equal_version_go_by_name_order() {
        let text = "Package: wants\nVersion: 1\nArchitecture: all\nDepends: virt\n\n\
                    Package: zz-provider\nVersion: 1\nArchitecture: amd64\nProvides: virt\n\n\
                    Package: aa-provider\nVersion: 1\nArchitecture: amd64\nProvides: virtual-other, virt\n\n\
                    Package: old-provider\nVersion: 0.5\nArchitecture: amd64\nProvides: virt\n\n\
                    Package: arm-provider\nVersion: 9\nArchitecture: arm64\nProvides: virt";
        let req = Request { install: &["wants".into()], replace: &[], arch: "amd64" };
        let r = resolve(&req, &[], &available_from(text)).unwrap();
        // apt's choice here is ours since the beginning: the newest, the last name among equals.
        assert_eq!(names(&r), ["wants 1 Install", "zz-provider 1 Install"]);
    }

    #[test]
    fn versioned_provides_and_errors() {
        let req = Request { install: &["wants-virtual".into()], replace: &[], arch: "amd64" };
        let r = resolve(&req, &[], &available()).unwrap();
        assert_eq!(names(&r), ["provider 5 Install", "wants-virtual 1 Install"]);
        let req = Request { install: &["arm-only".into()], replace: &[], arch: "amd64" };
        assert!(matches!(
            resolve(&req, &[], &available()),
            Err(ResolveError::UnknownPackage { .. })
        ));
        let req = Request { install: &["libibverbs1".into()], replace: &[], arch: "amd64" };
        let e = resolve(&req, &[], &available()).unwrap_err().to_string();
        assert!(e.contains("cannot satisfy `libc6 (>= 2.34)` of libibverbs1 44.0-2"), "{e}");
    }

    #[test]
    fn pinned_versions_are_exact() {
        let nccl = "Package: libnccl2\nVersion: 2.27.7-1+cuda13.0\nArchitecture: amd64\n\n\
                    Package: libnccl2\nVersion: 2.21.5-1+cuda12.4\nArchitecture: amd64\n\n\
                    Package: libnccl2\nVersion: 2.21.5-1+cuda11.8\nArchitecture: amd64\n\n\
                    Package: libnccl-dev\nVersion: 2.21.5-1+cuda12.4\nArchitecture: amd64\nDepends: libnccl2 (= 2.21.5-1+cuda12.4)\n\n\
                    Package: libnccl-dev\nVersion: 2.27.7-1+cuda13.0\nArchitecture: amd64\nDepends: libnccl2 (= 2.27.7-1+cuda13.0)";
        let avail = available_from(nccl);
        let req = Request {
            install: &["libnccl2=2.21.5-1+cuda12.4".into(), "libnccl-dev=2.21.5-1+cuda12.4".into()],
            replace: &[],
            arch: "amd64",
        };
        let r = resolve(&req, &[], &avail).unwrap();
        assert_eq!(
            names(&r),
            ["libnccl-dev 2.21.5-1+cuda12.4 Install", "libnccl2 2.21.5-1+cuda12.4 Install"]
        );
        // The base's build: kept when it is the pinned one, else swapped (even for an older one).
        let base = installed("Package: libnccl2\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.21.5-1+cuda12.4\n");
        let only = ["libnccl2=2.21.5-1+cuda12.4".to_string()];
        let r = resolve(&Request { install: &only, replace: &[], arch: "amd64" }, &base, &avail)
            .unwrap();
        assert!(r.install.is_empty() && r.kept.len() == 1);
        let newer = installed("Package: libnccl2\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.27.7-1+cuda13.0\n");
        let r = resolve(&Request { install: &only, replace: &[], arch: "amd64" }, &newer, &avail)
            .unwrap();
        assert_eq!(
            names(&r),
            ["libnccl2 2.21.5-1+cuda12.4 Downgrade { from: \"2.27.7-1+cuda13.0\" }"]
        );
        let e = resolve(
            &Request {
                install: &["libnccl2=2.19.3-1+cuda12.3".into()],
                replace: &[],
                arch: "amd64",
            },
            &[],
            &avail,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("no repository (")
                && e.contains("libnccl2 version 2.19.3-1+cuda12.3 for amd64"),
            "{e}"
        );
    }
    /// Debian 13's rdma-core 56.1-1 relations, as its Packages index has them (trixie main
    /// amd64; testdata/facts/README.md): `librdmacm1` is only a name `librdmacm1t64` provides.
    const TRIXIE: &str = "Package: libibverbs1\nVersion: 56.1-1\nArchitecture: amd64\nMulti-Arch: same\nDepends: adduser, libc6 (>= 2.38), libnl-3-200 (>= 3.2.7), libnl-route-3-200 (>= 3.2.7)\nBreaks: ibverbs-providers (<< 34~)\n\n\
        Package: ibverbs-providers\nVersion: 56.1-1\nArchitecture: amd64\nMulti-Arch: same\nReplaces: libipathverbs1 (<< 15), libmlx4-1 (<< 15), libmlx5-1 (<< 15), libmthca1 (<< 15)\nProvides: libefa1, libipathverbs1, libmana1, libmlx4-1, libmlx5-1, libmthca1\nDepends: libc6 (>= 2.38), libibverbs1 (>= 53)\nBreaks: libipathverbs1 (<< 15), libmlx4-1 (<< 15), libmlx5-1 (<< 15), libmthca1 (<< 15)\n\n\
        Package: librdmacm1t64\nVersion: 56.1-1\nArchitecture: amd64\nMulti-Arch: same\nReplaces: librdmacm1\nProvides: librdmacm1 (= 56.1-1)\nDepends: libc6 (>= 2.38), libibverbs1 (>= 31), libnl-3-200 (>= 3.2.7)\nBreaks: librdmacm1 (<< 56.1-1)\n\n\
        Package: rdmacm-utils\nVersion: 56.1-1\nArchitecture: amd64\nDepends: libc6 (>= 2.38), libibverbs1 (>= 1.1.6), librdmacm1t64 (>= 23)\n\n\
        Package: libnl-3-200\nVersion: 3.7.0-2\nArchitecture: amd64\nMulti-Arch: same\nDepends: libc6 (>= 2.38)\n\n\
        Package: libnl-route-3-200\nVersion: 3.7.0-2\nArchitecture: amd64\nMulti-Arch: same\nDepends: libnl-3-200 (= 3.7.0-2), libc6 (>= 2.38)\n\n\
        Package: adduser\nVersion: 3.152\nArchitecture: all\nMulti-Arch: foreign\nDepends: passwd (>= 1:4.17.2-5)\n\n\
        Package: libc6\nVersion: 2.41-12+deb13u5\nArchitecture: amd64\n";

    const TRIXIE_LIBC: &str = "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.41-12+deb13u5\n\n\
        Package: adduser\nStatus: install ok installed\nArchitecture: all\nVersion: 3.152\n\n\
        Package: libnl-3-200\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.7.0-2\n\n\
        Package: libnl-route-3-200\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.7.0-2\n";

    const ERDMA: [&str; 4] = ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"];

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_virtual_name_installs_its_one_provider() {
        let avail = available_from(TRIXIE);
        let base = installed(TRIXIE_LIBC);
        let want = strings(&["libibverbs1", "librdmacm1"]);
        let r = resolve(&Request { install: &want, replace: &[], arch: "amd64" }, &base, &avail)
            .unwrap();
        assert_eq!(names(&r), ["libibverbs1 56.1-1 Install", "librdmacm1t64 56.1-1 Install"]);
        assert_eq!(
            r.selected,
            [Selected { requested: "librdmacm1".into(), package: "librdmacm1t64".into() }]
        );
        // Already there: kept, as apt says "librdmacm1t64 is already the newest version".
        let base = installed(&format!("{TRIXIE_LIBC}\nPackage: librdmacm1t64\nStatus: install ok installed\nArchitecture: amd64\nVersion: 56.1-1\nProvides: librdmacm1 (= 56.1-1)\n"));
        let r = resolve(
            &Request { install: &strings(&["librdmacm1"]), replace: &[], arch: "amd64" },
            &base,
            &avail,
        )
        .unwrap();
        assert!(r.install.is_empty(), "{:?}", names(&r));
        assert_eq!(r.kept.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["librdmacm1t64"]);
    }

    #[test]
    fn several_providers_are_an_error_naming_them() {
        let text = format!("{TRIXIE}\nPackage: librdmacm1-ofed\nVersion: 2404mlnx51-1.2404066\nArchitecture: amd64\nProvides: librdmacm1\n");
        let e = resolve(
            &Request { install: &strings(&["librdmacm1"]), replace: &[], arch: "amd64" },
            &installed(TRIXIE_LIBC),
            &available_from(&text),
        )
        .unwrap_err();
        assert!(matches!(e, ResolveError::Virtual { .. }), "{e}");
        let e = e.to_string();
        assert_eq!(e, "package `librdmacm1` is a virtual package provided by librdmacm1-ofed 2404mlnx51-1.2404066, librdmacm1t64 56.1-1; name the one to install");
        // A name nothing offers stays unknown; a pinned virtual name is refused.
        let e = resolve(
            &Request { install: &strings(&["nothing-at-all"]), replace: &[], arch: "amd64" },
            &[],
            &available_from(TRIXIE),
        )
        .unwrap_err();
        assert!(matches!(e, ResolveError::UnknownPackage { .. }), "{e}");
        let e = resolve(
            &Request { install: &strings(&["librdmacm1=56.1-1"]), replace: &[], arch: "amd64" },
            &[],
            &available_from(TRIXIE),
        )
        .unwrap_err();
        assert!(matches!(e, ResolveError::Virtual { .. }), "{e}");
    }

    #[test]
    fn the_remove_list_reaches_t64_names_and_ofed_builds_of_either() {
        let avail = available_from(TRIXIE);
        let remove = strings(&ERDMA);
        let want = strings(&["libibverbs1", "ibverbs-providers", "librdmacm1"]);
        let ofed = |name: &str, provides: &str| {
            installed(&format!(
                "{TRIXIE_LIBC}\nPackage: libibverbs1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2404mlnx51-1.2404066\n\n\
                 Package: ibverbs-providers\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2404mlnx51-1.2404066\n\n\
                 Package: {name}\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2404mlnx51-1.2404066\n{provides}"
            ))
        };
        // An OFED build under the old name: removed, its successor installed.
        let r = resolve(
            &Request { install: &want, replace: &remove, arch: "amd64" },
            &ofed("librdmacm1", ""),
            &avail,
        )
        .unwrap();
        assert_eq!(
            names(&r),
            [
                "ibverbs-providers 56.1-1 Replace { from: [\"2404mlnx51-1.2404066\"] }",
                "libibverbs1 56.1-1 Replace { from: [\"2404mlnx51-1.2404066\"] }",
                "librdmacm1t64 56.1-1 Install"
            ]
        );
        let gone: Vec<&str> = r.remove.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(gone, ["libibverbs1", "ibverbs-providers", "librdmacm1"]);
        // An OFED build under the t64 name, with or without the Provides: replaced in place.
        for provides in ["", "Provides: librdmacm1 (= 2404mlnx51-1.2404066)\n"] {
            let r = resolve(
                &Request { install: &want, replace: &remove, arch: "amd64" },
                &ofed("librdmacm1t64", provides),
                &avail,
            )
            .unwrap();
            assert!(
                names(&r).contains(
                    &"librdmacm1t64 56.1-1 Replace { from: [\"2404mlnx51-1.2404066\"] }"
                        .to_string()
                ),
                "{provides}: {:?}",
                names(&r)
            );
            assert_eq!(r.remove.len(), 3, "{provides}");
        }
        // Nothing requested, only the remove list: the t64 build that provides a listed name goes.
        let r = resolve(
            &Request { install: &[], replace: &remove, arch: "amd64" },
            &ofed("librdmacm1t64", "Provides: librdmacm1\n"),
            &avail,
        )
        .unwrap();
        assert_eq!(
            r.remove.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
            ["libibverbs1", "ibverbs-providers", "librdmacm1t64"]
        );
    }
}
