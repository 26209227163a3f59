//! `erdma-oci-hook configure ENGINE`, through the binary: each engine configured into temporary
//! paths: other settings survive, a backup is written, a second run changes nothing,
//! `--dry-run` prints the exact diff (snapshot) and writes nothing, an invalid existing config is
//! refused and left as it was. The containerd result is also loaded by the real
//! `containerd config dump`. The helpers here serve `cdi_cases` and `real_engine_cases` too.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::support::{assert_success, bin, have, require, text};

/// A runtime path for the config-file tests (it need not exist there).
const RUNTIME: &str = "/opt/erdma/bin/erdma-runtime";

pub fn tempdir(what: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("erdma-engine-{what}-")).tempdir().unwrap()
}

/// `erdma-oci-hook configure ENGINE --config CONFIG --runtime-path RUNTIME [extra]`, with no
/// hook config of its own (the defaults).
pub fn configure(engine: &str, config: &Path, extra: &[&str]) -> Output {
    Command::new(bin("erdma-oci-hook"))
        .env("ERDMA_OCI_HOOK_CONFIG", "/nonexistent/erdma-oci-hook.toml")
        .env_remove("RUST_LOG")
        .args(["configure", engine, "--config"])
        .arg(config)
        .args(["--runtime-path", RUNTIME])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Every file under `dir`, relative, sorted (backups and stray temporary files show up here).
pub fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn backups(dir: &Path) -> Vec<String> {
    listing(dir).into_iter().filter(|f| f.contains(".erdma-backup-")).collect()
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Snapshot settings that hide a temporary directory (and its `/private`-less twin).
pub fn settings_for(dir: &Path, label: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.add_filter(&regex::escape(&dir.display().to_string()), label);
    s.add_filter(r"\d{8}T\d{6}Z", "[STAMP]");
    s
}

/// What is checked in all engines: a second run is a no-op with no new backup, and leaves no
/// temporary files.
fn assert_idempotent(engine: &str, config: &Path, root: &Path, target: &Path) {
    let before = listing(root);
    let content = read(target);
    let out = configure(engine, config, &[]);
    assert_success("second configure", &out);
    assert!(text(&out.stdout).contains("already configured"), "{}", text(&out.stdout));
    assert!(
        !text(&out.stderr).contains("restart") && !text(&out.stderr).contains("reload"),
        "no restart advice without a change: {}",
        text(&out.stderr)
    );
    assert_eq!(read(target), content, "second run rewrote {}", target.display());
    assert_eq!(listing(root), before, "second run added files");
    assert!(
        !listing(root).iter().any(|f| f.contains("/.erdma.") || f.starts_with(".erdma.")),
        "temporary file left: {:?}",
        listing(root)
    );
}

/// `--dry-run` prints a diff and writes nothing; the diff is returned for a snapshot.
fn dry_run(engine: &str, config: &Path, root: &Path) -> String {
    let before: Vec<(String, String)> =
        listing(root).into_iter().map(|f| (f.clone(), read(&root.join(&f)))).collect();
    let out = configure(engine, config, &["--dry-run"]);
    assert_success("configure --dry-run", &out);
    let after: Vec<(String, String)> =
        listing(root).into_iter().map(|f| (f.clone(), read(&root.join(&f)))).collect();
    assert_eq!(before, after, "--dry-run wrote something");
    text(&out.stdout)
}

/// An invalid config is refused with a message naming it, and nothing changes.
fn assert_refused(engine: &str, config: &Path, root: &Path, what: &str) {
    let before: Vec<(String, String)> =
        listing(root).into_iter().map(|f| (f.clone(), read(&root.join(&f)))).collect();
    let out = configure(engine, config, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{engine} accepted an invalid config: {}",
        text(&out.stdout)
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(what) && err.contains(&config.display().to_string()),
        "unclear error: {err}"
    );
    let after: Vec<(String, String)> =
        listing(root).into_iter().map(|f| (f.clone(), read(&root.join(&f)))).collect();
    assert_eq!(before, after, "a refused configure changed files");
}

// ------------------------------------------------------------------------------------- Docker

#[test]
fn configure_docker_keeps_other_keys_backs_up_and_is_idempotent() {
    let root = tempdir("docker");
    let path = root.path().join("etc/docker/daemon.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let original = "{\n    \"log-level\": \"warn\",\n    \"features\": {\"cdi\": true},\n    \"runtimes\": {\"other\": {\"path\": \"/usr/bin/other-runtime\", \"runtimeArgs\": [\"--debug\"]}}\n}\n";
    std::fs::write(&path, original).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();

    let diff = dry_run("docker", &path, root.path());
    settings_for(root.path(), "[DIR]").bind(|| insta::assert_snapshot!("docker_dry_run", diff));

    let out = configure("docker", &path, &[]);
    assert_success("configure docker", &out);
    assert!(
        text(&out.stdout).starts_with(&format!("updated {}", path.display())),
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stderr).contains("reload dockerd"), "{}", text(&out.stderr));
    let v: Value = serde_json::from_str(&read(&path)).unwrap();
    assert_eq!(v["log-level"], "warn");
    assert_eq!(v["features"], json!({"cdi": true}), "features.cdi is left alone");
    assert_eq!(
        v["runtimes"]["other"],
        json!({"path": "/usr/bin/other-runtime", "runtimeArgs": ["--debug"]})
    );
    assert_eq!(v["runtimes"]["erdma"], json!({"path": RUNTIME, "runtimeArgs": []}));
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["log-level", "features", "runtimes"], "key order kept");
    assert!(read(&path).contains("\n    \"log-level\""), "the file's indentation is kept");
    assert_eq!(mode(&path), 0o640, "mode kept");
    let b = backups(root.path());
    assert_eq!(b.len(), 1, "{b:?}");
    assert!(b[0].starts_with("etc/docker/daemon.json.erdma-backup-"), "{b:?}");
    assert_eq!(read(&root.path().join(&b[0])), original);
    assert_eq!(mode(&root.path().join(&b[0])), 0o640);

    assert_idempotent("docker", &path, root.path(), &path);
}

#[test]
fn configure_docker_creates_a_missing_config() {
    let root = tempdir("docker-new");
    let path = root.path().join("etc/docker/daemon.json");
    let out = configure("docker", &path, &[]);
    assert_success("configure docker", &out);
    assert_eq!(read(&path), format!("{{\n  \"runtimes\": {{\n    \"erdma\": {{\n      \"path\": \"{RUNTIME}\",\n      \"runtimeArgs\": []\n    }}\n  }}\n}}\n"));
    assert_eq!(mode(&path), 0o644);
    assert!(backups(root.path()).is_empty(), "nothing to back up");
    assert_idempotent("docker", &path, root.path(), &path);
}

#[test]
fn configure_docker_updates_a_stale_entry() {
    let root = tempdir("docker-stale");
    let path = root.path().join("daemon.json");
    std::fs::write(&path, "{\"runtimes\": {\"erdma\": {\"path\": \"/old/erdma-runtime\"}}}")
        .unwrap();
    assert_success("configure docker", &configure("docker", &path, &[]));
    let v: Value = serde_json::from_str(&read(&path)).unwrap();
    assert_eq!(v["runtimes"]["erdma"], json!({"path": RUNTIME, "runtimeArgs": []}));
    assert_eq!(backups(root.path()).len(), 1);
}

#[test]
fn configure_docker_refuses_invalid_json() {
    let root = tempdir("docker-bad");
    let path = root.path().join("daemon.json");
    std::fs::write(&path, "{\"log-level\": \"warn\",\n").unwrap();
    assert_refused("docker", &path, root.path(), "malformed Docker daemon config");
    std::fs::write(&path, "[1, 2]").unwrap();
    assert_refused("docker", &path, root.path(), "not a JSON object");
    std::fs::write(&path, "{\"runtimes\": []}").unwrap();
    assert_refused("docker", &path, root.path(), "`runtimes` is not an object");
}

// --------------------------------------------------------------------------------- containerd

/// A main config in the shape of Debian's, with a `runc` handler that has options, and
/// comments that must survive.
const CONTAINERD_MAIN: &str = r#"# containerd config for this host
version = 2

[plugins]
  # the CRI plugin, as the node image sets it up
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"#;

/// `containerd --config MAIN config dump`: the configuration containerd itself would run
/// with, imports merged.
fn containerd_dump(main: &Path) -> toml::Table {
    let out = Command::new("containerd")
        .arg("--config")
        .arg(main)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert_success("containerd config dump", &out);
    toml::from_str(&text(&out.stdout)).unwrap()
}

#[test]
fn configure_containerd_adds_the_import_and_copies_runc_options() {
    let root = tempdir("containerd");
    let main = root.path().join("etc/containerd/config.toml");
    std::fs::create_dir_all(main.parent().unwrap()).unwrap();
    std::fs::write(&main, CONTAINERD_MAIN).unwrap();

    let diff = dry_run("containerd", &main, root.path());
    settings_for(root.path(), "[DIR]").bind(|| insta::assert_snapshot!("containerd_dry_run", diff));

    let out = configure("containerd", &main, &[]);
    assert_success("configure containerd", &out);
    let drop_in = root.path().join("etc/containerd/conf.d/erdma.toml");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("updated {}\n", drop_in.display()))
            && stdout.contains(&format!("updated {} (backup ", main.display())),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).contains("`imports`"),
        "the import is explained: {}",
        text(&out.stderr)
    );
    settings_for(root.path(), "[DIR]")
        .bind(|| insta::assert_snapshot!("containerd_drop_in", read(&drop_in)));
    // The main config: one line more, comments and layout kept.
    let new_main = read(&main);
    assert_eq!(
        new_main,
        CONTAINERD_MAIN.replacen(
            "version = 2\n",
            &format!(
                "version = 2\nimports = [\"{}/etc/containerd/conf.d/*.toml\"]\n",
                root.path().display()
            ),
            1
        )
    );
    assert_eq!(
        backups(root.path()).len(),
        1,
        "the main config is backed up, the new drop-in has nothing to back up"
    );
    assert_eq!(read(&root.path().join(&backups(root.path())[0])), CONTAINERD_MAIN);

    assert_idempotent("containerd", &main, root.path(), &drop_in);

    // What containerd makes of it: our handler, runc's options, and the rest of the CRI
    // section still there despite containerd < 2.0 replacing it wholesale from the drop-in.
    if require(have("containerd"), "containerd is needed to load the result (run scripts/setup)") {
        let dump = containerd_dump(&main);
        let cri = &dump["plugins"]["io.containerd.grpc.v1.cri"];
        let erdma = &cri["containerd"]["runtimes"]["erdma"];
        assert_eq!(erdma["runtime_type"].as_str(), Some("io.containerd.runc.v2"));
        assert_eq!(erdma["options"]["BinaryName"].as_str(), Some(RUNTIME));
        assert_eq!(
            erdma["options"]["SystemdCgroup"].as_bool(),
            Some(true),
            "runc's options copied"
        );
        assert_eq!(
            erdma["pod_annotations"].as_array().unwrap()[0].as_str(),
            Some("com.alibabacloud.erdma.devices")
        );
        assert_eq!(
            cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"].as_bool(),
            Some(true)
        );
        assert_eq!(cri["cni"]["bin_dir"].as_str(), Some("/usr/lib/cni"));
        assert_eq!(cri["sandbox_image"].as_str(), Some("registry.k8s.io/pause:3.9"));
        assert_eq!(
            dump["plugins"]["io.containerd.internal.v1.opt"]["path"].as_str(),
            Some("/var/lib/containerd/opt")
        );
    }

    // A new runtime path: the drop-in changes and is backed up outside the drop-in directory.
    let out = Command::new(bin("erdma-oci-hook"))
        .env("ERDMA_OCI_HOOK_CONFIG", "/nonexistent/erdma-oci-hook.toml")
        .args(["configure", "containerd", "--config"])
        .arg(&main)
        .args(["--runtime-path", "/usr/local/bin/erdma-runtime"])
        .output()
        .unwrap();
    assert_success("configure containerd (new path)", &out);
    assert!(read(&drop_in).contains("BinaryName = \"/usr/local/bin/erdma-runtime\""));
    assert_eq!(
        listing(&root.path().join("etc/containerd/conf.d")),
        ["erdma.toml"],
        "no backup inside conf.d"
    );
    assert_eq!(backups(root.path()).len(), 2);
}

#[test]
fn configure_containerd_uses_the_directory_already_imported() {
    let root = tempdir("containerd-imports");
    let main = root.path().join("config.toml");
    let text_main = format!("version = 2\nimports = [\"{}/config.d/*.toml\"]\n\n[plugins.\"io.containerd.grpc.v1.cri\".cni]\nbin_dir = \"/opt/cni/bin\"\n", root.path().display());
    std::fs::write(&main, &text_main).unwrap();
    assert_success("configure containerd", &configure("containerd", &main, &[]));
    assert_eq!(read(&main), text_main, "the main config is left alone");
    let drop_in = root.path().join("config.d/erdma.toml");
    assert!(read(&drop_in)
        .contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.erdma.options]"));
    assert!(backups(root.path()).is_empty());
    assert_idempotent("containerd", &main, root.path(), &drop_in);
    if require(have("containerd"), "containerd is needed to load the result (run scripts/setup)") {
        let dump = containerd_dump(&main);
        let cri = &dump["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(
            cri["containerd"]["runtimes"]["erdma"]["options"]["BinaryName"].as_str(),
            Some(RUNTIME)
        );
        assert_eq!(
            cri["cni"]["bin_dir"].as_str(),
            Some("/opt/cni/bin"),
            "the main config's CRI section survives the import"
        );
    }
}

#[test]
fn configure_containerd_creates_a_missing_main_config() {
    let root = tempdir("containerd-new");
    let main = root.path().join("containerd/config.toml");
    assert_success("configure containerd", &configure("containerd", &main, &[]));
    settings_for(root.path(), "[DIR]").bind(|| {
        insta::assert_snapshot!("containerd_new_main", read(&main));
        insta::assert_snapshot!(
            "containerd_new_drop_in",
            read(&root.path().join("containerd/conf.d/erdma.toml"))
        );
    });
    if require(have("containerd"), "containerd is needed to load the result (run scripts/setup)") {
        let dump = containerd_dump(&main);
        assert_eq!(
            dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["erdma"]
                ["options"]["BinaryName"]
                .as_str(),
            Some(RUNTIME)
        );
    }
}

#[test]
fn configure_containerd_v3_writes_the_handler_only() {
    let root = tempdir("containerd-v3");
    let main = root.path().join("config.toml");
    std::fs::write(&main, "version = 3\nimports = [\"conf.d/*.toml\"]\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = false\nRoot = \"/run/runc-k8s\"\n").unwrap();
    assert_success("configure containerd", &configure("containerd", &main, &[]));
    settings_for(root.path(), "[DIR]").bind(|| {
        insta::assert_snapshot!(
            "containerd_v3_drop_in",
            read(&root.path().join("conf.d/erdma.toml"))
        )
    });
}

#[test]
fn configure_containerd_refuses_invalid_configs() {
    let root = tempdir("containerd-bad");
    let main = root.path().join("config.toml");
    std::fs::write(&main, "version = 2\n[plugins\n").unwrap();
    assert_refused("containerd", &main, root.path(), "malformed containerd config");
    std::fs::write(&main, "[plugins.cri.containerd]\nsnapshotter = \"overlayfs\"\n").unwrap();
    assert_refused("containerd", &main, root.path(), "version 1");
    std::fs::write(&main, "version = 2\nimports = \"conf.d/*.toml\"\n").unwrap();
    assert_refused("containerd", &main, root.path(), "`imports` is not an array");
}

// -------------------------------------------------------------------------------------- CRI-O

const CRIO_MAIN: &str = r#"# CRI-O main config, left alone by configure
[crio.runtime]
default_runtime = "runc"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/bin/runc"
runtime_type = "oci"   # the default
runtime_root = "/run/runc"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
"#;

#[test]
fn configure_crio_copies_the_runc_handler_and_is_idempotent() {
    let root = tempdir("crio");
    let main = root.path().join("etc/crio/crio.conf");
    let conf_d = root.path().join("etc/crio/crio.conf.d");
    std::fs::create_dir_all(&conf_d).unwrap();
    std::fs::write(&main, CRIO_MAIN).unwrap();
    // A later drop-in overrides runc's root: the value CRI-O would use is the one copied.
    let custom = "[crio.runtime.runtimes.runc]\nruntime_root = \"/run/custom-runc\"\n";
    std::fs::write(conf_d.join("10-custom.conf"), custom).unwrap();

    let diff = dry_run("crio", &main, root.path());
    settings_for(root.path(), "[DIR]").bind(|| insta::assert_snapshot!("crio_dry_run", diff));

    assert_success("configure crio", &configure("crio", &main, &[]));
    let drop_in = conf_d.join("99-erdma.conf");
    let t: toml::Table = toml::from_str(&read(&drop_in)).unwrap();
    let h = &t["crio"]["runtime"]["runtimes"]["erdma"];
    assert_eq!(h["runtime_path"].as_str(), Some(RUNTIME));
    assert_eq!(h["runtime_type"].as_str(), Some("oci"));
    assert_eq!(h["runtime_root"].as_str(), Some("/run/custom-runc"), "the later drop-in's value");
    assert!(h.get("monitor_env").is_some(), "other runc settings copied");
    assert_eq!(t.len(), 1, "only the handler: CRI-O merges drop-ins key by key");
    assert_eq!(read(&main), CRIO_MAIN);
    assert_eq!(read(&conf_d.join("10-custom.conf")), custom);
    assert!(backups(root.path()).is_empty());
    assert_idempotent("crio", &main, root.path(), &drop_in);

    // Changed: backed up beside crio.conf, never in crio.conf.d, which CRI-O reads whole.
    std::fs::write(&main, CRIO_MAIN.replace("\"oci\"   # the default", "\"vm\"")).unwrap();
    assert_success("configure crio (changed)", &configure("crio", &main, &[]));
    assert!(read(&drop_in).contains("runtime_type = \"vm\""));
    assert_eq!(listing(&conf_d), ["10-custom.conf", "99-erdma.conf"]);
    let b = backups(root.path());
    assert!(b.len() == 1 && b[0].starts_with("etc/crio/99-erdma.conf.erdma-backup-"), "{b:?}");
}

#[test]
fn configure_crio_without_a_runc_entry_uses_crio_defaults() {
    let root = tempdir("crio-defaults");
    let main = root.path().join("crio.conf");
    assert_success("configure crio", &configure("crio", &main, &[]));
    assert!(!main.exists(), "the main config is never created");
    settings_for(root.path(), "[DIR]").bind(|| {
        insta::assert_snapshot!(
            "crio_defaults_drop_in",
            read(&root.path().join("crio.conf.d/99-erdma.conf"))
        )
    });
}

#[test]
fn configure_crio_refuses_invalid_configs() {
    let root = tempdir("crio-bad");
    let main = root.path().join("crio.conf");
    std::fs::write(&main, "[crio.runtime\n").unwrap();
    assert_refused("crio", &main, root.path(), "malformed CRI-O config");
    assert!(!root.path().join("crio.conf.d").exists());
    std::fs::write(&main, "").unwrap();
    std::fs::create_dir_all(root.path().join("crio.conf.d")).unwrap();
    let bad = root.path().join("crio.conf.d/50-bad.conf");
    std::fs::write(&bad, "runtime_root = \n").unwrap();
    let out = configure("crio", &main, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(&bad.display().to_string()), "{}", text(&out.stderr));
    assert!(!root.path().join("crio.conf.d/99-erdma.conf").exists());
}

// ------------------------------------------------------------------------------------- Podman

/// Reads a hooks.d file as Podman 4.3 would (containers/common `pkg/hooks`: `read`, then
/// 1.0.0 `Validate` with Podman's extension stages), returning the hook.
pub fn validate_hook_like_podman(path: &Path) -> Value {
    assert!(path.extension().is_some_and(|e| e == "json"), "hooks.d only reads *.json");
    let hook: Value = serde_json::from_str(&read(path)).expect("hook JSON");
    assert_eq!(hook["version"], "1.0.0");
    let h = hook["hook"].as_object().expect("hook: required object");
    let p = Path::new(h["path"].as_str().expect("hook.path: required"));
    assert!(
        p.is_absolute() && p.is_file(),
        "hook.path must exist, or Podman rejects the directory: {}",
        p.display()
    );
    assert!(h
        .get("args")
        .is_none_or(|a| a.as_array().is_some_and(|a| a.iter().all(Value::is_string))));
    let when = hook["when"].as_object().expect("when: required object");
    assert!(!when.is_empty(), "when needs at least one condition");
    let ann = when["annotations"].as_object().unwrap();
    // The ERE for the key matches our annotation and nothing longer or shorter.
    assert_eq!(ann.keys().collect::<Vec<_>>(), ["^com\\.alibabacloud\\.erdma\\.devices$"]);
    assert_eq!(ann.values().collect::<Vec<_>>(), [".+"]);
    let stages: Vec<&str> = hook["stages"]
        .as_array()
        .expect("stages: required")
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let known = [
        "createContainer",
        "createRuntime",
        "prestart",
        "poststart",
        "poststop",
        "startContainer",
        "precreate",
    ];
    assert!(stages.iter().all(|s| known.contains(s)), "{stages:?}");
    assert_eq!(stages, ["precreate"]);
    hook
}

#[test]
fn configure_podman_writes_a_valid_hook_and_is_idempotent() {
    let root = tempdir("podman");
    let dir = root.path().join("etc/containers/oci/hooks.d");
    let diff = dry_run("podman", &dir, root.path());
    let mut settings = settings_for(root.path(), "[DIR]");
    settings.add_filter(&regex::escape(&bin("erdma-oci-hook").display().to_string()), "[HOOK]");
    settings.bind(|| insta::assert_snapshot!("podman_dry_run", diff));
    assert!(!dir.exists());

    assert_success("configure podman", &configure("podman", &dir, &[]));
    let file = dir.join("erdma.json");
    let hook = validate_hook_like_podman(&file);
    assert_eq!(hook["hook"]["path"].as_str(), Some(bin("erdma-oci-hook").to_str().unwrap()));
    assert_eq!(hook["hook"]["args"], json!(["erdma-oci-hook", "precreate"]));
    assert_idempotent("podman", &dir, root.path(), &file);

    // The file is ours: a broken one is replaced, its content kept in a backup outside hooks.d.
    std::fs::write(&file, "{\"version\": \"1.0.0\",").unwrap();
    assert_success("configure podman (repair)", &configure("podman", &dir, &[]));
    validate_hook_like_podman(&file);
    let b = backups(root.path());
    assert!(
        b.len() == 1 && b[0].starts_with("etc/containers/oci/erdma.json.erdma-backup-"),
        "{b:?}"
    );
    assert_eq!(listing(&dir), ["erdma.json"]);
}

#[test]
fn configure_podman_refuses_a_missing_hook_binary() {
    use erdma_oci_hook::engine::{configure, ConfigureOptions, Engine};
    let root = tempdir("podman-nohook");
    let opts = ConfigureOptions {
        dry_run: false,
        config_path: Some(root.path().to_path_buf()),
        runtime_path: RUNTIME.into(),
        hook_path: "/nonexistent/erdma-oci-hook".into(),
    };
    let e = configure(Engine::Podman, &opts).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/erdma-oci-hook") && e.contains("refuses every hook"), "{e}");
    assert!(listing(root.path()).is_empty());
    let rel = ConfigureOptions { runtime_path: "erdma-runtime".into(), ..opts };
    assert!(configure(Engine::Docker, &rel).unwrap_err().to_string().contains("must be absolute"));
}
