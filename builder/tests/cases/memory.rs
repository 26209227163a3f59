//! A base with a 1 GiB layer builds in bounded memory: layers are streamed, never held.
use crate::support::{self, Registry};

/// Runs erdma-build under GNU time and returns (stdout, peak RSS in KiB).
fn build_measured(args: &[&str]) -> (String, u64) {
    let out = std::process::Command::new("/usr/bin/time")
        .arg("-v")
        .arg(support::bin())
        .args(args)
        .env("XDG_CACHE_HOME", support::test_cache())
        .output()
        .unwrap();
    support::assert_success("erdma-build under /usr/bin/time", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes): "))
        .unwrap_or_else(|| panic!("no RSS in\n{stderr}"))
        .parse()
        .unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), rss)
}

#[test]
fn one_gib_layer_builds_under_150_mb() {
    if !support::require_registry() || !support::require(support::have("/usr/bin/time"), "GNU time is needed") {
        return;
    }
    const GIB: u64 = 1 << 30;
    const LIMIT_KIB: u64 = 150 * 1024;
    let tmp = tempfile::tempdir().unwrap();
    let base = support::big_layer_image(&tmp.path().join("base"), GIB);
    assert!(base.layers[0].size > GIB, "the layer is incompressible: {}", base.layers[0].size);
    let reg = Registry::start();
    super::registry::push(&base, &reg, "big:1");

    // Registry to layout: the 1 GiB layer is downloaded, checked and written, streaming.
    let layout = tmp.path().join("out");
    let (_, rss) = build_measured(&["build", "--quiet", "--no-packages", "--base", &reg.reference("big:1"), "--output", &format!("oci:{}:x", layout.display())]);
    eprintln!("registry -> oci layout with a 1 GiB layer: peak RSS {rss} KiB");
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    let copied = support::fixture::blob_path(&layout, &base.layers[0].digest);
    assert_eq!(std::fs::metadata(copied).unwrap().len(), base.layers[0].size);

    // Layout to docker archive: the layer is decompressed into the archive, streaming.
    let archive = tmp.path().join("big.tar");
    let (_, rss) = build_measured(&["build", "--quiet", "--no-packages", "--base", &format!("oci:{}:x", layout.display()), "--output", &format!("docker-archive:{}", archive.display()), "--recipe", "debian-12"]);
    eprintln!("oci layout -> docker-archive with a 1 GiB layer: peak RSS {rss} KiB");
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    assert!(std::fs::metadata(&archive).unwrap().len() > GIB);

    // Registry to registry: the layer is mounted, so nothing moves at all.
    let before = reg.count_blob_gets(&base.layers[0].digest);
    let (_, rss) = build_measured(&["build", "--quiet", "--no-packages", "--base", &reg.reference("big:1"), "--output", &reg.reference("out:1")]);
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    assert_eq!(reg.count_blob_gets(&base.layers[0].digest), before);
}
