//! Properties over generated inputs, not examples:
//! - Debian version comparison is a total order and agrees with `dpkg --compare-versions` on
//!   generated pairs; rpm's is a total order (its agreement with rpm's own `labelCompare` is
//!   `rpm::version`'s test);
//! - `configure` on any valid engine config keeps every unrelated key and value, and a second
//!   run changes nothing;
//! - `edit` of any valid spec leaves it as it is when the container does not ask, and otherwise
//!   changes only the documented fields;
//! - the bounded tar walk (`limits::walk_tar`) sees in any archive GNU tar writes (GNU and PAX
//!   formats, long names and links, sparse files) exactly what the plain `tar` crate sees.
//!
//! Inputs come from a seeded generator (the same cases every run; `ERDMA_PROP_SEED` picks
//! others, `ERDMA_PROP_CASES` more of them).
#![forbid(unsafe_code)]
// A test binary has no API: its helpers are `pub` for the modules beside them.
#![allow(unreachable_pub)]
use std::cmp::Ordering;
use std::path::Path;
use std::process::Command;

use erdma_deb::version::Version as DebVersion;
use erdma_fuzz::Rng;
use erdma_oci_hook::config::{Config, Memlock};
use erdma_oci_hook::engine::{self, ConfigureOptions, Engine};
use erdma_rpm::version::rpmvercmp;
use serde_json::{json, Map, Value};

fn rng(salt: u64) -> Rng {
    let seed =
        std::env::var("ERDMA_PROP_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_u64);
    Rng((seed ^ salt.wrapping_mul(0x9e3779b97f4a7c15)).max(1))
}

fn cases(default: usize) -> usize {
    std::env::var("ERDMA_PROP_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A Debian version as deb-version(7) allows, leaning on the characters that decide order.
fn deb_version(r: &mut Rng) -> String {
    let part = |r: &mut Rng, alphabet: &[u8], first_digit: bool| -> String {
        let n = 1 + r.below(6);
        let mut s: String = (0..n).map(|_| *r.pick(alphabet) as char).collect();
        if first_digit {
            s.insert(0, (b'0' + r.below(10) as u8) as char);
        }
        s
    };
    let mut v = String::new();
    if r.below(4) == 0 {
        v.push_str(&format!("{}:", r.below(3)));
    }
    v.push_str(&part(r, b"0123456789.+~abz", true));
    if r.below(2) == 0 {
        v.push('-');
        v.push_str(&part(r, b"0123456789.+~abz", false));
    }
    v
}

#[test]
fn debian_versions_are_a_total_order_that_agrees_with_dpkg() {
    let mut r = rng(1);
    let versions: Vec<(String, DebVersion)> = (0..cases(400))
        .map(|_| deb_version(&mut r))
        .filter_map(|s| s.parse().ok().map(|v| (s, v)))
        .collect();
    assert!(versions.len() > 300, "the generator makes valid versions");
    // Total order: antisymmetric, consistent with ==, transitive (checked on sorted order).
    for (i, (_, a)) in versions.iter().enumerate() {
        let (_, b) = &versions[(i * 7 + 3) % versions.len()];
        assert_eq!(a.cmp(b), b.cmp(a).reverse());
        assert_eq!(a.cmp(b) == Ordering::Equal, a == b);
    }
    let mut sorted: Vec<&DebVersion> = versions.iter().map(|(_, v)| v).collect();
    sorted.sort();
    for w in sorted.windows(3) {
        assert!(w[0] <= w[1] && w[1] <= w[2] && w[0] <= w[2]);
    }
    // Agreement with dpkg on pairs: one dpkg run per pair and relation would take minutes, so
    // one shell runs them all.
    if Command::new("dpkg").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "dpkg is needed under CI");
        return;
    }
    type Named = (String, DebVersion);
    let pairs: Vec<(&Named, &Named)> = (0..versions.len())
        .map(|i| (&versions[i], &versions[(i * 13 + 5) % versions.len()]))
        .collect();
    let script: String = pairs.iter().map(|((a, _), (b, _))| format!("if dpkg --compare-versions '{a}' lt '{b}'; then echo '<'; elif dpkg --compare-versions '{a}' eq '{b}'; then echo '='; else echo '>'; fi\n")).collect();
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    let answers: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(answers.len(), pairs.len(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut disagree = Vec::new();
    for (((a, va), (b, vb)), dpkg) in pairs.iter().zip(&answers) {
        let ours = match va.cmp(vb) {
            Ordering::Less => "<",
            Ordering::Equal => "=",
            Ordering::Greater => ">",
        };
        if ours != *dpkg {
            disagree.push(format!("{a} {ours} {b}, dpkg says {dpkg}"));
        }
    }
    assert!(
        disagree.is_empty(),
        "{} of {} pairs disagree with dpkg:\n{}",
        disagree.len(),
        pairs.len(),
        disagree.join("\n")
    );
}

#[test]
fn rpm_versions_are_a_total_order() {
    let mut r = rng(2);
    let alphabet = b"0123456789.~^_+abZ";
    let vs: Vec<String> = (0..cases(400))
        .map(|_| (0..1 + r.below(8)).map(|_| *r.pick(alphabet) as char).collect())
        .collect();
    for (i, a) in vs.iter().enumerate() {
        let b = &vs[(i * 7 + 3) % vs.len()];
        let c = &vs[(i * 11 + 1) % vs.len()];
        assert_eq!(rpmvercmp(a, b), rpmvercmp(b, a).reverse(), "{a} vs {b}");
        assert_eq!(rpmvercmp(a, a), Ordering::Equal);
        if rpmvercmp(a, b) != Ordering::Greater && rpmvercmp(b, c) != Ordering::Greater {
            assert_ne!(rpmvercmp(a, c), Ordering::Greater, "{a} <= {b} <= {c}");
        }
    }
}

/// A JSON value of bounded depth with keys that could be anyone's.
fn json_value(r: &mut Rng, depth: usize) -> Value {
    match r.below(if depth == 0 { 4 } else { 6 }) {
        0 => json!(r.below(100_000)),
        1 => json!(format!("v{}", r.next_u64() % 1000)),
        2 => json!(r.below(2) == 0),
        3 => Value::Null,
        4 => Value::Array((0..r.below(4)).map(|_| json_value(r, depth - 1)).collect()),
        _ => Value::Object(
            (0..r.below(5))
                .map(|i| (format!("k{}_{i}", r.next_u64() % 50), json_value(r, depth - 1)))
                .collect(),
        ),
    }
}

/// Every leaf of `v` with its JSON pointer.
fn leaves(v: &Value, at: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => m.iter().for_each(|(k, x)| {
            leaves(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out)
        }),
        _ => out.push((at, v.clone())),
    }
}

/// Whether `after` still holds the leaf `v` at `ptr`: the same value, or, for an empty object
/// (which configure may fill), still an object.
fn kept(after: &Value, ptr: &str, v: &Value) -> bool {
    match v {
        Value::Object(m) if m.is_empty() => after.pointer(ptr).is_some_and(Value::is_object),
        _ => after.pointer(ptr) == Some(v),
    }
}

fn configure(engine: Engine, path: &Path) -> engine::ConfigureReport {
    let opts = ConfigureOptions {
        dry_run: false,
        config_path: Some(path.to_path_buf()),
        runtime_path: "/opt/erdma/bin/erdma-runtime".into(),
        hook_path: "/opt/erdma/bin/erdma-oci-hook".into(),
    };
    engine::configure(engine, &opts).unwrap_or_else(|e| {
        panic!(
            "configure {engine:?} on {}: {e}\n{}",
            path.display(),
            std::fs::read_to_string(path).unwrap_or_default()
        )
    })
}

/// Everything under `dir`, path and bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push((e.path().display().to_string(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn configure_docker_keeps_every_unrelated_key_and_is_idempotent() {
    let mut r = rng(3);
    for case in 0..cases(60) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.json");
        let mut doc: Map<String, Value> = (0..r.below(8))
            .map(|i| (format!("key{}_{i}", r.next_u64() % 40), json_value(&mut r, 3)))
            .collect();
        // Other runtimes, a default runtime, CDI settings: what hosts really have beside ours.
        if r.below(2) == 0 {
            doc.insert(
                "runtimes".into(),
                json!({"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}),
            );
        }
        if r.below(3) == 0 {
            doc.insert("default-runtime".into(), json!("nvidia"));
        }
        let before = Value::Object(doc);
        std::fs::write(&path, serde_json::to_string_pretty(&before).unwrap()).unwrap();
        configure(Engine::Docker, &path);
        let after: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let mut old = Vec::new();
        leaves(&before, String::new(), &mut old);
        for (ptr, v) in old {
            assert!(
                kept(&after, &ptr, &v),
                "case {case}: `{ptr}` changed\nbefore: {before}\nafter: {after}"
            );
        }
        assert!(after.pointer("/runtimes/erdma/path").is_some(), "case {case}: {after}");
        let first = snapshot(dir.path());
        assert!(
            !configure(Engine::Docker, &path).changed,
            "case {case}: a second run changed something"
        );
        assert_eq!(snapshot(dir.path()), first, "case {case}: a second run wrote files");
    }
}

/// A TOML table of random keys (none of containerd's own plugin tables) at `depth`.
fn toml_table(r: &mut Rng, depth: usize) -> toml_edit::Table {
    let mut t = toml_edit::Table::new();
    for i in 0..r.below(5) {
        let key = format!("k{}_{i}", r.next_u64() % 40);
        if depth > 0 && r.below(3) == 0 {
            t.insert(&key, toml_edit::Item::Table(toml_table(r, depth - 1)));
        } else {
            let v: toml_edit::Value = match r.below(4) {
                0 => (r.below(1000) as i64).into(),
                1 => format!("s{}", r.next_u64() % 100).into(),
                2 => (r.below(2) == 0).into(),
                _ => toml_edit::Array::from_iter([1i64, 2, 3]).into(),
            };
            t.insert(&key, toml_edit::value(v));
        }
    }
    t
}

#[test]
fn configure_containerd_and_crio_keep_every_unrelated_key_and_are_idempotent() {
    let mut r = rng(4);
    for case in 0..cases(40) {
        for engine in [Engine::Containerd, Engine::Crio] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(if engine == Engine::Containerd {
                "config.toml"
            } else {
                "crio.conf"
            });
            let mut doc = toml_edit::DocumentMut::new();
            if engine == Engine::Containerd {
                doc.insert("version", toml_edit::value(2i64));
            } else {
                let mut rt = toml_edit::Table::new();
                rt.insert("default_runtime", toml_edit::value("runc"));
                let mut crio = toml_edit::Table::new();
                crio.insert("runtime", toml_edit::Item::Table(rt));
                doc.insert("crio", toml_edit::Item::Table(crio));
            }
            for (k, v) in toml_table(&mut r, 2).iter() {
                doc.insert(k, v.clone());
            }
            let before = doc.to_string();
            std::fs::write(&path, &before).unwrap();
            configure(engine, &path);
            let after_text = std::fs::read_to_string(&path).unwrap();
            let before_v: toml::Value = toml::from_str(&before).unwrap();
            let after_v: toml::Value = toml::from_str(&after_text).unwrap();
            // Every table and key of the main config is still there with its value; containerd's
            // may gain `imports` (of the drop-in directory), nothing else.
            let (bj, aj) =
                (serde_json::to_value(&before_v).unwrap(), serde_json::to_value(&after_v).unwrap());
            let mut old = Vec::new();
            leaves(&bj, String::new(), &mut old);
            for (ptr, v) in old {
                assert!(kept(&aj, &ptr, &v), "case {case} {engine:?}: `{ptr}` changed\nbefore:\n{before}\nafter:\n{after_text}");
            }
            let added: Vec<&String> =
                aj.as_object().unwrap().keys().filter(|k| bj.get(k.as_str()).is_none()).collect();
            assert!(
                added.iter().all(|k| k.as_str() == "imports"),
                "case {case} {engine:?}: added {added:?}"
            );
            let first = snapshot(dir.path());
            assert!(
                !configure(engine, &path).changed,
                "case {case} {engine:?}: a second run changed something"
            );
            assert_eq!(
                snapshot(dir.path()),
                first,
                "case {case} {engine:?}: a second run wrote files"
            );
        }
    }
}

/// A host to edit specs for: the `two` fixture's sysfs and, as root, its device nodes.
fn fixture_config(dir: &Path) -> Config {
    let sys = erdma_fuzz::root().join("testdata/sysfs/two/sys");
    let dev = dir.join("dev/infiniband");
    std::fs::create_dir_all(&dev).unwrap();
    for (name, major, minor) in [("uverbs0", 231, 192), ("uverbs1", 231, 193), ("rdma_cm", 10, 58)]
    {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dev.join(name),
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(major, minor),
        )
        .unwrap();
    }
    Config {
        sysfs_root: sys,
        dev_root: dir.join("dev"),
        memlock: Memlock::Bytes(4 << 20),
        ..Config::default()
    }
}

/// The fields `modify::apply` documents changing (oci-hook/src/modify.rs).
const EDITED: &[&str] = &[
    "/linux/devices",
    "/linux/resources/devices",
    "/process/rlimits",
    "/process/env",
    "/linux/namespaces",
];

fn runc_spec(r: &mut Rng) -> Value {
    let mut s = json!({
        "ociVersion": "1.0.2-dev",
        "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "args": ["sh"], "env": ["PATH=/usr/bin:/bin", "TERM=xterm"], "cwd": "/",
                    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]},
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "runc",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"resources": {"devices": [{"allow": false, "access": "rwm"}]},
                  "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]},
    });
    // Keys of anyone's, anywhere: they must come through untouched.
    for _ in 0..r.below(6) {
        let at = *r.pick(&["", "/process", "/linux", "/root", "/linux/resources"]);
        if let Some(Value::Object(m)) = s.pointer_mut(at) {
            m.insert(format!("x-{}", r.next_u64() % 100), json_value(r, 2));
        }
    }
    for _ in 0..r.below(4) {
        let e = format!(
            "{}=v{}",
            *r.pick(&["NCCL_DEBUG", "NCCL_IB_HCA", "FOO", "NCCL_SOCKET_IFNAME", "LD_LIBRARY_PATH"]),
            r.next_u64() % 10
        );
        s["process"]["env"].as_array_mut().unwrap().push(json!(e));
    }
    if r.below(3) == 0 {
        s["annotations"] = json!({"io.kubernetes.pod.name": "p", "x": "y"});
    }
    // What engines add and the edit never reads (spec::NOT_EDITED), among `linux`'s and
    // `process`'s members: kept as bytes by the runtime's parse.
    for (parent, keys) in erdma_oci_hook::spec::NOT_EDITED {
        for key in *keys {
            if r.below(2) == 0 {
                let v = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}], "x": json_value(r, 2)});
                s[parent][*key] = v;
            }
        }
    }
    s
}

fn strip(mut v: Value) -> Value {
    for p in EDITED {
        let (parent, key) = p.rsplit_once('/').unwrap();
        if let Some(Value::Object(m)) = v.pointer_mut(parent) {
            m.remove(key);
        }
    }
    v
}

#[test]
fn edit_leaves_specs_that_do_not_ask_alone_and_changes_only_documented_fields() {
    if !is_root() {
        assert!(std::env::var_os("CI").is_none(), "root is needed (mknod) under CI");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = fixture_config(dir.path());
    let mut r = rng(5);
    let mut asked = 0;
    for case in 0..cases(200) {
        let mut spec = runc_spec(&mut r);
        let asks = r.below(2) == 0;
        if asks {
            let how = r.below(3);
            match how {
                0 => spec["process"]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("ERDMA_VISIBLE_DEVICES=all")),
                1 => spec["annotations"] = json!({erdma_oci_hook::request::ANNOTATION: "erdma_1"}),
                _ => spec["process"]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("ERDMA_VISIBLE_DEVICES=erdma_0,erdma_1")),
            }
        }
        let text = serde_json::to_vec(&spec).unwrap();
        // The runtime's way (erdma-runtime, precreate): its bytes checked for a request, then
        // parsed with what the edit never reads kept as bytes, edited and written back.
        let may_ask = erdma_oci_hook::request::may_ask(&text, &config);
        assert_eq!(may_ask, asks, "case {case}: may_ask");
        let mut editable =
            erdma_oci_hook::spec::Editable::parse(&text, "config.json".as_ref()).unwrap();
        let by_runtime = erdma_oci_hook::hooks::edit_in_place(&mut editable.value, &config)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{spec}"))
            .map(|_| serde_json::from_slice::<Value>(&editable.to_vec()).unwrap());
        match erdma_oci_hook::hooks::edit(&spec, &config)
            .unwrap_or_else(|e| panic!("case {case}: {e}\n{spec}"))
        {
            None => {
                assert!(by_runtime.is_none(), "case {case}: edited through the runtime's parse");
                assert!(!asks, "case {case}: an asking spec was not edited");
                assert_eq!(
                    serde_json::to_vec(&spec).unwrap(),
                    text,
                    "case {case}: the spec must stay byte for byte"
                );
            }
            Some((edited, report)) => {
                asked += 1;
                assert_eq!(
                    by_runtime.as_ref(),
                    Some(&edited),
                    "case {case}: the runtime's parse edits to another spec"
                );
                assert!(asks, "case {case}: a spec that did not ask was edited");
                assert_eq!(
                    strip(edited.clone()),
                    strip(spec.clone()),
                    "case {case}: a field outside {EDITED:?} changed"
                );
                // The documented fields: the container's own env entries are kept unless
                // repaired (reported), and the rlimits other than memlock stay.
                let old_env: Vec<&Value> =
                    spec["process"]["env"].as_array().unwrap().iter().collect();
                for e in &old_env {
                    let name = e.as_str().unwrap().split('=').next().unwrap();
                    let kept = edited["process"]["env"].as_array().unwrap().contains(e);
                    let repaired =
                        report.env_added.iter().any(|a| a.starts_with(&format!("{name}=")));
                    assert!(kept || repaired, "case {case}: {e} vanished without a report");
                }
                assert!(edited["process"]["rlimits"]
                    .as_array()
                    .unwrap()
                    .contains(&json!({"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024})));
                assert!(edited["process"]["rlimits"].as_array().unwrap().contains(
                    &json!({"type": "RLIMIT_MEMLOCK", "hard": 4194304, "soft": 4194304})
                ));
                // Idempotent: editing the edited spec changes nothing more.
                let (again, _) = erdma_oci_hook::hooks::edit(&edited, &config).unwrap().unwrap();
                assert_eq!(again, edited, "case {case}: a second edit changed the spec");
            }
        }
    }
    assert!(asked > 50, "enough asking cases ({asked})");
}

/// What a tar reader saw of each entry: name, type, size, link target.
type Seen = Vec<(Vec<u8>, u8, u64, Option<Vec<u8>>)>;

fn seen<R: std::io::Read>(e: &mut tar::Entry<'_, R>) -> (Vec<u8>, u8, u64, Option<Vec<u8>>) {
    (
        e.path_bytes().into_owned(),
        e.header().entry_type().as_byte(),
        e.size(),
        e.link_name_bytes().map(|l| l.into_owned()),
    )
}

#[test]
fn the_bounded_tar_walk_reads_what_gnu_tar_writes_as_the_tar_crate_does() {
    use std::io::{Seek, SeekFrom, Write};
    let mut r = rng(7);
    let n = cases(24);
    // What the generated archives held, to show the walk met each kind.
    let (mut long, mut sparse, mut links) = (0, 0, 0);
    for case in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        std::fs::create_dir(&root).unwrap();
        let mut names = Vec::new();
        for i in 0..(1 + r.below(12)) {
            // Deep names (GNU long names past 100 bytes, up to about 3 KiB).
            let depth = r.below(14);
            let mut rel = std::path::PathBuf::new();
            for d in 0..depth {
                rel.push(format!("{}{d}", "d".repeat(1 + r.below(200))));
            }
            std::fs::create_dir_all(root.join(&rel)).unwrap();
            let name = rel.join(format!("f{i}-{}", "n".repeat(r.below(150))));
            match r.below(5) {
                0 => std::os::unix::fs::symlink(
                    format!("{}/{}", "../".repeat(r.below(40)), "t".repeat(r.below(300))),
                    root.join(&name),
                )
                .unwrap(),
                1 if !names.is_empty() => {
                    std::fs::hard_link(root.join(r.pick(&names)), root.join(&name)).unwrap()
                }
                2 => {
                    // Sparse: data blocks far apart (GNU tar's map, extended past 4 blocks).
                    let mut f = std::fs::File::create(root.join(&name)).unwrap();
                    for b in 0..(1 + r.below(30)) as u64 {
                        f.seek(SeekFrom::Start(b * (64 << 10))).unwrap();
                        f.write_all(&[1u8; 512]).unwrap();
                    }
                    f.set_len(r.below(8) as u64 * (1 << 20) + (2 << 20)).unwrap();
                    names.push(name);
                }
                _ => {
                    std::fs::write(root.join(&name), vec![b'x'; r.below(3 << 20)]).unwrap();
                    names.push(name);
                }
            }
        }
        let format = if case % 2 == 0 { "--format=gnu" } else { "--format=posix" };
        let out = Command::new("tar")
            .args(["--sparse", format, "-cf", "-", "t"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "tar: {}", String::from_utf8_lossy(&out.stderr));
        let mut plain: Seen = Vec::new();
        for e in tar::Archive::new(out.stdout.as_slice()).entries().unwrap() {
            plain.push(seen(&mut e.unwrap()));
        }
        let mut bounded: Seen = Vec::new();
        erdma_limits::walk_tar(
            out.stdout.as_slice(),
            |e| e,
            |e| {
                bounded.push(seen(e));
                // Read part of some contents: the walk skips the rest, as the tar crate does.
                if r.below(2) == 0 {
                    let mut head = [0u8; 700];
                    let _ = std::io::Read::read(e, &mut head)?;
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("case {case} ({format}): {e}"));
        assert_eq!(bounded, plain, "case {case} ({format})");
        assert!(!plain.is_empty());
        long += plain.iter().filter(|e| e.0.len() > 100).count();
        sparse += plain.iter().filter(|e| e.1 == b'S').count();
        links += plain.iter().filter(|e| matches!(e.1, b'1' | b'2')).count();
    }
    eprintln!("tar walk: {n} archives, {long} names over 100 bytes, {sparse} GNU sparse entries, {links} links");
    assert!(
        long > 0 && sparse > 0 && links > 0,
        "the archives held {long} long names, {sparse} sparse entries, {links} links"
    );
}
