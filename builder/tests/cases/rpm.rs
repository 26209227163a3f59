//! The rpm backend end to end: erdma-build against EL-like bases whose rpm database real rpm
//! wrote (Berkeley DB by Debian 11's rpm 4.16 on libdb 5.3, SQLite by rpm 4.18) and signed
//! repositories laid out like Alibaba's eRDMA yum repository, holding rdma-core rpms made from
//! Debian's real binaries (tests/support/rpm_repo/, testdata/rpm/README.md). Every result is
//! checked with the real tools: rpm (-qa, -V, -i on top), dnf, db5.3_verify, Docker.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::text;
use crate::support::rpm_repo::{self, BaseKind, El, RpmKey, RpmLayout, RpmRepo};
use crate::support::{self, fixture::OciFixture};

const SEED_004: [&str; 4] = ["libibverbs", "rdma-core", "librdmacm", "libibverbs-utils"];

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// What a test builds against: the base, the signed eRDMA repository, and a BaseOS-like one
/// with the dependencies (libnl3, pciutils) that the base's own repository would serve.
pub(super) struct Setup {
    pub(super) tmp: tempfile::TempDir,
    base: OciFixture,
    kind: BaseKind,
    erdma: RpmRepo,
    baseos: RpmRepo,
    key_file: PathBuf,
}

impl Setup {
    pub(super) fn new(kind: BaseKind) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let el = kind.el();
        let key = RpmKey::generate();
        let erdma = RpmRepo::build(
            RpmLayout::alibaba(kind.releasever()),
            &rpm_repo::el_rdma_rpms(el),
            &key,
            el.rpmv3_signatures(),
        );
        let baseos = RpmRepo::build(
            RpmLayout::Flat,
            &rpm_repo::el_deps_rpms(el),
            &key,
            el.rpmv3_signatures(),
        );
        let key_file = tmp.path().join("key.asc");
        std::fs::write(&key_file, key.armored_public()).unwrap();
        Setup { base: rpm_repo::el_base(kind), kind, erdma, baseos, key_file, tmp }
    }

    /// The base repository's id in the base's `.repo` file (`--repo ID=URL` points it here).
    fn base_repo_id(&self) -> &'static str {
        match self.kind.el() {
            El::Al8 => "alinux3-os",
            El::El8 | El::El9 => "baseos",
        }
    }

    pub(super) fn args(&self, cmd: &str) -> Vec<String> {
        let k = s(&self.key_file).to_string();
        vec![
            cmd.into(),
            "--json".into(),
            "--base".into(),
            self.base.reference(),
            "--repo".into(),
            format!("erdma={}", self.erdma.url()),
            "--repo".into(),
            format!("{}={}", self.base_repo_id(), self.baseos.url()),
            "--keyring".into(),
            format!("erdma={k}"),
            "--keyring".into(),
            format!("base={k}"),
        ]
    }

    /// `erdma-build build` into an OCI layout; returns the report and the layout.
    pub(super) fn build(&self, extra: &[&str]) -> (Value, PathBuf) {
        let out_dir = self.tmp.path().join("out");
        let mut args = self.args("build");
        args.extend(extra.iter().map(|a| a.to_string()));
        args.extend(["--output".into(), format!("oci:{}:erdma", s(&out_dir))]);
        let out = support::run_build(&args);
        support::assert_success("erdma-build build (rpm)", &out);
        (serde_json::from_slice(&out.stdout).expect("--json report"), out_dir)
    }
}

/// Applies an OCI image's layers (whiteouts included) into a new directory, as a container
/// runtime would: the image's root file system, for rpm and dnf to work on.
fn rootfs_of(layout: &Path, tag: &str, dest: &Path) {
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let desc = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .expect("tag in index");
    let blob = |d: &str| layout.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(blob(desc["digest"].as_str().unwrap())).unwrap())
            .unwrap();
    std::fs::create_dir_all(dest).unwrap();
    for l in manifest["layers"].as_array().unwrap() {
        let path = blob(l["digest"].as_str().unwrap());
        let mt = l["mediaType"].as_str().unwrap();
        let tool = if mt.ends_with("+zstd") {
            "--zstd"
        } else if mt.ends_with("+gzip") {
            "-z"
        } else {
            "--no-auto-compress"
        };
        // Whiteouts first: remove what they name, then extract the rest.
        let list = Command::new("tar").args(["-t", tool, "-f"]).arg(&path).output().unwrap();
        support::assert_success("tar -t", &list);
        for name in text(&list.stdout).lines() {
            let p = Path::new(name.trim_start_matches("./"));
            if let Some(f) =
                p.file_name().and_then(|f| f.to_str()).and_then(|f| f.strip_prefix(".wh."))
            {
                let victim = dest.join(p.parent().unwrap()).join(f);
                let _ = std::fs::remove_dir_all(&victim).or_else(|_| std::fs::remove_file(&victim));
            }
        }
        let out = Command::new("tar")
            .args(["-x", tool, "--numeric-owner", "--same-permissions", "--exclude=.wh.*", "-C"])
            .arg(dest)
            .arg("-f")
            .arg(&path)
            .output()
            .unwrap();
        support::assert_success("tar -x", &out);
    }
}

fn rpm418(root: &Path, args: &[&str]) -> Output {
    Command::new("rpm")
        .arg("--root")
        .arg(root)
        .args(["--dbpath", "/var/lib/rpm"])
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .unwrap()
}

/// rpm as the image's own would run: 4.16 on libdb 5.3 for a Berkeley DB, 4.18 for SQLite.
fn image_rpm(kind: BaseKind, root: &Path, args: &[&str], files: &[PathBuf]) -> Output {
    if kind.sqlite() {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for (i, f) in files.iter().enumerate() {
            for a in all.iter_mut() {
                *a = a.replace(&format!("{{{i}}}"), s(f));
            }
        }
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        rpm418(root, &refs)
    } else {
        rpm_repo::rpm416(root, args, files)
    }
}

/// Every entry under `root`: its type, permission bits, owner, mtime (files), content or link
/// target, and how many names a file has (hard links), by relative path.
fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    support::fixture::walk_tree(root)
        .into_iter()
        .map(|(rel, m)| {
            let kind = if m.is_dir() {
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(root.join(&rel)).unwrap().display())
            } else {
                use sha2::Digest as _;
                format!(
                    "file {} mtime {} names {}",
                    hex::encode(sha2::Sha256::digest(std::fs::read(root.join(&rel)).unwrap())),
                    m.mtime(),
                    m.nlink()
                )
            };
            (rel, format!("{kind} mode {:o} owner {}:{}", m.mode() & 0o7777, m.uid(), m.gid()))
        })
        .collect()
}

fn names(list: &Value) -> Vec<String> {
    list.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect()
}

/// Every file of a Berkeley DB rpm database the build wrote passes `db5.3_verify`, and the
/// environment (`__db.*`) is left for rpm to make.
fn assert_berkeley_db_verifies(db: &Path) {
    for f in std::fs::read_dir(db).unwrap() {
        let f = f.unwrap().path();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("__db") || name.starts_with('.') {
            continue;
        }
        let out = Command::new("db5.3_verify").arg("-q").arg(&f).output().unwrap();
        assert!(
            out.status.success(),
            "db5.3_verify {name}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    assert!(!db.join("__db.001").exists(), "the Berkeley DB environment is left for rpm to make");
}

/// A later install in the image works on the database we wrote: dnf with the repository
/// file the image got (SQLite: this machine's dnf writes SQLite), else the image's rpm.
fn install_on_top(setup: &Setup, kind: BaseKind, r: &Path) {
    if kind.sqlite() && support::have("dnf") {
        let conf = rpm_repo::dnf_conf(&setup.tmp.path().join("dnf"));
        let out = rpm_repo::dnf_command(&conf, r)
            .args([
                "--releasever",
                kind.releasever(),
                "-y",
                "-q",
                "--disablerepo=*",
                "--enablerepo=erdma",
            ])
            .arg(format!("--setopt=reposdir={}", s(&r.join("etc/yum.repos.d"))))
            .arg(format!(
                "--setopt=erdma.gpgkey=file://{}",
                s(&r.join("etc/pki/rpm-gpg/RPM-GPG-KEY-erdma"))
            ))
            .args(["install", "librdmacm-utils"])
            .output()
            .unwrap();
        support::assert_success("dnf --installroot install librdmacm-utils on the result", &out);
    } else {
        let extra = setup.erdma.rpm("librdmacm-utils");
        let out = image_rpm(kind, r, &["-i", "--nosignature", "{0}"], &[extra]);
        support::assert_success("rpm -i librdmacm-utils on top", &out);
    }
}

/// The ECS AI-training-cluster guide's package set from a signed Alibaba-layout repository into EL-like bases, checked
/// with real rpm: the database in the base's own format, `rpm -V` clean, a later `rpm -i` on
/// top, the repository left configured for `yum install`.
fn el_base_gets_erdma(kind: BaseKind) {
    let setup = Setup::new(kind);
    // `plan` resolves against the verified metadata and downloads no package.
    let plan = support::run_build(setup.args("plan"));
    support::assert_success("erdma-build plan (rpm)", &plan);
    let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let planned = names(&plan["images"][0]["packages"]["install"]);
    assert!(
        SEED_004.iter().all(|n| planned.contains(&n.to_string()))
            && plan["images"][0]["layer"].is_null(),
        "{plan}"
    );
    assert!(
        !setup.erdma.get_paths().iter().any(|p| p.ends_with(".rpm")),
        "plan downloads no package"
    );
    let (report, layout) = setup.build(&[]);
    let img = &report["images"][0];
    assert_eq!(
        img["recipe"],
        match kind.el() {
            El::Al8 => "alinux-3",
            El::El8 => "centos-8",
            El::El9 => "rocky-9",
        },
        "{img}"
    );
    let pk = &img["packages"];
    let installed = names(&pk["install"]);
    for want in SEED_004 {
        assert!(installed.contains(&want.to_string()), "{want} not installed: {pk}");
    }
    for p in pk["install"].as_array().unwrap() {
        let origin = p["origin"].as_str().unwrap();
        let from_erdma =
            ["rdma-core", "libibverbs", "librdmacm", "libibverbs-utils", "librdmacm-utils"]
                .contains(&p["name"].as_str().unwrap());
        assert!(
            if from_erdma { origin == "erdma" } else { origin.starts_with("base ") },
            "origin of {p}"
        );
    }
    // Every scriptlet is accounted for: rdma-core's `%post` (`udevadm trigger … || true` under
    // a test) as without effect in an image build, ldconfig (a bare `-p /sbin/ldconfig`, glibc's
    // file trigger) as emulated.
    let scripts = pk["scripts"].as_array().expect("scripts in the report");
    assert!(
        scripts.iter().any(|r| r["package"].as_str().unwrap().starts_with("rdma-core ")
            && r["script"] == "%post"
            && r["detail"].as_str().unwrap().contains("udevadm")),
        "rdma-core's %post is accounted for: {pk}"
    );
    for r in scripts {
        let ldconfig = r["detail"].as_str().unwrap().starts_with("ldconfig")
            || r["detail"].as_str().unwrap().starts_with("/sbin/ldconfig");
        assert_eq!(r["outcome"], if ldconfig { "emulated" } else { "no-effect" }, "{r}");
    }
    assert!(scripts.iter().any(|r| r["outcome"] == "emulated"), "ldconfig runs: {pk}");
    assert!(img["keys"].as_array().unwrap().iter().any(|k| k["repository"] == "erdma"), "{img}");
    // Each run (the plan, the build) asked each repository for its metadata once: what was
    // fetched while the base's layer was read is what the build verified, not fetched again.
    for (name, repo) in [("erdma", &setup.erdma), ("baseos", &setup.baseos)] {
        let paths = repo.get_paths();
        for file in ["repodata/repomd.xml", "repodata/repomd.xml.asc"] {
            let n = paths.iter().filter(|p| p.ends_with(file)).count();
            assert_eq!(n, 2, "{name}: {file} fetched {n} times in two runs: {paths:?}");
        }
    }

    // `check` reads the rpm database for the rdma-core it finds, and sees no Mellanox OFED.
    let check = support::run_build(["check", "--json", &format!("oci:{}:erdma", s(&layout))]);
    let facts: Value = serde_json::from_slice(&check.stdout).unwrap_or_else(|e| {
        panic!("check --json ({e}): {}{}", text(&check.stdout), text(&check.stderr))
    });
    let rdma = serde_json::to_string(&facts).unwrap();
    assert!(
        rdma.contains(&format!("\"libibverbs\":\"{}\"", kind.el().evr())),
        "check names the rpm-installed libibverbs: {rdma}"
    );
    assert!(!rdma.contains("mlnx"), "{rdma}");
    let root = setup.tmp.path().join("root");
    rootfs_of(&layout, "erdma", &root);
    let r = root.as_path();
    // The loader's cache lists the new libraries, as ldconfig reads it.
    let cache = Command::new("/sbin/ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(r.join("etc/ld.so.cache"))
        .output()
        .unwrap();
    support::assert_success("ldconfig -p", &cache);
    for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
        let line = format!("{lib} (libc6,x86-64) => /usr/lib64/{lib}");
        assert!(text(&cache.stdout).contains(&line), "{line}:\n{}", text(&cache.stdout));
    }
    // The database is in the base's format, and real rpm reads it.
    let db = r.join("var/lib/rpm");
    assert_eq!(db.join("rpmdb.sqlite").exists(), kind.sqlite());
    assert_eq!(db.join("Packages").exists(), !kind.sqlite());
    let qa = image_rpm(kind, r, &["-qa", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}\\n"], &[]);
    support::assert_success("rpm -qa", &qa);
    let qa = text(&qa.stdout);
    let evr = kind.el().evr();
    for want in SEED_004 {
        assert!(
            qa.lines().any(|l| l == format!("{want}-{evr}")),
            "{want}-{evr} not in rpm -qa:\n{qa}"
        );
    }
    for base_pkg in ["setup", "glibc", "bash"] {
        assert!(
            qa.lines().any(|l| l.starts_with(&format!("{base_pkg}-"))),
            "the base's {base_pkg} is still there:\n{qa}"
        );
    }
    let verify = image_rpm(
        kind,
        r,
        &["-V", "libibverbs", "rdma-core", "librdmacm", "libibverbs-utils"],
        &[],
    );
    assert!(
        verify.status.success() && verify.stdout.is_empty(),
        "rpm -V: {}{}",
        text(&verify.stdout),
        text(&verify.stderr)
    );
    let requires = image_rpm(kind, r, &["-q", "--requires", "libibverbs-utils"], &[]);
    assert!(
        text(&requires.stdout).lines().any(|l| l.starts_with("libibverbs.so.1()(64bit)")),
        "rpm -q --requires: {}",
        text(&requires.stdout)
    );
    let deps = image_rpm(kind, r, &["-q", "--whatprovides", "libibverbs.so.1()(64bit)"], &[]);
    assert!(
        text(&deps.stdout).starts_with("libibverbs-"),
        "soname provides indexed: {}",
        text(&deps.stdout)
    );
    let owner = image_rpm(kind, r, &["-qf", "/etc/libibverbs.d/erdma.driver"], &[]);
    assert_eq!(text(&owner.stdout).trim(), format!("libibverbs-{evr}.x86_64"));
    assert!(r.join("usr/lib64/libibverbs/liberdma-rdmav34.so").exists(), "the erdma provider");
    if !kind.sqlite() {
        assert_berkeley_db_verifies(&db);
    }
    install_on_top(&setup, kind, r);
    let after = image_rpm(kind, r, &["-q", "librdmacm-utils", "libibverbs"], &[]);
    support::assert_success("rpm -q after rpm -i", &after);
    // The ECS AI-training-cluster guide's repository file, with the key the build verified with.
    let repo = std::fs::read_to_string(r.join("etc/yum.repos.d/erdma.repo")).unwrap();
    assert!(
        repo.contains(&format!("baseurl={}", setup.erdma.url()))
            && repo.contains("gpgcheck=1")
            && repo.contains("gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-erdma"),
        "{repo}"
    );
    let key = std::fs::read_to_string(r.join("etc/pki/rpm-gpg/RPM-GPG-KEY-erdma")).unwrap();
    assert!(key.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----"), "{key}");
}

#[test]
fn rocky9_sqlite_base_gets_erdma_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    el_base_gets_erdma(BaseKind::Rocky9Sqlite);
}

#[test]
fn alinux3_berkeley_db_base_gets_erdma_root_net() {
    if !rpm_repo::require_bases()
        || !support::require(
            support::have("db5.3_verify"),
            "db5.3_verify is needed (run scripts/setup)",
        )
    {
        return;
    }
    el_base_gets_erdma(BaseKind::Alinux3Bdb);
}

#[test]
fn centos8_berkeley_db_base_gets_erdma_root_net() {
    if !rpm_repo::require_bases()
        || !support::require(
            support::have("db5.3_verify"),
            "db5.3_verify is needed (run scripts/setup)",
        )
    {
        return;
    }
    el_base_gets_erdma(BaseKind::Centos8Bdb);
}

/// What erdma-build writes equals what real `rpm -i` of the same packages writes into the same
/// base, followed by the image's ldconfig as glibc's file trigger runs it: every file's type,
/// mode, owner, content and link target (`/etc/ld.so.cache` included), and each package's
/// database entry as `rpm -q --dump` and the header's tags show it (install times aside).
#[test]
fn payload_and_database_equal_real_rpm_install_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    let kind = BaseKind::Rocky9Sqlite;
    let setup = Setup::new(kind);
    // A local package (`--package`, unsigned) with files under /sbin and /lib64, which the base
    // has as symlinks into /usr (merged /usr, as EL9): rpm writes through them.
    let local = local_merged_usr_rpm();
    let (report, layout) = setup.build(&[
        "--package",
        s(&local),
        "--allow-unsigned-package",
        "--install",
        "librdmacm-utils",
    ]);
    assert!(
        names(&report["images"][0]["packages"]["install"]).contains(&"librdmacm-utils".to_string()),
        "--install: {report}"
    );
    assert_eq!(
        report["images"][0]["packages"]["unsigned"][0]["name"], "erdma-local-probe",
        "{report}"
    );
    assert_dated_layer(&layout, &report);
    let ours = setup.tmp.path().join("ours");
    rootfs_of(&layout, "erdma", &ours);
    // The same packages, installed by rpm 4.18 into the base's own tree.
    let theirs = setup.tmp.path().join("theirs");
    rootfs_of(&setup.base.dir, &setup.base.tag, &theirs);
    let files: Vec<PathBuf> = report["images"][0]["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap();
            match p["origin"].as_str().unwrap() {
                "erdma" => setup.erdma.rpm(name),
                o if o.starts_with("unsigned ") => local.clone(),
                _ => setup.baseos.rpm(name),
            }
        })
        .collect();
    let mut args = vec!["-i", "--nosignature", "--noscripts", "--notriggers"];
    let paths: Vec<String> = files.iter().map(|f| s(f).to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    support::assert_success("rpm -i (the reference)", &rpm418(&theirs, &args));
    // glibc's `%transfiletriggerin -- /lib /usr/lib /lib64 /usr/lib64`: `/sbin/ldconfig` in
    // the image (the fixture's is Debian 12's, glibc 2.36).
    let ldconfig = Command::new("chroot").arg(&theirs).arg("/sbin/ldconfig").output().unwrap();
    support::assert_success("ldconfig in the reference", &ldconfig);
    assert!(
        report["images"][0]["packages"]["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.to_string().contains("/etc/ld.so.cache rewritten")),
        "the ldconfig trigger is emulated: {report}"
    );

    let a = tree(&ours);
    let b = tree(&theirs);
    // What running programs leave behind is set aside: the database files themselves (compared
    // through rpm below) and rpm's lock.
    // What is not a package's payload either: the repository file and key the recipe adds.
    // ldconfig's own aux-cache (not written by erdma-build) is set aside too.
    let skip = |p: &Path| {
        p.starts_with("var/lib/rpm")
            || p.starts_with("var/cache/ldconfig")
            || p.starts_with("etc/pki")
            || p == Path::new("etc/yum.repos.d/erdma.repo")
    };
    // A file a program writes (not a package) has the build's epoch as its mtime in a layer,
    // the time it ran on disk: ldconfig's cache.
    let when = |p: &Path, e: &str| {
        let words: Vec<&str> = e.split(' ').collect();
        let generated = p == Path::new("etc/ld.so.cache");
        let keep = |i: usize| !(generated && i > 0 && words[i - 1] == "mtime");
        (0..words.len()).filter(|&i| keep(i)).map(|i| words[i]).collect::<Vec<_>>().join(" ")
    };
    let mut diffs = Vec::new();
    for (p, e) in &b {
        if skip(p) {
            continue;
        }
        match a.get(p) {
            None => diffs.push(format!("missing {}", p.display())),
            Some(o) if when(p, o) != when(p, e) => {
                diffs.push(format!("differs {}: ours {o:?} theirs {e:?}", p.display()))
            }
            _ => {}
        }
    }
    for p in a.keys().filter(|p| !skip(p) && !b.contains_key(*p)) {
        diffs.push(format!("extra {}", p.display()));
    }
    assert!(diffs.is_empty(), "{} differences:\n{}", diffs.len(), diffs.join("\n"));

    // Each package's database entry, as rpm reads it back.
    let qf = "%{NEVRA} %{SIGMD5} %{SHA256HEADER} %{RSAHEADER:pgpsig} %{INSTALLCOLOR} %{SIGSIZE} [%{FILESTATES:fstate} ][%{REQUIRENAME} ]\\n";
    for root in [&ours, &theirs] {
        support::assert_success("rpm -qa", &rpm418(root, &["-qa"]));
    }
    let q = |root: &Path| {
        text(&rpm418(root, &["-qa", "--qf", qf]).stdout)
            .lines()
            .map(String::from)
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(q(&ours), q(&theirs));
    assert!(
        ours.join("usr/sbin/erdma-probe").is_file() && ours.join("sbin").is_symlink(),
        "written through the /sbin symlink, which stays"
    );
    for name in SEED_004.iter().chain(&["erdma-local-probe"]) {
        let dump = |root: &Path| text(&rpm418(root, &["-q", "--dump", name]).stdout);
        assert_eq!(dump(&ours), dump(&theirs), "rpm -q --dump {name}");
    }
}

/// The new layer of an rpm build, which no other build writes alike (the database records
/// each package's install time): compressed in blocks of `SMALL_BLOCK` on every core, each
/// block a gzip member of its own, members that gzip reads back one after the other; and not
/// kept in the cache of compressed layers for a later build.
fn assert_dated_layer(layout: &Path, report: &Value) {
    use std::io::Read as _;
    let digest = report["images"][0]["layer"]["digest"].as_str().unwrap();
    let path = layout.join("blobs/sha256").join(&digest["sha256:".len()..]);
    let blob = std::fs::read(&path).unwrap();
    let (mut tar, mut members, mut rest) = (Vec::new(), 0, &blob[..]);
    while !rest.is_empty() {
        let mut d = flate2::bufread::GzDecoder::new(rest);
        let mut part = Vec::new();
        d.read_to_end(&mut part).unwrap();
        assert!(part.len() <= erdma_oci::gzip::SMALL_BLOCK, "member {members}: {}", part.len());
        tar.extend(part);
        rest = d.into_inner();
        members += 1;
    }
    let gunzip = Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -dc < {} | wc -c", path.display()))
        .output()
        .unwrap();
    assert_eq!(text(&gunzip.stdout).trim(), tar.len().to_string(), "gzip reads it whole");
    let blocks = tar.len().div_ceil(erdma_oci::gzip::SMALL_BLOCK);
    assert!(blocks > 2, "a layer of {} bytes", tar.len());
    assert_eq!(members, blocks, "a member per block");
    let diff_id = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&tar));
    let kept = support::test_cache().join("erdma-build/compressed");
    let names: Vec<String> = std::fs::read_dir(&kept)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with(&diff_id)), "kept: {names:?}");
}

/// An rpm with files under /sbin and /lib64 (paths merged /usr images have as symlinks), and a
/// file with two names (rpm links them: one inode).
fn local_merged_usr_rpm() -> PathBuf {
    let specs = |_: &Path| {
        let p = rpm_repo::RpmDef {
            name: "erdma-local-probe".into(),
            summary: "a local package (TEST ONLY)".into(),
            no_auto: true,
            contents: vec![
                ("/sbin/erdma-probe".into(), b"#!/bin/sh\necho probe\n".to_vec(), 0o755),
                ("/lib64/liberdma-probe.so.1".into(), b"not an ELF".to_vec(), 0o644),
                ("/usr/libexec/erdma-probe/probe".into(), b"#!/bin/sh\necho one\n".to_vec(), 0o755),
            ],
            symlinks: vec![("/lib64/liberdma-probe.so".into(), "liberdma-probe.so.1".into())],
            hardlinks: vec![(
                "/usr/libexec/erdma-probe/probe-again".into(),
                "/usr/libexec/erdma-probe/probe".into(),
            )],
            ..Default::default()
        };
        vec![rpm_repo::SpecDef {
            name: "erdma-local-probe".into(),
            version: "1.0".into(),
            release: "1.el9".into(),
            license: "MIT".into(),
            packages: vec![p],
        }]
    };
    rpm_repo::cached_rpms("local-probe", El::El9, specs, &[]).remove(0)
}

/// Alibaba Cloud Linux 3 with Mellanox OFED's user space: its `58mlnx43` builds are replaced by
/// the eRDMA repository's (older by EVR, as the PAI-DLC eRDMA guide does by hand), its own packages
/// (ofed-scripts, mlnx-ofa_kernel) removed with their files, and its repository file gone.
#[test]
fn ofed_base_loses_mellanox_ofed_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    let kind = BaseKind::Alinux3BdbOfed;
    let setup = Setup::new(kind);
    let (report, layout) = setup.build(&[]);
    let pk = &report["images"][0]["packages"];
    let ibverbs =
        pk["install"].as_array().unwrap().iter().find(|p| p["name"] == "libibverbs").unwrap();
    assert_eq!(ibverbs["action"], "replace", "{pk}");
    assert!(ibverbs["from"].as_str().unwrap().contains("58mlnx43"), "{ibverbs}");
    let removed = names(&pk["remove"]);
    for gone in ["ofed-scripts", "mlnx-ofa_kernel"] {
        assert!(removed.contains(&gone.to_string()), "{gone} removed: {pk}");
    }
    let root = setup.tmp.path().join("root");
    rootfs_of(&layout, "erdma", &root);
    assert!(!root.join(rpm_repo::OFED_REPO_FILE).exists(), "MLNX_OFED's repository file is gone");
    let qa = text(&rpm_repo::rpm416(&root, &["-qa"], &[]).stdout);
    assert!(
        !qa.contains("mlnx") && !qa.contains("ofed-scripts"),
        "no Mellanox build is left:\n{qa}"
    );
    let verify = rpm_repo::rpm416(&root, &["-Va", "--nodeps"], &[]);
    let bad: Vec<&str> = std::str::from_utf8(&verify.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.contains(" /etc/ld.so.cache"))
        .collect();
    assert!(bad.is_empty(), "rpm -Va after replacing OFED:\n{}", bad.join("\n"));
    // OFED's libibverbs.so.1.14.58.0 is whited out; ours is there.
    assert!(!root.join("usr/lib64/libibverbs.so.1.14.58.0").exists());
    assert!(root.join("usr/lib64/libibverbs/liberdma-rdmav34.so").exists());
}

/// A tampered repository stops the build with a clear error, and nothing is written.
#[test]
fn tampered_repositories_fail_with_nothing_written_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    for (what, expect) in [("repomd", "repomd.xml"), ("primary", "checksum"), ("rpm", "librdmacm")]
    {
        let setup = Setup::new(BaseKind::Rocky9Sqlite);
        match what {
            "repomd" => setup.erdma.tamper_repomd(),
            "primary" => setup.erdma.tamper_primary(),
            _ => setup.erdma.tamper_rpm("librdmacm"),
        }
        let out_dir = setup.tmp.path().join("out");
        let mut args = setup.args("build");
        args.extend(["--output".into(), format!("oci:{}:erdma", s(&out_dir))]);
        // Its own cache: a package cached by an earlier build would not be downloaded again.
        let out = Command::new(support::bin())
            .args(&args)
            .env("XDG_CACHE_HOME", setup.tmp.path().join("cache"))
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{what}: the build must fail");
        assert!(err.contains(expect), "{what}: error names it: {err}");
        assert!(!out_dir.exists(), "{what}: nothing written");
    }
}

/// The result runs: `ibv_devices` loads libibverbs and the erdma provider's directory under
/// Docker (no RDMA device here, so it finds none). The fixture bases are Debian user space with
/// EL's layout, and Debian's loader does not search /usr/lib64 by itself as EL's does: it
/// finds the new libraries through the `/etc/ld.so.cache` the build rewrote (the bases
/// configure `/usr/lib64` in `/etc/ld.so.conf.d`), as `ldconfig -p` lists them.
#[test]
fn the_result_runs_ibv_devices_in_docker_root_net() {
    if !rpm_repo::require_bases() || !support::require_docker() {
        return;
    }
    let setup = Setup::new(BaseKind::Alinux3Bdb);
    let archive = setup.tmp.path().join("out.tar");
    let name = format!("erdma-test/alinux3-erdma:{}", std::process::id());
    let mut args = setup.args("build");
    args.extend(["--output".into(), format!("docker-archive:{}:{name}", s(&archive))]);
    support::assert_success("build to docker-archive", &support::run_build(&args));
    let load = Command::new("docker").args(["load", "-q", "-i"]).arg(&archive).output().unwrap();
    support::assert_success("docker load", &load);
    let out = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            &name,
            "sh",
            "-c",
            "ibv_devices 2>&1; echo rc=$?; ls /etc/libibverbs.d/erdma.driver; /sbin/ldconfig -p",
        ])
        .output()
        .unwrap();
    support::docker_rmi(&name);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!all.contains("error while loading shared libraries"), "{all}");
    assert!(
        all.contains("Failed to get IB devices list") || all.contains("No IB devices found"),
        "{all}"
    );
    assert!(all.contains("/etc/libibverbs.d/erdma.driver"), "{all}");
    for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
        assert!(all.contains(&format!("{lib} (libc6,x86-64) => /usr/lib64/{lib}")), "{all}");
    }
}

/// `--nccl` on an rpm image: NVIDIA's `libnccl` build for the image's CUDA major (12.4 here) is
/// chosen among builds for CUDA 11, 12 and 13, and the repository file the image gets keeps a
/// later `dnf upgrade` from swapping it for another major's build: real dnf, reading the result's
/// `/etc/yum.repos.d`, offers only the CUDA 12 builds.
#[test]
fn nccl_for_the_images_cuda_is_held_against_dnf_upgrades_root_net() {
    if !rpm_repo::require_bases()
        || !support::require(support::have("dnf"), "dnf is needed (run scripts/setup)")
    {
        return;
    }
    let setup = Setup::new(BaseKind::Rocky9Sqlite);
    let key = RpmKey::generate();
    let cuda = RpmRepo::build(RpmLayout::cuda("rhel9"), &rpm_repo::nccl_rpms(), &key, false);
    let cuda_key = setup.tmp.path().join("cuda.asc");
    std::fs::write(&cuda_key, key.armored_public()).unwrap();
    let (report, layout) = setup.build(&[
        "--nccl",
        "--nccl-dev",
        "--cuda",
        "12.4",
        "--repo",
        &format!("cuda={}", cuda.url()),
        "--keyring",
        &format!("cuda={}", s(&cuda_key)),
    ]);
    let img = &report["images"][0];
    assert_eq!(img["nccl"]["libnccl2"], "2.21.5-1+cuda12.4", "{img}");
    let install = img["packages"]["install"].as_array().unwrap();
    for name in ["libnccl", "libnccl-devel"] {
        let p = install
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} installed: {install:?}"));
        assert_eq!(
            (p["version"].as_str(), p["origin"].as_str()),
            (Some("2.21.5-1+cuda12.4"), Some("cuda")),
            "{p}"
        );
    }
    let root = setup.tmp.path().join("root");
    rootfs_of(&layout, "erdma", &root);
    assert!(root.join("usr/lib64/libnccl.so.2").is_symlink());
    let repo = std::fs::read_to_string(root.join("etc/yum.repos.d/cuda.repo")).unwrap();
    assert!(
        repo.contains("excludepkgs=")
            && repo.contains("libnccl-*-*+cuda13.*")
            && !repo.contains("+cuda12."),
        "{repo}"
    );
    let conf = rpm_repo::dnf_conf(&setup.tmp.path().join("dnf"));
    let out = rpm_repo::dnf_command(&conf, &root)
        .args(["--releasever", "9", "-q", "--disablerepo=*", "--enablerepo=cuda"])
        .arg(format!("--setopt=reposdir={}", s(&root.join("etc/yum.repos.d"))))
        .args(["list", "--showduplicates", "libnccl"])
        .output()
        .unwrap();
    support::assert_success("dnf list libnccl on the result", &out);
    let listed = text(&out.stdout);
    assert!(
        listed.contains("2.21.5-1+cuda12.4") && listed.contains("2.18.3-1+cuda12.2"),
        "{listed}"
    );
    assert!(
        !listed.contains("+cuda11.") && !listed.contains("+cuda13."),
        "other CUDA majors' builds are excluded:\n{listed}"
    );
}

/// A base repository that cannot be reached (CentOS 8's retired mirrorlist, a VPC-only mirror)
/// does not stop a build by itself: it is skipped with a warning. When resolution then misses a
/// dependency it would have served, the error names it with the hint.
#[test]
fn an_unreachable_base_repository_is_skipped_then_named_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    let setup = Setup::new(BaseKind::Rocky9Sqlite);
    let mut args = setup.args("plan");
    // Nothing listens on port 9 of 127.0.0.1: connection refused, as for a mirror out of reach.
    let i = args.iter().position(|a| a.starts_with("baseos=")).unwrap();
    args[i] = "baseos=http://127.0.0.1:9/".into();
    let out = Command::new(support::bin())
        .args(&args)
        .env("XDG_CACHE_HOME", setup.tmp.path().join("cache"))
        .env("ERDMA_BUILD_RETRY_BACKOFF_MS", "20")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "libnl3 and pciutils come only from the base's repository");
    assert!(
        err.contains("could not be reached")
            && err.contains("baseos")
            && err.contains("--repo ID=URL"),
        "{err}"
    );
    // With those dependencies given as local packages, it plans; the warning is in the report.
    let mut args = args.clone();
    for dep in ["libnl3", "pciutils"] {
        args.extend(["--package".into(), s(&setup.baseos.rpm(dep)).to_string()]);
    }
    args.push("--allow-unsigned-package".into());
    let out = Command::new(support::bin())
        .args(&args)
        .env("XDG_CACHE_HOME", setup.tmp.path().join("cache"))
        .env("ERDMA_BUILD_RETRY_BACKOFF_MS", "20")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    let warnings = serde_json::to_string(&report["images"][0]["warnings"]).unwrap();
    assert!(warnings.contains("base baseos") && warnings.contains("skipped"), "{warnings}");
}

/// A base repository given by a `mirrorlist`, as Rocky's and CentOS's images give theirs: the
/// list is read once and the repository fetched from the mirror it names, once per build (what
/// was fetched while the base's layer was read is what the build verified), and the packages
/// come from it.
#[test]
fn a_base_repository_from_its_mirrorlist_is_read_once_root_net() {
    use crate::support::fixture;
    if !rpm_repo::require_bases() {
        return;
    }
    let setup = Setup::new(BaseKind::Rocky9Sqlite);
    // The list, on 127.0.0.1, naming the BaseOS-like repository; its requests logged.
    let www = setup.tmp.path().join("lists");
    std::fs::create_dir_all(&www).unwrap();
    let body = format!("# the nearest first\n{}\n", setup.baseos.url());
    std::fs::write(www.join("mirrorlist"), body).unwrap();
    let lists = crate::support::apt_repo::Served::start(&www);
    let list = lists.url("mirrorlist?arch=x86_64&repo=BaseOS-9");
    // The base, its BaseOS given by that list ($arch and $releasever as dnf fills them in).
    let dir = setup.tmp.path().join("listed");
    let repo = list.replace("x86_64", "$basearch").replace("BaseOS-9", "BaseOS-$releasever");
    let repo = format!("[baseos]\nname=BaseOS\nmirrorlist={repo}\ngpgcheck=1\nenabled=1\n");
    let mut layers: Vec<_> =
        (0..setup.base.layers.len()).map(|i| fixture::import_layer(&setup.base, i, &dir)).collect();
    layers.push(fixture::entries_layer(
        &dir,
        &[("etc/yum.repos.d/rocky.repo", repo.as_bytes(), 0o644)],
    ));
    let env = fixture::env_of(&setup.base);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let base = fixture::image_from_layers(&dir, fixture::DEFAULT_TAG, layers, &env, &["/bin/bash"]);
    // Without `--repo baseos=URL`: the list says where BaseOS is.
    let mut args = setup.args("build");
    let at = args.iter().position(|a| a.starts_with("baseos=")).unwrap();
    args.drain(at - 1..=at);
    let at = args.iter().position(|a| *a == setup.base.reference()).unwrap();
    args[at] = base.reference();
    args.extend(["--output".into(), format!("oci:{}:erdma", s(&dir.join("out")))]);
    let out = support::run_build(&args);
    support::assert_success("erdma-build build (a mirrorlist)", &out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pk = &report["images"][0]["packages"];
    assert_eq!(pk["repositories"]["base baseos"], setup.baseos.url(), "{pk}");
    let libnl = pk["install"].as_array().unwrap().iter().find(|p| p["name"] == "libnl3");
    assert_eq!(libnl.map(|p| &p["origin"]), Some(&Value::from("base baseos")), "{pk}");
    let log = std::fs::read_to_string(www.with_extension("http.log")).unwrap();
    assert_eq!(log.matches("GET /mirrorlist?").count(), 1, "the mirrorlist, asked for once: {log}");
    let paths = setup.baseos.get_paths();
    for file in ["repodata/repomd.xml", "repodata/repomd.xml.asc"] {
        let n = paths.iter().filter(|p| p.ends_with(file)).count();
        assert_eq!(n, 1, "{file} fetched {n} times: {paths:?}");
    }
}

/// A `%pre` that adds a system user with a home (`useradd -r -m`), which the rpm backend does not
/// emulate: on a base without rpm the sandbox cannot run it and says so; with `--no-sandbox`
/// the build stops before writing anything, naming the package, the scriptlet and the command;
/// `--skip-scripts` builds and lists it as not run. Its `Recommends` are left out and named,
/// or taken with `--install-recommends`.
#[test]
fn a_scriptlet_that_cannot_be_emulated_stops_the_build_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    let setup = Setup::new(BaseKind::Rocky9Sqlite);
    let out_dir = setup.tmp.path().join("refused");
    let mut args = setup.args("build");
    args.extend(
        ["--install", "sysuser-stand-in", "--output", &format!("oci:{}:x", s(&out_dir))]
            .map(String::from),
    );
    // By default the image's rpm would run it in a sandbox; this stand-in base has no rpm.
    let out = support::run_build(&args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let err = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or(&stderr);
    assert!(
        err.starts_with("error: running maintainer scripts in a sandbox (needed for sysuser-stand-in 1.0-1.el9's %pre (`useradd -r -m -g erdmasvc -d /var/lib/erdmasvc -s /sbin/nologin -c erdma-kit test erdmasvc`))"),
        "{err}"
    );
    assert!(
        stderr.contains(&format!("{err}\n  Caused by: the base has no /usr/bin/rpm")),
        "{stderr}"
    );
    assert!(!out_dir.exists(), "nothing written");
    // --no-sandbox: emulate or refuse.
    args.push("--no-sandbox".into());
    let out = support::run_build(&args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let err = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or(&stderr);
    assert!(
        err.starts_with(
            "error: package sysuser-stand-in 1.0-1.el9: its %pre runs `useradd -r -m -g erdmasvc"
        ),
        "{err}"
    );
    let hint = stderr.lines().find(|l| l.starts_with("hint: ")).unwrap_or_default();
    assert!(hint.contains("--skip-scripts"), "{stderr}");
    assert!(!out_dir.exists(), "nothing written");

    let (r, _) = setup.build(&["--no-packages", "--install", "sysuser-stand-in", "--skip-scripts"]);
    let rec = r["images"][0]["packages"]["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["package"] == "sysuser-stand-in 1.0-1.el9")
        .unwrap()
        .clone();
    assert_eq!(rec["outcome"], "not-run", "{rec}");
    assert_eq!(rec["script"], "%pre", "{rec}");
    // Its `Recommends: pciutils`, left out (as install_weak_deps=False) and said so.
    let pk = &r["images"][0]["packages"];
    assert_eq!(
        pk["recommends_left_out"],
        serde_json::json!(["pciutils (recommended by sysuser-stand-in)"]),
        "{pk}"
    );
    assert!(!names(&pk["install"]).contains(&"pciutils".to_string()), "{pk}");
    // --install-recommends takes it, as dnf's default does.
    let (r, _) = setup.build(&[
        "--no-packages",
        "--install",
        "sysuser-stand-in",
        "--skip-scripts",
        "--install-recommends",
    ]);
    let pk = &r["images"][0]["packages"];
    assert!(names(&pk["install"]).contains(&"pciutils".to_string()), "{pk}");
    assert!(pk.get("recommends_left_out").is_none(), "{pk}");
}

/// `/etc/login.defs` with EL9's values for what useradd and groupadd read (shadow-utils'
/// `login.defs`; testdata/rpm/README.md): system ids from 201 to 999, user groups, homes made.
const EL9_LOGIN_DEFS: &str = "UID_MIN 1000\nUID_MAX 60000\nSYS_UID_MIN 201\nSYS_UID_MAX 999\nGID_MIN 1000\nGID_MAX 60000\nSYS_GID_MIN 201\nSYS_GID_MAX 999\nCREATE_HOME yes\nUSERGROUPS_ENAB yes\n";

/// EL9's `/etc/default/useradd` (shadow-utils; testdata/rpm/README.md).
const EL9_USERADD_DEFAULTS: &str = "# useradd defaults file\nGROUP=100\nHOME=/home\nINACTIVE=-1\nEXPIRE=\nSHELL=/bin/bash\nSKEL=/etc/skel\nCREATE_MAIL_SPOOL=yes\n";

/// An EL-like base whose rpm really runs: for EL8, Debian 11's root with its rpm 4.16
/// (Berkeley DB) dressed as CentOS 8; for EL9, Debian 12's with its rpm 4.18 (SQLite) dressed
/// as Rocky 9 (os-release, a BaseOS `.repo`, `%_dbpath /var/lib/rpm` as EL's rpm has it, EL9's
/// `login.defs` and `default/useradd`, an empty rpmdb made by that rpm): a shell,
/// `groupadd`/`useradd` (Debian's shadow) and rpm, which the stand-in EL bases lack. Returns the
/// base and its tree (for the oracle).
fn runnable_el_base(dir: &Path, el: El) -> (OciFixture, PathBuf) {
    let (tree, os_release, name) = match el {
        El::El9 => (rpm_repo::debian12_rpm_root(), rpm_repo::ROCKY9_OS_RELEASE, "Rocky"),
        _ => (rpm_repo::debian11_rpm_root(), rpm_repo::CENTOS8_OS_RELEASE, "CentOS-Linux"),
    };
    let root = dir.join("el-root");
    rpm_repo::copy_rpm_root(&tree, &root);
    for gone in
        ["etc/debian_version", "etc/os-release", "usr/lib/os-release", "var/lib/dpkg", "etc/apt"]
    {
        let p = root.join(gone);
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
    std::fs::write(root.join("etc/os-release"), os_release).unwrap();
    std::fs::create_dir_all(root.join("etc/yum.repos.d")).unwrap();
    std::fs::write(
        root.join(format!("etc/yum.repos.d/{name}-BaseOS.repo")),
        "[baseos]\nname=BaseOS $releasever\nbaseurl=http://baseos.invalid/$releasever/BaseOS/$basearch/os/\ngpgcheck=1\nenabled=1\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("etc/rpm")).unwrap();
    std::fs::write(root.join("etc/rpm/macros"), "%_dbpath /var/lib/rpm\n").unwrap();
    // EL9's shadow-utils settings (testdata/rpm/README.md), which the root's useradd and
    // groupadd read as EL's would.
    std::fs::write(root.join("etc/login.defs"), EL9_LOGIN_DEFS).unwrap();
    std::fs::write(root.join("etc/default/useradd"), EL9_USERADD_DEFAULTS).unwrap();
    support::assert_success(
        "chroot rpm --initdb",
        &Command::new("chroot").arg(&root).args(["rpm", "--initdb"]).output().unwrap(),
    );
    for e in std::fs::read_dir(root.join("var/lib/rpm")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("__db.") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let oci = dir.join("el-oci");
    support::fixture::init_oci_layout(&oci);
    let layer = support::fixture::tree_layer(&oci, &root, &|_, _| true, &[]);
    let img = support::fixture::image_from_layers(&oci, "x", vec![layer], &[], &["bash"]);
    (img, root)
}

/// A `%pre` that adds a system group and a user with a home (`groupadd -r`, `useradd -r -m`: the
/// home is not emulated), on a base whose rpm runs (rpm 4.16 on a Berkeley DB): the image's rpm
/// installs the package in the sandbox, and the result equals real `rpm -U` of the same file in
/// the same root (chrooted): the same `passwd`, `group`, `shadow`, `gshadow`, the package's file,
/// and an rpmdb that `rpm -q` and `rpm -V` accept.
#[test]
fn a_scriptlet_runs_in_the_sandbox_as_rpm_runs_it_root_net() {
    scriptlet_runs_in_the_sandbox(El::El8);
}

/// The same with rpm 4.18 on a SQLite rpmdb (as EL9's).
#[test]
fn a_scriptlet_runs_in_the_sandbox_on_a_sqlite_rpmdb_root_net() {
    scriptlet_runs_in_the_sandbox(El::El9);
}

/// A build with `extra` arguments and `--no-packages` over a runnable EL base in `tmp`, with
/// the fixture repositories (`baseos`, and the recipe's `erdma`, which is added to the image
/// even with --no-packages): the report, the output layout (image `x`), the base's root on
/// disk (for the image's own rpm as the oracle), and the `baseos` repository.
fn build_on_runnable_base(
    tmp: &Path,
    el: El,
    extra: &[&str],
) -> (Value, PathBuf, PathBuf, RpmRepo) {
    let (base, root) = runnable_el_base(tmp, el);
    let key = RpmKey::generate();
    let baseos =
        RpmRepo::build(RpmLayout::Flat, &rpm_repo::el_deps_rpms(el), &key, el.rpmv3_signatures());
    let releasever = if el == El::El9 { "9" } else { "8" };
    let erdma = RpmRepo::build(
        RpmLayout::alibaba(releasever),
        &rpm_repo::el_rdma_rpms(el),
        &key,
        el.rpmv3_signatures(),
    );
    let key_file = tmp.join("key.asc");
    std::fs::write(&key_file, key.armored_public()).unwrap();
    let out_dir = tmp.join("out");
    let mut args: Vec<String> = [
        "build",
        "--json",
        "--base",
        &base.reference(),
        "--no-packages",
        "--no-env-presets",
        "--repo",
        &format!("baseos={}", baseos.url()),
        "--repo",
        &format!("erdma={}", erdma.url()),
        "--keyring",
        &format!("base={}", s(&key_file)),
        "--keyring",
        &format!("erdma={}", s(&key_file)),
        "--output",
        &format!("oci:{}:x", s(&out_dir)),
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    let out = support::run_build(&args);
    support::assert_success(&format!("erdma-build build {}", extra.join(" ")), &out);
    (serde_json::from_slice(&out.stdout).unwrap(), out_dir, root, baseos)
}

/// The oracle of a sandboxed build: the image's own rpm, chrooted into a copy of the base's
/// root, installing `rpm_file` as the sandbox does.
fn chroot_rpm_u(root: &Path, rpm_file: &Path) {
    std::fs::copy(rpm_file, root.join("tmp/oracle.rpm")).unwrap();
    let o = Command::new("chroot")
        .arg(root)
        .args(["rpm", "-U", "--nodeps", "--nosignature", "/tmp/oracle.rpm"])
        .output()
        .unwrap();
    support::assert_success("chroot rpm -U", &o);
    std::fs::remove_file(root.join("tmp/oracle.rpm")).unwrap();
}

fn scriptlet_runs_in_the_sandbox(el: El) {
    if !rpm_repo::require_bases() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, out_dir, root, baseos) =
        build_on_runnable_base(tmp.path(), el, &["--install", "sysuser-stand-in"]);
    let pk = &r["images"][0]["packages"];
    assert!(pk["sandbox"]["because"].as_str().unwrap().contains("useradd -r -m"), "{pk}");
    let rec = pk["scripts"].as_array().unwrap().iter().find(|s| s["script"] == "%pre").unwrap();
    assert_eq!(rec["outcome"], "run", "{rec}");

    chroot_rpm_u(&root, &baseos.rpm("sysuser-stand-in"));

    let ours = tmp.path().join("ours-root");
    rootfs_of(&out_dir, "x", &ours);
    for f in [
        "etc/passwd",
        "etc/group",
        "etc/shadow",
        "etc/gshadow",
        "usr/share/doc/sysuser-stand-in/README",
    ] {
        assert_eq!(
            std::fs::read(ours.join(f)).unwrap(),
            std::fs::read(root.join(f)).unwrap(),
            "{f} differs from real rpm -U's"
        );
    }
    assert!(text(&std::fs::read(ours.join("etc/passwd")).unwrap()).contains("erdmasvc:x:"));
    for q in [["rpm", "-q", "sysuser-stand-in"], ["rpm", "-V", "sysuser-stand-in"]] {
        let o = Command::new("chroot").arg(&ours).args(q).output().unwrap();
        support::assert_success(&q.join(" "), &o);
    }
}

/// `--install PACKAGE` (a scriptlet stand-in of [`rpm_repo::el_deps_rpms`]) on `el`'s runnable
/// fixture base, from signed repositories, with `SOURCE_DATE_EPOCH=epoch`: the report, the
/// output layout (tag `x`), the root the base was made from (a copy, for the real rpm to
/// install into) and the BaseOS repository.
fn build_stand_in(
    el: El,
    package: &str,
    epoch: &str,
    tmp: &Path,
) -> (Value, PathBuf, PathBuf, RpmRepo) {
    let (base, root) = runnable_el_base(tmp, el);
    let key = RpmKey::generate();
    let baseos =
        RpmRepo::build(RpmLayout::Flat, &rpm_repo::el_deps_rpms(el), &key, el.rpmv3_signatures());
    let releasever = if el == El::El9 { "9" } else { "8" };
    let erdma = RpmRepo::build(
        RpmLayout::alibaba(releasever),
        &rpm_repo::el_rdma_rpms(el),
        &key,
        el.rpmv3_signatures(),
    );
    let key_file = tmp.join("key.asc");
    std::fs::write(&key_file, key.armored_public()).unwrap();
    let out_dir = tmp.join("out");
    let out = Command::new(support::bin())
        .args([
            "build",
            "--json",
            "--base",
            &base.reference(),
            "--no-packages",
            "--no-env-presets",
            "--repo",
            &format!("baseos={}", baseos.url()),
            "--repo",
            &format!("erdma={}", erdma.url()),
            "--keyring",
            &format!("base={}", s(&key_file)),
            "--keyring",
            &format!("erdma={}", s(&key_file)),
            "--install",
            package,
            "--output",
            &format!("oci:{}:x", s(&out_dir)),
        ])
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", support::test_cache())
        .env("SOURCE_DATE_EPOCH", epoch)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    support::assert_success(&format!("erdma-build build --install {package}"), &out);
    (serde_json::from_slice(&out.stdout).unwrap(), out_dir, root, baseos)
}

/// The system-account scriptlets rpm packages run (`svcuser-stand-in`: Fedora's guidelines'
/// `%pre`, `%sysusers_create_compat`'s and EL8 openssh's forms in `%post`) are emulated, with no
/// sandbox, and the result equals the image's own rpm installing the same file in the same root
/// (`chroot ROOT rpm -U`, which runs the root's real groupadd and useradd, Debian's shadow, over
/// EL9's `login.defs`): `passwd`, `shadow`, `group`, `gshadow` and their `-` backups byte for
/// byte (both sides with the same `SOURCE_DATE_EPOCH`, which shadow's tools and the emulation
/// take as the day of the last password change), the owner and mode of the `%attr` directory
/// (the uid and gid the `%pre` added, as rpm resolves names after `%pre`) and of the config
/// file whose group only `%post` adds (root's, as rpm leaves it), and what `rpm -V` says.
/// rpm 4.18 on a SQLite rpmdb (as EL9's).
#[test]
fn account_scriptlets_are_emulated_as_rpm_runs_them_root_net() {
    account_scriptlets_emulated(El::El9);
}

/// The same with rpm 4.16 on a Berkeley DB (Debian 11's root, shadow 4.8.1).
#[test]
fn account_scriptlets_are_emulated_on_a_berkeley_db_base_root_net() {
    account_scriptlets_emulated(El::El8);
}

fn account_scriptlets_emulated(el: El) {
    use std::os::unix::fs::MetadataExt;
    if !rpm_repo::require_bases() {
        return;
    }
    // 2023-11-14: the day both sides record as the last password change.
    const EPOCH: &str = "1700000000";
    let tmp = tempfile::tempdir().unwrap();
    let (r, out_dir, root, baseos) = build_stand_in(el, "svcuser-stand-in", EPOCH, tmp.path());
    let releasever = if el == El::El9 { "9" } else { "8" };
    let pk = &r["images"][0]["packages"];
    assert!(pk.get("sandbox").is_none_or(Value::is_null), "no sandbox: {pk}");
    let rec = |script: &str| -> Value {
        pk["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["package"] == format!("svcuser-stand-in 1.0-1.el{releasever}")
                    && s["script"] == script
            })
            .unwrap_or_else(|| panic!("no {script} in {pk}"))
            .clone()
    };
    let (pre, post) = (rec("%pre"), rec("%post"));
    assert_eq!(pre["outcome"], "emulated", "{pre}");
    assert_eq!(pre["detail"], "system group erdmad, system user erdmad", "{pre}");
    assert_eq!(post["outcome"], "emulated", "{post}");
    assert_eq!(
        post["detail"], "system group erdmaobs, system group erdmafix, system user erdmafix",
        "{post}"
    );

    // The oracle: the image's own rpm, chrooted into a copy of the same root.
    std::fs::copy(baseos.rpm("svcuser-stand-in"), root.join("tmp/svcuser.rpm")).unwrap();
    let o = Command::new("chroot")
        .arg(&root)
        .args(["rpm", "-U", "--nodeps", "--nosignature", "/tmp/svcuser.rpm"])
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    support::assert_success("chroot rpm -U", &o);
    std::fs::remove_file(root.join("tmp/svcuser.rpm")).unwrap();

    let ours = tmp.path().join("ours-root");
    rootfs_of(&out_dir, "x", &ours);
    // The one difference accepted: the root's useradd is Debian's, which locks a new account
    // with `!`; EL's shadow-utils (Red Hat's patch), which the emulation writes for rpm
    // images, with `!!`. Our shadow files are read back with `!!` as `!`.
    let as_debian = |name: &str, t: String| match name.starts_with("etc/shadow") {
        true => t.replace(":!!:", ":!:"),
        false => t,
    };
    for f in ["passwd", "shadow", "group", "gshadow"] {
        for name in [format!("etc/{f}"), format!("etc/{f}-")] {
            assert_eq!(
                std::fs::read(ours.join(&name)).ok().map(|b| as_debian(&name, text(&b))),
                std::fs::read(root.join(&name)).ok().map(|b| text(&b)),
                "{name} differs from real rpm -U's"
            );
        }
    }
    let passwd = text(&std::fs::read(ours.join("etc/passwd")).unwrap());
    let shadow = text(&std::fs::read(ours.join("etc/shadow")).unwrap());
    assert!(passwd.contains(":74:74:Privilege-separated SSH:/var/empty/erdmafix:"), "{passwd}");
    assert!(shadow.contains("erdmad:!!:19675::::::"), "{shadow}");
    // EL keeps the shadow files at 0000 root:root (its `setup` package).
    let meta = std::fs::metadata(ours.join("etc/shadow")).unwrap();
    assert_eq!((meta.mode() & 0o7777, meta.uid(), meta.gid()), (0, 0, 0));
    let owner = |r: &Path, p: &str| {
        let m = std::fs::symlink_metadata(r.join(p)).unwrap();
        (m.uid(), m.gid(), m.mode() & 0o7777)
    };
    let dir = owner(&ours, "var/lib/erdmad");
    assert_eq!(dir, owner(&root, "var/lib/erdmad"), "/var/lib/erdmad");
    let erdmad = passwd.lines().find(|l| l.starts_with("erdmad:")).unwrap();
    assert_eq!(
        format!("{}:{}", dir.0, dir.1),
        erdmad.split(':').skip(2).take(2).collect::<Vec<_>>().join(":")
    );
    assert_eq!(dir.2, 0o750);
    let conf = owner(&ours, "etc/erdmad.conf");
    assert_eq!(conf, owner(&root, "etc/erdmad.conf"), "/etc/erdmad.conf");
    assert_eq!(conf, (0, 0, 0o640));
    // rpm -V in each root: the same findings (the config file's group, which exists now).
    let verify = |r: &Path| {
        let o = Command::new("chroot")
            .arg(r)
            .args(["rpm", "-V", "svcuser-stand-in"])
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        (o.status.code(), text(&o.stdout))
    };
    assert_eq!(verify(&ours), verify(&root), "rpm -V");
}

/// A `%post` that registers an alternative with chkconfig's `alternatives` (two slaves, one
/// whose file is missing) is emulated, with no sandbox, and the image gets what the real tool
/// left in its recorded run of the same call over the same files
/// (`testdata/alternatives-el/b-two-slaves-one-missing-path`, chkconfig 1.24 and EL8's
/// 1.19.2): `/var/lib/alternatives/tool` byte for byte and the same links, the slave's
/// dangling. The fixture roots have no chkconfig, so the image's own rpm cannot be the oracle
/// here; rpm 4.18 (SQLite) and rpm 4.16 (Berkeley DB) bases alike.
#[test]
fn alternatives_scriptlets_are_emulated_as_chkconfig_leaves_them_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/alternatives-el/b-two-slaves-one-missing-path");
    for el in [El::El9, El::El8] {
        let tmp = tempfile::tempdir().unwrap();
        let (r, out_dir, _, _) =
            build_stand_in(el, "alternatives-stand-in", "1700000000", tmp.path());
        let pk = &r["images"][0]["packages"];
        assert!(pk.get("sandbox").is_none_or(Value::is_null), "no sandbox: {pk}");
        let post = pk["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["script"] == "%post")
            .unwrap_or_else(|| panic!("no %post in {pk}"));
        assert_eq!(post["outcome"], "emulated", "{post}");
        assert_eq!(
            post["detail"], "alternative tool (/usr/bin/tool -> /usr/bin/tool-a, priority 10)",
            "{post}"
        );
        let ours = tmp.path().join("ours-root");
        rootfs_of(&out_dir, "x", &ours);
        assert_eq!(
            text(&std::fs::read(ours.join("var/lib/alternatives/tool")).unwrap()),
            text(&std::fs::read(oracle.join("admin/tool")).unwrap()),
            "{el:?}: the administrative file"
        );
        let expected = text(&std::fs::read(oracle.join("links")).unwrap());
        let mut got = String::new();
        for line in expected.lines() {
            let (at, _) = line.split_once(" -> ").unwrap();
            let target = std::fs::read_link(ours.join(at.trim_start_matches('/')))
                .unwrap_or_else(|e| panic!("{el:?}: {at}: {e}"));
            got.push_str(&format!("{at} -> {}\n", target.display()));
        }
        assert_eq!(got, expected, "{el:?}: the links");
        // Nothing else under /etc/alternatives is named for the group.
        let named: Vec<String> = std::fs::read_dir(ours.join("etc/alternatives"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("tool"))
            .collect();
        assert_eq!(named.len(), 3, "{named:?}");
    }
}

/// A package adding a library directory through `/etc/ld.so.conf.d` whose ldconfig run the
/// emulation does not reproduce (here a dangling soname link, which ldconfig deletes): the
/// build goes to the sandbox, where the image's rpm runs the `%post` ldconfig, and the cache
/// and the directory come out as the image's own `rpm -U` leaves them.
#[test]
fn a_library_directory_ldconfig_is_not_reproduced_for_goes_to_the_sandbox_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    let zlib = std::fs::canonicalize("/usr/lib/x86_64-linux-gnu/libz.so.1").unwrap();
    let specs = move |_: &Path| {
        let p = rpm_repo::RpmDef {
            name: "erdma-xlib".into(),
            summary: "a library directory of its own (TEST ONLY)".into(),
            no_auto: true,
            contents: vec![
                ("/etc/ld.so.conf.d/xlib.conf".into(), b"/opt/xlib/lib\n".to_vec(), 0o644),
                ("/opt/xlib/lib/libz.so.1.2.13".into(), std::fs::read(&zlib).unwrap(), 0o755),
            ],
            symlinks: vec![("/opt/xlib/lib/libgone.so.1".into(), "libgone.so.1.0".into())],
            scripts: "%post -p /sbin/ldconfig\n".into(),
            ..Default::default()
        };
        vec![rpm_repo::SpecDef {
            name: "erdma-xlib".into(),
            version: "1.0".into(),
            release: "1.el9".into(),
            license: "MIT".into(),
            packages: vec![p],
        }]
    };
    let local = rpm_repo::cached_rpms("local-xlib", El::El9, specs, &[]).remove(0);
    let tmp = tempfile::tempdir().unwrap();
    let (r, out_dir, root, _) = build_on_runnable_base(
        tmp.path(),
        El::El9,
        &["--package", s(&local), "--allow-unsigned-package"],
    );
    let pk = &r["images"][0]["packages"];
    let because = pk["sandbox"]["because"].as_str().unwrap_or_default();
    assert!(because.contains("ldconfig") && because.contains("dangling"), "{pk}");

    chroot_rpm_u(&root, &local);

    let ours = tmp.path().join("ours-root");
    rootfs_of(&out_dir, "x", &ours);
    let cache = std::fs::read(ours.join("etc/ld.so.cache")).unwrap();
    assert!(cache == std::fs::read(root.join("etc/ld.so.cache")).unwrap(), "the cache differs");
    assert!(text(&cache).contains("/opt/xlib/lib/libz.so.1"));
    for (name, gone) in [("libz.so.1", false), ("libgone.so.1", true)] {
        let at = |r: &Path| std::fs::symlink_metadata(r.join("opt/xlib/lib").join(name)).is_err();
        assert_eq!((at(&ours), at(&root)), (gone, gone), "{name}");
    }
}
