//! Registry credentials as docker and podman store them: an identity token exchanged at the
//! registry's token service (through [`support::token::TokenGate`]), a user and password
//! sent to it as basic auth, and Podman's auth.json.
use std::path::Path;
use std::process::Output;

use base64::Engine as _;
use serde_json::Value;

use super::multiplatform::IndexKind;
use super::registry::{push, push_as, Form};
use super::text;
use crate::support::{self, token::TokenGate, Registry};

/// A small base with a Debian 12 os-release (`--recipe debian-12`, no packages: no network).
fn base(dir: &Path) -> support::OciFixture {
    support::fixture_image(
        dir,
        &[vec![("etc/motd", b"hello\n".as_slice(), 0o644)]],
        &[("PATH", "/bin")],
        Some(support::DEBIAN12_OS_RELEASE),
    )
}

/// Runs `erdma-build ARGS` with the credential locations of `home` only: `HOME`,
/// `XDG_RUNTIME_DIR` = `home/run`, `DOCKER_CONFIG` = `home/docker`; nothing of the caller's.
fn build_in(home: &Path, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(support::bin());
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", support::test_cache())
        .env("HOME", home)
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .env("DOCKER_CONFIG", home.join("docker"))
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("XDG_CONFIG_HOME")
        .stdin(std::process::Stdio::null());
    cmd.output().unwrap()
}

fn write_json(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, v.to_string()).unwrap();
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn identity_token_is_exchanged_for_scoped_access_tokens() {
    identity_token_exchanged(Form::Manifest);
}

/// The same with the base an index: its child manifest is read with the pull token too.
#[test]
fn identity_token_is_exchanged_for_scoped_access_tokens_index_base() {
    identity_token_exchanged(Form::Index(IndexKind::OciIndex));
}

fn identity_token_exchanged(form: Form) {
    if !support::require_registry() || !form.available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = base(&tmp.path().join("base"));
    let reg = Registry::start();
    // The base goes in behind the gate's back; every erdma-build request goes through it.
    push_as(form, &base, &reg, "team/base:1", tmp.path());
    let gate = TokenGate::start(reg.addr(), "REFRESH-secret");
    let home = tmp.path().join("home");
    write_json(
        &home.join("docker/config.json"),
        &serde_json::json!({"auths": {format!("http://{}/v2/", gate.addr()): {"auth": b64("<token>:"), "identitytoken": "REFRESH-secret"}}}),
    );

    let out = build_in(
        &home,
        &[
            "build",
            "--json",
            "--no-packages",
            "--recipe",
            "debian-12",
            "--base",
            &gate.reference("team/base:1"),
            "--output",
            &gate.reference("team/out:1"),
        ],
    );
    support::assert_success("build with an identity token", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();

    // The refresh-token grant, as docker sends it, with the scopes the build needs.
    let exchanges = gate.exchanges();
    assert!(!exchanges.is_empty(), "no token exchange");
    for e in &exchanges {
        assert_eq!(e.status, 200, "{e:?}");
        assert_eq!(e.field("grant_type"), Some("refresh_token"));
        assert_eq!(e.field("refresh_token"), Some("REFRESH-secret"));
        assert_eq!(e.field("service"), Some(support::token::SERVICE));
        assert_eq!(e.field("client_id"), Some("erdma-build"));
    }
    let scopes: Vec<Vec<&str>> = exchanges.iter().map(|e| e.scopes()).collect();
    assert!(scopes.contains(&vec!["repository:team/base:pull"]), "{scopes:?}");
    // Pushing, and mounting the base layer from the base's repository.
    assert!(
        scopes.iter().any(|s| s.contains(&"repository:team/out:pull,push")
            && s.contains(&"repository:team/base:pull")),
        "{scopes:?}"
    );
    assert!(
        exchanges.len() <= 4,
        "one exchange per repository and mount, not per request: {scopes:?}"
    );

    // Every registry request carried an access token the gate issued; the refresh token
    // went to the token service alone.
    let requests = gate.requests();
    let api: Vec<_> = requests.iter().filter(|q| q.uri != "/v2/").collect();
    assert!(api.len() >= 4, "{requests:?}");
    for q in &api {
        let token = q
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .unwrap_or_else(|| panic!("no bearer token: {q:?}"));
        assert!(gate.issued(token), "{q:?}");
        assert!(q.forwarded, "refused: {q:?}");
    }
    if form != Form::Manifest {
        let child = format!("/v2/team/base/manifests/{}", base.manifest_digest);
        assert!(
            requests.iter().any(|q| q.uri == child && q.forwarded),
            "the child manifest, through the gate with a token: {requests:?}"
        );
    }
    assert!(
        !requests.iter().any(|q| q.authorization.as_deref().is_some_and(|a| a.contains("REFRESH"))),
        "{requests:?}"
    );

    // The base layer was mounted, which needs pull on team/base in the push token.
    assert_eq!(r["images"][0]["base_layers"][0]["reuse"], "mounted", "{r}");
    assert_eq!(reg.count_blob_mounts(), 1, "{}", reg.log());
    let info = support::skopeo(["inspect", "--tls-verify=false", &reg.reference("team/out:1")]);
    support::assert_success("skopeo inspect of the result", &info);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["Digest"], r["digest"]);
}

/// A user and password: erdma-build gets its access tokens from the token service itself
/// (`GET realm?service=…&scope=…` with basic auth, read up to 1 MiB; oci-client read the reply
/// whole), once per repository and mount; skopeo, a real Docker token client, pushes the base
/// through the same gate. A wrong password is refused naming the registry.
#[test]
fn password_is_sent_to_the_token_service_for_scoped_tokens() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start();
    let gate = TokenGate::start_with_password(reg.addr(), "erdma", "s3cret");
    let push = support::skopeo([
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        "erdma:s3cret",
        &base(&tmp.path().join("base")).reference(),
        &gate.reference("team/base:1"),
    ]);
    support::assert_success("skopeo copy through the token gate", &push);
    let skopeo_gets = gate.exchanges().len();
    assert!(
        skopeo_gets > 0 && gate.exchanges().iter().all(|e| e.method == "GET" && e.basic_ok),
        "{:?}",
        gate.exchanges()
    );

    let home = tmp.path().join("home");
    write_json(
        &home.join("docker/config.json"),
        &serde_json::json!({"auths": {gate.addr(): {"auth": b64("erdma:s3cret")}}}),
    );
    let out = build_in(
        &home,
        &[
            "build",
            "--json",
            "--no-packages",
            "--recipe",
            "debian-12",
            "--base",
            &gate.reference("team/base:1"),
            "--output",
            &gate.reference("team/out:1"),
        ],
    );
    support::assert_success("build with a password", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = &gate.exchanges()[skopeo_gets..];
    for e in ours {
        assert_eq!((e.method.as_str(), e.basic_ok, e.status), ("GET", true, 200), "{e:?}");
        assert_eq!(e.field("service"), Some(support::token::SERVICE));
    }
    let scopes: Vec<Vec<&str>> = ours.iter().map(|e| e.scopes()).collect();
    assert!(scopes.contains(&vec!["repository:team/base:pull"]), "{scopes:?}");
    assert!(
        scopes.iter().any(|s| s.contains(&"repository:team/out:pull,push")
            && s.contains(&"repository:team/base:pull")),
        "{scopes:?}"
    );
    assert!(ours.len() <= 4, "one token per repository and mount, not per request: {scopes:?}");
    // Every request of the build carried a token the gate issued, never the password.
    for q in gate.requests().iter().filter(|q| q.uri != "/v2/" && q.authorization.is_some()) {
        assert!(q.authorization.as_deref().is_some_and(|a| a.starts_with("Bearer ")), "{q:?}");
    }
    assert_eq!(r["images"][0]["base_layers"][0]["reuse"], "mounted", "{r}");

    write_json(
        &home.join("docker/config.json"),
        &serde_json::json!({"auths": {gate.addr(): {"auth": b64("erdma:wrong")}}}),
    );
    let out = build_in(
        &home,
        &[
            "plan",
            "--no-packages",
            "--recipe",
            "debian-12",
            "--base",
            &gate.reference("team/base:1"),
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().any(|l| l.starts_with(&format!(
            "error: registry {} refused the credentials for {}/team/base:1",
            gate.addr(),
            gate.addr()
        ))),
        "{err}"
    );
    assert!(!err.contains("wrong") && !err.contains("s3cret"), "the password is a secret: {err}");
}

#[test]
fn wrong_identity_token_fails_naming_the_realm() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start();
    push(&base(&tmp.path().join("base")), &reg, "base:1");
    let gate = TokenGate::start(reg.addr(), "REFRESH-right");
    let home = tmp.path().join("home");
    write_json(
        &home.join("docker/config.json"),
        &serde_json::json!({"auths": {format!("http://{}/v2/", gate.addr()): {"identitytoken": "REFRESH-wrong"}}}),
    );

    let out = build_in(
        &home,
        &[
            "build",
            "--no-packages",
            "--recipe",
            "debian-12",
            "--base",
            &gate.reference("base:1"),
            "--output",
            &gate.reference("out:1"),
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let first = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    assert!(
        first.contains(&format!(
            "exchanging the stored identity token at {} failed: HTTP 401",
            gate.realm()
        )),
        "{err}"
    );
    // What to do about it is the hint, the line after the error and its causes.
    let hint =
        err.lines().find(|l| l.starts_with("hint: ")).unwrap_or_else(|| panic!("no hint: {err}"));
    assert!(hint.contains(&format!("docker login {}", gate.addr())), "{err}");
    assert!(!err.contains("REFRESH-wrong"), "the token is a secret: {err}");
    // One try, refused; nothing reached the registry API with a token.
    let exchanges = gate.exchanges();
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    assert_eq!(exchanges[0].status, 401);
    assert!(gate.requests().iter().all(|q| !q.forwarded), "{:?}", gate.requests());
}

#[test]
fn podman_auth_json_with_repository_scoped_keys() {
    if !support::require_registry()
        || !support::require(support::have("htpasswd"), "htpasswd (apache2-utils) is needed")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let reg = Registry::start_with_auth("erdma", "right-password");
    let base = base(&tmp.path().join("base"));
    let copy = support::skopeo([
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        "--dest-creds",
        "erdma:right-password",
        &base.reference(),
        &reg.reference("team/base:1"),
    ]);
    support::assert_success("skopeo copy with credentials", &copy);
    let home = tmp.path().join("home");
    let addr = reg.addr();
    // Podman's primary file: the host key is wrong, the key for the namespace is right and more
    // specific. Docker's file, searched later, is wrong too.
    write_json(
        &home.join("run/containers/auth.json"),
        &serde_json::json!({"auths": {addr: {"auth": b64("erdma:wrong")}, format!("{addr}/team"): {"auth": b64("erdma:right-password")}}}),
    );
    write_json(
        &home.join("docker/config.json"),
        &serde_json::json!({"auths": {format!("https://{addr}/v1/"): {"auth": b64("erdma:docker-wrong")}}}),
    );

    let out = build_in(
        &home,
        &[
            "build",
            "--json",
            "--no-packages",
            "--recipe",
            "debian-12",
            "--base",
            &reg.reference("team/base:1"),
            "--output",
            &reg.reference("team/out:1"),
        ],
    );
    support::assert_success("build with Podman's auth.json", &out);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let info = support::skopeo([
        "inspect",
        "--tls-verify=false",
        "--creds",
        "erdma:right-password",
        &reg.reference("team/out:1"),
    ]);
    support::assert_success("skopeo inspect of the result", &info);
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["Digest"], r["digest"]);

    // Outside the namespace only the wrong host key applies: refused, naming the registry.
    let out = build_in(
        &home,
        &[
            "plan",
            "--no-packages",
            "--recipe",
            "debian-12",
            "--base",
            &reg.reference("other/base:1"),
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("registry {addr} refused the credentials")), "{err}");
}
