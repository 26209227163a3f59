//! Any Debian release, from its real archive: a `debootstrap --variant=minbase` base of Debian 12
//! and 13 in a real registry, built from the archive it is configured with, run in Docker, and
//! compared with what `apt-get install` adds in a container of the same base.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{build_cached as build, build_env};
use crate::support::{self, debian, docker_load, docker_rmi, Registry};

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// `docker build` of `FROM base` (loaded as `base_name`, removed afterwards) and `steps`, with
/// `files` (name, path) in a context under `dir`; returns the name of the result,
/// `BASE_NAME-built`.
fn docker_build(
    base: &support::OciFixture,
    base_name: &str,
    dir: &Path,
    files: &[(&str, &Path)],
    steps: &str,
) -> String {
    docker_load(base, base_name, dir);
    let ctx = tempfile::tempdir_in(dir).unwrap();
    for (name, path) in files {
        std::fs::copy(path, ctx.path().join(name)).unwrap();
    }
    std::fs::write(ctx.path().join("Dockerfile"), format!("FROM {base_name}\n{steps}\n")).unwrap();
    let built = format!("{base_name}-built");
    let out = Command::new("docker")
        .args(["build", "-q", "-t", &built])
        .arg(ctx.path())
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    docker_rmi(base_name);
    support::assert_success(&format!("docker build of {steps}"), &out);
    built
}

/// [`docker_build`], then the top layer of the result; the image is removed afterwards.
fn docker_build_top_layer(
    base: &support::OciFixture,
    base_name: &str,
    dir: &Path,
    files: &[(&str, &Path)],
    steps: &str,
) -> LayerView {
    let built = docker_build(base, base_name, dir, files, steps);
    let theirs = read_layer(&docker_top_layer(dir, &built));
    docker_rmi(&built);
    theirs
}

/// One entry of a layer: what a container sees there.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    kind: char,
    mode: u32,
    uid: u64,
    gid: u64,
    /// SHA256 of a file's content, or a symlink's target.
    content: String,
    /// Extended attributes (PAX `SCHILY.xattr.*`), values in hex.
    xattrs: Vec<(String, String)>,
}

/// A layer blob (gzip or plain tar), read once: its uncompressed size, every non-directory
/// entry by path, and the dpkg status it holds.
struct LayerView {
    size: usize,
    entries: BTreeMap<String, Meta>,
    /// Each directory entry's mode, uid and gid.
    dirs: BTreeMap<String, (u32, u64, u64)>,
    status: Option<String>,
    /// Names that are one file (hard links), each group sorted.
    linked: BTreeSet<Vec<String>>,
}

const STATUS: &str = "var/lib/dpkg/status";

fn read_layer(blob: &[u8]) -> LayerView {
    let mut raw = Vec::new();
    let mut r: Box<dyn std::io::Read> = if blob.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(blob))
    } else {
        Box::new(blob)
    };
    std::io::Read::read_to_end(&mut r, &mut raw).unwrap();
    let mut entries = BTreeMap::new();
    let mut dirs = BTreeMap::new();
    let mut status = None;
    let mut groups: Vec<Vec<String>> = Vec::new();
    for e in tar::Archive::new(raw.as_slice()).entries().unwrap() {
        let mut e = e.unwrap();
        let h = e.header().clone();
        let t = h.entry_type();
        if t.is_dir() {
            let path = e.path().unwrap().to_string_lossy().trim_start_matches("./").to_string();
            let path = path.trim_end_matches('/').to_string();
            dirs.insert(path, (h.mode().unwrap() & 0o7777, h.uid().unwrap(), h.gid().unwrap()));
            continue;
        }
        let mut xattrs: Vec<(String, String)> = Vec::new();
        if let Some(pax) = e.pax_extensions().unwrap() {
            for x in pax {
                let x = x.unwrap();
                if let Some(name) = x.key().unwrap().strip_prefix("SCHILY.xattr.") {
                    xattrs.push((name.to_string(), hex::encode(x.value_bytes())));
                }
            }
        }
        xattrs.sort();
        let path = e.path().unwrap().to_string_lossy().trim_start_matches("./").to_string();
        let (kind, content) = if t.is_symlink() {
            ('l', e.link_name().unwrap().unwrap().to_string_lossy().into_owned())
        } else if t.is_hard_link() {
            // Another name of an earlier file: what a container sees there is that file.
            let to = e
                .link_name()
                .unwrap()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("./")
                .to_string();
            let group = groups.iter().position(|g: &Vec<String>| g.contains(&to));
            match group {
                Some(i) => groups[i].push(path.clone()),
                None => groups.push(vec![to.clone(), path.clone()]),
            }
            let target: &Meta = entries.get(&to).expect("a hard link to an earlier file");
            entries.insert(path, target.clone());
            continue;
        } else {
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            if path == STATUS {
                status = Some(String::from_utf8_lossy(&data).into_owned());
            }
            ('f', hex::encode(Sha256::digest(&data)))
        };
        entries.insert(
            path,
            Meta {
                kind,
                mode: h.mode().unwrap() & 0o7777,
                uid: h.uid().unwrap(),
                gid: h.gid().unwrap(),
                content,
                xattrs,
            },
        );
    }
    let linked = groups
        .into_iter()
        .map(|mut g| {
            g.sort();
            g
        })
        .collect();
    LayerView { size: raw.len(), entries, dirs, status, linked }
}

/// The top layer of an image saved by `docker save`, as bytes.
fn docker_top_layer(tmp: &Path, image: &str) -> Vec<u8> {
    let saved = tmp.join("theirs.tar");
    support::assert_success("docker save", &docker(&["save", "-o", &s(&saved), image]));
    let dir = tmp.join("theirs");
    support::assert_success(
        "skopeo copy",
        &support::skopeo([
            "copy",
            &format!("docker-archive:{}", s(&saved)),
            &format!("oci:{}:x", s(&dir)),
        ]),
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let m: Value = serde_json::from_slice(
        &std::fs::read(support::fixture::blob_path(
            &dir,
            index["manifests"][0]["digest"].as_str().unwrap(),
        ))
        .unwrap(),
    )
    .unwrap();
    let top =
        m["layers"].as_array().unwrap().last().unwrap()["digest"].as_str().unwrap().to_string();
    std::fs::read(support::fixture::blob_path(&dir, &top)).unwrap()
}

/// The dpkg status stanzas of `names`, each as its fields (order and all).
fn status_stanzas(status: &str, names: &[&str]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    for stanza in status.split("\n\n") {
        let mut fields: Vec<(String, String)> = Vec::new();
        for line in stanza.lines() {
            match (line.starts_with([' ', '\t']), fields.last_mut()) {
                (true, Some(last)) => {
                    last.1.push('\n');
                    last.1.push_str(line);
                }
                _ => {
                    if let Some((k, v)) = line.split_once(':') {
                        fields.push((k.to_string(), v.trim_start().to_string()));
                    }
                }
            }
        }
        if let Some((_, name)) = fields.iter().find(|(k, _)| k == "Package") {
            if names.contains(&name.as_str()) {
                out.insert(name.clone(), fields.clone());
            }
        }
    }
    out
}

/// What is in a layer because something ran, not because a package was installed: apt's
/// caches and logs (ldconfig's aux-cache under /var/cache too), lock files adduser leaves
/// (lckpwdf(3)), dpkg's bookkeeping of its own run, and whiteouts. The loader cache
/// (`/etc/ld.so.cache`) is compared: erdma-build writes it as ldconfig does.
fn noise(p: &str) -> bool {
    [
        "var/cache/",
        "var/lib/apt/",
        "var/log/",
        "tmp/",
        "var/lib/dpkg/triggers/",
        "var/lib/dpkg/lock",
        "var/lib/dpkg/updates/",
    ]
    .iter()
    .any(|n| p.starts_with(n))
        || p == "etc/.pwd.lock"
        || p == "run/adduser"
        || p.ends_with("-old")
        || p.contains("/.wh.")
        || p.starts_with(".wh.")
}

/// Builds `rel`'s base with erdma-build (packages from its own archive) and with `apt-get
/// install` in Docker, and asserts the two layers hold the same files with the same modes,
/// owners and contents, and the same dpkg status stanzas for `packages`.
fn payload_equals_apt_get(rel: debian::Release, request: &[&str], packages: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let base = debian::base(rel);
    let ours_dir = tmp.path().join("ours");
    let r = build(
        &[
            "--base",
            &base.reference(),
            "--output",
            &format!("oci:{}:x", s(&ours_dir)),
            "--no-env-presets",
        ],
        &tmp.path().join("cache"),
    );
    let layer = r["images"][0]["layer"]["digest"].as_str().unwrap();
    let ours = read_layer(&std::fs::read(support::fixture::blob_path(&ours_dir, layer)).unwrap());

    let base_name = format!("erdma-test/{}-base:{}", rel.suite, std::process::id());
    let theirs = docker_build_top_layer(
        &base,
        &base_name,
        tmp.path(),
        &[],
        &format!("RUN apt-get update && apt-get install -y {}", request.join(" ")),
    );

    let (ours_size, theirs_size) = (ours.size, theirs.size);
    eprintln!(
        "{}: layer (uncompressed) erdma-build {ours_size} bytes, docker build {theirs_size} bytes",
        rel.suite
    );
    assert!(theirs_size >= 10 * ours_size, "ours {ours_size}, docker's {theirs_size}");
    let keep = |m: &BTreeMap<String, Meta>| -> BTreeMap<String, Meta> {
        m.iter()
            .filter(|(p, _)| !noise(p) && p.as_str() != STATUS)
            .map(|(p, m)| (p.clone(), m.clone()))
            .collect()
    };
    let (o, t) = (keep(&ours.entries), keep(&theirs.entries));
    let paths_o: BTreeSet<&String> = o.keys().collect();
    let paths_t: BTreeSet<&String> = t.keys().collect();
    assert_eq!(
        paths_o.difference(&paths_t).collect::<Vec<_>>(),
        Vec::<&&String>::new(),
        "only in erdma-build's layer"
    );
    assert_eq!(
        paths_t.difference(&paths_o).collect::<Vec<_>>(),
        Vec::<&&String>::new(),
        "only in apt-get's layer"
    );
    let differing: Vec<String> = o
        .iter()
        .filter(|(p, m)| t[*p] != **m)
        .map(|(p, m)| format!("{p}: ours {m:?}, apt-get's {:?}", t[p]))
        .collect();
    assert!(differing.is_empty(), "{} entries differ:\n{}", differing.len(), differing.join("\n"));
    eprintln!(
        "{}: {} files, symlinks and their modes, owners and contents equal apt-get install's",
        rel.suite,
        o.len()
    );

    // The status stanzas of what was installed: same fields, values and order as dpkg's.
    let ours_status =
        status_stanzas(ours.status.as_deref().expect("our layer has a dpkg status"), packages);
    let theirs_status = status_stanzas(
        theirs.status.as_deref().expect("apt-get's layer has a dpkg status"),
        packages,
    );
    assert_eq!(
        ours_status.keys().collect::<Vec<_>>(),
        packages.iter().collect::<BTreeSet<_>>().into_iter().collect::<Vec<_>>()
    );
    for (name, fields) in &theirs_status {
        assert_eq!(&ours_status[name], fields, "status stanza of {name}");
    }
}

#[test]
fn debian13_payload_equals_apt_get_install() {
    if !support::require_docker() || !debian::require_base() {
        return;
    }
    // adduser: libibverbs1's postinst needs it, and a trixie minbase lacks it.
    payload_equals_apt_get(
        debian::TRIXIE,
        &["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"],
        &[
            "libibverbs1",
            "ibverbs-providers",
            "ibverbs-utils",
            "librdmacm1t64",
            "libnl-3-200",
            "libnl-route-3-200",
            "adduser",
        ],
    );
}

#[test]
fn debian12_payload_equals_apt_get_install() {
    if !support::require_docker() || !debian::require_base() {
        return;
    }
    payload_equals_apt_get(
        debian::BOOKWORM,
        &["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"],
        &[
            "libibverbs1",
            "ibverbs-providers",
            "ibverbs-utils",
            "librdmacm1",
            "libnl-3-200",
            "libnl-route-3-200",
        ],
    );
}

/// Debian 13 end to end: detected (no recipe of its own: the generic one), `librdmacm1` taken as
/// `librdmacm1t64`, written to a real registry, and run in Docker with dpkg and apt checks.
#[test]
fn debian13_from_its_own_archive_in_a_registry_passes_dpkg_and_apt_in_docker() {
    if !support::require_docker() || !support::require_registry() || !debian::require_base() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start();
    let base = debian::base(debian::TRIXIE);
    support::assert_success(
        "skopeo copy",
        &support::skopeo([
            "copy",
            "--dest-tls-verify=false",
            &base.reference(),
            &reg.reference("debian:13"),
        ]),
    );
    let r = build(
        &["--base", &reg.reference("debian:13"), "--output", &reg.reference("debian:13-erdma")],
        &tmp.path().join("cache"),
    );
    let img = &r["images"][0];
    assert_eq!(img["recipe"], "apt-generic", "{img}");
    assert_eq!(img["os_release"]["version_id"], "13");
    let pk = &img["packages"];
    assert_eq!(
        pk["selected"],
        serde_json::json!([{"requested": "librdmacm1", "package": "librdmacm1t64"}]),
        "{pk}"
    );
    let installed: BTreeMap<&str, &str> = pk["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["version"].as_str().unwrap()))
        .collect();
    for want in ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1t64"] {
        assert!(installed[want].starts_with("56."), "{want}: {installed:?}");
    }
    assert!(pk["install"].as_array().unwrap().iter().all(|p| p["origin"] == "Debian"), "{pk}");
    // `check` reads the result as ready, the t64 library among the rdma-core builds that agree.
    let out = support::run_build(["check", "--json", &reg.reference("debian:13-erdma")]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let build = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "rdma-core-build")
        .unwrap()
        .clone();
    assert!(build["message"].as_str().unwrap().contains("librdmacm1t64"), "{build}");

    // Docker pulls it from the registry (loopback registries are insecure by default).
    let name = reg.reference("debian:13-erdma").trim_start_matches("docker://").to_string();
    support::assert_success("docker pull", &docker(&["pull", "-q", &name]));
    let out = docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        &name,
        "bash",
        "-c",
        "set -e
         dpkg -s libibverbs1 ibverbs-providers ibverbs-utils librdmacm1t64 | grep -c '^Status: install ok installed$'
         echo AUDIT; dpkg --audit; echo END
         apt-get check -q >/dev/null && echo CHECK-OK
         dpkg --verify libibverbs1 ibverbs-providers ibverbs-utils librdmacm1t64 libnl-3-200 libnl-route-3-200 adduser && echo VERIFY-OK
         test -f /etc/libibverbs.d/erdma.driver && echo DRIVER-OK
         ls /usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav*.so
         ibv_devices 2>&1 || echo \"ibv_devices exit $?\"
         getent group rdma",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("4\n"), "four packages installed: {text}");
    assert!(text.contains("AUDIT\nEND\n"), "dpkg --audit is empty: {text}");
    for ok in ["CHECK-OK", "VERIFY-OK", "DRIVER-OK", "liberdma-rdmav", "rdma:x:"] {
        assert!(text.contains(ok), "missing {ok} in\n{text}");
    }
    assert!(
        text.contains("Failed to get IB devices list")
            && !text.contains("error while loading shared libraries"),
        "{text}"
    );

    // A Dockerfile FROM the result keeps using apt: rdmacm-utils depends on librdmacm1t64.
    super::apt_get_works_on_top(tmp.path(), &name);
    docker_rmi(&name);
}

/// The real Debian 12 base with its apt sources replaced by `sources` (deb822), or removed.
fn with_sources(
    base: &support::OciFixture,
    dir: &Path,
    sources: Option<&str>,
    extra: &[support::fixture::Entry],
) -> support::OciFixture {
    use support::fixture;
    let lower = fixture::import_layer(base, 0, dir);
    let mut entries: Vec<fixture::Entry> =
        vec![("etc/apt/.wh.sources.list", b"".as_slice(), 0o644)];
    if let Some(text) = sources {
        entries.push(("etc/apt/sources.list.d/debian.sources", text.as_bytes(), 0o644));
    }
    entries.extend_from_slice(extra);
    let upper = fixture::entries_layer(dir, &entries);
    fixture::image_from_layers(
        dir,
        fixture::DEFAULT_TAG,
        vec![lower, upper],
        &[("PATH", debian::DEBIAN_PATH)],
        &["bash"],
    )
}

/// `--mirror URL` stands in for every source of the base (the main archive with several suites
/// in one deb822 stanza, and -security), `--mirror FROM=URL` for one archive; a base without
/// sources needs `--mirror`, and gets its release's suite from it.
#[test]
fn mirrors_stand_in_for_every_source_of_the_base() {
    if !debian::require_base() || !support::debs::require_download() {
        return;
    }
    let (Some(main), Some(security)) =
        (debian::debian_mirror(), debian::mirror_for_suite("bookworm-security"))
    else {
        panic!("the host's apt sources name no bookworm-security archive");
    };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let base = debian::debian12_base();
    let sources = "Types: deb\nURIs: http://archive.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                   Types: deb\nURIs: http://security.invalid/debian-security\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
    // And a repository that is not the distribution's, as NGC images list NVIDIA's: it keeps
    // its own URL.
    let key = support::apt_repo::TestKey::generate();
    let key_text = std::fs::read(key.write_public(tmp.path(), "cuda.asc")).unwrap();
    let plugin = support::debs::fake_deb(
        &tmp.path().join("debs"),
        support::debs::FakeDeb {
            name: "libnccl2",
            version: "2.21.5-1+cuda12.4",
            ..Default::default()
        },
    );
    let cuda = support::apt_repo::AptRepo::build_under(
        "compute/cuda/repos/debian12/x86_64",
        support::apt_repo::Layout::Flat,
        &[plugin],
        &key,
    );
    let cuda_list =
        format!("deb [signed-by=/usr/share/keyrings/cuda-test.asc] {}/ /\n", cuda.url());
    let extra: Vec<support::fixture::Entry> = vec![
        ("usr/share/keyrings/cuda-test.asc", key_text.as_slice(), 0o644),
        ("etc/apt/sources.list.d/cuda.list", cuda_list.as_bytes(), 0o644),
    ];
    let img = with_sources(&base, &tmp.path().join("several"), Some(sources), &extra);
    let img_ref = img.reference();
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "--json", "--base", img_ref.as_str()];
        args.extend_from_slice(extra);
        build_env(&args, &[("XDG_CACHE_HOME", cache.to_str().unwrap())])
    };
    let sec = format!("http://security.invalid/debian-security={security}");
    let out = plan(&["--mirror", &main, "--mirror", &sec]);
    support::assert_success("plan with mirrors", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let repos = &r["images"][0]["packages"]["repositories"];
    assert_eq!(repos["base bookworm"], main.as_str(), "{repos}");
    assert_eq!(repos["base bookworm-updates"], main.as_str(), "{repos}");
    assert_eq!(repos["base bookworm-security"], security.as_str(), "{repos}");
    assert_eq!(repos["base /"], format!("{}/", cuda.url()).as_str(), "{repos}");
    // The main archive's mirror alone has no bookworm-security: said, naming the suite.
    let out = plan(&["--mirror", &main]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bookworm-security"), "{err}");

    // Slimmed images delete their lists.
    let bare = with_sources(&base, &tmp.path().join("bare"), None, &[]);
    let out = build_env(
        &["plan", "--base", &bare.reference()],
        &[("XDG_CACHE_HOME", cache.to_str().unwrap())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("configures no apt repository")
            && err.contains("--mirror"),
        "{err}"
    );
    let out = build_env(
        &["plan", "--json", "--base", &bare.reference(), "--mirror", &main],
        &[("XDG_CACHE_HOME", cache.to_str().unwrap())],
    );
    support::assert_success("plan of a base without sources, with --mirror", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["images"][0]["packages"]["repositories"]["base bookworm"], main.as_str());
}

/// `--install` from the real Debian 13 archive: the tools the ECS eRDMA-on-GPU guide checks with, resolved with
/// the eRDMA packages.
#[test]
fn extra_packages_from_the_debian13_archive() {
    if !debian::require_base() || !support::debs::require_download() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = debian::base(debian::TRIXIE);
    let out = build_env(
        &[
            "plan",
            "--json",
            "--base",
            &base.reference(),
            "--install",
            "perftest",
            "--install",
            "rdmacm-utils",
            "--install",
            "infiniband-diags",
        ],
        &[("XDG_CACHE_HOME", tmp.path().join("cache").to_str().unwrap())],
    );
    support::assert_success("plan --install", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pk = &r["images"][0]["packages"];
    let names: Vec<&str> =
        pk["install"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for want in [
        "perftest",
        "rdmacm-utils",
        "infiniband-diags",
        "librdmacm1t64",
        "libibverbs1",
        "libibumad3",
        "libibmad5",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    assert!(pk["install"].as_array().unwrap().iter().all(|p| p["origin"] == "Debian"), "{pk}");
}

/// Recommends, held against apt on the real Debian 12 archive: every name `plan` lists as
/// left out is one that `apt-get install` (recommends on) adds and `apt-get install
/// --no-install-recommends` does not, both simulated in a container of the same base.
#[test]
fn recommends_left_out_are_what_apt_would_have_added() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = debian::base(debian::BOOKWORM);
    let out = build_env(
        &[
            "plan",
            "--json",
            "--base",
            &base.reference(),
            "--install",
            "openssh-client",
            "--skip-scripts",
        ],
        &[("XDG_CACHE_HOME", tmp.path().join("cache").to_str().unwrap())],
    );
    support::assert_success("plan --install openssh-client", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let left: Vec<String> = r["images"][0]["packages"]["recommends_left_out"]
        .as_array()
        .expect("recommends_left_out")
        .iter()
        .map(|v| v.as_str().unwrap().split(' ').next().unwrap().to_string())
        .collect();
    assert!(left.contains(&"xauth".to_string()), "{left:?}");

    let base_name = format!("erdma-test/recommends-base:{}", std::process::id());
    docker_load(&base, &base_name, tmp.path());
    let simulate = |extra: &str| -> BTreeSet<String> {
        let o = docker(&[
            "run",
            "--rm",
            &base_name,
            "sh",
            "-c",
            &format!(
                "apt-get update -qq >/dev/null && apt-get install -s -q {extra} openssh-client"
            ),
        ]);
        support::assert_success("apt-get install -s", &o);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix("Inst "))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    let with = simulate("");
    let without = simulate("--no-install-recommends");
    docker_rmi(&base_name);
    let added: BTreeSet<&String> = with.difference(&without).collect();
    for name in &left {
        assert!(added.contains(name), "{name} is not what recommends add: {added:?}");
    }

    // --install-recommends: exactly what apt-get installs with recommends on.
    let out = build_env(
        &[
            "plan",
            "--json",
            "--base",
            &base.reference(),
            "--install",
            "openssh-client",
            "--install-recommends",
            "--skip-scripts",
        ],
        &[("XDG_CACHE_HOME", tmp.path().join("cache").to_str().unwrap())],
    );
    support::assert_success("plan --install-recommends", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours: BTreeSet<String> = r["images"][0]["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    let recipe: BTreeSet<String> = ours.difference(&with).cloned().collect();
    // The recipe's own packages (rdma-core's) come on top of what apt-get was asked for.
    assert!(
        recipe.iter().all(|n| n.contains("verbs") || n.contains("rdma") || n.contains("ib")),
        "installed but not by apt-get: {recipe:?}"
    );
    let missing: Vec<&String> = with.difference(&ours).collect();
    assert!(missing.is_empty(), "apt-get installs these, erdma-build does not: {missing:?}");
    assert!(r["images"][0]["packages"].get("recommends_left_out").is_none(), "{r}");
}

/// openssh-client's way of making `ssh-agent` setgid `_ssh` (its postinst in Debian 12,
/// names changed): a system group, and `chgrp`/`chmod` unless dpkg-statoverride has the file.
const AGENT_POSTINST: &str = "action=\"$1\"\n\nset_agent_permissions() {\n\tif ! getent group _agent >/dev/null; then\n\t\taddgroup --system --quiet --force-badname _agent\n\tfi\n\tif ! dpkg-statoverride --list /usr/bin/agent-stand-in >/dev/null; then\n\t\tchgrp _agent /usr/bin/agent-stand-in\n\t\tchmod 2755 /usr/bin/agent-stand-in\n\tfi\n}\n\nif [ \"$action\" = configure ]; then\n\tset_agent_permissions\nfi\n\nexit 0\n";

/// A package carrying [`AGENT_POSTINST`] and the file it gives a group and mode.
fn agent_deb(dir: &Path) -> std::path::PathBuf {
    support::debs::fake_deb(
        dir,
        support::debs::FakeDeb {
            name: "agent-stand-in",
            version: "1.0",
            depends: Some("adduser"),
            files: vec![("/usr/bin/agent-stand-in", b"#!/bin/sh\n".as_slice(), 0o755)],
            postinst: Some(AGENT_POSTINST),
            ..Default::default()
        },
    )
}

/// The group, the owner and the setgid mode that postinst gives, held against `apt-get install`
/// of the same `.deb` in Docker on the real Debian 12 base: the file and `group`, `gshadow` and
/// their backups are the same entries (mode, owner, content).
#[test]
fn postinst_group_and_setgid_equal_apt_get_in_docker() {
    let paths =
        ["usr/bin/agent-stand-in", "etc/group", "etc/group-", "etc/gshadow", "etc/gshadow-"];
    if let Some(ours) = local_deb_equals_apt_get(agent_deb, "agent-stand-in 1.0", &paths) {
        assert_eq!(ours.entries["usr/bin/agent-stand-in"].mode, 0o2755);
    }
}

/// softhsm2-common's `groupadd --system` (Debian 12) and the useradd forms rpm packages use,
/// in a postinst guarded by `getent` as packagers write it.
const SHADOW_POSTINST: &str = "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n\tif ! getent group hsm-stand-in > /dev/null; then\n\t\tgroupadd --system hsm-stand-in > /dev/null\n\tfi\n\tgetent passwd svc-stand-in >/dev/null || useradd -r -g hsm-stand-in -d /var/lib/svc -s /usr/sbin/nologin -c \"Service stand-in\" svc-stand-in\n\tgetent passwd own-stand-in >/dev/null || useradd --system -M -d /nonexistent -s /usr/sbin/nologin own-stand-in\nfi\n";

/// groupadd and useradd in a postinst, emulated, held against `apt-get install` of the same
/// `.deb` in Docker on the real Debian 12 base (shadow 4.13): passwd, shadow, group, gshadow
/// and their backups are the same entries.
#[test]
fn postinst_groupadd_and_useradd_equal_apt_get_in_docker() {
    let deb = |dir: &Path| {
        support::debs::fake_deb(
            dir,
            support::debs::FakeDeb {
                name: "shadow-stand-in",
                version: "1.0",
                depends: Some("passwd"),
                files: vec![("/usr/bin/shadow-stand-in", b"#!/bin/sh\n".as_slice(), 0o755)],
                postinst: Some(SHADOW_POSTINST),
                ..Default::default()
            },
        )
    };
    let paths: Vec<String> = ["passwd", "shadow", "group", "gshadow"]
        .iter()
        .flat_map(|f| [format!("etc/{f}"), format!("etc/{f}-")])
        .collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    local_deb_equals_apt_get(deb, "shadow-stand-in 1.0", &paths);
}

/// A package that adds a library directory through `/etc/ld.so.conf.d` and runs `ldconfig`
/// (as packages did before the `ldconfig` trigger): the host's zlib (a soname the base has in
/// its multiarch directory too, so the two entries' order is at stake) with its soname link,
/// and bzip2's library without one (ldconfig makes it). The cache erdma-build writes, the link
/// it makes and the rest are held against `apt-get install` of the same `.deb` in Docker.
#[test]
fn a_library_directory_through_ld_so_conf_d_equals_apt_get_in_docker() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu");
    let (Ok(z), Ok(bz2)) =
        (std::fs::read(lib.join("libz.so.1.2.13")), std::fs::read(lib.join("libbz2.so.1.0.4")))
    else {
        support::require(false, "the host's libz.so.1.2.13 and libbz2.so.1.0.4 (Debian 12)");
        return;
    };
    let deb = |dir: &Path| {
        support::debs::fake_deb(
            dir,
            support::debs::FakeDeb {
                name: "xlib-stand-in",
                version: "1.0",
                files: vec![
                    ("/etc/ld.so.conf.d/xlib-stand-in.conf", b"/opt/xlib/lib\n".as_slice(), 0o644),
                    ("/opt/xlib/lib/libz.so.1.2.13", &z, 0o644),
                    ("/opt/xlib/lib/libz.so.1", b"libz.so.1.2.13".as_slice(), 0o120777),
                    ("/opt/xlib/lib/libbz2.so.1.0.4", &bz2, 0o644),
                ],
                postinst: Some("if [ \"$1\" = configure ]; then\n  ldconfig\nfi\n"),
                ..Default::default()
            },
        )
    };
    let paths = [
        "etc/ld.so.cache",
        "etc/ld.so.conf.d/xlib-stand-in.conf",
        "opt/xlib/lib/libz.so.1",
        "opt/xlib/lib/libbz2.so.1.0",
        "opt/xlib/lib/libbz2.so.1.0.4",
    ];
    local_deb_equals_apt_get(deb, "xlib-stand-in 1.0", &paths);
}

/// On a base whose ldconfig is not emulated (here: the Debian 12 base without its
/// `/etc/ld.so.cache`; Ubuntu 22.04's glibc 2.35 is the case in the field), a library package
/// in the multiarch directory is still emulated, the report saying the cache was left alone (as
/// the loader finds those libraries without it); a package that adds a library directory
/// through `/etc/ld.so.conf.d` needs the cache, and goes to the sandbox, where the image's
/// ldconfig runs.
#[test]
fn ldconfig_not_emulated_leaves_the_cache_or_uses_the_sandbox() {
    if !debian::require_base()
        || !support::require_docker()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = debian::base(debian::BOOKWORM);
    let derived = docker_build(
        &base,
        &format!("erdma-test/no-ld-cache:{}", std::process::id()),
        tmp.path(),
        &[],
        "RUN rm /etc/ld.so.cache",
    );
    let derived_dir = tmp.path().join("derived");
    support::assert_success(
        "skopeo copy",
        &support::skopeo([
            "copy",
            &format!("docker-daemon:{derived}"),
            &format!("oci:{}:x", s(&derived_dir)),
        ]),
    );
    docker_rmi(&derived);
    let reference = format!("oci:{}:x", s(&derived_dir));
    let lib = tmp.path().join("lib-stand-in");
    let deb = |dir: &Path, name: &'static str, files: Vec<(&'static str, &'static [u8], u32)>| {
        support::debs::fake_deb(
            dir,
            support::debs::FakeDeb {
                name,
                version: "1.0",
                files,
                postinst: Some("if [ \"$1\" = configure ]; then\n  ldconfig\nfi\n"),
                ..Default::default()
            },
        )
    };
    let plain = deb(
        &lib,
        "plainlib-stand-in",
        vec![("/usr/lib/x86_64-linux-gnu/libplain.so.1", b"".as_slice(), 0o644)],
    );
    let r =
        super::build_one_deb(&reference, &plain, &tmp.path().join("a"), &tmp.path().join("cache"));
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
    let rec = r["images"][0]["packages"]["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["package"] == "plainlib-stand-in 1.0")
        .unwrap()
        .clone();
    assert_eq!(rec["outcome"], "no-effect", "{rec}");
    assert!(
        rec["detail"].as_str().unwrap().contains("the base has no /etc/ld.so.cache to update"),
        "{rec}"
    );
    let dir = deb(
        &lib,
        "dirlib-stand-in",
        vec![("/etc/ld.so.conf.d/dirlib.conf", b"/opt/dirlib\n".as_slice(), 0o644)],
    );
    let r =
        super::build_one_deb(&reference, &dir, &tmp.path().join("b"), &tmp.path().join("cache"));
    let sandbox = &r["images"][0]["packages"]["sandbox"];
    assert!(sandbox["because"].as_str().unwrap().contains("ldconfig (the base has no"), "{r}");
}

/// Builds the `.deb` `make` writes on the real Debian 12 base with erdma-build (its scripts
/// emulated, `label` naming it in the report) and with `apt-get install` in Docker, and holds
/// `paths` of the two layers equal (each present in ours). Returns our layer; `None` where
/// Docker or the base is missing.
fn local_deb_equals_apt_get(
    make: impl Fn(&Path) -> std::path::PathBuf,
    label: &str,
    paths: &[&str],
) -> Option<LayerView> {
    if !debian::require_base()
        || !support::require_docker()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
    {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = make(tmp.path());
    let (r, ours, theirs) = local_deb_layers(debian::BOOKWORM, &deb, "local-deb-base", tmp.path());
    let scripts = r["images"][0]["packages"]["scripts"].as_array().unwrap();
    let rec = scripts.iter().find(|r| r["package"] == label).unwrap();
    assert_eq!(rec["outcome"], "emulated", "{rec}");
    for p in paths {
        assert_eq!(ours.entries.get(*p), theirs.entries.get(*p), "{p}");
        assert!(ours.entries.contains_key(*p), "{p} is in the layers");
    }
    Some(ours)
}

/// The local `.deb` `deb` installed on `rel`'s base with erdma-build (`--package`) and with
/// `apt-get install --no-install-recommends` of the same file in Docker (loaded as `name`):
/// erdma-build's report, its layer and apt-get's.
fn local_deb_layers(
    rel: debian::Release,
    deb: &Path,
    name: &str,
    tmp: &Path,
) -> (Value, LayerView, LayerView) {
    let base = debian::base(rel);
    let ours_dir = tmp.join("ours");
    let r = super::build_one_deb(&base.reference(), deb, &ours_dir, &tmp.join("cache"));
    let layer = r["images"][0]["layer"]["digest"].as_str().unwrap();
    let ours = read_layer(&std::fs::read(support::fixture::blob_path(&ours_dir, layer)).unwrap());
    let theirs = docker_build_top_layer(
        &base,
        &format!("erdma-test/{name}:{}", std::process::id()),
        tmp,
        &[("local.deb", deb)],
        "COPY local.deb /tmp/local.deb\nRUN apt-get update && apt-get install -y --no-install-recommends /tmp/local.deb",
    );
    (r, ours, theirs)
}

/// What differs between two runs of the same maintainer scripts by design, never by a fault:
/// keys, seeds and salts a script makes at random, and the dates a run writes.
fn made_per_run(p: &str) -> bool {
    // openssh-server's postinst: `ssh-keygen -A` (host keys are made per build, as apt-get
    // makes them per `docker build`).
    p.starts_with("etc/ssh/ssh_host_")
        // systemd's machine id, made when a package first needs one (systemd's postinst).
        || p == "etc/machine-id"
        // D-Bus's, made by dbus's postinst (`dbus-uuidgen --ensure`).
        || p == "var/lib/dbus/machine-id"
}

/// `--install` of `request` on `rel`'s base, with erdma-build and with `apt-get install
/// --no-install-recommends` in Docker on the same base: the whole layers, compared entry by
/// entry (files, symlinks, hard-link groups, modes, owners, contents, the whole dpkg status),
/// except [`noise`] and [`made_per_run`] (keys: present in both with the same mode and owner).
/// Returns erdma-build's report and its image directory.
fn extras_equal_apt_get(
    rel: debian::Release,
    request: &[&str],
    tmp: &Path,
) -> (Value, std::path::PathBuf) {
    let base = debian::base(rel);
    let ours_dir = tmp.join("ours");
    let mut args = vec![
        "--base".to_string(),
        base.reference(),
        "--no-packages".into(),
        "--no-env-presets".into(),
        "--output".into(),
        format!("oci:{}:x", s(&ours_dir)),
    ];
    for r in request {
        args.extend(["--install".to_string(), r.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = build(&args, &tmp.join("cache"));
    let layer = r["images"][0]["layer"]["digest"].as_str().unwrap();
    let ours = read_layer(&std::fs::read(support::fixture::blob_path(&ours_dir, layer)).unwrap());
    let base_name = format!("erdma-test/{}-extras:{}", rel.suite, std::process::id());
    let theirs = docker_build_top_layer(
        &base,
        &base_name,
        tmp,
        &[],
        &format!(
            "RUN apt-get update && apt-get install -y --no-install-recommends {}",
            request.join(" ")
        ),
    );
    let keep = |m: &BTreeMap<String, Meta>| -> BTreeMap<String, Meta> {
        m.iter()
            .filter(|(p, _)| !noise(p))
            .map(|(p, m)| {
                let mut m = m.clone();
                if made_per_run(p) {
                    m.content = "made per run".into();
                }
                (p.clone(), m)
            })
            .collect()
    };
    let (o, t) = (keep(&ours.entries), keep(&theirs.entries));
    let mut differing: Vec<String> = Vec::new();
    for p in o.keys().chain(t.keys()).collect::<BTreeSet<_>>() {
        match (o.get(p), t.get(p)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => differing.push(format!("{p}: erdma-build {a:?}, apt-get {b:?}")),
        }
    }
    assert!(differing.is_empty(), "{} entries differ:\n{}", differing.len(), differing.join("\n"));
    assert_eq!(ours.linked, theirs.linked, "hard links");
    // Directories: the mode and owner of each that both layers hold (a layer holds the parents
    // of what changed, so which directories appear differs by how each side wrote them).
    let dir_diff: Vec<String> = ours
        .dirs
        .iter()
        .filter(|(p, _)| !noise(&format!("{p}/")))
        .filter_map(|(p, m)| {
            let t = theirs.dirs.get(p)?;
            (t != m).then(|| {
                format!(
                    "{p}/: erdma-build {:o} {}:{}, apt-get {:o} {}:{}",
                    m.0, m.1, m.2, t.0, t.1, t.2
                )
            })
        })
        .collect();
    // And every directory apt-get's layer holds, ours holds too (`/run`: the parent of what a
    // run leaves there, adduser's lock, which is noise).
    let missing: Vec<&String> = theirs
        .dirs
        .keys()
        .filter(|p| !noise(&format!("{p}/")) && *p != "run" && !ours.dirs.contains_key(*p))
        .collect();
    assert!(dir_diff.is_empty(), "directories differ:\n{}", dir_diff.join("\n"));
    assert!(missing.is_empty(), "directories only apt-get's layer holds: {missing:?}");
    assert_eq!(ours.status, theirs.status, "the dpkg status");
    eprintln!(
        "{}: --install {}: {} entries equal apt-get install --no-install-recommends's",
        rel.suite,
        request.join(" "),
        o.len()
    );
    (r, ours_dir)
}

/// openssh-server's postinst makes the `sshd` user with `adduser`, its configuration with
/// `ucf` and its host keys with `ssh-keygen`: nothing erdma-build emulates, so dpkg runs the
/// scripts in the sandbox, and the layer equals apt-get's. `sshd -t` accepts the result.
#[test]
fn debian12_openssh_server_in_the_sandbox_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, dir) = extras_equal_apt_get(debian::BOOKWORM, &["openssh-server"], tmp.path());
    let sandbox = &r["images"][0]["packages"]["sandbox"];
    assert!(sandbox["because"].as_str().unwrap().contains("postinst"), "{sandbox}");
    assert!(sandbox["layers_read"].as_u64().unwrap() >= 1, "{sandbox}");
    let scripts = r["images"][0]["packages"]["scripts"].as_array().unwrap();
    let rec = scripts
        .iter()
        .find(|s| {
            s["package"].as_str().unwrap().starts_with("openssh-server ")
                && s["script"] == "postinst"
        })
        .unwrap();
    assert_eq!(rec["outcome"], "run", "{rec}");
    let out = run_in_result(
        &dir,
        "mkdir -p /run/sshd && /usr/sbin/sshd -t && getent passwd sshd && dpkg --audit",
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("sshd:x:"), "{out:?}");
}

/// Runs `script` in a container of the image built into `dir` (no network), asserting success.
fn run_in_result(dir: &Path, script: &str) -> std::process::Output {
    let name = format!("erdma-test/result:{}", std::process::id());
    support::assert_success(
        "skopeo copy",
        &support::skopeo(["copy", &format!("oci:{}:x", s(dir)), &format!("docker-daemon:{name}")]),
    );
    let out = docker(&["run", "--rm", "--network=none", &name, "sh", "-c", script]);
    docker_rmi(&name);
    support::assert_success(script, &out);
    out
}

/// The same on Debian 13.
#[test]
fn debian13_openssh_server_in_the_sandbox_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, _) = extras_equal_apt_get(debian::TRIXIE, &["openssh-server"], tmp.path());
    assert!(r["images"][0]["packages"]["sandbox"]["because"].is_string(), "{r}");
}

/// openmpi-bin (what MPI jobs run) takes the emulated path: its scripts are alternatives,
/// groups, ownership and ldconfig, nothing the sandbox is needed for, and no base layer is read.
/// The layer equals apt-get's all the same.
#[test]
fn debian12_openmpi_emulated_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, dir) = extras_equal_apt_get(debian::BOOKWORM, &["openmpi-bin"], tmp.path());
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
    let out = run_in_result(&dir, "mpirun --version && dpkg --audit");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Open MPI"), "{out:?}");
}

/// uuid-runtime's postinst adds the `uuidd` group and system user, gives `/var/lib/libuuid`
/// to them, registers the SysV script with `update-rc.d` and enables its systemd units with
/// `deb-systemd-helper`: all emulated, no base layer read, and the layer equals apt-get's
/// (passwd, shadow and their backups, the rc?.d links, the `.wants` links and
/// deb-systemd-helper's state). `uuidgen` runs in the result and `dpkg --audit` is quiet.
#[test]
fn debian12_uuid_runtime_emulated_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, dir) = extras_equal_apt_get(debian::BOOKWORM, &["uuid-runtime"], tmp.path());
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
    let out = run_in_result(&dir, "uuidgen && getent passwd uuidd && dpkg --audit");
    assert!(String::from_utf8_lossy(&out.stdout).contains("uuidd:x:"), "{out:?}");
}

/// plocate's postinst registers `locate` with update-alternatives (three slaves), adds its
/// group (`addgroup --system "$GROUP"`), makes `/usr/bin/plocate` setgid to it with
/// `dpkg-statoverride --update --add`, tests for databases no package ships and enables its
/// timer: all emulated, and the layer equals apt-get's, the statoverride database included.
#[test]
fn debian12_plocate_emulated_equals_apt_get() {
    plocate_emulated_equals_apt_get(debian::BOOKWORM);
}

/// The same on Debian 13 (adduser 3.152, init-system-helpers 1.68, plocate 1.1.23, merged
/// `/usr` with the units under `/usr/lib/systemd/system`).
#[test]
fn debian13_plocate_emulated_equals_apt_get() {
    plocate_emulated_equals_apt_get(debian::TRIXIE);
}

fn plocate_emulated_equals_apt_get(rel: debian::Release) {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, dir) = extras_equal_apt_get(rel, &["plocate"], tmp.path());
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
    let out = run_in_result(
        &dir,
        "stat -c '%a %G' /usr/bin/plocate && locate --help >/dev/null && dpkg --audit",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2755 plocate");
}

/// Packages whose scripts each add a system group, none depending on another: uuid-runtime
/// and plocate, whose scripts are emulated (on Debian 12); then with tcpdump and cron too, whose scripts go
/// to the sandbox (cron's group comes with cron-daemon-common, which cron pre-depends on, so
/// apt has dpkg configure it first, on its own). The groups get their gids in the order the
/// packages are configured, which apt leaves to `dpkg --configure --pending`: dpkg's package
/// hash order, not the command line's. Each set, in two command-line orders, gives apt-get's
/// layer (the gids in `/etc/group`, `/etc/gshadow`, plocate's setgid override and crontab's
/// group included), and the same order of groups both times, which is not the order of the
/// command line in at least one of them.
#[test]
fn debian12_group_creating_packages_are_configured_as_apt_get_does() {
    group_creating_packages_are_configured_as_apt_get_does(debian::BOOKWORM);
}

/// The same on Debian 13 (dpkg 1.22, apt 3.0).
#[test]
fn debian13_group_creating_packages_are_configured_as_apt_get_does() {
    group_creating_packages_are_configured_as_apt_get_does(debian::TRIXIE);
}

fn group_creating_packages_are_configured_as_apt_get_does(rel: debian::Release) {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    fn group_of(package: &str) -> &str {
        match package {
            "cron" => "crontab",
            "uuid-runtime" => "uuidd",
            other => other,
        }
    }
    // On Debian 13 uuid-runtime brings systemd, whose preinst goes to the sandbox.
    let emulated = rel.suite == "bookworm";
    let sets: [(&[&str], &[&str], bool); 2] = [
        (&["plocate", "uuid-runtime"], &["uuid-runtime", "plocate"], !emulated),
        (
            &["plocate", "tcpdump", "cron", "uuid-runtime"],
            &["uuid-runtime", "cron", "tcpdump", "plocate"],
            true,
        ),
    ];
    for (one, other, sandboxed) in sets {
        let mut seen: Vec<(Vec<String>, Vec<String>)> = Vec::new();
        for request in [one, other] {
            let tmp = tempfile::tempdir().unwrap();
            let (r, dir) = extras_equal_apt_get(rel, request, tmp.path());
            let sandbox = r["images"][0]["packages"].get("sandbox").is_some();
            assert_eq!(sandbox, sandboxed, "{request:?}: {r}");
            let out = run_in_result(&dir, "cat /etc/group");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let by_request: Vec<String> = request.iter().map(|p| group_of(p).to_string()).collect();
            let added: Vec<String> = text
                .lines()
                .filter_map(|l| l.split(':').next())
                .filter(|g| by_request.iter().any(|b| b == g))
                .map(str::to_string)
                .collect();
            assert_eq!(added.len(), request.len(), "{text}");
            seen.push((added, by_request));
        }
        assert_eq!(seen[0].0, seen[1].0, "the command line's order changed the groups' order");
        assert!(
            seen.iter().any(|(added, by_request)| added != by_request),
            "{seen:?}: the groups came in command-line order both times, which shows nothing"
        );
    }
}

/// polkitd brings systemd, which `init` (essential) depends on through systemd-sysv: apt
/// configures systemd and what it needs itself, before the rest, dmsetup and libdevmapper (each
/// depending on the other) among them, in one `dpkg --configure`. Through the sandbox, the
/// layer equals apt-get's.
#[test]
fn debian12_polkitd_through_the_sandbox_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, _) = extras_equal_apt_get(debian::BOOKWORM, &["polkitd"], tmp.path());
    let commands = &r["images"][0]["packages"]["sandbox"]["commands"];
    let configure = commands
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .find(|c| c.starts_with("dpkg --no-triggers --configure "))
        .unwrap_or_else(|| panic!("no configure of apt's own: {commands}"));
    assert!(
        configure.contains(" dmsetup:amd64")
            && configure.contains(" libdevmapper1.02.1:amd64")
            && configure.contains(" systemd:amd64"),
        "{configure}"
    );
}

/// iputils-ping's postinst sets `PROGRAM=$(dpkg-divert --truename /bin/ping)`, and where
/// `command -v setcap` finds libcap2-bin (a dependency on Debian 12) gives `ping` its capability
/// with `setcap cap_net_raw+ep` (then `chmod u-s`), else makes it setuid: emulated, no base layer read, and the capability lands in the layer as
/// the `security.capability` attribute Docker's layer carries for the same install (revision 2),
/// which `getcap` in the result reads.
#[test]
fn debian12_setcap_emulated_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (r, dir) = extras_equal_apt_get(debian::BOOKWORM, &["iputils-ping"], tmp.path());
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
    let out = run_in_result(&dir, "getcap /usr/bin/ping && dpkg --audit");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/usr/bin/ping cap_net_raw=ep");
}

/// A stat override the base already has (`dpkg-statoverride --add`) applies to the file a
/// package then unpacks, as dpkg applies it, and the postinst that checks for one leaves the
/// file alone: held against `apt-get install` of the same `.deb` in Docker on the same base.
#[test]
fn a_base_statoverride_applies_as_dpkg_applies_it() {
    if !debian::require_base()
        || !support::require_docker()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = agent_deb(tmp.path());
    // The base, with an override made by dpkg-statoverride itself.
    let base = debian::base(debian::BOOKWORM);
    let derived = docker_build(
        &base,
        &format!("erdma-test/override-plain:{}", std::process::id()),
        tmp.path(),
        &[],
        "RUN dpkg-statoverride --add root nogroup 0750 /usr/bin/agent-stand-in",
    );
    let derived_dir = tmp.path().join("derived");
    support::assert_success(
        "skopeo copy",
        &support::skopeo([
            "copy",
            &format!("docker-daemon:{derived}"),
            &format!("oci:{}:x", s(&derived_dir)),
        ]),
    );
    docker_rmi(&derived);
    let derived = support::fixture::read_fixture(&derived_dir, "x");

    let ours_dir = tmp.path().join("ours");
    let r = super::build_one_deb(&derived.reference(), &deb, &ours_dir, &tmp.path().join("cache"));
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "emulated: {r}");
    let layer = r["images"][0]["layer"]["digest"].as_str().unwrap();
    let ours = read_layer(&std::fs::read(support::fixture::blob_path(&ours_dir, layer)).unwrap());
    let theirs = docker_build_top_layer(
        &derived,
        &format!("erdma-test/override-apt:{}", std::process::id()),
        tmp.path(),
        &[("agent.deb", &deb)],
        "COPY agent.deb /tmp/agent.deb\nRUN apt-get update && apt-get install -y --no-install-recommends /tmp/agent.deb",
    );
    for p in ["usr/bin/agent-stand-in", "etc/group", "etc/gshadow"] {
        assert_eq!(ours.entries.get(p), theirs.entries.get(p), "{p}");
    }
    let agent = &ours.entries["usr/bin/agent-stand-in"];
    assert_eq!((agent.mode, agent.uid, agent.gid), (0o750, 0, 65534), "{agent:?}");
}

/// A package whose files activate a base package's file trigger (debianutils' interest in
/// `/usr/share/debianutils/shells.d`, which `update-shells` turns into `/etc/shells` and
/// `/var/lib/shells.state`): emulated, no base layer read, and both files equal what
/// `apt-get install` of the same `.deb` leaves in Docker, on Debian 12 and 13.
#[test]
fn a_base_file_trigger_emulated_as_dpkg_runs_it() {
    for rel in [debian::BOOKWORM, debian::TRIXIE] {
        base_file_trigger_emulated_as_dpkg_runs_it(rel);
    }
}

fn base_file_trigger_emulated_as_dpkg_runs_it(rel: debian::Release) {
    if !debian::require_base()
        || !support::require_docker()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = support::debs::fake_deb(
        tmp.path(),
        support::debs::FakeDeb {
            name: "shell-stand-in",
            version: "1.0",
            files: vec![
                ("/usr/bin/fakesh", b"#!/bin/sh\nexec /bin/sh \"$@\"\n".as_slice(), 0o755),
                ("/usr/share/debianutils/shells.d/shell-stand-in", b"/usr/bin/fakesh\n", 0o644),
            ],
            ..Default::default()
        },
    );
    let (r, ours, theirs) = local_deb_layers(rel, &deb, "trigger-base", tmp.path());
    assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
    let scripts = r["images"][0]["packages"]["scripts"].as_array().unwrap();
    assert!(
        scripts.iter().any(|s| s["outcome"] == "emulated"
            && s["detail"].as_str().unwrap_or_default().contains("update-shells")),
        "{scripts:?}"
    );
    for p in ["etc/shells", "var/lib/shells.state"] {
        assert!(theirs.entries.contains_key(p), "apt-get's trigger wrote {p}");
        assert_eq!(ours.entries.get(p), theirs.entries.get(p), "{}: {p}", rel.suite);
    }
    assert_eq!(ours.status, theirs.status, "the dpkg status");
}

/// tmux registers its shell with `add-shell /usr/bin/tmux` in its postinst on Debian 12, and by
/// shipping `/usr/share/debianutils/shells.d/tmux` (debianutils' trigger, `update-shells`) on
/// Debian 13, whose postinst is dh_installtmpfiles' `[ -x "$(command -v systemd-tmpfiles)" ]`
/// guard (no systemd in the base: nothing runs). Both emulated, no base layer read, and the
/// layer equals apt-get's (`/etc/shells` and the state file included); the result's
/// `/etc/shells` lists tmux.
#[test]
fn tmux_shell_registration_emulated_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    for rel in [debian::BOOKWORM, debian::TRIXIE] {
        let tmp = tempfile::tempdir().unwrap();
        let (r, dir) = extras_equal_apt_get(rel, &["tmux"], tmp.path());
        assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
        let out = run_in_result(&dir, "grep -x /usr/bin/tmux /etc/shells && dpkg --audit");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/usr/bin/tmux");
    }
}

/// s5's postinst is one `ucf /usr/share/s5/s5.conf /etc/s5.conf`; s5 pulls ucf, whose preinst
/// rotates nothing on a fresh base and whose postinst `touch`es ucf's state files (and on
/// Debian 12 sources debconf's confmodule, whose registration of ucf's templates in
/// `/var/cache/debconf` is not written: an accepted difference, under `/var/cache`). All
/// emulated, no base layer read, and the layer equals apt-get's on Debian 12 and 13:
/// `/etc/s5.conf`, ucf's hashfile and its `.0` copy, the empty registry, the cached copy (the
/// file is under 25600 bytes). On Debian 13 ucf also pulls procps, whose file trigger interest
/// is registered as dpkg registers it.
#[test]
fn s5_ucf_emulated_equals_apt_get() {
    if !debian::require_base() || !support::require_docker() {
        return;
    }
    for rel in [debian::BOOKWORM, debian::TRIXIE] {
        let tmp = tempfile::tempdir().unwrap();
        let (r, dir) = extras_equal_apt_get(rel, &["s5"], tmp.path());
        assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
        let out = run_in_result(
            &dir,
            "cat /var/lib/ucf/hashfile && ls /var/lib/ucf/cache && tail -n1 /var/lib/dpkg/triggers/File && dpkg --audit",
        );
        // Debian 13's ucf pulls procps, whose `interest-noawait /usr/lib/sysctl.d` dpkg
        // appends to its file trigger database (as seen in Docker).
        let last = match rel.suite {
            "trixie" => "/usr/lib/sysctl.d procps/noawait",
            _ => "/usr/share/debianutils/shells.d debianutils/noawait",
        };
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("3d78a38e97ed351f5846530ea46a0ddf  /etc/s5.conf\n:etc:s5.conf\n{last}\n")
        );
    }
}

/// A `.deb` whose postinst makes three `ucf` calls (`--three-way` on a file of 30000 bytes,
/// a small file, the same large file without `--three-way`) and registers two of them with
/// `ucfr`: everything under `/etc/ucf-stand-in/` and `/var/lib/ucf/` equals what `apt-get
/// install` of the same `.deb` leaves in Docker, on Debian 12 (the hashfile rotated to `.0`,
/// `.1`, `.2`) and 13 (only `.0`: ucf 3.0052's loop runs over one word once it has talked to
/// debconf); the large file is cached only where `--three-way` asks.
#[test]
fn ucf_calls_equal_apt_get_in_docker() {
    if !debian::require_base()
        || !support::require_docker()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
    {
        return;
    }
    let big = vec![b'x'; 30000];
    let postinst = "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n  ucf --three-way /usr/share/ucf-stand-in/big.conf /etc/ucf-stand-in/big.conf\n  ucf /usr/share/ucf-stand-in/small.conf /etc/ucf-stand-in/small.conf\n  ucf /usr/share/ucf-stand-in/big.conf /etc/ucf-stand-in/big2.conf\n  ucfr ucf-stand-in /etc/ucf-stand-in/big.conf\n  ucfr ucf-stand-in /etc/ucf-stand-in/small.conf\n  ucfr ucf-stand-in /etc/ucf-stand-in/small.conf\nfi\n";
    for rel in [debian::BOOKWORM, debian::TRIXIE] {
        let tmp = tempfile::tempdir().unwrap();
        let deb = support::debs::fake_deb(
            tmp.path(),
            support::debs::FakeDeb {
                name: "ucf-stand-in",
                version: "1.0",
                arch: "all",
                depends: Some("ucf"),
                files: vec![
                    ("/usr/share/ucf-stand-in/big.conf", big.as_slice(), 0o644),
                    ("/usr/share/ucf-stand-in/small.conf", b"a = 1\n".as_slice(), 0o600),
                    ("/etc/ucf-stand-in/", b"".as_slice(), 0o755),
                ],
                postinst: Some(postinst),
                ..Default::default()
            },
        );
        let (r, ours, theirs) = local_deb_layers(rel, &deb, "ucf-base", tmp.path());
        assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
        let pick = |v: &LayerView| -> BTreeMap<String, Meta> {
            v.entries
                .iter()
                .filter(|(p, _)| {
                    (p.starts_with("etc/ucf-stand-in/") || p.starts_with("var/lib/ucf/"))
                        && !p.contains("/.wh.")
                })
                .map(|(p, m)| (p.clone(), m.clone()))
                .collect()
        };
        let (o, t) = (pick(&ours), pick(&theirs));
        assert_eq!(o, t, "{}", rel.suite);
        let rotated = if rel.suite == "bookworm" { 3 } else { 1 };
        let copies = t.keys().filter(|p| p.starts_with("var/lib/ucf/hashfile.")).count();
        assert_eq!(copies, rotated, "{}: {:?}", rel.suite, t.keys());
        assert!(t.contains_key("var/lib/ucf/cache/:etc:ucf-stand-in:big.conf"));
        assert!(!t.contains_key("var/lib/ucf/cache/:etc:ucf-stand-in:big2.conf"));
        assert_eq!(t["etc/ucf-stand-in/small.conf"].mode, 0o600);
    }
}

/// `adduser --system --group --home DIR NAME` where DIR and its parent do not exist: adduser
/// makes the parent (0755, root's) and the home, gives it to the new user and group and sets
/// `SYS_DIR_MODE` (0755 by default): emulated, and the directories, owners and account files
/// equal what `apt-get install` of the same `.deb` leaves in Docker, on Debian 12 and 13.
#[test]
fn adduser_system_home_equals_apt_get_in_docker() {
    if !debian::require_base()
        || !support::require_docker()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
    {
        return;
    }
    let postinst = "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n  adduser --system --group --home /var/lib/home-stand-in/data home-stand-in\nfi\n";
    for rel in [debian::BOOKWORM, debian::TRIXIE] {
        let tmp = tempfile::tempdir().unwrap();
        let deb = support::debs::fake_deb(
            tmp.path(),
            support::debs::FakeDeb {
                name: "home-stand-in",
                version: "1.0",
                arch: "all",
                depends: Some("adduser"),
                files: vec![(
                    "/usr/share/doc/home-stand-in/README",
                    b"TEST ONLY\n".as_slice(),
                    0o644,
                )],
                postinst: Some(postinst),
                ..Default::default()
            },
        );
        let (r, ours, theirs) = local_deb_layers(rel, &deb, "home-base", tmp.path());
        assert!(r["images"][0]["packages"].get("sandbox").is_none(), "{r}");
        for d in ["var/lib/home-stand-in", "var/lib/home-stand-in/data"] {
            assert!(theirs.dirs.contains_key(d), "{}: apt-get made {d}", rel.suite);
            assert_eq!(ours.dirs.get(d), theirs.dirs.get(d), "{}: {d}", rel.suite);
        }
        let (mode, uid, gid) = theirs.dirs["var/lib/home-stand-in/data"];
        assert_eq!(mode, 0o755, "{}", rel.suite);
        assert!((100..1000).contains(&uid) && gid >= 100, "{}: {uid}:{gid}", rel.suite);
        for f in ["passwd", "group", "shadow", "gshadow"] {
            for p in [format!("etc/{f}"), format!("etc/{f}-")] {
                assert_eq!(ours.entries.get(&p), theirs.entries.get(&p), "{}: {p}", rel.suite);
            }
        }
    }
}
