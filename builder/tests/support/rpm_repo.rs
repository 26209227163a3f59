//! RPM fixtures for the rpm backend: real rdma-core binaries repackaged as EL rpms, signed
//! yum repositories served on 127.0.0.1, and EL-like base images whose rpm database real rpm
//! wrote (SQLite with this machine's rpm 4.18, Berkeley DB with Debian 11's rpm 4.16 on
//! libdb 5.3). Where every fact comes from: `testdata/rpm/README.md`.
//!
//! No EL repository or image can be downloaded here, so:
//! - the binaries are Debian 12's rdma-core 44.0-2 builds ([`super::debs::real_debs`]), laid
//!   out as EL packages (`/usr/lib64`, `/usr/lib64/libibverbs/`) and built with `rpmbuild -bb`
//!   from a generated spec whose package names, Requires, Provides and scriptlets follow
//!   rdma-core's `redhat/rdma-core.spec` (v44.0) and RHEL 9's downstream spec; the soname
//!   Provides/Requires are rpmbuild's own (`elfdeps` on the real ELF files);
//! - the base system packages (`setup`, `filesystem`, `glibc`, `bash`, `*-release`) are small
//!   stand-ins on top of a Debian 12 minbase (which carries the real libc): `glibc` provides
//!   what `elfdeps` finds in Debian's real libc, without shipping the libraries again.
//!
//! Two things make Debian-built binaries work in an EL layout (documented in the README):
//! Debian's ld.so does not search `/usr/lib64` by default, so the `glibc` stand-in ships
//! `/etc/ld.so.conf.d/erdma-kit-lib64.conf` (`/usr/lib64`) and an ld.so.cache must be
//! written after installing (glibc's file trigger does it with real rpm/dnf); and libibverbs
//! looks for providers in its compiled-in `/usr/lib/x86_64-linux-gnu/libibverbs`, so the bases
//! carry an unowned symlink from there to `/usr/lib64/libibverbs` ([`PROVIDER_DIR_LINK`]).
//!
//! Cache layout (under [`debian::cache_root`]): `el-rpms-*-HASH/` (rpm sets, keyed by a hash
//! of the generated specs and their inputs), `debian11-rpm/` (a bullseye minbase with rpm
//! 4.16, the Berkeley DB writer), `debian12-rpm/` (a bookworm one with rpm 4.18 on SQLite), `el-base-*-HASH/{rootfs,oci,build-info.json}`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::apt_repo::Served;
use super::debian::{self, cache_root, cached_dir, lock_file, run_ok};
use super::debs::{self, real_debs};
use super::fixture::{self, OciFixture};

/// Bump to rebuild every cached rpm set and base (the hash covers the generated specs, not
/// this file's code).
const FIXTURE_REV: &str = "rpm-fixtures-2";

/// rdma-core upstream version of Debian 12's packages (44.0-2): the EL packages get
/// `44.0-2%{dist}`.
pub const RDMA_VERSION: &str = "44.0";
pub const RDMA_RELEASE_BASE: &str = "2";

/// The Debian packages whose files become the EL rdma-core packages.
pub const RDMA_DEBS: [&str; 6] = [
    "libibverbs1",
    "ibverbs-providers",
    "ibverbs-utils",
    "librdmacm1",
    "rdmacm-utils",
    "rdma-core",
];
pub const LIBNL_DEBS: [&str; 2] = ["libnl-3-200", "libnl-route-3-200"];

/// An unowned symlink every base carries: Debian's libibverbs looks for providers in its
/// compiled-in directory first (`VERBS_PROVIDER_DIR`), which the EL layout does not have.
pub const PROVIDER_DIR_LINK: (&str, &str) =
    ("usr/lib/x86_64-linux-gnu/libibverbs", "../../lib64/libibverbs");

/// The EL flavour packages are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum El {
    /// Alibaba Cloud Linux 3 (EL8-compatible, `.al8` packages, `$releasever` 3).
    Al8,
    /// CentOS/Rocky 8 (`.el8`).
    El8,
    /// Rocky/Alma/RHEL 9 (`.el9`).
    El9,
}

impl El {
    pub fn dist(self) -> &'static str {
        match self {
            El::Al8 => ".al8",
            El::El8 => ".el8",
            El::El9 => ".el9",
        }
    }

    fn key(self) -> &'static str {
        &self.dist()[1..]
    }

    /// `2.el9`.
    pub fn release(self) -> String {
        format!("{RDMA_RELEASE_BASE}{}", self.dist())
    }

    /// `44.0-2.el9`.
    pub fn evr(self) -> String {
        format!("{RDMA_VERSION}-{}", self.release())
    }

    /// Payload compression of the distribution's own packages: xz level 2 on EL8 (and
    /// Alinux 3), zstd level 19 on EL9 (redhat-rpm-config's `_binary_payload`).
    fn payload(self) -> &'static str {
        match self {
            El::Al8 | El::El8 => "w2.xzdio",
            El::El9 => "w19.zstdio",
        }
    }

    /// EL8's rpmsign adds header-only and header+payload (v3) signatures, EL9's only the
    /// header one.
    pub fn rpmv3_signatures(self) -> bool {
        !matches!(self, El::El9)
    }

    /// Whether the rdma-core libraries carry `%post -p /sbin/ldconfig`: `%ldconfig_scriptlets`
    /// expands to them on EL8 and to nothing on EL9, where glibc's file trigger runs ldconfig.
    fn ldconfig_scriptlets(self) -> bool {
        !matches!(self, El::El9)
    }
}

// ---------------------------------------------------------------------------------------------
// Generic spec generation and rpmbuild.

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
fn content_key(parts: &[String], inputs: &[PathBuf]) -> String {
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
fn rpms_in(dir: &Path) -> Vec<PathBuf> {
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
fn extract_debs(debs: &[PathBuf], into: &Path) -> BTreeMap<String, PathBuf> {
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
fn libnl_rpm(el: El) -> PathBuf {
    el_deps_rpms(el)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("libnl3-"))
        .expect("libnl3 rpm")
}

// ---------------------------------------------------------------------------------------------
// MLNX_OFED-style packages.

/// MLNX_OFED 5.8-1.0.1.1 naming for RHEL 8 (assumed from the pattern NVIDIA uses, e.g.
/// `libibverbs-59mlnx44-1.59056` of MLNX_OFED 5.9, see the README): rdma-core packages get
/// version `58mlnx43`, release `1.58101`.
pub const OFED_RDMA_VERSION: &str = "58mlnx43";
pub const OFED_RDMA_RELEASE: &str = "1.58101";
/// Where `mlnxofedinstall` writes its local yum repository definition (unowned by any rpm).
pub const OFED_REPO_FILE: &str = "etc/yum.repos.d/mlnx_ofed.repo";
pub const OFED_REPO: &str = "[mlnx_ofed]\nname=MLNX_OFED Repository\nbaseurl=file:///tmp/MLNX_OFED_LINUX-5.8-1.0.1.1-rhel8.6-x86_64/RPMS\nenabled=1\ngpgkey=file:///tmp/MLNX_OFED_LINUX-5.8-1.0.1.1-rhel8.6-x86_64/RPM-GPG-KEY-Mellanox\ngpgcheck=1\n";

fn ofed_specs(extracted: &Path, debs: &[PathBuf]) -> Vec<SpecDef> {
    let x = if extracted == Path::new("/STAGE") {
        BTreeMap::new()
    } else {
        extract_debs(debs, extracted)
    };
    let get = |deb: &str, rel: &str| {
        x.get(deb).map(|d| d.join(rel)).unwrap_or_else(|| PathBuf::from("/STAGE").join(rel))
    };
    // Real ELF files under OFED-style names (libibverbs.so.1.14.58.0: rdma-core 58's numbering),
    // so that the soname Provides are real and a replacement can be told apart by file name.
    let ml = "usr/lib/x86_64-linux-gnu";
    let verbs = RpmDef {
        name: "libibverbs".into(),
        summary: "A library and drivers for direct userspace use of RDMA (MLNX_OFED-style)".into(),
        provides: vec![
            "libmlx5 = %{version}-%{release}".into(),
            "libmlx4 = %{version}-%{release}".into(),
        ],
        obsoletes: vec![
            "libmlx5 < %{version}-%{release}".into(),
            "libmlx4 < %{version}-%{release}".into(),
        ],
        dirs: vec!["/etc/libibverbs.d".into(), "/usr/lib64/libibverbs".into()],
        files: vec![
            (
                get("libibverbs1", &format!("{ml}/libibverbs.so.1.14.44.0")),
                "/usr/lib64/libibverbs.so.1.14.58.0".into(),
            ),
            (
                get("ibverbs-providers", &format!("{ml}/libmlx5.so.1.24.44.0")),
                "/usr/lib64/libmlx5.so.1.24.58.0".into(),
            ),
            (
                get("ibverbs-providers", &format!("{ml}/libibverbs/libmlx5-rdmav34.so")),
                "/usr/lib64/libibverbs/libmlx5-rdmav34.so".into(),
            ),
            (
                get("ibverbs-providers", "etc/libibverbs.d/mlx5.driver"),
                "/etc/libibverbs.d/mlx5.driver".into(),
            ),
        ],
        symlinks: vec![
            ("/usr/lib64/libibverbs.so.1".into(), "libibverbs.so.1.14.58.0".into()),
            ("/usr/lib64/libmlx5.so.1".into(), "libmlx5.so.1.24.58.0".into()),
        ],
        config: vec!["/etc/libibverbs.d/mlx5.driver".into()],
        scripts: "%post -n libibverbs -p /sbin/ldconfig\n%postun -n libibverbs -p /sbin/ldconfig\n"
            .into(),
        ..Default::default()
    };
    let isa_req = |n: &str| format!("{n}%{{?_isa}} = %{{version}}-%{{release}}");
    let rdma = SpecDef {
        name: "rdma-core".into(),
        version: OFED_RDMA_VERSION.into(),
        release: OFED_RDMA_RELEASE.into(),
        license: "GPLv2 or BSD".into(),
        packages: vec![
            RpmDef {
                name: "rdma-core".into(),
                summary: "RDMA core userspace libraries and daemons (MLNX_OFED-style)".into(),
                dirs: vec!["/etc/rdma".into(), "/etc/rdma/modules".into()],
                files: vec![(
                    get("rdma-core", "etc/rdma/modules/rdma.conf"),
                    "/etc/rdma/modules/rdma.conf".into(),
                )],
                config: vec!["/etc/rdma/modules/rdma.conf".into()],
                ..Default::default()
            },
            verbs,
            RpmDef {
                name: "libibverbs-utils".into(),
                summary: "Examples for the libibverbs library (MLNX_OFED-style)".into(),
                requires: vec![isa_req("libibverbs")],
                files: vec![
                    (get("ibverbs-utils", "usr/bin/ibv_devices"), "/usr/bin/ibv_devices".into()),
                    (get("ibverbs-utils", "usr/bin/ibv_devinfo"), "/usr/bin/ibv_devinfo".into()),
                ],
                ..Default::default()
            },
            RpmDef {
                name: "librdmacm".into(),
                summary: "Userspace RDMA Connection Manager (MLNX_OFED-style)".into(),
                requires: vec![isa_req("libibverbs")],
                files: vec![(
                    get("librdmacm1", &format!("{ml}/librdmacm.so.1.3.44.0")),
                    "/usr/lib64/librdmacm.so.1.3.58.0".into(),
                )],
                symlinks: vec![(
                    "/usr/lib64/librdmacm.so.1".into(),
                    "librdmacm.so.1.3.58.0".into(),
                )],
                scripts:
                    "%post -n librdmacm -p /sbin/ldconfig\n%postun -n librdmacm -p /sbin/ldconfig\n"
                        .into(),
                ..Default::default()
            },
        ],
    };
    let ofed_scripts = SpecDef {
        name: "ofed-scripts".into(),
        version: "5.8".into(),
        release: "OFED.5.8.1.0.1".into(),
        license: "GPLv2 or BSD".into(),
        packages: vec![RpmDef {
            name: "ofed-scripts".into(),
            summary: "OFED scripts (MLNX_OFED-style stand-in)".into(),
            contents: vec![
                (
                    "/usr/bin/ofed_info".into(),
                    b"#!/bin/sh\necho 'MLNX_OFED_LINUX-5.8-1.0.1.1 (OFED-5.8-1.0.1):'\n".to_vec(),
                    0o755,
                ),
                ("/etc/infiniband/info".into(), b"#!/bin/sh\necho prefix=/usr\n".to_vec(), 0o755),
            ],
            dirs: vec!["/etc/infiniband".into()],
            ..Default::default()
        }],
    };
    let kernel = SpecDef {
        name: "mlnx-ofa_kernel".into(),
        version: "5.8".into(),
        release: "OFED.5.8.1.0.1.1.rhel8u6".into(),
        license: "GPLv2".into(),
        packages: vec![RpmDef {
            name: "mlnx-ofa_kernel".into(),
            summary: "Infiniband HCA driver userspace part (MLNX_OFED-style stand-in)".into(),
            requires: vec!["ofed-scripts".into()],
            contents: vec![(
                "/etc/infiniband/openib.conf".into(),
                b"# MLNX_OFED-style stand-in\nONBOOT=yes\nRDMA_UCM_LOAD=yes\n".to_vec(),
                0o644,
            )],
            config: vec!["/etc/infiniband/openib.conf".into()],
            ..Default::default()
        }],
    };
    vec![rdma, ofed_scripts, kernel]
}

/// MLNX_OFED-style rpms (release 5.8 for RHEL 8): `rdma-core`, `libibverbs`, `libibverbs-utils`,
/// `librdmacm` at `58mlnx43-1.58101` (real Debian ELF files under OFED-style names, e.g.
/// `/usr/lib64/libibverbs.so.1.14.58.0`), `ofed-scripts-5.8-OFED.5.8.1.0.1`,
/// `mlnx-ofa_kernel-5.8-OFED.5.8.1.0.1.1.rhel8u6`. They need `libnl3` ([`el_deps_rpms`]).
pub fn ofed_like_rpms() -> Vec<PathBuf> {
    let names = ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1", "rdma-core"];
    let debs = real_debs(&names);
    let d2 = debs.clone();
    cached_rpms("el-rpms-ofed-el8", El::El8, move |x| ofed_specs(x, &d2), &debs)
}

// ---------------------------------------------------------------------------------------------
// Base-system stand-ins and EL identities.

/// An EL-like base image fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BaseKind {
    /// Alibaba Cloud Linux 3, Berkeley DB rpmdb (rpm 4.14-era `/var/lib/rpm/Packages`).
    Alinux3Bdb,
    /// [`BaseKind::Alinux3Bdb`] with the MLNX_OFED-style packages installed and
    /// [`OFED_REPO_FILE`] present.
    Alinux3BdbOfed,
    /// CentOS 8, Berkeley DB rpmdb.
    Centos8Bdb,
    /// Rocky Linux 9, SQLite rpmdb (`/var/lib/rpm/rpmdb.sqlite`).
    Rocky9Sqlite,
}

impl BaseKind {
    pub const ALL: [BaseKind; 4] = [
        BaseKind::Alinux3Bdb,
        BaseKind::Alinux3BdbOfed,
        BaseKind::Centos8Bdb,
        BaseKind::Rocky9Sqlite,
    ];

    pub fn el(self) -> El {
        match self {
            BaseKind::Alinux3Bdb | BaseKind::Alinux3BdbOfed => El::Al8,
            BaseKind::Centos8Bdb => El::El8,
            BaseKind::Rocky9Sqlite => El::El9,
        }
    }

    pub fn sqlite(self) -> bool {
        matches!(self, BaseKind::Rocky9Sqlite)
    }

    pub fn ofed(self) -> bool {
        matches!(self, BaseKind::Alinux3BdbOfed)
    }

    /// `$releasever` (what dnf derives from `system-release(releasever)`).
    pub fn releasever(self) -> &'static str {
        match self.el() {
            El::Al8 => "3",
            El::El8 => "8",
            El::El9 => "9",
        }
    }

    fn dir_name(self) -> &'static str {
        match self {
            BaseKind::Alinux3Bdb => "alinux3-bdb",
            BaseKind::Alinux3BdbOfed => "alinux3-bdb-ofed",
            BaseKind::Centos8Bdb => "centos8-bdb",
            BaseKind::Rocky9Sqlite => "rocky9-sqlite",
        }
    }

    /// `/etc/os-release` as the distribution ships it.
    pub fn os_release(self) -> &'static str {
        match self.el() {
            El::Al8 => ALINUX3_OS_RELEASE,
            El::El8 => CENTOS8_OS_RELEASE,
            El::El9 => ROCKY9_OS_RELEASE,
        }
    }

    /// `(package, version, release, redhat-release line, repo file name, repo file)`.
    fn identity(
        self,
    ) -> (&'static str, &'static str, &'static str, &'static str, &'static str, &'static str) {
        match self.el() {
            El::Al8 => (
                "alinux-release",
                "3",
                "2104.10.al8",
                "Alibaba Cloud Linux release 3 (Soaring Falcon) \n",
                "AlinuxOS.repo",
                ALINUX3_REPO,
            ),
            El::El8 => (
                "centos-release",
                "8.5",
                "1.2111.el8",
                "CentOS Linux release 8.5.2111\n",
                "CentOS-Linux-BaseOS.repo",
                CENTOS8_REPO,
            ),
            El::El9 => (
                "rocky-release",
                "9.3",
                "1.2.el9",
                "Rocky Linux release 9.3 (Blue Onyx)\n",
                "rocky.repo",
                ROCKY9_REPO,
            ),
        }
    }
}

pub const ALINUX3_OS_RELEASE: &str = r#"NAME="Alibaba Cloud Linux"
VERSION="3 (Soaring Falcon)"
ID="alinux"
ID_LIKE="rhel fedora centos anolis"
VERSION_ID="3"
PLATFORM_ID="platform:al8"
PRETTY_NAME="Alibaba Cloud Linux 3 (Soaring Falcon)"
ANSI_COLOR="0;31"
HOME_URL="https://www.aliyun.com/"
"#;
pub const CENTOS8_OS_RELEASE: &str = r#"NAME="CentOS Linux"
VERSION="8"
ID="centos"
ID_LIKE="rhel fedora"
VERSION_ID="8"
PLATFORM_ID="platform:el8"
PRETTY_NAME="CentOS Linux 8"
ANSI_COLOR="0;31"
CPE_NAME="cpe:/o:centos:centos:8"
HOME_URL="https://centos.org/"
BUG_REPORT_URL="https://bugs.centos.org/"
CENTOS_MANTISBT_PROJECT="CentOS-8"
CENTOS_MANTISBT_PROJECT_VERSION="8"
"#;
pub const ROCKY9_OS_RELEASE: &str = r#"NAME="Rocky Linux"
VERSION="9.3 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.3"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.3"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.3"
"#;
const ALINUX3_REPO: &str = "[alinux3-os]\nname=alinux3-os\nbaseurl=http://mirrors.cloud.aliyuncs.com/alinux/$releasever/os/$basearch/\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-ALINUX-3\nenabled=1\ngpgcheck=1\n";
const CENTOS8_REPO: &str = "[baseos]\nname=CentOS Linux $releasever - BaseOS\nmirrorlist=http://mirrorlist.centos.org/?release=$releasever&arch=$basearch&repo=BaseOS&infra=$infra\ngpgcheck=1\nenabled=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-centosofficial\n";
const ROCKY9_REPO: &str = "[baseos]\nname=Rocky Linux $releasever - BaseOS\nmirrorlist=https://mirrors.rockylinux.org/mirrorlist?arch=$basearch&repo=BaseOS-$releasever$rltype\ngpgcheck=1\nenabled=1\ncountme=1\nmetadata_expire=6h\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n";

const EL_PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nbin:x:1:1:bin:/bin:/sbin/nologin\ndaemon:x:2:2:daemon:/sbin:/sbin/nologin\nadm:x:3:4:adm:/var/adm:/sbin/nologin\nlp:x:4:7:lp:/var/spool/lpd:/sbin/nologin\nsync:x:5:0:sync:/sbin:/bin/sync\nshutdown:x:6:0:shutdown:/sbin:/sbin/shutdown\nhalt:x:7:0:halt:/sbin:/sbin/halt\nmail:x:8:12:mail:/var/spool/mail:/sbin/nologin\noperator:x:11:0:operator:/root:/sbin/nologin\ngames:x:12:100:games:/usr/games:/sbin/nologin\nftp:x:14:50:FTP User:/var/ftp:/sbin/nologin\nnobody:x:65534:65534:Kernel Overflow User:/:/sbin/nologin\n";
const EL_GROUP: &str = "root:x:0:\nbin:x:1:\ndaemon:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\nlp:x:7:\nmem:x:8:\nkmem:x:9:\nwheel:x:10:\ncdrom:x:11:\nmail:x:12:\nman:x:15:\ndialout:x:18:\nfloppy:x:19:\ngames:x:20:\ntape:x:33:\nvideo:x:39:\nftp:x:50:\nlock:x:54:\naudio:x:63:\nusers:x:100:\nnobody:x:65534:\n";

/// Sonames whose versioned Provides the `glibc` stand-in copies from Debian's real libraries.
const GLIBC_LIBS: [&str; 7] = [
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libresolv.so.2",
    "ld-linux-x86-64.so.2",
];

/// What `elfdeps --provides` reports for the real libc of the Debian 12 base, plus the
/// unversioned soname Provides, `rtld(GNU_HASH)` and `/sbin/ldconfig`.
fn glibc_provides() -> Vec<String> {
    let root = debian::debian12_rootfs();
    let mut input = String::new();
    for l in GLIBC_LIBS {
        input.push_str(&format!("{}\n", root.join("usr/lib/x86_64-linux-gnu").join(l).display()));
    }
    let mut child = Command::new("/usr/lib/rpm/elfdeps")
        .arg("--provides")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run /usr/lib/rpm/elfdeps");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "elfdeps --provides failed");
    let mut v: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    for l in GLIBC_LIBS {
        v.push(format!("{l}()(64bit)"));
    }
    v.extend(["rtld(GNU_HASH)".to_string(), "/sbin/ldconfig".into(), "/usr/sbin/ldconfig".into()]);
    v.sort();
    v.dedup();
    v
}

fn base_specs(kind: BaseKind, debian_root: &Path) -> Vec<SpecDef> {
    let el = kind.el();
    let one = |name: &str, version: &str, release: &str, def: RpmDef| SpecDef {
        name: name.into(),
        version: version.into(),
        release: release.into(),
        license: "Public Domain".into(),
        packages: vec![RpmDef { name: name.into(), ..def }],
    };
    let rel = |r: &str| format!("{r}{}", el.dist());
    // The usrmerge symlinks exactly as the Debian base has them (rpm replaces an identical
    // symlink quietly; a directory in place of a symlink would fail).
    let mut links = Vec::new();
    for l in ["bin", "sbin", "lib", "lib64"] {
        if let Ok(t) = fs::read_link(debian_root.join(l)) {
            links.push((format!("/{l}"), t.to_string_lossy().into_owned()));
        }
    }
    let (rel_pkg, rel_ver, rel_rel, redhat_release, repo_name, repo) = kind.identity();
    // (setup, filesystem, glibc, bash) version-release as the distributions ship them (EL8 and
    // Alinux 3 / EL9 base images); the glibc stand-in's Provides are Debian 12's nonetheless.
    let [setup, filesystem, glibc, bash] = match el {
        El::Al8 | El::El8 => [("2.12.2", "7"), ("3.8", "6"), ("2.28", "225"), ("4.4.20", "4")],
        El::El9 => [("2.13.7", "10"), ("3.16", "2"), ("2.34", "100"), ("5.1.8", "9")],
    };
    vec![
        one("setup", setup.0, &rel(setup.1), RpmDef {
            summary: "A set of system configuration and setup files".into(),
            no_auto: true,
            contents: vec![
                ("/etc/passwd".into(), EL_PASSWD.into(), 0o644),
                ("/etc/group".into(), EL_GROUP.into(), 0o644),
                ("/etc/shadow".into(), EL_PASSWD.lines().map(|l| format!("{}:*::0:99999:7:::\n", l.split(':').next().unwrap())).collect::<String>().into_bytes(), 0o000),
                ("/etc/gshadow".into(), EL_GROUP.lines().map(|l| format!("{}:::\n", l.split(':').next().unwrap())).collect::<String>().into_bytes(), 0o000),
            ],
            config: vec!["/etc/passwd".into(), "/etc/group".into(), "/etc/shadow".into(), "/etc/gshadow".into()],
            ..Default::default()
        }),
        one("filesystem", filesystem.0, &rel(filesystem.1), RpmDef {
            summary: "The basic directory layout for a Linux system".into(),
            no_auto: true,
            requires: vec!["setup".into()],
            dirs: ["/etc", "/etc/yum.repos.d", "/etc/ld.so.conf.d", "/usr", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share", "/usr/share/doc", "/usr/share/man", "/usr/share/man/man1", "/var", "/var/lib"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            symlinks: links,
            ..Default::default()
        }),
        one("glibc", glibc.0, &rel(glibc.1), RpmDef {
            summary: "The GNU libc libraries (erdma-kit stand-in: Debian 12's libc is on disk)".into(),
            no_auto: true,
            requires: vec!["filesystem".into()],
            provides: glibc_provides(),
            contents: vec![
                ("/etc/ld.so.conf".into(), b"include ld.so.conf.d/*.conf\n".to_vec(), 0o644),
                // Debian's ld.so searches only the multiarch and /lib, /usr/lib by default; EL's
                // searches /usr/lib64. This entry (and an ld.so.cache) stands in for that.
                ("/etc/ld.so.conf.d/erdma-kit-lib64.conf".into(), b"/usr/lib64\n".to_vec(), 0o644),
            ],
            config: vec!["/etc/ld.so.conf".into()],
            ghost: vec!["/etc/ld.so.cache".into()],
            // glibc.spec: ldconfig runs once per transaction after libraries were installed.
            scripts: "%post -p /sbin/ldconfig\n%transfiletriggerin -P 2000000 -- /lib /usr/lib /lib64 /usr/lib64\n/sbin/ldconfig\n%transfiletriggerpostun -P 2000000 -- /lib /usr/lib /lib64 /usr/lib64\n/sbin/ldconfig\n".into(),
            ..Default::default()
        }),
        one("bash", bash.0, &rel(bash.1), RpmDef {
            summary: "The GNU Bourne Again shell (erdma-kit stand-in: Debian 12's bash is on disk)".into(),
            no_auto: true,
            requires: vec!["glibc".into()],
            provides: vec!["/bin/sh".into(), "/bin/bash".into(), "/usr/bin/sh".into(), "/usr/bin/bash".into(), format!("config(bash) = {}", bash.0)],
            ..Default::default()
        }),
        one(rel_pkg, rel_ver, rel_rel, RpmDef {
            summary: "Distribution release files (erdma-kit stand-in)".into(),
            no_auto: true,
            provides: vec![
                "system-release".into(),
                format!("system-release(releasever) = {}", kind.releasever()),
                "redhat-release".into(),
                format!("base-module(platform:{}) ", el.key()).trim().to_string(),
            ],
            contents: vec![
                ("/usr/lib/os-release".into(), kind.os_release().as_bytes().to_vec(), 0o644),
                ("/etc/redhat-release".into(), redhat_release.as_bytes().to_vec(), 0o644),
                (format!("/etc/yum.repos.d/{repo_name}"), repo.as_bytes().to_vec(), 0o644),
            ],
            symlinks: vec![
                ("/etc/os-release".into(), "../usr/lib/os-release".into()),
                ("/etc/system-release".into(), "redhat-release".into()),
            ],
            config: vec![format!("/etc/yum.repos.d/{repo_name}")],
            ..Default::default()
        }),
    ]
}

/// The base-system stand-ins of `kind`: `setup` (EL's /etc/passwd, /etc/group), `filesystem`,
/// `glibc` (Provides of Debian's real libc, `/sbin/ldconfig`, ldconfig file trigger), `bash`
/// (`/bin/sh`), and `alinux-release`/`centos-release`/`rocky-release` (os-release,
/// redhat-release, the base repository file, `system-release(releasever)`).
pub fn base_system_rpms(kind: BaseKind) -> Vec<PathBuf> {
    let el = kind.el();
    let root = debian::debian12_rootfs();
    let r2 = root.clone();
    cached_rpms(
        &format!("el-rpms-base-{}", kind.dir_name().split('-').next().unwrap()),
        el,
        move |_| base_specs(kind, &r2),
        &[],
    )
}

// ---------------------------------------------------------------------------------------------
// Base images with a real rpm database.

/// Whether the bases can be built here: root, rpm, rpmbuild, dpkg-deb, debootstrap (for the
/// Berkeley DB writer), a Debian mirror, and the Debian 12 base.
pub fn can_build_bases() -> bool {
    super::is_root()
        && ["rpm", "rpmbuild", "dpkg-deb", "debootstrap", "db5.3_verify"]
            .iter()
            .all(|t| super::have(t))
        && debs::can_download()
        && debian::can_build_base()
}

#[track_caller]
pub fn require_bases() -> bool {
    super::require(can_build_bases(), "root, rpm, rpmbuild, debootstrap, db5.3-util, a Debian mirror and a Debian 12 base are needed (run scripts/setup)")
}

/// Whether rpm packages can be built here (rpmbuild, dpkg-deb, a Debian mirror).
pub fn can_build_rpms() -> bool {
    ["rpm", "rpmbuild", "dpkg-deb"].iter().all(|t| super::have(t))
        && debs::can_download()
        && debian::can_build_base()
}

#[track_caller]
pub fn require_rpms() -> bool {
    super::require(can_build_rpms(), "rpm, rpmbuild, dpkg-deb, a Debian mirror and a Debian 12 base are needed (run scripts/setup)")
}

/// A Debian 11 (bullseye) minbase with `rpm` 4.16 (libdb 5.3), cached: the one rpm here that
/// still writes Berkeley DB databases.
pub fn debian11_rpm_root() -> PathBuf {
    debian_rpm_root("bullseye", "debian11-rpm")
}

/// A Debian 12 (bookworm) minbase with `rpm` 4.18, whose rpmdb is SQLite (as EL9's), cached.
pub fn debian12_rpm_root() -> PathBuf {
    debian_rpm_root("bookworm", "debian12-rpm")
}

/// A minbase of `suite` with Debian's `rpm`, cached as `name`.
fn debian_rpm_root(suite: &str, name: &str) -> PathBuf {
    cached_dir(name, |tmp| {
        let mirror = debian::mirror_for_suite(suite)
            .or_else(debian::debian_mirror)
            .expect("no Debian mirror in the host's apt sources");
        let root = tmp.join("rootfs");
        let t0 = Instant::now();
        let out = Command::new("debootstrap")
            .args(["--variant=minbase", "--arch=amd64", "--include=rpm", suite])
            .arg(&root)
            .arg(&mirror)
            .stdin(Stdio::null())
            .output()
            .expect("run debootstrap");
        if !out.status.success() {
            debian::unmount_below(tmp);
            panic!(
                "debootstrap {suite} failed: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        debian::unmount_below(&root);
        let showrc = run_ok(
            "chroot rpm --showrc",
            Command::new("chroot").arg(&root).args(["rpm", "--showrc"]),
        );
        let backend = String::from_utf8_lossy(&showrc)
            .lines()
            .find(|l| l.contains(" _db_backend"))
            .unwrap_or("")
            .to_string();
        let version = run_ok(
            "chroot rpm --version",
            Command::new("chroot").arg(&root).args(["rpm", "--version"]),
        );
        fs::write(
            tmp.join("build-info.json"),
            serde_json::to_vec_pretty(&serde_json::json!({
                "suite": suite,
                "rpm": String::from_utf8_lossy(&version).trim(),
                "db_backend": backend.trim(),
                "seconds": t0.elapsed().as_secs_f64(),
            }))
            .unwrap(),
        )
        .unwrap();
        eprintln!("{name}: debootstrap {suite} with rpm took {:.1?}", t0.elapsed());
    })
    .join("rootfs")
}

/// Installs `rpms` into `root` with Debian 11's rpm 4.16 writing a Berkeley DB rpmdb: `root`
/// is moved into the bullseye tree (same file system), rpm runs chrooted there with
/// `--root /mnt/...`, and `root` is moved back.
fn install_bdb(root: &Path, rpms: &[PathBuf]) -> String {
    let placeholders: Vec<String> = (0..rpms.len()).map(|i| format!("{{{i}}}")).collect();
    let mut args = vec!["-i"];
    args.extend(placeholders.iter().map(String::as_str));
    let out = rpm416(root, &args, rpms);
    super::assert_success("rpm 4.16 (Debian 11) -i with _db_backend bdb", &out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs Debian 11's rpm 4.16 (on libdb 5.3, the Berkeley DB of EL7 and EL8) against `root`
/// with `args` after `--root … --dbpath /var/lib/rpm --define '_db_backend bdb'`: `root` is
/// moved into the bullseye tree for the run and back. Files in `files` are copied into the
/// tree first and their paths (as rpm sees them) replace `{0}`, `{1}`, … in `args`.
pub fn rpm416(root: &Path, args: &[&str], files: &[PathBuf]) -> std::process::Output {
    let bull = debian11_rpm_root();
    let _lock = lock_file(&cache_root().join("debian11-rpm.use.lock"));
    let inner = format!("mnt/erdma-check-{}", std::process::id());
    let inner_files = format!("tmp/erdma-check-files-{}", std::process::id());
    let target = bull.join(&inner);
    let _ = fs::remove_dir_all(&target);
    let _ = fs::remove_dir_all(bull.join(&inner_files));
    fs::create_dir_all(bull.join(&inner_files)).unwrap();
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for (i, f) in files.iter().enumerate() {
        let n = f.file_name().unwrap();
        fs::copy(f, bull.join(&inner_files).join(n)).unwrap();
        let seen = format!("/{inner_files}/{}", n.to_string_lossy());
        for a in args.iter_mut() {
            *a = a.replace(&format!("{{{i}}}"), &seen);
        }
    }
    fs::rename(root, &target)
        .unwrap_or_else(|e| panic!("move {} into the bullseye tree: {e}", root.display()));
    let out = Command::new("chroot")
        .arg(&bull)
        .args([
            "rpm",
            "--root",
            &format!("/{inner}"),
            "--dbpath",
            "/var/lib/rpm",
            "--define",
            "_db_backend bdb",
        ])
        .args(&args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("run chroot rpm");
    fs::rename(&target, root).unwrap();
    let _ = fs::remove_dir_all(bull.join(&inner_files));
    out
}

/// Installs `rpms` into `root` with this machine's rpm (4.18) writing an SQLite rpmdb.
fn install_sqlite(root: &Path, rpms: &[PathBuf]) -> String {
    let out = Command::new("rpm")
        .arg("--root")
        .arg(root)
        .args(["--dbpath", "/var/lib/rpm", "--define", "_db_backend sqlite", "-i"])
        .args(rpms)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("run rpm");
    super::assert_success("rpm 4.18 -i with _db_backend sqlite", &out);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What a Debian 12 minbase loses to become EL-like: dpkg's and apt's state (so nothing looks
/// like Debian), and the files the stand-in packages install (rpm would keep an unowned
/// differing config file and write `.rpmnew` beside it).
const DEBIAN_REMOVE: [&str; 14] = [
    "etc/debian_version",
    "etc/apt",
    "var/lib/apt",
    "var/cache/apt",
    "var/lib/dpkg",
    "var/log/dpkg.log",
    "var/log/apt",
    "etc/passwd",
    "etc/group",
    "etc/shadow",
    "etc/gshadow",
    "etc/ld.so.conf",
    "etc/os-release",
    "usr/lib/os-release",
];

/// The EL-like base of `kind` (OCI layout, tag `latest`), built once and cached. Layer 0 is
/// [`debian::debian12_base`]'s; layer 1 is what became different: Debian's package state
/// removed (whiteouts), the stand-ins (and for OFED kinds the MLNX_OFED-style packages and
/// `libnl3`) installed by real rpm, [`PROVIDER_DIR_LINK`], and the rpmdb (SQLite for EL9,
/// Berkeley DB `Packages` + indexes for EL8/Alinux 3). Read-only: it lives in the shared cache.
pub fn el_base(kind: BaseKind) -> OciFixture {
    let dir = el_base_dir(kind);
    fixture::read_fixture(&dir.join("oci"), fixture::DEFAULT_TAG)
}

/// The root file system [`el_base`]'s layers make (read-only: copy it with `cp -a` to change it).
pub fn el_base_rootfs(kind: BaseKind) -> PathBuf {
    el_base_dir(kind).join("rootfs")
}

fn el_base_dir(kind: BaseKind) -> PathBuf {
    let mut rpms = base_system_rpms(kind);
    if kind.ofed() {
        rpms.push(libnl_rpm(kind.el()));
        rpms.extend(ofed_like_rpms());
    }
    let key = content_key(&[format!("{kind:?}"), DEBIAN_REMOVE.join(",")], &rpms);
    cached_dir(&format!("el-base-{}-{key}", kind.dir_name()), |tmp| build_el_base(kind, &rpms, tmp))
}

fn build_el_base(kind: BaseKind, rpms: &[PathBuf], tmp: &Path) {
    let t0 = Instant::now();
    let base = debian::debian12_base();
    let lower = debian::debian12_rootfs();
    let upper = tmp.join("rootfs");
    run_ok("cp -a (debian12 rootfs)", Command::new("cp").arg("-a").arg(&lower).arg(&upper));
    for rel in DEBIAN_REMOVE {
        let p = upper.join(rel);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&p).unwrap(),
            Ok(_) => fs::remove_file(&p).unwrap(),
            Err(_) => {}
        }
    }
    let (link, target) = PROVIDER_DIR_LINK;
    std::os::unix::fs::symlink(target, upper.join(link)).unwrap();
    if kind.ofed() {
        fs::create_dir_all(upper.join("etc/yum.repos.d")).unwrap();
        fs::write(upper.join(OFED_REPO_FILE), OFED_REPO).unwrap();
    }
    let t1 = Instant::now();
    let log = if kind.sqlite() { install_sqlite(&upper, rpms) } else { install_bdb(&upper, rpms) };
    let install_time = t1.elapsed();
    let dbdir = upper.join("var/lib/rpm");
    if !kind.sqlite() {
        // The environment files of a closed Berkeley DB environment; EL images ship none.
        for e in fs::read_dir(&dbdir).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("__db.") {
                fs::remove_file(e.path()).unwrap();
            }
        }
        run_ok(
            "db5.3_verify Packages",
            Command::new("db5.3_verify").arg("-q").arg(dbdir.join("Packages")),
        );
    } else {
        assert!(dbdir.join("rpmdb.sqlite").is_file(), "no rpmdb.sqlite in {}", dbdir.display());
    }
    let qa = Command::new("rpm")
        .arg("--root")
        .arg(&upper)
        .args([
            "--dbpath",
            "/var/lib/rpm",
            "-qa",
            "--qf",
            "%{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}\\n",
        ])
        .output()
        .unwrap();
    let mut installed: Vec<String> =
        String::from_utf8_lossy(&qa.stdout).lines().map(str::to_string).collect();
    installed.sort();

    let oci = tmp.join("oci");
    let (changed, deleted) = debs::tree_diff(&lower, &upper);
    fixture::init_oci_layout(&oci);
    let bottom = fixture::import_layer(&base, 0, &oci);
    let keep = |rel: &Path, _: &fs::Metadata| changed.contains(rel);
    let top = fixture::tree_layer(&oci, &upper, &keep, &deleted);
    let top_size = top.size;
    fixture::image_from_layers(
        &oci,
        fixture::DEFAULT_TAG,
        vec![bottom, top],
        &[("PATH", debian::DEBIAN_PATH)],
        &["bash"],
    );
    fs::write(
        tmp.join("build-info.json"),
        serde_json::to_vec_pretty(&serde_json::json!({
            "kind": format!("{kind:?}"),
            "backend": if kind.sqlite() { "sqlite (rpm 4.18)" } else { "bdb (Debian 11 rpm 4.16, libdb 5.3)" },
            "installed": installed,
            "rpm_stderr": log,
            "install_seconds": install_time.as_secs_f64(),
            "total_seconds": t0.elapsed().as_secs_f64(),
            "top_layer_size": top_size,
        }))
        .unwrap(),
    )
    .unwrap();
    eprintln!(
        "el_base {kind:?}: {:.1?} (rpm -i {install_time:.1?}, layer 1 {} KiB)",
        t0.elapsed(),
        top_size >> 10
    );
}

// ---------------------------------------------------------------------------------------------
// Signing key and repositories.

/// An RSA key for rpm signatures in its own GNUPGHOME (rpm 4.14 on EL8 verifies RSA and DSA
/// only; [`super::apt_repo::TestKey`] does not expose its GNUPGHOME, which rpmsign needs).
pub struct RpmKey {
    home: tempfile::TempDir,
    fingerprint: String,
}

impl RpmKey {
    pub const UID: &'static str = "erdma-kit test rpm repo (TEST ONLY) <rpm@erdma-kit.invalid>";

    /// A new RSA 3072 signing key (a second or two).
    pub fn generate() -> RpmKey {
        let home = tempfile::Builder::new().prefix("erdma-rpmgpg-").tempdir_in("/tmp").unwrap();
        let mut k = RpmKey { home, fingerprint: String::new() };
        run_ok(
            "gpg --quick-gen-key rsa3072",
            k.gpg().args([
                "--passphrase",
                "",
                "--quick-gen-key",
                Self::UID,
                "rsa3072",
                "sign",
                "never",
            ]),
        );
        let listing = run_ok("gpg --list-keys", k.gpg().args(["--with-colons", "--list-keys"]));
        k.fingerprint = String::from_utf8_lossy(&listing)
            .lines()
            .find_map(|l| l.strip_prefix("fpr:").map(|r| r.trim_matches(':').to_string()))
            .expect("gpg lists a fingerprint");
        k
    }

    fn gpg(&self) -> Command {
        let mut c = Command::new("gpg");
        c.env("GNUPGHOME", self.home.path())
            .args(["--batch", "--yes", "--quiet", "--pinentry-mode", "loopback"])
            .stdin(Stdio::null());
        c
    }

    pub fn gnupghome(&self) -> &Path {
        self.home.path()
    }

    /// 40 upper-case hex digits.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// rpm's name for the key once imported: `gpg-pubkey-<last 8 hex digits, lower case>`.
    pub fn rpm_pubkey_name(&self) -> String {
        format!("gpg-pubkey-{}", self.fingerprint[32..].to_ascii_lowercase())
    }

    pub fn armored_public(&self) -> String {
        String::from_utf8(run_ok(
            "gpg --export --armor",
            self.gpg().args(["--armor", "--export", &self.fingerprint]),
        ))
        .unwrap()
    }

    /// `gpg --armor --detach-sign` (SHA-256), as `repomd.xml.asc`.
    pub fn detach_sign(&self, input: &Path, output: &Path) {
        run_ok(
            "gpg --detach-sign",
            self.gpg()
                .args(["--digest-algo", "SHA256", "--local-user", &self.fingerprint, "--output"])
                .arg(output)
                .args(["--armor", "--detach-sign"])
                .arg(input),
        );
    }

    /// `rpmsign --addsign` (with `--rpmv3` for header+payload signatures as EL8 makes them).
    pub fn sign_rpms(&self, rpms: &[PathBuf], rpmv3: bool) {
        if rpms.is_empty() {
            return;
        }
        let mut c = Command::new("rpmsign");
        c.arg("--addsign");
        if rpmv3 {
            c.arg("--rpmv3");
        }
        // Debian's rpm names /usr/bin/gpg2, which Debian's gnupg no longer ships.
        let gpg = ["/usr/bin/gpg", "/usr/bin/gpg2"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("gpg");
        c.args(["--define", &format!("__gpg {gpg}")])
            .args(["--define", &format!("_gpg_name {}", self.fingerprint)])
            .args(["--define", &format!("_gpg_path {}", self.home.path().display())])
            .args(["--define", "_gpg_digest_algo sha256"])
            .args([
                "--define",
                "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase=",
            ])
            .env("GNUPGHOME", self.home.path())
            .args(rpms);
        run_ok("rpmsign --addsign", &mut c);
    }
}

impl Drop for RpmKey {
    fn drop(&mut self) {
        super::apt_repo::kill_gpg_agent(self.home.path());
    }
}

/// Where a yum repository and its key sit below the served root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpmLayout {
    /// Alibaba Cloud's eRDMA repository (the ECS AI-training-cluster guide):
    /// `erdma/yum/redhat/$releasever/erdma/x86_64/`, key at `erdma/GPGKEY`.
    Alibaba { releasever: String },
    /// NVIDIA's CUDA repository: `compute/cuda/repos/rhel9/x86_64/`, key
    /// `D42D0685.pub` in the same directory.
    Cuda { distro: String },
    /// Everything at the top; key `RPM-GPG-KEY-erdma-kit-test`.
    Flat,
}

impl RpmLayout {
    pub fn alibaba(releasever: &str) -> Self {
        RpmLayout::Alibaba { releasever: releasever.into() }
    }

    pub fn cuda(distro: &str) -> Self {
        RpmLayout::Cuda { distro: distro.into() }
    }

    /// `(repository directory, key file)` relative to the served root.
    pub fn paths(&self) -> (String, String) {
        match self {
            RpmLayout::Alibaba { releasever } => {
                (format!("erdma/yum/redhat/{releasever}/erdma/x86_64"), "erdma/GPGKEY".into())
            }
            RpmLayout::Cuda { distro } => {
                let d = format!("compute/cuda/repos/{distro}/x86_64");
                let k = format!("{d}/D42D0685.pub");
                (d, k)
            }
            RpmLayout::Flat => (String::new(), "RPM-GPG-KEY-erdma-kit-test".into()),
        }
    }
}

/// A signed yum repository under a temporary directory, served on 127.0.0.1 until dropped.
pub struct RpmRepo {
    layout: RpmLayout,
    served: Served,
    www: PathBuf,
    fingerprint: String,
    _tmp: tempfile::TempDir,
}

impl RpmRepo {
    /// Copies `rpms` into the layout's directory, signs each with `key` (`rpmsign --addsign`,
    /// `rpmv3` for header+payload signatures), runs `createrepo_c`, signs `repomd.xml`
    /// (`repodata/repomd.xml.asc`, armoured), writes the public key where the layout keeps it,
    /// and serves the tree.
    pub fn build(layout: RpmLayout, rpms: &[PathBuf], key: &RpmKey, rpmv3: bool) -> RpmRepo {
        let tmp = tempfile::Builder::new().prefix("erdma-rpm-repo-").tempdir().unwrap();
        let www = tmp.path().join("www");
        let (dir, key_rel) = layout.paths();
        let repo_dir = if dir.is_empty() { www.clone() } else { www.join(&dir) };
        fs::create_dir_all(&repo_dir).unwrap();
        let mut copies = Vec::new();
        for r in rpms {
            let to = repo_dir.join(r.file_name().unwrap());
            fs::copy(r, &to).unwrap_or_else(|e| panic!("copy {}: {e}", r.display()));
            fs::set_permissions(&to, fs::Permissions::from_mode(0o644)).unwrap();
            copies.push(to);
        }
        key.sign_rpms(&copies, rpmv3);
        run_ok(
            "createrepo_c",
            Command::new("createrepo_c")
                .args(["--quiet", "--general-compress-type", "gz", "--revision", "1700000000"])
                .arg(&repo_dir),
        );
        let repomd = repo_dir.join("repodata/repomd.xml");
        key.detach_sign(&repomd, &repomd.with_extension("xml.asc"));
        let key_path = www.join(&key_rel);
        fs::create_dir_all(key_path.parent().unwrap()).unwrap();
        fs::write(&key_path, key.armored_public()).unwrap();
        let served = Served::start(&www);
        RpmRepo { layout, served, www, fingerprint: key.fingerprint().to_string(), _tmp: tmp }
    }

    /// `http://127.0.0.1:PORT/erdma/yum/redhat/3/erdma/x86_64` (no trailing slash).
    pub fn url(&self) -> String {
        self.served.url(&self.layout.paths().0).trim_end_matches('/').to_string()
    }

    /// The URL of the armoured public key (`…/erdma/GPGKEY`, `…/D42D0685.pub`).
    pub fn key_url(&self) -> String {
        self.served.url(&self.layout.paths().1)
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn port(&self) -> u16 {
        self.served.port
    }

    /// The repository directory (holding the rpms and `repodata/`).
    pub fn dir(&self) -> PathBuf {
        let d = self.layout.paths().0;
        if d.is_empty() {
            self.www.clone()
        } else {
            self.www.join(d)
        }
    }

    pub fn repodata(&self) -> PathBuf {
        self.dir().join("repodata")
    }

    /// The signed rpm of package `name` (file name `NAME-V-R.ARCH.rpm`).
    pub fn rpm(&self, name: &str) -> PathBuf {
        rpms_in(&self.dir())
            .into_iter()
            .find(|p| rpm_name_of(p) == name)
            .unwrap_or_else(|| panic!("no {name} rpm in {}", self.dir().display()))
    }

    /// The `repodata/*-primary.xml.gz` file.
    pub fn primary(&self) -> PathBuf {
        fs::read_dir(self.repodata())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_string_lossy().ends_with("primary.xml.gz"))
            .expect("primary.xml.gz in repodata")
    }

    /// Flips one bit in the middle of `primary.xml.gz` (same size, wrong checksum).
    pub fn tamper_primary(&self) {
        flip_middle(&self.primary());
    }

    /// Changes the `<revision>` of `repomd.xml`: `repomd.xml.asc` no longer verifies.
    pub fn tamper_repomd(&self) {
        let p = self.repodata().join("repomd.xml");
        let t = fs::read_to_string(&p).unwrap();
        assert!(t.contains("<revision>1700000000</revision>"), "{t}");
        fs::write(
            &p,
            t.replace("<revision>1700000000</revision>", "<revision>1700000001</revision>"),
        )
        .unwrap();
    }

    /// Flips one bit in the middle of the rpm of `name` (its payload digest no longer matches).
    pub fn tamper_rpm(&self, name: &str) {
        flip_middle(&self.rpm(name));
    }

    /// Paths requested with GET, in order (from the server's log).
    pub fn get_paths(&self) -> Vec<String> {
        fs::read_to_string(self.www.with_extension("http.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                l.split_once("\"GET ").map(|(_, r)| r.split(' ').next().unwrap_or("").to_string())
            })
            .collect()
    }
}

/// `NAME` of `NAME-VERSION-RELEASE.ARCH.rpm`.
pub fn rpm_name_of(p: &Path) -> String {
    let f = p.file_name().unwrap().to_string_lossy();
    let stem = f.trim_end_matches(".rpm");
    let parts: Vec<&str> = stem.rsplitn(3, '-').collect();
    parts.last().unwrap().to_string()
}

fn flip_middle(p: &Path) {
    let mut b = fs::read(p).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x01;
    fs::write(p, b).unwrap();
}

/// A dnf configuration confined to `dir`: no host repositories, plugins or cache. Run dnf with
/// `HOME=dir/home` (see [`dnf_command`]): Debian's rpm keeps its database in `~/.rpmdb`
/// (`/usr/lib/rpm/macros`), so `dir/home/.rpmmacros` sets EL's `/var/lib/rpm` and SQLite.
pub fn dnf_conf(dir: &Path) -> PathBuf {
    let p = dir.join("dnf.conf");
    fs::create_dir_all(dir.join("reposdir")).unwrap();
    fs::create_dir_all(dir.join("home")).unwrap();
    fs::write(dir.join("home/.rpmmacros"), "%_dbpath /var/lib/rpm\n%_db_backend sqlite\n").unwrap();
    fs::write(
        &p,
        format!(
            "[main]\ngpgcheck=1\nreposdir={}\nplugins=0\ninstall_weak_deps=0\ncachedir={}\nkeepcache=0\n",
            dir.join("reposdir").display(),
            dir.join("cache").display()
        ),
    )
    .unwrap();
    p
}

/// `dnf -c CONF --installroot ROOT` with `HOME` set as [`dnf_conf`] needs (`conf` is what it
/// returned).
pub fn dnf_command(conf: &Path, root: &Path) -> Command {
    let mut c = Command::new("dnf");
    c.arg("-c")
        .arg(conf)
        .arg("--installroot")
        .arg(root)
        .env("HOME", conf.parent().unwrap().join("home"))
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    c
}
