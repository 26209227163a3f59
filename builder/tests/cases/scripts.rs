//! Maintainer scripts are accounted for one by one: a script the build can neither emulate nor
//! show to be without effect stops it before anything is written (naming the package, the
//! script and the command), `--skip-scripts` builds without it and says so, and `plan` reports
//! the same as `build`. Links and dpkg's database files land as `dpkg -i` leaves them.
use super::{build_cached as build, build_fails, build_json};
use crate::support::{self, debs, testdata};

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// The offline demo's base, archive and key, then `--package` for each of `debs`.
fn demo_with(debs: &[&std::path::Path]) -> Vec<String> {
    let mut v = vec![
        "--base".to_string(),
        format!("oci:{}:latest", testdata("images/debian12-mini")),
        "--mirror".into(),
        format!("file://{}", testdata("repos/debian-demo")),
        "--keyring".into(),
        testdata("repos/debian-demo/demo-key.asc"),
        "--allow-unsigned-package".into(),
    ];
    for d in debs {
        v.extend(["--package".to_string(), s(d).to_string()]);
    }
    v
}

/// openssh-server's configuration file through ucf (its postinst in Debian 12, shortened),
/// which erdma-build does not emulate.
const UCF_POSTINST: &str = "if [ \"$1\" = configure ]; then\n  ucf --three-way --debconf-ok /usr/share/openssh/sshd_config /etc/ssh/sshd_config\nfi\n";

/// openmpi-bin's way of providing `mpirun` (its postinst in Debian 12, shortened).
const ALTERNATIVES_POSTINST: &str = "if [ \"$1\" = \"configure\" ]; then\n    update-alternatives --install /usr/bin/mpirun mpirun /usr/bin/mpirun.openmpi 50 \\\n        --slave /usr/share/man/man1/mpirun.1.gz mpirun.1.gz /usr/share/man/man1/mpirun.openmpi.1.gz \\\n        --slave /usr/bin/orterun orterun /usr/bin/orterun.openmpi\nfi\n";

#[test]
fn an_unknown_postinst_refuses_the_build_unless_skipped() {
    if !support::require(support::have("dpkg-deb"), "dpkg-deb is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "sshd-stand-in",
            version: "1:9.2p1-2",
            files: vec![("/usr/sbin/sshd", b"#!/bin/sh\n".as_slice(), 0o755)],
            postinst: Some(UCF_POSTINST),
            ..Default::default()
        },
    );
    let common = demo_with(&[&deb]);
    let common: Vec<&str> = common.iter().map(String::as_str).collect();

    // By default the script would run in a sandbox; the demo base is no root to run it in
    // (no shell, no dpkg), and the error says so before reading any layer.
    let out = tmp.path().join("no-sandbox-here");
    let dest = format!("oci:{}:x", s(&out));
    let mut args = vec!["build", "--output", &dest];
    args.extend_from_slice(&common);
    let err = build_fails(&args);
    assert!(
        err.starts_with("error: running maintainer scripts in a sandbox (needed for sshd-stand-in 1:9.2p1-2's postinst (`ucf --three-way --debconf-ok"),
        "{err}"
    );
    if support::is_root() {
        assert!(err.contains("\n  Caused by: the base has no /bin/sh to run them with"), "{err}");
    }
    let hint = err.lines().find(|l| l.starts_with("hint: ")).unwrap_or_default();
    assert!(hint.starts_with("hint: --no-sandbox") && hint.contains("--skip-scripts"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 3, "the error, its cause and the hint: {err}");
    assert!(!out.exists(), "nothing written");
    // `plan` says what the build would run and read.
    let mut args = vec!["plan"];
    args.extend_from_slice(&common);
    let plan = build_json(&args);
    let sandbox = &plan["images"][0]["packages"]["sandbox"];
    assert!(sandbox["because"].as_str().unwrap().contains("ucf --three-way"), "{sandbox}");
    assert_eq!(sandbox["layers_read"], 1, "{sandbox}");
    assert!(
        sandbox["commands"].as_array().unwrap().iter().any(|c| c == "dpkg --configure --pending"),
        "{sandbox}"
    );

    // --no-sandbox: emulate or refuse.
    let out = tmp.path().join("refused");
    let dest = format!("oci:{}:x", s(&out));
    let mut args = vec!["build", "--no-sandbox", "--output", &dest];
    args.extend_from_slice(&common);
    let err = build_fails(&args);
    assert!(
        err.starts_with("error: package sshd-stand-in 1:9.2p1-2: its postinst runs `ucf --three-way --debconf-ok /usr/share/openssh/sshd_config /etc/ssh/sshd_config`"),
        "{err}"
    );
    let hint = err.lines().find(|l| l.starts_with("hint: ")).unwrap_or_default();
    assert!(hint.contains("--skip-scripts"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 2, "the error and the hint: {err}");
    assert!(!out.exists(), "nothing written");

    // `plan` reads the same package (it is on disk) and refuses the same way.
    let mut args = vec!["plan", "--no-sandbox"];
    args.extend_from_slice(&common);
    assert_eq!(build_fails(&args), err);

    // --skip-scripts: built, and the report says what was not run and what was done instead.
    let out = tmp.path().join("skipped");
    let dest = format!("oci:{}:x", s(&out));
    let mut args = vec!["--output", &dest, "--skip-scripts"];
    args.extend_from_slice(&common);
    let r = build(&args, &tmp.path().join("cache"));
    let scripts = r["images"][0]["packages"]["scripts"].as_array().unwrap().clone();
    let rec = |p: &str, sc: &str| {
        scripts
            .iter()
            .find(|r| r["package"] == p && r["script"] == sc)
            .unwrap_or_else(|| panic!("{p} {sc} in {scripts:?}"))
            .clone()
    };
    let mpi = rec("sshd-stand-in 1:9.2p1-2", "postinst");
    assert_eq!(mpi["outcome"], "not-run", "{mpi}");
    assert!(mpi["detail"].as_str().unwrap().contains("ucf --three-way"), "{mpi}");
    // The recipe's packages in the same build: emulated or shown to be without effect.
    assert_eq!(rec("libibverbs1 44.0-2", "postinst")["outcome"], "emulated");
    assert_eq!(rec("libibverbs1 44.0-2", "triggers")["outcome"], "no-effect");
    assert_eq!(rec("ibverbs-providers 44.0-2", "preinst")["outcome"], "no-effect");
    let mut args = vec!["plan", "--skip-scripts"];
    args.extend_from_slice(&common);
    let plan = build_json(&args);
    assert_eq!(
        plan["images"][0]["packages"]["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["package"] == "sshd-stand-in 1:9.2p1-2"),
        Some(&mpi),
        "plan and build agree"
    );
}

/// A script with nothing but tests and output is without effect; `addgroup --system` is
/// emulated for any group name, the gid chosen as adduser chooses it. Recommends that nothing
/// satisfies are named as left out.
#[test]
fn inert_scripts_and_system_groups() {
    if !support::require(support::have("dpkg-deb"), "dpkg-deb is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let quiet = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "quiet-tool",
            version: "1.0",
            files: vec![("/usr/bin/quiet-tool", b"#!/bin/sh\n".as_slice(), 0o755)],
            postinst: Some("case \"$1\" in\n  configure) echo configured > /dev/null ;;\n  abort-upgrade) chown nobody /etc/x ;;\nesac\n"),
            ..Default::default()
        },
    );
    let grouped = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "grouped-tool",
            version: "2.0",
            files: vec![("/usr/bin/grouped-tool", b"#!/bin/sh\n".as_slice(), 0o755)],
            // One group left out, one met by a package of the plan.
            recommends: Some("perftest, erdma-absent | ibverbs-providers"),
            postinst: Some("if [ \"$1\" = configure ]; then\n  getent group erdmatest >/dev/null 2>&1 || addgroup --system --quiet erdmatest\nfi\n"),
            ..Default::default()
        },
    );
    let out = tmp.path().join("out");
    let dest = format!("oci:{}:x", s(&out));
    let mut args = demo_with(&[&quiet, &grouped]);
    args.extend(["--output".to_string(), dest]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = build(&args, &tmp.path().join("cache"));
    let scripts = r["images"][0]["packages"]["scripts"].as_array().unwrap();
    let find = |p: &str| {
        scripts.iter().find(|r| r["package"] == p).unwrap_or_else(|| panic!("{p}: {scripts:?}"))
    };
    assert_eq!(find("quiet-tool 1.0")["outcome"], "no-effect");
    assert_eq!(find("grouped-tool 2.0")["outcome"], "emulated");
    assert_eq!(find("grouped-tool 2.0")["detail"], "system group erdmatest");
    assert_eq!(
        r["images"][0]["packages"]["recommends_left_out"],
        serde_json::json!(["perftest (recommended by grouped-tool)"])
    );
    let img = support::fixture::read_fixture(&out, "x");
    let top = img.layers.last().unwrap();
    let group = layer_file(&std::fs::read(img.blob_path(&top.digest)).unwrap(), "etc/group")
        .expect("etc/group in the layer");
    let line =
        |name: &str| group.lines().find(|l| l.starts_with(&format!("{name}:"))).map(str::to_string);
    let rdma: u32 = line("rdma").unwrap().split(':').nth(2).unwrap().parse().unwrap();
    let test: u32 = line("erdmatest").unwrap().split(':').nth(2).unwrap().parse().unwrap();
    assert!((100..=999).contains(&rdma) && (100..=999).contains(&test) && rdma != test, "{group}");
}

/// iputils-ping's postinst (Debian 12, 3:20221126-1+deb12u1, as shipped): `ping` gets
/// `cap_net_raw+ep` where `command -v setcap` finds setcap, else the setuid bit.
const PING_POSTINST: &str = "#!/bin/sh\n\nset -e\n\nPROGRAM=$(dpkg-divert --truename /bin/ping)\n\nif [ \"$1\" = configure ]; then\n    # If we have setcap installed, try setting cap_net_raw+ep,\n    # which allows us to install our binaries without the setuid\n    # bit.\n    if command -v setcap > /dev/null; then\n        if setcap cap_net_raw+ep $PROGRAM; then\n            chmod u-s $PROGRAM\n        else\n            echo \"Setcap failed on $PROGRAM, falling back to setuid\" >&2\n            chmod u+s $PROGRAM\n        fi\n    else\n        echo \"Setcap is not installed, falling back to setuid\" >&2\n        chmod u+s $PROGRAM\n    fi\nfi\n\n\n\nexit 0\n";

/// Both ways through iputils-ping's postinst, emulated: without setcap in the image `ping`
/// is made setuid; with a package of the same plan shipping setcap (unpacked after it, as
/// dpkg configures only once everything is unpacked) it gets the capability xattr instead.
#[test]
fn setcap_or_setuid_as_the_postinst_finds_setcap() {
    if !support::require(support::have("dpkg-deb"), "dpkg-deb is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ping = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "ping-stand-in",
            version: "1.0",
            files: vec![("/usr/bin/ping", b"\x7fELF".as_slice(), 0o755)],
            postinst: Some(&PING_POSTINST.replace("/bin/ping", "/usr/bin/ping")),
            ..Default::default()
        },
    );
    let setcap = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "setcap-stand-in",
            version: "1.0",
            files: vec![("/usr/sbin/setcap", b"\x7fELF".as_slice(), 0o755)],
            ..Default::default()
        },
    );
    for (with_setcap, mode, caps) in
        [(false, 0o4755, None), (true, 0o755, Some("0100000200200000000000000000000000000000"))]
    {
        let out = tmp.path().join(format!("out-{with_setcap}"));
        let dest = format!("oci:{}:x", s(&out));
        let debs: Vec<&std::path::Path> =
            if with_setcap { vec![&ping, &setcap] } else { vec![&ping] };
        let mut args = demo_with(&debs);
        args.extend(["--output".to_string(), dest, "--no-sandbox".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = build(&args, &tmp.path().join("cache"));
        let rec = r["images"][0]["packages"]["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["package"] == "ping-stand-in 1.0")
            .unwrap()
            .clone();
        assert_eq!(rec["outcome"], "emulated", "{rec}");
        let img = support::fixture::read_fixture(&out, "x");
        let top = img.layers.last().unwrap();
        let blob = std::fs::read(img.blob_path(&top.digest)).unwrap();
        let (got_mode, got_caps) = layer_meta(&blob, "usr/bin/ping").expect("ping in the layer");
        assert_eq!(got_mode, mode, "{rec}");
        let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(got_caps.map(hex).as_deref(), caps, "{rec}");
    }
}

/// The mode and `security.capability` of `path` in a gzip or plain tar layer blob.
fn layer_meta(blob: &[u8], path: &str) -> Option<(u32, Option<Vec<u8>>)> {
    for e in layer_tar(blob).entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_string_lossy().trim_start_matches("./") == path {
            let mode = e.header().mode().unwrap();
            let caps = e.pax_extensions().unwrap().and_then(|x| {
                x.filter_map(Result::ok)
                    .find(|x| x.key() == Ok("SCHILY.xattr.security.capability"))
                    .map(|x| x.value_bytes().to_vec())
            });
            return Some((mode, caps));
        }
    }
    None
}

/// A gzip or plain tar layer blob as a tar archive.
fn layer_tar(blob: &[u8]) -> tar::Archive<Box<dyn std::io::Read + '_>> {
    tar::Archive::new(if blob.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(blob))
    } else {
        Box::new(blob)
    })
}

/// The content of `path` in a gzip or plain tar layer blob.
pub(super) fn layer_file(blob: &[u8], path: &str) -> Option<String> {
    for e in layer_tar(blob).entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_string_lossy().trim_start_matches("./") == path {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            return Some(s);
        }
    }
    None
}

/// `update-alternatives --install` from two packages' postinsts, held against the real
/// update-alternatives run with `--root` over the same files: the same administrative file,
/// byte for byte, and the same links (a slave without its file gets none).
#[test]
fn alternatives_are_written_as_update_alternatives_writes_them() {
    if !support::require(
        support::have("dpkg-deb") && support::have("update-alternatives"),
        "dpkg-deb and update-alternatives are needed",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let openmpi_files: Vec<(&str, &[u8], u32)> = vec![
        ("/usr/bin/mpirun.openmpi", b"#!/bin/sh\necho openmpi\n", 0o755),
        ("/usr/share/man/man1/mpirun.openmpi.1.gz", b"man", 0o644),
    ];
    let mpich_files: Vec<(&str, &[u8], u32)> = vec![
        ("/usr/bin/mpirun.mpich", b"#!/bin/sh\necho mpich\n", 0o755),
        ("/usr/bin/orterun.mpich", b"#!/bin/sh\n", 0o755),
    ];
    let mpich_postinst = "update-alternatives --quiet --install /usr/bin/mpirun mpirun /usr/bin/mpirun.mpich 40 --slave /usr/bin/orterun orterun /usr/bin/orterun.mpich\n";
    let openmpi = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "openmpi-stand-in",
            version: "4.1.4-3",
            files: openmpi_files.clone(),
            postinst: Some(ALTERNATIVES_POSTINST),
            ..Default::default()
        },
    );
    let mpich = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "mpich-stand-in",
            version: "4.0.2-3",
            files: mpich_files.clone(),
            postinst: Some(mpich_postinst),
            ..Default::default()
        },
    );
    let out = tmp.path().join("out");
    let dest = format!("oci:{}:x", s(&out));
    let mut args = demo_with(&[&openmpi, &mpich]);
    args.extend(["--output".to_string(), dest]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = build(&args, &tmp.path().join("cache"));
    let scripts = r["images"][0]["packages"]["scripts"].as_array().unwrap();
    for p in ["openmpi-stand-in 4.1.4-3", "mpich-stand-in 4.0.2-3"] {
        let rec = scripts.iter().find(|r| r["package"] == p).unwrap();
        assert_eq!(rec["outcome"], "emulated", "{rec}");
    }

    // The oracle: the real tool over the same files, in the order the build installed them.
    let root = tmp.path().join("root");
    for d in ["etc/alternatives", "var/lib/dpkg/alternatives", "usr/bin", "usr/share/man/man1"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for (p, c, _) in openmpi_files.iter().chain(&mpich_files) {
        std::fs::write(root.join(p.trim_start_matches('/')), c).unwrap();
    }
    let order: Vec<String> = r["images"][0]["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .filter(|n| n.ends_with("-stand-in"))
        .collect();
    for name in &order {
        let script =
            if name == "openmpi-stand-in" { ALTERNATIVES_POSTINST } else { mpich_postinst };
        for words in erdma_build::packages::scripts::commands(script, Some(&["configure"]))
            .into_iter()
            .filter(|w| w[0] == "update-alternatives")
        {
            let o = std::process::Command::new("update-alternatives")
                .arg("--root")
                .arg(&root)
                .args(&words[1..])
                .output()
                .unwrap();
            support::assert_success("update-alternatives", &o);
        }
    }
    let img = support::fixture::read_fixture(&out, "x");
    let top = img.layers.last().unwrap();
    let blob = std::fs::read(img.blob_path(&top.digest)).unwrap();
    assert_eq!(
        layer_file(&blob, "var/lib/dpkg/alternatives/mpirun").expect("admin file in the layer"),
        std::fs::read_to_string(root.join("var/lib/dpkg/alternatives/mpirun")).unwrap()
    );
    let mut want = Vec::new();
    for d in ["usr/bin", "usr/share/man/man1", "etc/alternatives"] {
        for e in std::fs::read_dir(root.join(d)).unwrap() {
            let e = e.unwrap();
            if let Ok(t) = std::fs::read_link(e.path()) {
                want.push(format!("{d}/{} -> {}", e.file_name().to_string_lossy(), t.display()));
            }
        }
    }
    want.sort();
    assert_eq!(layer_links(&blob, &["usr/bin/", "usr/share/man/man1/", "etc/alternatives/"]), want);
    assert!(want.iter().any(|l| l == "usr/bin/mpirun -> /etc/alternatives/mpirun"), "{want:?}");
}

/// The symlinks of a layer blob under `dirs`, as `PATH -> TARGET`, sorted.
fn layer_links(blob: &[u8], dirs: &[&str]) -> Vec<String> {
    let r: Box<dyn std::io::Read> = if blob.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(blob))
    } else {
        Box::new(blob)
    };
    let mut out = Vec::new();
    for e in tar::Archive::new(r).entries().unwrap() {
        let e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().trim_start_matches("./").to_string();
        if e.header().entry_type().is_symlink() && dirs.iter().any(|d| path.starts_with(d)) {
            out.push(format!("{path} -> {}", e.link_name().unwrap().unwrap().display()));
        }
    }
    out.sort();
    out
}

/// An emulated command that would fail under dpkg fails the build the same way, saying why.
#[test]
fn an_emulated_command_that_would_fail_fails_the_build() {
    if !support::require(support::have("dpkg-deb"), "dpkg-deb is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let deb = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "chgrp-stand-in",
            version: "1.0",
            files: vec![("/usr/bin/chgrp-stand-in", b"#!/bin/sh\n".as_slice(), 0o755)],
            postinst: Some("chgrp no-such-group /usr/bin/chgrp-stand-in\n"),
            ..Default::default()
        },
    );
    let out = tmp.path().join("out");
    let dest = format!("oci:{}:x", s(&out));
    let mut args = vec!["build".to_string()];
    args.extend(demo_with(&[&deb]));
    args.extend(["--output".to_string(), dest]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = build_fails(&args);
    assert_eq!(
        err.trim_end(),
        "error: package chgrp-stand-in 1.0: its postinst runs `chgrp no-such-group /usr/bin/chgrp-stand-in`, which would fail here: /etc/group has no `no-such-group`"
    );
    assert!(!out.exists());
}

/// `stage` made into the package `deb` by `dpkg-deb --build`, then installed twice: by
/// erdma-build over the offline demo's base into the OCI layout `dir/out` (tag `x`), and by the
/// oracle, dpkg itself, into an empty database under `dir/root`. Returns both directories.
fn built_and_installed(
    dir: &std::path::Path,
    stage: &std::path::Path,
    deb: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let o = std::process::Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(stage)
        .arg(deb)
        .output()
        .unwrap();
    support::assert_success("dpkg-deb --build", &o);

    let out = dir.join("out");
    let mut args = demo_with(&[deb]);
    args.extend(["--output".to_string(), format!("oci:{}:x", s(&out))]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    build(&args, &dir.join("cache"));

    let root = dir.join("root");
    std::fs::create_dir_all(root.join("var/lib/dpkg/info")).unwrap();
    std::fs::create_dir_all(root.join("var/lib/dpkg/updates")).unwrap();
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let o = std::process::Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(["--log=/dev/null", "--force-unsafe-io", "-i"])
        .arg(deb)
        .output()
        .unwrap();
    support::assert_success("dpkg -i", &o);
    (out, root)
}

/// A `--package` made with plain `dpkg-deb --build` (no `md5sums` member, a hard link in its
/// `data.tar`), held against the real `dpkg --root … -i` of the same file: the layer keeps the
/// link as a tar link entry (one file, two names) and gets the `md5sums` dpkg computes, byte
/// for byte, so `dpkg --audit` in the result has nothing to say about it.
#[test]
fn hard_links_stay_links_and_a_missing_md5sums_is_computed_as_dpkg_does() {
    if !support::require(support::have("dpkg-deb") && support::have("dpkg"), "dpkg is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let stage = tmp.path().join("stage");
    for d in ["DEBIAN", "usr/bin", "usr/share/linked", "etc"] {
        std::fs::create_dir_all(stage.join(d)).unwrap();
    }
    std::fs::write(
        stage.join("DEBIAN/control"),
        "Package: linked-stand-in\nVersion: 1.0\nArchitecture: all\nMaintainer: erdma-kit tests <tests@erdma-kit.invalid>\nDescription: hard links and no md5sums (TEST ONLY)\n",
    )
    .unwrap();
    std::fs::write(stage.join("DEBIAN/conffiles"), "/etc/linked.conf\n").unwrap();
    std::fs::write(stage.join("etc/linked.conf"), "key=value\n").unwrap();
    std::fs::write(stage.join("usr/bin/linked"), "#!/bin/sh\necho linked\n").unwrap();
    std::fs::write(stage.join("usr/share/linked/a"), "one file, two names\n").unwrap();
    std::fs::hard_link(stage.join("usr/share/linked/a"), stage.join("usr/share/linked/b")).unwrap();
    std::fs::write(stage.join("usr/share/linked/empty"), "").unwrap();
    let deb = tmp.path().join("linked.deb");
    let (out, root) = built_and_installed(tmp.path(), &stage, &deb);
    let want =
        std::fs::read_to_string(root.join("var/lib/dpkg/info/linked-stand-in.md5sums")).unwrap();
    assert!(want.contains("usr/share/linked/b\n") && want.contains("etc/linked.conf\n"), "{want}");

    let img = support::fixture::read_fixture(&out, "x");
    let blob = std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap();
    assert_eq!(
        layer_file(&blob, "var/lib/dpkg/info/linked-stand-in.md5sums").expect("md5sums"),
        want
    );
    // One file under two names: the first name carries the bytes, the other links to it.
    let r = flate2::read::MultiGzDecoder::new(blob.as_slice());
    let mut seen = Vec::new();
    for e in tar::Archive::new(r).entries().unwrap() {
        let e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().into_owned();
        if path.starts_with("usr/share/linked/") && !e.header().entry_type().is_dir() {
            let link = e.link_name().unwrap().map(|l| l.display().to_string());
            seen.push((path, e.header().entry_type().is_hard_link(), link, e.size()));
        }
    }
    assert_eq!(
        seen,
        [
            ("usr/share/linked/a".to_string(), false, None, 20),
            ("usr/share/linked/b".to_string(), true, Some("usr/share/linked/a".to_string()), 0),
            ("usr/share/linked/empty".to_string(), false, None, 0),
        ]
    );
    let on_disk = |p: &str| std::fs::metadata(root.join(p)).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(on_disk("usr/share/linked/a").ino(), on_disk("usr/share/linked/b").ino());
}

/// The status file's `Conffiles` hashes of a package that brings its own `md5sums` (so only
/// the conffiles' MD5s are computed while unpacking), held against the real `dpkg --root … -i`
/// of the same file: a plain conffile, one that is a hard link to a file that is not a
/// conffile (held in memory) and one linked to a file of 2 MiB (spooled), each link coming
/// after its target in the payload.
#[test]
fn conffiles_hashes_are_dpkg_s_where_the_package_brings_its_md5sums() {
    if !support::require(support::have("dpkg-deb") && support::have("dpkg"), "dpkg is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let stage = tmp.path().join("stage");
    for d in ["DEBIAN", "etc/conf-linked", "usr/share/conf-linked"] {
        std::fs::create_dir_all(stage.join(d)).unwrap();
    }
    std::fs::write(
        stage.join("DEBIAN/control"),
        "Package: conf-linked-stand-in\nVersion: 1.0\nArchitecture: all\nMaintainer: erdma-kit tests <tests@erdma-kit.invalid>\nDescription: conffiles linked to other files (TEST ONLY)\n",
    )
    .unwrap();
    std::fs::write(
        stage.join("DEBIAN/conffiles"),
        "/etc/conf-linked/plain.conf\n/etc/conf-linked/small.conf\n/etc/conf-linked/large.conf\n",
    )
    .unwrap();
    std::fs::write(stage.join("etc/conf-linked/plain.conf"), "key=value\n").unwrap();
    // `a-…` sorts before the conffile's directory: the tar holds the bytes there first.
    std::fs::create_dir_all(stage.join("etc/a-data")).unwrap();
    std::fs::write(stage.join("etc/a-data/small"), "small, two names\n").unwrap();
    let large: Vec<u8> = (0..2u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(stage.join("etc/a-data/large"), &large).unwrap();
    for (from, to) in [("small", "small.conf"), ("large", "large.conf")] {
        std::fs::hard_link(
            stage.join("etc/a-data").join(from),
            stage.join("etc/conf-linked").join(to),
        )
        .unwrap();
    }
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("find etc usr -type f | sort | xargs md5sum > DEBIAN/md5sums")
        .current_dir(&stage)
        .output()
        .unwrap();
    support::assert_success("md5sum", &o);
    let deb = tmp.path().join("conf-linked.deb");
    let (out, root) = built_and_installed(tmp.path(), &stage, &deb);
    // The stanza's Conffiles field: its continuation lines after `Conffiles:`.
    let conffiles = |status: &str| -> Vec<String> {
        let stanza = status
            .split("\n\n")
            .find(|p| p.starts_with("Package: conf-linked-stand-in\n"))
            .unwrap_or_else(|| panic!("no stanza in {status}"))
            .to_string();
        stanza
            .lines()
            .skip_while(|l| *l != "Conffiles:")
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .map(str::to_string)
            .collect()
    };
    let want = conffiles(&std::fs::read_to_string(root.join("var/lib/dpkg/status")).unwrap());
    assert_eq!(want.len(), 3, "{want:?}");
    assert!(want.iter().all(|l| !l.contains("newconffile")), "{want:?}");
    let img = support::fixture::read_fixture(&out, "x");
    let blob = std::fs::read(img.blob_path(&img.layers.last().unwrap().digest)).unwrap();
    let got = conffiles(&layer_file(&blob, "var/lib/dpkg/status").expect("status"));
    assert_eq!(got, want);
    assert_eq!(
        layer_file(&blob, "var/lib/dpkg/info/conf-linked-stand-in.md5sums").expect("md5sums"),
        std::fs::read_to_string(stage.join("DEBIAN/md5sums")).unwrap()
    );
}
