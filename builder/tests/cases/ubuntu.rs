//! The Ubuntu recipes against fixture repositories that carry the real archives' package names,
//! versions and relations (Ubuntu's and Alibaba's archives are not reachable here; where each
//! fact comes from: testdata/facts/README.md). The packages are test-built stand-ins: their
//! control data is the real one, their files only the few the build checks for.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::build_cached as build;
use crate::support::apt_repo::{AptRepo, Layout, TestKey};
use crate::support::debs::{self, FakeDeb};
use crate::support::{self, fixture};

/// `/etc/os-release` of the `ubuntu:24.04` image (24.04.3).
const NOBLE_OS_RELEASE: &str = "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nVERSION=\"24.04.3 LTS (Noble Numbat)\"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\nHOME_URL=\"https://www.ubuntu.com/\"\nSUPPORT_URL=\"https://help.ubuntu.com/\"\nBUG_REPORT_URL=\"https://bugs.launchpad.net/ubuntu/\"\nPRIVACY_POLICY_URL=\"https://www.ubuntu.com/legal/terms-and-policies/privacy-policy\"\nUBUNTU_CODENAME=noble\nLOGO=ubuntu-logo\n";

/// Ubuntu 24.04's rdma-core 50.0-2build2 (noble release pocket): names, versions and relations.
pub const NOBLE_RDMA: &str = "50.0-2build2";

/// The noble packages an eRDMA install touches, as `(name, version, multi_arch, depends,
/// provides, replaces, breaks, files)`.
type Spec = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    &'static [(&'static str, &'static [u8], u32)],
);

const NOBLE: &[Spec] = &[
    (
        "libibverbs1",
        NOBLE_RDMA,
        Some("same"),
        Some("adduser, libc6 (>= 2.38), libnl-3-200 (>= 3.2.7), libnl-route-3-200 (>= 3.2.7)"),
        None,
        None,
        Some("ibverbs-providers (<< 34~)"),
        &[
            (
                "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0",
                b"stand-in for libibverbs 50.0\n",
                0o644,
            ),
            ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", b"libibverbs.so.1.14.50.0", 0o120777),
        ],
    ),
    (
        "ibverbs-providers",
        NOBLE_RDMA,
        Some("same"),
        Some("libc6 (>= 2.38), libibverbs1 (>= 38)"),
        Some("libefa1, libipathverbs1, libmana1, libmlx4-1, libmlx5-1, libmthca1"),
        Some("libipathverbs1 (<< 15), libmlx4-1 (<< 15), libmlx5-1 (<< 15), libmthca1 (<< 15)"),
        Some("libipathverbs1 (<< 15), libmlx4-1 (<< 15), libmlx5-1 (<< 15), libmthca1 (<< 15)"),
        &[
            ("/etc/libibverbs.d/erdma.driver", b"driver erdma\n", 0o644),
            (
                "/usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so",
                b"stand-in for the erdma provider\n",
                0o644,
            ),
        ],
    ),
    (
        "ibverbs-utils",
        NOBLE_RDMA,
        None,
        Some("libc6 (>= 2.38), libibverbs1 (>= 34)"),
        None,
        None,
        None,
        &[("/usr/bin/ibv_devices", b"#!/bin/sh\n", 0o755)],
    ),
    (
        "librdmacm1t64",
        NOBLE_RDMA,
        Some("same"),
        Some("libc6 (>= 2.38), libibverbs1 (>= 31), libnl-3-200 (>= 3.2.7)"),
        Some("librdmacm1 (= 50.0-2build2)"),
        Some("librdmacm1"),
        Some("librdmacm1 (<< 50.0-2build2)"),
        &[(
            "/usr/lib/x86_64-linux-gnu/librdmacm.so.1.3.50.0",
            b"stand-in for librdmacm 50.0\n",
            0o644,
        )],
    ),
    (
        "libnl-3-200",
        "3.7.0-0.3build1.1",
        Some("same"),
        Some("libc6 (>= 2.38)"),
        None,
        None,
        None,
        &[("/usr/lib/x86_64-linux-gnu/libnl-3.so.200.26.0", b"stand-in\n", 0o644)],
    ),
    (
        "libnl-route-3-200",
        "3.7.0-0.3build1.1",
        Some("same"),
        Some("libnl-3-200 (= 3.7.0-0.3build1.1), libc6 (>= 2.38)"),
        None,
        None,
        None,
        &[("/usr/lib/x86_64-linux-gnu/libnl-route-3.so.200.26.0", b"stand-in\n", 0o644)],
    ),
];

fn noble_debs(dir: &Path) -> Vec<PathBuf> {
    NOBLE
        .iter()
        .map(|&(name, version, multi_arch, depends, provides, replaces, breaks, files)| {
            debs::fake_deb(
                dir,
                FakeDeb {
                    name,
                    version,
                    multi_arch,
                    depends,
                    provides,
                    replaces,
                    breaks,
                    files: files.to_vec(),
                    ..Default::default()
                },
            )
        })
        .collect()
}

/// The dpkg status of an `ubuntu:24.04` base, for the packages the resolution looks at.
fn noble_status(extra: &str) -> String {
    format!(
        "Package: libc6\nStatus: install ok installed\nPriority: optional\nSection: libs\nMaintainer: Ubuntu Developers <ubuntu-devel-discuss@lists.ubuntu.com>\nArchitecture: amd64\nMulti-Arch: same\nSource: glibc\nVersion: 2.39-0ubuntu8.6\nDescription: GNU C Library: Shared libraries\n\n\
         Package: adduser\nStatus: install ok installed\nPriority: important\nSection: admin\nMaintainer: Ubuntu Core Developers <ubuntu-devel-discuss@lists.ubuntu.com>\nArchitecture: all\nMulti-Arch: foreign\nVersion: 3.137ubuntu1\nDescription: add and remove users and groups\n{extra}"
    )
}

/// An `ubuntu:24.04`-like base: merged /usr, the deb822 source list noble ships (trimmed to its
/// release suite: the fixture repository serves one; it has only `main`, and the other
/// components are skipped as apt skips them), its os-release and a dpkg status.
fn noble_base(dir: &Path, status: &str) -> support::OciFixture {
    let sources = "Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\nSuites: noble\nComponents: main restricted universe multiverse\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n";
    fixture::fixture_image(
        dir,
        &[vec![
            ("bin", b"usr/bin".as_slice(), 0o120777),
            ("lib", b"usr/lib".as_slice(), 0o120777),
            ("lib64", b"usr/lib64".as_slice(), 0o120777),
            ("sbin", b"usr/sbin".as_slice(), 0o120777),
            ("etc/apt/sources.list.d/ubuntu.sources", sources.as_bytes(), 0o644),
            ("var/lib/dpkg/status", status.as_bytes(), 0o644),
            ("etc/group", b"root:x:0:\nshadow:x:42:\nubuntu:x:1000:\n".as_slice(), 0o644),
        ]],
        &[("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")],
        Some(NOBLE_OS_RELEASE),
    )
}

fn installs(r: &Value) -> BTreeMap<String, String> {
    r["images"][0]["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                format!("{} {}", p["version"].as_str().unwrap(), p["action"].as_str().unwrap()),
            )
        })
        .collect()
}

/// The `ubuntu-24.04` recipe on a noble base, from a noble-shaped archive: `librdmacm1` is taken
/// as `librdmacm1t64`, as apt does there; an NGC-style base with Mellanox builds under either
/// name has them replaced.
#[test]
fn ubuntu2404_recipe_against_a_noble_shaped_archive() {
    if !support::require(
        support::have("dpkg-deb") && crate::support::apt_repo::can_build(),
        "dpkg-deb, apt-ftparchive and gpg are needed",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let key = TestKey::generate();
    let keyfile = key.write_public(tmp.path(), "noble.asc");
    let repo = AptRepo::build_under(
        "ubuntu",
        Layout::Nested { suite: "noble".into(), component: "main".into() },
        &noble_debs(&tmp.path().join("debs")),
        &key,
    );
    let cache = tmp.path().join("cache");
    let mirror = format!("http://archive.ubuntu.com/ubuntu/={}", repo.url());
    let keyring = format!("base={}", keyfile.display());

    let base = noble_base(&tmp.path().join("plain"), &noble_status(""));
    let out = tmp.path().join("out");
    let r = build(
        &[
            "--base",
            &base.reference(),
            "--mirror",
            &mirror,
            "--keyring",
            &keyring,
            "--output",
            &format!("oci:{}:x", out.display()),
        ],
        &cache,
    );
    assert_eq!(r["images"][0]["recipe"], "ubuntu-24.04");
    assert_eq!(
        r["images"][0]["packages"]["selected"],
        serde_json::json!([{"requested": "librdmacm1", "package": "librdmacm1t64"}])
    );
    let got = installs(&r);
    for name in ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1t64"] {
        assert_eq!(got[name], format!("{NOBLE_RDMA} install"), "{got:?}");
    }
    assert_eq!(got.len(), 6, "and libnl's two: {got:?}");
    let files: Vec<&str> = r["images"][0]["files_added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"/etc/libibverbs.d/erdma.driver")
            && files.contains(&"/var/lib/dpkg/info/librdmacm1t64:amd64.list"),
        "{files:?}"
    );

    // Mellanox OFED builds, under the old name and under the t64 name.
    for rdmacm in ["librdmacm1", "librdmacm1t64"] {
        let ofed = format!(
            "\nPackage: libibverbs1\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\nVersion: 2404mlnx51-1.2404066\nDescription: OFED\n\n\
             Package: ibverbs-providers\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\nVersion: 2404mlnx51-1.2404066\nDescription: OFED\n\n\
             Package: {rdmacm}\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\nVersion: 2404mlnx51-1.2404066\nDescription: OFED\n"
        );
        let base = noble_base(&tmp.path().join(format!("ofed-{rdmacm}")), &noble_status(&ofed));
        let r = build(
            &[
                "--base",
                &base.reference(),
                "--mirror",
                &mirror,
                "--keyring",
                &keyring,
                "--output",
                &format!("oci:{}:{rdmacm}", out.display()),
            ],
            &cache,
        );
        let got = installs(&r);
        assert_eq!(got["libibverbs1"], format!("{NOBLE_RDMA} replace"), "{got:?}");
        let expect = if rdmacm == "librdmacm1t64" { "replace" } else { "install" };
        assert_eq!(got["librdmacm1t64"], format!("{NOBLE_RDMA} {expect}"), "{got:?}");
        let removed: Vec<&str> = r["images"][0]["packages"]["remove"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(removed, ["libibverbs1", "ibverbs-providers", rdmacm], "{rdmacm}");
        // The status the image ends with has no OFED build left.
        let img = fixture::read_fixture(&out, rdmacm);
        let layer = img.layers.last().unwrap().digest.clone();
        let status = layer_file(&img.blob_path(&layer), "var/lib/dpkg/status");
        assert!(!status.contains("mlnx"), "{status}");
    }
}

/// One file of a gzip layer, as text.
fn layer_file(blob: &Path, path: &str) -> String {
    let f = std::fs::File::open(blob).unwrap();
    for e in tar::Archive::new(flate2::read::MultiGzDecoder::new(f)).entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_string_lossy().trim_start_matches("./") == path {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut e, &mut text).unwrap();
            return text;
        }
    }
    panic!("no {path} in {}", blob.display());
}

/// Alibaba's eRDMA repository for jammy (`jammy/erdma main`): its builds carry Debian's package
/// names (no `t64` on jammy) at `56.2-1.0.3`. Their relations are not established
/// (testdata/facts/README.md): these follow Debian's rdma-core packaging.
const ALIBABA_JAMMY: &str = "56.2-1.0.3";

/// Alibaba's four packages for a release whose glibc is `libc` or newer.
fn alibaba_debs(dir: &Path, libc: &str) -> Vec<PathBuf> {
    let dep = |rest: &str| format!("libc6 (>= {libc}){rest}");
    let (d_verbs, d_prov, d_utils, d_cm) = (
        dep(", adduser, libnl-3-200 (>= 3.2.7), libnl-route-3-200 (>= 3.2.7)"),
        dep(", libibverbs1 (>= 38)"),
        dep(", libibverbs1 (>= 34)"),
        dep(", libibverbs1 (>= 31), libnl-3-200 (>= 3.2.7)"),
    );
    let deb = |name, multi_arch, depends, breaks, files| FakeDeb {
        name,
        version: ALIBABA_JAMMY,
        multi_arch,
        depends,
        breaks,
        files,
        ..Default::default()
    };
    [
        deb(
            "libibverbs1",
            Some("same"),
            Some(d_verbs.as_str()),
            Some("ibverbs-providers (<< 34~)"),
            vec![(
                "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.2",
                b"stand-in".as_slice(),
                0o644,
            )],
        ),
        deb(
            "ibverbs-providers",
            Some("same"),
            Some(d_prov.as_str()),
            None,
            vec![
                ("/etc/libibverbs.d/erdma.driver", b"driver erdma\n".as_slice(), 0o644),
                (
                    "/usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so",
                    b"stand-in".as_slice(),
                    0o644,
                ),
                (
                    "/usr/lib/x86_64-linux-gnu/liberdma.so.1.0.56.2",
                    b"stand-in for Alibaba's liberdma".as_slice(),
                    0o644,
                ),
            ],
        ),
        deb(
            "ibverbs-utils",
            None,
            Some(d_utils.as_str()),
            None,
            vec![("/usr/bin/ibv_devices", b"#!/bin/sh\n".as_slice(), 0o755)],
        ),
        deb(
            "librdmacm1",
            Some("same"),
            Some(d_cm.as_str()),
            None,
            vec![(
                "/usr/lib/x86_64-linux-gnu/librdmacm.so.1.3.56.2",
                b"stand-in".as_slice(),
                0o644,
            )],
        ),
    ]
    .into_iter()
    .map(|d| debs::fake_deb(dir, d))
    .collect()
}

/// An Ubuntu release's own archive, for the dependencies: its rdma-core (`rdma`, older than 43)
/// has no erdma provider, and loses to Alibaba's newer builds.
fn ubuntu_archive_debs(dir: &Path, rdma: &str) -> Vec<PathBuf> {
    vec![
        debs::fake_deb(dir, FakeDeb { name: "libibverbs1", version: rdma, multi_arch: Some("same"), depends: Some("adduser, libc6 (>= 2.17), libnl-3-200 (>= 3.2.7), libnl-route-3-200 (>= 3.2.7)"), files: vec![("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.old", b"old".as_slice(), 0o644)], ..Default::default() }),
        debs::fake_deb(dir, FakeDeb { name: "libnl-3-200", version: "3.5.0-0.1", multi_arch: Some("same"), depends: Some("libc6 (>= 2.14)"), files: vec![("/usr/lib/x86_64-linux-gnu/libnl-3.so.200.26.0", b"stand-in".as_slice(), 0o644)], ..Default::default() }),
        debs::fake_deb(dir, FakeDeb { name: "libnl-route-3-200", version: "3.5.0-0.1", multi_arch: Some("same"), depends: Some("libnl-3-200 (= 3.5.0-0.1), libc6 (>= 2.14)"), files: vec![("/usr/lib/x86_64-linux-gnu/libnl-route-3.so.200.26.0", b"stand-in".as_slice(), 0o644)], ..Default::default() }),
    ]
}

/// The `ubuntu-18.04`, `-20.04` and `-22.04` recipes: Alibaba's repository (`CODENAME/erdma
/// main`, seeds 001 and 004) for the eRDMA builds, Ubuntu's archive (as the base is configured
/// with it) for their dependencies, as `apt update && apt install` with Alibaba's source added
/// resolves them. Only jammy's version is established; bionic and focal reuse it (a stand-in).
#[test]
fn ubuntu_lts_recipes_take_alibabas_builds_and_ubuntus_dependencies() {
    if !support::require(
        support::have("dpkg-deb") && crate::support::apt_repo::can_build(),
        "dpkg-deb, apt-ftparchive and gpg are needed",
    ) {
        return;
    }
    // (recipe, codename, PRETTY_NAME, glibc, Ubuntu's own rdma-core)
    let releases = [
        ("18.04", "bionic", "Ubuntu 18.04.6 LTS", "2.27-3ubuntu1.6", "17.1-1ubuntu0.2"),
        ("20.04", "focal", "Ubuntu 20.04.6 LTS", "2.31-0ubuntu9.16", "28.0-1ubuntu1"),
        ("22.04", "jammy", "Ubuntu 22.04.5 LTS", "2.35-0ubuntu3.8", "39.0-1"),
    ];
    for (version, codename, pretty, libc, rdma) in releases {
        let tmp = tempfile::tempdir().unwrap();
        let key = TestKey::generate();
        let keyfile = key.write_public(tmp.path(), "repos.asc");
        let libc_min = if codename == "bionic" { "2.17" } else { "2.30" };
        let erdma = AptRepo::build_under(
            "erdma/apt/ubuntu",
            Layout::Nested { suite: format!("{codename}/erdma"), component: "main".into() },
            &alibaba_debs(&tmp.path().join("a"), libc_min),
            &key,
        );
        let ubuntu = AptRepo::build_under(
            "ubuntu",
            Layout::Nested { suite: codename.into(), component: "main".into() },
            &ubuntu_archive_debs(&tmp.path().join("u"), rdma),
            &key,
        );
        let os_release = format!("PRETTY_NAME=\"{pretty}\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"{version}\"\nVERSION_CODENAME={codename}\nID=ubuntu\nID_LIKE=debian\nUBUNTU_CODENAME={codename}\n");
        let status = format!(
            "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\nVersion: {libc}\nDescription: GNU C Library\n\n\
             Package: adduser\nStatus: install ok installed\nArchitecture: all\nVersion: 3.118ubuntu5\nDescription: add and remove users and groups\n"
        );
        let sources = format!("deb http://archive.ubuntu.com/ubuntu/ {codename} main restricted\n");
        let base = fixture::fixture_image(
            &tmp.path().join("base"),
            &[vec![
                ("etc/apt/sources.list", sources.as_bytes(), 0o644),
                ("var/lib/dpkg/status", status.as_bytes(), 0o644),
            ]],
            &[],
            Some(&os_release),
        );
        let out = tmp.path().join("out");
        let r = build(
            &[
                "--base",
                &base.reference(),
                "--mirror",
                &format!("http://archive.ubuntu.com/ubuntu/={}", ubuntu.url()),
                "--repo",
                &format!("erdma={}", erdma.url()),
                "--keyring",
                &keyfile.display().to_string(),
                "--output",
                &format!("oci:{}:x", out.display()),
            ],
            &tmp.path().join("cache"),
        );
        assert_eq!(r["images"][0]["recipe"], format!("ubuntu-{version}"));
        let got = installs(&r);
        for name in ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"] {
            assert_eq!(got[name], format!("{ALIBABA_JAMMY} install"), "{codename}: {got:?}");
        }
        assert_eq!(got["libnl-3-200"], "3.5.0-0.1 install", "{codename}: {got:?}");
        let origin = |name: &str| {
            r["images"][0]["packages"]["install"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap()["origin"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(origin("libibverbs1"), origin("ibverbs-providers"));
        let repos = &r["images"][0]["packages"]["repositories"];
        assert_eq!(repos["erdma"], erdma.url().as_str(), "{repos}");
        assert_eq!(repos[format!("base {codename}")], ubuntu.url().as_str(), "{repos}");
        let files: Vec<&str> = r["images"][0]["files_added"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            files.contains(&"/etc/apt/sources.list.d/erdma.list")
                && files.contains(&"/usr/lib/x86_64-linux-gnu/liberdma.so.1.0.56.2"),
            "{files:?}"
        );
        let img = fixture::read_fixture(&out, "x");
        let list = layer_file(
            &img.blob_path(&img.layers.last().unwrap().digest),
            "etc/apt/sources.list.d/erdma.list",
        );
        assert_eq!(list, format!("deb {} {codename}/erdma main\n", erdma.url()));
    }
}
