//! `erdma-oci-hook doctor`, through the binary, on every fixture host (`testdata/sysfs`, device
//! nodes made with `mknod`: root) with the engines' configs and the CDI directories under the
//! fixture's temporary directory.
//!
//! - Each scenario: human and `--json` output snapshotted, exit status and the key checks
//!   asserted (a down port and a host without eRDMA fail, MTU 1400 only turns LL128 off).
//! - Docker registered by the real `configure docker` plus a current CDI spec: ready, exit 0.
//! - A CDI spec made stale by an MTU change fails, and the command in its hint fixes it.
//! - All four engines registered by `configure`; a memlock that is not unlimited; engines
//!   installed but not registered; a runtime that does not exist; a config that does not parse.
//! - Usage and hook-config errors exit 2 with nothing on stdout.
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

use crate::support::{assert_success, bin, is_root, require, text, Fixture};

/// (scenario, exit status doctor must give with no engine installed and no CDI spec).
const SCENARIOS: &[(&str, i32)] = &[
    ("one", 0),
    ("two", 0),
    ("four", 0),
    ("missing-uverbs", 1),
    ("port-down", 1),
    ("mlx5-beside", 0),
    ("none", 1),
];

/// The engines' configs and CDI directories doctor is pointed at, under the fixture's directory
/// (nothing there until a test writes it: every engine "not installed").
struct Paths {
    docker: PathBuf,
    containerd: PathBuf,
    crio: PathBuf,
    podman: PathBuf,
    cdi_etc: PathBuf,
    cdi_run: PathBuf,
}

fn paths(f: &Fixture) -> Paths {
    let root = f.dir.path();
    Paths {
        docker: root.join("etc/docker/daemon.json"),
        containerd: root.join("etc/containerd/config.toml"),
        crio: root.join("etc/crio/crio.conf"),
        podman: root.join("etc/containers/oci/hooks.d"),
        cdi_etc: root.join("etc/cdi"),
        cdi_run: root.join("var/run/cdi"),
    }
}

/// `erdma-oci-hook doctor [extra]` with the fixture's config and [`paths`], and no engine on
/// the host: PATH is an empty directory and sockets are looked for under the fixture's root.
fn doctor(f: &Fixture, extra: &[&str]) -> Output {
    let empty = f.dir.path().join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    doctor_on(f, extra, empty.as_os_str(), f.dir.path())
}

/// [`doctor`] with the engines' programs looked for on `path` and sockets under `engine_root`.
fn doctor_on(f: &Fixture, extra: &[&str], path: &std::ffi::OsStr, engine_root: &Path) -> Output {
    let p = paths(f);
    f.command("erdma-oci-hook")
        .env("PATH", path)
        .arg("doctor")
        .arg("--engine-root")
        .arg(engine_root)
        .arg("--docker-config")
        .arg(&p.docker)
        .arg("--containerd-config")
        .arg(&p.containerd)
        .arg("--crio-config")
        .arg(&p.crio)
        .arg("--podman-hooks-dir")
        .arg(&p.podman)
        .arg("--cdi-dir")
        .arg(&p.cdi_etc)
        .arg("--cdi-dir")
        .arg(&p.cdi_run)
        .args(extra)
        .output()
        .unwrap()
}

/// The `--json` report, checked for what every report must be: the exit status follows
/// `ready`, ids are unique, a hint exactly on the checks that are not ok, the summary adds up,
/// nothing on stderr.
fn doctor_json(f: &Fixture) -> (Value, Output) {
    let out = doctor(f, &["--json"]);
    assert!(out.stderr.is_empty(), "doctor wrote to stderr: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("--json output is not JSON ({e}): {}", text(&out.stdout)));
    let checks = report["checks"].as_array().expect("checks array");
    let ready = report["ready"].as_bool().expect("ready");
    assert_eq!(
        out.status.code(),
        Some(if ready { 0 } else { 1 }),
        "exit status against ready: {}",
        text(&out.stdout)
    );
    let mut ids = std::collections::BTreeSet::new();
    let mut count = std::collections::BTreeMap::new();
    for c in checks {
        let id = c["id"].as_str().expect("id");
        assert!(ids.insert(id.to_string()), "duplicate check id {id}");
        let status = c["status"].as_str().expect("status");
        assert!(["ok", "warn", "fail"].contains(&status), "{id}: status {status}");
        assert!(
            c["message"].as_str().is_some_and(|m| !m.is_empty() && !m.contains('\n')),
            "{id}: message must be one line"
        );
        assert_eq!(c["hint"].is_string(), status != "ok", "{id}: a hint exactly when not ok");
        assert!(
            c["hint"].as_str().is_none_or(|h| !h.contains('\n')),
            "{id}: hint must be one line"
        );
        assert!(c["details"].is_object(), "{id}: details");
        *count.entry(status.to_string()).or_insert(0) += 1;
    }
    for (k, status) in [("ok", "ok"), ("warn", "warn"), ("fail", "fail")] {
        assert_eq!(
            report["summary"][k],
            json!(count.get(status).copied().unwrap_or(0)),
            "summary.{k}"
        );
    }
    assert_eq!(ready, !count.contains_key("fail"));
    (report, out)
}

fn check<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id} in {report:#}"))
}

fn ids(report: &Value) -> Vec<&str> {
    report["checks"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect()
}

/// Snapshot settings hiding the fixture's directory and the directory of the binaries.
fn settings(f: &Fixture) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex::escape(&f.dir.path().display().to_string()), "[FIXTURE]");
    s.add_filter(
        &regex::escape(&bin("erdma-oci-hook").parent().unwrap().display().to_string()),
        "[BIN]",
    );
    s
}

fn root() -> bool {
    require(is_root(), "root is needed to mknod the fixture's device nodes")
}

/// Runs the real `configure ENGINE --config PATH` with the fixture's hook config; erdma-runtime
/// defaults to the one beside the binary, which exists.
fn configure(f: &Fixture, engine: &str, path: &Path) {
    let out = f
        .command("erdma-oci-hook")
        .args(["configure", engine, "--config"])
        .arg(path)
        .output()
        .unwrap();
    assert_success(&format!("configure {engine}"), &out);
}

fn cdi_generate(f: &Fixture, output: &Path) {
    let out = f
        .command("erdma-oci-hook")
        .args(["cdi", "generate", "--output"])
        .arg(output)
        .output()
        .unwrap();
    assert_success("cdi generate", &out);
}

#[test]
fn doctor_on_each_fixture_host_root() {
    if !root() {
        return;
    }
    for &(scenario, code) in SCENARIOS {
        let f = Fixture::new(scenario, "");
        let (report, json_out) = doctor_json(&f);
        assert_eq!(report["ready"], json!(code == 0), "{scenario}");
        let human = doctor(&f, &[]);
        assert_eq!(human.status.code(), Some(code), "{scenario}: {}", text(&human.stdout));
        assert!(human.stderr.is_empty(), "{scenario}: {}", text(&human.stderr));
        let lines = text(&human.stdout);
        // One line per check, an indented hint under each that is not ok, one summary line.
        let hints =
            report["checks"].as_array().unwrap().iter().filter(|c| c["status"] != "ok").count();
        assert_eq!(
            lines.lines().count(),
            report["checks"].as_array().unwrap().len() + hints + 1,
            "{scenario}: {lines}"
        );
        assert!(
            lines.lines().last().unwrap().starts_with(if code == 0 {
                "ready"
            } else {
                "not ready"
            }),
            "{scenario}: {lines}"
        );

        // Nothing is installed: engines are not a failure, and get no memlock line.
        for e in ["docker", "containerd", "crio", "podman"] {
            assert_eq!(check(&report, &format!("engine.{e}"))["status"], "ok", "{scenario}");
            assert!(check(&report, &format!("engine.{e}"))["message"]
                .as_str()
                .unwrap()
                .contains("not installed"));
            assert!(!ids(&report).contains(&format!("memlock.{e}").as_str()));
        }
        assert_eq!(
            check(&report, "cdi")["status"],
            "warn",
            "{scenario}: a missing CDI spec is only a warning"
        );
        // No GPU on these hosts: GPU Direct RDMA does not apply, with or without the module.
        let peermem = ["two", "four", "mlx5-beside"].contains(&scenario);
        assert_eq!(check(&report, "gpu-direct-rdma")["status"], "ok", "{scenario}");
        assert_eq!(check(&report, "gpu-direct-rdma")["details"]["loaded"], json!(peermem));
        assert_eq!(check(&report, "gpu-direct-rdma")["details"]["gpus"], json!(0));
        let driver = check(&report, "driver");
        if scenario == "none" {
            assert_eq!(driver["status"], "fail");
            assert_eq!(check(&report, "devices")["status"], "fail");
            assert!(!ids(&report)
                .iter()
                .any(|i| i.starts_with("port.") || i.starts_with("uverbs.") || *i == "mtu"));
        } else {
            assert_eq!(driver["status"], "ok", "{scenario}");
            let version = std::fs::read_to_string(f.sysfs.join("module/erdma/version")).unwrap();
            assert_eq!(driver["details"]["version"], version.trim());
            assert!(driver["message"].as_str().unwrap().contains(version.trim()));
        }

        settings(&f).bind(|| {
            insta::assert_snapshot!(format!("doctor_{scenario}"), lines);
            insta::assert_snapshot!(format!("doctor_{scenario}_json"), text(&json_out.stdout));
        });
    }
}

#[test]
fn doctor_names_the_down_port_and_the_missing_node_root() {
    if !root() {
        return;
    }
    let f = Fixture::new("port-down", "");
    let (report, _) = doctor_json(&f);
    let port = check(&report, "port.erdma_0.1");
    assert_eq!(port["status"], "fail");
    assert_eq!(port["message"], "erdma_0 port 1: PORT_DOWN (1), not PORT_ACTIVE");
    let hint = port["hint"].as_str().unwrap();
    assert!(
        hint.contains("secondary ENI") && hint.contains("eth0") && hint.contains("eadm"),
        "{hint}"
    );
    assert_eq!(
        check(&report, "uverbs.erdma_0")["status"],
        "ok",
        "a down port does not make the node unusable"
    );
    // The only failure.
    assert_eq!(report["summary"]["fail"], 1);

    let f = Fixture::new("missing-uverbs", "");
    let (report, _) = doctor_json(&f);
    assert_eq!(check(&report, "uverbs.erdma_0")["status"], "ok");
    let u1 = check(&report, "uverbs.erdma_1");
    assert_eq!(u1["status"], "fail");
    assert!(
        u1["message"]
            .as_str()
            .unwrap()
            .contains(&f.dev.join("infiniband/uverbs1").display().to_string()),
        "{u1}"
    );
    assert_eq!(report["summary"]["fail"], 1);
}

#[test]
fn doctor_mtu_rules_root() {
    if !root() {
        return;
    }
    // 1400: LL128 off, which the hook handles: not a failure.
    let f = Fixture::new("four", "");
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0));
    let mtu = check(&report, "mtu");
    assert_eq!(mtu["status"], "ok");
    assert_eq!(mtu["details"]["ll128"], "off");
    assert_eq!(mtu["details"]["env"], json!(["NCCL_PROTO=^LL128"]));
    assert!(mtu["message"].as_str().unwrap().contains("LL128 protocol must be off"), "{mtu}");
    // The same, with the presets off: nothing adds NCCL_PROTO, a warning.
    f.write_config("env_presets = false");
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(check(&report, "mtu")["status"], "warn");
    assert!(check(&report, "mtu")["hint"].as_str().unwrap().contains("NCCL_PROTO=^LL128"));

    // 8500: LL128 safe.
    let f = Fixture::new("two", "");
    let (report, _) = doctor_json(&f);
    assert_eq!(check(&report, "mtu")["details"]["ll128"], "safe");
    assert_eq!(check(&report, "mtu")["details"]["env"], json!([]));

    // Any other MTU is a misconfiguration: a failure naming the netdev.
    std::fs::write(f.sysfs.join("class/net/eth1/mtu"), "9000\n").unwrap();
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(1));
    let mtu = check(&report, "mtu");
    assert_eq!(mtu["status"], "fail");
    assert_eq!(mtu["message"], "MTU 8500 on eth0; 9000 on eth1: eRDMA expects 8500 (jumbo frames) or 1400; another MTU risks data corruption (the ECS eRDMA-on-GPU guide)");
    assert!(mtu["hint"].as_str().unwrap().contains("ip link set eth1 mtu 8500"), "{mtu}");
    // The mlx5 NIC's 9000 beside eRDMA is none of eRDMA's business.
    let f = Fixture::new("mlx5-beside", "");
    let (report, _) = doctor_json(&f);
    assert_eq!(check(&report, "mtu")["status"], "ok");
    assert!(check(&report, "devices")["message"].as_str().unwrap().contains("mlx5_0 (mlx5_core)"));
}

#[test]
fn doctor_ready_with_docker_configured_and_a_current_cdi_spec_root() {
    if !root() {
        return;
    }
    let f = Fixture::new("two", "");
    let p = paths(&f);
    configure(&f, "docker", &p.docker);
    cdi_generate(&f, &p.cdi_etc.join("erdma.json"));
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(
        report["summary"],
        json!({"ok": report["checks"].as_array().unwrap().len(), "warn": 0, "fail": 0})
    );
    let docker = check(&report, "engine.docker");
    assert_eq!(docker["details"]["entry"]["program"], json!(bin("erdma-runtime")));
    assert_eq!(docker["details"]["entry"]["program_exists"], true);
    assert_eq!(check(&report, "memlock.docker")["details"]["memlock"], "unlimited");
    assert_eq!(check(&report, "cdi")["details"]["specs"][0]["state"], "current");
    let human = doctor(&f, &[]);
    assert_eq!(human.status.code(), Some(0));
    settings(&f).bind(|| {
        insta::assert_snapshot!("doctor_two_docker_cdi", text(&human.stdout));
        insta::assert_snapshot!("doctor_two_docker_cdi_json", text(&out.stdout));
    });
}

#[test]
fn doctor_stale_cdi_spec_fails_and_its_hint_fixes_it_root() {
    if !root() {
        return;
    }
    let f = Fixture::new("two", "");
    let spec = paths(&f).cdi_run.join("erdma.json");
    cdi_generate(&f, &spec);
    assert_eq!(doctor(&f, &[]).status.code(), Some(0));
    // The interfaces lose jumbo frames after the spec was written: the spec lacks NCCL_PROTO.
    for nd in ["eth0", "eth1"] {
        std::fs::write(f.sysfs.join("class/net").join(nd).join("mtu"), "1400\n").unwrap();
    }
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(1));
    let cdi = check(&report, "cdi");
    assert_eq!(cdi["status"], "fail");
    assert_eq!(
        cdi["message"],
        json!(format!("CDI spec {} is stale: its env lacks NCCL_PROTO=^LL128", spec.display()))
    );
    let hint = cdi["hint"].as_str().unwrap();
    assert_eq!(
        hint,
        format!("regenerate it: `erdma-oci-hook cdi generate --output {}`", spec.display())
    );
    assert_eq!(check(&report, "mtu")["status"], "ok", "1400 everywhere is a valid set-up");
    let human = doctor(&f, &[]);
    settings(&f).bind(|| insta::assert_snapshot!("doctor_two_stale_cdi", text(&human.stdout)));

    // What the hint says to run.
    let cmd = hint.trim_start_matches("regenerate it: `erdma-oci-hook ").trim_end_matches('`');
    let out = f.command("erdma-oci-hook").args(cmd.split(' ')).output().unwrap();
    assert_success(cmd, &out);
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(check(&report, "cdi")["status"], "ok");

    // A device that went away makes it stale too.
    std::fs::remove_file(f.sysfs.join("class/infiniband/erdma_1")).unwrap();
    let (report, _) = doctor_json(&f);
    let msg = check(&report, "cdi")["message"].as_str().unwrap().to_string();
    assert!(msg.contains("it has devices this host no longer has (erdma_1)"), "{msg}");
}

#[test]
fn doctor_cdi_duplicate_and_foreign_specs_root() {
    if !root() {
        return;
    }
    let f = Fixture::new("one", "");
    let p = paths(&f);
    cdi_generate(&f, &p.cdi_etc.join("erdma.json"));
    cdi_generate(&f, &p.cdi_run.join("erdma.json"));
    // Another vendor's spec is not ours and is left alone.
    std::fs::write(
        p.cdi_etc.join("nvidia.yaml"),
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n",
    )
    .unwrap();
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0));
    let cdi = check(&report, "cdi");
    assert_eq!(cdi["status"], "warn");
    assert!(cdi["message"].as_str().unwrap().contains("defined by 2 CDI specs"), "{cdi}");
    assert_eq!(cdi["details"]["specs"].as_array().unwrap().len(), 2);

    std::fs::remove_file(p.cdi_run.join("erdma.json")).unwrap();
    std::fs::remove_file(p.cdi_etc.join("erdma.json")).unwrap();
    std::fs::write(
        p.cdi_etc.join("erdma.yaml"),
        "cdiVersion: 0.5.0\nkind: aliyun.com/erdma\ndevices:\n  - name: erdma_0\n",
    )
    .unwrap();
    let (report, _) = doctor_json(&f);
    let cdi = check(&report, "cdi");
    assert_eq!(cdi["status"], "warn");
    assert!(cdi["message"].as_str().unwrap().contains("not written by `cdi generate`"), "{cdi}");
    assert!(cdi["hint"].as_str().unwrap().ends_with("etc/cdi/erdma.json`"), "{cdi}");
}

#[test]
fn doctor_with_every_engine_configured_root() {
    if !root() {
        return;
    }
    let f = Fixture::new("two", "");
    let p = paths(&f);
    configure(&f, "docker", &p.docker);
    configure(&f, "containerd", &p.containerd);
    configure(&f, "crio", &p.crio);
    configure(&f, "podman", &p.podman);
    let (report, _) = doctor_json(&f);
    for e in ["docker", "containerd", "crio", "podman"] {
        let c = check(&report, &format!("engine.{e}"));
        assert_eq!(c["status"], "ok", "{c}");
        assert_eq!(c["details"]["installed"], true);
        assert_eq!(check(&report, &format!("memlock.{e}"))["status"], "ok");
    }
    // Each entry is found where configure put it: containerd's through the import it added.
    let entry = |e: &str| check(&report, &format!("engine.{e}"))["details"]["entry"].clone();
    assert_eq!(
        entry("containerd")["file"],
        json!(f.dir.path().join("etc/containerd/conf.d/erdma.toml"))
    );
    assert_eq!(
        entry("crio")["file"],
        json!(f.dir.path().join("etc/crio/crio.conf.d/99-erdma.conf"))
    );
    assert_eq!(entry("podman")["program"], json!(bin("erdma-oci-hook")));
    let human = doctor(&f, &[]);
    settings(&f).bind(|| insta::assert_snapshot!("doctor_two_all_engines", text(&human.stdout)));

    // A limited memlock in the hook config is what every registered engine's containers get.
    f.write_config("memlock = 4194304");
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0), "a warning, not a failure");
    for e in ["docker", "containerd", "crio", "podman"] {
        let m = check(&report, &format!("memlock.{e}"));
        assert_eq!(m["status"], "warn");
        assert!(m["message"].as_str().unwrap().contains("memlock 4 MiB"), "{m}");
        assert_eq!(m["details"]["memlock"], 4194304);
    }
}

#[test]
fn doctor_engines_installed_but_not_registered_root() {
    if !root() {
        return;
    }
    let f = Fixture::new("one", "");
    let p = paths(&f);
    for (path, content) in [
        (
            &p.docker,
            r#"{"default-ulimits": {"memlock": {"Name": "memlock", "Hard": -1, "Soft": -1}}}"#,
        ),
        (&p.containerd, "version = 2\n"),
        (&p.crio, "[crio.runtime]\ndefault_runtime = \"runc\"\n"),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    std::fs::create_dir_all(&p.podman).unwrap();
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(0), "not registered is a warning");
    for e in ["docker", "containerd", "crio", "podman"] {
        let c = check(&report, &format!("engine.{e}"));
        assert_eq!(c["status"], "warn", "{c}");
        assert!(
            c["hint"]
                .as_str()
                .unwrap()
                .contains(&format!("erdma-oci-hook configure {e} --config ")),
            "{c}"
        );
    }
    // Docker's default-ulimits already give every container an unlimited memlock.
    let docker = check(&report, "memlock.docker");
    assert_eq!(
        (docker["status"].as_str(), docker["details"]["source"].as_str()),
        (Some("ok"), Some("default-ulimits"))
    );
    for e in ["containerd", "crio", "podman"] {
        let m = check(&report, &format!("memlock.{e}"));
        assert_eq!(
            (m["status"].as_str(), m["details"]["source"].as_str()),
            (Some("warn"), Some("engine-default")),
            "{m}"
        );
    }
    let human = doctor(&f, &[]);
    settings(&f)
        .bind(|| insta::assert_snapshot!("doctor_one_engines_not_registered", text(&human.stdout)));

    // Registered with a runtime that is not there: a failure.
    std::fs::write(&p.docker, r#"{"runtimes": {"erdma": {"path": "/nonexistent/erdma-runtime"}}}"#)
        .unwrap();
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(1));
    let c = check(&report, "engine.docker");
    assert_eq!(
        c["message"],
        json!(format!(
            "Docker: runtime `erdma` in {} runs /nonexistent/erdma-runtime, which does not exist",
            p.docker.display()
        ))
    );
    // A config that does not parse is a failed check, not a usage error.
    std::fs::write(&p.docker, "{not json").unwrap();
    let (report, out) = doctor_json(&f);
    assert_eq!(out.status.code(), Some(1));
    let c = check(&report, "engine.docker");
    assert_eq!(c["status"], "fail");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("Docker: malformed Docker daemon config {}", p.docker.display())),
        "{c}"
    );
    assert!(!ids(&report).contains(&"memlock.docker"));
}

#[test]
fn doctor_usage_and_config_errors_exit_2() {
    let f = Fixture::sysfs_only("two", "");
    std::fs::write(&f.config_path, "memlok = 1\n").unwrap();
    let out = doctor(&f, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "no report without a config");
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!("error: invalid config {}", f.config_path.display()))
            && err.contains("memlok"),
        "{err}"
    );
    assert!(err.contains(&format!("hint: fix {}", f.config_path.display())), "{err}");

    f.write_config("");
    let out = doctor(&f, &["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    // Other subcommands keep exit status 1 for a bad config.
    std::fs::write(&f.config_path, "memlok = 1\n").unwrap();
    let out = f.command("erdma-oci-hook").arg("devices").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// A fresh Docker install: `dockerd` and `docker` on PATH, no daemon.json. Not "not installed":
/// a warning with the configure command, and, for Docker 20.10 (no CDI before 25), the runtime
/// path recommended. The same engine at 25.0 gets CDI recommended.
#[test]
fn a_fresh_docker_without_daemon_json_is_a_warning_root() {
    if !require(is_root(), "root is needed for the mknod'd device nodes") {
        return;
    }
    let f = Fixture::new("one", "");
    let stubs = f.dir.path().join("stub-bin");
    std::fs::create_dir_all(&stubs).unwrap();
    let stub = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = stubs.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // Debian 12's docker.io, as `docker version` and `dockerd --version` print it.
    stub("docker", "[ \"$1\" = version ] && { echo 20.10.24+dfsg1; exit 0; }; echo 'Docker version 20.10.24+dfsg1, build 297e128'");
    stub("dockerd", "echo 'Docker version 20.10.24+dfsg1, build 297e128'");
    let out = doctor_on(&f, &["--json"], stubs.as_os_str(), f.dir.path());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let docker = check(&report, "engine.docker");
    assert_eq!(docker["status"], "warn", "{docker}");
    let msg = docker["message"].as_str().unwrap();
    assert!(
        msg.contains("Docker 20.10.24") && msg.contains("does not exist") && msg.contains("no CDI"),
        "{msg}"
    );
    assert!(
        docker["hint"].as_str().unwrap().contains("erdma-oci-hook configure docker"),
        "{docker}"
    );
    assert_eq!(docker["details"]["recommended"], "runtime");
    assert_eq!(
        check(&report, "memlock.docker")["status"],
        "warn",
        "its containers get the daemon's default memlock"
    );
    for other in ["containerd", "crio", "podman"] {
        assert_eq!(
            check(&report, &format!("engine.{other}"))["status"],
            "ok",
            "nothing of {other} is there"
        );
    }
    stub("docker", "[ \"$1\" = version ] && { echo 25.0.3; exit 0; }; echo 'Docker version 25.0.3, build 4debf41'");
    let out = doctor_on(&f, &["--json"], stubs.as_os_str(), f.dir.path());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let docker = check(&report, "engine.docker");
    assert_eq!(docker["details"]["recommended"], "cdi", "{docker}");
    assert!(docker["message"].as_str().unwrap().contains("has CDI"), "{docker}");
}

/// The real engines of this machine (Debian 12: docker.io 20.10, containerd, podman 4.3), found
/// by their programs and sockets and their versions read from them, none registered in the
/// fixture's configs: each a warning, with the path its version supports.
#[test]
fn the_real_engines_of_this_host_are_seen_as_installed_root_daemon() {
    if !(require(is_root(), "root is needed for the mknod'd device nodes")
        && require(
            crate::support::have("docker") && crate::support::have("podman"),
            "docker.io and podman are needed (run scripts/setup)",
        ))
    {
        return;
    }
    let f = Fixture::new("one", "");
    let path = std::env::var_os("PATH").unwrap();
    let out = doctor_on(&f, &["--json"], &path, Path::new("/"));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let real = |cmd: &str, args: &[&str]| {
        text(&std::process::Command::new(cmd).args(args).output().unwrap().stdout)
    };
    let docker = check(&report, "engine.docker");
    assert_eq!(docker["status"], "warn", "{docker}");
    let server = real("docker", &["version", "--format", "{{.Server.Version}}"]);
    let want = server.trim().split(['+', '~', '-']).next().unwrap().to_string();
    assert_eq!(
        docker["details"]["found"]["version"],
        want.as_str(),
        "the daemon's version: {docker}"
    );
    assert!(
        docker["details"]["found"]["socket"].as_str().is_some_and(|s| s.ends_with("docker.sock")),
        "{docker}"
    );
    let podman = check(&report, "engine.podman");
    assert_eq!(podman["status"], "warn", "{podman}");
    let pv = real("podman", &["--version"]);
    assert!(
        pv.contains(podman["details"]["found"]["version"].as_str().unwrap()),
        "{pv} vs {podman}"
    );
    // Podman 4.1+ has CDI.
    assert_eq!(podman["details"]["recommended"], "cdi", "{podman}");
}
