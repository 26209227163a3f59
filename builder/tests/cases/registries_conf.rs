//! containers-registries.conf(5) as Podman and skopeo read it: mirrors and locations for pulls,
//! blocked names, pushes that never go to a mirror. skopeo, given the same file, is the oracle.
use std::path::Path;

use serde_json::Value;

use super::{build_env, runnable_base, test_recipe_args, text};
use crate::support::{self, Registry};

/// erdma-build ARGS with `CONTAINERS_REGISTRIES_CONF=conf` (and a home without a config of its own).
fn run(conf: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    build_env(
        args,
        &[
            ("CONTAINERS_REGISTRIES_CONF", conf.to_str().unwrap()),
            ("HOME", home.to_str().unwrap()),
            ("ERDMA_BUILD_RETRY_BACKOFF_MS", "20"),
        ],
    )
}

/// `--recipe FILE --keyring FILE --no-packages`: the runnable base lists no apt source.
fn recipe_args(dir: &Path) -> Vec<String> {
    let mut args = vec!["--no-packages".to_string()];
    args.extend(test_recipe_args(dir));
    args
}

#[test]
fn canonical_names_are_pulled_from_their_mirror_and_location_as_skopeo_pulls_them() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let mirror = Registry::start();
    mirror.push(&base.reference(), "library/debian:12");
    mirror.push(&base.reference(), "company/team/base:1");
    // A dead mirror first (tried, passed over with a warning), then the live one; docker.io
    // itself is never reached. A company name rewritten to a path on the same registry.
    let conf = tmp.path().join("registries.conf");
    std::fs::write(
        &conf,
        format!(
            r#"unqualified-search-registries = ["docker.io"]

[[registry]]
prefix = "docker.io"
location = "docker.io"

[[registry.mirror]]
location = "127.0.0.1:1"
insecure = true

[[registry.mirror]]
location = "{m}"
insecure = true

[[registry]]
prefix = "registry.example/team"
location = "{m}/company/team"
insecure = true
"#,
            m = mirror.addr()
        ),
    )
    .unwrap();
    let recipe = recipe_args(tmp.path());
    for (name, served_as) in [
        ("docker.io/library/debian:12", "library/debian:12"),
        ("registry.example/team/base:1", "company/team/base:1"),
    ] {
        let out_dir = tmp.path().join(served_as.replace(['/', ':'], "-"));
        let (base_ref, out_ref) =
            (format!("docker://{name}"), format!("oci:{}:x", out_dir.display()));
        let mut args = vec!["build", "--json", "--base", &base_ref, "--output", &out_ref];
        args.extend(recipe.iter().map(String::as_str));
        let out = run(&conf, &home, &args);
        support::assert_success(&format!("build from {name} through registries.conf"), &out);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["base_read_from"], format!("{}/{served_as}", mirror.addr()), "{report}");
        let stderr = text(&out.stderr);
        if name.starts_with("docker.io") {
            assert!(
                stderr.contains("from mirror 127.0.0.1:1/library/debian failed"),
                "the dead mirror is named:\n{stderr}"
            );
        }
        // skopeo, given the same file, reads the same manifest.
        let raw = support::skopeo([
            "--registries-conf",
            conf.to_str().unwrap(),
            "inspect",
            "--raw",
            &base_ref,
        ]);
        support::assert_success(&format!("skopeo inspect {name}"), &raw);
        let digest =
            format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&raw.stdout)));
        assert_eq!(report["base_digest"], digest.as_str(), "{name}: the same manifest as skopeo's");
    }
    let gets = mirror
        .requests()
        .iter()
        .filter(|l| l.method == "GET" && l.path() == "/v2/library/debian/manifests/12")
        .count();
    assert!(
        gets >= 2,
        "the mirror served the manifest to erdma-build and skopeo:\n{}",
        mirror.log()
    );
}

#[test]
fn a_blocked_registry_is_refused_naming_the_file_and_nothing_is_written() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let reg = Registry::start();
    let base = runnable_base(&tmp.path().join("base"));
    reg.push(&base.reference(), "base:1");
    let dropin = home.join(".config/containers/registries.conf.d");
    std::fs::create_dir_all(&dropin).unwrap();
    let conf = tmp.path().join("registries.conf");
    std::fs::write(&conf, "").unwrap();
    let blocking = dropin.join("50-block.conf");
    std::fs::write(
        &blocking,
        format!("[[registry]]\nlocation = \"{}\"\nblocked = true\n", reg.addr()),
    )
    .unwrap();
    let out_dir = tmp.path().join("out");
    let out_ref = format!("oci:{}:x", out_dir.display());
    let base_ref = reg.reference("base:1");
    let before = reg.requests().len();
    let out = run(&conf, &home, &["build", "--base", &base_ref, "--output", &out_ref]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: {}/base is blocked by registries.conf {}",
            reg.addr(),
            blocking.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: containers-registries.conf(5): remove `blocked = true`"),
        "{stderr}"
    );
    assert!(!out_dir.exists(), "nothing written");
    assert_eq!(reg.requests().len(), before, "the blocked registry is not contacted");
    // skopeo refuses it too, with the same files.
    let sk = std::process::Command::new("skopeo")
        .args([
            "--registries-conf",
            conf.to_str().unwrap(),
            "inspect",
            "--tls-verify=false",
            &base_ref,
        ])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(
        !sk.status.success() && text(&sk.stderr).contains("is blocked"),
        "{}",
        text(&sk.stderr)
    );
    // A push to it is refused as well.
    let base_src = base.reference();
    let mut args = vec!["build", "--base", &base_src, "--output", &base_ref];
    let recipe = recipe_args(tmp.path());
    args.extend(recipe.iter().map(String::as_str));
    let out = run(&conf, &home, &args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is blocked by registries.conf"), "{}", text(&out.stderr));
    assert_eq!(reg.requests().len(), before, "nothing pushed");
}

#[test]
fn a_push_goes_to_the_registry_itself_never_to_its_mirror() {
    if !support::require_registry() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let (dest, mirror) = (Registry::start(), Registry::start());
    let base = runnable_base(&tmp.path().join("base"));
    let conf = tmp.path().join("registries.conf");
    std::fs::write(&conf, format!("[[registry]]\nlocation = \"{}\"\n\n[[registry.mirror]]\nlocation = \"{}\"\ninsecure = true\n", dest.addr(), mirror.addr())).unwrap();
    let out_ref = dest.reference("out:1");
    let mirror_before = mirror.requests().len();
    let base_src = base.reference();
    let mut args = vec!["build", "--json", "--base", &base_src, "--output", &out_ref];
    let recipe = recipe_args(tmp.path());
    args.extend(recipe.iter().map(String::as_str));
    let out = run(&conf, &home, &args);
    support::assert_success("build to a registry that has a mirror", &out);
    assert_eq!(dest.count_manifest_puts(), 1, "{}", dest.log());
    assert_eq!(mirror.requests().len(), mirror_before, "the mirror saw nothing:\n{}", mirror.log());
    // Pulled back by name, the mirror (which lacks it) is passed over for the registry.
    let mut args = vec!["plan", "--json", "--base", &out_ref];
    args.extend(recipe.iter().map(String::as_str));
    let out = run(&conf, &home, &args);
    support::assert_success("plan of the pushed image through registries.conf", &out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.get("base_read_from").is_none(), "read from the registry itself: {report}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("from mirror {}/out failed", mirror.addr())), "{stderr}");
}

#[test]
fn a_build_naming_no_registry_does_not_read_registries_conf() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let conf = tmp.path().join("registries.conf");
    std::fs::write(&conf, "this is [[ not toml").unwrap();
    let (base_ref, out_ref) =
        (base.reference(), format!("oci:{}:x", tmp.path().join("out").display()));
    let mut args = vec!["build", "--base", &base_ref, "--output", &out_ref];
    let recipe = recipe_args(tmp.path());
    args.extend(recipe.iter().map(String::as_str));
    support::assert_success(
        "a layout-to-layout build beside a broken registries.conf",
        &run(&conf, tmp.path(), &args),
    );
    // A registry name reads it, and the error names the file.
    let out = run(&conf, tmp.path(), &["plan", "--base", "docker://127.0.0.1:1/base:1"]);
    assert!(
        text(&out.stderr).contains(&format!("error: registries.conf {}: line 1", conf.display())),
        "{}",
        text(&out.stderr)
    );
}
