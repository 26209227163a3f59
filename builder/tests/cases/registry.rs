//! Registry to registry against Debian's docker-registry: base layers never move.
use serde_json::Value;

use super::{build_json, runnable_base, test_recipe};
use crate::support::{self, Fault, FaultyProxy, Registry};

/// Pushes an OCI fixture into the registry with skopeo.
pub fn push(fixture: &support::OciFixture, reg: &Registry, name_tag: &str) {
    let out = support::skopeo(["copy", "--dest-tls-verify=false", &fixture.reference(), &reg.reference(name_tag)]);
    support::assert_success("skopeo copy to the registry", &out);
}

fn lines_after(reg: &Registry, skip: usize) -> Vec<support::AccessLogEntry> {
    reg.requests().into_iter().skip(skip).collect()
}

#[test]
fn registry_to_registry_moves_no_base_layer() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (recipe, key) = test_recipe(tmp.path(), None);
    let reg = Registry::start();
    push(&base, &reg, "base:1");
    let base_layer = base.layers[0].digest.clone();
    let before = reg.requests().len();
    let uploads_before = reg.count_blob_uploads();

    let r = build_json(&["build", "--no-packages", "--base", &reg.reference("base:1"), "--output", &reg.reference("out:1"), "--recipe", &recipe.display().to_string(), "--keyring", &key.display().to_string()]);
    let log = lines_after(&reg, before);
    let gets = log.iter().filter(|l| l.method == "GET" && l.blob_digest() == Some(base_layer.as_str())).count();
    assert_eq!(gets, 0, "the base layer was downloaded:\n{}", reg.log());
    assert_eq!(r["images"][0]["base_layers"][0]["reuse"], "mounted");
    assert_eq!(reg.count_blob_mounts(), 1);
    assert_eq!(reg.count_blob_uploads() - uploads_before, 2, "only our layer and config were uploaded:\n{}", reg.log());
    assert_eq!(r["bytes_downloaded"], 0);

    // The result is an image any client reads, with the merged config.
    let out = support::skopeo(["inspect", "--tls-verify=false", &reg.reference("out:1")]);
    support::assert_success("skopeo inspect", &out);
    let info: Value = serde_json::from_slice(&out.stdout).unwrap();
    let raw: Value = serde_json::from_slice(&support::skopeo(["inspect", "--raw", "--tls-verify=false", &reg.reference("out:1")]).stdout).unwrap();
    let uploaded = r["images"][0]["layer"]["size"].as_u64().unwrap() + raw["config"]["size"].as_u64().unwrap();
    assert_eq!(r["bytes_uploaded"].as_u64().unwrap(), uploaded, "our layer and config, nothing else");
    assert_eq!(info["Digest"], r["digest"]);
    assert!(info["Env"].as_array().unwrap().iter().any(|e| e == "NCCL_IB_HCA=erdma"));

    // Building the same thing again moves nothing at all: every blob is already there.
    let before = reg.requests().len();
    let again = build_json(&["build", "--no-packages", "--base", &reg.reference("base:1"), "--output", &reg.reference("out:1"), "--recipe", &recipe.display().to_string(), "--keyring", &key.display().to_string()]);
    assert_eq!(again["digest"], r["digest"], "same inputs, same digest");
    assert_eq!(again["images"][0]["base_layers"][0]["reuse"], "present");
    let log = lines_after(&reg, before);
    assert!(!log.iter().any(|l| l.method == "PATCH" || (l.method == "PUT" && l.path().contains("/blobs/"))), "{}", reg.log());
}

#[test]
fn detection_reads_only_the_layer_it_needs() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Two layers: a bottom one without os-release, and the top one with it.
    let base = support::fixture_image(
        &tmp.path().join("base"),
        &[vec![("usr/share/big", vec![7u8; 300_000].as_slice(), 0o644)], vec![("etc/motd", b"hi".as_slice(), 0o644)]],
        &[("PATH", "/bin")],
        Some(support::DEBIAN12_OS_RELEASE),
    );
    let reg = Registry::start();
    push(&base, &reg, "base:1");
    let before = reg.requests().len();
    let r = build_json(&["build", "--no-packages", "--base", &reg.reference("base:1"), "--output", &reg.reference("other/out:1")]);
    assert_eq!(r["images"][0]["recipe"], "debian-12");
    let log = lines_after(&reg, before);
    let get = |d: &str| log.iter().filter(|l| l.method == "GET" && l.blob_digest() == Some(d)).count();
    assert_eq!(get(&base.layers[1].digest), 1, "the top layer holds os-release and is read once");
    assert_eq!(get(&base.layers[0].digest), 0, "the bottom layer is never downloaded");
    assert_eq!(r["bytes_downloaded"].as_u64().unwrap(), base.layers[1].size);
    for l in r["images"][0]["base_layers"].as_array().unwrap() {
        assert_eq!(l["reuse"], "mounted");
    }
}

#[test]
fn transient_registry_failures_are_retried() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let reg = Registry::start();
    push(&base, &reg, "base:1");
    // 503 on the first requests, then a connection dropped halfway through the layer.
    for fault in [Fault::ServerErrorTimes(2), Fault::DropMidBlob] {
        let proxy = FaultyProxy::start(reg.addr(), fault.clone());
        let out_dir = tmp.path().join(format!("out-{}", proxy.addr().replace(':', "-")));
        let out = super::build_env(&["build", "--json", "--no-packages", "--base", &proxy.reference("base:1"), "--output", &format!("oci:{}", out_dir.display())], &[("ERDMA_BUILD_RETRY_BACKOFF_MS", "20")]);
        support::assert_success(&format!("build through {fault:?}"), &out);
        assert!(proxy.faults_injected() >= 1, "{fault:?} was never injected");
        let info = support::skopeo(["inspect", &format!("oci:{}", out_dir.display())]);
        support::assert_success("skopeo inspect", &info);
    }
}

#[test]
fn docker_schema2_base_across_registries_is_copied_once() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (a, b) = (Registry::start(), Registry::start());
    // A Docker schema 2 manifest with Docker media types, as Docker Hub serves.
    let out = support::skopeo(["copy", "--format", "v2s2", "--dest-tls-verify=false", &base.reference(), &a.reference("base:1")]);
    support::assert_success("skopeo copy --format v2s2", &out);
    let raw = support::skopeo(["inspect", "--raw", "--tls-verify=false", &a.reference("base:1")]);
    let m: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(m["mediaType"], "application/vnd.docker.distribution.manifest.v2+json");
    let layer = m["layers"][0]["digest"].as_str().unwrap().to_string();

    let r = build_json(&["build", "--no-packages", "--base", &a.reference("base:1"), "--output", &b.reference("out:1"), "--recipe", "debian-12"]);
    assert_eq!(r["images"][0]["base_layers"][0]["reuse"], "copied", "another registry cannot mount");
    assert_eq!(a.count_blob_gets(&layer), 1, "streamed from A once:\n{}", a.log());
    assert_eq!(b.count_blob_mounts(), 0);
    let raw = support::skopeo(["inspect", "--raw", "--tls-verify=false", &b.reference("out:1")]);
    support::assert_success("skopeo inspect --raw", &raw);
    let out: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(out["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(out["layers"][0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip", "Docker media types become their OCI twins");
    assert_eq!(out["layers"][0]["digest"], layer.as_str(), "same bytes, same digest");
    let copy = support::skopeo(["copy", "--src-tls-verify=false", &b.reference("out:1"), &format!("oci:{}:x", tmp.path().join("check").display())]);
    support::assert_success("skopeo copy of the result", &copy);
}
