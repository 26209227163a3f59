//! Multi-platform bases in a registry: a Docker manifest list as `docker manifest push` makes
//! it and an OCI index as `skopeo copy --all` pushes it, each over a real Debian 12 amd64 image
//! and a real Debian 12 arm64 one (debootstrapped under qemu-user-static). `--platform all`
//! writes a new index to the registry that Docker pulls and runs on both platforms, with the
//! packages of each image's own architecture; `plan --platform` picks one child; attestation
//! entries are passed over; a tampered index is refused with nothing written.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

use super::{build_cached, build_env, build_fails, runnable_base};
use crate::support::{
    self, debian,
    fixture::{self, Platform},
    OciFixture, Registry,
};

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// How a multi-platform image gets into a registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// Each image pushed as Docker schema 2 (`skopeo copy --format v2s2`) under
    /// `TAG-ARCH`, then `docker manifest create` and `docker manifest push` over them: a
    /// Docker manifest list of Docker manifests.
    DockerManifestList,
    /// `skopeo copy --all` of an OCI layout whose tag names an index: an OCI index of OCI
    /// manifests.
    OciIndex,
}

impl IndexKind {
    pub fn media_type(self) -> &'static str {
        match self {
            IndexKind::DockerManifestList => {
                "application/vnd.docker.distribution.manifest.list.v2+json"
            }
            IndexKind::OciIndex => fixture::MEDIA_INDEX,
        }
    }

    /// What the kind needs besides the registry and skopeo (`support::require`'s arguments).
    pub fn needs(self) -> (bool, &'static str) {
        match self {
            IndexKind::DockerManifestList => (
                support::have("docker"),
                "the docker CLI is needed for `docker manifest push` (run scripts/setup)",
            ),
            IndexKind::OciIndex => (true, ""),
        }
    }
}

/// Runs the docker CLI with `DOCKER_CONFIG` in `work` (its manifest lists are kept there), so
/// the machine's Docker configuration is neither read nor changed.
fn docker_cli(work: &Path, args: &[&str]) -> Output {
    let config = work.join("docker-config");
    std::fs::create_dir_all(&config).unwrap();
    Command::new("docker")
        .args(args)
        .env("DOCKER_CONFIG", &config)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).stdin(std::process::Stdio::null()).output().unwrap()
}

/// Pushes `images` to `reg` as one multi-platform `NAME:TAG` of `kind` (scratch files in
/// `work`) and returns the index as the registry serves it, and its digest.
pub fn push_index(
    reg: &Registry,
    kind: IndexKind,
    images: &[(&OciFixture, Platform)],
    name_tag: &str,
    work: &Path,
) -> (Value, String) {
    std::fs::create_dir_all(work).unwrap();
    let target = reg.reference(name_tag);
    match kind {
        IndexKind::OciIndex => {
            let layout = fixture::index_layout(
                &work.join(format!("index-{}", name_tag.replace([':', '/'], "-"))),
                "index",
                images,
                &[],
            );
            let out = support::skopeo([
                "copy",
                "--all",
                "--quiet",
                "--dest-tls-verify=false",
                &layout.reference(),
                &target,
            ]);
            support::assert_success("skopeo copy --all", &out);
        }
        IndexKind::DockerManifestList => {
            let list = target.trim_start_matches("docker://").to_string();
            let mut create =
                vec!["manifest".to_string(), "create".into(), "--insecure".into(), list.clone()];
            for (img, p) in images {
                let child = format!("{name_tag}-{}", p.architecture);
                let out = support::skopeo([
                    "copy",
                    "--quiet",
                    "--format",
                    "v2s2",
                    "--dest-tls-verify=false",
                    &img.reference(),
                    &reg.reference(&child),
                ]);
                support::assert_success("skopeo copy --format v2s2", &out);
                create.push(reg.reference(&child).trim_start_matches("docker://").to_string());
            }
            let create: Vec<&str> = create.iter().map(String::as_str).collect();
            support::assert_success("docker manifest create", &docker_cli(work, &create));
            support::assert_success(
                "docker manifest push",
                &docker_cli(work, &["manifest", "push", "--insecure", &list]),
            );
        }
    }
    let raw = support::skopeo(["inspect", "--raw", "--tls-verify=false", &target]);
    support::assert_success("skopeo inspect --raw", &raw);
    let index: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(index["mediaType"], kind.media_type(), "{index}");
    let platforms: Vec<Value> =
        index["manifests"].as_array().unwrap().iter().map(|m| m["platform"].clone()).collect();
    assert_eq!(platforms, images.iter().map(|(_, p)| p.json()).collect::<Vec<_>>(), "{index}");
    (index, sha256(&raw.stdout))
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b)))
}

/// The GETs of `/v2/*/manifests/DIGEST` in `log`, as (digest, status).
fn manifest_gets(log: &[support::AccessLogEntry]) -> Vec<(String, u16)> {
    log.iter()
        .filter(|l| l.method == "GET")
        .filter_map(|l| l.path().rsplit_once("/manifests/").map(|(_, d)| (d.to_string(), l.status)))
        .collect()
}

/// The requests `reg` logged after the first `skip`.
/// Both children of the base's index were read from the manifests endpoint, once each; no
/// manifest was asked for as a blob, and nothing answered "unknown".
fn assert_children_read_once(reg: &Registry, log: &[support::AccessLogEntry], children: &[String]) {
    let gets = manifest_gets(log);
    for d in children {
        assert_eq!(
            gets.iter().filter(|(g, st)| g == d && *st == 200).count(),
            1,
            "child {d}: {gets:?}"
        );
        assert_eq!(
            log.iter().filter(|l| l.blob_digest() == Some(d.as_str())).count(),
            0,
            "child {d} asked for as a blob:\n{}",
            reg.log()
        );
    }
    assert!(!log.iter().any(|l| l.status == 404 && l.method == "GET"), "{}", reg.log());
}

/// The new index: each new manifest with its platform, pushed by digest, then the index by the
/// tag; OCI media types throughout, whatever the base's were.
fn assert_new_index(reg: &Registry, r: &Value, images: &[Value], before: usize) {
    let raw = support::skopeo([
        "inspect",
        "--raw",
        "--tls-verify=false",
        &reg.reference("debian:12-erdma"),
    ]);
    support::assert_success("skopeo inspect --raw", &raw);
    assert_eq!(r["digest"], sha256(&raw.stdout));
    let out: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(out["mediaType"], fixture::MEDIA_INDEX, "{out}");
    let entries = out["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{out}");
    for (i, p) in [debian::AMD64.platform(), debian::ARM64.platform()].iter().enumerate() {
        assert_eq!(entries[i]["platform"], p.json(), "{out}");
        assert_eq!(entries[i]["mediaType"], fixture::MEDIA_MANIFEST);
        assert_eq!(entries[i]["digest"], images[i]["manifest_digest"]);
    }
    let puts: Vec<String> = requests_after(reg, before)
        .iter()
        .filter(|l| l.method == "PUT" && l.path().contains("/manifests/"))
        .map(|l| l.path().rsplit_once("/manifests/").unwrap().1.to_string())
        .collect();
    assert_eq!(
        puts,
        [
            entries[0]["digest"].as_str().unwrap(),
            entries[1]["digest"].as_str().unwrap(),
            "12-erdma"
        ],
        "children by digest, the index last"
    );
}

fn requests_after(reg: &Registry, skip: usize) -> Vec<support::AccessLogEntry> {
    reg.requests().into_iter().skip(skip).collect()
}

fn package_arches(image: &Value) -> BTreeMap<String, String> {
    image["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["arch"].as_str().unwrap().to_string()))
        .collect()
}

/// Asserts every package `image`'s report installs is of `arch` (or `all`), the rdma-core
/// ones of `arch` itself.
#[track_caller]
fn assert_packages_of(image: &Value, arch: &str) {
    let arches = package_arches(image);
    for want in ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"] {
        assert_eq!(arches.get(want).map(String::as_str), Some(arch), "{want}: {arches:?}");
    }
    assert!(arches.values().all(|a| a == arch || a == "all"), "{arch} image: {arches:?}");
    assert!(
        image["packages"]["install"].as_array().unwrap().iter().all(|p| p["origin"] == "Debian"),
        "{image}"
    );
}

/// The real Debian 12 bases, amd64 and arm64; `None` (after a skip note) when they cannot be
/// had here.
fn debian_bases() -> Option<(OciFixture, OciFixture)> {
    if !debian::require_base_for(debian::BOOKWORM, debian::AMD64)
        || !debian::require_base_for(debian::BOOKWORM, debian::ARM64)
    {
        return None;
    }
    Some((
        debian::base_for(debian::BOOKWORM, debian::AMD64),
        debian::base_for(debian::BOOKWORM, debian::ARM64),
    ))
}

/// `--platform all` from a registry index of Debian 12 amd64 and arm64 to a new index in the
/// registry; each image pulled and run by Docker on its platform.
fn builds_both_platforms_and_docker_runs_them(kind: IndexKind) {
    let (ok, why) = kind.needs();
    if !support::require_docker() || !support::require_registry() || !support::require(ok, why) {
        return;
    }
    let Some((amd, arm)) = debian_bases() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start();
    let (index, _) = push_index(
        &reg,
        kind,
        &[(&amd, debian::AMD64.platform()), (&arm, debian::ARM64.platform())],
        "debian:12",
        tmp.path(),
    );
    let children: Vec<String> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .collect();
    let before = reg.requests().len();

    let started = std::time::Instant::now();
    let r = build_cached(
        &[
            "--platform",
            "all",
            "--base",
            &reg.reference("debian:12"),
            "--output",
            &reg.reference("debian:12-erdma"),
        ],
        &tmp.path().join("cache"),
    );
    eprintln!("{kind:?}: erdma-build --platform all took {:.1?}", started.elapsed());
    let log = requests_after(&reg, before);

    assert_children_read_once(&reg, &log, &children);

    let images = r["images"].as_array().unwrap();
    assert_eq!(images.len(), 2, "{r}");
    assert_eq!(images[0]["platform"], "linux/amd64");
    assert_eq!(images[1]["platform"], "linux/arm64/v8");
    for (img, arch) in images.iter().zip(["amd64", "arm64"]) {
        assert_eq!(img["recipe"], "debian-12", "{img}");
        // The image's architecture, not the host's.
        assert_packages_of(img, arch);
        assert_eq!(img["base_layers"][0]["reuse"], "present", "same repository: {img}");
    }
    assert_eq!(images[0]["base_layers"][0]["digest"], amd.layers[0].digest.as_str());
    assert_eq!(images[1]["base_layers"][0]["digest"], arm.layers[0].digest.as_str());

    assert_new_index(&reg, &r, images, before);

    // Docker pulls each platform from the index and runs it (arm64 under qemu-user-static):
    // the provider of the image's own architecture is there, and dpkg and apt are clean.
    let name = reg.reference("debian:12-erdma").trim_start_matches("docker://").to_string();
    for (arch, uname) in [(debian::AMD64, "x86_64"), (debian::ARM64, "aarch64")] {
        let platform = format!("linux/{}", arch.oci);
        let started = std::time::Instant::now();
        support::assert_success(
            "docker pull",
            &docker(&["pull", "-q", "--platform", &platform, &name]),
        );
        let inspect = docker(&["image", "inspect", "--format", "{{.Architecture}}", &name]);
        assert_eq!(
            String::from_utf8_lossy(&inspect.stdout).trim(),
            arch.oci,
            "docker pulled the {platform} image"
        );
        let script = format!(
            "set -e
             uname -m; dpkg --print-architecture
             dpkg -s libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 | grep -c '^Status: install ok installed$'
             dpkg -s libibverbs1 | grep '^Architecture:'
             echo AUDIT; dpkg --audit; echo END
             apt-get check -q >/dev/null && echo CHECK-OK
             test -f /etc/libibverbs.d/erdma.driver && echo DRIVER-OK
             ls /usr/lib/{triplet}/libibverbs/liberdma-rdmav*.so
             ibv_devices 2>&1 || echo \"ibv_devices exit $?\"",
            triplet = arch.triplet
        );
        let out = docker(&[
            "run",
            "--rm",
            "--platform",
            &platform,
            "--network",
            "none",
            &name,
            "bash",
            "-c",
            &script,
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!(
            "{kind:?}: docker pull and run of {platform} took {:.1?}\n{text}",
            started.elapsed()
        );
        assert!(
            out.status.success(),
            "{platform}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.starts_with(&format!(
                "{uname}\n{}\n4\nArchitecture: {}\n",
                arch.debian, arch.debian
            )),
            "{platform}: {text}"
        );
        assert!(text.contains("AUDIT\nEND\n"), "dpkg --audit is empty: {text}");
        for ok in [
            "CHECK-OK",
            "DRIVER-OK",
            &format!("/usr/lib/{}/libibverbs/liberdma-rdmav", arch.triplet),
        ] {
            assert!(text.contains(ok), "{platform}: missing {ok} in\n{text}");
        }
        // The tools load their libraries (of the right architecture) and find no device.
        assert!(
            text.contains("Failed to get IB devices list")
                && !text.contains("error while loading shared libraries"),
            "{platform}: {text}"
        );
        crate::support::docker_rmi(&name);
    }
}

#[test]
fn docker_manifest_list_of_debian12_amd64_and_arm64_builds_and_runs_on_both() {
    builds_both_platforms_and_docker_runs_them(IndexKind::DockerManifestList);
}

#[test]
fn oci_index_of_debian12_amd64_and_arm64_builds_and_runs_on_both() {
    builds_both_platforms_and_docker_runs_them(IndexKind::OciIndex);
}

/// `plan --platform linux/arm64` of a `docker manifest push`ed list reads the arm64 child
/// alone and resolves arm64 packages from the base's archive; `linux/amd64` the other one.
#[test]
fn plan_picks_the_child_of_the_platform_asked_for() {
    let kind = IndexKind::DockerManifestList;
    let (ok, why) = kind.needs();
    if !support::require_registry()
        || !support::require(ok, why)
        || !support::debs::require_download()
    {
        return;
    }
    let Some((amd, arm)) = debian_bases() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start();
    let (index, digest) = push_index(
        &reg,
        kind,
        &[(&amd, debian::AMD64.platform()), (&arm, debian::ARM64.platform())],
        "debian:12",
        tmp.path(),
    );
    let cache = tmp.path().join("cache");
    for (i, (arch, base)) in
        [(debian::AMD64, &amd), (debian::ARM64, &arm)].into_iter().enumerate().rev()
    {
        let before = reg.requests().len();
        let platform = format!("linux/{}", arch.oci);
        let out = build_env(
            &["plan", "--json", "--platform", &platform, "--base", &reg.reference("debian:12")],
            &[("XDG_CACHE_HOME", cache.to_str().unwrap())],
        );
        support::assert_success(&format!("plan --platform {platform}"), &out);
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let images = r["images"].as_array().unwrap();
        assert_eq!(images.len(), 1, "{r}");
        assert_eq!(images[0]["platform"], arch.platform().name());
        assert_eq!(images[0]["base_layers"][0]["digest"], base.layers[0].digest.as_str());
        assert_packages_of(&images[0], arch.debian);
        assert_eq!(r["base_digest"], digest.as_str(), "the base is the list");
        let gets = manifest_gets(&requests_after(&reg, before));
        let (picked, other) = (
            index["manifests"][i]["digest"].as_str().unwrap(),
            index["manifests"][1 - i]["digest"].as_str().unwrap(),
        );
        assert_eq!(gets.iter().filter(|(d, st)| d == picked && *st == 200).count(), 1, "{gets:?}");
        assert!(!gets.iter().any(|(d, _)| d == other), "the other child is not read: {gets:?}");
    }
}

/// An arm64 twin of `base` in the layout `dir`: the same layers, a config that says
/// linux/arm64/v8. A two-platform index needs no arm64 binaries when nothing runs them.
pub fn arm64_twin(base: &OciFixture, dir: &Path) -> OciFixture {
    let env = fixture::env_of(base);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let cmd: Vec<String> = base.config()["config"]["Cmd"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let layers = (0..base.layers.len()).map(|i| fixture::import_layer(base, i, dir)).collect();
    fixture::image_for_platform(dir, fixture::DEFAULT_TAG, layers, &env, &cmd, &Platform::arm64())
}

/// buildx's attestation manifests (platform `unknown/unknown`, annotation
/// `vnd.docker.reference.type: attestation-manifest`) are no images: passed over by `all` and
/// never picked for a platform, even when one names a real platform ahead of the image.
#[test]
fn attestation_entries_are_passed_over() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let arm = arm64_twin(&base, &tmp.path().join("arm64"));
    let layout = tmp.path().join("index");
    // An in-toto statement as buildx attaches it, in a manifest of its own.
    fixture::init_oci_layout(&layout);
    let statement = br#"{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://slsa.dev/provenance/v0.2","subject":[],"predicate":{}}"#;
    let (st_digest, st_size) = fixture::add_blob(&layout, statement);
    let config = json!({"architecture": "unknown", "os": "unknown", "config": {}, "rootfs": {"type": "layers", "diff_ids": [st_digest]}});
    let config = serde_json::to_vec(&config).unwrap();
    let (c_digest, c_size) = fixture::add_blob(&layout, &config);
    let att = json!({"schemaVersion": 2, "mediaType": fixture::MEDIA_MANIFEST,
        "config": {"mediaType": fixture::MEDIA_CONFIG, "digest": c_digest, "size": c_size},
        "layers": [{"mediaType": "application/vnd.in-toto+json", "digest": st_digest, "size": st_size, "annotations": {"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"}}]});
    let (a_digest, a_size) = fixture::add_blob(&layout, &serde_json::to_vec(&att).unwrap());
    let entry = |platform: Value| {
        json!({"mediaType": fixture::MEDIA_MANIFEST, "digest": a_digest, "size": a_size, "platform": platform,
        "annotations": {"vnd.docker.reference.digest": base.manifest_digest, "vnd.docker.reference.type": "attestation-manifest"}})
    };
    let mut idx = fixture::index_layout(
        &layout,
        "m",
        &[(&base, Platform::amd64()), (&arm, Platform::arm64())],
        &[entry(json!({"os": "unknown", "architecture": "unknown"}))],
    );
    // The same attestation again, listed first and naming linux/amd64: its annotation alone
    // marks it.
    let raw: Value =
        serde_json::from_slice(&std::fs::read(fixture::blob_path(&layout, &idx.digest)).unwrap())
            .unwrap();
    let mut manifests = raw["manifests"].as_array().unwrap().clone();
    manifests.insert(0, entry(Platform::amd64().json()));
    let raw = serde_json::to_vec(
        &json!({"schemaVersion": 2, "mediaType": fixture::MEDIA_INDEX, "manifests": manifests}),
    )
    .unwrap();
    (idx.digest, idx.size) = fixture::add_blob(&layout, &raw);
    let top = json!({"schemaVersion": 2, "manifests": [{"mediaType": fixture::MEDIA_INDEX, "digest": idx.digest, "size": idx.size, "annotations": {fixture::REF_NAME: "m"}}]});
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    let reg = Registry::start();
    support::assert_success(
        "skopeo copy --all",
        &support::skopeo([
            "copy",
            "--all",
            "--quiet",
            "--dest-tls-verify=false",
            &idx.reference(),
            &reg.reference("base:att"),
        ]),
    );

    let before = reg.requests().len();
    let r = super::build_json(&[
        "plan",
        "--no-packages",
        "--recipe",
        "debian-12",
        "--platform",
        "linux/amd64",
        "--base",
        &reg.reference("base:att"),
    ]);
    assert_eq!(r["images"][0]["platform"], "linux/amd64");
    let out = tmp.path().join("out");
    let r = super::build_json(&[
        "build",
        "--no-packages",
        "--recipe",
        "debian-12",
        "--platform",
        "all",
        "--base",
        &reg.reference("base:att"),
        "--output",
        &format!("oci:{}:all", s(&out)),
    ]);
    let platforms: Vec<&str> =
        r["images"].as_array().unwrap().iter().map(|i| i["platform"].as_str().unwrap()).collect();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64/v8"]);
    assert!(
        !manifest_gets(&requests_after(&reg, before)).iter().any(|(d, _)| *d == a_digest),
        "the attestation manifest is never read"
    );
    let index: Value = serde_json::from_slice(
        &support::skopeo(["inspect", "--raw", &format!("oci:{}:all", s(&out))]).stdout,
    )
    .unwrap();
    assert_eq!(index["manifests"].as_array().unwrap().len(), 2, "{index}");
}

/// An index whose entry gives a manifest's size wrong, or whose registry serves a child that
/// does not match its digest, is refused before anything is written.
#[test]
fn tampered_index_is_refused_with_nothing_written() {
    if !support::require_registry()
        || !support::require(support::have("curl"), "curl is needed (run scripts/setup)")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let arm = arm64_twin(&base, &tmp.path().join("arm64"));
    let reg = Registry::start();
    let (index, _) = push_index(
        &reg,
        IndexKind::OciIndex,
        &[(&base, Platform::amd64()), (&arm, Platform::arm64())],
        "base:good",
        tmp.path(),
    );

    // One byte more in the arm64 entry, pushed as the registry takes any index whose
    // manifests it has.
    let mut bad = index.clone();
    bad["manifests"][1]["size"] = json!(bad["manifests"][1]["size"].as_u64().unwrap() + 1);
    let file = tmp.path().join("bad-size.json");
    std::fs::write(&file, serde_json::to_vec(&bad).unwrap()).unwrap();
    let put = Command::new("curl")
        .args([
            "-sS",
            "-f",
            "-X",
            "PUT",
            "-H",
            &format!("Content-Type: {}", fixture::MEDIA_INDEX),
            "--data-binary",
        ])
        .arg(format!("@{}", s(&file)))
        .arg(format!("http://{}/v2/base/manifests/bad-size", reg.addr()))
        .output()
        .unwrap();
    support::assert_success("curl PUT of the index", &put);
    let arm_child = index["manifests"][1]["digest"].as_str().unwrap().to_string();
    let size_error = format!(
        "its entry for linux/arm64/v8 says manifest {arm_child} is {} bytes, but it is {} bytes",
        arm.manifest_size + 1,
        arm.manifest_size
    );

    let child = index["manifests"][0]["digest"].as_str().unwrap();
    for (tag, extra, expect) in [
        ("base:bad-size", ["--platform", "all"], ["malformed index in", size_error.as_str()]),
        ("base:good", ["--platform", "linux/amd64"], ["digest mismatch", child]),
    ] {
        if tag == "base:good" {
            // The amd64 child's bytes in the registry's storage changed (a hex digit of its
            // config digest), its length kept: the registry serves them under the old digest.
            let hexd = child.trim_start_matches("sha256:");
            let data = reg
                .storage()
                .join(format!("docker/registry/v2/blobs/sha256/{}/{hexd}/data", &hexd[..2]));
            let text = std::fs::read_to_string(&data).unwrap();
            let at = text.find(&base.config_digest["sha256:".len()..]).unwrap() + 10;
            let flipped = if &text[at..at + 1] == "0" { "1" } else { "0" };
            std::fs::write(&data, format!("{}{flipped}{}", &text[..at], &text[at + 1..])).unwrap();
        }
        let before = reg.requests().len();
        let oci_out = tmp.path().join(format!("out-{}", tag.replace(':', "-")));
        for output in [reg.reference("out:1"), format!("oci:{}:x", s(&oci_out))] {
            let mut args = vec!["build", "--no-packages", "--recipe", "debian-12", "--base"];
            let base_ref = reg.reference(tag);
            args.push(&base_ref);
            args.extend(extra.iter().copied());
            args.extend(["--output", &output]);
            let err = build_fails(&args);
            for e in &expect {
                assert!(err.contains(e), "{tag} -> {output}: {err}");
            }
        }
        assert!(!oci_out.exists(), "no layout written");
        let log = requests_after(&reg, before);
        assert!(
            !log.iter().any(|l| matches!(l.method.as_str(), "PUT" | "POST" | "PATCH")),
            "nothing written to the registry:\n{}",
            reg.log()
        );
        let probe =
            support::skopeo(["inspect", "--raw", "--tls-verify=false", &reg.reference("out:1")]);
        assert!(!probe.status.success(), "no out:1");
    }
}
