//! The order the planned packages are configured in: which maintainer scripts run before which.
//!
//! `apt-get install` does not configure the packages it unpacks in an order of its own. It
//! configures at once only what it must (apt-pkg/packagemanager.cc, `SmartUnPack` and
//! `SmartConfigure`):
//! - a package another one `Pre-Depends` on, before that one is unpacked;
//! - a package flagged "immediate" (`CreateOrderList`, `ImmediateAdd`): an `Essential: yes`
//!   package, or `apt`, and everything they depend on, by name, with each such package's
//!   installed and new version;
//! - with each of those, first the unpacked packages it depends on.
//!
//! Everything else it leaves to one `dpkg --configure --pending` at the end
//! (apt-pkg/deb/dpkgpm.cc: `PackageManager::Configure` is `smart`, `DPkg::ConfigurePending`
//! true). dpkg queues those packages as it walks its package hash table (src/main/packages.c
//! `enqueue_pending`; lib/dpkg/pkg-hash.c: 65521 bins by the FNV-1a hash of the lower-cased
//! name, each bin's packages in the order the status file first named them). It then takes
//! them from the front of the queue: one whose dependencies are all configured, or satisfied
//! by what was installed before, is configured; one waiting for a package still to be
//! configured goes to the back (`dependencies_ok`, `deppossi_ok_found`).
//!
//! Held against `apt-get install` in Docker by `builder/tests/cases/releases.rs`
//! (`..._group_creating_packages_...`). Not reproduced: where dpkg breaks a dependency cycle
//! among the packages (`findbreakcycle`: here, the package at the front of the queue goes
//! first), and the order apt chooses among several packages it configures at once that do not
//! depend on each other (here, the plan's).
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::dpkg::{fnv_hash, DPKG_FIELDS};
use super::resolve::{offered, parse_field, relations, Installed, Planned, ResolveError};
use erdma_deb::deb822::Paragraph;
use erdma_deb::version::{parse_relations, Dependency};

/// The bins of dpkg's package hash table (lib/dpkg/pkg-hash.c `BINS`).
const PACKAGE_BINS: u32 = 65521;

/// The relation fields dpkg reads from a status stanza, naming packages as it goes: in its
/// field table, `Replaces` to `Enhances`.
fn relation_fields() -> &'static [&'static str] {
    let at = |f: &str| DPKG_FIELDS.iter().position(|x| *x == f).expect("a field of dpkg's table");
    &DPKG_FIELDS[at("Replaces")..=at("Enhances")]
}

/// One planned package's relations.
struct Node {
    provides: Vec<Vec<Dependency>>,
    pre_depends: Vec<Vec<Dependency>>,
    depends: Vec<Vec<Dependency>>,
}

/// The order the planned packages are configured in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Configure {
    /// Indices into the plan, in the order their `postinst`s run.
    pub order: Vec<usize>,
    /// How many of `order`, from its start, apt configures itself (`dpkg --configure PACKAGE`,
    /// each once it and what it depends on are unpacked); `dpkg --configure --pending`
    /// configures the rest.
    pub by_apt: usize,
}

/// The order apt and dpkg configure the planned packages in; `status` is the base's dpkg
/// status (what was installed before, and the names the status file holds).
pub(super) fn configure_order(
    plan: &[Planned],
    status: &[Paragraph],
) -> Result<Configure, ResolveError> {
    let nodes: Vec<Node> = plan
        .iter()
        .map(|p| {
            let par = p.pkg.paragraph()?;
            Ok(Node {
                provides: parse_field(p.pkg.provides(), "Provides", &p.name)?,
                pre_depends: relations(par, "Pre-Depends", &p.name)?,
                depends: relations(par, "Depends", &p.name)?,
            })
        })
        .collect::<Result<_, ResolveError>>()?;
    let planned_names: BTreeSet<&str> = plan.iter().map(|p| p.name.as_str()).collect();
    // What stays installed, with what it provides: it satisfies a dependency from the start.
    let installed = Installed::from_status(status);
    let kept: Vec<(&Installed, Vec<Vec<Dependency>>)> = installed
        .iter()
        .filter(|i| !planned_names.contains(i.name.as_str()))
        .map(|i| {
            let provides = parse_field(i.paragraph.get("Provides"), "Provides", &i.name)?;
            Ok((i, provides))
        })
        .collect::<Result<_, ResolveError>>()?;
    let by_base = |group: &[Dependency]| {
        group.iter().any(|d| kept.iter().any(|(k, prov)| offered(d, &k.name, &k.version, prov)))
    };
    // Each package's groups that wait on planned packages: the planned packages that offer
    // any alternative of the group. A group the base satisfies, or the package itself, waits
    // on nothing.
    let providers = |group: &[Dependency]| -> Vec<usize> {
        (0..plan.len())
            .filter(|&j| {
                group
                    .iter()
                    .any(|d| offered(d, &plan[j].name, &plan[j].version, &nodes[j].provides))
            })
            .collect()
    };
    let waits: Vec<Vec<Vec<usize>>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            n.pre_depends
                .iter()
                .chain(&n.depends)
                .filter(|g| !by_base(g.as_slice()))
                .map(|g| providers(g.as_slice()))
                .filter(|p| !p.is_empty() && !p.contains(&i))
                .collect()
        })
        .collect();

    let explicit = configured_by_apt(plan, &nodes, &installed, &waits, &by_base, &providers)?;
    let mut configured = vec![false; plan.len()];
    let mut order = Vec::with_capacity(plan.len());
    // apt's own configures, each after what it depends on (a cycle: in plan order).
    let mut left: Vec<usize> = explicit.clone();
    while !left.is_empty() {
        let pos = left
            .iter()
            .position(|&i| waits[i].iter().all(|g| g.iter().any(|&j| configured[j])))
            .unwrap_or(0);
        let i = left.remove(pos);
        configured[i] = true;
        order.push(i);
    }

    let by_apt = order.len();
    // `dpkg --configure --pending` over the rest.
    let rest: Vec<usize> = (0..plan.len()).filter(|i| !configured[*i]).collect();
    let mut queue: VecDeque<usize> = pending_queue(plan, &rest, status)?.into();
    let mut since_progress = 0;
    while let Some(i) = queue.pop_front() {
        let ready = waits[i].iter().all(|g| g.iter().any(|&j| configured[j]));
        if ready || since_progress > queue.len() {
            configured[i] = true;
            order.push(i);
            since_progress = 0;
        } else {
            queue.push_back(i);
            since_progress += 1;
        }
    }
    Ok(Configure { order, by_apt })
}

/// The planned packages apt configures itself, before the final `dpkg --configure --pending`,
/// in the plan's order.
fn configured_by_apt(
    plan: &[Planned],
    nodes: &[Node],
    installed: &[Installed],
    waits: &[Vec<Vec<usize>>],
    by_base: &dyn Fn(&[Dependency]) -> bool,
    providers: &dyn Fn(&[Dependency]) -> Vec<usize>,
) -> Result<Vec<usize>, ResolveError> {
    let mut explicit: BTreeSet<usize> = BTreeSet::new();
    // What a planned package pre-depends on: the first alternative a planned package offers.
    for n in nodes {
        for g in n.pre_depends.iter().filter(|g| !by_base(g.as_slice())) {
            if let Some(j) =
                g.iter().find_map(|d| providers(std::slice::from_ref(d)).first().copied())
            {
                explicit.insert(j);
            }
        }
    }
    // The immediate ones.
    let immediate = immediate_names(plan, installed)?;
    explicit.extend((0..plan.len()).filter(|&i| immediate.contains(&plan[i].name)));
    // With each, what it waits on, first.
    let mut todo: Vec<usize> = explicit.iter().copied().collect();
    while let Some(i) = todo.pop() {
        for g in &waits[i] {
            if !g.iter().any(|j| explicit.contains(j)) && explicit.insert(g[0]) {
                todo.push(g[0]);
            }
        }
    }
    Ok(explicit.into_iter().collect())
}

/// The names apt flags for immediate configuration: the essential packages (and `apt`, which
/// apt counts as one) and, by name, everything they depend on (`Depends`, `Pre-Depends`, every
/// alternative), with both the installed and the new version of each.
fn immediate_names(
    plan: &[Planned],
    installed: &[Installed],
) -> Result<BTreeSet<String>, ResolveError> {
    // Each name's versions: the installed one and the planned one.
    let mut versions: BTreeMap<&str, Vec<&Paragraph>> = BTreeMap::new();
    for i in installed {
        versions.entry(i.name.as_str()).or_default().push(&i.paragraph);
    }
    for p in plan {
        versions.entry(p.name.as_str()).or_default().push(p.pkg.paragraph()?);
    }
    let essential = |pars: &[&Paragraph]| {
        pars.iter().any(|p| p.get("Essential").is_some_and(|e| e.eq_ignore_ascii_case("yes")))
    };
    let mut flagged: BTreeSet<&str> = versions
        .iter()
        .filter(|(n, pars)| **n == "apt" || essential(pars))
        .map(|(n, _)| *n)
        .collect();
    let mut todo: Vec<&str> = flagged.iter().copied().collect();
    while let Some(name) = todo.pop() {
        for par in versions.get(name).into_iter().flatten() {
            for field in ["Depends", "Pre-Depends"] {
                let Some(Ok(groups)) = par.get(field).map(parse_relations) else { continue };
                for d in groups.iter().flatten() {
                    if let Some((n, _)) = versions.get_key_value(d.name.as_str()) {
                        if flagged.insert(n) {
                            todo.push(n);
                        }
                    }
                }
            }
        }
    }
    Ok(flagged.into_iter().map(str::to_string).collect())
}

/// `rest` in the order `dpkg --configure --pending` queues them: by their bin of dpkg's package
/// hash table, and within a bin by where the status file (as the unpacking dpkg wrote it,
/// sorted by name) first names them.
fn pending_queue(
    plan: &[Planned],
    rest: &[usize],
    status: &[Paragraph],
) -> Result<Vec<usize>, ResolveError> {
    let bin = |name: &str| fnv_hash(&name.to_ascii_lowercase()) % PACKAGE_BINS;
    let mut keyed: Vec<(u32, usize, usize)> =
        rest.iter().map(|&i| (bin(&plan[i].name), 0, i)).collect();
    let bins: BTreeSet<u32> = keyed.iter().map(|k| k.0).collect();
    if bins.len() < keyed.len() {
        let first = first_mentions(plan, status)?;
        for k in &mut keyed {
            k.1 = first.get(&plan[k.2].name.to_ascii_lowercase()).copied().unwrap_or(usize::MAX);
        }
    }
    keyed.sort();
    Ok(keyed.into_iter().map(|k| k.2).collect())
}

/// Where dpkg, reading the status file, first meets each name (lower-cased): a stanza's
/// `Package`, then the names in its relation fields, stanza by stanza in name order. That is
/// the order of the package sets within a bin of its hash table.
fn first_mentions(
    plan: &[Planned],
    status: &[Paragraph],
) -> Result<BTreeMap<String, usize>, ResolveError> {
    let planned: BTreeSet<&str> = plan.iter().map(|p| p.name.as_str()).collect();
    let mut stanzas: Vec<&Paragraph> =
        status.iter().filter(|p| p.get("Package").is_some_and(|n| !planned.contains(n))).collect();
    for p in plan {
        stanzas.push(p.pkg.paragraph()?);
    }
    let key = |p: &&Paragraph| {
        (
            p.get("Package").unwrap_or_default().to_string(),
            p.get("Architecture").unwrap_or_default().to_string(),
        )
    };
    stanzas.sort_by_key(key);
    let mut first = BTreeMap::new();
    let mut note = |name: &str| {
        let n = first.len();
        first.entry(name.to_ascii_lowercase()).or_insert(n);
    };
    for p in stanzas {
        note(p.get("Package").unwrap_or_default());
        for f in relation_fields() {
            let Some(text) = p.get(f) else { continue };
            let Ok(groups) = parse_relations(text) else { continue };
            for d in groups.iter().flatten() {
                note(&d.name);
            }
        }
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::apt::resolve::tests::available_from;
    use crate::packages::Action;

    fn plan(index: &str) -> Vec<Planned> {
        available_from(index)
            .into_iter()
            .map(|pkg| Planned {
                name: pkg.name().to_string(),
                arch: pkg.arch().unwrap_or("all").to_string(),
                version: pkg.version().unwrap().parse().unwrap(),
                pkg,
                action: Action::Install,
                hold: false,
            })
            .collect()
    }

    fn status(text: &str) -> Vec<Paragraph> {
        erdma_deb::deb822::parse(text).unwrap()
    }

    fn names(plan: &[Planned], c: &Configure) -> Vec<String> {
        c.order.iter().map(|&i| plan[i].name.clone()).collect()
    }

    /// What the base has that the packages below depend on (Debian 12's versions).
    const BASE12: &str = "\
Package: adduser\nStatus: install ok installed\nArchitecture: all\nVersion: 3.134\n\n\
Package: debconf\nStatus: install ok installed\nArchitecture: all\nVersion: 1.5.82\nProvides: debconf-2.0\n\n\
Package: init-system-helpers\nEssential: yes\nStatus: install ok installed\nArchitecture: all\nVersion: 1.65.2+deb12u1\n\n\
Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9+deb12u14\n\n\
Package: libgcc-s1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.2.0-14+deb12u1\n\n\
Package: libpam-runtime\nStatus: install ok installed\nArchitecture: all\nVersion: 1.5.2-6+deb12u2\n\n\
Package: libpam0g\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.5.2-6+deb12u2\n\n\
Package: libselinux1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.4-1+b6\n\n\
Package: libsmartcols1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.38.1-5+deb12u3\n\n\
Package: libstdc++6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.2.0-14+deb12u1\n\n\
Package: libsystemd0\nStatus: install ok installed\nArchitecture: amd64\nVersion: 252.39-1~deb12u2\n\n\
Package: libuuid1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.38.1-5+deb12u3\n\n\
Package: libzstd1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.5.4+dfsg2-5\n";

    /// `apt-get install --no-install-recommends plocate tcpdump ssl-cert cron uuid-runtime` on
    /// Debian 12 and what it installs, with their relations as the archive has them
    /// (`apt-cache show`, 2026-11-29).
    const GROUPS12: &[&str] = &[
        "Package: plocate\nVersion: 1.1.18-1\nArchitecture: amd64\nDepends: libc6 (>= 2.34), libgcc-s1 (>= 3.0), libstdc++6 (>= 12), liburing2 (>= 2.3), libzstd1 (>= 1.5.2), adduser",
        "Package: liburing2\nVersion: 2.3-3\nArchitecture: amd64\nDepends: libc6 (>= 2.4)",
        "Package: tcpdump\nVersion: 4.99.3-1\nArchitecture: amd64\nDepends: adduser, libc6 (>= 2.34), libpcap0.8 (>= 1.9.0), libssl3 (>= 3.0.0)",
        "Package: libpcap0.8\nVersion: 1.10.3-1\nArchitecture: amd64\nDepends: libc6 (>= 2.33), libdbus-1-3 (>= 1.9.14)",
        "Package: libdbus-1-3\nVersion: 1.14.10-1~deb12u1\nArchitecture: amd64\nDepends: libc6 (>= 2.34), libsystemd0",
        "Package: libssl3\nVersion: 3.0.20-1~deb12u2\nArchitecture: amd64\nDepends: libc6 (>= 2.34)",
        "Package: ssl-cert\nVersion: 1.1.2\nArchitecture: all\nDepends: debconf (>= 0.5) | debconf-2.0, openssl (>= 0.9.8g-9), adduser",
        "Package: openssl\nVersion: 3.0.20-1~deb12u2\nArchitecture: amd64\nDepends: libc6 (>= 2.34), libssl3 (>= 3.0.9)",
        "Package: cron\nVersion: 3.0pl1-162\nArchitecture: amd64\nProvides: cron-daemon\nDepends: libc6 (>= 2.34), libpam0g (>= 0.99.7.1), libselinux1 (>= 3.1~), sensible-utils, libpam-runtime\nPre-Depends: init-system-helpers (>= 1.54~), cron-daemon-common",
        "Package: cron-daemon-common\nVersion: 3.0pl1-162\nArchitecture: all\nDepends: adduser",
        "Package: sensible-utils\nVersion: 0.0.17+nmu1\nArchitecture: all",
        "Package: uuid-runtime\nVersion: 2.38.1-5+deb12u3\nArchitecture: amd64\nDepends: adduser, libc6 (>= 2.34), libsmartcols1 (>= 2.27~rc1), libsystemd0, libuuid1 (>= 2.38.1-2~)\nPre-Depends: libuuid1, init-system-helpers (>= 1.54~)",
    ];

    /// The order that run's dpkg printed (`Setting up …`): cron-daemon-common configured by
    /// apt on its own (`dpkg --configure cron-daemon-common:all`, before cron is unpacked),
    /// the rest by `dpkg --configure --pending` in its hash order, each package whose
    /// dependencies were not configured yet sent to the back of the queue.
    const APT_GET12: &[&str] = &[
        "cron-daemon-common",
        "libssl3",
        "libdbus-1-3",
        "sensible-utils",
        "uuid-runtime",
        "liburing2",
        "openssl",
        "cron",
        "libpcap0.8",
        "ssl-cert",
        "plocate",
        "tcpdump",
    ];

    #[test]
    fn the_order_apt_get_gave_whatever_the_plans_order() {
        let base = status(BASE12);
        let mut stanzas = GROUPS12.to_vec();
        for round in 0..4 {
            let plan = plan(&stanzas.join("\n\n"));
            let c = configure_order(&plan, &base).unwrap();
            assert_eq!(names(&plan, &c), APT_GET12, "plan order {stanzas:?}");
            assert_eq!(c.by_apt, 1);
            // Another plan order: reversed, then rotated.
            stanzas.reverse();
            stanzas.rotate_left(round + 1);
        }
    }

    /// `pkg8` and `pkg458` fall in one bin of dpkg's package table (7962); there dpkg keeps the
    /// order in which the status file first named them.
    #[test]
    fn one_bin_keeps_the_order_the_status_file_names_them_in() {
        let bin = |n: &str| fnv_hash(n) % PACKAGE_BINS;
        assert_eq!(bin("pkg8"), bin("pkg458"));
        let index = "Package: pkg8\nVersion: 1\nArchitecture: all\n\nPackage: pkg458\nVersion: 1\nArchitecture: all";
        let plan = plan(index);
        // Sorted by name, the status file has pkg458 first.
        let c = configure_order(&plan, &[]).unwrap();
        assert_eq!(names(&plan, &c), ["pkg458", "pkg8"]);
        // A stanza before both that names pkg8 (any relation field) puts it first.
        let base = status("Package: aaa\nStatus: install ok installed\nArchitecture: all\nVersion: 1\nSuggests: pkg8\n");
        let c = configure_order(&plan, &base).unwrap();
        assert_eq!(names(&plan, &c), ["pkg8", "pkg458"]);
        // Named only after both: no change.
        let base = status("Package: zzz\nStatus: install ok installed\nArchitecture: all\nVersion: 1\nSuggests: pkg8\n");
        assert_eq!(names(&plan, &configure_order(&plan, &base).unwrap()), ["pkg458", "pkg8"]);
    }

    /// A dependency the base satisfies through one alternative does not wait on a planned
    /// package that offers another; a versioned one the base does not meet does.
    #[test]
    fn the_base_satisfies_a_group_by_any_alternative_and_version() {
        let bin = |n: &str| fnv_hash(n) % PACKAGE_BINS;
        // `tcpdump` comes before `uuid-runtime` in dpkg's table.
        assert!(bin("tcpdump") < bin("uuid-runtime"));
        let index =
            "Package: tcpdump\nVersion: 1\nArchitecture: all\nDepends: uuid-runtime | adduser\n\n\
            Package: uuid-runtime\nVersion: 1\nArchitecture: all";
        let plan = plan(index);
        let base = status(
            "Package: adduser\nStatus: install ok installed\nArchitecture: all\nVersion: 3.134\n",
        );
        assert_eq!(
            names(&plan, &configure_order(&plan, &base).unwrap()),
            ["tcpdump", "uuid-runtime"]
        );
        let index = "Package: tcpdump\nVersion: 1\nArchitecture: all\nDepends: uuid-runtime | adduser (>= 4)\n\n\
            Package: uuid-runtime\nVersion: 1\nArchitecture: all";
        let plan2 = self::plan(index);
        assert_eq!(
            names(&plan2, &configure_order(&plan2, &base).unwrap()),
            ["uuid-runtime", "tcpdump"]
        );
        // Nothing to wait on: dpkg's table order, not the plan's.
        let plan3 = self::plan(
            "Package: uuid-runtime\nVersion: 1\nArchitecture: all\n\nPackage: tcpdump\nVersion: 1\nArchitecture: all",
        );
        assert_eq!(
            names(&plan3, &configure_order(&plan3, &[]).unwrap()),
            ["tcpdump", "uuid-runtime"]
        );
    }

    /// What an essential package depends on (here a new libc6 that `init-system-helpers`, an
    /// essential package, needs through its dependency) apt configures at once, before the
    /// rest; a dependency cycle among the others still ends.
    #[test]
    fn apt_configures_the_essential_closure_itself_and_cycles_end() {
        let base = status(
            "Package: init-system-helpers\nEssential: yes\nStatus: install ok installed\nArchitecture: all\nVersion: 1\nDepends: perl-base\n\n\
             Package: perl-base\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1\nDepends: libc6\n\n\
             Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1\n",
        );
        let index = "Package: a\nVersion: 1\nArchitecture: all\nDepends: b, libc6 (>= 2)\n\n\
            Package: b\nVersion: 1\nArchitecture: all\nDepends: a\n\n\
            Package: libc6\nVersion: 2\nArchitecture: amd64";
        let plan = plan(index);
        let c = configure_order(&plan, &base).unwrap();
        assert_eq!(c.by_apt, 1);
        let got = names(&plan, &c);
        assert_eq!(got[0], "libc6");
        let mut rest = got[1..].to_vec();
        rest.sort();
        assert_eq!(rest, ["a", "b"]);
    }
}
