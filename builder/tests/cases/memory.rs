//! Builds stay in bounded memory however large what they move is:
//!
//! - `one_gib_layer_builds_under_150_mb`: a base with a 1 GiB layer is copied from a registry to
//!   a layout, from a layout to a docker archive and from registry to registry; layers are
//!   streamed, never held.
//! - `builds_with_a_500_mb_package_under_100_mb`: a 500 MiB uncompressed `.deb` from a signed
//!   repository is downloaded (streamed to the cache while hashed, `http::Client::download`),
//!   unpacked (its large file spooled to a temp file, `LayerContents::file_kind`) and written
//!   into a zstd layer.
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::support::apt_repo::{AptRepo, Layout, TestKey};
use crate::support::{self, Registry};

/// Runs erdma-build under GNU time and returns (stdout, peak RSS in KiB).
fn build_measured(args: &[&str]) -> (String, u64) {
    build_measured_in(args, support::test_cache())
}

/// [`build_measured`] with `cache` as `XDG_CACHE_HOME`.
fn build_measured_in(args: &[&str], cache: &Path) -> (String, u64) {
    let m = support::run_measured(args, cache, &[]);
    support::assert_success("erdma-build under /usr/bin/time", &m.out);
    (String::from_utf8_lossy(&m.out.stdout).into_owned(), m.rss_kib)
}

#[test]
fn one_gib_layer_builds_under_150_mb() {
    if !support::require_registry()
        || !support::require(support::have("/usr/bin/time"), "GNU time is needed")
    {
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
    let (_, rss) = build_measured(&[
        "build",
        "--quiet",
        "--no-packages",
        "--base",
        &reg.reference("big:1"),
        "--output",
        &format!("oci:{}:x", layout.display()),
    ]);
    eprintln!("registry -> oci layout with a 1 GiB layer: peak RSS {rss} KiB");
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    let copied = support::fixture::blob_path(&layout, &base.layers[0].digest);
    assert_eq!(std::fs::metadata(copied).unwrap().len(), base.layers[0].size);

    // Layout to docker archive: the layer is decompressed into the archive, streaming.
    let archive = tmp.path().join("big.tar");
    let (_, rss) = build_measured(&[
        "build",
        "--quiet",
        "--no-packages",
        "--base",
        &format!("oci:{}:x", layout.display()),
        "--output",
        &format!("docker-archive:{}", archive.display()),
        "--recipe",
        "debian-12",
    ]);
    eprintln!("oci layout -> docker-archive with a 1 GiB layer: peak RSS {rss} KiB");
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    assert!(std::fs::metadata(&archive).unwrap().len() > GIB);

    // Registry to registry: the layer is mounted, so nothing moves at all.
    let before = reg.count_blob_gets(&base.layers[0].digest);
    let (_, rss) = build_measured(&[
        "build",
        "--quiet",
        "--no-packages",
        "--base",
        &reg.reference("big:1"),
        "--output",
        &reg.reference("out:1"),
    ]);
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");
    assert_eq!(reg.count_blob_gets(&base.layers[0].digest), before);
}

const MIB: u64 = 1 << 20;
/// Size of the one file of the big package.
const PAYLOAD: u64 = 500 * MIB;
/// Where it is installed, relative to the image root.
const PAYLOAD_PATH: &str = "usr/lib/big-payload/blob.bin";

/// A reader that hashes what is read through it.
struct HashReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Builds `big-payload_1.0_amd64.deb` in `dir` with `dpkg-deb -Znone` (so the `.deb` is as
/// large as its file): one file of [`PAYLOAD`] incompressible pseudo-random bytes at
/// [`PAYLOAD_PATH`] (so the zstd layer is as large too), generated and written 1 MiB at a time.
/// Returns the `.deb` and the file's SHA256 (hex).
fn big_payload_deb(dir: &Path) -> (std::path::PathBuf, String) {
    use md5::Md5;
    use std::os::unix::fs::PermissionsExt;
    let stage = tempfile::tempdir_in(dir).unwrap();
    let root = stage.path().join("root");
    let file = root.join(PAYLOAD_PATH);
    std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    for d in ["", "DEBIAN", "usr", "usr/lib", "usr/lib/big-payload"] {
        std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut block = vec![0u8; MIB as usize];
    let mut random = support::fixture::XorShiftReader::new(PAYLOAD);
    let (mut sha, mut md5) = (Sha256::new(), Md5::new());
    let mut f = std::fs::File::create(&file).unwrap();
    for _ in 0..PAYLOAD / MIB {
        random.read_exact(&mut block).unwrap();
        f.write_all(&block).unwrap();
        sha.update(&block);
        md5.update(&block);
    }
    drop(f);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let debian = root.join("DEBIAN");
    std::fs::write(
        debian.join("control"),
        format!(
            "Package: big-payload\nVersion: 1.0\nArchitecture: amd64\nMaintainer: erdma-kit tests <tests@erdma-kit.invalid>\nInstalled-Size: {}\nSection: misc\nPriority: optional\nDescription: one 500 MiB file, for the memory test of erdma-kit (TEST ONLY)\n",
            PAYLOAD / 1024
        ),
    )
    .unwrap();
    std::fs::write(
        debian.join("md5sums"),
        format!("{}  {PAYLOAD_PATH}\n", hex::encode(md5.finalize())),
    )
    .unwrap();
    for f in ["control", "md5sums"] {
        std::fs::set_permissions(debian.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let deb = dir.join("big-payload_1.0_amd64.deb");
    support::debian::run_ok(
        "dpkg-deb --build -Znone",
        std::process::Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group", "-Znone"])
            .arg(&root)
            .arg(&deb),
    );
    (deb, hex::encode(sha.finalize()))
}

/// A `.deb` of 500 MB (stored, not compressed) is downloaded from a signed repository into a
/// fresh cache, unpacked and written into a zstd layer in bounded memory: the download streams
/// to the cache while it is hashed, and the package's large file is spooled to a temp file
/// rather than held.
#[test]
fn builds_with_a_500_mb_package_under_100_mb() {
    if !support::require(
        support::have("dpkg-deb")
            && support::have("apt-ftparchive")
            && support::have("gpg")
            && support::have("/usr/bin/time"),
        "dpkg-deb, apt-ftparchive, gpg and GNU time are needed",
    ) || !support::apt_repo::require_tools()
    {
        return;
    }
    const LIMIT_KIB: u64 = 100 * 1024;
    let t0 = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let (deb, payload_sha) = big_payload_deb(tmp.path());
    let deb_size = std::fs::metadata(&deb).unwrap().len();
    assert!(deb_size > PAYLOAD, "the .deb is stored, not compressed: {deb_size} bytes");
    let key = TestKey::generate();
    let keyfile = key.write_public(tmp.path(), "repo.asc");
    let repo =
        AptRepo::build_under("erdma/apt/debian", Layout::erdma(), std::slice::from_ref(&deb), &key);
    // The repository holds its own copy.
    std::fs::remove_file(&deb).unwrap();
    let recipe = super::write_debian12_recipe(
        tmp.path(),
        "big-recipe.toml",
        "Debian 12 (test repository)",
        &format!("[[repository]]\nname = \"erdma\"\nurls = [\"{}\"]\nsuite = \"bookworm/erdma\"\ncomponents = [\"main\"]\n", repo.url()),
    );
    let prepared = t0.elapsed();

    // A cache of its own, so that the .deb really is downloaded.
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    let base =
        format!("oci:{}/../testdata/images/debian12-mini:latest", env!("CARGO_MANIFEST_DIR"));
    let t1 = Instant::now();
    let (stdout, rss) = build_measured_in(
        &[
            "build",
            "--quiet",
            "--json",
            "--base",
            &base,
            "--recipe",
            recipe.to_str().unwrap(),
            "--keyring",
            keyfile.to_str().unwrap(),
            "--no-packages",
            "--install",
            "big-payload",
            "--compression",
            "zstd",
            "--output",
            &format!("oci:{}:x", out.display()),
        ],
        &cache,
    );
    let built = t1.elapsed();
    eprintln!(
        "install of a {deb_size}-byte package: peak RSS {rss} KiB ({} MiB), build {built:.1?}",
        rss / 1024
    );
    assert!(rss < LIMIT_KIB, "peak RSS {rss} KiB");

    // The .deb was downloaded, once, into the cache.
    let r: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("report is not JSON ({e}): {stdout}"));
    let pk = &r["images"][0]["packages"];
    assert_eq!(pk["downloaded_bytes"], deb_size, "{pk}");
    let names: Vec<&str> =
        pk["install"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["big-payload"], "{pk}");
    assert_eq!(
        repo.get_paths().iter().filter(|p| p.ends_with(".deb")).count(),
        1,
        "{:?}",
        repo.get_paths()
    );
    let cached: Vec<u64> = std::fs::read_dir(cache.join("erdma-build/debs"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert_eq!(cached, [deb_size]);

    // The new (last) layer holds the file, whole: read streaming, zstd then tar.
    let img = support::fixture::read_fixture(&out, "x");
    let layer = img.layers.last().unwrap();
    eprintln!("new layer: {} bytes (zstd)", layer.size);
    let media = img.manifest()["layers"].as_array().unwrap().last().unwrap()["mediaType"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(media.ends_with("+zstd"), "{media}");
    let blob = std::fs::File::open(support::fixture::blob_path(&out, &layer.digest)).unwrap();
    let mut tar_stream = HashReader {
        inner: zstd::stream::read::Decoder::new(blob).unwrap(),
        hasher: Sha256::new(),
    };
    let mut found = None;
    {
        let mut archive = tar::Archive::new(&mut tar_stream);
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().trim_start_matches("./").to_string();
            if path == PAYLOAD_PATH {
                let size = entry.header().size().unwrap();
                let mut h = Sha256::new();
                let copied = io::copy(&mut entry, &mut h).unwrap();
                found = Some((size, copied, hex::encode(h.finalize())));
            }
        }
    }
    // What tar leaves unread (its end-of-archive padding) is part of the diff_id too.
    io::copy(&mut tar_stream, &mut io::sink()).unwrap();
    assert_eq!(format!("sha256:{}", hex::encode(tar_stream.hasher.finalize())), layer.diff_id);
    let (size, copied, sha) =
        found.unwrap_or_else(|| panic!("no {PAYLOAD_PATH} in the new layer {}", layer.digest));
    assert_eq!((size, copied), (PAYLOAD, PAYLOAD));
    assert_eq!(sha, payload_sha);
    eprintln!("big package test: {:.1?} in all ({prepared:.1?} to build the .deb and the repository, {built:.1?} to build the image)", t0.elapsed());
}
