//! Repository keys as an attacker would try them: a key download that carries a second key, a
//! pin that does not match, a `--keyring` with several armour blocks, and a key trusted on first
//! use, against signed repositories served on 127.0.0.1.
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{build_cached, build_fails};
use crate::support::apt_repo::{AptRepo, Layout, Served, TestKey};
use crate::support::{self, debs};

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn base() -> String {
    format!("oci:{}/../testdata/images/debian12-mini:latest", env!("CARGO_MANIFEST_DIR"))
}

/// A flat repository (`deb URL /`, as NVIDIA's) offering `libibverbs1 VERSION`, signed by `key`.
fn repo_offering(dir: &Path, version: &str, key: &TestKey) -> AptRepo {
    let deb = debs::fake_deb(
        dir,
        debs::FakeDeb {
            name: "libibverbs1",
            version,
            multi_arch: Some("same"),
            files: vec![("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", b"stand-in\n", 0o644)],
            ..Default::default()
        },
    );
    AptRepo::build(Layout::Flat, &[deb], key)
}

/// A recipe whose repository `erdma` is at `url`, its key at `key_url`, pinned to `pin`.
fn recipe(dir: &Path, url: &str, key_url: &str, pin: Option<&str>) -> PathBuf {
    let pin = pin.map(|p| format!("fingerprint = \"{p}\"\n")).unwrap_or_default();
    super::write_debian12_recipe(
        dir,
        &format!("recipe-{}.toml", pin.len()),
        "Debian 12 (key test)",
        &format!("[[repository]]\nname = \"erdma\"\nurls = [\"{url}\"]\nsuite = \"/\"\nkey_url = \"{key_url}\"\n{pin}"),
    )
}

fn require_tools() -> bool {
    support::require(
        support::have("dpkg-deb") && support::have("apt-ftparchive") && support::have("gpg"),
        "dpkg-deb, apt-ftparchive and gpg are needed",
    )
}

/// The fingerprints of the keys in the image's `etc/apt/trusted.gpg.d/erdma.gpg`, read with gpg
/// from the new layer of the output layout.
fn image_key_fingerprints(layout: &Path, tag: &str) -> Vec<String> {
    let img = support::fixture::read_fixture(layout, tag);
    let top = img.manifest()["layers"].as_array().unwrap().last().unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let f = std::fs::File::open(support::fixture::blob_path(layout, &top)).unwrap();
    let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
    let mut key = None;
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_string_lossy() == "etc/apt/trusted.gpg.d/erdma.gpg" {
            let mut buf = Vec::new();
            e.read_to_end(&mut buf).unwrap();
            key = Some(buf);
        }
    }
    let key = key.expect("the layer has etc/apt/trusted.gpg.d/erdma.gpg");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("erdma.gpg");
    std::fs::write(&file, key).unwrap();
    let out = std::process::Command::new("gpg")
        .args(["--batch", "--with-colons", "--show-keys"])
        .arg(&file)
        .env("GNUPGHOME", tmp.path())
        .output()
        .unwrap();
    support::assert_success("gpg --show-keys on the image's key", &out);
    // Primary keys only: the `fpr` record right after each `pub` record.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].starts_with("pub:"))
        .filter_map(|w| w[1].strip_prefix("fpr:"))
        .map(|r| r.trim_matches(':').to_string())
        .collect()
}

/// The key-substitution attack: the key download holds the pinned key and a second key, and the
/// repository is signed by the second one, offering a "newer" libibverbs1. Refused; signed by
/// the pinned key, it works, and the image trusts only the pinned key.
#[test]
fn a_second_key_beside_the_pinned_one_verifies_nothing_and_stays_out_of_the_image() {
    if !require_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (pinned, intruder) = (TestKey::generate(), TestKey::generate());
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(
        www.join("GPGKEY"),
        format!("{}{}", pinned.armored_public(), intruder.armored_public()),
    )
    .unwrap();
    let keys = Served::start(&www);
    let key_url = keys.url("GPGKEY");

    let evil = repo_offering(&tmp.path().join("evil"), "99.0", &intruder);
    let r = recipe(tmp.path(), &evil.url(), &key_url, Some(pinned.fingerprint()));
    let out = tmp.path().join("out");
    let err = build_fails(&[
        "build",
        "--base",
        &base(),
        "--recipe",
        &s(&r),
        "--no-packages",
        "--install",
        "libibverbs1",
        "--output",
        &format!("oci:{}:x", s(&out)),
    ]);
    assert!(
        err.contains(&format!("signed by key {}", intruder.fingerprint()))
            && err.contains(pinned.fingerprint())
            && err.contains("does not pin"),
        "{err}"
    );
    assert!(!out.exists(), "a refused build wrote {out:?}");

    let good = repo_offering(&tmp.path().join("good"), "50.0-1", &pinned);
    let r = recipe(tmp.path(), &good.url(), &key_url, Some(pinned.fingerprint()));
    let report: Value = build_cached(
        &[
            "--base",
            &base(),
            "--recipe",
            &s(&r),
            "--no-packages",
            "--install",
            "libibverbs1",
            "--output",
            &format!("oci:{}:x", s(&out)),
        ],
        &tmp.path().join("cache"),
    );
    let img = &report["images"][0];
    assert_eq!(img["packages"]["install"][0]["version"], "50.0-1", "{img}");
    assert_eq!(img["keys"][0]["trust"], "pinned", "{img}");
    assert_eq!(img["keys"][0]["fingerprints"], serde_json::json!([pinned.fingerprint()]));
    assert_eq!(img["keys"][0]["dropped"], serde_json::json!([intruder.fingerprint()]));
    assert!(
        img["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains(&format!("also holds key {}", intruder.fingerprint()))),
        "{img}"
    );
    // apt in the image trusts trusted.gpg.d for every source: only the pinned key is there.
    assert_eq!(image_key_fingerprints(&out, "x"), [pinned.fingerprint().to_string()]);
}

#[test]
fn a_pin_that_matches_no_downloaded_key_fails_naming_both() {
    if !require_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (pinned, other) = (TestKey::generate(), TestKey::generate());
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("GPGKEY"), other.armored_public()).unwrap();
    let keys = Served::start(&www);
    let repo = repo_offering(&tmp.path().join("repo"), "50.0-1", &other);
    let r = recipe(tmp.path(), &repo.url(), &keys.url("GPGKEY"), Some(pinned.fingerprint()));
    let out = tmp.path().join("out");
    let err = build_fails(&[
        "build",
        "--base",
        &base(),
        "--recipe",
        &s(&r),
        "--no-packages",
        "--install",
        "libibverbs1",
        "--output",
        &format!("oci:{}", s(&out)),
    ]);
    assert!(
        err.contains(&format!(
            "holds key {}, but the recipe pins {}",
            other.fingerprint(),
            pinned.fingerprint()
        )),
        "{err}"
    );
    assert!(!out.exists());
}

/// A `--keyring` file of several armour blocks: every block counts (the signer is the second).
/// And a recipe without a pin: the key is trusted on first use, and the report says which.
#[test]
fn multi_block_keyrings_and_keys_trusted_on_first_use() {
    if !require_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (first, signer) = (TestKey::generate(), TestKey::generate());
    let repo = repo_offering(&tmp.path().join("repo"), "50.0-1", &signer);
    let ring = tmp.path().join("ring.asc");
    std::fs::write(&ring, format!("{}\n{}", first.armored_public(), signer.armored_public()))
        .unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("GPGKEY"), signer.armored_public()).unwrap();
    let keys = Served::start(&www);
    let r = recipe(tmp.path(), &repo.url(), &keys.url("GPGKEY"), None);

    let out = tmp.path().join("out");
    let report = build_cached(
        &[
            "--base",
            &base(),
            "--recipe",
            &s(&r),
            "--keyring",
            &format!("erdma={}", s(&ring)),
            "--no-packages",
            "--install",
            "libibverbs1",
            "--output",
            &format!("oci:{}:ring", s(&out)),
        ],
        &tmp.path().join("cache"),
    );
    let img = &report["images"][0];
    assert_eq!(img["keys"][0]["trust"], "keyring", "{img}");
    assert_eq!(
        img["keys"][0]["fingerprints"],
        serde_json::json!([first.fingerprint(), signer.fingerprint()])
    );
    assert_eq!(
        image_key_fingerprints(&out, "ring"),
        [first.fingerprint().to_string(), signer.fingerprint().to_string()]
    );

    let report = build_cached(
        &[
            "--base",
            &base(),
            "--recipe",
            &s(&r),
            "--no-packages",
            "--install",
            "libibverbs1",
            "--output",
            &format!("oci:{}:tofu", s(&out)),
        ],
        &tmp.path().join("cache"),
    );
    let img = &report["images"][0];
    assert_eq!(img["keys"][0]["trust"], "first-use", "{img}");
    assert_eq!(img["keys"][0]["source"], keys.url("GPGKEY").as_str());
    let warned = img["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .find(|w| w.contains("on first use"))
        .unwrap_or_else(|| panic!("{img}"));
    assert!(
        warned.contains(signer.fingerprint()) && warned.contains("--keyring erdma=FILE"),
        "{warned}"
    );
}
