//! EL base images: the base-system stand-ins and EL identities, and the images built from
//! them whose rpm database real rpm wrote (Berkeley DB with rpm 4.16, SQLite with rpm 4.18).
use super::*;

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
    super::super::is_root()
        && ["rpm", "rpmbuild", "dpkg-deb", "debootstrap", "db5.3_verify"]
            .iter()
            .all(|t| super::super::have(t))
        && debs::can_download()
        && debian::can_build_base()
}

#[track_caller]
pub fn require_bases() -> bool {
    super::super::require(can_build_bases(), "root, rpm, rpmbuild, debootstrap, db5.3-util, a Debian mirror and a Debian 12 base are needed (run scripts/setup)")
}

/// Whether rpm packages can be built here (rpmbuild, dpkg-deb, a Debian mirror).
pub fn can_build_rpms() -> bool {
    ["rpm", "rpmbuild", "dpkg-deb"].iter().all(|t| super::super::have(t))
        && debs::can_download()
        && debian::can_build_base()
}

#[track_caller]
pub fn require_rpms() -> bool {
    super::super::require(can_build_rpms(), "rpm, rpmbuild, dpkg-deb, a Debian mirror and a Debian 12 base are needed (run scripts/setup)")
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

/// Copies `tree` ([`debian11_rpm_root`] or [`debian12_rpm_root`]) to `to` with `cp -a`, holding
/// the lock [`rpm416`] holds while another test's root sits inside the bullseye tree (under
/// `/mnt/erdma-check-PID`): a copy taken meanwhile would see that root's files come and go.
pub fn copy_rpm_root(tree: &Path, to: &Path) {
    let _lock = lock_file(&cache_root().join("debian11-rpm.use.lock"));
    super::super::assert_success(
        "cp -a",
        &Command::new("cp").arg("-a").arg(tree).arg(to).output().unwrap(),
    );
}

/// Installs `rpms` into `root` with Debian 11's rpm 4.16 writing a Berkeley DB rpmdb: `root`
/// is moved into the bullseye tree (same file system), rpm runs chrooted there with
/// `--root /mnt/...`, and `root` is moved back.
fn install_bdb(root: &Path, rpms: &[PathBuf]) -> String {
    let placeholders: Vec<String> = (0..rpms.len()).map(|i| format!("{{{i}}}")).collect();
    let mut args = vec!["-i"];
    args.extend(placeholders.iter().map(String::as_str));
    let out = rpm416(root, &args, rpms);
    super::super::assert_success("rpm 4.16 (Debian 11) -i with _db_backend bdb", &out);
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
    super::super::assert_success("rpm 4.18 -i with _db_backend sqlite", &out);
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
