//! Checks of the rpm fixtures (`tests/support/rpm_repo/`) against real tools: rpm 4.18,
//! rpmsign, gpg, createrepo_c, dnf, db5.3_verify. They never run erdma-build; they prove that
//! what the rpm backend will be tested against is coherent.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::text;
use crate::support::rpm_repo::{self, BaseKind, El, RpmKey, RpmLayout, RpmRepo};
use crate::support::{self, registry::http_request};

fn rpm(args: &[&str]) -> Output {
    Command::new("rpm").args(args).env("LC_ALL", "C").output().expect("run rpm")
}

/// `rpm -qp ARGS FILE` stdout, asserting success.
#[track_caller]
fn qp(file: &Path, args: &[&str]) -> String {
    let mut all = vec!["-qp", "--nosignature"];
    all.extend_from_slice(args);
    all.push(file.to_str().unwrap());
    let out = rpm(&all);
    support::assert_success(&format!("rpm -qp {args:?} {}", file.display()), &out);
    text(&out.stdout)
}

fn by_name(rpms: &[PathBuf], name: &str) -> PathBuf {
    rpms.iter()
        .find(|p| rpm_repo::rpm_name_of(p) == name)
        .unwrap_or_else(|| panic!("no {name} among {rpms:?}"))
        .clone()
}

#[track_caller]
fn has_line(haystack: &str, line: &str) {
    assert!(haystack.lines().any(|l| l.trim() == line), "no line `{line}` in\n{haystack}");
}

#[test]
fn el_rdma_rpms_carry_the_spec_relations_and_soname_deps_net() {
    if !rpm_repo::require_rpms() {
        return;
    }
    for el in [El::Al8, El::El8, El::El9] {
        let t0 = std::time::Instant::now();
        let rpms = rpm_repo::el_rdma_rpms(el);
        eprintln!("el_rdma_rpms({el:?}): {:.1?}", t0.elapsed());
        let mut names: Vec<String> = rpms.iter().map(|p| rpm_repo::rpm_name_of(p)).collect();
        names.sort();
        assert_eq!(
            names,
            ["libibverbs", "libibverbs-utils", "librdmacm", "librdmacm-utils", "rdma-core"]
        );
        let evr = el.evr();
        for r in &rpms {
            let f = r.file_name().unwrap().to_string_lossy().into_owned();
            assert!(f.ends_with(&format!("-{evr}.x86_64.rpm")), "{f}");
            assert_eq!(qp(r, &["--qf", "%{SOURCERPM}"]), format!("rdma-core-{evr}.src.rpm"));
        }
        let comp = qp(&rpms[0], &["--qf", "%{PAYLOADCOMPRESSOR}"]);
        assert_eq!(comp, if el == El::El9 { "zstd" } else { "xz" });

        let verbs = by_name(&rpms, "libibverbs");
        let prov = qp(&verbs, &["--provides"]);
        for p in [
            "libibverbs.so.1()(64bit)",
            "libibverbs.so.1(IBVERBS_1.1)(64bit)",
            "libibverbs.so.1(IBVERBS_PRIVATE_34)(64bit)",
            "libmlx5.so.1()(64bit)",
            "libibverbs(x86-64) = VERSION",
        ] {
            has_line(&prov, &p.replace("VERSION", &evr));
        }
        has_line(&prov, &format!("liberdma = {evr}"));
        let req = qp(&verbs, &["--requires"]);
        for r in [
            "libnl-3.so.200()(64bit)",
            "libnl-route-3.so.200()(64bit)",
            "libc.so.6()(64bit)",
            "rtld(GNU_HASH)",
        ] {
            has_line(&req, r);
        }
        let files = qp(&verbs, &["--list"]);
        for f in [
            "/usr/lib64/libibverbs.so.1",
            "/usr/lib64/libibverbs.so.1.14.44.0",
            "/usr/lib64/libibverbs/liberdma-rdmav34.so",
            "/etc/libibverbs.d/erdma.driver",
            "/usr/lib64/libibverbs",
        ] {
            has_line(&files, f);
        }
        assert!(!files.contains("x86_64-linux-gnu"), "{files}");
        has_line(&qp(&verbs, &["--configfiles"]), "/etc/libibverbs.d/erdma.driver");
        let scripts = qp(&verbs, &["--scripts"]);
        if el == El::El9 {
            assert!(scripts.trim().is_empty(), "EL9: %ldconfig_scriptlets is empty: {scripts}");
        } else {
            assert!(scripts.contains("postinstall program: /sbin/ldconfig"), "{scripts}");
            has_line(&req, "/sbin/ldconfig");
        }

        let utils = by_name(&rpms, "libibverbs-utils");
        let req = qp(&utils, &["--requires"]);
        has_line(&req, &format!("libibverbs(x86-64) = {evr}"));
        has_line(&req, "libibverbs.so.1()(64bit)");
        has_line(&req, "libibverbs.so.1(IBVERBS_1.1)(64bit)");
        has_line(&qp(&utils, &["--list"]), "/usr/bin/ibv_devices");

        let cm = by_name(&rpms, "librdmacm");
        has_line(&qp(&cm, &["--requires"]), &format!("libibverbs(x86-64) = {evr}"));
        has_line(&qp(&cm, &["--provides"]), "librdmacm.so.1()(64bit)");

        let core = by_name(&rpms, "rdma-core");
        let req = qp(&core, &["--requires"]);
        has_line(&req, "pciutils");
        has_line(&req, "/bin/sh");
        assert!(qp(&core, &["--scripts"])
            .contains("/sbin/udevadm trigger --subsystem-match=infiniband"));
        has_line(&qp(&core, &["--list"]), "/etc/rdma/modules/rdma.conf");
    }
}

/// Every Requires of the EL packages is met by the base stand-ins, the dependency packages and
/// the packages themselves: `rpm -i --test` into an empty root (no scriptlets run, no root needed).
#[test]
fn el_package_sets_resolve_with_real_rpm_net() {
    if !rpm_repo::require_rpms() {
        return;
    }
    let cases: Vec<(BaseKind, Vec<PathBuf>)> = vec![
        (
            BaseKind::Rocky9Sqlite,
            [rpm_repo::el_rdma_rpms(El::El9), rpm_repo::el_deps_rpms(El::El9)].concat(),
        ),
        (
            BaseKind::Alinux3Bdb,
            [rpm_repo::el_rdma_rpms(El::Al8), rpm_repo::el_deps_rpms(El::Al8)].concat(),
        ),
        (
            BaseKind::Alinux3BdbOfed,
            [rpm_repo::ofed_like_rpms(), rpm_repo::el_deps_rpms(El::Al8)].concat(),
        ),
    ];
    for (kind, extra) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let mut all = rpm_repo::base_system_rpms(kind);
        all.extend(extra);
        let out = Command::new("rpm")
            .arg("--root")
            .arg(tmp.path())
            .args(["--dbpath", "/var/lib/rpm", "-i", "--test", "--nosignature"])
            .args(&all)
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        support::assert_success(&format!("rpm -i --test ({kind:?})"), &out);
        // Without the base, libibverbs lacks libc and libnl: the test above is not vacuous.
        let verbs_only = Command::new("rpm")
            .arg("--root")
            .arg(tmp.path())
            .args(["--dbpath", "/var/lib/rpm", "-i", "--test", "--nosignature"])
            .arg(all.iter().find(|p| rpm_repo::rpm_name_of(p) == "libibverbs").unwrap())
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        let err = text(&verbs_only.stderr);
        assert!(
            !verbs_only.status.success() && err.contains("libnl-3.so.200()(64bit) is needed by"),
            "{err}"
        );
    }
    let ofed = rpm_repo::ofed_like_rpms();
    let verbs = by_name(&ofed, "libibverbs");
    assert_eq!(qp(&verbs, &["--qf", "%{VERSION}-%{RELEASE}"]), "58mlnx43-1.58101");
    has_line(&qp(&verbs, &["--list"]), "/usr/lib64/libibverbs.so.1.14.58.0");
    has_line(&qp(&verbs, &["--provides"]), "libibverbs.so.1()(64bit)");
    let names: Vec<String> = ofed.iter().map(|p| rpm_repo::rpm_name_of(p)).collect();
    for n in ["rdma-core", "libibverbs-utils", "librdmacm", "ofed-scripts", "mlnx-ofa_kernel"] {
        assert!(names.iter().any(|x| x == n), "{names:?}");
    }
}

#[test]
fn served_repo_is_signed_and_rpm_k_verifies_it_net() {
    if !rpm_repo::require_rpms()
        || !support::require(
            support::have("createrepo_c") && support::have("rpmsign") && support::have("gpg"),
            "createrepo_c, rpmsign and gpg are needed (run scripts/setup)",
        )
    {
        return;
    }
    let t0 = std::time::Instant::now();
    let key = RpmKey::generate();
    let rpms = rpm_repo::el_rdma_rpms(El::Al8);
    let repo = RpmRepo::build(RpmLayout::alibaba("3"), &rpms, &key, true);
    eprintln!("RpmRepo::build (key, sign, createrepo_c, serve): {:.1?}", t0.elapsed());
    assert!(repo.url().ends_with("/erdma/yum/redhat/3/erdma/x86_64"), "{}", repo.url());
    assert!(repo.key_url().ends_with("/erdma/GPGKEY"), "{}", repo.key_url());
    let addr = format!("127.0.0.1:{}", repo.port());
    let path = |url: &str| url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap();
    let (status, key_body) = http_request(&addr, "GET", &path(&repo.key_url())).unwrap();
    assert_eq!(status, 200);
    assert!(text(&key_body).starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----"));
    let (status, repomd) =
        http_request(&addr, "GET", &format!("{}/repodata/repomd.xml", path(&repo.url()))).unwrap();
    assert_eq!(status, 200);
    assert!(text(&repomd).contains("primary"));
    let (status, _) =
        http_request(&addr, "GET", &format!("{}/repodata/repomd.xml.asc", path(&repo.url())))
            .unwrap();
    assert_eq!(status, 200);

    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let dbs = db.to_str().unwrap();
    let key_file = tmp.path().join("GPGKEY");
    std::fs::write(&key_file, &key_body).unwrap();
    let verbs = repo.rpm("libibverbs");
    let k = |p: &Path| rpm(&["--dbpath", dbs, "-K", p.to_str().unwrap()]);
    let before = k(&verbs);
    assert!(!before.status.success(), "no key imported yet: {}", text(&before.stdout));
    support::assert_success(
        "rpm --import",
        &rpm(&["--dbpath", dbs, "--import", key_file.to_str().unwrap()]),
    );
    for r in &rpms {
        let out = k(&repo.rpm(&rpm_repo::rpm_name_of(r)));
        support::assert_success("rpm -K", &out);
        assert!(text(&out.stdout).contains("digests signatures OK"), "{}", text(&out.stdout));
    }
    // EL8-style: header-only and header+payload signatures, made by the test key.
    let sig = qp(&verbs, &["--qf", "%{RSAHEADER:pgpsig}|%{SIGPGP:pgpsig}"]);
    let id = key.fingerprint()[24..].to_ascii_lowercase();
    assert!(
        sig.split('|').all(|s| s.starts_with("RSA/SHA256") && s.ends_with(&id)),
        "{sig} (key {id})"
    );
    assert_eq!(qp(&verbs, &["--qf", "%{NAME}-%{VERSION}-%{RELEASE}"]), "libibverbs-44.0-2.al8");

    // repomd.xml.asc verifies with gpg and the served key, until repomd.xml changes.
    let gnupg = tempfile::Builder::new().prefix("erdma-gpgv-").tempdir_in("/tmp").unwrap();
    let gpg = |args: &[&str]| {
        Command::new("gpg")
            .env("GNUPGHOME", gnupg.path())
            .args(["--batch", "--quiet"])
            .args(args)
            .output()
            .unwrap()
    };
    support::assert_success("gpg --import", &gpg(&["--import", key_file.to_str().unwrap()]));
    let repomd = repo.repodata().join("repomd.xml");
    let asc = repo.repodata().join("repomd.xml.asc");
    let verify = || gpg(&["--verify", asc.to_str().unwrap(), repomd.to_str().unwrap()]);
    support::assert_success("gpg --verify repomd.xml.asc", &verify());
    repo.tamper_repomd();
    assert!(!verify().status.success(), "tampered repomd.xml still verifies");

    // A flipped byte in an rpm fails rpm -K; a flipped byte in primary changes its checksum.
    repo.tamper_rpm("librdmacm");
    assert!(!k(&repo.rpm("librdmacm")).status.success());
    let primary = repo.primary();
    let before = std::fs::read(&primary).unwrap();
    repo.tamper_primary();
    let after = std::fs::read(&primary).unwrap();
    assert_eq!(before.len(), after.len());
    assert_ne!(before, after);

    // The CUDA layout puts the key beside the packages.
    let cuda =
        RpmRepo::build(RpmLayout::cuda("rhel9"), &rpm_repo::el_deps_rpms(El::El9), &key, false);
    assert!(cuda.url().ends_with("/compute/cuda/repos/rhel9/x86_64"));
    assert!(cuda.key_url().ends_with("/compute/cuda/repos/rhel9/x86_64/D42D0685.pub"));
    assert!(cuda.repodata().join("repomd.xml.asc").is_file());
}

#[test]
fn bases_have_the_rpmdb_real_rpm_wrote_root_net() {
    if !rpm_repo::require_bases() {
        return;
    }
    for kind in BaseKind::ALL {
        let t0 = std::time::Instant::now();
        let img = rpm_repo::el_base(kind);
        eprintln!("el_base({kind:?}): {:.1?}", t0.elapsed());
        assert_eq!(img.layers.len(), 2);
        let root = rpm_repo::el_base_rootfs(kind);
        let db = root.join("var/lib/rpm");
        let os = std::fs::read_to_string(root.join("etc/os-release")).unwrap();
        assert!(os.contains(kind.os_release().lines().next().unwrap()), "{os}");
        assert!(!root.join("var/lib/dpkg").exists() && !root.join("etc/debian_version").exists());
        let mut qa = vec!["--root", root.to_str().unwrap(), "--dbpath", "/var/lib/rpm"];
        if kind.sqlite() {
            assert!(db.join("rpmdb.sqlite").is_file());
            assert!(!db.join("Packages").exists(), "never both backends side by side");
            let n = Command::new("sqlite3")
                .arg(db.join("rpmdb.sqlite"))
                .arg("select count(*) from Packages")
                .output()
                .unwrap();
            if n.status.success() {
                assert_eq!(text(&n.stdout).trim(), "5");
            }
        } else {
            assert!(!db.join("rpmdb.sqlite").exists(), "never both backends side by side");
            // Packages and EL8's 18 indexes, as rpm 4.14 and 4.16 write them.
            let files: Vec<String> = std::fs::read_dir(&db)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(|c: char| c.is_ascii_uppercase()))
                .collect();
            assert_eq!(files.len(), 19, "{files:?}");
            for f in [
                "Packages",
                "Name",
                "Providename",
                "Requirename",
                "Basenames",
                "Dirnames",
                "Sha1header",
                "Sigmd5",
                "Installtid",
                "Filetriggername",
                "Transfiletriggername",
                "Recommendname",
            ] {
                assert!(files.iter().any(|x| x == f), "no {f} in {files:?}");
            }
            for f in &files {
                let out = Command::new("db5.3_verify").arg("-q").arg(db.join(f)).output().unwrap();
                support::assert_success(&format!("db5.3_verify {f} ({kind:?})"), &out);
            }
            assert!(!std::fs::read_dir(&db)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("__db.")));
            // rpm 4.18 reads Berkeley DB only through its read-only backend.
            qa.extend(["--define", "_db_backend bdb_ro"]);
        }
        let mut args = qa.clone();
        args.extend(["-qa", "--qf", "%{NAME}\\n"]);
        let out = rpm(&args);
        support::assert_success(&format!("rpm -qa ({kind:?})"), &out);
        let installed = text(&out.stdout);
        for n in ["setup", "filesystem", "glibc", "bash"] {
            has_line(&installed, n);
        }
        let mut args = qa.clone();
        args.extend(["-q", "--whatprovides", "system-release(releasever)", "--qf", "%{NAME}\\n"]);
        let release = text(&rpm(&args).stdout);
        assert!(release.trim().ends_with("-release"), "{release}");
        let mut args = qa.clone();
        args.extend(["-qf", "/etc/os-release", "--qf", "%{NAME}\\n"]);
        assert_eq!(text(&rpm(&args).stdout).trim(), release.trim());
        if kind.ofed() {
            let mut args = qa.clone();
            args.extend(["-q", "libibverbs", "ofed-scripts", "mlnx-ofa_kernel", "libnl3"]);
            let out = rpm(&args);
            support::assert_success("rpm -q (OFED packages)", &out);
            has_line(&text(&out.stdout), "libibverbs-58mlnx43-1.58101.x86_64");
            assert!(root.join(rpm_repo::OFED_REPO_FILE).is_file());
            let repo_file = format!("/{}", rpm_repo::OFED_REPO_FILE);
            let mut args = qa.clone();
            args.extend(["-qf", &repo_file]);
            assert!(!rpm(&args).status.success(), "mlnx_ofed.repo is not owned by a package");
        }
        // ldconfig ran inside the root (glibc's %post / file trigger).
        assert!(root.join("etc/ld.so.cache").is_file());
        if support::have("skopeo") {
            support::assert_success(
                "skopeo inspect",
                &support::skopeo(["inspect", &img.reference()]),
            );
        }
    }
}

/// The fixtures fit together: dnf (with rpm 4.18) installs the ECS AI-training-cluster guide's package set from the
/// served, signed eRDMA-style repository plus a BaseOS-style one into a copy of the Rocky 9
/// base, and `ibv_devices` then runs there.
#[test]
fn dnf_installs_from_the_served_repos_into_a_rocky9_base_root_net() {
    if !rpm_repo::require_bases()
        || !support::require(
            support::have("dnf") && support::have("createrepo_c"),
            "dnf and createrepo_c are needed (run scripts/setup)",
        )
    {
        return;
    }
    let kind = BaseKind::Rocky9Sqlite;
    let src = rpm_repo::el_base_rootfs(kind);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    support::assert_success(
        "cp -a",
        &Command::new("cp").arg("-a").arg(&src).arg(&root).output().unwrap(),
    );
    let key = RpmKey::generate();
    let erdma = RpmRepo::build(
        RpmLayout::alibaba(kind.releasever()),
        &rpm_repo::el_rdma_rpms(El::El9),
        &key,
        false,
    );
    let baseos = RpmRepo::build(RpmLayout::Flat, &rpm_repo::el_deps_rpms(El::El9), &key, false);
    let conf = rpm_repo::dnf_conf(&tmp.path().join("dnf"));
    let t0 = std::time::Instant::now();
    let out = rpm_repo::dnf_command(&conf, &root)
        .args(["--releasever", kind.releasever(), "-y", "-q"])
        .arg(format!("--repofrompath=erdma,{}", erdma.url()))
        .arg(format!("--repofrompath=baseos,{}", baseos.url()))
        .arg(format!("--setopt=erdma.gpgkey={}", erdma.key_url()))
        .arg(format!("--setopt=baseos.gpgkey={}", baseos.key_url()))
        .args([
            "--setopt=erdma.gpgcheck=1",
            "--setopt=erdma.repo_gpgcheck=1",
            "--setopt=baseos.gpgcheck=1",
        ])
        .args(["install", "libibverbs", "rdma-core", "librdmacm", "libibverbs-utils"])
        .output()
        .unwrap();
    eprintln!("dnf install: {:.1?}", t0.elapsed());
    support::assert_success("dnf --installroot install", &out);
    let r = root.to_str().unwrap();
    let out = rpm(&[
        "--root",
        r,
        "--dbpath",
        "/var/lib/rpm",
        "-q",
        "libibverbs",
        "libibverbs-utils",
        "librdmacm",
        "rdma-core",
        "libnl3",
        "pciutils",
        &key.rpm_pubkey_name(),
    ]);
    support::assert_success("rpm -q after dnf", &out);
    has_line(&text(&out.stdout), "libibverbs-44.0-2.el9.x86_64");
    support::assert_success(
        "rpm -V libibverbs",
        &rpm(&["--root", r, "--dbpath", "/var/lib/rpm", "-V", "libibverbs", "libibverbs-utils"]),
    );
    // glibc's file trigger ran ldconfig: the libraries under /usr/lib64 are in the cache.
    let cache = Command::new("chroot").arg(&root).args(["/sbin/ldconfig", "-p"]).output().unwrap();
    assert!(
        text(&cache.stdout)
            .contains("libibverbs.so.1 (libc6,x86-64) => /usr/lib64/libibverbs.so.1"),
        "{}",
        text(&cache.stdout)
    );
    // No RDMA device (and no /sys) in the chroot: the tool loads its libraries and says so.
    let run = Command::new("chroot").arg(&root).arg("/usr/bin/ibv_devices").output().unwrap();
    let all = format!("{}{}", text(&run.stdout), text(&run.stderr));
    assert!(!all.contains("error while loading shared libraries"), "{all}");
    assert!(all.contains("Failed to get IB devices list") || all.contains("device"), "{all}");
    let get = erdma.get_paths();
    assert!(get.iter().any(|p| p.ends_with("/repodata/repomd.xml.asc")), "{get:?}");
}

/// The bases make runnable containers: in the OFED-style base (whose rpm-installed
/// `libibverbs-utils` holds real binaries) `ibv_devices` loads libibverbs from `/usr/lib64`
/// through the ld.so.cache rpm's scriptlets wrote.
#[test]
fn ofed_base_runs_ibv_devices_in_docker_root_net() {
    if !rpm_repo::require_bases()
        || !support::require_docker()
        || !support::require(support::have("skopeo"), "skopeo is needed (run scripts/setup)")
    {
        return;
    }
    let img = rpm_repo::el_base(BaseKind::Alinux3BdbOfed);
    let tag = format!("erdma-selftest/alinux3-ofed:{}", std::process::id());
    support::assert_success(
        "skopeo copy to docker",
        &support::skopeo(["copy", "--quiet", &img.reference(), &format!("docker-daemon:{tag}")]),
    );
    let out = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &tag, "bash", "-c"])
        .arg(". /etc/os-release; echo \"$ID $VERSION_ID\"; cat /etc/redhat-release; ls /var/lib/rpm/Packages; ibv_devices 2>&1; echo rc=$?")
        .output()
        .unwrap();
    support::docker_rmi(&tag);
    support::assert_success("docker run", &out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("alinux 3\nAlibaba Cloud Linux release 3 (Soaring Falcon)"),
        "{stdout}"
    );
    assert!(!stdout.contains("error while loading shared libraries"), "{stdout}");
    assert!(
        stdout.contains("Failed to get IB devices list") || stdout.contains("device"),
        "{stdout}"
    );
}
