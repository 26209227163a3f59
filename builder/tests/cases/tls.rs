//! Registries served over TLS by a private CA, as company registries are: the real
//! `docker-registry` with certificates made by `openssl`, the CA (and a client certificate)
//! where Docker, Podman and skopeo look for them, and no CA in the system store.
//!
//! The tests that place files under /etc/containers/certs.d and /etc/docker/certs.d use a
//! folder named for their own registry's port and remove it afterwards.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::{build_env, runnable_base, test_recipe_args as recipe_args, text};
use crate::support::pki::{certs_dir, Ca, Validity};
use crate::support::registry::{Options, Tls};
use crate::support::{self, Registry};

/// A TLS registry with `server`'s certificate, client certificates of `client_ca` required when given.
fn tls_registry(server: &support::pki::Pair, client_ca: Option<&Path>) -> Registry {
    Registry::start_with(&Options {
        auth: None,
        tls: Some(Tls {
            cert: server.cert.clone(),
            key: server.key.clone(),
            client_ca: client_ca.map(Path::to_path_buf),
        }),
    })
}

/// Pushes the runnable test base to `reg` as `base:1` with skopeo, trusting the CA (and
/// presenting the client certificate) of `certs`.
fn push_base(tmp: &Path, reg: &Registry, certs: &Path) {
    let base = runnable_base(&tmp.join("base"));
    let out = support::skopeo([
        "copy",
        "--quiet",
        "--dest-cert-dir",
        certs.to_str().unwrap(),
        &base.reference(),
        &reg.reference("base:1"),
    ]);
    support::assert_success("skopeo copy to the TLS registry", &out);
}

/// A retry's first wait in these tests: a run that retried takes at least this long, a loaded
/// machine's run that did not stays far below it.
const RETRY_WAIT: Duration = Duration::from_secs(10);

/// erdma-build ARGS with `HOME` (whose `.config/containers/certs.d` is read) and no
/// `/etc` certs.d folder of this registry's port unless the test made one; a retry would first
/// wait [`RETRY_WAIT`].
fn run(home: &Path, args: &[&str]) -> (Output, Duration) {
    run_waiting(home, args, RETRY_WAIT)
}

/// [`run`] with `wait` before the first retry.
fn run_waiting(home: &Path, args: &[&str], wait: Duration) -> (Output, Duration) {
    let t = Instant::now();
    let backoff = wait.as_millis().to_string();
    let out = build_env(
        args,
        &[("HOME", home.to_str().unwrap()), ("ERDMA_BUILD_RETRY_BACKOFF_MS", &backoff)],
    );
    (out, t.elapsed())
}

/// Podman's default nofile/nproc limits exceed this machine's hard limits: ask for small ones.
fn small_limits(engine: &str) -> &'static [&'static str] {
    match engine {
        "podman" => &["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"],
        _ => &[],
    }
}

/// A certs.d folder under /etc for one registry, removed on drop.
struct EtcCerts(PathBuf);

impl EtcCerts {
    fn new(root: &str, reg: &Registry, ca: &Ca) -> EtcCerts {
        EtcCerts(certs_dir(&Path::new(root).join(reg.addr()), Some(ca), None))
    }
}

impl Drop for EtcCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asserts a failed run printed the one error line and its hint, naming `cause`, quickly,
/// with no retry and no line of a dependency's.
#[track_caller]
fn assert_tls_failure(out: &Output, took: Duration, reg: &Registry, cause: &str, hint: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Step lines (`[  0.05s] reading …`, none under --quiet) come before.
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with('[')).collect();
    assert_eq!(lines.len(), 2, "one error line and one hint:\n{stderr}");
    assert_eq!(
        lines[0],
        format!("error: registry {}: TLS handshake failed: {cause}", reg.addr()),
        "{stderr}"
    );
    assert!(lines[1].starts_with("hint: ") && lines[1].contains(hint), "{stderr}");
    assert!(took < RETRY_WAIT, "a TLS failure is final, not retried: it took {took:?}\n{stderr}");
}

#[test]
fn private_ca_registry_read_from_certs_d_and_cert_dir_then_pulled_by_docker_and_podman() {
    if !(support::require_registry()
        && support::require_docker()
        && support::require_root()
        && support::require(support::have("podman"), "podman is needed (run scripts/setup)"))
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(&tmp.path().join("ca"), "erdma-test company CA");
    let reg = tls_registry(&ca.server("registry", Validity::Now), None);
    let certs = certs_dir(&tmp.path().join("certs"), Some(&ca), None);
    push_base(tmp.path(), &reg, &certs);
    let base = reg.reference("base:1");
    let output = reg.reference("out:1");

    // No CA anywhere: refused at once, naming the cause and where the CA goes.
    let empty_home = tmp.path().join("empty-home");
    std::fs::create_dir_all(&empty_home).unwrap();
    let (out, took) = run(&empty_home, &["plan", "--base", &base]);
    assert_tls_failure(
        &out,
        took,
        &reg,
        "certificate signed by an unknown authority",
        &format!("/etc/containers/certs.d/{}/ca.crt", reg.addr()),
    );

    // The user's certs.d.
    let home = tmp.path().join("home");
    certs_dir(&home.join(".config/containers/certs.d").join(reg.addr()), Some(&ca), None);
    let recipe = recipe_args(tmp.path());
    let mut args = vec!["build", "--json", "--no-packages", "--base", &base, "--output", &output];
    args.extend(recipe.iter().map(String::as_str));
    let (out, _) = run(&home, &args);
    support::assert_success("build with the CA in ~/.config/containers/certs.d", &out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["images"][0]["base_layers"][0]["reuse"], "mounted",
        "the same registry mounts the base layer"
    );
    assert!(out.stderr.is_empty() || !text(&out.stderr).contains("WARN"), "{}", text(&out.stderr));

    // --cert-dir alone.
    let plan = |extra: &[&str]| {
        let mut args = vec!["plan", "--no-packages", "--base", &base];
        args.extend(recipe.iter().map(String::as_str));
        args.extend_from_slice(extra);
        run(&empty_home, &args).0
    };
    support::assert_success(
        "plan with --cert-dir",
        &plan(&["--cert-dir", certs.to_str().unwrap()]),
    );

    // /etc/containers/certs.d, then /etc/docker/certs.d: each read when it is the one there.
    for root in ["/etc/containers/certs.d", "/etc/docker/certs.d"] {
        let _etc = EtcCerts::new(root, &reg, &ca);
        support::assert_success(&format!("plan with the CA in {root}"), &plan(&[]));
    }

    // Docker and Podman pull what was pushed, with the CA where they read it, and run it.
    let _docker_ca = EtcCerts::new("/etc/docker/certs.d", &reg, &ca);
    let _podman_ca = EtcCerts::new("/etc/containers/certs.d", &reg, &ca);
    let image = output.trim_start_matches("docker://").to_string();
    for engine in ["docker", "podman"] {
        let pull = Command::new(engine).args(["pull", "-q", &image]).output().unwrap();
        support::assert_success(&format!("{engine} pull over TLS"), &pull);
        let run = Command::new(engine)
            .args(["run", "--rm"])
            .args(small_limits(engine))
            .args([&image, "env"])
            .output()
            .unwrap();
        support::assert_success(&format!("{engine} run"), &run);
        assert!(
            text(&run.stdout).contains("NCCL_IB_HCA=erdma"),
            "{engine}: the NCCL presets are in the image:\n{}",
            text(&run.stdout)
        );
        if engine == "docker" {
            support::docker_rmi(&image);
        } else {
            let _ = Command::new(engine).args(["rmi", "-f", &image]).output();
        }
    }
}

#[test]
fn mutual_tls_registry_takes_the_client_certificate_from_certs_d() {
    if !(support::require_registry()
        && support::require(support::have("podman"), "podman is needed (run scripts/setup)"))
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(&tmp.path().join("ca"), "erdma-test company CA");
    let clients = Ca::new(&tmp.path().join("client-ca"), "erdma-test client CA");
    let strangers = Ca::new(&tmp.path().join("other-ca"), "erdma-test unknown client CA");
    let reg = tls_registry(&ca.server("registry", Validity::Now), Some(&clients.cert));
    let certs = certs_dir(&tmp.path().join("certs"), Some(&ca), Some(&clients.client("client")));
    push_base(tmp.path(), &reg, &certs);
    let (base, output) = (reg.reference("base:1"), reg.reference("out:1"));

    let home = tmp.path().join("home");
    let mine =
        certs_dir(&home.join(".config/containers/certs.d").join(reg.addr()), Some(&ca), None);
    // The CA only: the registry wants a client certificate.
    let (out, took) = run(&home, &["plan", "--base", &base]);
    assert_tls_failure(
        &out,
        took,
        &reg,
        "the registry requires a client certificate",
        "client.cert and client.key",
    );
    // A client certificate of a CA the registry does not trust.
    certs_dir(&mine, None, Some(&strangers.client("stranger")));
    let (out, took) = run(&home, &["plan", "--base", &base]);
    assert_tls_failure(
        &out,
        took,
        &reg,
        "the registry refused the client certificate",
        "not signed by a CA the registry trusts",
    );
    // The right one.
    certs_dir(&mine, None, Some(&clients.client("client2")));
    let recipe = recipe_args(tmp.path());
    let mut args = vec!["build", "--no-packages", "--base", &base, "--output", &output];
    args.extend(recipe.iter().map(String::as_str));
    let (out, _) = run(&home, &args);
    support::assert_success("build over mutual TLS", &out);

    // skopeo and podman read the result with the same folder.
    let inspect = support::skopeo(["inspect", "--cert-dir", certs.to_str().unwrap(), &output]);
    support::assert_success("skopeo inspect over mutual TLS", &inspect);
    let image = output.trim_start_matches("docker://").to_string();
    let pull = Command::new("podman")
        .args(["pull", "-q", "--cert-dir", certs.to_str().unwrap(), &image])
        .output()
        .unwrap();
    support::assert_success("podman pull over mutual TLS", &pull);
    let run = Command::new("podman")
        .args(["run", "--rm"])
        .args(small_limits("podman"))
        .args([&image, "env"])
        .output()
        .unwrap();
    support::assert_success("podman run", &run);
    assert!(text(&run.stdout).contains("NCCL_IB_HCA=erdma"), "{}", text(&run.stdout));
    let _ = Command::new("podman").args(["rmi", "-f", &image]).output();
}

#[test]
fn certificate_failures_are_named_at_once_and_insecure_registry_skips_the_check() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(&tmp.path().join("ca"), "erdma-test company CA");
    let home = tmp.path().join("home");
    let cases = [
        ("expired", ca.server("expired", Validity::Expired), "certificate has expired", "renewed"),
        (
            "wrong-name",
            ca.issue("wrong-name", &["DNS:registry.other.example"], "serverAuth", Validity::Now),
            "certificate is not valid for this host name",
            "must name 127.0.0.1",
        ),
    ];
    for (what, server, cause, hint) in cases {
        let reg = tls_registry(&server, None);
        certs_dir(&home.join(".config/containers/certs.d").join(reg.addr()), Some(&ca), None);
        let (out, took) = run(&home, &["plan", "--base", &reg.reference("base:1")]);
        assert_tls_failure(&out, took, &reg, cause, hint);
        // --quiet: the same two lines and nothing else.
        let (out, took) = run(&home, &["--quiet", "plan", "--base", &reg.reference("base:1")]);
        assert_tls_failure(&out, took, &reg, cause, hint);
        assert_eq!(text(&out.stderr).lines().count(), 2, "{}", text(&out.stderr));
        // Skipping the check is the user's call: it works then (the registry is empty).
        let (out, _) = run(
            &home,
            &["plan", "--insecure-registry", reg.addr(), "--base", &reg.reference("base:1")],
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("manifest unknown"),
            "{what}: with --insecure-registry the registry is reached:\n{stderr}"
        );
        // registries.conf's `insecure = true` does the same (containers-registries.conf(5)).
        let conf = tmp.path().join(format!("{what}.conf"));
        std::fs::write(
            &conf,
            format!("[[registry]]\nlocation = \"{}\"\ninsecure = true\n", reg.addr()),
        )
        .unwrap();
        let out = build_env(
            &["plan", "--base", &reg.reference("base:1")],
            &[
                ("HOME", home.to_str().unwrap()),
                ("CONTAINERS_REGISTRIES_CONF", conf.to_str().unwrap()),
            ],
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("manifest unknown"),
            "{what}: with insecure = true in registries.conf the registry is reached:\n{stderr}"
        );
    }
}

#[test]
fn wrong_password_on_a_tls_registry_names_the_401_and_docker_logins_work() {
    if !(support::require_registry() && support::require_docker() && support::require_root()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new(&tmp.path().join("ca"), "erdma-test company CA");
    let server = ca.server("registry", Validity::Now);
    let reg = Registry::start_with(&Options {
        auth: Some(("builder", "s3cret")),
        tls: Some(Tls { cert: server.cert.clone(), key: server.key.clone(), client_ca: None }),
    });
    let _docker_ca = EtcCerts::new("/etc/docker/certs.d", &reg, &ca);
    let _containers_ca = EtcCerts::new("/etc/containers/certs.d", &reg, &ca);
    let docker_config = tmp.path().join("docker-config");
    std::fs::create_dir_all(&docker_config).unwrap();
    let docker = |args: &[&str]| {
        Command::new("docker").args(args).env("DOCKER_CONFIG", &docker_config).output().unwrap()
    };
    let login = Command::new("docker")
        .args(["login", "-u", "builder", "--password-stdin", reg.addr()])
        .env("DOCKER_CONFIG", &docker_config)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(b"s3cret")?;
            c.wait_with_output()
        });
    support::assert_success("docker login", &login.unwrap());

    let base = runnable_base(&tmp.path().join("base"));
    let creds = "--dest-creds=builder:s3cret";
    let out =
        support::skopeo(["copy", "--quiet", creds, &base.reference(), &reg.reference("base:1")]);
    support::assert_success("skopeo copy", &out);

    let backoff = RETRY_WAIT.as_millis().to_string();
    let env = [
        ("DOCKER_CONFIG", docker_config.to_str().unwrap()),
        ("HOME", tmp.path().to_str().unwrap()),
        ("ERDMA_BUILD_RETRY_BACKOFF_MS", &backoff),
    ];
    let recipe = recipe_args(tmp.path());
    let (base_ref, out_ref) = (reg.reference("base:1"), reg.reference("out:1"));
    let mut args = vec!["build", "--no-packages", "--base", &base_ref, "--output", &out_ref];
    args.extend(recipe.iter().map(String::as_str));
    let out = build_env(&args, &env);
    support::assert_success("build with docker login's credentials", &out);
    let image = format!("{}/out:1", reg.addr());
    support::assert_success("docker pull with the same login", &docker(&["pull", "-q", &image]));
    let run = docker(&["run", "--rm", &image, "env"]);
    support::assert_success("docker run", &run);
    assert!(text(&run.stdout).contains("NCCL_IB_HCA=erdma"), "{}", text(&run.stdout));
    support::docker_rmi(&image);
    let podman = Command::new("podman")
        .args(["pull", "-q", "--authfile"])
        .arg(docker_config.join("config.json"))
        .arg(&image)
        .output()
        .unwrap();
    support::assert_success("podman pull with docker login's credentials", &podman);
    let _ = Command::new("podman").args(["rmi", "-f", &image]).output();

    // The wrong password: docker's own config, as `docker login` would have stored it.
    use base64::Engine as _;
    let wrong = base64::engine::general_purpose::STANDARD.encode("builder:wrong");
    std::fs::write(
        docker_config.join("config.json"),
        format!(r#"{{"auths":{{"{}":{{"auth":"{wrong}"}}}}}}"#, reg.addr()),
    )
    .unwrap();
    let t = Instant::now();
    let out = build_env(&["plan", "--base", &reg.reference("base:1")], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let stderr = &stderr[stderr.find("error: ").unwrap_or(0)..];
    assert!(
        stderr.starts_with(&format!(
            "error: registry {} refused the credentials for {}/base:1 (HTTP 401 Unauthorized)",
            reg.addr(),
            reg.addr()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint: log in with `docker login`"), "{stderr}");
    assert!(!stderr.contains("retrying"), "a refusal is not retried:\n{stderr}");
    assert!(t.elapsed() < RETRY_WAIT, "a refusal is not retried: {:?}", t.elapsed());
    let pull = docker(&["pull", &image]);
    assert!(
        !pull.status.success(),
        "docker refuses the wrong password too:\n{}",
        text(&pull.stderr)
    );
}

#[test]
fn retries_are_erdma_builds_own_lines_naming_the_cause_and_quiet_prints_only_the_error() {
    // Nothing listens on port 1: every attempt is refused, then the run fails. The first request
    // is the login (the ping for a token challenge), anonymous or not.
    let home = tempfile::tempdir().unwrap();
    // Short waits: this test retries on purpose.
    let wait = Duration::from_millis(200);
    let (out, _) =
        run_waiting(home.path(), &["plan", "--base", "docker://127.0.0.1:1/base:1"], wait);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let warns: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warns.len(), 3, "three retries of four attempts:\n{stderr}");
    for (i, w) in warns.iter().enumerate() {
        assert!(w.starts_with(" WARN logging in at 127.0.0.1:1 failed ("), "{stderr}");
        assert!(
            w.contains("Connection refused") && w.contains(&format!("(attempt {} of 4)", i + 2)),
            "the cause and the attempt are named:\n{stderr}"
        );
    }
    // Every line is erdma-build's: its steps, warnings, the error, its causes and the hint.
    for l in stderr.lines() {
        let ours = l.starts_with('[')
            || l.starts_with(" WARN ")
            || l.starts_with("error: ")
            || l.starts_with("  Caused by: ")
            || l.starts_with("hint: ");
        assert!(ours, "a line that is not erdma-build's: {l}\n{stderr}");
    }
    let args = ["--quiet", "plan", "--base", "docker://127.0.0.1:1/base:1"];
    let (out, _) = run_waiting(home.path(), &args, wait);
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error: registry 127.0.0.1:1: logging in failed"), "{stderr}");
    assert!(
        !stderr.contains("WARN") && !stderr.contains('['),
        "--quiet: the error alone:\n{stderr}"
    );
}
