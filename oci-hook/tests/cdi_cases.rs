//! `erdma-oci-hook cdi generate`, through the binary: CDI specs for the fixture hosts,
//! snapshotted and checked against the CDI schema's rules.
use std::process::Output;

use serde_json::Value;

use crate::support::{assert_success, is_root, require, text, Fixture};

use crate::engine_cases::{listing, mode, settings_for, tempdir};

/// The rules of the CDI JSON schema (container-device-interface `schema/schema.json`,
/// `defs.json`) and of its Go loader (unknown fields are errors, device node types, cgroup
/// permissions, names), for the fields we write.
fn check_cdi_schema(spec: &Value) {
    let obj = spec.as_object().expect("spec is an object");
    for k in obj.keys() {
        assert!(
            ["cdiVersion", "kind", "annotations", "devices", "containerEdits"]
                .contains(&k.as_str()),
            "unknown spec field {k}"
        );
    }
    let version = obj["cdiVersion"].as_str().expect("cdiVersion: required string");
    assert_eq!(
        version.split('.').filter(|p| p.parse::<u32>().is_ok()).count(),
        3,
        "cdiVersion is not semver: {version}"
    );
    let kind = obj["kind"].as_str().expect("kind: required string");
    let (vendor, class) = kind.split_once('/').expect("kind is vendor/class");
    assert!(
        vendor
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')),
        "kind vendor {vendor}"
    );
    assert!(!class.is_empty() && class.len() <= 63 && !class.contains('/'), "kind class {class}");
    let devices = obj["devices"].as_array().expect("devices: required array");
    assert!(!devices.is_empty(), "a CDI spec needs at least one device");
    let mut names = std::collections::BTreeSet::new();
    for d in devices {
        let d = d.as_object().expect("device is an object");
        for k in d.keys() {
            assert!(
                ["name", "annotations", "containerEdits"].contains(&k.as_str()),
                "unknown device field {k}"
            );
        }
        let name = d["name"].as_str().expect("device name: required string");
        assert!(
            name.starts_with(|c: char| c.is_ascii_alphanumeric())
                && name.ends_with(|c: char| c.is_ascii_alphanumeric()),
            "device name {name}"
        );
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "device name {name}"
        );
        assert!(names.insert(name.to_string()), "duplicate device {name}");
        check_edits(d.get("containerEdits").expect("device containerEdits: required"));
    }
    if let Some(e) = obj.get("containerEdits") {
        check_edits(e);
    }
}

fn check_edits(e: &Value) {
    let e = e.as_object().expect("containerEdits is an object");
    for k in e.keys() {
        assert!(
            ["env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices"]
                .contains(&k.as_str()),
            "unknown edit {k}"
        );
    }
    for v in e.get("env").and_then(Value::as_array).into_iter().flatten() {
        let v = v.as_str().expect("env entries are strings");
        assert!(v.split_once('=').is_some_and(|(k, _)| !k.is_empty()), "env entry {v}");
    }
    for n in e
        .get("deviceNodes")
        .map(|n| n.as_array().expect("deviceNodes is an array"))
        .into_iter()
        .flatten()
    {
        let n = n.as_object().expect("device node is an object");
        for k in n.keys() {
            assert!(
                [
                    "path",
                    "hostPath",
                    "type",
                    "major",
                    "minor",
                    "fileMode",
                    "permissions",
                    "uid",
                    "gid"
                ]
                .contains(&k.as_str()),
                "unknown device node field {k}"
            );
        }
        assert!(n["path"].as_str().is_some_and(|p| p.starts_with('/')), "device node path");
        if let Some(h) = n.get("hostPath") {
            assert!(h.as_str().is_some_and(|p| p.starts_with('/')), "hostPath");
        }
        assert!(
            n.get("type").is_none_or(|t| ["b", "c", "u", "p"].contains(&t.as_str().unwrap_or("?"))),
            "device type"
        );
        for k in ["major", "minor"] {
            assert!(n.get(k).is_none_or(Value::is_i64), "{k} is an int64");
        }
        assert!(
            n.get("permissions").is_none_or(|p| p
                .as_str()
                .is_some_and(|p| p == "none" || p.chars().all(|c| "rwm".contains(c)))),
            "permissions"
        );
    }
}

pub fn cdi_generate(f: &Fixture, extra: &[&str]) -> Output {
    let mut cmd = f.command("erdma-oci-hook");
    cmd.args(["cdi", "generate"]).args(extra);
    cmd.output().unwrap()
}

#[test]
fn cdi_spec_for_fixture_hosts_root() {
    if !require(is_root(), "root is needed to mknod the fixture's device nodes") {
        return;
    }
    for scenario in ["one", "two", "four"] {
        let f = Fixture::new(scenario, "");
        let out = cdi_generate(&f, &[]);
        assert_success(&format!("cdi generate ({scenario})"), &out);
        let spec: Value = serde_json::from_slice(&out.stdout).unwrap();
        check_cdi_schema(&spec);
        // The fixture's /dev is not /dev, so hostPath is needed: 0.5.0 (on a real host, 0.3.0;
        // see the unit tests in cdi.rs).
        assert_eq!(spec["cdiVersion"], "0.5.0");
        assert_eq!(spec["kind"], "aliyun.com/erdma");
        let devices = spec["devices"].as_array().unwrap();
        let uverbs = crate::support::dev_nodes(scenario)
            .into_iter()
            .filter(|n| n.path.contains("uverbs"))
            .count();
        assert_eq!(devices.len(), uverbs + 1, "one device per eRDMA device, and all");
        assert_eq!(devices.last().unwrap()["name"], "all");
        assert_eq!(
            devices.last().unwrap()["containerEdits"]["deviceNodes"].as_array().unwrap().len(),
            uverbs
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("hooks"),
            "no hooks in the CDI spec"
        );
        let settings = settings_for(f.dir.path(), "[FIXTURE]");
        settings.bind(|| insta::assert_snapshot!(format!("cdi_{scenario}"), text(&out.stdout)));
    }
}

#[test]
fn cdi_output_file_is_written_atomically_root() {
    if !require(is_root(), "root is needed to mknod the fixture's device nodes") {
        return;
    }
    let f = Fixture::new("two", "");
    let dir = tempdir("cdi");
    let path = dir.path().join("var/run/cdi/erdma.json");
    let stdout = cdi_generate(&f, &[]);
    assert_success("cdi generate", &stdout);
    for _ in 0..2 {
        let out = cdi_generate(&f, &["--output", path.to_str().unwrap()]);
        assert_success("cdi generate --output", &out);
        assert!(out.stdout.is_empty(), "--output writes nothing on stdout");
        assert_eq!(std::fs::read(&path).unwrap(), stdout.stdout);
        assert_eq!(mode(&path), 0o644);
        assert_eq!(listing(dir.path()), ["var/run/cdi/erdma.json"], "no temporary file left");
    }
}

#[test]
fn cdi_without_devices_is_an_error() {
    let f = Fixture::sysfs_only("none", "");
    let out = cdi_generate(&f, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("no eRDMA device was found"), "{}", text(&out.stderr));
}
