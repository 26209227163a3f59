use super::conf::fnmatch;
use super::elf::Object;
use super::scan::Scan;
use super::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../testdata/ldcache/debian13-hwcaps.ld.so.cache"
));

/// Compat layout, as glibc wrote before 2.33 (testdata/ldcache/README.md).
const COMPAT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../testdata/ldcache/debian11-compat.ld.so.cache"
));

/// `$ERDMA_TEST_CACHE`, else `target/erdma-test-cache`: the debootstrapped roots.
fn test_cache() -> PathBuf {
    match std::env::var_os("ERDMA_TEST_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/erdma-test-cache"),
    }
}

/// The root file system of a debootstrapped test root, when it is there.
fn debian_root(name: &str) -> Option<PathBuf> {
    let root = test_cache().join(name).join("rootfs");
    if root.join("etc/ld.so.cache").is_file() {
        Some(root)
    } else {
        eprintln!("skipped {name}: no {} (the integration tests debootstrap it)", root.display());
        None
    }
}

fn root_user() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        eprintln!("skipped: running ldconfig in a chroot needs root");
    }
    root
}

/// A directory seen as an image root: paths resolve inside it as `ldconfig` in a chroot
/// resolves them.
struct HostRoot {
    root: PathBuf,
}

impl HostRoot {
    /// chroot_canon: the host path of `path`, symlinks followed inside the root.
    fn canon(&self, path: &str) -> Option<PathBuf> {
        let mut todo: Vec<String> =
            path.split('/').filter(|c| !c.is_empty()).rev().map(String::from).collect();
        let mut done: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            if c == "." {
                continue;
            }
            if c == ".." {
                done.pop();
                continue;
            }
            let host = self.host(&done).join(&c);
            let meta = fs::symlink_metadata(&host).ok()?;
            if meta.file_type().is_symlink() {
                hops += 1;
                if hops > 40 {
                    return None;
                }
                let link = fs::read_link(&host).ok()?;
                let link = link.to_str()?;
                if link.starts_with('/') {
                    done.clear();
                }
                todo.extend(link.split('/').filter(|c| !c.is_empty()).rev().map(String::from));
            } else {
                done.push(c);
            }
        }
        Some(self.host(&done))
    }

    fn host(&self, components: &[String]) -> PathBuf {
        let mut p = self.root.clone();
        p.extend(components);
        p
    }

    fn read(&self, path: &str) -> Option<Vec<u8>> {
        let p = self.canon(path)?;
        if p.is_file() {
            fs::read(p).ok()
        } else {
            None
        }
    }

    fn list(&self, dir: &str) -> Vec<DirEntry> {
        let Some(p) = self.canon(dir) else { return Vec::new() };
        let Ok(rd) = fs::read_dir(p) else { return Vec::new() };
        rd.filter_map(|e| {
            let e = e.ok()?;
            let t = e.file_type().ok()?;
            let kind = if t.is_symlink() {
                Kind::Symlink
            } else if t.is_dir() {
                Kind::Dir
            } else if t.is_file() {
                Kind::File
            } else {
                Kind::Other
            };
            Some(DirEntry { name: e.file_name().into_string().ok()?, kind })
        })
        .collect()
    }

    fn resolve(&self, path: &str) -> Option<Resolved> {
        let p = self.canon(path)?;
        Some(Resolved { id: p.to_string_lossy().into_owned(), is_dir: p.is_dir() })
    }

    fn inspect(&self, path: &str, arch: Arch, glibc: Glibc) -> Option<Target> {
        match self.canon(path) {
            None => Some(Target::Missing),
            Some(p) if p.is_dir() => Some(Target::Directory),
            Some(p) => probe(&fs::read(p).ok()?, arch, glibc).map(Target::File),
        }
    }

    fn conf_dirs(&self, glibc: Glibc, arch: Arch) -> Vec<ScanDir> {
        self.conf_dirs_with(glibc, arch, &arch.debian_trusted_dirs())
    }

    fn conf_dirs_with(&self, glibc: Glibc, arch: Arch, trusted: &[String]) -> Vec<ScanDir> {
        conf_dirs(glibc, arch, trusted, |p| self.read(p), |p| self.list(p), |p| self.resolve(p))
            .expect("conf_dirs")
    }

    fn scan(&self, glibc: Glibc, arch: Arch, dir: &ScanDir) -> Scan {
        let listing = self.list(&dir.path);
        scan_dir(glibc, arch, dir, &listing, |name| {
            self.inspect(&format!("{}/{name}", dir.path), arch, glibc)
        })
        .expect("scan_dir")
    }

    /// What `ldconfig` would write for this root, from scratch.
    fn build(&self, glibc: Glibc, arch: Arch, generator: &str) -> Cache {
        let dirs = self.conf_dirs(glibc, arch);
        Cache::build(generator, &dirs, |d| Ok(self.scan(glibc, arch, d).entries)).expect("build")
    }

    fn cache(&self) -> Vec<u8> {
        fs::read(self.root.join("etc/ld.so.cache")).expect("ld.so.cache")
    }
}

/// A real `ldconfig` over a tree: the host's (`-r`), or a static one copied into the tree
/// and run in a chroot.
enum Tool {
    Host,
    Static(PathBuf),
}

impl Tool {
    fn run(&self, tree: &Path) {
        self.run_with(tree, &[]);
    }

    fn run_with(&self, tree: &Path, args: &[&str]) {
        let status = match self {
            Tool::Host => Command::new("/sbin/ldconfig").arg("-r").arg(tree).args(args).status(),
            Tool::Static(binary) => {
                fs::copy(binary, tree.join(".ldconfig")).expect("copy ldconfig");
                let status = Command::new("chroot").arg(tree).arg("/.ldconfig").args(args).status();
                fs::remove_file(tree.join(".ldconfig")).expect("remove ldconfig");
                status
            }
        };
        assert!(status.expect("ldconfig runs").success(), "ldconfig failed");
    }

    /// The host's ldconfig (2.36 on Debian 12) and, when its root is there, Debian 13's.
    fn available() -> Vec<(Tool, &'static str)> {
        let mut tools = Vec::new();
        if Path::new("/sbin/ldconfig").is_file() {
            tools.push((Tool::Host, "host"));
        } else {
            eprintln!("skipped the host's ldconfig: no /sbin/ldconfig");
        }
        if let Some(root) = debian_root("debian13-minbase") {
            tools.push((Tool::Static(root.join("usr/sbin/ldconfig")), "debian13"));
        }
        tools
    }

    /// [`Tool::available`], and Debian 11's ldconfig (glibc 2.31, which writes as glibc did
    /// before 2.33: no extension, strings not merged, `osversion` from the ABI note; Debian
    /// gave it the byte-order flags of 2.33 and the new format by default), with the glibc
    /// release of each.
    fn all() -> Vec<(Tool, &'static str, Glibc)> {
        let mut tools: Vec<(Tool, &'static str, Glibc)> = Tool::available()
            .into_iter()
            .map(|(t, what)| {
                let glibc = if what == "host" { Glibc::V2_36 } else { Glibc::V2_41 };
                (t, what, glibc)
            })
            .collect();
        if let Some(root) = debian_root("debian11-rpm") {
            tools.push((Tool::Static(root.join("sbin/ldconfig")), "debian11", Glibc::V2_31));
        }
        tools
    }
}

const MULTIARCH: &str = "/usr/lib/x86_64-linux-gnu";

/// The host's file behind a soname link of its multiarch directory.
fn host_lib(soname: &str) -> Option<PathBuf> {
    fs::canonicalize(Path::new(MULTIARCH).join(soname)).ok()
}

/// Copies the host's `soname` into `dir` of the tree under its file name, with the soname
/// link when `link`; returns the file name.
fn install(tree: &Path, dir: &str, soname: &str, link: bool) -> String {
    let src = host_lib(soname).expect("host library");
    let file = src.file_name().unwrap().to_str().unwrap().to_string();
    let dest = tree.join(dir.trim_start_matches('/'));
    fs::create_dir_all(&dest).unwrap();
    fs::copy(&src, dest.join(&file)).unwrap();
    if link && file != soname {
        std::os::unix::fs::symlink(&file, dest.join(soname)).unwrap();
    }
    file
}

fn write(tree: &Path, path: &str, text: &str) {
    let p = tree.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// A merged-/usr tree configured as Debian's (`/lib -> usr/lib`, the multiarch
/// ld.so.conf.d files) with zlib and bzip2 in the multiarch directory.
fn debian_like_tree() -> Option<tempfile::TempDir> {
    for soname in ["libz.so.1", "libbz2.so.1.0", "libuuid.so.1", "liblzma.so.5"] {
        if host_lib(soname).is_none() {
            eprintln!("skipped: the host has no {MULTIARCH}/{soname}");
            return None;
        }
    }
    let tree = tempfile::tempdir().unwrap();
    let t = tree.path();
    for d in ["usr/lib/x86_64-linux-gnu", "usr/local/lib", "var/cache/ldconfig", "etc"] {
        fs::create_dir_all(t.join(d)).unwrap();
    }
    std::os::unix::fs::symlink("usr/lib", t.join("lib")).unwrap();
    write(t, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n\n");
    write(t, "/etc/ld.so.conf.d/libc.conf", "# libc default configuration\n/usr/local/lib\n");
    write(
        t,
        "/etc/ld.so.conf.d/x86_64-linux-gnu.conf",
        "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
    );
    install(t, MULTIARCH, "libz.so.1", true);
    std::os::unix::fs::symlink("libz.so.1", t.join("usr/lib/x86_64-linux-gnu/libz.so")).unwrap();
    install(t, MULTIARCH, "libbz2.so.1.0", true);
    Some(tree)
}

#[test]
fn host_cache_round_trips() {
    let Ok(bytes) = fs::read("/etc/ld.so.cache") else {
        eprintln!("skipped: no /etc/ld.so.cache");
        return;
    };
    let cache = Cache::parse_exact(&bytes).expect("the host's cache reads and writes back");
    assert!(!cache.entries().is_empty());
    assert!(cache.glibc().is_some(), "{:?}", cache.generator);
}

#[test]
fn debian_root_caches_round_trip() {
    for (name, glibc) in [
        ("debian12-minbase", Glibc::V2_36),
        ("debian12-minbase-arm64", Glibc::V2_36),
        ("debian13-minbase", Glibc::V2_41),
    ] {
        let Some(root) = debian_root(name) else { continue };
        let bytes = HostRoot { root }.cache();
        let cache = Cache::parse_exact(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(cache.glibc(), Some(glibc), "{name}");
        assert!(cache.entries().iter().any(|e| e.soname == "libc.so.6"), "{name}");
    }
}

#[test]
fn fixture_round_trips() {
    let cache = Cache::parse_exact(FIXTURE).expect("the fixture reads and writes back");
    assert_eq!(cache.glibc(), Some(Glibc::V2_41));
    let paths: Vec<&str> = cache.entries().iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/opt/x/lib/libz.so.1",
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/lib/x86_64-linux-gnu/libz.so",
            "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libv.so.1",
            "/lib/x86_64-linux-gnu/libv.so.1",
            "/lib/x86_64-linux-gnu/libbz2.so.1.0",
        ]
    );
    assert_eq!(cache.entries()[3].hwcap, Hwcap::Subdir { name: "x86-64-v3".into(), isa_level: 2 });
    assert!(cache.entries().iter().all(|e| e.flags == Arch::X86_64.flags() && e.osversion == 0));
    // The unused x86-64-v4 subdirectory's name stays in the string table.
    assert_eq!(cache.extra_strings.iter().collect::<Vec<_>>(), ["x86-64-v4"]);
    let mut without = cache.clone();
    without.extra_strings.clear();
    assert_ne!(without.to_bytes(), FIXTURE);
    assert_eq!(without.remove(|e| e.soname == "libz.so.1"), 2);
    assert_eq!(without.entries().len(), 4);
}

#[test]
fn compat_fixture_round_trips() {
    let cache = Cache::parse_exact(COMPAT).expect("the compat fixture reads and writes back");
    assert!(cache.compat);
    assert_eq!((cache.generator.as_deref(), cache.glibc(), cache.byte_order), (None, None, 2));
    let got: Vec<(&str, &str, u32, &Hwcap)> = cache
        .entries()
        .iter()
        .map(|e| (e.soname.as_str(), e.path.as_str(), e.osversion, &e.hwcap))
        .collect();
    assert_eq!(
        got,
        [
            ("libz.so.1", "/lib64/libz.so.1", 0, &Hwcap::None),
            ("libz.so", "/lib64/libz.so", 0, &Hwcap::None),
            ("libc.so.6", "/lib64/libc.so.6", 0x0003_0200, &Hwcap::None),
            ("libbz2.so.1.0", "/lib64/tls/libbz2.so.1.0", 0, &Hwcap::Legacy(1 << 63)),
        ]
    );
    // The old format's entries: the three outside `tls`, the last twice; then the new format
    // at byte 64, whose strings both point into.
    assert_eq!(le32(COMPAT, 12), Some(4));
    assert_eq!(&COMPAT[64..84], MAGIC_NEW);
    assert_eq!(COMPAT[40..52], COMPAT[52..64]);
    assert_eq!(le32(COMPAT, 20), le32(COMPAT, 64 + HEADER + 4), "libz.so.1's key");
    // Written as 2.28 writes it (byte-order flags 0), it reads back the same.
    let mut el8 = cache.clone();
    el8.byte_order = 0;
    let bytes = el8.to_bytes();
    assert_eq!(bytes[64 + 28], 0);
    assert_eq!(Cache::parse_exact(&bytes), Ok(el8));
    // And without the old format, as 2.32 writes by default.
    let mut new = cache.clone();
    new.compat = false;
    let bytes = new.to_bytes();
    assert!(bytes.starts_with(MAGIC_NEW) && bytes.len() == COMPAT.len() - 64);
    assert_eq!(Cache::parse_exact(&bytes).map(|c| c.entries), Ok(cache.entries));
}

/// Enterprise Linux's built-in directories (`/lib`, `/lib64`, `/libx32` and their `/usr`
/// twins, in that order) over a tree laid out as EL lays out its libraries (`/lib ->
/// usr/lib`, `/lib64 -> usr/lib64`), held against each real tool given those directories in
/// its configuration after the image's own (no Debian directory exists in the tree, so the
/// Debian tool's own built-in ones add nothing): the cache spells `/lib64/…`, and a library
/// in `/usr/lib` comes as `/lib/…` before the same soname in `/lib64`.
#[test]
fn enterprise_linux_directories_as_ldconfig_scans_them() {
    if !root_user() {
        return;
    }
    let trusted = Arch::X86_64.el_trusted_dirs();
    assert_eq!(trusted, ["/lib", "/lib64", "/libx32", "/usr/lib", "/usr/lib64", "/usr/libx32"]);
    for (tool, what, glibc) in Tool::all() {
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        for d in ["usr/lib64", "usr/lib", "etc/ld.so.conf.d", "var/cache/ldconfig", "opt/x"] {
            fs::create_dir_all(t.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("usr/lib", t.join("lib")).unwrap();
        std::os::unix::fs::symlink("usr/lib64", t.join("lib64")).unwrap();
        write(t, "/etc/ld.so.conf", "include ld.so.conf.d/*.conf\n");
        write(t, "/etc/ld.so.conf.d/x.conf", "/opt/x\n");
        write(t, "/etc/oracle.conf", &format!("include /etc/ld.so.conf\n{}\n", trusted.join("\n")));
        for soname in ["libc.so.6", "libz.so.1", "libbz2.so.1.0"] {
            install(t, "/usr/lib64", soname, true);
        }
        install(t, "/usr/lib", "libz.so.1", true);
        install(t, "/opt/x", "libuuid.so.1", true);
        tool.run_with(t, &["-f", "/etc/oracle.conf"]);
        let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
        let parsed = Cache::parse_exact(&real).unwrap_or_else(|e| panic!("{what}: {e}"));
        let root = HostRoot { root: t.to_path_buf() };
        let ours = build_like(&root, &parsed, glibc, &trusted);
        let paths: Vec<&str> = ours.entries().iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/lib/libz.so.1",
                "/lib64/libz.so.1",
                "/opt/x/libuuid.so.1",
                "/lib64/libc.so.6",
                "/lib64/libbz2.so.1.0"
            ],
            "{what}"
        );
        assert_eq!(ours.entries(), parsed.entries(), "{what}");
        assert!(ours.to_bytes() == real, "{what}: the cache differs from ldconfig's");
    }
}

/// What the builds of ldconfig that cannot run here do differently, from their sources.
#[test]
fn enterprise_linux_builds_follow_their_sources() {
    // The generator tells the build: Debian's; Red Hat's (PKGVERSION "(GNU libc) ");
    // a generator naming a release before 2.33 is EL8's backport.
    let g = |s: &str| Glibc::from_generator(s).unwrap();
    let debian = g("ldconfig (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36");
    assert_eq!(debian, Glibc::V2_36);
    let el9 = g("ldconfig (GNU libc) stable release version 2.34");
    assert_eq!(el9, Glibc { minor: 34, build: Build::Other });
    let el8 = g("ldconfig (GNU libc) stable release version 2.28");
    assert_eq!(el8, Glibc { minor: 28, build: Build::El8Backport });
    let upstream32 = Glibc { minor: 32, build: Build::Other };

    // glibc-hwcaps: EL8's backport stores no ISA level; 2.32 reads no glibc-hwcaps at all,
    // and no `ld.so.*` name, which 2.34 reads.
    let dir = ScanDir {
        path: "/usr/lib64/glibc-hwcaps/x86-64-v3".into(),
        hwcaps: Some("x86-64-v3".into()),
    };
    let listing = [DirEntry { name: "libv.so.1".into(), kind: Kind::File }];
    let object = |isa_level| {
        Some(Target::File(Probe::Library(Object {
            soname: Some("libv.so.1".into()),
            flags: 0x0303,
            isa_level,
            osversion: 0,
        })))
    };
    let hwcap = |glibc| {
        scan_dir(glibc, Arch::X86_64, &dir, &listing, |_| object(2)).unwrap().entries[0]
            .hwcap
            .clone()
    };
    assert_eq!(hwcap(el9), Hwcap::Subdir { name: "x86-64-v3".into(), isa_level: 2 });
    assert_eq!(hwcap(el8), Hwcap::Subdir { name: "x86-64-v3".into(), isa_level: 0 });
    let plain = ScanDir { path: "/usr/lib64".into(), hwcaps: None };
    let ld = [DirEntry { name: "ld.so.2".into(), kind: Kind::File }];
    let found =
        |glibc| scan_dir(glibc, Arch::X86_64, &plain, &ld, |_| object(0)).unwrap().entries.len();
    assert_eq!((found(upstream32), found(el9)), (0, 1));

    // Package managers' temporary names: skipped since 2.39, read by Debian's 2.36, and
    // refused for the others (EL8 skips them from 2.28-243, which no cache tells).
    let tmp = [DirEntry { name: "libv.so.1;6543abcd".into(), kind: Kind::File }];
    let scan =
        |glibc| scan_dir(glibc, Arch::X86_64, &plain, &tmp, |_| object(0)).map(|s| s.entries.len());
    assert_eq!(scan(Glibc::V2_41), Ok(0));
    assert_eq!(scan(Glibc::V2_36), Ok(1));
    assert!(matches!(scan(el8), Err(LdCacheError::Unsupported { .. })));
    assert!(matches!(scan(el9), Err(LdCacheError::Unsupported { .. })));
}

#[test]
fn old_format_is_refused() {
    // `ldconfig -c old` of an empty tree: the header alone, no new format after it.
    let mut old = b"ld.so-1.7.0".to_vec();
    old.extend_from_slice(&[0; 5]);
    assert_eq!(Cache::parse(&old), Err(LdCacheError::OldFormat));
    // One old entry, and something other than the new format where it would begin.
    old[12] = 1;
    old.extend_from_slice(&[3, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    old.extend_from_slice(b"libz.so.1\0/usr/lib64/libz.so.1\0");
    assert_eq!(Cache::parse(&old), Err(LdCacheError::OldFormat));
    // The same with the new format at its aligned place: compat, whose extension directory
    // counts from the start of the file, not from the new format's header.
    old.truncate(32);
    old.extend_from_slice(FIXTURE);
    assert!(matches!(Cache::parse(&old), Err(LdCacheError::Malformed(_))));
    assert_eq!(Cache::parse(b"hello"), Err(LdCacheError::NotACache));
}

/// A cache from scratch for `root`, laid out as `like` is (generator, compat, byte order).
fn build_like(root: &HostRoot, like: &Cache, glibc: Glibc, trusted: &[String]) -> Cache {
    let dirs = root.conf_dirs_with(glibc, Arch::X86_64, trusted);
    let mut cache =
        Cache::build("", &dirs, |d| Ok(root.scan(glibc, Arch::X86_64, d).entries)).expect("build");
    cache.generator.clone_from(&like.generator);
    cache.compat = like.compat;
    cache.byte_order = like.byte_order;
    cache
}

/// Both layouts each real tool writes (`-c compat`, `-c new`): compat with the new format
/// after the old one's entries (an odd count, so the last is repeated), and Debian 11's,
/// which writes as glibc did before 2.33. Read back byte for byte, built from scratch, and
/// updated after a package adds libraries (libc with its ABI note among them: `osversion`
/// before 2.36).
#[test]
fn both_layouts_as_ldconfig_writes_them() {
    if !root_user() {
        return;
    }
    let trusted = Arch::X86_64.debian_trusted_dirs();
    for (tool, what, glibc) in Tool::all() {
        for format in ["compat", "new"] {
            let what = format!("{what} -c {format}");
            let Some(tree) = debian_like_tree() else { return };
            let t = tree.path();
            tool.run_with(t, &["-c", format]);
            let bytes = fs::read(t.join("etc/ld.so.cache")).unwrap();
            let base = Cache::parse_exact(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(base.compat, format == "compat", "{what}");
            assert_eq!(base.generator.is_none(), glibc.minor < 33, "{what}");
            assert_eq!(base.entries().len() % 2, 1, "{what}: an odd count, the last repeated");
            let root = HostRoot { root: t.to_path_buf() };
            let rebuilt = build_like(&root, &base, glibc, &trusted);
            assert_eq!(rebuilt.entries(), base.entries(), "{what}");
            assert!(rebuilt.to_bytes() == bytes, "{what}: the rebuilt cache differs");

            // The package: libc (ABI note: Linux 3.2.0) and liblzma into a new directory.
            write(t, "/etc/ld.so.conf.d/x.conf", "/opt/x/lib\n");
            install(t, "/opt/x/lib", "libc.so.6", true);
            install(t, "/opt/x/lib", "liblzma.so.5", true);
            let dirs = root.conf_dirs_with(glibc, Arch::X86_64, &trusted);
            let x = dirs.iter().find(|d| d.path == "/opt/x/lib").expect("configured");
            let mut ours = base.clone();
            ours.add(x, root.scan(glibc, Arch::X86_64, x).entries, &dirs).unwrap();
            tool.run_with(t, &["-c", format]);
            let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
            let parsed = Cache::parse_exact(&real).unwrap_or_else(|e| panic!("{what}: {e}"));
            let libc = parsed.entries().iter().find(|e| e.soname == "libc.so.6").unwrap();
            let abi = if glibc.minor < 36 { 0x0003_0200 } else { 0 };
            assert_eq!(libc.osversion, abi, "{what}");
            assert_eq!(ours.entries(), parsed.entries(), "{what}");
            assert!(ours.to_bytes() == real, "{what}: the updated cache differs from ldconfig's");
        }
    }
}

/// The Debian roots' caches, made by their own ldconfig, are what scanning their
/// directories from scratch gives (arm64 too: no tool runs).
#[test]
fn rebuilt_from_scratch_as_ldconfig_wrote_it() {
    for (name, arch) in [
        ("debian12-minbase", "amd64"),
        ("debian12-minbase-arm64", "arm64"),
        ("debian13-minbase", "amd64"),
    ] {
        let arch = Arch::from_debian(arch).unwrap();
        let Some(root) = debian_root(name) else { continue };
        let root = HostRoot { root };
        let bytes = root.cache();
        let base = Cache::parse(&bytes).unwrap();
        let glibc = base.glibc().unwrap();
        let rebuilt = root.build(glibc, arch, base.generator.as_deref().unwrap());
        assert_eq!(rebuilt.entries(), base.entries(), "{name}");
        assert!(rebuilt.to_bytes() == bytes, "{name}: the rebuilt cache differs");
    }
}

/// The incremental update of a package install held against the real tool: a new
/// directory through ld.so.conf.d (with a library of the same soname as one in the
/// multiarch directory, which it precedes), a new library in the multiarch directory, and
/// the same soname in the trusted /usr/lib, which comes after it.
#[test]
fn incremental_update_as_ldconfig_writes_it() {
    if !root_user() {
        return;
    }
    for (tool, what) in Tool::available() {
        let Some(tree) = debian_like_tree() else { return };
        let t = tree.path();
        tool.run(t);
        let base = Cache::parse_exact(&fs::read(t.join("etc/ld.so.cache")).unwrap())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let glibc = base.glibc().unwrap();
        let root = HostRoot { root: t.to_path_buf() };
        assert_eq!(root.build(glibc, Arch::X86_64, base.generator.as_deref().unwrap()), base);

        // The "package": /opt/x/lib with libuuid (no soname link: ldconfig makes it) and a
        // libz of its own; liblzma into the multiarch directory; a libz in /usr/lib.
        write(t, "/etc/ld.so.conf.d/x.conf", "/opt/x/lib/\n");
        let uuid = install(t, "/opt/x/lib", "libuuid.so.1", false);
        install(t, "/opt/x/lib", "libz.so.1", true);
        install(t, MULTIARCH, "liblzma.so.5", true);
        install(t, "/usr/lib", "libz.so.1", true);
        let changed: Vec<String> = ["/opt/x/lib", MULTIARCH, "/usr/lib"]
            .iter()
            .map(|d| root.resolve(d).unwrap().id)
            .collect();

        let dirs = root.conf_dirs(glibc, Arch::X86_64);
        let mut ours = base.clone();
        for dir in &dirs {
            if changed.contains(&root.resolve(&dir.path).unwrap().id) {
                let scan = root.scan(glibc, Arch::X86_64, dir);
                if dir.path == "/opt/x/lib" {
                    assert!(scan.links.contains(&("libuuid.so.1".into(), uuid.clone())));
                }
                ours.replace_dir(dir, scan.entries, &dirs).unwrap();
            }
        }
        tool.run(t);
        let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
        let zs: Vec<&str> = ours
            .entries()
            .iter()
            .filter(|e| e.soname == "libz.so.1")
            .map(|e| e.path.as_str())
            .collect();
        assert_eq!(
            zs,
            ["/opt/x/lib/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", "/lib/libz.so.1"]
        );
        assert!(ours.to_bytes() == real, "{what}: the updated cache differs from ldconfig's");
        assert_eq!(fs::read_link(t.join("opt/x/lib/libuuid.so.1")).unwrap(), Path::new(&uuid));
        let again = root.build(glibc, Arch::X86_64, base.generator.as_deref().unwrap());
        assert!(again.to_bytes() == real, "{what}: the rebuilt cache differs from ldconfig's");
    }
}

/// glibc-hwcaps subdirectories (libraries built with an ISA level, an empty one) added to
/// a tree, against the real tool; needs a C compiler.
#[test]
fn hwcaps_subdirectories_as_ldconfig_writes_them() {
    if !root_user() {
        return;
    }
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("skipped: no cc to build libraries with an ISA level");
        return;
    }
    for (tool, what) in Tool::available() {
        let Some(tree) = debian_like_tree() else { return };
        let t = tree.path();
        tool.run(t);
        let base = Cache::parse_exact(&fs::read(t.join("etc/ld.so.cache")).unwrap()).unwrap();
        let glibc = base.glibc().unwrap();
        let root = HostRoot { root: t.to_path_buf() };
        let hw = t.join("usr/lib/x86_64-linux-gnu/glibc-hwcaps");
        fs::create_dir_all(hw.join("x86-64-v4")).unwrap();
        let src = t.join("v.c");
        fs::write(&src, "int v(void) { return 3; }\n").unwrap();
        for (dir, level) in [("x86-64-v3", Some("x86-64-v3")), ("x86-64-v2", None), ("", None)] {
            let out =
                if dir.is_empty() { t.join("usr/lib/x86_64-linux-gnu") } else { hw.join(dir) };
            fs::create_dir_all(&out).unwrap();
            let mut cc = Command::new("cc");
            cc.args(["-shared", "-fPIC", "-Wl,-soname,libv.so.1", "-o"])
                .arg(out.join("libv.so.1.0"));
            if let Some(level) = level {
                cc.arg(format!("-Wl,-z,{level}"));
            }
            assert!(cc.arg(&src).status().unwrap().success());
        }
        fs::remove_file(src).unwrap();
        let dirs = root.conf_dirs(glibc, Arch::X86_64);
        let mut ours = base.clone();
        for dir in dirs.iter().filter(|d| d.hwcaps.is_some() || d.path == "/lib/x86_64-linux-gnu") {
            let scan = root.scan(glibc, Arch::X86_64, dir);
            ours.replace_dir(dir, scan.entries, &dirs).unwrap();
        }
        tool.run(t);
        let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
        let parsed = Cache::parse_exact(&real).unwrap();
        assert!(parsed
            .entries()
            .iter()
            .any(|e| e.hwcap == Hwcap::Subdir { name: "x86-64-v3".into(), isa_level: 2 }
                && e.path.ends_with("/x86-64-v3/libv.so.1.0")));
        assert_eq!(ours.entries(), parsed.entries(), "{what}");
        assert!(ours.to_bytes() == real, "{what}: the cache differs from ldconfig's");
    }
}

/// What a directory may hold besides plain libraries, from scratch against the real tool:
/// a symlink named neither as the soname nor as its `.so` (a "file" that wins by name), two
/// files of one soname, dpkg's temporary name, a dangling link, a linker script, a PIE
/// executable (ET_DYN, no soname), a directory named like a library.
#[test]
fn odd_directory_contents_as_ldconfig() {
    if !root_user() {
        return;
    }
    for (tool, what) in Tool::available() {
        let Some(tree) = debian_like_tree() else { return };
        let t = tree.path();
        write(t, "/etc/ld.so.conf.d/odd.conf", "/opt/odd\n");
        let odd = "/opt/odd";
        let z = install(t, odd, "libz.so.1", true);
        install(t, "/usr/local/lib", "libz.so.1", true);
        let o = t.join("opt/odd");
        std::os::unix::fs::symlink(&z, o.join("libzother.so")).unwrap();
        std::os::unix::fs::symlink("libz.so.1", o.join("libz.so")).unwrap();
        let bz2 = install(t, odd, "libbz2.so.1.0", false);
        fs::copy(o.join(&bz2), o.join("libbz2.so.1.0.10")).unwrap();
        fs::copy(host_lib("libuuid.so.1").unwrap(), o.join("libuuid.so.1.dpkg-new")).unwrap();
        std::os::unix::fs::symlink("libgone.so.1.0", o.join("libgone.so.1")).unwrap();
        fs::write(o.join("libfake.so"), "/* GNU ld script */\nGROUP ( libz.so.1 )\n").unwrap();
        if let Ok(exe) = fs::canonicalize("/usr/bin/true") {
            fs::copy(exe, o.join("libtrue.so.1")).unwrap();
        }
        fs::create_dir(o.join("libdir.so.1")).unwrap();
        let root = HostRoot { root: t.to_path_buf() };
        let dir = ScanDir { path: odd.into(), hwcaps: None };
        let glibc = if what == "host" { Glibc::V2_36 } else { Glibc::V2_41 };
        let scan = root.scan(glibc, Arch::X86_64, &dir);
        assert_eq!(scan.stale, ["libgone.so.1"]);
        assert!(scan.links.contains(&("libbz2.so.1.0".into(), "libbz2.so.1.0.10".into())));
        tool.run(t);
        let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
        let parsed = Cache::parse_exact(&real).unwrap();
        assert_eq!(parsed.glibc(), Some(glibc));
        let ours = root.build(glibc, Arch::X86_64, parsed.generator.as_deref().unwrap());
        assert_eq!(ours.entries(), parsed.entries(), "{what}");
        assert!(ours.to_bytes() == real, "{what}: the cache differs from ldconfig's");
        assert!(fs::symlink_metadata(o.join("libgone.so.1")).is_err(), "ldconfig removes it");
        assert_eq!(fs::read_link(o.join("libbz2.so.1.0")).unwrap(), Path::new("libbz2.so.1.0.10"));
    }
}

#[test]
fn truncated_and_corrupted_caches_are_errors() {
    let mut samples = vec![FIXTURE.to_vec(), COMPAT.to_vec()];
    if let Ok(host) = fs::read("/etc/ld.so.cache") {
        samples.push(host);
    }
    for bytes in &samples {
        for n in 0..bytes.len() {
            assert!(Cache::parse(&bytes[..n]).is_err(), "a cache cut at {n} bytes");
        }
    }
    for bytes in [FIXTURE, COMPAT] {
        for i in 0..bytes.len() {
            for v in [0, 0xff, bytes[i] ^ 0x80, bytes[i].wrapping_add(1)] {
                let mut b = bytes.to_vec();
                b[i] = v;
                if let Ok(cache) = Cache::parse(&b) {
                    cache.to_bytes();
                }
            }
        }
    }
    let with = |at: usize, v: u32| {
        let mut b = FIXTURE.to_vec();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        Cache::parse(&b)
    };
    assert!(matches!(with(20, u32::MAX), Err(LdCacheError::Malformed(_))), "nlibs");
    assert!(matches!(with(24, u32::MAX), Err(LdCacheError::Malformed(_))), "len_strings");
    assert!(matches!(with(32, u32::MAX - 3), Err(LdCacheError::Malformed(_))), "extension");
    assert!(matches!(with(HEADER + 4, u32::MAX), Err(LdCacheError::Malformed(_))), "key");
    assert!(matches!(with(HEADER + 8, 0), Err(LdCacheError::Malformed(_))), "value");
    let ext = le32(FIXTURE, 32).unwrap() as usize;
    assert!(matches!(with(ext + 4, u32::MAX), Err(LdCacheError::Malformed(_))), "sections");
    assert!(matches!(with(ext + 8 + 12, u32::MAX), Err(LdCacheError::Malformed(_))), "size");
    let mut b = FIXTURE.to_vec();
    b[28] = 3;
    assert_eq!(Cache::parse(&b), Err(LdCacheError::ByteOrder(3)));
    // A thousand entries naming one long string: refused before it is copied a thousand
    // times.
    let (n, long) = (1000u32, 10_000);
    let mut b = MAGIC_NEW.to_vec();
    let table = HEADER as u32 + n * ENTRY as u32;
    for v in [n, long + 1, 2, 0, 0, 0, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(b.len(), HEADER);
    for _ in 0..n {
        for v in [0x303, table, table, 0, 0, 0] {
            b.extend_from_slice(&u32::to_le_bytes(v));
        }
    }
    b.resize(b.len() + long as usize, b'x');
    b.push(0);
    assert_eq!(Cache::parse(&b), Err(LdCacheError::Malformed("names repeat beyond reason")));
}

#[test]
fn shared_objects_read_as_ldconfig_reads_them() {
    let Some(path) = host_lib("libz.so.1") else {
        eprintln!("skipped: no host libz");
        return;
    };
    let bytes = fs::read(path).unwrap();
    let want =
        Object { soname: Some("libz.so.1".into()), flags: 0x0303, isa_level: 0, osversion: 0 };
    for glibc in [Glibc::V2_36, Glibc::V2_41] {
        assert_eq!(probe(&bytes, Arch::X86_64, glibc), Some(Probe::Library(want.clone())));
    }
    // Another machine's 64-bit object: skipped by x86's ldconfig, refused for Arm's.
    assert_eq!(probe(&bytes, Arch::Aarch64, Glibc::V2_41), None);
    assert_eq!(
        probe(b"/* GNU ld script */ GROUP ( libc.so.6 )", Arch::X86_64, Glibc::V2_36),
        Some(Probe::Skipped)
    );
    let mut text = b"INPUT(-lz)".to_vec();
    text.resize(200, b' ');
    assert_eq!(probe(&text, Arch::X86_64, Glibc::V2_41), Some(Probe::Skipped));
    let mut elf32 = bytes[..64].to_vec();
    elf32[4] = 1;
    elf32[18] = 3; // EM_386
    assert_eq!(probe(&elf32, Arch::X86_64, Glibc::V2_36), None);
    let mut aout = vec![0u8; 64];
    aout[..2].copy_from_slice(&0o413u16.to_le_bytes());
    assert_eq!(probe(&aout, Arch::X86_64, Glibc::V2_36), None);
    let mut exec = bytes.clone();
    exec[16] = 2; // ET_EXEC
    assert_eq!(probe(&exec, Arch::X86_64, Glibc::V2_36), Some(Probe::Skipped));
    if let Some(arm) = debian_root("debian12-minbase-arm64") {
        let arm = HostRoot { root: arm };
        let bytes = arm.read("/lib/aarch64-linux-gnu/libz.so.1").unwrap();
        let want =
            Object { soname: Some("libz.so.1".into()), flags: 0x0a03, isa_level: 0, osversion: 0 };
        assert_eq!(probe(&bytes, Arch::Aarch64, Glibc::V2_36), Some(Probe::Library(want)));
        assert_eq!(probe(&bytes, Arch::X86_64, Glibc::V2_36), Some(Probe::Skipped));
    }
    // Hostile bytes: cut anywhere, or with bytes changed, never a panic.
    for n in (0..bytes.len()).step_by(7).chain(0..512) {
        probe(&bytes[..n], Arch::X86_64, Glibc::V2_36);
        probe(&bytes[..n], Arch::X86_64, Glibc::V2_41);
    }
    for i in (0..bytes.len().min(64 * 1024)).step_by(3) {
        let mut b = bytes.clone();
        b[i] ^= 0xa5;
        probe(&b, Arch::X86_64, Glibc::V2_36);
        b[i] = 0xff;
        probe(&b, Arch::X86_64, Glibc::V2_41);
    }
}

#[test]
fn include_patterns_match_as_glob() {
    assert!(fnmatch(b"*.conf", b"x86_64-linux-gnu.conf"));
    assert!(!fnmatch(b"*.conf", b".hidden.conf"));
    assert!(!fnmatch(b"*.conf", b"x.conf.bak"));
    assert!(fnmatch(b".*", b".hidden"));
    assert!(fnmatch(b"[a-c]?.c*f", b"b1.conf"));
    assert!(!fnmatch(b"[!a-c]*", b"b"));
    assert!(fnmatch(b"[]x]", b"]"));
    assert!(fnmatch(b"\\*", b"*"));
    assert!(!fnmatch(b"\\*", b"a"));
    assert!(fnmatch(b"a*b*c", b"axxbyyc"));
    assert!(!fnmatch(b"a*b*c", b"axxbyy"));
    assert!(fnmatch(b"[", b"["));
    assert!(fnmatch(b"*", b""));
    // Many stars cost no more than the lengths' product.
    let stars = "*a".repeat(200);
    assert!(!fnmatch(stars.as_bytes(), "a".repeat(199).as_bytes()));
    let mut fs = MemFs::default();
    fs.dirs.insert("/etc".into());
    fs.files.insert("/etc/ld.so.conf".into(), b"include /etc/ld.so.conf\n".to_vec());
    assert!(matches!(fs.conf_dirs(Glibc::V2_41), Err(LdCacheError::Unsupported { .. })));
}

#[test]
fn sonames_sort_as_dl_cache_libcmp() {
    let cmp = |a: &str, b: &str| libcmp(a.as_bytes(), b.as_bytes(), true).signum();
    assert_eq!(cmp("libfoo.so.10", "libfoo.so.9"), 1);
    assert_eq!(cmp("libz.so.1", "libz.so"), 1);
    assert_eq!(cmp("libz.so", "libz.so"), 0);
    assert_eq!(cmp("libfoo.so.01", "libfoo.so.1"), 0);
    assert_eq!(cmp("lib2", "liba"), 1);
    assert_eq!(cmp("libA", "liba"), -1);
    // Bytes over 0x7f: below NUL for a signed char (x86), above for Arm's.
    assert_eq!(libcmp("lib\u{e9}".as_bytes(), b"lib", true).signum(), -1);
    assert_eq!(libcmp("lib\u{e9}".as_bytes(), b"lib", false).signum(), 1);
}

/// An image as a map of files, directories and symlinks.
#[derive(Default)]
struct MemFs {
    files: HashMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
    links: HashMap<String, String>,
}

impl MemFs {
    fn canon(&self, path: &str) -> String {
        let mut out = String::new();
        for c in path.split('/').filter(|c| !c.is_empty()) {
            out = format!("{out}/{c}");
            if let Some(target) = self.links.get(&out) {
                out = target.clone();
            }
        }
        out
    }

    fn list(&self, dir: &str) -> Vec<DirEntry> {
        let dir = self.canon(dir);
        let child = |p: &String| {
            p.strip_prefix(&dir)?.strip_prefix('/').filter(|n| !n.contains('/')).map(String::from)
        };
        let mut out: Vec<DirEntry> = Vec::new();
        for (set, kind) in [
            (self.files.keys().collect::<Vec<_>>(), Kind::File),
            (self.dirs.iter().collect(), Kind::Dir),
            (self.links.keys().collect(), Kind::Symlink),
        ] {
            out.extend(set.into_iter().filter_map(child).map(|name| DirEntry { name, kind }));
        }
        out
    }

    fn conf_dirs(&self, glibc: Glibc) -> Result<Vec<ScanDir>, LdCacheError> {
        conf_dirs(
            glibc,
            Arch::X86_64,
            &Arch::X86_64.debian_trusted_dirs(),
            |p| self.files.get(&self.canon(p)).cloned(),
            |p| self.list(p),
            |p| {
                let id = self.canon(p);
                let is_dir = self.dirs.contains(&id);
                (is_dir || self.files.contains_key(&id)).then_some(Resolved { id, is_dir })
            },
        )
    }
}

#[test]
fn configured_directories_as_ldconfig_reads_them() {
    let mut fs = MemFs::default();
    for d in [
        "/etc",
        "/etc/ld.so.conf.d",
        "/etc/ld.so.conf.d/extra",
        "/usr/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/local/lib",
        "/opt/a",
        "/opt/a/glibc-hwcaps",
        "/opt/a/glibc-hwcaps/x86-64-v3",
        "/opt/a/glibc-hwcaps/.hidden",
        "/opt/b",
        "/opt/c",
        "/opt/d d",
    ] {
        fs.dirs.insert(d.into());
    }
    fs.links.insert("/lib".into(), "/usr/lib".into());
    let mut file = |p: &str, text: &str| fs.files.insert(p.into(), text.as_bytes().to_vec());
    file("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
    file("/etc/ld.so.conf.d/libc.conf", "# libc default configuration\n/usr/local/lib\n");
    file(
        "/etc/ld.so.conf.d/x86_64-linux-gnu.conf",
        "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
    );
    file(
        "/etc/ld.so.conf.d/zz.conf",
        "  /opt/a//  # a comment\n/opt/b=libc6\nHWCAP 1 x\n\t\ninclude extra/*.conf nothing/*.conf\n/opt/d d\n",
    );
    file("/etc/ld.so.conf.d/.hidden.conf", "/opt/c\n");
    file("/etc/ld.so.conf.d/extra/1.conf", "/opt/c\n/usr/local/lib/\n");
    file("/opt/a/glibc-hwcaps/not-a-dir", "");
    let paths = |glibc| -> Vec<String> {
        fs.conf_dirs(glibc).unwrap().into_iter().map(|d| d.path).collect()
    };
    let mut want = vec![
        "/usr/local/lib",
        "/lib/x86_64-linux-gnu",
        "/opt/a",
        "/opt/a/glibc-hwcaps/x86-64-v3",
        "/opt/b",
        "/opt/c",
        "/opt/d d",
        "/lib",
    ];
    assert_eq!(paths(Glibc::V2_36), want);
    want.remove(4); // 2.41 takes `/opt/b=libc6` as the name of a directory
    assert_eq!(paths(Glibc::V2_41), want);
    let dirs = fs.conf_dirs(Glibc::V2_41).unwrap();
    assert_eq!(dirs[3].hwcaps.as_deref(), Some("x86-64-v3"));
    // EL8's backport of 2.33 (a cache whose generator names 2.28) scans glibc-hwcaps and
    // ignores the hwcap line; upstream 2.32 scans no glibc-hwcaps; upstream 2.28 honours the
    // hwcap line, which is refused.
    let el8 = Glibc { minor: 28, build: Build::El8Backport };
    assert_eq!(paths(el8), paths(Glibc::V2_36));
    let mut want32 = paths(Glibc::V2_36);
    want32.retain(|p| !p.contains("glibc-hwcaps"));
    assert_eq!(paths(Glibc { minor: 32, build: Build::Other }), want32);
    let upstream28 = Glibc { minor: 28, build: Build::Other };
    assert!(matches!(fs.conf_dirs(upstream28), Err(LdCacheError::Unsupported { .. })));

    // 2.36 scans legacy hwcap subdirectories, which are refused.
    fs.dirs.insert("/usr/local/lib/tls".into());
    let dir = ScanDir { path: "/usr/local/lib".into(), hwcaps: None };
    let listing = fs.list("/usr/local/lib");
    let scan = |glibc| scan_dir(glibc, Arch::X86_64, &dir, &listing, |_| Some(Target::Directory));
    assert!(matches!(scan(Glibc::V2_36), Err(LdCacheError::Unsupported { .. })));
    assert_eq!(scan(Glibc::V2_41), Ok(Scan::default()));
}

#[test]
fn a_directory_scans_as_search_dir() {
    let lib = |soname: &str| {
        Some(Target::File(Probe::Library(Object {
            soname: Some(soname.into()),
            flags: 0x0303,
            isa_level: 0,
            osversion: 0,
        })))
    };
    let listing = [
        ("libfoo.so.1.2", Kind::File),
        ("libfoo.so.1.10", Kind::File),
        ("libfoo.so.1", Kind::Symlink),
        ("libfoo.so", Kind::Symlink),
        ("libbar.so", Kind::Symlink),
        ("libgone.so.1", Kind::Symlink),
        ("libc.so", Kind::File),
        ("notalib.so.1", Kind::File),
        ("libnew.so.1.dpkg-new", Kind::File),
        ("libdir.so", Kind::Dir),
    ]
    .map(|(name, kind)| DirEntry { name: name.into(), kind });
    let dir = ScanDir { path: "/usr/lib/x86_64-linux-gnu".into(), hwcaps: None };
    let inspect = |name: &str| match name {
        "libfoo.so.1.2" | "libfoo.so.1.10" | "libfoo.so.1" | "libfoo.so" => lib("libfoo.so.1"),
        "libbar.so" => lib("libbaz.so.3"),
        "libnew.so.1.dpkg-new" => lib("libnew.so.1"),
        "libgone.so.1" => Some(Target::Missing),
        "libc.so" => Some(Target::File(Probe::Skipped)),
        other => panic!("{other} is not read by ldconfig"),
    };
    let keys = |scan: &Scan| -> Vec<(String, String)> {
        scan.entries.iter().map(|e| (e.soname.clone(), e.path.clone())).collect()
    };
    let d = "/usr/lib/x86_64-linux-gnu";
    let scan = scan_dir(Glibc::V2_41, Arch::X86_64, &dir, &listing, inspect).unwrap();
    assert_eq!(
        keys(&scan),
        [
            ("libbaz.so.3".to_string(), format!("{d}/libbaz.so.3")),
            ("libfoo.so".into(), format!("{d}/libfoo.so")),
            ("libfoo.so.1".into(), format!("{d}/libfoo.so.1")),
        ]
    );
    assert_eq!(
        scan.links,
        [
            ("libbaz.so.3".to_string(), "libbar.so".to_string()),
            ("libfoo.so.1".into(), "libfoo.so.1.10".into())
        ]
    );
    assert_eq!(scan.stale, ["libgone.so.1"]);
    // 2.36 still reads dpkg's temporary files.
    let scan = scan_dir(Glibc::V2_36, Arch::X86_64, &dir, &listing, inspect).unwrap();
    assert!(scan.entries.iter().any(|e| e.soname == "libnew.so.1"));
}
