//! Product tests: `erdma-build` run as a user runs it, against real registries, skopeo and docker.
mod architecture;
mod auth;
mod check;
mod errors;
mod hostile;
mod keys;
mod memory;
mod multiplatform;
mod nccl;
mod packages;
mod path_safety;
mod registries_conf;
mod registry;
mod release;
mod releases;
mod reports;
mod rpm;
mod rpm_fixtures;
mod sandbox;
mod scripts;
mod tls;
mod transfers;
mod transports;
mod ubuntu;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::support;

/// `os/architecture` of each entry of an image index, in its order.
pub fn index_platforms(index: &Value) -> Vec<String> {
    index["manifests"]
        .as_array()
        .expect("an index has manifests")
        .iter()
        .map(|m| {
            let p = &m["platform"];
            format!("{}/{}", p["os"].as_str().unwrap(), p["architecture"].as_str().unwrap())
        })
        .collect()
}

/// A process's output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `--recipe FILE --keyring FILE` of [`test_recipe`] written into `dir`: for bases such as
/// [`runnable_base`] that list no apt source of their own.
pub fn test_recipe_args(dir: &Path) -> Vec<String> {
    let (recipe, key) = test_recipe(dir, None);
    vec![
        "--recipe".into(),
        recipe.display().to_string(),
        "--keyring".into(),
        key.display().to_string(),
    ]
}

/// Runs `erdma-build ARGS --json`, asserts success and returns the parsed report.
#[track_caller]
pub fn build_json(args: &[&str]) -> Value {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    let out = support::run_build(&all);
    support::assert_success("erdma-build", &out);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("report is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
    })
}

/// Runs `erdma-build build --json ARGS` with its own package cache `cache`, asserts success
/// and returns the report.
#[track_caller]
/// `build --json --base BASE --no-packages --no-env-presets --package DEB
/// --allow-unsigned-package --output oci:OUT:x` with its package cache in `cache`: one unsigned
/// `.deb` on a base and nothing else.
pub fn build_one_deb(base: &str, deb: &Path, out: &Path, cache: &Path) -> Value {
    build_one_deb_to(base, deb, &format!("oci:{}:x", out.display()), cache)
}

/// [`build_one_deb`] into any output reference (a registry's).
pub fn build_one_deb_to(base: &str, deb: &Path, dest: &str, cache: &Path) -> Value {
    build_one_deb_env(base, deb, dest, cache, &[]).0
}

/// [`build_one_deb_to`] with more environment variables: the report and the progress output.
pub fn build_one_deb_env(
    base: &str,
    deb: &Path,
    dest: &str,
    cache: &Path,
    env: &[(&str, &str)],
) -> (Value, String) {
    build_cached_env(
        &[
            "--base",
            base,
            "--no-packages",
            "--no-env-presets",
            "--package",
            deb.to_str().unwrap(),
            "--allow-unsigned-package",
            "--output",
            dest,
        ],
        cache,
        env,
    )
}

pub fn build_cached(args: &[&str], cache: &Path) -> Value {
    build_cached_env(args, cache, &[]).0
}

/// [`build_cached`] with more environment variables: the report and the progress output.
pub fn build_cached_env(args: &[&str], cache: &Path, env: &[(&str, &str)]) -> (Value, String) {
    let mut all = vec!["build", "--json"];
    all.extend_from_slice(args);
    let mut vars =
        vec![("XDG_CACHE_HOME", cache.to_str().unwrap()), ("ERDMA_BUILD_RETRY_BACKOFF_MS", "20")];
    vars.extend_from_slice(env);
    let out = build_env(&all, &vars);
    support::assert_success("erdma-build build", &out);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("report is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
    });
    (report, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs `erdma-build ARGS` with extra environment variables.
pub fn build_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(support::bin());
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", support::test_cache())
        .stdin(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Runs `erdma-build ARGS`, asserts failure and returns stderr.
#[track_caller]
pub fn build_fails(args: &[&str]) -> String {
    let out: Output = support::run_build(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "expected failure, got success\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Retry warnings may come first; the error and its causes are the rest.
    let at = stderr.find("error: ").unwrap_or_else(|| panic!("no `error:` line: {stderr}"));
    assert_eq!(
        stderr.matches("\nerror: ").count() + usize::from(stderr.starts_with("error: ")),
        1,
        "{stderr}"
    );
    stderr[at..].to_string()
}

/// Every file under `dir` with its content, for "left untouched" assertions.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A base that runs: static busybox with a few applet links, and a Debian 12 os-release.
pub fn runnable_base(dir: &Path) -> support::OciFixture {
    let busybox =
        std::fs::read("/bin/busybox").expect("busybox-static is installed by scripts/setup");
    support::fixture_image(
        dir,
        &[vec![
            ("bin/", b"".as_slice(), 0o755),
            ("bin/busybox", busybox.as_slice(), 0o755),
            ("bin/sh", b"busybox".as_slice(), 0o120777),
            ("bin/cat", b"busybox".as_slice(), 0o120777),
            ("bin/env", b"busybox".as_slice(), 0o120777),
            ("bin/ls", b"busybox".as_slice(), 0o120777),
        ]],
        &[("PATH", "/bin"), ("NCCL_DEBUG", "WARN")],
        Some(support::DEBIAN12_OS_RELEASE),
    )
}

/// A recipe file that adds an apt source, its key and a plain file: what an eRDMA recipe for
/// Ubuntu does, with a repository we control.
pub fn test_recipe(
    dir: &Path,
    fingerprint: Option<&str>,
) -> (std::path::PathBuf, std::path::PathBuf) {
    test_recipe_with(dir, fingerprint, None)
}

/// [`test_recipe`] whose repository names a `key_url`.
pub fn test_recipe_with(
    dir: &Path,
    fingerprint: Option<&str>,
    key_url: Option<&str>,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = dir.join("test-key.asc");
    std::fs::write(&key, TEST_KEY).unwrap();
    let mut fp = fingerprint.map(|f| format!("fingerprint = \"{f}\"\n")).unwrap_or_default();
    if let Some(u) = key_url {
        fp.push_str(&format!("key_url = \"{u}\"\n"));
    }
    let recipe = write_debian12_recipe(
        dir,
        "test-recipe.toml",
        "Debian 12 (test)",
        &format!(
            r#"[[repository]]
name = "erdma"
urls = ["http://127.0.0.1:9/erdma/apt/ubuntu"]
suite = "bookworm/erdma"
components = ["main"]
{fp}
[[file]]
path = "/etc/erdma/build-info"
content = "built by erdma-build\n"

[env]
NCCL_DEBUG = "INFO"
NCCL_IB_HCA = "erdma"
"#
        ),
    );
    (recipe, key)
}

/// Writes the recipe file `dir/name` for Debian 12: the `[distro]` table (named `pretty`), then
/// `body` (repositories, packages, files, env).
pub fn write_debian12_recipe(
    dir: &Path,
    name: &str,
    pretty: &str,
    body: &str,
) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("[distro]\nid = \"debian\"\nversion_id = \"12\"\npretty = \"{pretty}\"\nbackend = \"apt\"\n\n{body}")).unwrap();
    path
}

/// A test-only OpenPGP public key (Ed25519, no secret part anywhere), fingerprint [`TEST_KEY_FP`].
pub const TEST_KEY: &str = include_str!("../../../testdata/keys/test-only-pubkey.asc");
pub const TEST_KEY_FP: &str = include_str!("../../../testdata/keys/test-only-pubkey.fpr");

/// A Dockerfile `FROM image` that runs `apt-get install rdmacm-utils` and `rping`: a result
/// keeps working with apt. Asserts the `docker build` succeeds.
pub fn apt_get_works_on_top(dir: &Path, image: &str) {
    let ctx = dir.join("ctx-on-top");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join("Dockerfile"), format!("FROM {image}\nRUN apt-get update -q && apt-get install -y -q rdmacm-utils && rping --help 2>&1 | head -1 && dpkg --audit\n")).unwrap();
    let child = format!("{image}-child");
    let out = std::process::Command::new("docker")
        .args(["build", "-q", "-t", &child])
        .arg(&ctx)
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    support::docker_rmi(&child);
    support::assert_success("docker build FROM the result with apt-get install rdmacm-utils", &out);
}
