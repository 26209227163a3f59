//! Hostile bases and repositories cost a build bounded time, memory and bytes
//! (`crates/erdma-limits/src/lib.rs`), fail with one `error:` line naming the limit (and the flag that
//! raises it, where one does), and write nothing:
//!
//! - `a_layer_that_inflates_1000x_is_refused`: a 10 MiB gzip layer of 10 GiB (`--max-inflation`);
//! - `a_packages_xz_that_inflates_1000x_is_refused`: a signed `Packages.xz` of 2 GiB of zeros;
//! - `millions_of_tiny_entries_are_bounded`: 2.1 million empty files in one layer (`--max-entries`);
//! - `a_manifest_of_10000_layers_is_refused`: `--max-layers`;
//! - `a_symlink_loop_at_os_release_is_refused`: 40 links, the kernel's limit;
//! - `endless_bodies_are_cut_off`: a registry blob, an `InRelease` and a `.deb` that never end.
//! - `endless_and_huge_manifests_are_refused`: a registry manifest that never ends, and one of 9 MiB.
//! - `a_long_name_of_60_mib_is_refused`: a GNU long name of 60 MiB in a layer and in a
//!   `docker save` archive (the tar crate would read it whole; `limits::MAX_TAR_HEADERS`).
//!
//! Each build runs under GNU time; the figures are printed (`--no-capture`) and bounded
//! generously for a loaded two-core machine.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flate2::Compression;
use sha2::{Digest, Sha256};

use crate::support::apt_repo::{Served, TestKey};
use crate::support::fixture::{self, LayerInfo};
use crate::support::{self, DEBIAN12_OS_RELEASE};

const MIB: u64 = 1 << 20;

/// What a run of erdma-build cost and said.
struct Run {
    code: Option<i32>,
    stderr: String,
    rss_kib: u64,
    wall: Duration,
    cpu: Duration,
}

/// How much longer than its CPU bound a run may take on the clock: a loaded machine (CI's two
/// cores shared with other tests) stretches the wall time, not the work; a run that stalls
/// without working still fails.
const STALL_FACTOR: u32 = 5;

impl Run {
    /// The `error:` line, asserting it is the only line of the error (no `Caused by:`).
    #[track_caller]
    fn error(&self) -> &str {
        assert_eq!(self.code, Some(1), "{}", self.stderr);
        let error = self
            .stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("no error line in\n{}", self.stderr));
        assert!(
            !self.stderr.contains("Caused by:"),
            "more than one line of error:\n{}",
            self.stderr
        );
        error
    }

    /// The run's work stayed under `cpu` (user and system time) and `rss_mib` of peak RSS,
    /// and it ended within [`STALL_FACTOR`] times `cpu` on the clock.
    #[track_caller]
    fn within(&self, what: &str, cpu: Duration, rss_mib: u64) {
        eprintln!(
            "hostile: {what}: exit {:?}, {:.2?} ({:.2?} of CPU), peak RSS {} MiB",
            self.code,
            self.wall,
            self.cpu,
            self.rss_kib / 1024
        );
        if let Some(e) = self.stderr.lines().find(|l| l.starts_with("error: ")) {
            eprintln!("hostile:   {e}");
        }
        assert!(self.cpu < cpu, "{what} took {:?} of CPU\n{}", self.cpu, self.stderr);
        let stall = cpu * STALL_FACTOR;
        assert!(self.wall < stall, "{what} took {:?} (stalled?)\n{}", self.wall, self.stderr);
        assert!(
            self.rss_kib < rss_mib * 1024,
            "{what}: peak RSS {} KiB\n{}",
            self.rss_kib,
            self.stderr
        );
    }
}

/// Runs erdma-build ARGS under GNU time with `cache` as `XDG_CACHE_HOME`.
fn run(args: &[&str], cache: &Path) -> Run {
    let m = support::run_measured(args, cache, &[("ERDMA_BUILD_RETRY_BACKOFF_MS", "20")]);
    Run {
        code: m.out.status.code(),
        stderr: String::from_utf8_lossy(&m.out.stderr).into_owned(),
        rss_kib: m.rss_kib,
        wall: m.wall,
        cpu: m.cpu,
    }
}

fn have_time() -> bool {
    support::require(support::have("/usr/bin/time"), "GNU time is needed (apt-get install time)")
}

/// A destination in an empty directory of its own, so that "nothing written" is that the
/// directory is still empty afterwards (the sink stages beside the destination).
struct Dest {
    dir: tempfile::TempDir,
}

impl Dest {
    fn new() -> Dest {
        Dest { dir: tempfile::tempdir().unwrap() }
    }
    fn oci(&self) -> String {
        format!("oci:{}:x", self.dir.path().join("out").display())
    }
    #[track_caller]
    fn assert_untouched(&self) {
        let left: Vec<_> =
            std::fs::read_dir(self.dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "a failed build wrote {left:?} in {}", self.dir.path().display());
    }
}

/// The Debian 12 os-release, alone in a layer, at the bottom of the images below.
fn os_release_layer(dir: &Path) -> LayerInfo {
    fixture::entries_layer(dir, &[("etc/os-release", DEBIAN12_OS_RELEASE.as_bytes(), 0o644)])
}

fn image(dir: &Path, layers: Vec<LayerInfo>) -> String {
    fixture::image_from_layers(dir, "latest", layers, &[("PATH", "/usr/bin:/bin")], &["/bin/sh"])
        .reference()
}

fn gzip(data: &[u8], level: Compression) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// A base whose top layer is a gzip bomb: one file of `members` × 64 MiB of zeros, the tar
/// header and each 64 MiB as gzip members of their own (concatenated members are one gzip
/// stream, RFC 1952 2.2), so that it costs nothing to make. Its diff_id is not computed (that
/// would be hashing the whole file; nothing reading a base checks it).
fn bomb_image(dir: &Path, members: u64) -> (String, LayerInfo) {
    let chunk = gzip(&vec![0u8; 64 << 20], Compression::best());
    let mut header = tar::Header::new_gnu();
    header.set_path("usr/share/bomb.bin").unwrap();
    header.set_size(members * (64 << 20));
    header.set_mode(0o644);
    header.set_cksum();
    let (head, tail) =
        (gzip(header.as_bytes(), Compression::best()), gzip(&[0u8; 1024], Compression::best()));
    let os = os_release_layer(dir);
    let blob = dir.join("bomb.tmp");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&blob).unwrap());
    let mut h = Sha256::new();
    let mut size = 0u64;
    for part in std::iter::once(&head)
        .chain(std::iter::repeat_n(&chunk, members as usize))
        .chain(std::iter::once(&tail))
    {
        f.write_all(part).unwrap();
        h.update(part);
        size += part.len() as u64;
    }
    f.flush().unwrap();
    drop(f);
    let digest = format!("sha256:{}", hex::encode(h.finalize()));
    std::fs::rename(&blob, fixture::blob_path(dir, &digest)).unwrap();
    let bomb = LayerInfo { digest, diff_id: sha256(b"not computed: a bomb"), size };
    (image(dir, vec![os, bomb.clone()]), bomb)
}

#[test]
fn a_layer_that_inflates_1000x_is_refused() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // 160 × 64 MiB = 10 GiB of zeros in about 10 MiB of gzip.
    let (base, bomb) = bomb_image(&tmp.path().join("base"), 160);
    let ratio = (160 * (64 << 20)) / bomb.size;
    assert!(ratio > 1000, "{ratio}");
    let dest = Dest::new();
    let r = run(&["build", "--no-packages", "--base", &base, "--output", &dest.oci()], tmp.path());
    let e = r.error();
    // Named: the layer, the ratio, the flag.
    assert!(
        e.contains(&bomb.digest)
            && e.contains("inflates more than 100×")
            && e.contains("--max-inflation"),
        "{e}"
    );
    // Stopped after 64 MiB + 100 × what was read, not after 10 GiB.
    r.within(
        &format!("layer of {} bytes inflating {ratio}×", bomb.size),
        Duration::from_secs(20),
        100,
    );
    dest.assert_untouched();

    // No file of the base read (a recipe named, no packages): a docker archive stores layers
    // decompressed, and would take the 10 GiB onto the disk.
    let archive = format!("docker-archive:{}", dest.dir.path().join("out.tar").display());
    let r = run(
        &["build", "--no-packages", "--recipe", "debian-12", "--base", &base, "--output", &archive],
        tmp.path(),
    );
    let e = r.error();
    assert!(
        e.contains(&format!("layer {}", bomb.digest)) && e.contains("inflates more than 100×"),
        "{e}"
    );
    r.within("the same layer into a docker archive", Duration::from_secs(20), 100);
    dest.assert_untouched();
}

#[test]
fn a_packages_xz_that_inflates_1000x_is_refused() {
    if !have_time() || !support::require(support::have("gpg"), "gpg is needed") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // 2 GiB of zeros in xz: 32 streams of 64 MiB (xz reads concatenated streams as one file).
    let mut stream = Vec::new();
    liblzma::read::XzEncoder::new(std::io::repeat(0).take(64 << 20), 6)
        .read_to_end(&mut stream)
        .unwrap();
    let bomb: Vec<u8> = stream.repeat(32);
    let ratio = (2u64 << 30) / bomb.len() as u64;
    assert!(ratio > 1000, "{ratio}");
    // A repository that signs it: the Release lists it with its true size and hash.
    let www = tmp.path().join("www");
    let dists = www.join("dists/bookworm");
    std::fs::create_dir_all(dists.join("main/binary-amd64")).unwrap();
    std::fs::write(dists.join("main/binary-amd64/Packages.xz"), &bomb).unwrap();
    let release = format!(
        "Architectures: amd64\nCodename: bookworm\nComponents: main\nDate: Mon, 01 Jan 2024 00:00:00 +0000\nLabel: hostile\nOrigin: hostile\nSuite: bookworm\nSHA256:\n {} {} main/binary-amd64/Packages.xz\n",
        hex::encode(Sha256::digest(&bomb)),
        bomb.len()
    );
    std::fs::write(dists.join("Release"), release).unwrap();
    let key = TestKey::generate();
    key.clearsign(&dists.join("Release"), &dists.join("InRelease"));
    let keyfile = key.write_public(tmp.path(), "hostile.asc");
    let served = Served::start(&www);
    let mirror = served.url("");
    let dest = Dest::new();
    let base =
        format!("oci:{}/../testdata/images/debian12-mini:latest", env!("CARGO_MANIFEST_DIR"));
    let r = run(
        &[
            "build",
            "--base",
            &base,
            "--mirror",
            mirror.trim_end_matches('/'),
            "--keyring",
            keyfile.to_str().unwrap(),
            "--output",
            &dest.oci(),
        ],
        tmp.path(),
    );
    let e = r.error();
    assert!(
        e.contains("/dists/bookworm/main/binary-amd64/Packages.xz inflates more than 100×")
            && e.contains("--max-inflation"),
        "{e}"
    );
    r.within(
        &format!("Packages.xz of {} bytes inflating {ratio}×", bomb.len()),
        Duration::from_secs(20),
        200,
    );
    dest.assert_untouched();
}

#[test]
fn millions_of_tiny_entries_are_bounded() {
    if !have_time() {
        return;
    }
    const ENTRIES: u64 = 2_100_000;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let made = Instant::now();
    let os = os_release_layer(&dir);
    // Empty files, 1000 to a directory: a tar of 1 GiB of headers, streamed into gzip.
    let many = fixture::custom_layer(&dir, Compression::fast(), |tar| {
        for d in 0..ENTRIES / 1000 {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            tar.append_data(&mut h, format!("d{d:05}/"), std::io::empty())?;
            for f in 0..999 {
                let mut h = tar::Header::new_gnu();
                h.set_mode(0o644);
                h.set_size(0);
                tar.append_data(&mut h, format!("d{d:05}/f{f:03}"), std::io::empty())?;
            }
        }
        Ok(())
    });
    let base = image(&dir, vec![os, many.clone()]);
    eprintln!(
        "hostile: a layer of {ENTRIES} entries: {} bytes of gzip, made in {:.1?}",
        many.size,
        made.elapsed()
    );

    // The default: refused once the 2 000 000th entry is passed.
    let cache = tmp.path().join("cache");
    let dest = Dest::new();
    let r = run(&["build", "--no-packages", "--base", &base, "--output", &dest.oci()], &cache);
    let e = r.error();
    assert!(
        e.contains(&base)
            && e.contains("more than 2000000 tar entries")
            && e.contains("--max-entries"),
        "{e}"
    );
    r.within("2.1 million entries, --max-entries 2000000 (default)", Duration::from_secs(60), 600);
    dest.assert_untouched();

    // A lower limit: refused sooner, in less memory.
    let r = run(
        &[
            "build",
            "--no-packages",
            "--max-entries",
            "100000",
            "--base",
            &base,
            "--output",
            &dest.oci(),
        ],
        &cache,
    );
    assert!(r.error().contains("more than 100000 tar entries"), "{}", r.stderr);
    r.within("2.1 million entries, --max-entries 100000", Duration::from_secs(20), 100);
    dest.assert_untouched();

    // Raised for a genuine image this large: the build finishes, within stated bounds.
    let r = run(
        &[
            "build",
            "--quiet",
            "--no-packages",
            "--max-entries",
            "2200000",
            "--base",
            &base,
            "--output",
            &dest.oci(),
        ],
        &cache,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    r.within("2.1 million entries, --max-entries 2200000", Duration::from_secs(60), 600);
}

#[test]
fn a_manifest_of_10000_layers_is_refused() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let os = os_release_layer(&dir);
    let empty = fixture::entries_layer(&dir, &[]);
    let mut layers = vec![os];
    layers.extend(std::iter::repeat_n(empty, 9_999));
    let base = image(&dir, layers);
    let dest = Dest::new();
    let r = run(&["build", "--no-packages", "--base", &base, "--output", &dest.oci()], tmp.path());
    let e = r.error();
    assert!(e.contains(&base) && e.contains("lists 10000 layers (limit --max-layers 125"), "{e}");
    r.within("a manifest of 10000 layers", Duration::from_secs(10), 100);
    dest.assert_untouched();

    // The same in a `docker save` archive, refused before any layer in it is hashed.
    let archive = tmp.path().join("many.tar");
    {
        let mut tar = tar::Builder::new(std::fs::File::create(&archive).unwrap());
        let config = serde_json::to_vec(&serde_json::json!({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})).unwrap();
        let list = serde_json::to_vec(&serde_json::json!([{"Config": "config.json", "RepoTags": ["many:1"], "Layers": vec!["layer.tar"; 10_000]}])).unwrap();
        for (name, data) in [("config.json", config), ("manifest.json", list)] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            tar.append_data(&mut h, name, data.as_slice()).unwrap();
        }
        tar.finish().unwrap();
    }
    let docker = format!("docker-archive:{}", archive.display());
    let r =
        run(&["build", "--no-packages", "--base", &docker, "--output", &dest.oci()], tmp.path());
    assert!(
        r.error()
            .contains(&format!("the base {docker} lists 10000 layers (limit --max-layers 125")),
        "{}",
        r.stderr
    );
    dest.assert_untouched();

    // Raised: every layer is looked at (they are one blob, read once); it finishes.
    let r = run(
        &[
            "build",
            "--quiet",
            "--no-packages",
            "--max-layers",
            "10000",
            "--base",
            &base,
            "--output",
            &dest.oci(),
        ],
        tmp.path(),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    r.within("a manifest of 10000 layers, --max-layers 10000", Duration::from_secs(60), 300);

    // `check` takes the same limits: refused by default, and looked at when raised (the base
    // has no RDMA user space: "not ready", exit 1, no error). An error is exit 2 in `check`.
    let r = run(&["check", &base], tmp.path());
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.lines().any(|l| l.starts_with("error: ")
            && l.contains("lists 10000 layers (limit --max-layers 125")),
        "{}",
        r.stderr
    );
    let r = run(&["check", "--max-layers", "10000", &base], tmp.path());
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!r.stderr.contains("error:"), "{}", r.stderr);
}

#[test]
fn a_symlink_loop_at_os_release_is_refused() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let real = os_release_layer(&dir);
    // /etc/os-release -> a -> b -> /etc/os-release, over the real file in the layer below.
    let looped = fixture::entries_layer(
        &dir,
        &[
            ("etc/os-release", b"a".as_slice(), 0o120777),
            ("etc/a", b"b".as_slice(), 0o120777),
            ("etc/b", b"/etc/os-release".as_slice(), 0o120777),
        ],
    );
    let base = image(&dir, vec![real, looped]);
    let dest = Dest::new();
    let r = run(&["build", "--no-packages", "--base", &base, "--output", &dest.oci()], tmp.path());
    let e = r.error();
    assert!(
        e.contains(&format!("/etc/os-release in {base} takes more than 40 symbolic links")),
        "{e}"
    );
    r.within("a symlink loop at /etc/os-release", Duration::from_secs(10), 100);
    dest.assert_untouched();
}

/// A tar stream whose first entry has a GNU long name (`L`) of `len` bytes, then a regular
/// file under that name, and the end of the archive.
fn long_name_tar(len: u64) -> Vec<u8> {
    let header = |kind: tar::EntryType, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        h.as_bytes().to_vec()
    };
    let mut tar = header(tar::EntryType::GNULongName, len);
    tar.resize(tar.len() + len.div_ceil(512) as usize * 512, b'a');
    tar.extend(header(tar::EntryType::Regular, 0));
    tar.extend([0u8; 1024]);
    tar
}

#[test]
fn a_long_name_of_60_mib_is_refused() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let os = os_release_layer(&dir);
    // 60 MiB of name: within --max-inflation's grace, so only the header limit stops it.
    let tar = long_name_tar(60 * MIB);
    let blob = gzip(&tar, Compression::fast());
    let layer = LayerInfo { digest: sha256(&blob), diff_id: sha256(&tar), size: blob.len() as u64 };
    std::fs::write(fixture::blob_path(&dir, &layer.digest), &blob).unwrap();
    let base = image(&dir, vec![os, layer.clone()]);
    let dest = Dest::new();
    let r = run(&["build", "--no-packages", "--base", &base, "--output", &dest.oci()], tmp.path());
    let e = r.error();
    assert!(e.contains(&format!("layer {}", layer.digest)) && e.contains("has a tar entry whose headers (GNU long name or link, PAX extensions, sparse map) take more than 4194304 bytes"), "{e}");
    r.within("a layer with a 60 MiB long name", Duration::from_secs(20), 60);
    dest.assert_untouched();

    // A `docker save` archive is indexed in place: the same name at its start.
    let archive = tmp.path().join("long.tar");
    std::fs::write(&archive, &tar).unwrap();
    let docker = format!("docker-archive:{}", archive.display());
    let r =
        run(&["build", "--no-packages", "--base", &docker, "--output", &dest.oci()], tmp.path());
    let e = r.error();
    assert!(
        e.contains(&archive.display().to_string()) && e.contains("take more than 4194304 bytes"),
        "{e}"
    );
    r.within("a docker archive with a 60 MiB long name", Duration::from_secs(20), 60);
    dest.assert_untouched();
}

/// Reads one HTTP request's line and headers; returns (method, path).
fn request(s: &std::net::TcpStream) -> Option<(String, String)> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
    }
    Some((method, path))
}

/// A test server's answer: a status line's tail, headers, and a body (`None`: bytes until the
/// client goes away).
struct Reply {
    status: &'static str,
    headers: Vec<String>,
    body: Option<Vec<u8>>,
}

/// Serves `answer(method, path)` on 127.0.0.1, one thread per connection. Returns `host:port`.
fn serve_replies(answer: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let Some((method, path)) = request(&s) else { return };
                let reply = answer(&method, &path);
                let mut head = format!("HTTP/1.1 {}\r\nConnection: close\r\n", reply.status);
                for h in &reply.headers {
                    head.push_str(&format!("{h}\r\n"));
                }
                match reply.body {
                    None => {
                        let _ = s.write_all(format!("{head}\r\n").as_bytes());
                        let block = vec![b'A'; 64 << 10];
                        while s.write_all(&block).is_ok() {}
                    }
                    Some(body) => {
                        let _ = s.write_all(
                            format!("{head}Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                        );
                        if method != "HEAD" {
                            let _ = s.write_all(&body);
                        }
                    }
                }
            });
        }
    });
    addr
}

/// [`serve_replies`] of `answer(method, path)`: `Some((content type, body))` (404 when the
/// type is empty), or `None` for an endless body.
fn serve(
    answer: impl Fn(&str, &str) -> Option<(String, Vec<u8>)> + Send + Sync + 'static,
) -> String {
    serve_replies(move |method, path| match answer(method, path) {
        None => Reply {
            status: "200 OK",
            headers: vec!["Content-Type: application/octet-stream".into()],
            body: None,
        },
        Some((ctype, body)) => Reply {
            status: if ctype.is_empty() { "404 Not Found" } else { "200 OK" },
            headers: vec![format!("Content-Type: {ctype}")],
            body: Some(body),
        },
    })
}

/// Files of `root` by URL path; `None` (endless) for the paths `endless_at` picks.
fn files(
    root: PathBuf,
    endless_at: fn(&str) -> bool,
) -> impl Fn(&str, &str) -> Option<(String, Vec<u8>)> {
    move |_, path| {
        if endless_at(path) {
            return None;
        }
        Some(match std::fs::read(root.join(path.trim_start_matches('/'))) {
            Ok(body) => ("application/octet-stream".into(), body),
            Err(_) => (String::new(), Vec::new()),
        })
    }
}

#[test]
fn endless_bodies_are_cut_off() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();

    // A registry whose top layer never ends: cut at the descriptor's size, not retried.
    let dir = tmp.path().join("base");
    let os = os_release_layer(&dir);
    let top = fixture::entries_layer(&dir, &[("etc/motd", b"hello\n".as_slice(), 0o644)]);
    let img = fixture::image_from_layers(&dir, "latest", vec![os, top.clone()], &[], &["/bin/sh"]);
    let manifest = std::fs::read(img.blob_path(&img.manifest_digest)).unwrap();
    let endless_digest = top.digest.clone();
    let blobs = dir.clone();
    let registry = serve(move |_, path| {
        if path == "/v2/" {
            return Some(("application/json".into(), b"{}".to_vec()));
        }
        if path.ends_with("/manifests/1") {
            return Some(("application/vnd.oci.image.manifest.v1+json".into(), manifest.clone()));
        }
        let digest = path.rsplit('/').next().unwrap_or_default();
        if digest == endless_digest {
            return None;
        }
        Some(match std::fs::read(fixture::blob_path(&blobs, digest)) {
            Ok(b) => ("application/octet-stream".into(), b),
            Err(_) => (String::new(), Vec::new()),
        })
    });
    let dest = Dest::new();
    let r = run(
        &[
            "build",
            "--no-packages",
            "--base",
            &format!("docker://{registry}/hostile:1"),
            "--output",
            &dest.oci(),
        ],
        tmp.path(),
    );
    let e = r.error();
    assert!(
        e.contains(&format!(
            "registry {registry} sent more of blob {} than the {} bytes its descriptor gives",
            top.digest, top.size
        )),
        "{e}"
    );
    r.within("a registry's endless layer blob", Duration::from_secs(20), 100);
    dest.assert_untouched();

    // A mirror whose InRelease never ends: cut at 32 MiB, the most a Release is allowed.
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/repos/debian-demo");
    let base =
        format!("oci:{}/../testdata/images/debian12-mini:latest", env!("CARGO_MANIFEST_DIR"));
    let key = demo.join("demo-key.asc");
    for (what, at, says) in [
        (
            "InRelease",
            (|p: &str| p.ends_with("/InRelease")) as fn(&str) -> bool,
            format!("is larger than {} bytes", 32 * MIB),
        ),
        (
            ".deb",
            |p: &str| p.ends_with(".deb"),
            "larger than the 334756 bytes the index says".to_string(),
        ),
    ] {
        let mirror = format!("http://{}", serve(files(demo.clone(), at)));
        let cache = tempfile::tempdir().unwrap();
        let r = run(
            &[
                "build",
                "--base",
                &base,
                "--mirror",
                &mirror,
                "--keyring",
                key.to_str().unwrap(),
                "--output",
                &dest.oci(),
            ],
            cache.path(),
        );
        let e = r
            .stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{}", r.stderr));
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert!(e.contains(&mirror) && r.stderr.contains(&says), "{}", r.stderr);
        r.within(&format!("a mirror's endless {what}"), Duration::from_secs(20), 150);
        dest.assert_untouched();
    }
}

/// A registry's token service whose reply never ends, a registry whose error answer to a blob
/// never ends, and an output registry whose answer to an upload never ends: oci-client read
/// each whole; each is now read up to a bound (1 MiB of token reply, 64 KiB of error) and the
/// build fails, nothing written.
#[test]
fn endless_token_replies_and_error_bodies_are_cut_off() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("base");
    let os = os_release_layer(&dir);
    let img = fixture::image_from_layers(&dir, "latest", vec![os.clone()], &[], &["/bin/sh"]);
    let manifest = std::fs::read(img.blob_path(&img.manifest_digest)).unwrap();
    let json = |status: &'static str, body: &[u8]| Reply {
        status,
        headers: vec!["Content-Type: application/json".into()],
        body: Some(body.to_vec()),
    };

    // Anonymous pull: the registry asks for a bearer token; its realm answers without end.
    let realm = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let realm2 = realm.clone();
    let registry = serve_replies(move |_, path| {
        if path.starts_with("/token") {
            return Reply {
                status: "200 OK",
                headers: vec!["Content-Type: application/json".into()],
                body: None,
            };
        }
        let challenge = format!(
            r#"WWW-Authenticate: Bearer realm="{}",service="hostile""#,
            realm2.get().unwrap()
        );
        Reply {
            status: "401 Unauthorized",
            headers: vec![challenge, "Content-Type: application/json".into()],
            body: Some(br#"{"errors":[{"code":"UNAUTHORIZED","message":"token"}]}"#.to_vec()),
        }
    });
    realm.set(format!("http://{registry}/token")).unwrap();
    let dest = Dest::new();
    let r = run(
        &[
            "build",
            "--no-packages",
            "--base",
            &format!("docker://{registry}/hostile:1"),
            "--output",
            &dest.oci(),
        ],
        tmp.path(),
    );
    let e = r.error();
    assert!(e.contains(&format!("registry {registry}: getting an access token from http://{registry}/token failed: the reply is longer than 1048576 bytes")), "{e}");
    r.within("a token service's endless reply", Duration::from_secs(20), 100);
    dest.assert_untouched();

    // No auth; the layer's blob answers 500 with an endless body (retried, as 5xx is).
    let blob = os.digest.clone();
    let registry = serve_replies(move |_, path| {
        if path == "/v2/" {
            json("200 OK", b"{}")
        } else if path.ends_with("/manifests/1") {
            Reply {
                status: "200 OK",
                headers: vec!["Content-Type: application/vnd.oci.image.manifest.v1+json".into()],
                body: Some(manifest.clone()),
            }
        } else if path.ends_with(&blob) {
            Reply {
                status: "500 Internal Server Error",
                headers: vec!["Content-Type: text/plain".into()],
                body: None,
            }
        } else {
            let digest = path.rsplit('/').next().unwrap_or_default();
            match std::fs::read(fixture::blob_path(&dir, digest)) {
                Ok(b) => Reply {
                    status: "200 OK",
                    headers: vec!["Content-Type: application/octet-stream".into()],
                    body: Some(b),
                },
                Err(_) => json("404 Not Found", b"{}"),
            }
        }
    });
    let r = run(
        &[
            "build",
            "--no-packages",
            "--base",
            &format!("docker://{registry}/hostile:1"),
            "--output",
            &dest.oci(),
        ],
        tmp.path(),
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let e = r.stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    assert!(
        e.contains(&format!("registry {registry}"))
            && r.stderr.contains("500")
            && r.stderr.contains("AAAA…"),
        "{}",
        r.stderr
    );
    r.within("a registry's endless error answer to a blob", Duration::from_secs(20), 100);
    dest.assert_untouched();

    // The output registry: every upload it is asked to open answers 500 without end.
    let output = serve_replies(move |method, path| match (method, path) {
        ("GET", "/v2/") => json("200 OK", b"{}"),
        ("POST", _) => Reply {
            status: "500 Internal Server Error",
            headers: vec!["Content-Type: text/plain".into()],
            body: None,
        },
        _ => json("404 Not Found", br#"{"errors":[{"code":"BLOB_UNKNOWN","message":"unknown"}]}"#),
    });
    let base = fixture::image_from_layers(
        &tmp.path().join("base2"),
        "latest",
        vec![os_release_layer(&tmp.path().join("base2"))],
        &[],
        &["/bin/sh"],
    )
    .reference();
    let r = run(
        &[
            "build",
            "--no-packages",
            "--base",
            &base,
            "--output",
            &format!("docker://{output}/out:1"),
        ],
        tmp.path(),
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with(&format!("error: registry {output}: uploading blob failed")))
            && r.stderr.contains("AAAA…"),
        "{}",
        r.stderr
    );
    r.within(
        "an output registry's endless error answer to an upload",
        Duration::from_secs(20),
        100,
    );
}

#[test]
fn endless_and_huge_manifests_are_refused() {
    if !have_time() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // 9 MiB of JSON, one past the 8 MiB a manifest or index may have (`erdma_oci::source::MAX_JSON`).
    let mut huge = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","annotations":{"x":""#.to_vec();
    huge.resize(9 << 20, b'a');
    huge.extend_from_slice(br#""},"manifests":[]}"#);
    let huge = std::sync::Arc::new(huge);
    for (what, endless) in [("endless", true), ("9 MiB", false)] {
        let huge = huge.clone();
        let registry = serve(move |_, path| {
            if path == "/v2/" {
                return Some(("application/json".into(), b"{}".to_vec()));
            }
            if path.ends_with("/manifests/1") {
                return (!endless)
                    .then(|| ("application/vnd.oci.image.index.v1+json".into(), huge.to_vec()));
            }
            Some((String::new(), Vec::new()))
        });
        let dest = Dest::new();
        let r = run(
            &[
                "build",
                "--no-packages",
                "--base",
                &format!("docker://{registry}/hostile:1"),
                "--output",
                &dest.oci(),
            ],
            tmp.path(),
        );
        let e = r.error();
        assert!(
            e.contains(&format!(
                "registry {registry} sent more than {} bytes of manifest for {registry}/hostile:1",
                8 * MIB
            )),
            "{e}"
        );
        r.within(&format!("a registry's {what} manifest"), Duration::from_secs(20), 100);
        dest.assert_untouched();
    }
}
