//! Every transport in and out, checked by skopeo and docker, and reproducibility.
use std::path::Path;

use serde_json::Value;

use super::{build_fails, build_json, runnable_base, snapshot, test_recipe, TEST_KEY_FP};
use crate::support;

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn inspect(reference: &str) -> Value {
    let out = support::skopeo(["inspect", reference]);
    support::assert_success("skopeo inspect", &out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Reads a file out of an OCI layout's top layer with tar and gzip of the test's own.
fn file_in_top_layer(layout: &Path, tag: &str, path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let desc = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap()
        .clone();
    let blob = |d: &str| std::fs::read(support::fixture::blob_path(layout, d)).unwrap();
    let manifest: Value = serde_json::from_slice(&blob(desc["digest"].as_str().unwrap())).unwrap();
    let top = manifest["layers"].as_array().unwrap().last().unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let data = blob(&top);
    let mut archive = tar::Archive::new(flate2::read::MultiGzDecoder::new(data.as_slice()));
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_string_lossy().trim_start_matches("./") == path {
            let mut v = Vec::new();
            e.read_to_end(&mut v).unwrap();
            return Some(v);
        }
    }
    None
}

fn dearmored_with_gpg(key: &Path) -> Vec<u8> {
    let out = std::process::Command::new("gpg")
        .args(["--dearmor", "--output", "-"])
        .arg(key)
        .output()
        .unwrap();
    support::assert_success("gpg --dearmor", &out);
    out.stdout
}

#[test]
fn every_output_transport_is_accepted_by_skopeo() {
    if !support::require(
        support::have("skopeo") && support::have("gpg"),
        "skopeo and gpg are needed",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (recipe, key) = test_recipe(tmp.path(), Some(TEST_KEY_FP));
    let outputs = [
        format!("oci:{}:built", s(&tmp.path().join("layout"))),
        format!("oci-archive:{}:built", s(&tmp.path().join("image.oci.tar"))),
        format!("docker-archive:{}:erdma/built:1", s(&tmp.path().join("image.docker.tar"))),
    ];
    for output in &outputs {
        let report = build_json(&[
            "build",
            "--no-packages",
            "--base",
            &base.reference(),
            "--output",
            output,
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&key),
            "-e",
            "EXTRA=1",
        ]);
        assert_eq!(report["output"], output.as_str());
        let info = inspect(output);
        let env: Vec<&str> =
            info["Env"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert!(env.contains(&"NCCL_DEBUG=WARN"), "the base's value wins over the preset: {env:?}");
        assert!(
            env.contains(&"NCCL_IB_HCA=erdma")
                && env.contains(&"EXTRA=1")
                && env.contains(&"PATH=/bin"),
            "{env:?}"
        );
        assert_eq!(info["Labels"]["org.opencontainers.image.base.name"], base.reference().as_str());
        assert_eq!(info["Layers"].as_array().unwrap().len(), 2, "one layer added: {info}");

        // skopeo reads it fully: copy into a fresh layout and look inside the new layer there.
        let copy = tmp.path().join(format!("copy-{}", output.split(':').next().unwrap()));
        let out = support::skopeo(["copy", output.as_str(), &format!("oci:{}:c", s(&copy))]);
        support::assert_success("skopeo copy", &out);
        let list = file_in_top_layer(&copy, "c", "etc/apt/sources.list.d/erdma.list")
            .expect("apt source in the layer");
        assert_eq!(
            String::from_utf8(list).unwrap(),
            "deb http://127.0.0.1:9/erdma/apt/ubuntu bookworm/erdma main\n"
        );
        let gpg = file_in_top_layer(&copy, "c", "etc/apt/trusted.gpg.d/erdma.gpg")
            .expect("key in the layer");
        assert_eq!(gpg, dearmored_with_gpg(&key), "key dearmoured exactly as gpg --dearmor does");
        assert_eq!(
            file_in_top_layer(&copy, "c", "etc/erdma/build-info").unwrap(),
            b"built by erdma-build\n"
        );

        // Every output transport is also an input: build on top of it, detecting the distro.
        let again = build_json(&["plan", "--no-packages", "--base", output]);
        assert_eq!(again["images"][0]["recipe"], "debian-12", "{output}");
        assert_eq!(again["images"][0]["base_layers"].as_array().unwrap().len(), 2, "{output}");
    }
}

#[test]
fn two_builds_are_byte_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (recipe, key) = test_recipe(tmp.path(), None);
    for compression in ["gzip", "zstd"] {
        let mut digests = Vec::new();
        for run in 0..2 {
            let out = tmp.path().join(format!("{compression}-{run}"));
            let r = build_json(&[
                "build",
                "--no-packages",
                "--base",
                &base.reference(),
                "--output",
                &format!("oci:{}:x", s(&out)),
                "--recipe",
                &s(&recipe),
                "--keyring",
                &s(&key),
                "--compression",
                compression,
            ]);
            digests.push((r["digest"].as_str().unwrap().to_string(), snapshot(&out)));
            // The base's layer, at hand in a layout on the same file system, is checked and
            // linked (while the build works on the rest), not copied.
            let layer = &base.layers[0].digest;
            assert_eq!(r["images"][0]["base_layers"][0]["reuse"], "linked", "{r}");
            let ino = |dir: &Path| {
                std::os::unix::fs::MetadataExt::ino(
                    &std::fs::metadata(dir.join("blobs/sha256").join(&layer["sha256:".len()..]))
                        .unwrap(),
                )
            };
            assert_eq!(ino(&out), ino(&base.dir));
        }
        assert_eq!(digests[0].0, digests[1].0);
        assert_eq!(digests[0].1, digests[1].1, "every byte of the two layouts is the same");
        let mt = &build_json(&[
            "plan",
            "--no-packages",
            "--base",
            &base.reference(),
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&key),
            "--compression",
            compression,
        ])["images"][0]["layer"]["media_type"];
        assert_eq!(mt, &format!("application/vnd.oci.image.layer.v1.tar+{compression}"));
    }
    // SOURCE_DATE_EPOCH is an input: a different one gives a different image.
    let out = super::build_env(
        &[
            "plan",
            "--json",
            "--no-packages",
            "--base",
            &base.reference(),
            "--recipe",
            &s(&recipe),
            "--keyring",
            &s(&key),
        ],
        &[("SOURCE_DATE_EPOCH", "1700000000")],
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ne!(r["digest"].as_str().unwrap(), digests_of_gzip(&tmp.path().join("gzip-0")));
}

fn digests_of_gzip(layout: &Path) -> String {
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"][0]["digest"].as_str().unwrap().to_string()
}

#[test]
fn plan_shows_files_env_and_layers_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let before = snapshot(tmp.path());
    let (recipe, key) = test_recipe(tmp.path(), None);
    let r = build_json(&[
        "plan",
        "--no-packages",
        "--base",
        &base.reference(),
        "--recipe",
        &s(&recipe),
        "--keyring",
        &s(&key),
        "-e",
        "NCCL_DEBUG=TRACE",
    ]);
    let img = &r["images"][0];
    let files: Vec<&str> =
        img["files_added"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(
        files,
        [
            "/etc/apt/sources.list.d/erdma.list",
            "/etc/apt/trusted.gpg.d/erdma.gpg",
            "/etc/erdma/build-info"
        ]
    );
    let env = img["env"].as_array().unwrap();
    assert!(
        env.iter().any(|e| e["name"] == "NCCL_IB_HCA" && e["source"] == "recipe"),
        "a custom recipe's [env]: {env:?}"
    );
    assert!(
        env.iter().any(|e| e["name"] == "PYTHONUNBUFFERED" && e["source"] == "preset"),
        "{env:?}"
    );
    assert!(env
        .iter()
        .any(|e| e["name"] == "NCCL_DEBUG" && e["value"] == "TRACE" && e["replaced"] == "WARN"));
    assert_eq!(img["base_layers"][0]["digest"], base.layers[0].digest.as_str());
    let mut after = snapshot(tmp.path());
    after.retain(|k, _| !k.starts_with("test-"));
    assert_eq!(before, after, "plan wrote nothing");
    // Human output too.
    let out = support::run_build([
        "plan",
        "--no-packages",
        "--base",
        &base.reference(),
        "--recipe",
        &s(&recipe),
        "--keyring",
        &s(&key),
    ]);
    support::assert_success("plan", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("+ /etc/apt/sources.list.d/erdma.list")
            && text.contains("env NCCL_IB_HCA=erdma"),
        "{text}"
    );
}

#[test]
fn detects_the_distro_and_lists_recipes() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let r = build_json(&["plan", "--no-packages", "--base", &base.reference()]);
    assert_eq!(r["images"][0]["recipe"], "debian-12");
    assert_eq!(r["images"][0]["os_release"]["version_id"], "12");
    let out = support::run_build(["recipes"]);
    support::assert_success("recipes", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in
        ["debian-12", "ubuntu-18.04", "ubuntu-20.04", "ubuntu-22.04", "ubuntu-24.04", "apt-generic"]
    {
        assert!(text.contains(name), "{text}");
    }
    // The generic rule is spelled out.
    assert!(
        text.contains("Debian 12+ and Ubuntu 24.04+ releases without a recipe of their own"),
        "{text}"
    );
    let json: Value =
        serde_json::from_slice(&support::run_build(["recipes", "--json"]).stdout).unwrap();
    let jammy = json.as_array().unwrap().iter().find(|r| r["name"] == "ubuntu-22.04").unwrap();
    assert_eq!(jammy["repositories"][1]["suite"], "jammy/erdma");
    let generic = json.as_array().unwrap().iter().find(|r| r["name"] == "apt-generic").unwrap();
    assert_eq!(
        generic["distro"]["generic"],
        serde_json::json!({"debian": "12", "ubuntu": "24.04"})
    );
}

#[test]
fn pinned_key_fingerprint_is_enforced() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("GPGKEY"), super::TEST_KEY).unwrap();
    let server = crate::support::apt_repo::Served::start(&www);
    let key_url = server.url("GPGKEY");
    // The key downloaded from key_url must have the pinned fingerprint.
    let (recipe, key) = super::test_recipe_with(tmp.path(), Some(&"0".repeat(40)), Some(&key_url));
    let out = format!("oci:{}", s(&tmp.path().join("o")));
    let err = build_fails(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &out,
        "--recipe",
        &s(&recipe),
    ]);
    assert!(err.contains(TEST_KEY_FP) && err.contains(&"0".repeat(40)), "{err}");
    assert!(!tmp.path().join("o").exists());
    // A key file the user names is their own trust decision (a mirror re-signed with a site
    // key): the pin guards only the download.
    build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &out,
        "--recipe",
        &s(&recipe),
        "--keyring",
        &s(&key),
    ]);
    let (recipe, _) = super::test_recipe_with(tmp.path(), Some(TEST_KEY_FP), Some(&key_url));
    build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &format!("{out}:pinned"),
        "--recipe",
        &s(&recipe),
    ]);
}

#[test]
fn existing_layout_gets_a_second_tag() {
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let out = tmp.path().join("out");
    build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &format!("oci:{}:one", s(&out)),
    ]);
    build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &format!("oci:{}:two", s(&out)),
        "-e",
        "X=2",
    ]);
    for tag in ["one", "two"] {
        inspect(&format!("oci:{}:{tag}", s(&out)));
    }
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with(".erdma-build")),
        "no staging left behind: {names:?}"
    );
}

/// A two-platform base as an OCI layout whose tag names an image index.
fn multi_platform_base(dir: &Path) -> (String, Vec<String>) {
    let amd = runnable_base(&dir.join("amd"));
    let arm = runnable_base(&dir.join("arm"));
    let layout = dir.join("multi");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    for src in [&amd, &arm] {
        for e in std::fs::read_dir(src.dir.join("blobs/sha256")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), layout.join("blobs/sha256").join(e.file_name())).unwrap();
        }
    }
    let index = serde_json::json!({"schemaVersion": 2, "mediaType": support::fixture::MEDIA_INDEX, "manifests": [
        {"mediaType": support::fixture::MEDIA_MANIFEST, "digest": amd.manifest_digest, "size": amd.manifest_size, "platform": {"os": "linux", "architecture": "amd64"}},
        {"mediaType": support::fixture::MEDIA_MANIFEST, "digest": arm.manifest_digest, "size": arm.manifest_size, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
    ]});
    let raw = serde_json::to_vec(&index).unwrap();
    let digest = format!("sha256:{}", hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&raw)));
    std::fs::write(support::fixture::blob_path(&layout, &digest), &raw).unwrap();
    let top = serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": support::fixture::MEDIA_INDEX, "digest": digest, "size": raw.len(), "annotations": {"org.opencontainers.image.ref.name": "m"}}]});
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    (format!("oci:{}:m", s(&layout)), vec![amd.manifest_digest, arm.manifest_digest])
}

#[test]
fn platforms_one_or_all() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, _) = multi_platform_base(tmp.path());
    let r = build_json(&["plan", "--no-packages", "--base", &base, "--platform", "linux/arm64"]);
    assert_eq!(r["images"].as_array().unwrap().len(), 1);
    assert_eq!(r["images"][0]["platform"], "linux/arm64/v8");

    let out = format!("oci:{}:all", s(&tmp.path().join("out")));
    let r = build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base,
        "--platform",
        "all",
        "--output",
        &out,
    ]);
    assert_eq!(r["images"].as_array().unwrap().len(), 2);
    let raw = support::skopeo(["inspect", "--raw", &out]);
    support::assert_success("skopeo inspect --raw", &raw);
    let index: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(index["mediaType"], "application/vnd.oci.image.index.v1+json");
    let platforms = super::index_platforms(&index);
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"]);
    assert_eq!(index["manifests"][1]["platform"]["variant"], "v8");
    for (i, arch) in ["amd64", "arm64"].iter().enumerate() {
        let d = index["manifests"][i]["digest"].as_str().unwrap();
        assert_eq!(r["images"][i]["manifest_digest"], d, "{arch}");
    }
    let err = build_fails(&["plan", "--no-packages", "--base", &base, "--platform", "linux/s390x"]);
    assert!(err.contains("linux/s390x") && err.contains("linux/amd64, linux/arm64/v8"), "{err}");
    let err = build_fails(&[
        "build",
        "--no-packages",
        "--base",
        &base,
        "--platform",
        "all",
        "--output",
        &format!("docker-archive:{}", s(&tmp.path().join("d.tar"))),
    ]);
    assert!(err.contains("--platform all"), "{err}");
}

#[test]
fn docker_loads_and_runs_the_docker_archive() {
    if !support::require_docker() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = runnable_base(&tmp.path().join("base"));
    let (recipe, key) = test_recipe(tmp.path(), None);
    let archive = tmp.path().join("image.tar");
    let name = format!("erdma-test/loaded:{}", std::process::id());
    build_json(&[
        "build",
        "--no-packages",
        "--base",
        &base.reference(),
        "--output",
        &format!("docker-archive:{}:{name}", s(&archive)),
        "--recipe",
        &s(&recipe),
        "--keyring",
        &s(&key),
        "-e",
        "FROM_CLI=yes",
    ]);
    let load =
        std::process::Command::new("docker").args(["load", "-i"]).arg(&archive).output().unwrap();
    support::assert_success("docker load", &load);
    let run = std::process::Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            &name,
            "sh",
            "-c",
            "cat /etc/erdma/build-info /etc/apt/sources.list.d/erdma.list; env",
        ])
        .output()
        .unwrap();
    // What `docker save` writes is a base too.
    let saved = tmp.path().join("saved.tar");
    let save = std::process::Command::new("docker")
        .args(["save", "-o"])
        .arg(&saved)
        .arg(&name)
        .output()
        .unwrap();
    support::docker_rmi(&name);
    support::assert_success("docker run", &run);
    support::assert_success("docker save", &save);
    let text = String::from_utf8_lossy(&run.stdout);
    for want in [
        "built by erdma-build",
        "deb http://127.0.0.1:9/erdma/apt/ubuntu bookworm/erdma main",
        "NCCL_IB_HCA=erdma",
        "NCCL_DEBUG=WARN",
        "FROM_CLI=yes",
        "PATH=/bin",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let r = build_json(&[
        "build",
        "--no-packages",
        "--base",
        &format!("docker-archive:{}", s(&saved)),
        "--output",
        &format!("oci:{}:resaved", s(&tmp.path().join("resaved"))),
    ]);
    assert_eq!(r["images"][0]["recipe"], "debian-12");
    let info = inspect(&format!("oci:{}:resaved", s(&tmp.path().join("resaved"))));
    assert_eq!(info["Layers"].as_array().unwrap().len(), 3);
    assert!(
        info["Env"].as_array().unwrap().iter().any(|e| e == "FROM_CLI=yes"),
        "the base's env is kept: {info}"
    );
}
