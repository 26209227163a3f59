//! Each failure tried on purpose: one clear line, the cause chain, exit 1, output untouched.
use std::path::Path;

use serde_json::Value;

use super::multiplatform::IndexKind;
use super::registry::Form;
use super::{build_fails, build_json, runnable_base, snapshot};
use crate::support::{self, Fault, FaultyProxy, Registry};

fn oci(p: &Path) -> String {
    format!("oci:{}", p.display())
}

/// Rewrites a layout so its tag points at `manifest` (a new blob), returning the reference.
fn with_manifest(layout: &Path, manifest: &[u8]) -> String {
    let digest =
        format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(manifest)));
    std::fs::write(support::fixture::blob_path(layout, &digest), manifest).unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": support::fixture::MEDIA_MANIFEST, "digest": digest, "size": manifest.len(), "annotations": {"org.opencontainers.image.ref.name": "latest"}}]});
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    format!("oci:{}:latest", layout.display())
}

#[test]
fn unreachable_registry() {
    let tmp = tempfile::tempdir().unwrap();
    let port = support::REFUSED_PORT;
    let out = tmp.path().join("out");
    let err = build_fails(&[
        "build",
        "--no-packages",
        "--base",
        &format!("docker://127.0.0.1:{port}/base:1"),
        "--output",
        &oci(&out),
    ]);
    assert!(
        err.contains(&format!("registry 127.0.0.1:{port}")) && err.contains("Caused by:"),
        "{err}"
    );
    assert!(err.contains("hint:"), "{err}");
    assert!(!out.exists());
}

#[test]
fn manifest_unknown() {
    if !support::require_registry() {
        return;
    }
    let reg = Registry::start();
    let tmp = tempfile::tempdir().unwrap();
    let err = build_fails(&[
        "build",
        "--no-packages",
        "--base",
        &reg.reference("nothing:1"),
        "--output",
        &oci(&tmp.path().join("o")),
    ]);
    assert!(
        err.lines().next().unwrap().contains("manifest unknown") && err.contains("nothing:1"),
        "{err}"
    );
    let err = build_fails(&[
        "plan",
        "--no-packages",
        "--base",
        &format!("oci:{}:nope", tmp.path().join("none").display()),
    ]);
    assert!(err.contains("reading image layout"), "{err}");
}

#[test]
fn malformed_manifest_and_config() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let broken = with_manifest(&base.dir, b"{\"schemaVersion\": 2, \"layers\": [");
    let err = build_fails(&["plan", "--no-packages", "--base", &broken]);
    assert!(err.lines().next().unwrap().contains("malformed manifest"), "{err}");

    let base = runnable_base(&tmp.path().join("base2"));
    let mut m = base.manifest();
    let bad_config = b"[1,2,3";
    let cd = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bad_config)));
    std::fs::write(base.blob_path(&cd), bad_config).unwrap();
    m["config"]["digest"] = Value::String(cd);
    let broken = with_manifest(&base.dir, &serde_json::to_vec(&m).unwrap());
    let err = build_fails(&["plan", "--no-packages", "--base", &broken]);
    assert!(err.lines().next().unwrap().contains("malformed image config"), "{err}");

    let mut m = base.manifest();
    m["layers"][0]["digest"] = Value::String("sha256:../../../etc/passwd".into());
    let broken = with_manifest(&base.dir, &serde_json::to_vec(&m).unwrap());
    let err = build_fails(&["plan", "--no-packages", "--base", &broken]);
    assert!(err.contains("malformed digest"), "{err}");
}

#[test]
fn tampered_layer_in_a_layout_leaves_the_output_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let out = tmp.path().join("out");
    build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &format!("{}:good", oci(&out)),
    ]);
    let before = snapshot(&out);
    // A second base whose layer the output does not have yet (a blob the output already holds
    // is not read again: its digest names content we verified when we stored it).
    let base = support::fixture_image(
        &tmp.path().join("base2"),
        &[vec![("etc/motd", b"other".as_slice(), 0o644)]],
        &[],
        Some(support::DEBIAN12_OS_RELEASE),
    );
    // Flip one byte of the base layer: same size, different digest.
    let layer = base.blob_path(&base.layers[0].digest);
    let mut data = std::fs::read(&layer).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(&layer, data).unwrap();
    for output in [format!("{}:bad", oci(&out)), oci(&tmp.path().join("fresh"))] {
        let err = build_fails(&[
            "build",
            "--no-packages",
            "--base",
            &base.reference(),
            "--output",
            &output,
            "--recipe",
            "debian-12",
            "-e",
            "NEW=1",
        ]);
        assert!(err.lines().next().unwrap().contains("digest mismatch"), "{err}");
        // The error and the hint for tampered content.
        stderr_snapshot("chain_corrupt_base_layer", &err, tmp.path());
    }
    assert_eq!(snapshot(&out), before, "the existing layout is byte for byte as it was");
    assert!(!tmp.path().join("fresh").exists());
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".erdma-build"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn registry_serving_a_corrupt_blob_or_dropping_it() {
    corrupt_or_dropped_blob(Form::Manifest);
}

#[test]
fn registry_serving_a_corrupt_blob_or_dropping_it_index_base() {
    corrupt_or_dropped_blob(Form::Index(IndexKind::OciIndex));
}

fn corrupt_or_dropped_blob(form: Form) {
    if !support::require_registry() || !form.available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let reg = Registry::start();
    super::registry::push_as(form, &base, &reg, "base:1", tmp.path());
    for (fault, expect) in
        [(Fault::CorruptBlob, "digest mismatch"), (Fault::DropMidBlobAlways, "downloading blob")]
    {
        let proxy = FaultyProxy::start(reg.addr(), fault.clone());
        for output in [
            oci(&tmp.path().join("o")),
            format!("docker-archive:{}", tmp.path().join("d.tar").display()),
            reg.reference("copy:1"),
        ] {
            let out = super::build_env(
                &[
                    "build",
                    "--no-packages",
                    "--base",
                    &proxy.reference("base:1"),
                    "--output",
                    &output.replace(reg.addr(), proxy.addr()),
                ],
                &[("ERDMA_BUILD_RETRY_BACKOFF_MS", "10")],
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{form:?}: {fault:?} -> {output}: {err}");
            assert!(
                err.lines().filter(|l| l.starts_with("error: ")).count() == 1
                    && err.contains(expect),
                "{form:?}: {fault:?} -> {output}: {err}"
            );
        }
        assert!(!tmp.path().join("o").exists() && !tmp.path().join("d.tar").exists());
        let probe = support::skopeo(["inspect", "--tls-verify=false", &reg.reference("copy:1")]);
        assert!(!probe.status.success(), "no manifest was pushed for a failed build");
    }
}

#[test]
fn unsupported_distros() {
    let tmp = tempfile::tempdir().unwrap();
    let fedora = support::fixture_image(
        &tmp.path().join("f"),
        &[vec![]],
        &[],
        Some("ID=fedora\nVERSION_ID=40\n"),
    );
    let err = build_fails(&["plan", "--no-packages", "--base", &fedora.reference()]);
    let first = err.lines().next().unwrap();
    assert!(
        first.contains("unsupported distribution `fedora 40`")
            && first.contains("Ubuntu 22.04 (jammy)")
            && first.contains("Debian 12")
            && first.contains("Alibaba Cloud Linux 3"),
        "{err}"
    );
    let bullseye = support::fixture_image(
        &tmp.path().join("b"),
        &[vec![]],
        &[],
        Some("ID=debian\nVERSION_ID=\"11\"\n"),
    );
    let err = build_fails(&["plan", "--no-packages", "--base", &bullseye.reference()]);
    assert!(err.contains("no erdma provider"), "{err}");
    let none = support::fixture_image(
        &tmp.path().join("n"),
        &[vec![("etc/motd", b"x".as_slice(), 0o644)]],
        &[],
        None,
    );
    let err = build_fails(&["plan", "--no-packages", "--base", &none.reference()]);
    assert!(err.contains("cannot find /etc/os-release") && err.contains("--recipe"), "{err}");
    let err = build_fails(&[
        "plan",
        "--no-packages",
        "--base",
        &none.reference(),
        "--recipe",
        "centos-6",
    ]);
    assert!(
        err.contains("unknown recipe `centos-6`")
            && err.contains("ubuntu-22.04")
            && err.contains("centos-7"),
        "{err}"
    );
}

#[test]
fn output_not_writable_and_bad_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let err = build_fails(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        "oci:/proc/erdma-out",
    ]);
    assert!(
        err.lines().next().unwrap().contains("output /proc/erdma-out is not writable"),
        "{err}"
    );
    let junk = tmp.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("x"), "mine").unwrap();
    let err = build_fails(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &oci(&junk),
    ]);
    assert!(err.contains("not an OCI image layout"), "{err}");
    assert_eq!(std::fs::read(junk.join("x")).unwrap(), b"mine");
    let err =
        build_fails(&["plan", "--no-packages", "--base", &base.reference(), "-e", "NOEQUALS"]);
    assert!(err.contains("invalid --env `NOEQUALS`"), "{err}");
    let err = build_fails(&["plan", "--no-packages", "--base", "ftp://x"]);
    assert!(err.contains("unknown transport `ftp`"), "{err}");
}

#[test]
fn auth_refused() {
    if !support::require_registry()
        || !support::require(support::have("htpasswd"), "htpasswd (apache2-utils) is needed")
    {
        return;
    }
    let reg = Registry::start_with_auth("erdma", "right-password");
    let tmp = tempfile::tempdir().unwrap();
    let auth = tmp.path().join("auth.json");
    std::fs::write(
        &auth,
        r#"{"auths":{"REG":{"auth":"ZXJkbWE6d3Jvbmc="}}}"#.replace("REG", reg.addr()),
    )
    .unwrap();
    let out = super::build_env(
        &["plan", "--no-packages", "--base", &reg.reference("base:1")],
        &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let first = err.lines().find(|l| !l.starts_with('[')).unwrap_or_default();
    assert!(first.contains(&format!("registry {} refused the credentials", reg.addr())), "{err}");
    assert!(err.contains("hint: log in"), "{err}");

    // The right password, from the same kind of file, works end to end.
    let base = runnable_base(&tmp.path().join("base"));
    let push = support::skopeo([
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        "erdma:right-password",
        &base.reference(),
        &reg.reference("base:1"),
    ]);
    support::assert_success("skopeo copy with credentials", &push);
    std::fs::write(
        &auth,
        r#"{"auths":{"REG":{"auth":"ZXJkbWE6cmlnaHQtcGFzc3dvcmQ="}}}"#.replace("REG", reg.addr()),
    )
    .unwrap();
    let out = super::build_env(
        &[
            "build",
            "--no-packages",
            "--base",
            &reg.reference("base:1"),
            "--output",
            &reg.reference("out:1"),
        ],
        &[("REGISTRY_AUTH_FILE", auth.to_str().unwrap())],
    );
    support::assert_success("build with credentials", &out);
}

/// What a user reads for a failure whose cause chain or hint matters: the `error:` line, each
/// `Caused by:` and the one `hint:` line, in a snapshot. Filtered: temporary paths and ports.
fn stderr_snapshot(name: &str, err: &str, tmp: &Path) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex::escape(&tmp.to_string_lossy()), "[TMP]");
    settings.add_filter(r"127\.0\.0\.1:[0-9]+", "127.0.0.1:[PORT]");
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[DIGEST]");
    settings.bind(|| insta::assert_snapshot!(name, err));
}

/// A registry nobody answers at: the transport's own error below the registry's, and the
/// hint erdma_oci gives.
#[test]
fn chain_of_an_unreachable_registry() {
    let tmp = tempfile::tempdir().unwrap();
    let port = support::REFUSED_PORT;
    let out = super::build_env(
        &["plan", "--no-packages", "--base", &format!("docker://127.0.0.1:{port}/base:1")],
        &[("ERDMA_BUILD_RETRY_BACKOFF_MS", "1")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    stderr_snapshot("chain_unreachable_registry", &error_on(&out), tmp.path());
}

/// The `error:` line of a run and what follows it (retry warnings come first, and may say
/// `error:` inside).
fn error_on(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let at = stderr.lines().position(|l| l.starts_with("error: "));
    let at = at.unwrap_or_else(|| panic!("no `error:` line: {stderr}"));
    stderr.lines().skip(at).map(|l| format!("{l}\n")).collect()
}

/// A base of one layer of `entries` with `os_release`.
fn base_of(tmp: &Path, entries: Vec<support::fixture::Entry<'_>>, os_release: &str) -> String {
    support::fixture_image(&tmp.join("base"), &[entries], &[], Some(os_release)).reference()
}

/// A Debian base whose apt lists were deleted: one line, and the hint that says what to pass.
#[test]
fn chain_of_a_base_without_apt_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let motd = vec![("etc/motd", b"x".as_slice(), 0o644)];
    let base = base_of(tmp.path(), motd, support::DEBIAN12_OS_RELEASE);
    let err = build_fails(&["plan", "--base", &base]);
    stderr_snapshot("chain_no_apt_sources", &err, tmp.path());
}

/// An rpm base whose sqlite database is not one: what erdma-build was doing, sqlite's step,
/// and sqlite's own words, one line each. (`check` reads the database offline, where `plan`
/// would fetch the recipe's keys first; it exits 2: the image could not be checked.)
#[test]
fn chain_of_an_unreadable_rpm_database() {
    let tmp = tempfile::tempdir().unwrap();
    let db =
        vec![("var/lib/rpm/rpmdb.sqlite", b"not a database, not even close".as_slice(), 0o644)];
    let base = base_of(tmp.path(), db, support::rpm_repo::ROCKY9_OS_RELEASE);
    let out = support::run_build(["check", &base]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = error_on(&out);
    assert!(err.contains("\n  Caused by: "), "{err}");
    stderr_snapshot("chain_unreadable_rpm_database", &err, tmp.path());
}
