//! Debian packages for tests: real ones from the machine's Debian mirror (cached), fake ones
//! built with `dpkg-deb` (OFED-style rdma-core builds, NCCL test packages), and an
//! "NGC-like" base image that has the OFED-style builds installed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use super::debian::{self, cache_root, lock_file, run_ok};
use super::fixture::{self, OciFixture};

/// What Alibaba Cloud's eRDMA guide installs on Debian and Ubuntu.
pub const ERDMA_PACKAGES: [&str; 4] =
    ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"];

/// [`ERDMA_PACKAGES`] and what they need that a Debian 12 minbase lacks, in install order:
/// `apt-get install --simulate --no-install-recommends` with the base's dpkg status
/// (`-o Dir::State::status=ROOTFS/var/lib/dpkg/status`) lists exactly these;
/// the self-test `debs_closure_matches_apt` checks it still does. (`adduser`, which
/// `libibverbs1` depends on, is in minbase.) `rdmacm-utils` needs nothing more than
/// `librdmacm1` and `libibverbs1`.
pub const ERDMA_CLOSURE: [&str; 6] = [
    "libnl-3-200",
    "libnl-route-3-200",
    "libibverbs1",
    "ibverbs-providers",
    "ibverbs-utils",
    "librdmacm1",
];

/// Version of the OFED-style (MLNX_OFED 23.07) rdma-core builds [`ofed_fake_debs`] makes.
pub const OFED_VERSION: &str = "2307mlnx47-1.2310036";

/// Whether [`real_debs`] can work here: apt-get and a Debian mirror in the host's sources.
pub fn can_download() -> bool {
    super::have("apt-get") && debian::debian_mirror().is_some()
}

#[track_caller]
pub fn require_download() -> bool {
    super::require(
        can_download(),
        "apt-get and a Debian mirror in /etc/apt/sources.list.d are needed",
    )
}

/// The real `.deb` files of `names` (candidate versions of the host's apt sources), in the
/// order asked, fetched with `apt-get download` into `cache_root()/debs/` and reused from
/// there afterwards (a cached `NAME_*.deb` wins, whatever its version).
pub fn real_debs(names: &[&str]) -> Vec<PathBuf> {
    let dir = cache_root().join("debs");
    fs::create_dir_all(&dir).unwrap();
    let _lock = lock_file(&cache_root().join("debs.lock"));
    let missing: Vec<&str> =
        names.iter().copied().filter(|n| find_cached(&dir, n).is_none()).collect();
    if !missing.is_empty() {
        download(&dir, &missing);
    }
    names
        .iter()
        .map(|n| {
            find_cached(&dir, n).unwrap_or_else(|| {
                panic!("apt-get download gave no {n}_*.deb in {}", dir.display())
            })
        })
        .collect()
}

/// [`real_debs`] of [`ERDMA_CLOSURE`].
pub fn real_debs_closure() -> Vec<PathBuf> {
    real_debs(&ERDMA_CLOSURE)
}

fn find_cached(dir: &Path, name: &str) -> Option<PathBuf> {
    let prefix = format!("{name}_");
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|x| x == "deb")
                && p.file_name().unwrap().to_string_lossy().starts_with(&prefix)
        })
        .collect();
    found.sort();
    found.pop()
}

fn download(dir: &Path, names: &[&str]) {
    let tmp = dir.join(format!("dl.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).unwrap();
    let get = || {
        Command::new("apt-get")
            // The download would otherwise run as `_apt`, which cannot write to a root-owned
            // 0700 directory: it falls back with a notice, this says so up front.
            .args(["-q", "-o", "APT::Sandbox::User=root", "download"])
            .args(names)
            .current_dir(&tmp)
            .stdin(Stdio::null())
            .output()
            .expect("run apt-get download")
    };
    let t0 = Instant::now();
    let mut out = get();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("Unable to locate package")
            || err.contains("has no installation candidate")
            || err.contains("Can't select")
        {
            // The host's index files are missing or stale (scripts/setup refreshes them only
            // when it installs something).
            eprintln!("real_debs: apt-get update, then retrying the download");
            let upd = Command::new("apt-get")
                .args(["-q", "-o", "DPkg::Lock::Timeout=600", "update"])
                .stdin(Stdio::null())
                .output()
                .expect("run apt-get update");
            super::assert_success("apt-get update", &upd);
            out = get();
        }
    }
    super::assert_success(&format!("apt-get download {}", names.join(" ")), &out);
    eprintln!(
        "real_debs: apt-get download of {} package(s) took {:.1?}",
        names.len(),
        t0.elapsed()
    );
    for e in fs::read_dir(&tmp).unwrap().flatten() {
        if e.path().extension().is_some_and(|x| x == "deb") {
            fs::rename(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    let _ = fs::remove_dir_all(&tmp);
}

/// A fake binary package for [`fake_deb`]. Start from `FakeDeb { name, version, ..Default::default() }`.
#[derive(Debug, Clone)]
pub struct FakeDeb<'a> {
    pub name: &'a str,
    pub version: &'a str,
    /// `amd64` by default; `all` for architecture-independent packages.
    pub arch: &'a str,
    /// `same`, `foreign` or `allowed`.
    pub multi_arch: Option<&'a str>,
    pub depends: Option<&'a str>,
    pub recommends: Option<&'a str>,
    pub pre_depends: Option<&'a str>,
    pub provides: Option<&'a str>,
    pub conflicts: Option<&'a str>,
    pub breaks: Option<&'a str>,
    pub replaces: Option<&'a str>,
    /// Defaults to `fake NAME for erdma-kit tests (TEST ONLY)`.
    pub description: Option<&'a str>,
    /// `(path, contents, mode)` as in [`fixture::Entry`]: absolute or relative to `/`; a path
    /// ending in `/` is a directory; mode `0o120000 | perms` makes a symlink to `contents`.
    pub files: Vec<(&'a str, &'a [u8], u32)>,
    /// Body of `DEBIAN/postinst`; `#!/bin/sh\nset -e\n` is put in front unless it starts
    /// with `#!`.
    pub postinst: Option<&'a str>,
    pub prerm: Option<&'a str>,
    /// Absolute paths of files (from `files`) that are conffiles.
    pub conffiles: Vec<&'a str>,
}

impl Default for FakeDeb<'_> {
    fn default() -> Self {
        FakeDeb {
            name: "",
            version: "1.0",
            arch: "amd64",
            multi_arch: None,
            depends: None,
            recommends: None,
            pre_depends: None,
            provides: None,
            conflicts: None,
            breaks: None,
            replaces: None,
            description: None,
            files: Vec::new(),
            postinst: None,
            prerm: None,
            conffiles: Vec::new(),
        }
    }
}

/// Builds `pkg` with `dpkg-deb --build --root-owner-group -Zxz` into
/// `dir/NAME_VERSION_ARCH.deb` (an epoch's `:` written `%3a`, as apt names downloads) and
/// returns that path. `DEBIAN/md5sums` lists the regular files that are not conffiles (as
/// `dh_md5sums` does); `Installed-Size` is computed.
pub fn fake_deb(dir: &Path, pkg: FakeDeb<'_>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    assert!(!pkg.name.is_empty(), "FakeDeb needs a name");
    fs::create_dir_all(dir).unwrap();
    let stage_parent = tempfile::tempdir_in(dir).unwrap();
    let stage = stage_parent.path().join("root");
    let set_mode =
        |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    let mkdirs = |p: &Path| {
        // Parent directories of package contents get 0755, whatever the umask.
        let mut missing = Vec::new();
        let mut a = Some(p);
        while let Some(d) = a {
            if d.exists() {
                break;
            }
            missing.push(d.to_path_buf());
            a = d.parent();
        }
        for d in missing.iter().rev() {
            fs::create_dir(d).unwrap();
            set_mode(d, 0o755);
        }
    };
    mkdirs(&stage.join("DEBIAN"));

    let mut md5sums = String::new();
    let mut size_bytes: u64 = 0;
    for (path, contents, mode) in &pkg.files {
        let rel = path.trim_start_matches("./").trim_start_matches('/');
        let is_dir = rel.ends_with('/');
        let rel = rel.trim_end_matches('/');
        let dest = stage.join(rel);
        if is_dir {
            mkdirs(&dest);
            set_mode(&dest, *mode & 0o7777);
            continue;
        }
        mkdirs(dest.parent().unwrap());
        if mode & 0o170000 == 0o120000 {
            let target = std::str::from_utf8(contents).expect("symlink target is UTF-8");
            std::os::unix::fs::symlink(target, &dest).unwrap();
            continue;
        }
        fs::write(&dest, contents).unwrap();
        set_mode(&dest, *mode & 0o7777);
        size_bytes += contents.len() as u64;
        if !pkg.conffiles.iter().any(|c| c.trim_start_matches('/') == rel) {
            md5sums.push_str(&format!("{}  {rel}\n", md5_hex(contents)));
        }
    }
    for c in &pkg.conffiles {
        assert!(
            stage.join(c.trim_start_matches('/')).is_file(),
            "conffile {c} is not among the files of {}",
            pkg.name
        );
    }

    let mut control = format!(
        "Package: {}\nVersion: {}\nArchitecture: {}\nMaintainer: erdma-kit tests <tests@erdma-kit.invalid>\nInstalled-Size: {}\nSection: libs\nPriority: optional\n",
        pkg.name,
        pkg.version,
        pkg.arch,
        size_bytes.div_ceil(1024).max(1)
    );
    for (field, value) in [
        ("Multi-Arch", pkg.multi_arch),
        ("Pre-Depends", pkg.pre_depends),
        ("Depends", pkg.depends),
        ("Recommends", pkg.recommends),
        ("Provides", pkg.provides),
        ("Conflicts", pkg.conflicts),
        ("Breaks", pkg.breaks),
        ("Replaces", pkg.replaces),
    ] {
        if let Some(v) = value {
            control.push_str(&format!("{field}: {v}\n"));
        }
    }
    let default_desc = format!("fake {} for erdma-kit tests (TEST ONLY)", pkg.name);
    control.push_str(&format!("Description: {}\n", pkg.description.unwrap_or(&default_desc)));
    let debian = stage.join("DEBIAN");
    fs::write(debian.join("control"), control).unwrap();
    set_mode(&debian.join("control"), 0o644);
    if !md5sums.is_empty() {
        fs::write(debian.join("md5sums"), md5sums).unwrap();
        set_mode(&debian.join("md5sums"), 0o644);
    }
    if !pkg.conffiles.is_empty() {
        let list: String =
            pkg.conffiles.iter().map(|c| format!("/{}\n", c.trim_start_matches('/'))).collect();
        fs::write(debian.join("conffiles"), list).unwrap();
        set_mode(&debian.join("conffiles"), 0o644);
    }
    for (name, body) in [("postinst", pkg.postinst), ("prerm", pkg.prerm)] {
        if let Some(body) = body {
            let script = if body.starts_with("#!") {
                body.to_string()
            } else {
                format!("#!/bin/sh\nset -e\n{body}")
            };
            fs::write(debian.join(name), script).unwrap();
            set_mode(&debian.join(name), 0o755);
        }
    }
    set_mode(&stage, 0o755);

    let file = format!("{}_{}_{}.deb", pkg.name, pkg.version.replace(':', "%3a"), pkg.arch);
    let out = dir.join(file);
    run_ok(
        "dpkg-deb --build",
        Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group", "-Zxz"])
            .arg(&stage)
            .arg(&out),
    );
    out
}

fn md5_hex(bytes: &[u8]) -> String {
    use md5::{Digest, Md5};
    hex::encode(Md5::digest(bytes))
}

/// OFED-style (MLNX_OFED 23.07 for x86_64) builds of `libibverbs1` and `ibverbs-providers`,
/// version [`OFED_VERSION`], written into `dir`. Their libraries are text placeholders, not
/// ELF files (so `ldconfig` leaves them out of `ld.so.cache`; the symlinks are in the
/// packages); the control fields follow Mellanox's packages (Multi-Arch: same, the provider
/// package providing and replacing the old per-driver packages).
pub fn ofed_fake_debs(dir: &Path) -> Vec<PathBuf> {
    const LIB: &str = "/usr/lib/x86_64-linux-gnu";
    let verbs_so = format!("{LIB}/libibverbs.so.1.14.47.0");
    let verbs_link = format!("{LIB}/libibverbs.so.1");
    let verbs_content =
        format!("OFED-style libibverbs {OFED_VERSION} (erdma-kit test placeholder)\n");
    let libibverbs1 = fake_deb(
        dir,
        FakeDeb {
            name: "libibverbs1",
            version: OFED_VERSION,
            multi_arch: Some("same"),
            depends: Some("libc6 (>= 2.34), libnl-3-200 (>= 3.2.7), libnl-route-3-200 (>= 3.2.7)"),
            description: Some("Library for direct userspace use of RDMA (InfiniBand/iWARP) (OFED-style fake, TEST ONLY)"),
            files: vec![
                (verbs_so.as_str(), verbs_content.as_bytes(), 0o644),
                (verbs_link.as_str(), b"libibverbs.so.1.14.47.0", 0o120777),
                (
                    "/usr/share/doc/libibverbs1/README.erdma-kit-test",
                    b"OFED-style fake package for erdma-kit tests\n",
                    0o644,
                ),
            ],
            ..Default::default()
        },
    );
    let mlx5_so = format!("{LIB}/libmlx5.so.1.24.47.0");
    let mlx5_link = format!("{LIB}/libmlx5.so.1");
    let mlx5_provider = format!("{LIB}/libibverbs/libmlx5-rdmav34.so");
    let mlx5_content = format!("OFED-style libmlx5 {OFED_VERSION} (erdma-kit test placeholder)\n");
    let provider_content = "OFED-style mlx5 verbs provider (erdma-kit test placeholder)\n";
    let depends = format!("libc6 (>= 2.34), libibverbs1 (= {OFED_VERSION})");
    let providers = fake_deb(
        dir,
        FakeDeb {
            name: "ibverbs-providers",
            version: OFED_VERSION,
            multi_arch: Some("same"),
            depends: Some(&depends),
            provides: Some("libefa1, libipathverbs1, libmlx4-1, libmlx5-1, libmthca1"),
            breaks: Some(
                "libipathverbs1 (<< 15), libmlx4-1 (<< 15), libmlx5-1 (<< 15), libmthca1 (<< 15)",
            ),
            replaces: Some(
                "libipathverbs1 (<< 15), libmlx4-1 (<< 15), libmlx5-1 (<< 15), libmthca1 (<< 15)",
            ),
            description: Some(
                "User space provider drivers for libibverbs (OFED-style fake, TEST ONLY)",
            ),
            files: vec![
                (mlx5_so.as_str(), mlx5_content.as_bytes(), 0o644),
                (mlx5_link.as_str(), b"libmlx5.so.1.24.47.0", 0o120777),
                (mlx5_provider.as_str(), provider_content.as_bytes(), 0o644),
                ("/etc/libibverbs.d/mlx5.driver", b"driver mlx5\n", 0o644),
            ],
            conffiles: vec!["/etc/libibverbs.d/mlx5.driver"],
            ..Default::default()
        },
    );
    vec![libibverbs1, providers]
}

/// Path and contents of the apt source [`ngc_like_base`] adds. Port 9 (discard) on 127.0.0.1
/// refuses connections: an `apt-get update` that reads every source fails on it, as it would
/// behind a firewall with the real Mellanox repository.
pub const MLNX_SOURCE_PATH: &str = "etc/apt/sources.list.d/mellanox_mlnx_ofed.list";
pub const MLNX_SOURCE: &str =
    "deb [trusted=yes] http://127.0.0.1:9/mlnx_ofed/23.07-0.5.1.2/debian12.1/x86_64 ./\n";

/// Whether [`ngc_like_base`] can run here: a Debian 12 base, root (dpkg runs maintainer
/// scripts chrooted), dpkg-deb, and the real libnl packages.
pub fn can_build_ngc_like() -> bool {
    debian::can_build_base() && super::is_root() && super::have("dpkg-deb") && can_download()
}

#[track_caller]
pub fn require_ngc_like() -> bool {
    super::require(
        can_build_ngc_like(),
        "root, dpkg-deb, a Debian mirror and a Debian 12 base are needed (run scripts/setup)",
    )
}

/// An image like an NGC container as far as RDMA goes, written into the OCI layout `dir`
/// (tag `latest`): layer 0 is [`debian::debian12_base`]'s; layer 1 holds what installing the
/// real `libnl-3-200`/`libnl-route-3-200` and the OFED-style `libibverbs1`/`ibverbs-providers`
/// ([`ofed_fake_debs`]) changed, plus [`MLNX_SOURCE_PATH`].
///
/// How: the cached debootstrap tree is copied (`cp -a`) to a temporary directory,
/// `dpkg --root=COPY -i` installs the packages there (their dpkg database entries, `.list`
/// and `.md5sums` files, `ld.so.cache` and dpkg's log are real), and the layer is the
/// difference between copy and original: new or changed entries (type, mode, owner, size,
/// mtime or symlink target), plus whiteouts for removed ones. Several seconds.
pub fn ngc_like_base(dir: &Path) -> OciFixture {
    let base = debian::debian12_base();
    let lower = debian::debian12_rootfs();
    let libnl = real_debs(&["libnl-3-200", "libnl-route-3-200"]);
    let work = tempfile::Builder::new().prefix("erdma-ngc-like-").tempdir().unwrap();
    let fakes = ofed_fake_debs(&work.path().join("debs"));
    let upper = work.path().join("root");
    run_ok("cp -a (debian12 rootfs)", Command::new("cp").arg("-a").arg(&lower).arg(&upper));
    run_ok(
        "dpkg --root -i",
        Command::new("dpkg")
            .arg(format!("--root={}", upper.display()))
            // dpkg 1.21 logs to the host's /var/log/dpkg.log even with --root.
            .arg(format!("--log={}", upper.join("var/log/dpkg.log").display()))
            .args(["--force-unsafe-io", "-i"])
            .args(&libnl)
            .args(&fakes)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    );
    let list = upper.join(MLNX_SOURCE_PATH);
    fs::write(&list, MLNX_SOURCE).unwrap();

    let (changed, deleted) = tree_diff(&lower, &upper);
    fixture::init_oci_layout(dir);
    let bottom = fixture::import_layer(&base, 0, dir);
    let keep = |rel: &Path, _: &fs::Metadata| changed.contains(rel);
    let top = fixture::tree_layer(dir, &upper, &keep, &deleted);
    fixture::image_from_layers(
        dir,
        fixture::DEFAULT_TAG,
        vec![bottom, top],
        &[
            ("PATH", debian::DEBIAN_PATH),
            // NGC images name their MLNX_OFED release in the environment.
            ("MOFED_VERSION", "23.07-0.5.1"),
        ],
        &["bash"],
    )
}

/// Entries of `upper` that are new or differ from `lower` (type, permission bits, owner,
/// size, mtime, symlink target), and the topmost entries of `lower` missing from `upper`.
/// Paths relative to the roots; directories whose contents changed but that did not change
/// themselves are not listed.
pub fn tree_diff(lower: &Path, upper: &Path) -> (std::collections::HashSet<PathBuf>, Vec<PathBuf>) {
    use std::os::unix::fs::MetadataExt;
    let mut changed = std::collections::HashSet::new();
    for (rel, m) in fixture::walk_tree(upper) {
        let differs = match fs::symlink_metadata(lower.join(&rel)) {
            Err(_) => true,
            Ok(l) => {
                l.file_type() != m.file_type()
                    || l.mode() != m.mode()
                    || l.uid() != m.uid()
                    || l.gid() != m.gid()
                    || (!m.is_dir()
                        && (l.len() != m.len()
                            || l.mtime() != m.mtime()
                            || l.mtime_nsec() != m.mtime_nsec()))
                    || (m.file_type().is_symlink()
                        && fs::read_link(lower.join(&rel)).ok()
                            != fs::read_link(upper.join(&rel)).ok())
            }
        };
        if differs {
            changed.insert(rel);
        }
    }
    let mut deleted: Vec<PathBuf> = Vec::new();
    for (rel, _) in fixture::walk_tree(lower) {
        if deleted.iter().any(|d| rel.starts_with(d)) {
            continue;
        }
        if fs::symlink_metadata(upper.join(&rel)).is_err() {
            deleted.push(rel);
        }
    }
    (changed, deleted)
}
