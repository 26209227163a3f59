//! Registry to registry against Debian's docker-registry: base layers never move. Each test
//! runs with the base as the single manifest it is and as the host's entry of a two-platform
//! index ([`Form`]), whose child manifest is read from the manifests endpoint.
use std::path::Path;

use serde_json::Value;

use super::multiplatform::{arm64_twin, push_index, IndexKind};
use super::{build_json, runnable_base, test_recipe};
use crate::support::{self, fixture::Platform, Fault, FaultyProxy, Registry};

/// Pushes an OCI fixture into the registry with skopeo.
pub fn push(fixture: &support::OciFixture, reg: &Registry, name_tag: &str) {
    let out = support::skopeo([
        "copy",
        "--dest-tls-verify=false",
        &fixture.reference(),
        &reg.reference(name_tag),
    ]);
    support::assert_success("skopeo copy to the registry", &out);
}

/// How a test's base is in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The single manifest it is ([`push`]).
    Manifest,
    /// The linux/amd64 entry of an index of that kind, beside an arm64 twin with the same
    /// layers ([`arm64_twin`]); a build without `--platform` takes the host's, amd64.
    Index(IndexKind),
}

impl Form {
    /// Whether this machine can push the base this way (`support::require`d).
    #[track_caller]
    pub fn available(self) -> bool {
        match self {
            Form::Manifest => true,
            Form::Index(kind) => {
                let (ok, why) = kind.needs();
                support::require(ok, why)
            }
        }
    }
}

/// Pushes `fixture` to `reg` as `name_tag` in `form` (scratch files in `work`).
pub fn push_as(
    form: Form,
    fixture: &support::OciFixture,
    reg: &Registry,
    name_tag: &str,
    work: &Path,
) {
    match form {
        Form::Manifest => push(fixture, reg, name_tag),
        Form::Index(kind) => {
            let twin = arm64_twin(fixture, &work.join("arm64-twin"));
            push_index(
                reg,
                kind,
                &[(fixture, Platform::amd64()), (&twin, Platform::arm64())],
                name_tag,
                work,
            );
        }
    }
}

/// For an index base: `fixture`'s manifest was read once from the manifests endpoint, never as
/// a blob, and no GET in `log` answered 404.
#[track_caller]
pub fn assert_child_read_as_manifest(
    form: Form,
    fixture: &support::OciFixture,
    reg: &Registry,
    log: &[support::AccessLogEntry],
) {
    if form == Form::Manifest {
        return;
    }
    let d = fixture.manifest_digest.as_str();
    let gets = log
        .iter()
        .filter(|l| {
            l.method == "GET" && l.status == 200 && l.path().ends_with(&format!("/manifests/{d}"))
        })
        .count();
    assert_eq!(
        gets,
        1,
        "{form:?}: the child manifest {d} from the manifests endpoint:\n{}",
        reg.log()
    );
    assert!(
        !log.iter().any(|l| l.blob_digest() == Some(d) || (l.method == "GET" && l.status == 404)),
        "{form:?}:\n{}",
        reg.log()
    );
}

fn lines_after(reg: &Registry, skip: usize) -> Vec<support::AccessLogEntry> {
    reg.requests().into_iter().skip(skip).collect()
}

#[test]
fn registry_to_registry_moves_no_base_layer() {
    moves_no_base_layer(Form::Manifest);
}

#[test]
fn registry_to_registry_moves_no_base_layer_index_base() {
    moves_no_base_layer(Form::Index(IndexKind::OciIndex));
}

fn moves_no_base_layer(form: Form) {
    if !support::require_registry() || !form.available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (recipe, key) = test_recipe(tmp.path(), None);
    let reg = Registry::start();
    push_as(form, &base, &reg, "base:1", tmp.path());
    let base_layer = base.layers[0].digest.clone();
    let before = reg.requests().len();
    let uploads_before = reg.count_blob_uploads();

    let r = build_json(&[
        "build",
        "--no-packages",
        "--base",
        &reg.reference("base:1"),
        "--output",
        &reg.reference("out:1"),
        "--recipe",
        &recipe.display().to_string(),
        "--keyring",
        &key.display().to_string(),
    ]);
    let log = lines_after(&reg, before);
    assert_child_read_as_manifest(form, &base, &reg, &log);
    let gets = log
        .iter()
        .filter(|l| l.method == "GET" && l.blob_digest() == Some(base_layer.as_str()))
        .count();
    assert_eq!(gets, 0, "the base layer was downloaded:\n{}", reg.log());
    assert_eq!(r["images"][0]["base_layers"][0]["reuse"], "mounted");
    assert_eq!(reg.count_blob_mounts(), 1);
    assert_eq!(
        reg.count_blob_uploads() - uploads_before,
        2,
        "only our layer and config were uploaded:\n{}",
        reg.log()
    );
    assert_eq!(r["bytes_downloaded"], 0);

    // The result is an image any client reads, with the merged config.
    let out = support::skopeo(["inspect", "--tls-verify=false", &reg.reference("out:1")]);
    support::assert_success("skopeo inspect", &out);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let raw: Value = serde_json::from_slice(
        &support::skopeo(["inspect", "--raw", "--tls-verify=false", &reg.reference("out:1")])
            .stdout,
    )
    .unwrap();
    let uploaded =
        r["images"][0]["layer"]["size"].as_u64().unwrap() + raw["config"]["size"].as_u64().unwrap();
    assert_eq!(
        r["bytes_uploaded"].as_u64().unwrap(),
        uploaded,
        "our layer and config, nothing else"
    );
    assert_eq!(info["Digest"], r["digest"]);
    assert!(info["Env"].as_array().unwrap().iter().any(|e| e == "NCCL_IB_HCA=erdma"));

    // Building the same thing again moves nothing at all: every blob is already there.
    let before = reg.requests().len();
    let again = build_json(&[
        "build",
        "--no-packages",
        "--base",
        &reg.reference("base:1"),
        "--output",
        &reg.reference("out:1"),
        "--recipe",
        &recipe.display().to_string(),
        "--keyring",
        &key.display().to_string(),
    ]);
    assert_eq!(again["digest"], r["digest"], "same inputs, same digest");
    assert_eq!(again["images"][0]["base_layers"][0]["reuse"], "present");
    let log = lines_after(&reg, before);
    assert!(
        !log.iter()
            .any(|l| l.method == "PATCH" || (l.method == "PUT" && l.path().contains("/blobs/"))),
        "{}",
        reg.log()
    );

    if form == Form::Manifest {
        return;
    }
    // Every platform of the index: still no base layer moves; each new manifest is pushed by
    // digest, then the new index by the tag.
    let before = reg.requests().len();
    let all = build_json(&[
        "build",
        "--no-packages",
        "--platform",
        "all",
        "--base",
        &reg.reference("base:1"),
        "--output",
        &reg.reference("out:all"),
        "--recipe",
        &recipe.display().to_string(),
        "--keyring",
        &key.display().to_string(),
    ]);
    let log = lines_after(&reg, before);
    assert!(
        !log.iter().any(|l| l.method == "GET" && l.blob_digest() == Some(base_layer.as_str())),
        "{}",
        reg.log()
    );
    let images = all["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    for img in images {
        assert!(
            ["mounted", "present"].contains(&img["base_layers"][0]["reuse"].as_str().unwrap()),
            "{img}"
        );
    }
    let puts: Vec<&str> = log
        .iter()
        .filter(|l| l.method == "PUT" && l.status == 201 && l.path().contains("/manifests/"))
        .map(|l| l.path().rsplit_once("/manifests/").unwrap().1)
        .collect();
    assert_eq!(
        puts,
        [
            images[0]["manifest_digest"].as_str().unwrap(),
            images[1]["manifest_digest"].as_str().unwrap(),
            "all"
        ]
    );
    let raw =
        support::skopeo(["inspect", "--raw", "--tls-verify=false", &reg.reference("out:all")]);
    let index: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(index["mediaType"], support::fixture::MEDIA_INDEX);
    assert_eq!(index["manifests"][1]["platform"], Platform::arm64().json());
}

#[test]
fn detection_reads_only_the_layer_it_needs() {
    reads_only_the_layer_it_needs(Form::Manifest);
}

#[test]
fn detection_reads_only_the_layer_it_needs_index_base() {
    reads_only_the_layer_it_needs(Form::Index(IndexKind::OciIndex));
}

fn reads_only_the_layer_it_needs(form: Form) {
    if !support::require_registry() || !form.available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Two layers: a bottom one without os-release, and the top one with it.
    let base = support::fixture_image(
        &tmp.path().join("base"),
        &[
            vec![("usr/share/big", vec![7u8; 300_000].as_slice(), 0o644)],
            vec![("etc/motd", b"hi".as_slice(), 0o644)],
        ],
        &[("PATH", "/bin")],
        Some(support::DEBIAN12_OS_RELEASE),
    );
    let reg = Registry::start();
    push_as(form, &base, &reg, "base:1", tmp.path());
    let before = reg.requests().len();
    let r = build_json(&[
        "build",
        "--no-packages",
        "--base",
        &reg.reference("base:1"),
        "--output",
        &reg.reference("other/out:1"),
    ]);
    assert_eq!(r["images"][0]["recipe"], "debian-12");
    let log = lines_after(&reg, before);
    assert_child_read_as_manifest(form, &base, &reg, &log);
    let get =
        |d: &str| log.iter().filter(|l| l.method == "GET" && l.blob_digest() == Some(d)).count();
    assert_eq!(get(&base.layers[1].digest), 1, "the top layer holds os-release and is read once");
    assert_eq!(get(&base.layers[0].digest), 0, "the bottom layer is never downloaded");
    assert_eq!(r["bytes_downloaded"].as_u64().unwrap(), base.layers[1].size);
    for l in r["images"][0]["base_layers"].as_array().unwrap() {
        assert_eq!(l["reuse"], "mounted");
    }
}

#[test]
fn transient_registry_failures_are_retried() {
    failures_are_retried(Form::Manifest);
}

#[test]
fn transient_registry_failures_are_retried_index_base() {
    failures_are_retried(Form::Index(IndexKind::OciIndex));
}

fn failures_are_retried(form: Form) {
    if !support::require_registry() || !form.available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let reg = Registry::start();
    push_as(form, &base, &reg, "base:1", tmp.path());
    // 503 on the first requests, then a connection dropped halfway through the layer; for an
    // index, 503 on the first two GETs of the child manifest too.
    let mut faults = vec![Fault::ServerErrorTimes(2), Fault::DropMidBlob];
    if form != Form::Manifest {
        faults.push(Fault::ServerErrorOn {
            uri: format!("/manifests/{}", base.manifest_digest),
            times: 2,
        });
    }
    for fault in faults {
        let proxy = FaultyProxy::start(reg.addr(), fault.clone());
        let out_dir = tmp.path().join(format!("out-{}", proxy.addr().replace(':', "-")));
        let out = super::build_env(
            &[
                "build",
                "--json",
                "--no-packages",
                "--base",
                &proxy.reference("base:1"),
                "--output",
                &format!("oci:{}", out_dir.display()),
            ],
            &[("ERDMA_BUILD_RETRY_BACKOFF_MS", "20")],
        );
        support::assert_success(&format!("{form:?}: build through {fault:?}"), &out);
        assert!(proxy.faults_injected() >= 1, "{form:?}: {fault:?} was never injected");
        let info = support::skopeo(["inspect", &format!("oci:{}", out_dir.display())]);
        support::assert_success("skopeo inspect", &info);
    }
}

#[test]
fn docker_schema2_base_across_registries_is_copied_once() {
    schema2_base_is_copied_once(Form::Manifest);
}

/// The same from a Docker manifest list of Docker schema 2 manifests, as `docker manifest push`
/// makes it.
#[test]
fn docker_schema2_base_across_registries_is_copied_once_index_base() {
    schema2_base_is_copied_once(Form::Index(IndexKind::DockerManifestList));
}

fn schema2_base_is_copied_once(form: Form) {
    if !support::require_registry() || !form.available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (a, b) = (Registry::start(), Registry::start());
    // A Docker schema 2 manifest with Docker media types, as Docker Hub serves.
    let manifest_ref = match form {
        Form::Manifest => {
            let out = support::skopeo([
                "copy",
                "--format",
                "v2s2",
                "--dest-tls-verify=false",
                &base.reference(),
                &a.reference("base:1"),
            ]);
            support::assert_success("skopeo copy --format v2s2", &out);
            a.reference("base:1")
        }
        Form::Index(_) => {
            push_as(form, &base, &a, "base:1", tmp.path());
            // push_index pushed the amd64 child as base:1-amd64.
            a.reference("base:1-amd64")
        }
    };
    let raw = support::skopeo(["inspect", "--raw", "--tls-verify=false", &manifest_ref]);
    let m: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(m["mediaType"], "application/vnd.docker.distribution.manifest.v2+json");
    let layer = m["layers"][0]["digest"].as_str().unwrap().to_string();
    let before = a.requests().len();

    let r = build_json(&[
        "build",
        "--no-packages",
        "--base",
        &a.reference("base:1"),
        "--output",
        &b.reference("out:1"),
        "--recipe",
        "debian-12",
    ]);
    assert_eq!(
        r["images"][0]["base_layers"][0]["reuse"], "copied",
        "another registry cannot mount"
    );
    assert_eq!(a.count_blob_gets(&layer), 1, "streamed from A once:\n{}", a.log());
    if form != Form::Manifest {
        let digest = support::skopeo([
            "inspect",
            "--format",
            "{{.Digest}}",
            "--tls-verify=false",
            &manifest_ref,
        ]);
        let digest = String::from_utf8_lossy(&digest.stdout).trim().to_string();
        let log = lines_after(&a, before);
        let gets = log
            .iter()
            .filter(|l| {
                l.method == "GET"
                    && l.status == 200
                    && l.path().ends_with(&format!("/manifests/{digest}"))
            })
            .count();
        assert_eq!(gets, 1, "the Docker child manifest from the manifests endpoint:\n{}", a.log());
        assert!(
            !log.iter().any(|l| l.blob_digest() == Some(digest.as_str())
                || (l.method == "GET" && l.status == 404)),
            "{}",
            a.log()
        );
    }
    assert_eq!(b.count_blob_mounts(), 0);
    let raw = support::skopeo(["inspect", "--raw", "--tls-verify=false", &b.reference("out:1")]);
    support::assert_success("skopeo inspect --raw", &raw);
    let out: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(out["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(
        out["layers"][0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip",
        "Docker media types become their OCI twins"
    );
    assert_eq!(out["layers"][0]["digest"], layer.as_str(), "same bytes, same digest");
    let copy = support::skopeo([
        "copy",
        "--src-tls-verify=false",
        &b.reference("out:1"),
        &format!("oci:{}:x", tmp.path().join("check").display()),
    ]);
    support::assert_success("skopeo copy of the result", &copy);
}
