//! The release `scripts/dist` makes, used as its users use it: the host packages installed,
//! upgraded and removed by the real dpkg, apt and rpm (4.18 on an SQLite rpmdb, 4.16 on a
//! Berkeley DB one), and erdma-build's own image run by Docker against a registry that wants a
//! login.
//!
//! The release is read from `$ERDMA_DIST_DIR`, else `<target dir>/dist`; scripts/test makes it
//! there first (`scripts/dist --target x86_64-unknown-linux-musl`). Each architecture found
//! there is tested (arm64 under qemu-user); the amd64 one is required.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::text;
use crate::support::rpm_repo::{self, BaseKind};
use crate::support::{self, debian, docker_load, docker_rmi, Registry};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The version the upgrade goes to: the same files, a later version.
const NEXT: &str = "99.0.0";

struct Dist {
    dir: PathBuf,
}

/// The release, or `None` (a skip note; a failure under CI) when it was not made.
#[track_caller]
fn dist() -> Option<Dist> {
    let dir = match std::env::var_os("ERDMA_DIST_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => debian::cache_root().parent().expect("the cache is in the target dir").join("dist"),
    };
    let ok = dir.join(tarball("x86_64-unknown-linux-musl")).is_file();
    support::require(
        ok,
        &format!(
            "no release in {} (scripts/dist --target x86_64-unknown-linux-musl --out {0})",
            dir.display()
        ),
    )
    .then_some(Dist { dir })
}

fn tarball(target: &str) -> String {
    format!("erdma-kit-{VERSION}-{target}.tar.gz")
}

/// Package architectures: (target, Debian's, rpm's, OCI's).
const ARCHES: [(&str, &str, &str, &str); 2] = [
    ("x86_64-unknown-linux-musl", "amd64", "x86_64", "amd64"),
    ("aarch64-unknown-linux-musl", "arm64", "aarch64", "arm64"),
];

impl Dist {
    /// The architectures this release has (amd64 always).
    fn arches(&self) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
        ARCHES.into_iter().filter(|a| self.dir.join(tarball(a.0)).is_file()).collect()
    }

    fn deb(&self, deb_arch: &str) -> PathBuf {
        self.dir.join(format!("erdma-oci-hook_{VERSION}_{deb_arch}.deb"))
    }

    fn rpm(&self, rpm_arch: &str) -> PathBuf {
        self.dir.join(format!("erdma-oci-hook-{VERSION}-1.{rpm_arch}.rpm"))
    }

    /// The programs of the tarball for `target`, unpacked into `dir`.
    fn bin_dir(&self, target: &str, dir: &Path) -> PathBuf {
        let out = Command::new("tar")
            .arg("-xzf")
            .arg(self.dir.join(tarball(target)))
            .arg("-C")
            .arg(dir)
            .output()
            .unwrap();
        support::assert_success("tar -x", &out);
        dir.join(format!("erdma-kit-{VERSION}-{target}/bin"))
    }

    /// The packages of [`NEXT`] made by scripts/host-packages from this release's programs,
    /// in `dir`: (deb, rpm).
    fn next_packages(&self, target: &str, dir: &Path) -> (PathBuf, PathBuf) {
        let bin = self.bin_dir(target, dir);
        let out = Command::new(format!("{}/../scripts/host-packages", env!("CARGO_MANIFEST_DIR")))
            .arg("--bin-dir")
            .arg(&bin)
            .args(["--target", target, "--version", NEXT, "--out"])
            .arg(dir.join("next"))
            .output()
            .unwrap();
        support::assert_success("scripts/host-packages", &out);
        let paths: Vec<PathBuf> = text(&out.stdout).lines().map(PathBuf::from).collect();
        assert_eq!(paths.len(), 2, "{}", text(&out.stdout));
        (paths[0].clone(), paths[1].clone())
    }
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().unwrap()
}

/// The lines of `out` between `BEGIN` and `END` markers printed by a script.
fn section(out: &str, name: &str) -> String {
    let begin = format!("=={name}==\n");
    let start = out.find(&begin).unwrap_or_else(|| panic!("no section {name} in:\n{out}"));
    // From the line after the marker to the next marker line (none between: empty).
    let rest = format!("\n{}", &out[start + begin.len()..]);
    let end = rest.find("\n==").expect("the script ends with a marker");
    rest[1.min(end)..end].to_string()
}

/// dpkg and apt in a Debian 12 container: install, the files and their conffile, `doctor`
/// from the installed path, an upgrade that keeps an edited configuration, remove, purge,
/// `apt-get install ./…`; afterwards the file system is as before but for dpkg's and apt's
/// own logs and backups.
#[test]
fn deb_installs_upgrades_and_purges_in_debian_12_root() {
    if !support::require_docker()
        || !support::require_registry()
        || !debian::require_base_for(debian::BOOKWORM, debian::AMD64)
    {
        return;
    }
    let Some(dist) = dist() else { return };
    for (target, deb_arch, _, oci_arch) in dist.arches() {
        let arch = if deb_arch == "amd64" { debian::AMD64 } else { debian::ARM64 };
        if !debian::require_base_for(debian::BOOKWORM, arch) {
            continue;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (next_deb, _) = dist.next_packages(target, tmp.path());
        let name = format!("erdma-test-hostpkg-deb-{deb_arch}-{}", std::process::id());
        docker_load(&debian::base_for(debian::BOOKWORM, arch), &name, tmp.path());
        let deb = format!("/dist/{}", dist.deb(deb_arch).file_name().unwrap().to_string_lossy());
        let next = format!("/next/{}", next_deb.file_name().unwrap().to_string_lossy());
        let script = format!(
            r#"set -e
snap() {{ find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /dist -o -path /next \) -prune -o -print | LC_ALL=C sort; }}
snap >/dev/shm/before
dpkg -i {deb} >/dev/null
echo ==status==; dpkg-query -W -f='${{Status}}|${{Version}}|${{Architecture}}|${{Depends}}|${{Pre-Depends}}\n' erdma-oci-hook
echo ==files==; dpkg -L erdma-oci-hook | LC_ALL=C sort
echo ==conffiles==; dpkg-query -W -f='${{Conffiles}}\n' erdma-oci-hook | sed 's/ [0-9a-f]*$//'
echo ==verify==; dpkg -V erdma-oci-hook; echo ok
echo ==version==; command -v erdma-oci-hook; command -v erdma-runtime; erdma-oci-hook --version; erdma-runtime --version 2>/dev/null
echo ==doctor==; erdma-oci-hook doctor --json >/dev/shm/doctor.json && echo "exit 0" || echo "exit $?"; cat /dev/shm/doctor.json
echo ==upgrade==; echo 'memlock = 8388608' >>/etc/erdma/oci-hook.toml
dpkg -i {next} >/dev/null
dpkg-query -W -f='${{Version}}\n' erdma-oci-hook; tail -n1 /etc/erdma/oci-hook.toml; ls /etc/erdma
echo ==remove==; dpkg -r erdma-oci-hook >/dev/null; ls /etc/erdma; test ! -e /usr/bin/erdma-oci-hook && echo gone
echo ==purge==; dpkg --purge erdma-oci-hook >/dev/null; test ! -e /etc/erdma && echo gone
echo ==apt==; apt-get install -y -q {deb} >/dev/null 2>&1; dpkg-query -W -f='${{Status}}\n' erdma-oci-hook; apt-get purge -y -q erdma-oci-hook >/dev/null 2>&1
echo ==left==; snap >/dev/shm/after; diff /dev/shm/before /dev/shm/after | grep '^[<>]' || true
echo ==end=="#
        );
        let dist_mount = format!("{}:/dist:ro", dist.dir.display());
        let next_mount = format!("{}:/next:ro", next_deb.parent().unwrap().display());
        let platform = format!("linux/{oci_arch}");
        let out = docker(&[
            "run",
            "--rm",
            "--network",
            "none",
            "--platform",
            &platform,
            "-v",
            &dist_mount,
            "-v",
            &next_mount,
            &name,
            "sh",
            "-c",
            &script,
        ]);
        docker_rmi(&name);
        support::assert_success("the dpkg script", &out);
        let out = text(&out.stdout);
        // Installed, with no dependency at all (static programs), for its architecture.
        assert_eq!(
            section(&out, "status"),
            format!("install ok installed|{VERSION}|{deb_arch}||"),
            "{out}"
        );
        assert_eq!(
            section(&out, "files"),
            "/.\n/etc\n/etc/erdma\n/etc/erdma/oci-hook.toml\n/usr\n/usr/bin\n\
             /usr/bin/erdma-oci-hook\n/usr/bin/erdma-runtime\n/usr/share\n/usr/share/doc\n\
             /usr/share/doc/erdma-oci-hook\n/usr/share/doc/erdma-oci-hook/README.md\n\
             /usr/share/doc/erdma-oci-hook/copyright",
            "{out}"
        );
        assert_eq!(section(&out, "conffiles"), " /etc/erdma/oci-hook.toml", "{out}");
        assert_eq!(section(&out, "verify"), "ok", "dpkg -V finds every file as packaged: {out}");
        assert_eq!(
            section(&out, "version"),
            format!(
                "/usr/bin/erdma-oci-hook\n/usr/bin/erdma-runtime\nerdma-oci-hook {VERSION} (commit \
                 {c}, {target})\nerdma-runtime {VERSION} (commit {c}, {target})",
                c = commit_of(&out)
            ),
            "{out}"
        );
        // doctor runs from the installed path and reports (no erdma driver in a container:
        // not ready, exit 1), as JSON.
        let doctor = section(&out, "doctor");
        let (exit, json) = doctor.split_once('\n').unwrap();
        assert_eq!(exit, "exit 1", "{out}");
        let report: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
        assert_eq!(report["ready"], false, "{report}");
        assert!(report["checks"].as_array().is_some_and(|c| !c.is_empty()), "{report}");
        // The edited configuration survives the upgrade, with no .dpkg-* beside it.
        assert_eq!(
            section(&out, "upgrade"),
            format!("{NEXT}\nmemlock = 8388608\noci-hook.toml"),
            "{out}"
        );
        // Remove keeps the configuration file (dpkg's rule); purge takes it and the directory.
        assert_eq!(section(&out, "remove"), "oci-hook.toml\ngone", "{out}");
        assert_eq!(section(&out, "purge"), "gone", "{out}");
        assert_eq!(section(&out, "apt"), "install ok installed", "{out}");
        let left = section(&out, "left");
        let left: BTreeSet<&str> = left.lines().map(|l| &l[2..]).collect();
        // What dpkg and apt keep of any package's life: their logs, the status backup, apt's
        // caches of the local file's index. Nothing of the package's own.
        let bookkeeping = |p: &str| {
            p == "/var/log/dpkg.log"
                || p.starts_with("/var/log/apt")
                || p == "/var/lib/dpkg/status-old"
                || p == "/var/lib/dpkg/diversions-old"
                || p.starts_with("/var/cache/apt/")
                || p.starts_with("/var/cache/debconf/")
                || p.starts_with("/var/lib/apt/")
        };
        let unexpected: Vec<&&str> = left.iter().filter(|p| !bookkeeping(p)).collect();
        assert!(unexpected.is_empty(), "left behind by install and purge: {unexpected:?}\n{out}");
    }
}

/// The commit the release's `--version` names, read from the version section.
fn commit_of(out: &str) -> String {
    let v = section(out, "version");
    let at = v.find("(commit ").expect("a commit") + 8;
    v[at..].split(',').next().unwrap().to_string()
}

/// A copy of the EL fixture root of `kind` in `dir` (cp -a keeps owners and modes).
fn el_root(kind: BaseKind, dir: &Path) -> PathBuf {
    let root = dir.join("root");
    let out = Command::new("cp")
        .arg("-a")
        .arg(rpm_repo::el_base_rootfs(kind))
        .arg(&root)
        .output()
        .unwrap();
    support::assert_success("cp -a", &out);
    root
}

/// Every path under `root`, but rpm's database.
fn tree(root: &Path) -> BTreeSet<String> {
    let out = Command::new("find").arg(root).output().unwrap();
    text(&out.stdout)
        .lines()
        .map(|l| l.strip_prefix(&root.display().to_string()).unwrap_or(l).to_string())
        .filter(|p| !p.starts_with("/var/lib/rpm"))
        .collect()
}

/// rpm into the EL fixture roots: Rocky 9's SQLite rpmdb with this machine's rpm 4.18,
/// CentOS 8's Berkeley DB one with Debian 11's rpm 4.16 (libdb 5.3, as EL8 has). Installs
/// with nothing missing, `%config(noreplace)`, `rpm -V` clean, `doctor` from the installed
/// path, an upgrade keeping an edited configuration, and an erase that leaves the tree as it
/// was.
#[test]
fn rpm_installs_upgrades_and_erases_in_el_roots() {
    if !support::require_root() || !rpm_repo::require_bases() {
        return;
    }
    let Some(dist) = dist() else { return };
    let (target, _, rpm_arch, _) = ARCHES[0];
    let tmp = tempfile::tempdir().unwrap();
    let (_, next) = dist.next_packages(target, tmp.path());
    let rpm = dist.rpm(rpm_arch);

    // What EL7's rpm 4.11 reads too: gzip payload, SHA-256 digests, only rpmlib requirements.
    let q = Command::new("rpm")
        .args(["-qp", "--qf", "%{PAYLOADCOMPRESSOR} %{FILEDIGESTALGO} %{ARCH}\\n"])
        .arg(&rpm)
        .output()
        .unwrap();
    assert_eq!(text(&q.stdout), format!("gzip 8 {rpm_arch}\n"), "{}", text(&q.stderr));
    let q = Command::new("rpm").args(["-qpR"]).arg(&rpm).output().unwrap();
    let requires = text(&q.stdout);
    assert!(requires.lines().all(|l| l.starts_with("rpmlib(")), "{requires}");
    let q = Command::new("rpm").args(["-qpc"]).arg(&rpm).output().unwrap();
    assert_eq!(text(&q.stdout), "/etc/erdma/oci-hook.toml\n");

    for kind in [BaseKind::Rocky9Sqlite, BaseKind::Centos8Bdb] {
        let dir = tempfile::tempdir().unwrap();
        let root = el_root(kind, dir.path());
        let before = tree(&root);
        let rpm_in = |args: &[&str], files: &[PathBuf]| -> Output {
            if kind.sqlite() {
                let mut c = Command::new("rpm");
                c.arg("--root").arg(&root).args(["--dbpath", "/var/lib/rpm"]);
                for a in args {
                    match a.strip_prefix('{').and_then(|i| i.strip_suffix('}')) {
                        Some(i) => c.arg(&files[i.parse::<usize>().unwrap()]),
                        None => c.arg(a),
                    };
                }
                c.env("LC_ALL", "C").stdin(Stdio::null()).output().unwrap()
            } else {
                rpm_repo::rpm416(&root, args, files)
            }
        };
        let what = format!("{kind:?}");
        support::assert_success(
            &format!("{what}: rpm -i"),
            &rpm_in(&["-i", "{0}"], std::slice::from_ref(&rpm)),
        );
        let q = rpm_in(&["-q", "--qf", "%{NAME} %{VERSION}\\n", "erdma-oci-hook"], &[]);
        assert_eq!(text(&q.stdout), format!("erdma-oci-hook {VERSION}\n"), "{what}");
        let v = rpm_in(&["-V", "erdma-oci-hook"], &[]);
        assert!(v.status.success() && v.stdout.is_empty(), "{what}: rpm -V: {}", text(&v.stdout));
        assert_eq!(
            text(&rpm_in(&["-qc", "erdma-oci-hook"], &[]).stdout),
            "/etc/erdma/oci-hook.toml\n",
            "{what}"
        );

        // doctor from the installed path, in the root (no sysfs there: not ready, exit 1).
        let d = Command::new("chroot")
            .arg(&root)
            .args(["/usr/bin/erdma-oci-hook", "doctor", "--json"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(d.status.code(), Some(1), "{what}: {}", text(&d.stderr));
        let report: Value = serde_json::from_slice(&d.stdout).unwrap();
        assert_eq!(report["ready"], false, "{report}");

        // An edited configuration survives the upgrade; rpm writes no .rpmnew (the packaged
        // file did not change).
        let conf = root.join("etc/erdma/oci-hook.toml");
        let edited = format!("{}memlock = 8388608\n", std::fs::read_to_string(&conf).unwrap());
        std::fs::write(&conf, &edited).unwrap();
        support::assert_success(
            &format!("{what}: rpm -U"),
            &rpm_in(&["-U", "{0}"], std::slice::from_ref(&next)),
        );
        let q = rpm_in(&["-q", "--qf", "%{VERSION}\\n", "erdma-oci-hook"], &[]);
        assert_eq!(text(&q.stdout), format!("{NEXT}\n"), "{what}");
        assert_eq!(std::fs::read_to_string(&conf).unwrap(), edited, "{what}");
        assert!(!root.join("etc/erdma/oci-hook.toml.rpmnew").exists(), "{what}");

        // Erased: the edited file is kept as .rpmsave (rpm's rule for %config); taken away,
        // the tree is as it was.
        support::assert_success(
            &format!("{what}: rpm -e"),
            &rpm_in(&["-e", "erdma-oci-hook"], &[]),
        );
        let saved = root.join("etc/erdma/oci-hook.toml.rpmsave");
        assert_eq!(std::fs::read_to_string(&saved).unwrap(), edited, "{what}");
        std::fs::remove_file(&saved).unwrap();
        std::fs::remove_dir(root.join("etc/erdma")).unwrap();
        let after = tree(&root);
        assert_eq!(
            after.symmetric_difference(&before).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "{what}"
        );
        // Unedited, an erase leaves nothing at all.
        support::assert_success(
            &format!("{what}: rpm -i"),
            &rpm_in(&["-i", "{0}"], std::slice::from_ref(&rpm)),
        );
        support::assert_success(
            &format!("{what}: rpm -e"),
            &rpm_in(&["-e", "erdma-oci-hook"], &[]),
        );
        assert_eq!(tree(&root), before, "{what}");
    }
}

/// erdma-build's own image: one index, a platform per architecture; it runs as 65532 with
/// nothing but its program, CA certificates and its user, and builds the demo base from a
/// registry that wants a login into the same registry, with the Docker config mounted as a
/// user mounts it.
#[test]
fn own_image_builds_with_a_mounted_docker_config() {
    if !support::require_docker() || !support::require_registry() {
        return;
    }
    let Some(dist) = dist() else { return };
    let layout = format!("oci:{}:{VERSION}", dist.dir.join("erdma-build-image").display());
    let (user, password) = ("ci", "s3cret-pass");
    let reg = Registry::start_with_auth(user, password);
    let creds = format!("{user}:{password}");
    let push = |from: &str, to: &str| {
        support::assert_success(
            &format!("skopeo copy {from}"),
            &support::skopeo([
                "copy",
                "--all",
                "--dest-tls-verify=false",
                "--dest-creds",
                &creds,
                from,
                &reg.reference(to),
            ]),
        );
    };
    push(&layout, &format!("erdma-build:{VERSION}"));
    push(&format!("oci:{}:latest", support::testdata("images/debian12-mini")), "demo:base");

    // The index: one entry per architecture released.
    let raw = support::skopeo([
        "inspect",
        "--raw",
        "--tls-verify=false",
        "--creds",
        &creds,
        &reg.reference(&format!("erdma-build:{VERSION}")),
    ]);
    support::assert_success("skopeo inspect --raw", &raw);
    let index: Value = serde_json::from_slice(&raw.stdout).unwrap();
    let platforms = super::index_platforms(&index);
    let want: BTreeSet<String> = dist.arches().iter().map(|a| format!("linux/{}", a.3)).collect();
    assert_eq!(platforms.iter().cloned().collect::<BTreeSet<_>>(), want, "{index}");
    assert_eq!(platforms.len(), want.len(), "{index}");

    // A Docker config as `docker login` writes it, readable by the image's user.
    let tmp = tempfile::tempdir().unwrap();
    let docker_dir = tmp.path().join("docker");
    std::fs::create_dir(&docker_dir).unwrap();
    let auth = base64_encode(creds.as_bytes());
    std::fs::write(
        docker_dir.join("config.json"),
        serde_json::json!({"auths": {reg.addr(): {"auth": auth}}}).to_string(),
    )
    .unwrap();
    set_mode(tmp.path(), 0o755);
    set_mode(&docker_dir, 0o755);
    set_mode(&docker_dir.join("config.json"), 0o644);
    let docker_as = |args: &[&str]| -> Output {
        Command::new("docker")
            .env("DOCKER_CONFIG", &docker_dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let image = format!("{}/erdma-build:{VERSION}", reg.addr());
    let demo = support::testdata("repos/debian-demo");
    for (target, _, _, oci_arch) in dist.arches() {
        let platform = format!("linux/{oci_arch}");
        if oci_arch == "arm64" && !debian::ARM64.runs_here() {
            support::require(false, "qemu-user for arm64 (scripts/setup)");
            continue;
        }
        support::assert_success(
            "docker pull",
            &docker_as(&["pull", "-q", "--platform", &platform, &image]),
        );
        let inspect = docker_as(&[
            "image",
            "inspect",
            "--format",
            "{{.Config.User}} {{json .Config.Entrypoint}} {{.Architecture}}",
            &image,
        ]);
        assert_eq!(
            text(&inspect.stdout).trim(),
            format!("65532:65532 [\"/usr/bin/erdma-build\"] {oci_arch}")
        );
        let v = docker_as(&["run", "--rm", "--platform", &platform, &image, "--version"]);
        support::assert_success("erdma-build --version in its image", &v);
        assert!(
            text(&v.stdout).starts_with(&format!("erdma-build {VERSION} (commit "))
                && text(&v.stdout).trim_end().ends_with(&format!(", {target})")),
            "{}",
            text(&v.stdout)
        );
        // A build as a CI job runs it: the config mounted read-only, the registry over
        // loopback (host network), the demo mirror mounted.
        let out_tag = format!("demo:erdma-{oci_arch}");
        let run = docker_as(&[
            "run",
            "--rm",
            "--platform",
            &platform,
            "--network",
            "host",
            "-v",
            &format!("{}:/home/erdma/.docker:ro", docker_dir.display()),
            "-v",
            &format!("{demo}:/demo:ro"),
            &image,
            "build",
            "--quiet",
            "--json",
            "--base",
            &reg.reference("demo:base"),
            "--output",
            &reg.reference(&out_tag),
            "--mirror",
            "file:///demo",
            "--keyring",
            "/demo/demo-key.asc",
        ]);
        support::assert_success(&format!("erdma-build build in its image ({platform})"), &run);
        let report: Value = serde_json::from_slice(&run.stdout).unwrap();
        let pushed = support::skopeo([
            "inspect",
            "--raw",
            "--tls-verify=false",
            "--creds",
            &creds,
            &reg.reference(&out_tag),
        ]);
        support::assert_success("skopeo inspect the result", &pushed);
        assert_eq!(report["digest"].as_str(), Some(sha256(&pushed.stdout).as_str()));
        docker_rmi(&image);
    }
}

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}
