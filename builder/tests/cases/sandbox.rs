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
    for line in [
        "uid 0",
        "map 0 1073741824 65536",
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
    assert!(err.starts_with("error: running maintainer scripts in a sandbox (needed for failing-stand-in 1.0's postinst (`cat /etc/nonexistent-erdma-config`)): dpkg exited with status 1: "), "{err}");
    assert!(err.contains("failing-stand-in"), "{err}");
    assert!(err.contains("hint: --no-sandbox"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
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
