//! The sandbox maintainer scripts run in when they cannot be emulated: a hostile postinst
//! reaches neither the host's files nor the network, and a failing one fails the build with
//! dpkg's own words and nothing written. Real Debian 12 roots (debootstrap), real dpkg.
use std::path::Path;

use super::build_fails;
use super::scripts::layer_file;
use crate::support::{self, debian, debs};

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Tries every way out it knows and writes down what happened, then succeeds.
fn hostile_postinst(host_dir: &Path, port: u16) -> String {
    let host = host_dir.display();
    format!(
        r#"out=/var/log/hostile.txt
echo "uid $(id -u)" > $out
echo "map $(cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //')" >> $out
# A path of the host, open to everyone there.
if echo pwned > {host}/pwned 2>/dev/null; then echo "host path: written" >> $out; else echo "host path: refused" >> $out; fi
# The chroot escape: keep a handle on /, chroot below it, climb out of the handle.
perl -e 'opendir(my $d, "/") or die; mkdir "/esc"; chroot("/esc") or die "chroot: $!"; chdir($d) or die; chdir("..") for 1..64; chroot(".") or die; print -e "{host}/host-only" ? "escape: host reached\n" : "escape: nothing beyond the root\n"' >> $out 2>&1
rmdir /esc
# The network: a listener on the host's loopback.
if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo "net: connected" >> $out; else echo "net: refused" >> $out; fi
# The kernel's knobs.
if echo h > /proc/sysrq-trigger 2>/dev/null; then echo "sysrq: written" >> $out; else echo "sysrq: refused" >> $out; fi
echo "processes $(ls /proc | grep -c '^[0-9]')" >> $out
# A daemon left behind.
(sleep 6061 </dev/null >/dev/null 2>&1 &)
exit 0
"#
    )
}

#[test]
fn a_hostile_postinst_stays_in_the_sandbox() {
    if !debian::require_base()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
        || !support::require(
            support::is_root(),
            "root, to give the sandbox its own ids (as .ci/run runs the tests)",
        )
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let host_dir = tmp.path().join("host");
    std::fs::create_dir(&host_dir).unwrap();
    std::fs::write(host_dir.join("host-only"), "the host's\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&host_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let postinst = hostile_postinst(&host_dir, port);
    let deb = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "hostile-stand-in",
            version: "1.0",
            files: vec![("/usr/share/doc/hostile-stand-in/README", b"hostile\n".as_slice(), 0o644)],
            postinst: Some(&postinst),
            ..Default::default()
        },
    );
    let base = debian::base(debian::BOOKWORM);
    let out = tmp.path().join("out");
    let r = super::build_one_deb(&base.reference(), &deb, &out, &tmp.path().join("cache"));
    assert!(r["images"][0]["packages"]["sandbox"]["because"]
        .as_str()
        .unwrap()
        .contains("hostile-stand-in 1.0's postinst"));
    // The host: untouched, no connection.
    let mut names: Vec<String> = std::fs::read_dir(&host_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["host-only"]);
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the sandbox reached the host's loopback"
    );
    // The script's own account, from the layer.
    let img = support::fixture::read_fixture(&out, "x");
    let blob = std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap();
    let record =
        layer_file(&blob, "var/log/hostile.txt").expect("the postinst's record in the layer");
    // The map as the script sees it: the job's namespace's ids 0-65535, themselves host ids
    // 2^30 and up (the job process's own map, which root writes).
    for line in [
        "uid 0",
        "map 0 0 65536",
        "host path: refused",
        "escape: nothing beyond the root",
        "net: refused",
        "sysrq: refused",
    ] {
        assert!(record.lines().any(|l| l == line), "`{line}` not in:\n{record}");
    }
    // Its own PID namespace: the shell, dpkg and the script, not the host's processes.
    let procs: usize =
        record.lines().find_map(|l| l.strip_prefix("processes ")).unwrap().parse().unwrap();
    assert!(procs < 10, "{record}");
    // What it left running died with the sandbox.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.trim() == "sleep 6061")
        .collect();
    assert!(left.is_empty(), "a script's daemon outlived the sandbox: {left:?}");
}

/// A postinst that fails fails the build, with dpkg's words, and writes nothing.
#[test]
fn a_failing_postinst_fails_the_build_and_writes_nothing() {
    if !debian::require_base()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
        || !support::require(support::is_root(), "root, to give the sandbox its own ids")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "failing-stand-in",
            version: "1.0",
            files: vec![("/usr/share/doc/failing-stand-in/README", b"fails\n".as_slice(), 0o644)],
            postinst: Some("cat /etc/nonexistent-erdma-config\n"),
            ..Default::default()
        },
    );
    let base = debian::base(debian::BOOKWORM);
    let out = tmp.path().join("out");
    let dest = format!("oci:{}:x", s(&out));
    let err = build_fails(&[
        "build",
        "--base",
        &base.reference(),
        "--no-packages",
        "--no-env-presets",
        "--package",
        &s(&deb),
        "--allow-unsigned-package",
        "--output",
        &dest,
    ]);
    assert!(err.starts_with("error: running maintainer scripts in a sandbox (needed for failing-stand-in 1.0's postinst (`cat /etc/nonexistent-erdma-config`))\n  Caused by: dpkg exited with status 1: "), "{err}");
    assert!(err.contains("failing-stand-in"), "{err}");
    assert!(err.contains("\nhint: --no-sandbox"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 3, "the error, its cause and the hint: {err}");
    assert!(!out.exists(), "nothing written");
}

/// The sandbox runs the image's own architecture: on the Debian 12 arm64 base (qemu-user-static
/// registered with the `F` flag, as scripts/setup registers it), libwrap0's postinst (a `cat`
/// heredoc writing `/etc/hosts.allow` and `/etc/hosts.deny`) runs under the arm64 dpkg, and the
/// layer holds what it wrote and dpkg's record of the arm64 package.
#[test]
fn the_sandbox_runs_a_foreign_architecture_through_binfmt() {
    if !debian::require_base_for(debian::BOOKWORM, debian::ARM64)
        || !support::require(support::is_root(), "root, to give the sandbox its own ids")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = debian::base_for(debian::BOOKWORM, debian::ARM64);
    let out = tmp.path().join("out");
    let r = super::build_cached(
        &[
            "--base",
            &base.reference(),
            "--no-packages",
            "--no-env-presets",
            "--install",
            "libwrap0",
            "--output",
            &format!("oci:{}:x", s(&out)),
        ],
        &tmp.path().join("cache"),
    );
    let because = r["images"][0]["packages"]["sandbox"]["because"].as_str().unwrap();
    assert!(because.starts_with("libwrap0 "), "{because}");
    let img = support::fixture::read_fixture(&out, "x");
    let blob = std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap();
    for f in ["etc/hosts.allow", "etc/hosts.deny"] {
        let t = layer_file(&blob, f);
        assert!(t.as_deref().is_some_and(|t| t.starts_with("# /etc/")), "{f}: {t:?}");
    }
    let status = layer_file(&blob, "var/lib/dpkg/status").expect("dpkg's status in the layer");
    assert!(
        status.contains("Package: libwrap0\nStatus: install ok installed\n")
            && status.contains("Architecture: arm64"),
        "{status}"
    );
}

/// The user scripts/setup makes for the rootless sandbox, with 65536 subordinate ids.
const ROOTLESS_USER: &str = "erdma-rootless";

/// Every entry of a gzip layer blob but what a run leaves by its clock (dpkg's and apt's logs
/// and bookkeeping, adduser's lock): `path → type, mode, owner, content, link, xattrs`.
fn layer_entries(blob: &[u8]) -> Entries {
    use sha2::Digest as _;
    let mut out = Entries::new();
    for e in tar::Archive::new(flate2::read::MultiGzDecoder::new(blob)).entries().unwrap() {
        let mut e = e.unwrap();
        let p = e.path().unwrap().to_string_lossy().trim_end_matches('/').to_string();
        if ["var/log/", "var/cache/", "var/lib/dpkg/triggers/", "var/lib/dpkg/updates/", "tmp/"]
            .iter()
            .any(|n| p.starts_with(n))
            || p.starts_with("var/lib/dpkg/lock")
            || p == "run/adduser"
            || p == "etc/.pwd.lock"
        {
            continue;
        }
        let h = e.header().clone();
        let mut xattrs = Vec::new();
        if let Some(pax) = e.pax_extensions().unwrap() {
            for x in pax {
                let x = x.unwrap();
                if let Some(name) = x.key().unwrap().strip_prefix("SCHILY.xattr.") {
                    xattrs.push(format!("{name}={}", hex::encode(x.value_bytes())));
                }
            }
        }
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut data).unwrap();
        let link = e.link_name().unwrap().map(|l| l.to_string_lossy().into_owned());
        out.insert(
            p,
            format!(
                "{:?} {:o} {}:{} {} {link:?} {xattrs:?}",
                h.entry_type(),
                h.mode().unwrap(),
                h.uid().unwrap(),
                h.gid().unwrap(),
                hex::encode(sha2::Sha256::digest(&data))
            ),
        );
    }
    out
}

type Entries = std::collections::BTreeMap<String, String>;

/// The paths two [`layer_entries`] differ at, each with both sides, named.
fn diff_entries((a, ours): (&str, &Entries), (b, theirs): (&str, &Entries)) -> Vec<String> {
    ours.keys()
        .chain(theirs.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|p| ours.get(*p) != theirs.get(*p))
        .map(|p| format!("{p}: {a} {:?}, {b} {:?}", ours.get(p), theirs.get(p)))
        .collect()
}

/// `erdma-build build --json` of `DIR/probe.deb` on `DIR/base` (tagged `tag`) into `DIR/OUT`,
/// as `user`:`group`, with `DIR` as its home and cache and `env` besides.
fn build_as(
    (user, group): (&str, &str),
    dir: &Path,
    tag: &str,
    out: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args([&format!("--reuid={user}"), &format!("--regid={group}"), "--clear-groups", "--"])
        .arg(support::bin())
        .args(["build", "--json", "--base"])
        .arg(format!("oci:{}:{tag}", s(&dir.join("base"))))
        .args(["--no-packages", "--no-env-presets", "--allow-unsigned-package", "--package"])
        .arg(dir.join("probe.deb"))
        .arg("--output")
        .arg(format!("oci:{}:x", s(&dir.join(out))))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", dir)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The sandbox without root, as rootless Podman runs containers: erdma-build, run as a user
/// whose only privilege is a range of subordinate ids (scripts/setup's `erdma-rootless`),
/// installs a package whose postinst makes a system user with a home (adduser) and gives it a
/// file: ids besides the user's own, and /etc/shadow rewritten with its group. The layer equals
/// the one root's build of the same package gives, entry for entry.
#[test]
fn the_sandbox_runs_without_root_on_subordinate_ids() {
    let subids = std::fs::read_to_string("/etc/subuid")
        .is_ok_and(|t| t.lines().any(|l| l.starts_with(&format!("{ROOTLESS_USER}:"))));
    if !debian::require_base()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
        || !support::require(support::is_root(), "root, to run erdma-build as another user")
        || !support::require(
            subids && support::have("newuidmap") && support::have("setpriv"),
            "the user erdma-rootless with subordinate ids, newuidmap and setpriv (run scripts/setup)",
        )
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let postinst = "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n  adduser --system --group --home /var/lib/rootless-probe rootless-probe\n  echo made > /var/lib/rootless-probe/made\n  chown rootless-probe:rootless-probe /var/lib/rootless-probe/made\n  chmod 0600 /var/lib/rootless-probe/made\nfi\n";
    let deb = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "rootless-probe",
            version: "1.0",
            files: vec![("/usr/share/doc/rootless-probe/README", b"probe\n".as_slice(), 0o644)],
            postinst: Some(postinst),
            ..Default::default()
        },
    );
    let base = debian::base(debian::BOOKWORM);
    let as_root = tmp.path().join("as-root");
    let r = super::build_one_deb(&base.reference(), &deb, &as_root, &tmp.path().join("cache"));
    assert!(r["images"][0]["packages"]["sandbox"]["because"].is_string(), "{r}");

    // The same as the user: its own copy of the base, its own cache and output.
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let copy = std::process::Command::new("cp")
        .arg("-a")
        .arg(&base.dir)
        .arg(home.join("base"))
        .output()
        .unwrap();
    support::assert_success("cp -a", &copy);
    std::fs::copy(&deb, home.join("probe.deb")).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{ROOTLESS_USER}:{ROOTLESS_USER}")])
        .arg(&home)
        .output()
        .unwrap();
    support::assert_success("chown", &chown);
    let rootless = home.join("out");
    let user = (ROOTLESS_USER, ROOTLESS_USER);
    let out = build_as(user, &home, &base.tag, "out", &[]);
    support::assert_success("erdma-build build as erdma-rootless", &out);
    // By default its root in memory: the test machines have tens of GiB (`memory_room`).
    let rootless_tree = |r: &std::process::Output| {
        let r: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        r["images"][0]["packages"]["sandbox"]["tree"].as_str().unwrap().to_string()
    };
    assert_eq!(rootless_tree(&out), "memory");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("newuidmap:"),
        "only erdma-build speaks"
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["images"][0]["packages"]["sandbox"]["layers_read"].as_u64() >= Some(1), "{r}");
    // Nothing of the sandbox is left where the user could not remove it.
    let left: Vec<_> = std::fs::read_dir(home.join("cache/erdma-build"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("erdma-build-sandbox-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    let layer = |dir: &Path| {
        let img = support::fixture::read_fixture(dir, "x");
        std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap()
    };
    let (ours, theirs) = (layer_entries(&layer(&rootless)), layer_entries(&layer(&as_root)));
    // A user without subordinate ids: refused before any layer is read, saying what is
    // missing, and nothing written.
    let nobody = tmp.path().join("nobody");
    std::fs::create_dir(&nobody).unwrap();
    let copy = std::process::Command::new("cp")
        .arg("-a")
        .arg(home.join("base"))
        .arg(home.join("probe.deb"))
        .arg(&nobody)
        .output()
        .unwrap();
    support::assert_success("cp -a", &copy);
    let chown = std::process::Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(&nobody)
        .output()
        .unwrap();
    support::assert_success("chown", &chown);
    let out = build_as(("nobody", "nogroup"), &nobody, &base.tag, "out", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let err = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    assert!(!out.status.success(), "{stderr}");
    assert!(err.starts_with("error: running maintainer scripts in a sandbox"), "{stderr}");
    let cause = stderr.lines().find(|l| l.starts_with("  Caused by: ")).unwrap_or_default();
    assert!(
        cause.contains("running scripts in a sandbox without root needs a range of 65535 subordinate ids for nobody in /etc/subuid"),
        "{stderr}"
    );
    assert!(stderr.lines().any(|l| l.starts_with("hint: ")), "{stderr}");
    assert!(!nobody.join("out").exists(), "nothing written");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("reading the base's"), "no layer read");
    let made = &ours["var/lib/rootless-probe/made"];
    assert!(made.contains(" 600 ") && !made.contains(" 0:0 "), "owned by the new user: {made}");
    assert!(ours["etc/shadow"].contains(" 0:42 "), "{}", ours["etc/shadow"]);
    let differing = diff_entries(("rootless", &ours), ("root", &theirs));
    assert!(differing.is_empty(), "{}", differing.join("\n"));
    // The same with the sandbox's root on disk, as where memory is short (the default puts
    // it in memory on a machine like this one).
    let out = build_as(user, &home, &base.tag, "out-disk", &[("ERDMA_BUILD_SANDBOX_TREE", "disk")]);
    support::assert_success("erdma-build build as erdma-rootless, tree on disk", &out);
    assert_eq!(rootless_tree(&out), "disk");
    let on_disk = layer_entries(&layer(&home.join("out-disk")));
    let differing = diff_entries(("rootless, disk", &on_disk), ("root", &theirs));
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}

/// A sandboxed build from a registry base reads the base's layer whole; built again with the
/// same cache it downloads that layer no more (kept by digest, checked before use), whether
/// its output is a registry (the base layer mounted there) or a layout (the kept copy linked
/// in). A kept layer that was tampered with is fetched again, not used.
#[test]
fn a_warm_sandboxed_build_keeps_the_base_layer() {
    if !debian::require_base()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
        || !support::require(support::is_root(), "root, for the sandbox's ids")
        || !support::require(support::have("docker-registry"), "docker-registry is needed")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "warm-probe",
            version: "1.0",
            files: vec![("/usr/share/doc/warm-probe/README", b"warm\n".as_slice(), 0o644)],
            postinst: Some("#!/bin/sh\nset -e\necho warm > /etc/warm-probe.conf\n"),
            ..Default::default()
        },
    );
    let base = debian::base(debian::BOOKWORM);
    let reg = support::Registry::start();
    reg.push(&base.reference(), "debian:12");
    let layer_digest = base.layers[0].digest.clone();
    let cache = tmp.path().join("cache");
    let build = |out: &str| {
        let dest = if out.starts_with("reg-") {
            reg.reference(&format!("{out}:1"))
        } else {
            format!("oci:{}:x", s(&tmp.path().join(out)))
        };
        let r = super::build_one_deb_to(&reg.reference("debian:12"), &deb, &dest, &cache);
        assert!(r["images"][0]["packages"]["sandbox"]["because"].is_string(), "{r}");
        r["images"][0]["layer"]["digest"].as_str().unwrap().to_string()
    };
    let before = reg.count_blob_gets(&layer_digest);
    let cold = build("cold");
    let after_cold = reg.count_blob_gets(&layer_digest);
    assert!(after_cold > before, "the cold build reads the base layer");
    let img = support::fixture::read_fixture(&tmp.path().join("cold"), "x");
    let blob = std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap();
    assert_eq!(layer_file(&blob, "etc/warm-probe.conf").as_deref(), Some("warm\n"));

    build("reg-warm");
    build("warm-layout");
    assert_eq!(reg.count_blob_gets(&layer_digest), after_cold, "warm builds download it no more");
    let img = support::fixture::read_fixture(&tmp.path().join("warm-layout"), "x");
    let linked = std::fs::read(img.blob_path(&layer_digest)).unwrap();
    assert_eq!(linked.len() as u64, base.layers[0].size, "the base layer in the layout, whole");
    // The layer records when dpkg wrote its files: it is not kept whole for a later build
    // (none writes it alike), its gzip blocks are.
    let (mut whole, mut blocks) = (Vec::new(), 0);
    for program in std::fs::read_dir(cache.join("erdma-build/compressed")).unwrap() {
        for e in std::fs::read_dir(program.unwrap().path()).unwrap() {
            let e = e.unwrap();
            match e.file_name() == "blocks" {
                true => blocks += std::fs::read_dir(e.path()).unwrap().count(),
                false => whole.push(e.path()),
            }
        }
    }
    assert!(whole.is_empty(), "kept whole: {whole:?}");
    assert!(blocks > 0, "its blocks kept");

    // Tampered with in the cache (a new file in its place): fetched again, for the sandbox
    // and for the layout alike, and kept whole again.
    let kept =
        cache.join("erdma-build/blobs/sha256").join(layer_digest.trim_start_matches("sha256:"));
    assert!(kept.is_file(), "{} kept", kept.display());
    std::fs::remove_file(&kept).unwrap();
    std::fs::write(&kept, b"not the layer").unwrap();
    build("again-layout");
    assert!(reg.count_blob_gets(&layer_digest) > after_cold, "fetched again");
    assert_eq!(std::fs::metadata(&kept).unwrap().len(), base.layers[0].size, "and kept whole");
    let _ = cold;
}

/// The sandbox's root in memory (a tmpfs in the job's own mount namespace, the default where
/// memory has room) and on disk (`ERDMA_BUILD_SANDBOX_TREE=disk`) give the same layer, entry
/// for entry; the report says where it was. A tmpfs too small for the tree sends the build to
/// disk again, with the same layer, and the report says why: filled while the base's layer is
/// applied, filled by a script (the tmpfs full afterwards), and filled while dpkg unpacks (dpkg
/// removes what it wrote: the run failed, the tmpfs is not full afterwards).
#[test]
fn tree_in_memory_or_on_disk() {
    if !debian::require_base()
        || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
        || !support::require(support::is_root(), "root, for the sandbox's ids")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Adds a user, changes a base file in place and removes another, writes 48 MiB.
    let postinst = "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n  adduser --system --group --home /var/lib/tree-probe tree-probe\n  echo '# tree-probe' >> /etc/bash.bashrc\n  rm /etc/issue.net\n  head -c 50331648 /dev/zero > /var/lib/tree-probe/big\nfi\n";
    let probe = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "tree-probe",
            version: "1.0",
            files: vec![("/usr/share/doc/tree-probe/README", b"probe\n".as_slice(), 0o644)],
            postinst: Some(postinst),
            ..Default::default()
        },
    );
    // 24 MiB of files, and a postinst that sends the install to the sandbox.
    let noise = vec![0u8; 24 << 20];
    let noisy = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "tree-noise",
            version: "1.0",
            files: vec![("/usr/share/tree-noise/data", noise.as_slice(), 0o644)],
            postinst: Some("echo noise > /etc/tree-noise.conf\n"),
            ..Default::default()
        },
    );
    let base = debian::base(debian::BOOKWORM);
    // What the base's tree needs: a little more than its layer's uncompressed tar (8 MB more
    // on a tmpfs for Debian 12's minbase of 2026-11: a page for every small file).
    let tar_size = {
        let f = std::fs::File::open(base.blob_path(&base.layers[0].digest)).unwrap();
        std::io::copy(&mut flate2::read::MultiGzDecoder::new(f), &mut std::io::sink()).unwrap()
    };
    let build = |deb: &Path, name: &str, setting: &str| {
        let out = tmp.path().join(name);
        let (r, progress) = super::build_one_deb_env(
            &base.reference(),
            deb,
            &format!("oci:{}:x", s(&out)),
            &tmp.path().join("cache"),
            &[("ERDMA_BUILD_SANDBOX_TREE", setting)],
        );
        let img = support::fixture::read_fixture(&out, "x");
        let blob = std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap();
        let tree = r["images"][0]["packages"]["sandbox"]["tree"].as_str().unwrap().to_string();
        (tree, layer_entries(&blob), progress)
    };
    // `auto`: in memory on the test machines, which have tens of GiB.
    let (tree, memory, progress) = build(&probe, "memory", "auto");
    assert_eq!(tree, "memory", "{progress}");
    assert!(progress.contains("to run maintainer scripts in a sandbox, its root in memory"));
    let (tree, disk, _) = build(&probe, "disk", "disk");
    assert_eq!(tree, "disk");
    // Filled while the base is applied.
    let (tree, small, progress) = build(&probe, "small", "memory:8388608");
    assert_eq!(tree, "disk (filled its 8 MiB tmpfs in memory)", "{progress}");
    assert!(
        progress.contains("its root filled its 8 MiB tmpfs (bytes or inodes): running the sandbox again, its root on disk")
    );
    // Filled by the script: room for the base and the package, not for its 48 MiB.
    let limit = tar_size + (16 << 20);
    let (tree, by_script, progress) = build(&probe, "by-script", &format!("memory:{limit}"));
    assert_eq!(
        tree,
        format!("disk (filled its {} MiB tmpfs in memory)", limit >> 20),
        "{progress}"
    );

    assert!(memory.contains_key("var/lib/tree-probe/big"), "{:?}", memory.keys());
    assert!(memory["etc/bash.bashrc"].starts_with("Regular "), "{}", memory["etc/bash.bashrc"]);
    assert!(memory.contains_key("etc/.wh.issue.net"), "{:?}", memory.keys());
    for other in [("disk", &disk), ("small", &small), ("by-script", &by_script)] {
        let differing = diff_entries(("memory", &memory), other);
        assert!(differing.is_empty(), "{}", differing.join("\n"));
    }

    // Filled by a script that goes on past the failed write and gives back 512 KiB, room
    // for dpkg's own bookkeeping: the run succeeds, the tmpfs is (nearly) full at its end.
    let careless = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "tree-careless",
            version: "1.0",
            files: vec![("/usr/share/doc/tree-careless/README", b"careless\n".as_slice(), 0o644)],
            postinst: Some(
                "head -c 50331648 /dev/zero > /var/tree-careless || true\ntruncate -s -512K /var/tree-careless\n",
            ),
            ..Default::default()
        },
    );
    let (tree, careless_memory, progress) =
        build(&careless, "careless", &format!("memory:{limit}"));
    assert_eq!(
        tree,
        format!("disk (filled its {} MiB tmpfs in memory)", limit >> 20),
        "{progress}"
    );
    let (_, careless_disk, _) = build(&careless, "careless-disk", "disk");
    let zeros = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(vec![0u8; (48 << 20) - (512 << 10)]))
    };
    assert!(careless_disk["var/tree-careless"].contains(&zeros), "written whole on disk");
    let differing = diff_entries(("careless", &careless_memory), ("disk", &careless_disk));
    assert!(differing.is_empty(), "{}", differing.join("\n"));

    // Filled while dpkg unpacks: room for the base and the package file (its xz-compressed
    // zeros are small), not for the 24 MiB it unpacks.
    let limit = tar_size + (16 << 20);
    let (tree, unpacked, progress) = build(&noisy, "unpack", &format!("memory:{limit}"));
    let failed = format!(
        "disk (after a failed run in memory, {} MiB: dpkg exited with status ",
        limit >> 20
    );
    assert!(tree.starts_with(&failed), "{tree}\n{progress}");
    assert!(progress.contains("running it once more on disk, in case the limit caused it"));
    let (tree, noisy_disk, _) = build(&noisy, "noisy-disk", "disk");
    assert_eq!(tree, "disk");
    assert!(unpacked.contains_key("usr/share/tree-noise/data"), "{:?}", unpacked.keys());
    let differing = diff_entries(("unpack", &unpacked), ("disk", &noisy_disk));
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}
