//! Installing eRDMA user space from real, signed apt repositories into real Debian 12 images,
//! checked with dpkg and apt inside a real Docker engine.
use std::path::{Path, PathBuf};
use std::process::Command;

use super::multiplatform::IndexKind;
use super::registry::Form;
use super::{build_cached as build, build_env, build_fails, snapshot};
use crate::support::apt_repo::{AptRepo, Layout, TestKey};
use crate::support::{self, debian, debs, testdata};

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A recipe that installs `install` from one repository at `url`, Alibaba-style.
fn repo_recipe(
    dir: &Path,
    url: &str,
    suite: &str,
    components: &[&str],
    install: &[&str],
) -> PathBuf {
    let comps: Vec<String> = components.iter().map(|c| format!("\"{c}\"")).collect();
    let pkgs: Vec<String> = install.iter().map(|c| format!("\"{c}\"")).collect();
    super::write_debian12_recipe(
        dir,
        "repo-recipe.toml",
        "Debian 12 (test repository)",
        &format!(
            r#"[[repository]]
name = "erdma"
urls = ["{url}"]
suite = "{suite}"
components = [{comps}]

[packages]
install = [{pkgs}]
remove = ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"]
remove_files = ["/etc/apt/sources.list.d/mellanox_mlnx_ofed.list"]

[env]
NCCL_IB_HCA = "erdma"
"#,
            comps = comps.join(", "),
            pkgs = pkgs.join(", ")
        ),
    )
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

/// Loads a docker-archive and returns its name; removed again by [`Loaded`]'s drop.
struct Loaded(String);
impl Loaded {
    fn new(archive: &Path, name: &str) -> Loaded {
        let out = docker(&["load", "-i", &s(archive)]);
        support::assert_success("docker load", &out);
        Loaded(name.to_string())
    }
    fn run(&self, script: &str) -> std::process::Output {
        docker(&["run", "--rm", "--network", "none", &self.0, "bash", "-c", script])
    }
}
impl Drop for Loaded {
    fn drop(&mut self) {
        support::docker_rmi(&self.0);
    }
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn debian12_from_its_own_archive_passes_dpkg_and_apt_in_docker() {
    if !support::require_docker() || !debian::require_base() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = debian::debian12_base();
    let archive = tmp.path().join("out.tar");
    let name = format!("erdma-test/deb12-erdma:{}", std::process::id());
    let r = build(
        &[
            "--base",
            &base.reference(),
            "--output",
            &format!("docker-archive:{}:{name}", s(&archive)),
        ],
        &tmp.path().join("cache"),
    );
    let pk = &r["images"][0]["packages"];
    let names: Vec<&str> =
        pk["install"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for want in ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"] {
        assert!(names.contains(&want), "{names:?}");
    }
    assert!(
        pk["install"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["origin"] == "Debian" && p["action"] == "install"),
        "{pk}"
    );
    assert!(pk["downloaded_bytes"].as_u64().unwrap() > 100_000);

    let img = Loaded::new(&archive, &name);
    let out = img.run(
        "set -e
         dpkg -s libibverbs1 ibverbs-providers librdmacm1 | grep -c '^Status: install ok installed$'
         echo AUDIT; dpkg --audit; echo END
         apt-get check -q >/dev/null && echo CHECK-OK
         dpkg --verify libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 libnl-3-200 libnl-route-3-200 && echo VERIFY-OK
         test -f /etc/libibverbs.d/erdma.driver && echo DRIVER-OK
         test -f /usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so && echo PROVIDER-OK
         ibv_devices 2>&1 || echo \"ibv_devices exit $?\"
         getent group rdma
         dpkg -S /usr/bin/ibv_devices
         test -L /lib && echo MERGED-USR-OK",
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("3\n"), "three packages installed: {text}");
    assert!(text.contains("AUDIT\nEND\n"), "dpkg --audit is empty: {text}");
    for ok in [
        "CHECK-OK",
        "VERIFY-OK",
        "DRIVER-OK",
        "PROVIDER-OK",
        "MERGED-USR-OK",
        "ibverbs-utils: /usr/bin/ibv_devices",
        "rdma:x:",
    ] {
        assert!(text.contains(ok), "missing {ok} in\n{text}");
    }
    // No RDMA device here: the tool runs, loads libibverbs, and says it found none.
    assert!(
        text.contains("Failed to get IB devices list")
            && !text.contains("error while loading shared libraries"),
        "{text}"
    );

    // A Dockerfile FROM the result keeps using apt.
    super::apt_get_works_on_top(tmp.path(), &name);
}

/// A work directory, a repository signing key, and its public half written there.
fn signing_setup() -> (tempfile::TempDir, TestKey, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let key = TestKey::generate();
    let keyfile = key.write_public(tmp.path(), "repo.asc");
    (tmp, key, keyfile)
}

/// The eRDMA packages and their libnl dependencies, in a signed repository of ours.
fn erdma_repo(layout: Layout, key: &TestKey) -> AptRepo {
    AptRepo::build_under("erdma/apt/debian", layout, &debs::real_debs_closure(), key)
}

#[test]
fn alibaba_style_nested_and_flat_repositories() {
    if !debian::require_base() || !debs::require_download() {
        return;
    }
    let (tmp, key, keyfile) = signing_setup();
    let base = debian::debian12_base();
    let cache = tmp.path().join("cache");
    for (layout, suite, comps) in
        [(Layout::erdma(), "bookworm/erdma", vec!["main"]), (Layout::Flat, "./", vec![])]
    {
        let repo = erdma_repo(layout, &key);
        let recipe = repo_recipe(tmp.path(), &repo.url(), suite, &comps, &debs::ERDMA_PACKAGES);
        let out = tmp.path().join(format!("out-{}", repo.port()));
        let r = build(
            &[
                "--base",
                &base.reference(),
                "--output",
                &format!("oci:{}:x", s(&out)),
                "--recipe",
                &s(&recipe),
                "--keyring",
                &s(&keyfile),
            ],
            &cache,
        );
        let pk = &r["images"][0]["packages"];
        assert_eq!(pk["repositories"]["erdma"], repo.url().as_str(), "{pk}");
        assert_eq!(pk["install"].as_array().unwrap().len(), 6, "the four and libnl's two: {pk}");
        assert!(
            pk["install"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["origin"] == crate::support::apt_repo::ORIGIN),
            "{pk}"
        );
        let files: Vec<&str> = r["images"][0]["files_added"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            files.contains(&"/etc/apt/sources.list.d/erdma.list")
                && files.contains(&"/etc/apt/trusted.gpg.d/erdma.gpg")
        );
        assert!(
            files.contains(&"/usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so"),
            "{files:?}"
        );
        // The .debs came through our repository once; later builds use the cache.
        let debs_fetched = repo.get_paths().iter().filter(|p| p.ends_with(".deb")).count();
        assert!(debs_fetched <= 6, "{:?}", repo.get_paths());
    }
    // A second build downloads no package.
    let repo = erdma_repo(Layout::erdma(), &key);
    let recipe =
        repo_recipe(tmp.path(), &repo.url(), "bookworm/erdma", &["main"], &debs::ERDMA_PACKAGES);
    let r = build(
        &[
            "--base",
            &base.reference(),
            "--output",
            &format!("oci:{}:x", s(&tmp.path().join("warm"))),
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&keyfile),
        ],
        &cache,
    );
    assert_eq!(r["images"][0]["packages"]["downloaded_bytes"], 0);
    assert_eq!(r["images"][0]["packages"]["cached_debs"], 6);
    assert!(!repo.get_paths().iter().any(|p| p.ends_with(".deb")), "{:?}", repo.get_paths());
    // Nor an index: the signed InRelease is read again, and names the cached Packages.xz.
    let paths = repo.get_paths();
    assert!(
        paths.iter().any(|p| p.ends_with("InRelease"))
            && !paths.iter().any(|p| p.contains("Packages")),
        "{paths:?}"
    );

    // Beside each cached package, its decompressed payload. A cached package that no longer
    // hashes as its name says is fetched again, that one alone; a damaged kept payload is
    // ignored and the package decompressed again: the layer is the same.
    let kept = cache.join("erdma-build");
    let files = |dir: &str| {
        let mut f: Vec<PathBuf> =
            std::fs::read_dir(kept.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        f.sort();
        f
    };
    assert_eq!(files("payloads").len(), 6, "{:?}", files("payloads"));
    let flip = |path: &Path| {
        let mut bytes = std::fs::read(path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        std::fs::write(path, bytes).unwrap();
    };
    flip(&files("debs")[0]);
    flip(&files("payloads")[1]);
    // The same repository and recipe as the warm build: its URL is in the layer.
    let asked_before = repo.get_paths().len();
    let again = build(
        &[
            "--base",
            &base.reference(),
            "--output",
            &format!("oci:{}:x", s(&tmp.path().join("again"))),
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&keyfile),
        ],
        &cache,
    );
    assert_eq!(again["images"][0]["layer"]["digest"], r["images"][0]["layer"]["digest"]);
    assert_eq!(again["images"][0]["packages"]["cached_debs"], 5);
    let debs_fetched: Vec<_> =
        repo.get_paths()[asked_before..].iter().filter(|p| p.ends_with(".deb")).cloned().collect();
    assert_eq!(debs_fetched.len(), 1, "{debs_fetched:?}");

    // plan lists the packages with versions and origins and writes nothing.
    let out = build_env(
        &["plan", "--base", &base.reference(), "--recipe", &s(&recipe), "--keyring", &s(&keyfile)],
        &[("XDG_CACHE_HOME", cache.to_str().unwrap())],
    );
    support::assert_success("plan", &out);
    let text = stdout(&out);
    assert!(text.contains("package libibverbs1 44.0-2 (install; erdma-kit-test)"), "{text}");
}

#[test]
fn tampered_or_broken_repositories_fail_with_nothing_written() {
    if !debian::require_base() || !debs::require_download() {
        return;
    }
    let (tmp, key, keyfile) = signing_setup();
    let base = debian::debian12_base();
    let four = debs::ERDMA_PACKAGES;
    let out = tmp.path().join("out");
    let attempt = |repo: &AptRepo, install: &[&str], keyfile: &Path| -> String {
        let recipe = repo_recipe(tmp.path(), &repo.url(), "bookworm/erdma", &["main"], install);
        let cache = tempfile::tempdir().unwrap();
        let mut args = vec!["build", "--base", &*base.reference().leak(), "--output"];
        let o = format!("oci:{}:x", s(&out));
        args.push(&o);
        let r = s(&recipe);
        let k = s(keyfile);
        args.extend(["--recipe", &r, "--keyring", &k]);
        let out_cmd = build_env(
            &args,
            &[
                ("XDG_CACHE_HOME", cache.path().to_str().unwrap()),
                ("ERDMA_BUILD_RETRY_BACKOFF_MS", "10"),
            ],
        );
        let err = String::from_utf8_lossy(&out_cmd.stderr).into_owned();
        assert_eq!(out_cmd.status.code(), Some(1), "{err}");
        err
    };

    let repo = erdma_repo(Layout::erdma(), &key);
    repo.tamper_inrelease();
    let err = attempt(&repo, &four, &keyfile);
    assert!(err.contains("bad signature") && err.contains("InRelease"), "{err}");

    let repo = erdma_repo(Layout::erdma(), &key);
    repo.tamper_packages();
    let err = attempt(&repo, &four, &keyfile);
    assert!(err.contains("mismatch") && err.contains("Packages"), "{err}");

    let repo = erdma_repo(Layout::erdma(), &key);
    repo.tamper_deb("ibverbs-providers");
    let err = attempt(&repo, &four, &keyfile);
    assert!(err.contains("digest mismatch") && err.contains("ibverbs-providers"), "{err}");

    let repo = erdma_repo(Layout::erdma(), &key);
    let err = attempt(&repo, &["no-such-package"], &keyfile);
    assert!(err.contains("unknown package `no-such-package`"), "{err}");

    let other = TestKey::generate();
    let otherfile = other.write_public(tmp.path(), "other.asc");
    let err = attempt(&repo, &four, &otherfile);
    assert!(
        err.contains("bad signature") || err.contains("no valid signature"),
        "a repository signed by another key: {err}"
    );

    let broken = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "needs-missing",
            version: "1.0",
            depends: Some("libdoes-not-exist1 (>= 2)"),
            ..Default::default()
        },
    );
    let repo = AptRepo::build_under("erdma/apt/debian", Layout::erdma(), &[broken], &key);
    let err = attempt(&repo, &["needs-missing"], &keyfile);
    assert!(
        err.contains("cannot satisfy `libdoes-not-exist1 (>= 2)` of needs-missing 1.0"),
        "{err}"
    );

    assert!(!out.exists(), "no output after any failure");
    let leftovers: Vec<_> =
        snapshot(tmp.path()).into_keys().filter(|k| k.contains(".erdma-build")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn ngc_like_base_loses_mellanox_ofed() {
    if !support::require_docker() || !debs::require_ngc_like() {
        return;
    }
    let (tmp, key, keyfile) = signing_setup();
    let base = debs::ngc_like_base(&tmp.path().join("ngc"));
    let repo = erdma_repo(Layout::erdma(), &key);
    let recipe =
        repo_recipe(tmp.path(), &repo.url(), "bookworm/erdma", &["main"], &debs::ERDMA_PACKAGES);
    let archive = tmp.path().join("out.tar");
    let name = format!("erdma-test/ngc-erdma:{}", std::process::id());
    let r = build(
        &[
            "--base",
            &base.reference(),
            "--output",
            &format!("docker-archive:{}:{name}", s(&archive)),
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&keyfile),
        ],
        &tmp.path().join("cache"),
    );
    let pk = &r["images"][0]["packages"];
    for p in ["libibverbs1", "ibverbs-providers"] {
        let c = pk["install"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == p)
            .unwrap_or_else(|| panic!("{p} in {pk}"));
        assert_eq!(c["action"], "replace", "{c}");
        assert_eq!(c["from"], debs::OFED_VERSION);
    }
    let removed: Vec<&str> = r["images"][0]["files_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(removed.contains(&"/etc/apt/sources.list.d/mellanox_mlnx_ofed.list"), "{removed:?}");

    // Every file the OFED builds had, unless the new packages own it, is gone.
    let mut ofed_files = Vec::new();
    for deb in debs::ofed_fake_debs(&tmp.path().join("ofed")) {
        let out = Command::new("dpkg-deb").arg("--fsys-tarfile").arg(&deb).output().unwrap();
        for e in tar::Archive::new(out.stdout.as_slice()).entries().unwrap() {
            let e = e.unwrap();
            if !e.header().entry_type().is_dir() {
                ofed_files.push(format!(
                    "/{}",
                    e.path().unwrap().to_string_lossy().trim_start_matches("./")
                ));
            }
        }
    }
    assert!(!ofed_files.is_empty());
    let img = Loaded::new(&archive, &name);
    let script = format!(
        "for f in {}; do if [ -e \"$f\" ] || [ -L \"$f\" ]; then dpkg -S \"$f\" >/dev/null 2>&1 && echo \"owned $f\" || echo \"LEFT $f\"; fi; done
         dpkg-query -W -f='${{Package}} ${{Version}}\\n' libibverbs1 ibverbs-providers
         echo AUDIT; dpkg --audit; echo END
         test -e /etc/apt/sources.list.d/mellanox_mlnx_ofed.list && echo MLNX-LEFT || echo MLNX-GONE",
        ofed_files.join(" ")
    );
    let out = img.run(&script);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("LEFT "), "OFED files left that nothing owns:\n{text}");
    assert!(
        text.contains("libibverbs1 44.0-2\n") && text.contains("ibverbs-providers 44.0-2\n"),
        "dpkg lists only the new versions:\n{text}"
    );
    assert!(!text.contains(debs::OFED_VERSION), "{text}");
    assert!(text.contains("AUDIT\nEND\n") && text.contains("MLNX-GONE"), "{text}");
}

#[test]
fn the_offline_demo_installs_from_testdata() {
    let tmp = tempfile::tempdir().unwrap();
    let r = build(
        &[
            "--base",
            &format!("oci:{}:latest", testdata("images/debian12-mini")),
            "--mirror",
            &format!("file://{}", testdata("repos/debian-demo")),
            "--keyring",
            &testdata("repos/debian-demo/demo-key.asc"),
            "--output",
            &format!("oci:{}:demo", s(&tmp.path().join("out"))),
        ],
        &tmp.path().join("cache"),
    );
    let pk = &r["images"][0]["packages"];
    let got: Vec<String> = pk["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} {}", p["name"].as_str().unwrap(), p["version"].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            "ibverbs-providers 44.0-2",
            "ibverbs-utils 44.0-2",
            "libibverbs1 44.0-2",
            "libnl-3-200 3.7.0-0.2+b1",
            "libnl-route-3-200 3.7.0-0.2+b1",
            "librdmacm1 44.0-2"
        ]
    );
    assert!(pk["install"].as_array().unwrap().iter().all(|p| p["origin"] == "erdma-kit-demo"));
    let files: Vec<&str> = r["images"][0]["files_added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for f in [
        "/etc/libibverbs.d/erdma.driver",
        "/var/lib/dpkg/info/libibverbs1:amd64.list",
        "/var/lib/dpkg/info/libibverbs1:amd64.md5sums",
        "/var/lib/dpkg/status",
        "/etc/group",
        "/etc/gshadow",
    ] {
        assert!(files.contains(&f), "{f} not in {files:?}");
    }
    // libnl ships /lib/...: it lands under /usr/lib, leaving the base's lib -> usr/lib alone.
    assert!(files.contains(&"/usr/lib/x86_64-linux-gnu/libnl-3.so.200.26.0"), "{files:?}");
    assert!(!files.iter().any(|f| f.starts_with("/lib/")), "{files:?}");
}

/// The offline demo's arguments: its archive and key, `--output oci:DIR:demo`, and `extra`.
fn demo_build(base: &str, out: &Path, extra: &[&str], cache: &Path) -> serde_json::Value {
    let mirror = format!("file://{}", testdata("repos/debian-demo"));
    let key = testdata("repos/debian-demo/demo-key.asc");
    let output = format!("oci:{}:demo", s(out));
    let mut args =
        vec!["--base", base, "--mirror", &mirror, "--keyring", &key, "--output", &output];
    args.extend_from_slice(extra);
    build(&args, cache)
}

/// The Env of the image `oci:DIR:demo`, as `NAME=VALUE` strings.
fn demo_env(out: &Path) -> Vec<String> {
    support::fixture::env_of(&support::fixture::read_fixture(out, "demo"))
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

const UNIVERSAL: [&str; 5] = [
    "NCCL_DEBUG=INFO",
    "NCCL_IB_QPS_PER_CONNECTION=8",
    "NCCL_MIN_NCHANNELS=16",
    "NCCL_NET_PLUGIN=none",
    "PYTHONUNBUFFERED=1",
];
const HOST_SPECIFIC: [&str; 3] = ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"];

#[test]
fn env_presets_carry_no_host_data_unless_the_pai_dlc_profile_asks() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let mini = format!("oci:{}:latest", testdata("images/debian12-mini"));

    // By default: the five that hold on every eRDMA host, none of the host-specific three.
    let r = demo_build(&mini, &tmp.path().join("plain"), &[], &cache);
    assert_eq!(r["profile"], serde_json::Value::Null, "{r:#}");
    let env = demo_env(&tmp.path().join("plain"));
    for want in UNIVERSAL {
        assert!(env.iter().any(|e| e == want), "{want} not in {env:?}");
    }
    for host in HOST_SPECIFIC {
        assert!(
            !env.iter().any(|e| e.starts_with(&format!("{host}="))),
            "{host} baked in: {env:?}"
        );
    }
    assert!(
        r["images"][0]["env"].as_array().unwrap().iter().all(|e| e["source"] == "preset"),
        "{r:#}"
    );

    // With --profile pai-dlc: all eight, PAI-DLC's three marked as the profile's.
    let r = demo_build(&mini, &tmp.path().join("pai"), &["--profile", "pai-dlc"], &cache);
    assert_eq!(r["profile"], "pai-dlc");
    let env = demo_env(&tmp.path().join("pai"));
    for want in UNIVERSAL.into_iter().chain([
        "NCCL_SOCKET_IFNAME=eth0",
        "NCCL_IB_HCA=erdma",
        "NCCL_IB_GID_INDEX=1",
    ]) {
        assert!(env.iter().any(|e| e == want), "{want} not in {env:?}");
    }
    let changes = r["images"][0]["env"].as_array().unwrap();
    assert_eq!(changes.len(), 8, "{changes:?}");
    for host in HOST_SPECIFIC {
        assert!(
            changes.iter().any(|e| e["name"] == host && e["source"] == "profile"),
            "{host}: {changes:?}"
        );
    }

    // The plan says the same, in words too.
    let out = support::run_build([
        "plan",
        "--no-packages",
        "--base",
        &mini,
        "--mirror",
        &format!("file://{}", testdata("repos/debian-demo")),
        "--keyring",
        &testdata("repos/debian-demo/demo-key.asc"),
        "--profile",
        "pai-dlc",
    ]);
    support::assert_success("plan --profile pai-dlc", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("profile pai-dlc: its hosts' NCCL settings are baked in")
            && text.contains("  env NCCL_SOCKET_IFNAME=eth0 (profile pai-dlc)\n")
            && text.contains("  env NCCL_DEBUG=INFO\n"),
        "{text}"
    );

    // --no-env-presets adds none, and cannot be asked for together with the profile.
    demo_build(&mini, &tmp.path().join("none"), &["--no-env-presets"], &cache);
    let env = demo_env(&tmp.path().join("none"));
    assert_eq!(env, ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]);
    let out =
        support::run_build(["plan", "--base", &mini, "--profile", "pai-dlc", "--no-env-presets"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_base_that_sets_a_host_specific_variable_keeps_its_value() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let base = crate::support::nccl::extend(
        &super::nccl::mini(),
        &tmp.path().join("base"),
        "latest",
        &crate::support::nccl::Extras {
            env: vec![("NCCL_SOCKET_IFNAME", "bond0"), ("NCCL_DEBUG", "WARN")],
            ..Default::default()
        },
    );
    let r = demo_build(
        &base.reference(),
        &tmp.path().join("pai"),
        &["--profile", "pai-dlc", "-e", "NCCL_IB_HCA==erdma_0"],
        &cache,
    );
    let env = demo_env(&tmp.path().join("pai"));
    for want in [
        "NCCL_SOCKET_IFNAME=bond0",
        "NCCL_DEBUG=WARN",
        "NCCL_IB_HCA==erdma_0",
        "NCCL_IB_GID_INDEX=1",
        "PYTHONUNBUFFERED=1",
    ] {
        assert!(env.iter().any(|e| e == want), "{want} not in {env:?}");
    }
    assert_eq!(
        env.iter()
            .filter(|e| e.starts_with("NCCL_SOCKET_IFNAME=") || e.starts_with("NCCL_IB_HCA="))
            .count(),
        2,
        "{env:?}"
    );
    let changes = r["images"][0]["env"].as_array().unwrap();
    assert!(
        !changes.iter().any(|e| e["name"] == "NCCL_SOCKET_IFNAME" || e["name"] == "NCCL_DEBUG"),
        "the base's values are left alone: {changes:?}"
    );
    assert!(
        changes.iter().any(|e| e["name"] == "NCCL_IB_HCA" && e["source"] == "command-line"),
        "--env wins over the profile: {changes:?}"
    );
}

#[test]
fn packages_without_the_erdma_provider_are_refused() {
    if !support::require(
        support::have("dpkg-deb") && support::have("apt-ftparchive") && support::have("gpg"),
        "dpkg-deb, apt-ftparchive and gpg are needed",
    ) {
        return;
    }
    let (tmp, key, keyfile) = signing_setup();
    // Ubuntu 22.04's rdma-core 39: providers, but no erdma.
    let old = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "ibverbs-providers",
            version: "39.0-1",
            multi_arch: Some("same"),
            files: vec![("/etc/libibverbs.d/mlx5.driver", b"driver mlx5\n", 0o644)],
            ..Default::default()
        },
    );
    let repo = AptRepo::build_under("erdma/apt/debian", Layout::erdma(), &[old], &key);
    let recipe =
        repo_recipe(tmp.path(), &repo.url(), "bookworm/erdma", &["main"], &["ibverbs-providers"]);
    let out = tmp.path().join("out");
    let err = build_fails(&[
        "build",
        "--base",
        &format!("oci:{}:latest", testdata("images/debian12-mini")),
        "--recipe",
        &s(&recipe),
        "--keyring",
        &s(&keyfile),
        "--output",
        &format!("oci:{}", s(&out)),
    ]);
    assert!(
        err.contains("rdma-core 39.0-1 (ibverbs-providers from ")
            && err.contains("has no erdma provider"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn a_rebuild_on_the_same_registry_base_downloads_no_layer() {
    rebuild_downloads_no_layer(Form::Manifest);
}

#[test]
fn a_rebuild_on_the_same_registry_base_downloads_no_layer_index_base() {
    rebuild_downloads_no_layer(Form::Index(IndexKind::OciIndex));
}

fn rebuild_downloads_no_layer(form: Form) {
    if !support::require_registry()
        || !debian::require_base()
        || !debs::require_download()
        || !form.available()
    {
        return;
    }
    let (tmp, key, keyfile) = signing_setup();
    let base = debian::debian12_base();
    let reg = support::Registry::start();
    super::registry::push_as(form, &base, &reg, "deb12:1", tmp.path());
    let repo = erdma_repo(Layout::erdma(), &key);
    let recipe =
        repo_recipe(tmp.path(), &repo.url(), "bookworm/erdma", &["main"], &debs::ERDMA_PACKAGES);
    let cache = tmp.path().join("cache");
    let layer = &base.layers[0].digest;
    for (run, want_gets) in [(1, 1), (2, 0)] {
        let before = reg.count_blob_gets(layer);
        let r = build(
            &[
                "--base",
                &reg.reference("deb12:1"),
                "--output",
                &reg.reference(&format!("out:{run}")),
                "--recipe",
                &s(&recipe),
                "--keyring",
                &s(&keyfile),
            ],
            &cache,
        );
        assert_eq!(reg.count_blob_gets(layer) - before, want_gets, "run {run}: base layer GETs");
        assert_eq!(
            r["images"][0]["base_layers"][0]["reuse"],
            if run == 1 { "mounted" } else { "present" }
        );
    }
}

/// `--package FILE` (a `.deb` built here, standing in for Alibaba's AIACC NCCL plugin, the ECS AI-training-cluster guide)
/// needs `--allow-unsigned-package`, gets its dependencies from the signed repository, and is
/// named in the report and an image label; `--install` adds repository packages.
#[test]
fn unsigned_and_extra_packages() {
    if !support::require(support::have("dpkg-deb"), "dpkg-deb is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let plugin = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "aiacc-nccl-plugin",
            version: "1.0.2",
            depends: Some("libibverbs1 (>= 44), librdmacm1"),
            files: vec![(
                "/usr/local/lib/libnccl-net.so",
                b"\x7fELF stand-in for the AIACC NCCL net plugin\n".as_slice(),
                0o644,
            )],
            ..Default::default()
        },
    );
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&plugin).unwrap()));
    let base = format!("oci:{}:latest", testdata("images/debian12-mini"));
    let mirror = format!("file://{}", testdata("repos/debian-demo"));
    let key = testdata("repos/debian-demo/demo-key.asc");
    let common = ["--base", base.as_str(), "--mirror", mirror.as_str(), "--keyring", key.as_str()];

    let out = tmp.path().join("refused");
    let mut args = vec!["build", "--package", plugin.to_str().unwrap(), "--output"];
    let dest = format!("oci:{}:x", s(&out));
    args.push(&dest);
    args.extend_from_slice(&common);
    let err = build_fails(&args);
    assert!(
        err.contains("not signed by any repository") && err.contains("--allow-unsigned-package"),
        "{err}"
    );
    assert!(!out.exists());

    let out = tmp.path().join("out");
    let dest = format!("oci:{}:x", s(&out));
    let mut args =
        vec!["--package", plugin.to_str().unwrap(), "--allow-unsigned-package", "--output", &dest];
    args.extend_from_slice(&common);
    let r = build(&args, &tmp.path().join("cache"));
    let pk = &r["images"][0]["packages"];
    assert_eq!(pk["unsigned"][0]["name"], "aiacc-nccl-plugin", "{pk}");
    assert_eq!(pk["unsigned"][0]["sha256"], sha.as_str());
    let plug = pk["install"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "aiacc-nccl-plugin")
        .unwrap_or_else(|| panic!("{pk}"));
    assert_eq!(plug["version"], "1.0.2");
    assert!(plug["origin"].as_str().unwrap().starts_with("unsigned "), "{plug}");
    let img = support::fixture::read_fixture(&out, "x");
    let label = img.config()["config"]["Labels"]["com.alibabacloud.erdma.unsigned-packages"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(label.starts_with(&format!("aiacc-nccl-plugin=1.0.2 sha256:{sha} (")), "{label}");
    let files: Vec<&str> = r["images"][0]["files_added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        files.contains(&"/usr/local/lib/libnccl-net.so")
            && files.contains(&"/var/lib/dpkg/info/aiacc-nccl-plugin.list"),
        "{files:?}"
    );

    // The same file from a URL (the ECS AI-training-cluster guide downloads the plugin with wget).
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::copy(&plugin, www.join("aiacc-nccl-plugin-1.0.2.deb")).unwrap();
    let served = crate::support::apt_repo::Served::start(&www);
    let url = served.url("aiacc-nccl-plugin-1.0.2.deb");
    let dest = format!("oci:{}:u", s(&tmp.path().join("from-url")));
    let mut args = vec!["--package", url.as_str(), "--allow-unsigned-package", "--output", &dest];
    args.extend_from_slice(&common);
    let r = build(&args, &tmp.path().join("cache"));
    assert_eq!(r["images"][0]["packages"]["unsigned"][0]["sha256"], sha.as_str());
    assert_eq!(r["images"][0]["packages"]["unsigned"][0]["source"], url.as_str());

    // --install: only what is asked, with what it needs, when the recipe's packages are off.
    let dest = format!("oci:{}:y", s(&tmp.path().join("extra")));
    let mut args = vec!["--no-packages", "--install", "libibverbs1", "--output", &dest];
    args.extend_from_slice(&common);
    let r = build(&args, &tmp.path().join("cache"));
    let got: Vec<&str> = r["images"][0]["packages"]["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["libibverbs1", "libnl-3-200", "libnl-route-3-200"]);
    let dest = format!("oci:{}:z", s(&tmp.path().join("unknown")));
    let mut args = vec!["build", "--install", "no-such-package", "--output", &dest];
    args.extend_from_slice(&common);
    let err = build_fails(&args);
    assert!(err.contains("unknown package `no-such-package`"), "{err}");
}
