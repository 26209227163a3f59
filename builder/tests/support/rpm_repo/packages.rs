//! Generic spec generation and rpmbuild: the rdma-core, libnl, NCCL and helper packages,
//! built from Debian's real binaries (see the parent module).
use super::*;

/// One binary package of a generated spec.
#[derive(Debug, Clone, Default)]
pub struct RpmDef {
    pub name: String,
    pub summary: String,
    pub requires: Vec<String>,
    /// Weak dependencies (`Recommends:`).
    pub recommends: Vec<String>,
    pub provides: Vec<String>,
    pub obsoletes: Vec<String>,
    pub conflicts: Vec<String>,
    /// `AutoReqProv: no` (stand-ins that list their own Provides).
    pub no_auto: bool,
    /// `(source file or symlink, absolute destination)`: copied as they are (mode, symlink).
    pub files: Vec<(PathBuf, String)>,
    /// `(absolute destination, contents, mode)`.
    pub contents: Vec<(String, Vec<u8>, u32)>,
    /// `(absolute destination, target)`.
    pub symlinks: Vec<(String, String)>,
    /// `(absolute destination, destination of the file it is another name of)`: `ln`.
    pub hardlinks: Vec<(String, String)>,
    /// Directories the package owns (`%dir`), created 0755.
    pub dirs: Vec<String>,
    /// Destinations that are `%config(noreplace)`.
    pub config: Vec<String>,
    /// Destinations that are `%ghost` (listed, not shipped).
    pub ghost: Vec<String>,
    /// `(destination, "MODE,USER,GROUP")`: the `%attr` of a listed file or `%dir`.
    pub attrs: Vec<(String, String)>,
    /// Extra spec text after the package's `%files` list (scriptlets, triggers), verbatim.
    pub scripts: String,
}

/// A generated spec: `packages[0]` named like the spec is the main package; the others are
/// `%package -n NAME` subpackages.
#[derive(Debug, Clone)]
pub struct SpecDef {
    pub name: String,
    pub version: String,
    pub release: String,
    pub license: String,
    pub packages: Vec<RpmDef>,
}

fn spec_text(spec: &SpecDef, stage: &Path, el: El) -> String {
    let mut s = String::new();
    let w = |s: &mut String, t: &str| {
        s.push_str(t);
        s.push('\n');
    };
    // No stripping, no debuginfo, no build-id links: the payload holds Debian's files as they are.
    w(&mut s, "%global debug_package %{nil}");
    w(&mut s, "%global __os_install_post %{nil}");
    w(&mut s, "%global _build_id_links none");
    w(&mut s, &format!("%global _binary_payload {}", el.payload()));
    w(&mut s, &format!("Name: {}", spec.name));
    w(&mut s, &format!("Version: {}", spec.version));
    w(&mut s, &format!("Release: {}", spec.release));
    w(&mut s, &format!("License: {}", spec.license));
    w(&mut s, "URL: https://github.com/linux-rdma/rdma-core");
    w(&mut s, "Vendor: erdma-kit tests (TEST ONLY)");
    let header = |s: &mut String, p: &RpmDef| {
        w(s, &format!("Summary: {}", p.summary));
        if p.no_auto {
            w(s, "AutoReqProv: no");
        }
        for (tag, list) in [
            ("Requires", &p.requires),
            ("Provides", &p.provides),
            ("Obsoletes", &p.obsoletes),
            ("Conflicts", &p.conflicts),
            ("Recommends", &p.recommends),
        ] {
            for v in list {
                w(s, &format!("{tag}: {v}"));
            }
        }
    };
    let main = &spec.packages[0];
    assert_eq!(main.name, spec.name, "packages[0] is the main package");
    header(&mut s, main);
    w(
        &mut s,
        &format!("\n%description\n{} (repackaged for erdma-kit tests, TEST ONLY)\n", main.summary),
    );
    for p in &spec.packages[1..] {
        w(&mut s, &format!("%package -n {}", p.name));
        header(&mut s, p);
        w(
            &mut s,
            &format!(
                "\n%description -n {}\n{} (repackaged for erdma-kit tests, TEST ONLY)\n",
                p.name, p.summary
            ),
        );
    }
    w(&mut s, "%prep\n%build\n%install");
    w(&mut s, &format!("cp -a {}/. %{{buildroot}}/\n", stage.display()));
    for (i, p) in spec.packages.iter().enumerate() {
        if i == 0 {
            w(&mut s, "%files");
        } else {
            w(&mut s, &format!("%files -n {}", p.name));
        }
        w(&mut s, "%defattr(-,root,root,-)");
        let attr = |d: &str| match p.attrs.iter().find(|(a, _)| a == d) {
            Some((_, a)) => format!("%attr({a}) "),
            None => String::new(),
        };
        for d in &p.dirs {
            w(&mut s, &format!("{}%dir {d}", attr(d)));
        }
        let mut dests: Vec<&str> = p.files.iter().map(|(_, d)| d.as_str()).collect();
        dests.extend(p.contents.iter().map(|(d, _, _)| d.as_str()));
        dests.extend(p.symlinks.iter().map(|(d, _)| d.as_str()));
        dests.extend(p.hardlinks.iter().map(|(d, _)| d.as_str()));
        dests.sort();
        for d in dests {
            if p.config.iter().any(|c| c == d) {
                w(&mut s, &format!("{}%config(noreplace) {d}", attr(d)));
            } else {
                w(&mut s, &format!("{}{d}", attr(d)));
            }
        }
        for g in &p.ghost {
            w(&mut s, &format!("%ghost {g}"));
        }
        w(&mut s, "");
        if !p.scripts.is_empty() {
            w(&mut s, &p.scripts);
        }
    }
    s
}

fn stage_files(spec: &SpecDef, stage: &Path) {
    let dest = |d: &str| stage.join(d.trim_start_matches('/'));
    let mkparent = |p: &Path| fs::create_dir_all(p.parent().unwrap()).unwrap();
    for p in &spec.packages {
        for d in &p.dirs {
            fs::create_dir_all(dest(d)).unwrap();
            fs::set_permissions(dest(d), fs::Permissions::from_mode(0o755)).unwrap();
        }
        for (src, d) in &p.files {
            let to = dest(d);
            mkparent(&to);
            run_ok("cp -a", Command::new("cp").arg("-a").arg(src).arg(&to));
        }
        for (d, bytes, mode) in &p.contents {
            let to = dest(d);
            mkparent(&to);
            fs::write(&to, bytes).unwrap();
            fs::set_permissions(&to, fs::Permissions::from_mode(*mode)).unwrap();
        }
        for (d, target) in &p.symlinks {
            let to = dest(d);
            mkparent(&to);
            std::os::unix::fs::symlink(target, &to).unwrap();
        }
        for (d, existing) in &p.hardlinks {
            let to = dest(d);
            mkparent(&to);
            fs::hard_link(dest(existing), &to).unwrap();
        }
    }
}

/// A hash of what a build depends on: the fixture revision, the given texts and the names and
/// sizes of the input files.
pub fn content_key(parts: &[String], inputs: &[PathBuf]) -> String {
    let mut h = Sha256::new();
    h.update(FIXTURE_REV);
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    for i in inputs {
        h.update(i.to_string_lossy().as_bytes());
        h.update(fs::metadata(i).map(|m| m.len()).unwrap_or(0).to_le_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// Builds every spec of `specs` with `rpmbuild -bb` into `out` (flat, `NAME-V-R.ARCH.rpm`).
fn rpmbuild_all(specs: &[SpecDef], el: El, out: &Path, work: &Path) {
    fs::create_dir_all(out).unwrap();
    for spec in specs {
        let top = work.join(format!("top-{}", spec.name));
        let stage = work.join(format!("stage-{}", spec.name));
        fs::create_dir_all(top.join("SPECS")).unwrap();
        fs::create_dir_all(&stage).unwrap();
        stage_files(spec, &stage);
        let spec_path = top.join("SPECS").join(format!("{}.spec", spec.name));
        fs::write(&spec_path, spec_text(spec, &stage, el)).unwrap();
        let t0 = Instant::now();
        run_ok(
            &format!("rpmbuild -bb {}", spec_path.display()),
            Command::new("rpmbuild")
                .arg("-bb")
                .arg("--quiet")
                .arg("--define")
                .arg(format!("_topdir {}", top.display()))
                .arg("--define")
                .arg(format!("dist {}", el.dist()))
                .args(["--define", "_buildhost erdma-kit.test"])
                .args(["--define", "use_source_date_epoch_as_buildtime 1"])
                .args(["--define", "clamp_mtime_to_source_date_epoch 1"])
                .args(["--target", "x86_64"])
                .env("SOURCE_DATE_EPOCH", "1700000000")
                .arg(&spec_path),
        );
        let rpms = top.join("RPMS");
        for e in fixture::walk_tree(&rpms) {
            let p = rpms.join(&e.0);
            if p.extension().is_some_and(|x| x == "rpm") {
                fs::rename(&p, out.join(p.file_name().unwrap())).unwrap();
            }
        }
        eprintln!("rpmbuild {}-{}-{}: {:.1?}", spec.name, spec.version, spec.release, t0.elapsed());
    }
}

/// The `.rpm` files of `dir`, sorted by name.
pub fn rpms_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rpm"))
        .collect();
    v.sort();
    v
}

/// Builds `specs` once into `cache_root()/NAME-HASH/` and returns its rpms.
pub fn cached_rpms(
    name: &str,
    el: El,
    specs: impl Fn(&Path) -> Vec<SpecDef>,
    inputs: &[PathBuf],
) -> Vec<PathBuf> {
    // The spec text names the stage directory; hash it with a fixed placeholder.
    let texts: Vec<String> = specs(Path::new("/STAGE"))
        .iter()
        .map(|s| {
            let mut t = spec_text(s, Path::new("/STAGE"), el);
            for p in &s.packages {
                for (d, bytes, mode) in &p.contents {
                    t.push_str(&format!("{d} {mode:o} {}\n", hex::encode(Sha256::digest(bytes))));
                }
            }
            t
        })
        .collect();
    let mut parts = texts;
    parts.push(el.dist().to_string());
    let key = content_key(&parts, inputs);
    let dir = cached_dir(&format!("{name}-{key}"), |tmp| {
        let work = tmp.join("work");
        let extracted = work.join("debs");
        let specs = specs(&extracted);
        rpmbuild_all(&specs, el, &tmp.join("rpms"), &work);
        fs::remove_dir_all(&work).unwrap();
    });
    rpms_in(&dir.join("rpms"))
}

/// NVIDIA's NCCL builds as its rhel9 repository names them (`libnccl-2.21.5-1+cuda12.4`,
/// `libnccl-devel`; the version shape of its `libnccl2` debs): builds for CUDA 11, 12 and 13,
/// newest first by CUDA. NVIDIA's repository cannot be reached here: the library is a stand-in
/// file naming its build, the names, versions and layout (`/usr/lib64/libnccl.so.2`) are
/// NVIDIA's (testdata/rpm/README.md).
pub fn nccl_rpms() -> Vec<PathBuf> {
    const BUILDS: [(&str, &str); 4] = [
        ("2.18.3", "1+cuda12.2"),
        ("2.21.5", "1+cuda11.0"),
        ("2.21.5", "1+cuda12.4"),
        ("2.27.7", "1+cuda13.0"),
    ];
    let mut out = Vec::new();
    for (version, release) in BUILDS {
        let specs = move |_: &Path| {
            let lib = RpmDef {
                name: "libnccl".into(),
                summary: "NVIDIA Collective Communication Library (NCCL) Runtime (TEST stand-in)"
                    .into(),
                no_auto: true,
                contents: vec![(
                    format!("/usr/lib64/libnccl.so.{version}"),
                    format!("NCCL {version} {release}\n").into_bytes(),
                    0o755,
                )],
                symlinks: vec![("/usr/lib64/libnccl.so.2".into(), format!("libnccl.so.{version}"))],
                ..RpmDef::default()
            };
            let devel = RpmDef {
                name: "libnccl-devel".into(),
                summary:
                    "NVIDIA Collective Communication Library (NCCL) Development (TEST stand-in)"
                        .into(),
                no_auto: true,
                requires: vec![format!("libnccl = {version}-{release}")],
                contents: vec![(
                    "/usr/include/nccl.h".into(),
                    format!("/* NCCL {version} */\n").into_bytes(),
                    0o644,
                )],
                ..RpmDef::default()
            };
            vec![SpecDef {
                name: "libnccl".into(),
                version: version.into(),
                release: release.into(),
                license: "BSD".into(),
                packages: vec![lib, devel],
            }]
        };
        out.extend(cached_rpms(&format!("nccl-{version}-{release}"), El::El9, specs, &[]));
    }
    out
}

/// Extracts each deb with `dpkg-deb -x` into `into/NAME/`.
pub fn extract_debs(debs: &[PathBuf], into: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for deb in debs {
        let name =
            deb.file_name().unwrap().to_string_lossy().split('_').next().unwrap().to_string();
        let dir = into.join(&name);
        if !dir.exists() {
            fs::create_dir_all(&dir).unwrap();
            run_ok("dpkg-deb -x", Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir));
        }
        out.insert(name, dir);
    }
    out
}

/// Where a Debian path goes in the EL layout, or `None` for what EL packages do not ship
/// (Debian's docs, lintian overrides, sysvinit scripts).
fn el_path(deb_rel: &str) -> Option<String> {
    let r = deb_rel.trim_start_matches("./").trim_start_matches('/');
    if r.starts_with("usr/share/doc/")
        || r.starts_with("usr/share/lintian/")
        || r.starts_with("etc/init.d/")
    {
        return None;
    }
    for (from, to) in [
        ("usr/lib/x86_64-linux-gnu/", "usr/lib64/"),
        ("lib/x86_64-linux-gnu/", "usr/lib64/"),
        ("lib/udev/", "usr/lib/udev/"),
        ("lib/systemd/", "usr/lib/systemd/"),
        // EL's %{_libexecdir}.
        ("usr/lib/truescale-serdes.cmds", "usr/libexec/truescale-serdes.cmds"),
    ] {
        if let Some(rest) = r.strip_prefix(from) {
            return Some(format!("/{to}{rest}"));
        }
    }
    Some(format!("/{r}"))
}

/// Files and symlinks (not directories) of an extracted deb, mapped with [`el_path`] and
/// filtered by `keep(el_path)`.
fn deb_files(root: &Path, keep: impl Fn(&str) -> bool) -> Vec<(PathBuf, String)> {
    fixture::walk_tree(root)
        .into_iter()
        .filter(|(_, m)| !m.is_dir())
        .filter_map(|(rel, _)| {
            let dest = el_path(&rel.to_string_lossy())?;
            keep(&dest).then(|| (root.join(&rel), dest))
        })
        .collect()
}

fn rdma_specs(el: El, extracted: &Path, debs: &[PathBuf]) -> Vec<SpecDef> {
    // Only the mapping is needed for hashing; extraction happens under a real build directory.
    let x = if extracted == Path::new("/STAGE") {
        BTreeMap::new()
    } else {
        extract_debs(debs, extracted)
    };
    let files = |deb: &str, keep: &dyn Fn(&str) -> bool| -> Vec<(PathBuf, String)> {
        x.get(deb).map(|d| deb_files(d, keep)).unwrap_or_default()
    };
    let all = |_: &str| true;
    let isa_req = |n: &str| format!("{n}%{{?_isa}} = %{{version}}-%{{release}}");
    let ldconfig = |n: &str| {
        if el.ldconfig_scriptlets() {
            format!("%post -n {n} -p /sbin/ldconfig\n%postun -n {n} -p /sbin/ldconfig\n")
        } else {
            String::new()
        }
    };
    let mut verbs_files = files("libibverbs1", &all);
    verbs_files.extend(files("ibverbs-providers", &all));
    let drivers: Vec<String> = verbs_files
        .iter()
        .map(|(_, d)| d.clone())
        .filter(|d| d.starts_with("/etc/libibverbs.d/"))
        .collect();
    // The upstream spec's Provides/Obsoletes for the old per-provider packages (v44.0).
    let mut verbs_provides = Vec::new();
    let mut verbs_obsoletes = Vec::new();
    for old in [
        "libcxgb4",
        "libefa",
        "liberdma",
        "libhfi1",
        "libipathverbs",
        "libirdma",
        "libmana",
        "libmlx4",
        "libmlx5",
        "libmthca",
        "libocrdma",
        "librxe",
    ] {
        verbs_provides.push(format!("{old} = %{{version}}-%{{release}}"));
        verbs_obsoletes.push(format!("{old} < %{{version}}-%{{release}}"));
    }
    let rdma_core_keep = |d: &str| {
        // iwpmd and rdma-ndd are packages of their own (iwpmd) or need libudev/libsystemd
        // (rdma-ndd), which these fixtures do not provide.
        !(d.contains("iwpmd") || d.contains("rdma-ndd"))
    };
    let core_files = files("rdma-core", &rdma_core_keep);
    let core_config: Vec<String> =
        core_files.iter().map(|(_, d)| d.clone()).filter(|d| d.starts_with("/etc/")).collect();
    let release = el.release();
    vec![SpecDef {
        name: "rdma-core".into(),
        version: RDMA_VERSION.into(),
        release,
        license: "GPLv2 or BSD".into(),
        packages: vec![
            RpmDef {
                name: "rdma-core".into(),
                summary: "RDMA core userspace libraries and daemons".into(),
                requires: vec!["pciutils".into()],
                provides: vec!["rdma = %{version}-%{release}".into()],
                obsoletes: vec!["rdma < %{version}-%{release}".into()],
                conflicts: vec!["infiniband-diags <= 1.6.7".into()],
                dirs: vec!["/etc/rdma".into(), "/etc/rdma/modules".into(), "/usr/lib/udev/rules.d".into()],
                config: core_config,
                files: core_files,
                scripts: "%post\nif [ -x /sbin/udevadm ]; then\n/sbin/udevadm trigger --subsystem-match=infiniband --action=change || true\n/sbin/udevadm trigger --subsystem-match=net --action=change || true\n/sbin/udevadm trigger --subsystem-match=infiniband_mad --action=change || true\nfi\n".into(),
                ..Default::default()
            },
            RpmDef {
                name: "libibverbs".into(),
                summary: "A library and drivers for direct userspace use of RDMA (InfiniBand/iWARP/RoCE) hardware".into(),
                provides: verbs_provides,
                obsoletes: verbs_obsoletes,
                dirs: vec!["/etc/libibverbs.d".into(), "/usr/lib64/libibverbs".into()],
                config: drivers,
                files: verbs_files,
                scripts: ldconfig("libibverbs"),
                ..Default::default()
            },
            RpmDef {
                name: "libibverbs-utils".into(),
                summary: "Examples for the libibverbs library".into(),
                requires: vec![isa_req("libibverbs")],
                files: files("ibverbs-utils", &all),
                ..Default::default()
            },
            RpmDef {
                name: "librdmacm".into(),
                summary: "Userspace RDMA Connection Manager".into(),
                requires: vec![isa_req("libibverbs")],
                dirs: vec!["/usr/lib64/rsocket".into()],
                files: files("librdmacm1", &all),
                scripts: ldconfig("librdmacm"),
                ..Default::default()
            },
            RpmDef {
                name: "librdmacm-utils".into(),
                summary: "Examples for the librdmacm library".into(),
                requires: vec![isa_req("librdmacm"), isa_req("libibverbs")],
                files: files("rdmacm-utils", &all),
                ..Default::default()
            },
        ],
    }]
}

/// `libnl3` (EL's name) from Debian's real `libnl-3-200` and `libnl-route-3-200` (3.7.0):
/// `/usr/lib64/libnl-3.so.200*`, `/usr/lib64/libnl-route-3.so.200*`, `/etc/libnl/{classid,pktloc}`.
fn libnl_spec(extracted: &Path, debs: &[PathBuf]) -> SpecDef {
    let x = if extracted == Path::new("/STAGE") {
        BTreeMap::new()
    } else {
        extract_debs(debs, extracted)
    };
    let mut files = Vec::new();
    for d in LIBNL_DEBS {
        if let Some(root) = x.get(d) {
            for (src, dest) in deb_files(root, |_| true) {
                // EL's libnl3 keeps its configuration in /etc/libnl.
                files.push((src, dest.replace("/etc/libnl-3/", "/etc/libnl/")));
            }
        }
    }
    let config = files.iter().map(|(_, d)| d.clone()).filter(|d| d.starts_with("/etc/")).collect();
    SpecDef {
        name: "libnl3".into(),
        version: "3.7.0".into(),
        release: "1%{?dist}".into(),
        license: "LGPLv2".into(),
        packages: vec![RpmDef {
            name: "libnl3".into(),
            summary: "Convenience library for kernel netlink sockets".into(),
            dirs: vec!["/etc/libnl".into()],
            config,
            files,
            ..Default::default()
        }],
    }
}

fn pciutils_spec() -> SpecDef {
    SpecDef {
        name: "pciutils".into(),
        version: "3.7.0".into(),
        release: "3%{?dist}".into(),
        license: "GPLv2+".into(),
        packages: vec![RpmDef {
            name: "pciutils".into(),
            summary: "PCI bus related utilities (erdma-kit stand-in without binaries)".into(),
            contents: vec![(
                "/usr/share/doc/pciutils/README.erdma-kit".into(),
                b"stand-in: rdma-core Requires pciutils\n".to_vec(),
                0o644,
            )],
            ..Default::default()
        }],
    }
}

/// A package whose `%pre` adds a system group and a user as Fedora's packaging guidelines write
/// it (`getent group … || groupadd -r …; getent passwd … || useradd -r …`, "Users and Groups"),
/// but with `-m`: the home (and `/etc/skel`'s files in it) that useradd creates is what the rpm
/// backend does not emulate, so the install goes to the sandbox (or stops with
/// `--no-sandbox`). Only installed when asked for.
fn sysuser_spec() -> SpecDef {
    SpecDef {
        name: "sysuser-stand-in".into(),
        version: "1.0".into(),
        release: "1%{?dist}".into(),
        license: "MIT".into(),
        packages: vec![RpmDef {
            name: "sysuser-stand-in".into(),
            summary: "a %pre that adds a system user with a home (erdma-kit tests, TEST ONLY)".into(),
            // What `dnf install` (install_weak_deps=True) would add and erdma-build leaves out
            // unless --install-recommends.
            recommends: vec!["pciutils".into()],
            contents: vec![(
                "/usr/share/doc/sysuser-stand-in/README".into(),
                b"TEST ONLY\n".to_vec(),
                0o644,
            )],
            scripts: "%pre\ngetent group erdmasvc >/dev/null || groupadd -r erdmasvc\ngetent passwd erdmasvc >/dev/null || \\\n    useradd -r -m -g erdmasvc -d /var/lib/erdmasvc -s /sbin/nologin -c \"erdma-kit test\" erdmasvc\nexit 0\n".into(),
            ..Default::default()
        }],
    }
}

/// The system-account scriptlets the rpm backend emulates, as packages write them: a `%pre` in
/// the form of Fedora's packaging guidelines ("Users and Groups"; unbound's) adding group and
/// user `erdmad`, who owns the package's `%attr(0750,erdmad,erdmad) %dir /var/lib/erdmad`; a
/// `%post` with `%sysusers_create_compat`'s quoted form (group `erdmaobs`) and EL8 openssh's
/// fixed ids with `2> /dev/null || :` (group and user `erdmafix`, 74). `/etc/erdmad.conf` is
/// `%attr(0640,root,erdmaobs)`: rpm resolves that name when it unpacks, before `%post` adds the
/// group, so the file stays root's. Only installed when asked for.
fn svcuser_spec() -> SpecDef {
    SpecDef {
        name: "svcuser-stand-in".into(),
        version: "1.0".into(),
        release: "1%{?dist}".into(),
        license: "MIT".into(),
        packages: vec![RpmDef {
            name: "svcuser-stand-in".into(),
            summary: "scriptlets that add system users (erdma-kit tests, TEST ONLY)".into(),
            dirs: vec!["/var/lib/erdmad".into()],
            contents: vec![("/etc/erdmad.conf".into(), b"TEST ONLY\n".to_vec(), 0o640)],
            config: vec!["/etc/erdmad.conf".into()],
            attrs: vec![
                ("/var/lib/erdmad".into(), "0750,erdmad,erdmad".into()),
                ("/etc/erdmad.conf".into(), "0640,root,erdmaobs".into()),
            ],
            scripts: concat!(
                "%pre\n",
                "getent group erdmad >/dev/null || groupadd -r erdmad\n",
                "getent passwd erdmad >/dev/null || \\\n",
                "    useradd -r -g erdmad -d /var/lib/erdmad -s /sbin/nologin \\\n",
                "    -c \"erdma-kit daemon\" erdmad\n",
                "exit 0\n",
                "\n",
                "%post\n",
                "getent group 'erdmaobs' >/dev/null || groupadd -r 'erdmaobs' || :\n",
                "getent group erdmafix >/dev/null || groupadd -g 74 -r erdmafix || :\n",
                "getent passwd erdmafix >/dev/null || \\\n",
                "  useradd -c \"Privilege-separated SSH\" -u 74 -g erdmafix \\\n",
                "  -s /sbin/nologin -r -d /var/empty/erdmafix erdmafix 2> /dev/null || :\n",
            )
            .into(),
            ..Default::default()
        }],
    }
}

/// A `%post` that registers an alternative with chkconfig's `alternatives`, two slaves (one
/// whose file the package does not ship): the call of the recorded run
/// `testdata/alternatives-el/b-two-slaves-one-missing-path` of the real tool, whose files the
/// package ships. It owns `/var/lib/alternatives` (chkconfig's on EL; the fixture bases have
/// no chkconfig). Only installed when asked for.
fn alternatives_spec() -> SpecDef {
    let commands = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/alternatives-el/b-two-slaves-one-missing-path/commands"
    ))
    .unwrap();
    let file = |p: &str| (p.to_string(), format!("payload of {p}\n").into_bytes(), 0o755);
    SpecDef {
        name: "alternatives-stand-in".into(),
        version: "1.0".into(),
        release: "1%{?dist}".into(),
        license: "MIT".into(),
        packages: vec![RpmDef {
            name: "alternatives-stand-in".into(),
            summary: "a %post that registers an alternative (erdma-kit tests, TEST ONLY)".into(),
            dirs: vec!["/var/lib/alternatives".into(), "/usr/share/man/man1".into()],
            contents: vec![file("/usr/bin/tool-a"), file("/usr/bin/tool-a-helper")],
            scripts: format!("%post\n{}", commands.trim_start()),
            ..Default::default()
        }],
    }
}

/// The EL rdma-core packages of `el` built from Debian 12's rdma-core 44.0-2 binaries:
/// `rdma-core`, `libibverbs`, `libibverbs-utils`, `librdmacm`, `librdmacm-utils`, version
/// `44.0-2.al8`/`.el8`/`.el9` (see [`El::evr`]). Unsigned; [`RpmRepo::build`] signs copies.
pub fn el_rdma_rpms(el: El) -> Vec<PathBuf> {
    let debs = real_debs(&RDMA_DEBS);
    let d2 = debs.clone();
    cached_rpms(&format!("el-rpms-rdma-{}", el.key()), el, move |x| rdma_specs(el, x, &d2), &debs)
}

/// What the EL rdma-core packages need beyond a base ([`el_base`]): `libnl3` (real Debian
/// libnl 3.7.0 binaries) and a `pciutils` stand-in. A distribution's BaseOS repository has them.
/// Beside them, the scriptlet stand-ins `sysuser-stand-in`, `svcuser-stand-in` and
/// `alternatives-stand-in`, installed only where a test asks.
pub fn el_deps_rpms(el: El) -> Vec<PathBuf> {
    let debs = real_debs(&LIBNL_DEBS);
    let d2 = debs.clone();
    cached_rpms(
        &format!("el-rpms-deps-{}", el.key()),
        el,
        move |x| {
            vec![
                libnl_spec(x, &d2),
                pciutils_spec(),
                sysuser_spec(),
                svcuser_spec(),
                alternatives_spec(),
            ]
        },
        &debs,
    )
}

/// Just `libnl3` of [`el_deps_rpms`].
pub fn libnl_rpm(el: El) -> PathBuf {
    el_deps_rpms(el)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("libnl3-"))
        .expect("libnl3 rpm")
}
