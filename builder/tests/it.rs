//! Integration tests for erdma-build against real components (see tests/support).
#![forbid(unsafe_code)]
// A test binary has no API: its helpers are `pub` for the modules beside them.
#![allow(unreachable_pub)]

mod cases;
mod support;

/// Checks of the test support code itself; they never run erdma-build.
mod support_selftest {
    use super::support::{self, Fault, FaultyProxy, Registry};
    use std::io::Read;

    fn fixture(dir: &std::path::Path) -> support::OciFixture {
        support::fixture_image(
            dir,
            &[
                vec![
                    ("bin/", b"".as_slice(), 0o755),
                    ("bin/hello", b"#!/bin/sh\necho hello\n".as_slice(), 0o755),
                    ("usr/share/doc/x/README", b"readme".as_slice(), 0o644),
                ],
                vec![
                    ("etc/motd", b"hi\n".as_slice(), 0o644),
                    ("bin/sh", b"busybox".as_slice(), 0o120777),
                ],
            ],
            &[("PATH", "/usr/bin:/bin"), ("FOO", "bar")],
            Some(support::DEBIAN12_OS_RELEASE),
        )
    }

    #[test]
    fn registry_starts_and_answers_v2() {
        if !support::require_registry() {
            return;
        }
        let reg = Registry::start();
        let (status, body) = support::registry::http_request(reg.addr(), "GET", "/v2/").unwrap();
        assert_eq!(status, 200);
        assert_eq!(body, b"{}");
        let reqs = reg.requests();
        assert!(
            reqs.iter().any(|r| r.method == "GET" && r.uri == "/v2/" && r.status == 200),
            "access log lacks GET /v2/: {reqs:?}\n{}",
            reg.log()
        );
        assert_eq!(reg.blob_count(), 0);
    }

    #[test]
    fn access_log_line_parses() {
        let line = r#"127.0.0.1 - - [21/Nov/2026:07:27:34 +0000] "GET /v2/x/blobs/sha256:419f HTTP/1.1" 200 119 "" "skopeo/1.9.3""#;
        let e = support::AccessLogEntry::parse(line).unwrap();
        assert_eq!(e.method, "GET");
        assert_eq!(e.blob_digest(), Some("sha256:419f"));
        assert_eq!((e.status, e.bytes), (200, 119));
        let logrus = r#"time="2026-11-21T07:27:34Z" level=info msg="response completed" http.request.method=GET http.request.uri="/v2/""#;
        assert_eq!(support::AccessLogEntry::parse(logrus), None);
        let put = support::AccessLogEntry::parse(
            r#"127.0.0.1 - - [21/Nov/2026:07:27:33 +0000] "PUT /v2/x/blobs/uploads/58?_state=a&digest=sha256%3A41 HTTP/1.1" 201 0 "" "skopeo/1.9.3""#,
        )
        .unwrap();
        assert!(put.is_upload_url());
        assert_eq!(put.blob_digest(), None);
    }

    #[test]
    fn fixture_image_is_valid_for_skopeo() {
        if !support::require(support::have("skopeo"), "skopeo is needed (run scripts/setup)") {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let img = fixture(&tmp.path().join("layout"));
        let out = support::skopeo(["inspect", &img.reference()]);
        support::assert_success("skopeo inspect", &out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["Digest"], img.manifest_digest.as_str());
        assert_eq!(v["Layers"].as_array().unwrap().len(), 2);
        assert_eq!(v["Env"], serde_json::json!(["PATH=/usr/bin:/bin", "FOO=bar"]));

        // skopeo verifies digests and sizes while copying.
        let copy = tmp.path().join("copy");
        let out = support::skopeo([
            "copy",
            "--quiet",
            &img.reference(),
            &format!("oci:{}:x", copy.display()),
        ]);
        support::assert_success("skopeo copy", &out);

        // A second tag in the same layout keeps the first.
        let other = support::fixture::fixture_image_tagged(
            &img.dir,
            "other",
            &[vec![("a", b"a".as_slice(), 0o600)]],
            &[],
            None,
        );
        support::assert_success(
            "skopeo inspect first tag",
            &support::skopeo(["inspect", &img.reference()]),
        );
        support::assert_success(
            "skopeo inspect second tag",
            &support::skopeo(["inspect", &other.reference()]),
        );
    }

    #[test]
    fn fixture_layers_hold_the_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let img = fixture(tmp.path());
        assert_eq!(img.config()["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
        let read = |i: usize| {
            let f = std::fs::File::open(img.blob_path(&img.layers[i].digest)).unwrap();
            let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
            tar.entries()
                .unwrap()
                .map(|e| {
                    let mut e = e.unwrap();
                    let path = e.path().unwrap().to_string_lossy().into_owned();
                    let kind = e.header().entry_type();
                    let mode = e.header().mode().unwrap();
                    let link = e.link_name().unwrap().map(|l| l.to_string_lossy().into_owned());
                    let mut body = String::new();
                    e.read_to_string(&mut body).unwrap();
                    (path, kind, mode, link, body)
                })
                .collect::<Vec<_>>()
        };
        let l0: Vec<_> = read(0).into_iter().map(|e| e.0).collect();
        assert_eq!(
            l0,
            [
                "bin/",
                "bin/hello",
                "usr/",
                "usr/share/",
                "usr/share/doc/",
                "usr/share/doc/x/",
                "usr/share/doc/x/README"
            ]
        );
        let l1 = read(1);
        let sh = l1.iter().find(|e| e.0 == "bin/sh").unwrap();
        assert!(sh.1.is_symlink());
        assert_eq!(sh.3.as_deref(), Some("busybox"));
        let os = l1.iter().find(|e| e.0 == "etc/os-release").unwrap();
        assert!(os.4.contains("VERSION_ID=\"12\""));
        // Deterministic: same input, same digest.
        let tmp2 = tempfile::tempdir().unwrap();
        assert_eq!(fixture(tmp2.path()).manifest_digest, img.manifest_digest);
    }

    #[test]
    fn big_layer_image_streams() {
        let tmp = tempfile::tempdir().unwrap();
        let size = 8 << 20;
        let img = support::big_layer_image(tmp.path(), size);
        assert_eq!(img.layers.len(), 2);
        // Random data does not compress: the gzip blob is about as big as the file.
        assert!(img.layers[0].size > size, "{} <= {size}", img.layers[0].size);
        if support::have("skopeo") {
            support::assert_success(
                "skopeo inspect",
                &support::skopeo(["inspect", &img.reference()]),
            );
        }
    }

    /// Pushes the fixture through the proxy, pulls it back, and checks what the registry saw.
    fn push_and_pull(
        fault: Fault,
        retries: u32,
    ) -> (Registry, FaultyProxy, support::OciFixture, std::process::Output) {
        let tmp = tempfile::tempdir().unwrap();
        let img = fixture(&tmp.path().join("src"));
        let reg = Registry::start();
        reg.push(&img.reference(), "base:1");
        let proxy = FaultyProxy::start(reg.addr(), fault);
        let dest = tmp.path().join("dest");
        let out = support::skopeo([
            "copy",
            "--quiet",
            &format!("--retry-times={retries}"),
            "--src-tls-verify=false",
            &proxy.reference("base:1"),
            &format!("oci:{}:x", dest.display()),
        ]);
        (reg, proxy, img, out)
    }

    #[test]
    fn registry_counts_and_proxy_forwards() {
        if !support::require_registry() {
            return;
        }
        let (reg, proxy, img, out) = push_and_pull(Fault::None, 0);
        support::assert_success("skopeo copy through proxy", &out);
        assert!(proxy.request_count() >= 4, "{:?}", proxy.request_lines());
        assert_eq!(proxy.faults_injected(), 0);
        // Two layers and a config were uploaded once each, then each fetched once.
        assert_eq!(reg.count_blob_uploads(), 3, "{}", reg.log());
        // The registry keeps manifests in blob storage too.
        assert_eq!(reg.blob_count(), 4);
        assert!(reg.blob_digests().contains(&img.manifest_digest));
        assert_eq!(reg.count_manifest_puts(), 1);
        for layer in &img.layers {
            assert_eq!(reg.count_blob_gets(&layer.digest), 1, "{}", layer.digest);
        }
        assert_eq!(reg.count_blob_gets(&img.config_digest), 1);
    }

    #[test]
    fn proxy_server_errors_then_passes() {
        if !support::require_registry() {
            return;
        }
        let reg = Registry::start();
        let proxy = FaultyProxy::start(reg.addr(), Fault::ServerErrorTimes(2));
        let get = || support::registry::http_request(proxy.addr(), "GET", "/v2/").unwrap().0;
        assert_eq!((get(), get(), get()), (503, 503, 200));
        assert_eq!(proxy.request_count(), 3);
        assert_eq!(proxy.faults_injected(), 2);
    }

    #[test]
    fn proxy_corrupts_blobs() {
        if !support::require_registry() {
            return;
        }
        let (_reg, proxy, _img, out) = push_and_pull(Fault::CorruptBlob, 0);
        assert!(!out.status.success(), "skopeo accepted a corrupted blob");
        assert!(proxy.faults_injected() >= 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.to_lowercase().contains("digest"), "{err}");
    }

    #[test]
    fn proxy_drops_mid_blob() {
        if !support::require_registry() {
            return;
        }
        let (_reg, proxy, _img, out) = push_and_pull(Fault::DropMidBlobAlways, 0);
        assert!(!out.status.success(), "skopeo survived a dropped blob");
        assert!(proxy.faults_injected() >= 1);
    }

    #[test]
    fn proxy_drops_each_blob_once() {
        if !support::require_registry() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let img = fixture(tmp.path());
        let reg = Registry::start();
        reg.push(&img.reference(), "base:1");
        let proxy = FaultyProxy::start(reg.addr(), Fault::DropMidBlob);
        let layer = &img.layers[0];
        let path = format!("/v2/base/blobs/{}", layer.digest);
        let get = || support::registry::http_request(proxy.addr(), "GET", &path).unwrap();
        let (status, first) = get();
        assert_eq!(status, 200);
        assert_eq!(first.len() as u64, layer.size / 2);
        let (_, second) = get();
        assert_eq!(second, std::fs::read(img.blob_path(&layer.digest)).unwrap());
        assert_eq!(proxy.faults_injected(), 1);
        // HEAD and manifest requests are never faulted.
        let (status, _) = support::registry::http_request(proxy.addr(), "HEAD", &path).unwrap();
        assert_eq!(status, 200);
        assert_eq!(proxy.faults_injected(), 1);
    }

    #[test]
    fn proxy_forwards_uploads() {
        if !support::require_registry() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let img = support::big_layer_image(tmp.path(), 2 << 20);
        let reg = Registry::start();
        let proxy = FaultyProxy::start(reg.addr(), Fault::None);
        let out = support::skopeo([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &img.reference(),
            &proxy.reference("big:1"),
        ]);
        support::assert_success("skopeo push through proxy", &out);
        assert_eq!(reg.count_blob_uploads(), 3, "{}", reg.log());
        assert_eq!(reg.count_manifest_puts(), 1);
        assert!(reg.blob_digests().contains(&img.layers[0].digest));
        // Uploads went through the proxy, not around it via Location headers.
        assert!(
            proxy
                .request_lines()
                .iter()
                .any(|l| l.starts_with("PUT ") && l.contains("/blobs/uploads/")),
            "{:?}",
            proxy.request_lines()
        );
    }

    /// Debian base, real and fake .debs, signed apt repositories (support/{debian,debs,apt_repo}.rs).
    /// Names say what a test needs: `net` the Debian mirror, `root` root.
    mod debian_apt {
        use crate::support::{self, apt_repo, debian, debs};
        use std::collections::BTreeMap;
        use std::io::Read;
        use std::path::{Path, PathBuf};
        use std::process::Command;

        /// (kind, mode, uid, link target, contents for files under 1 MiB) of a layer entry.
        type LayerEntry = (tar::EntryType, u32, u64, Option<String>, Vec<u8>);

        /// Path → entry of one gzip layer.
        fn layer_entries(img: &support::OciFixture, i: usize) -> BTreeMap<String, LayerEntry> {
            let f = std::fs::File::open(img.blob_path(&img.layers[i].digest)).unwrap();
            let mut tar = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
            tar.entries()
                .unwrap()
                .map(|e| {
                    let mut e = e.unwrap();
                    let path = e.path().unwrap().to_string_lossy().into_owned();
                    let h = e.header().clone();
                    let link = e.link_name().unwrap().map(|l| l.to_string_lossy().into_owned());
                    let mut body = Vec::new();
                    if h.size().unwrap() < 1 << 20 {
                        e.read_to_end(&mut body).unwrap();
                    }
                    (path, (h.entry_type(), h.mode().unwrap(), h.uid().unwrap(), link, body))
                })
                .collect()
        }

        fn text(b: &[u8]) -> String {
            String::from_utf8_lossy(b).into_owned()
        }

        fn ofed_like_debs(dir: &Path) -> Vec<PathBuf> {
            let mut v = debs::ofed_fake_debs(dir);
            v.push(debs::fake_deb(
                dir,
                debs::FakeDeb {
                    name: "erdma-test-tool",
                    version: "1:2.0-1",
                    arch: "all",
                    depends: Some("libibverbs1"),
                    files: vec![(
                        "/usr/bin/erdma-test-tool",
                        b"#!/bin/sh\necho ok\n".as_slice(),
                        0o755,
                    )],
                    postinst: Some("echo configured > /dev/null\n"),
                    ..Default::default()
                },
            ));
            v
        }

        #[test]
        fn debian_mirror_is_read_from_host_sources() {
            if !support::require(
                std::path::Path::new("/etc/apt/sources.list.d").is_dir()
                    || std::path::Path::new("/etc/apt/sources.list").is_file(),
                "apt sources on the host",
            ) {
                return;
            }
            let m = debian::debian_mirror().expect("a Debian mirror in the host's apt sources");
            assert!(m.starts_with("http://") || m.starts_with("https://"), "{m}");
            assert!(!m.ends_with('/'), "{m}");
            let cache = debian::cache_root();
            assert!(cache.is_absolute(), "{}", cache.display());
        }

        #[test]
        fn fake_deb_is_valid_for_dpkg_deb() {
            if !support::require(support::have("dpkg-deb"), "dpkg-deb is needed") {
                return;
            }
            let tmp = tempfile::tempdir().unwrap();
            let v = ofed_like_debs(tmp.path());
            assert_eq!(
                v.iter()
                    .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                    .collect::<Vec<_>>(),
                [
                    "libibverbs1_2307mlnx47-1.2310036_amd64.deb",
                    "ibverbs-providers_2307mlnx47-1.2310036_amd64.deb",
                    "erdma-test-tool_1%3a2.0-1_all.deb"
                ]
            );
            let field = |deb: &Path, f: &str| {
                text(&debian::run_ok(
                    "dpkg-deb -f",
                    Command::new("dpkg-deb").arg("-f").arg(deb).arg(f),
                ))
                .trim()
                .to_string()
            };
            assert_eq!(field(&v[0], "Version"), debs::OFED_VERSION);
            assert_eq!(field(&v[0], "Multi-Arch"), "same");
            assert!(field(&v[1], "Provides").contains("libmlx5-1"));
            assert_eq!(
                field(&v[1], "Depends"),
                "libc6 (>= 2.34), libibverbs1 (= 2307mlnx47-1.2310036)"
            );
            assert_eq!(field(&v[2], "Version"), "1:2.0-1");
            let contents =
                text(&debian::run_ok("dpkg-deb -c", Command::new("dpkg-deb").arg("-c").arg(&v[0])));
            assert!(contents.contains("root/root"), "{contents}");
            assert!(
                contents.contains(
                    "./usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.47.0"
                ),
                "{contents}"
            );
            // Control members: md5sums for plain files, conffiles for the driver file.
            let x = tempfile::tempdir().unwrap();
            debian::run_ok(
                "dpkg-deb -e",
                Command::new("dpkg-deb").arg("-e").arg(&v[1]).arg(x.path()),
            );
            let md5 = std::fs::read_to_string(x.path().join("md5sums")).unwrap();
            assert!(md5.contains("  usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.47.0\n"), "{md5}");
            assert!(!md5.contains("mlx5.driver"), "{md5}");
            assert_eq!(
                std::fs::read_to_string(x.path().join("conffiles")).unwrap(),
                "/etc/libibverbs.d/mlx5.driver\n"
            );
            let y = tempfile::tempdir().unwrap();
            debian::run_ok(
                "dpkg-deb -e",
                Command::new("dpkg-deb").arg("-e").arg(&v[2]).arg(y.path()),
            );
            let postinst = std::fs::read_to_string(y.path().join("postinst")).unwrap();
            assert!(postinst.starts_with("#!/bin/sh\nset -e\n"), "{postinst}");
            // xz-compressed data member, as asked.
            let ar = text(&debian::run_ok("ar t", Command::new("ar").arg("t").arg(&v[0])));
            assert!(ar.contains("data.tar.xz"), "{ar}");
        }

        #[test]
        fn apt_repo_nested_is_verified_by_apt() {
            if !apt_repo::require_tools()
                || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
            {
                return;
            }
            let tmp = tempfile::tempdir().unwrap();
            let key = apt_repo::TestKey::generate();
            assert_eq!(key.fingerprint().len(), 40);
            assert!(key.armored_public().starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----"));
            let repo = apt_repo::AptRepo::build_under(
                "erdma/apt/debian",
                apt_repo::Layout::erdma(),
                &ofed_like_debs(&tmp.path().join("debs")),
                &key,
            );
            assert!(repo.url().ends_with("/erdma/apt/debian"), "{}", repo.url());
            assert_eq!(repo.suite(), "bookworm/erdma");
            for f in [
                "InRelease",
                "Release",
                "Release.gpg",
                "main/binary-amd64/Packages",
                "main/binary-amd64/Packages.gz",
                "main/binary-amd64/Packages.xz",
            ] {
                assert!(repo.dir().join("dists/bookworm/erdma").join(f).is_file(), "{f}");
            }
            let release = std::fs::read_to_string(repo.release_dir().join("Release")).unwrap();
            assert!(
                release.contains("Components: main\n")
                    && release.contains("Architectures: amd64\n"),
                "{release}"
            );
            assert!(release.contains(" main/binary-amd64/Packages.xz\n"), "{release}");

            let keyring = key.write_public(tmp.path(), "erdma-test.gpg");
            let apt = apt_repo::AptClient::new(&repo.source_line(&keyring));
            let out = apt.update();
            assert!(
                apt_repo::update_ok(&out),
                "apt-get update: {}\n{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            assert!(
                repo.get_paths()
                    .iter()
                    .any(|p| p == "/erdma/apt/debian/dists/bookworm/erdma/InRelease"),
                "{:?}",
                repo.get_paths()
            );
            let policy = apt.apt_cache(&["policy", "ibverbs-providers"]);
            assert!(text(&policy.stdout).contains(debs::OFED_VERSION), "{}", text(&policy.stdout));
            let dl = apt.apt_get(&["download", "libibverbs1"]);
            support::assert_success("apt-get download", &dl);

            // A flipped bit in a .deb: apt refuses the download.
            repo.tamper_deb("ibverbs-providers");
            let dl = apt.apt_get(&["download", "ibverbs-providers"]);
            assert!(!dl.status.success(), "{}", text(&dl.stdout));
            let msg = text(&dl.stderr) + &text(&dl.stdout);
            assert!(msg.contains("Hash Sum mismatch") || msg.contains("hash"), "{msg}");

            // One character of InRelease: update fails, with a fresh client and an old one.
            repo.tamper_inrelease();
            for client in [apt_repo::AptClient::new(&repo.source_line(&keyring)), apt] {
                let out = client.update();
                let err = text(&out.stderr) + &text(&out.stdout);
                assert!(
                    !apt_repo::update_ok(&out),
                    "apt-get update accepted a tampered InRelease\n{err}"
                );
                assert!(
                    err.contains("BADSIG") || err.contains("invalid") || err.contains("not signed"),
                    "{err}"
                );
            }
        }

        #[test]
        fn apt_repo_flat_wrong_key_and_tampered_index() {
            if !apt_repo::require_tools()
                || !support::require(support::have("dpkg-deb"), "dpkg-deb is needed")
            {
                return;
            }
            let tmp = tempfile::tempdir().unwrap();
            let key = apt_repo::TestKey::generate();
            let repo = apt_repo::AptRepo::build(
                apt_repo::Layout::Flat,
                &ofed_like_debs(&tmp.path().join("debs")),
                &key,
            );
            assert!(repo.url().starts_with("http://127.0.0.1:"));
            assert_eq!(repo.suite(), "./");
            for f in
                ["InRelease", "Release", "Release.gpg", "Packages", "Packages.gz", "Packages.xz"]
            {
                assert!(repo.dir().join(f).is_file(), "{f}");
            }
            let release = std::fs::read_to_string(repo.dir().join("Release")).unwrap();
            assert!(!release.contains("Components:"), "{release}");
            let packages = std::fs::read_to_string(repo.dir().join("Packages")).unwrap();
            assert!(
                packages.contains("Filename: pool/libibverbs1_2307mlnx47-1.2310036_amd64.deb\n"),
                "{packages}"
            );

            let asc = key.write_public(tmp.path(), "erdma-test.asc");
            let apt = apt_repo::AptClient::new(&repo.source_line(&asc));
            let out = apt.update();
            assert!(
                apt_repo::update_ok(&out),
                "apt-get update: {}\n{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            assert!(
                repo.get_paths().iter().any(|p| p == "/./Packages.xz"),
                "{:?}",
                repo.get_paths()
            );

            // Another key: NO_PUBKEY.
            let other = apt_repo::TestKey::generate();
            let wrong = other.write_public(tmp.path(), "other.gpg");
            let out = apt_repo::AptClient::new(&repo.source_line(&wrong)).update();
            assert!(!apt_repo::update_ok(&out));
            let err = text(&out.stderr) + &text(&out.stdout);
            assert!(err.contains("NO_PUBKEY"), "{err}");

            // A different Packages.xz that Release does not list.
            repo.tamper_packages();
            let out = apt_repo::AptClient::new(&repo.source_line(&asc)).update();
            let err = text(&out.stderr) + &text(&out.stdout);
            assert!(
                !apt_repo::update_ok(&out),
                "apt-get update accepted a tampered Packages.xz\n{err}"
            );
            assert!(err.contains("Hash Sum mismatch") || err.contains("unexpected size"), "{err}");
        }

        #[test]
        fn real_debs_closure_net() {
            if !debs::require_download() {
                return;
            }
            let t0 = std::time::Instant::now();
            let v = debs::real_debs_closure();
            eprintln!("real_debs_closure: {:.1?}", t0.elapsed());
            assert_eq!(v.len(), debs::ERDMA_CLOSURE.len());
            for (name, deb) in debs::ERDMA_CLOSURE.iter().zip(&v) {
                let out = debian::run_ok(
                    "dpkg-deb -f",
                    Command::new("dpkg-deb").arg("-f").arg(deb).arg("Package"),
                );
                assert_eq!(text(&out).trim(), *name, "{}", deb.display());
                assert!(deb.starts_with(debian::cache_root()), "{}", deb.display());
            }
            // Cached: same files, no download (a download would put a new file in its place:
            // a new inode). Told by the file, not by the time: other tests hold the cache's
            // lock while they download.
            use std::os::unix::fs::MetadataExt;
            let stamp = |p: &std::path::Path| {
                let m = std::fs::metadata(p).unwrap();
                (m.ino(), m.mtime(), m.mtime_nsec())
            };
            let before = stamp(&v[2]);
            assert_eq!(debs::real_debs(&["libibverbs1"]), vec![v[2].clone()]);
            assert_eq!(stamp(&v[2]), before, "{} was downloaded again", v[2].display());
        }

        #[test]
        fn real_debs_served_by_apt_repo_net() {
            if !debs::require_download() || !apt_repo::require_tools() {
                return;
            }
            let v = debs::real_debs_closure();
            let key = apt_repo::TestKey::generate();
            let repo = apt_repo::AptRepo::build(apt_repo::Layout::erdma(), &v, &key);
            let tmp = tempfile::tempdir().unwrap();
            let apt =
                apt_repo::AptClient::new(&repo.source_line(&key.write_public(tmp.path(), "k.gpg")));
            let out = apt.update();
            assert!(apt_repo::update_ok(&out), "{}\n{}", text(&out.stdout), text(&out.stderr));
            let mut args = vec!["download"];
            args.extend(debs::ERDMA_CLOSURE);
            support::assert_success("apt-get download from the test repo", &apt.apt_get(&args));
            for deb in &v {
                let got = apt.downloads().join(deb.file_name().unwrap());
                assert_eq!(
                    std::fs::read(&got).unwrap(),
                    std::fs::read(deb).unwrap(),
                    "{}",
                    got.display()
                );
            }
        }

        #[test]
        fn debian12_base_root_net() {
            if !debian::require_base() {
                return;
            }
            let t0 = std::time::Instant::now();
            let img = debian::debian12_base();
            eprintln!("debian12_base: {:.1?}", t0.elapsed());
            assert_eq!(img.layers.len(), 1);
            let config = img.config();
            assert_eq!(config["architecture"], "amd64");
            assert_eq!(config["config"]["Cmd"], serde_json::json!(["bash"]));
            assert_eq!(
                config["config"]["Env"],
                serde_json::json!([format!("PATH={}", debian::DEBIAN_PATH)])
            );
            let files = layer_entries(&img, 0);
            // As in the official images, etc/os-release is a relative symlink.
            assert_eq!(files["etc/os-release"].3.as_deref(), Some("../usr/lib/os-release"));
            let os = text(&files["usr/lib/os-release"].4);
            assert!(
                os.contains("VERSION_ID=\"12\"") && os.contains("VERSION_CODENAME=bookworm"),
                "{os}"
            );
            // usr-merged: /bin is a symlink.
            assert!(files["bin"].0.is_symlink() && files["bin"].3.as_deref() == Some("usr/bin"));
            assert!(files["usr/bin/bash"].0.is_file());
            assert!(files["usr/bin/apt-get"].0.is_file());
            assert_eq!(files["tmp/"].1, 0o1777);
            assert_eq!(files["root/"].1, 0o700);
            // setuid kept (passwd's su is in util-linux: usr/bin/su).
            assert_eq!(files["usr/bin/su"].1 & 0o4000, 0o4000);
            assert!(files.contains_key("dev/") && files.contains_key("proc/"));
            assert!(
                !files.keys().any(|k| k.starts_with("dev/") && k != "dev/"),
                "device nodes in the layer"
            );
            assert!(!files
                .keys()
                .any(|k| k.starts_with("var/cache/apt/archives/") && k.ends_with(".deb")));
            for host_specific in ["etc/resolv.conf", "etc/hostname", "var/log/bootstrap.log"] {
                assert!(!files.contains_key(host_specific), "{host_specific}");
            }
            let status = text(&files["var/lib/dpkg/status"].4);
            assert!(status.contains("Package: apt\nStatus: install ok installed\n"));
            assert!(!status.contains("Package: libibverbs1\n"));
            let mirror = debian::debian_mirror().unwrap();
            let sources = text(&files["etc/apt/sources.list"].4);
            assert!(sources.contains(&format!("deb {mirror} bookworm main")), "{sources}");
            if support::have("skopeo") {
                support::assert_success(
                    "skopeo inspect",
                    &support::skopeo(["inspect", &img.reference()]),
                );
            }
            // A private copy has the same layer.
            let tmp = tempfile::tempdir().unwrap();
            let copy = debian::debian12_base_copy(tmp.path());
            assert_eq!(copy.layers[0].digest, img.layers[0].digest);
            assert_eq!(copy.manifest_digest, img.manifest_digest);
        }

        #[test]
        fn debs_closure_matches_apt_root_net() {
            if !debian::require_base() || !debs::require_download() {
                return;
            }
            let rootfs = debian::debian12_rootfs();
            let status = rootfs.join("var/lib/dpkg/status");
            let out = Command::new("apt-get")
                .args(["-s", "--no-install-recommends", "-o"])
                .arg(format!("Dir::State::status={}", status.display()))
                .arg("install")
                .args(debs::ERDMA_PACKAGES)
                .env("LC_ALL", "C")
                .output()
                .unwrap();
            support::assert_success("apt-get -s install", &out);
            let mut inst: Vec<String> = text(&out.stdout)
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("Inst ").and_then(|r| r.split(' ').next()).map(str::to_string)
                })
                .collect();
            inst.sort();
            let mut want: Vec<String> = debs::ERDMA_CLOSURE.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(inst, want, "{}", text(&out.stdout));
        }

        #[test]
        fn ngc_like_base_root_net() {
            if !debs::require_ngc_like() {
                return;
            }
            let tmp = tempfile::tempdir().unwrap();
            let t0 = std::time::Instant::now();
            let img = debs::ngc_like_base(tmp.path());
            eprintln!("ngc_like_base: {:.1?}", t0.elapsed());
            let base = debian::debian12_base();
            assert_eq!(img.layers.len(), 2);
            assert_eq!(img.layers[0].digest, base.layers[0].digest);
            let top = layer_entries(&img, 1);
            let status = text(&top["var/lib/dpkg/status"].4);
            let stanza = |name: &str| {
                status
                    .split("\n\n")
                    .find(|s| s.starts_with(&format!("Package: {name}\n")))
                    .unwrap_or_else(|| panic!("no {name} in status"))
                    .to_string()
            };
            for name in ["libibverbs1", "ibverbs-providers"] {
                let s = stanza(name);
                assert!(s.contains("Status: install ok installed\n"), "{s}");
                assert!(s.contains(&format!("Version: {}\n", debs::OFED_VERSION)), "{s}");
            }
            assert!(stanza("libnl-3-200").contains("Status: install ok installed\n"));
            assert!(stanza("apt").contains("Status: install ok installed\n"));
            assert!(
                stanza("ibverbs-providers").contains("Conffiles:\n /etc/libibverbs.d/mlx5.driver ")
            );
            let list = text(&top["var/lib/dpkg/info/libibverbs1:amd64.list"].4);
            assert!(list.contains("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.47.0\n"), "{list}");
            assert!(top.contains_key("var/lib/dpkg/info/ibverbs-providers:amd64.md5sums"));
            assert!(top["usr/lib/x86_64-linux-gnu/libibverbs.so.1"].0.is_symlink());
            assert!(top.contains_key("usr/lib/x86_64-linux-gnu/libmlx5.so.1.24.47.0"));
            assert!(top.contains_key("usr/lib/x86_64-linux-gnu/libnl-3.so.200"));
            assert_eq!(text(&top[debs::MLNX_SOURCE_PATH].4), debs::MLNX_SOURCE);
            // Only what changed: bash is in the base layer alone, and nothing was deleted.
            assert!(!top.contains_key("usr/bin/bash"));
            assert!(
                !top.keys().any(|k| k.contains(".wh.")),
                "{:?}",
                top.keys().filter(|k| k.contains(".wh.")).collect::<Vec<_>>()
            );
            assert!(top.len() < 200, "{} entries: {:?}", top.len(), top.keys().collect::<Vec<_>>());
            if support::have("skopeo") {
                support::assert_success(
                    "skopeo inspect",
                    &support::skopeo(["inspect", &img.reference()]),
                );
            }
        }

        #[test]
        fn ngc_like_base_runs_in_docker_root_net() {
            if !debs::require_ngc_like()
                || !support::require_docker()
                || !support::require(support::have("skopeo"), "skopeo is needed")
            {
                return;
            }
            let tmp = tempfile::tempdir().unwrap();
            let img = debs::ngc_like_base(tmp.path());
            let tag = format!("erdma-selftest/ngc-like:{}", std::process::id());
            support::assert_success(
                "skopeo copy to docker",
                &support::skopeo([
                    "copy",
                    "--quiet",
                    &img.reference(),
                    &format!("docker-daemon:{tag}"),
                ]),
            );
            let out = Command::new("docker")
                .args(["run", "--rm", "--network", "none", &tag, "bash", "-c"])
                .arg("set -e; cat /etc/debian_version; dpkg-query -W -f='${Version}\\n' libibverbs1 ibverbs-providers libnl-3-200; dpkg --audit; apt-get -q check >/dev/null; cat /etc/apt/sources.list.d/mellanox_mlnx_ofed.list")
                .output()
                .unwrap();
            support::docker_rmi(&tag);
            support::assert_success("docker run", &out);
            let stdout = text(&out.stdout);
            let lines: Vec<&str> = stdout.lines().collect();
            assert!(lines[0].starts_with("12."), "{stdout}");
            assert_eq!(lines[1], debs::OFED_VERSION, "{stdout}");
            assert_eq!(lines[2], debs::OFED_VERSION, "{stdout}");
            assert!(lines[3].starts_with("3.7"), "{stdout}");
            assert_eq!(format!("{}\n", lines[4]), debs::MLNX_SOURCE);
        }
    }
}
