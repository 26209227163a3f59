//! Integration tests for erdma-build against real components (see tests/support).

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
            reqs.iter()
                .any(|r| r.method == "GET" && r.uri == "/v2/" && r.status == 200),
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
        if !support::require(
            support::have("skopeo"),
            "skopeo is needed (run scripts/setup)",
        ) {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let img = fixture(&tmp.path().join("layout"));
        let out = support::skopeo(["inspect", &img.reference()]);
        support::assert_success("skopeo inspect", &out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["Digest"], img.manifest_digest.as_str());
        assert_eq!(v["Layers"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["Env"],
            serde_json::json!(["PATH=/usr/bin:/bin", "FOO=bar"])
        );

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
        assert_eq!(
            img.config()["rootfs"]["diff_ids"].as_array().unwrap().len(),
            2
        );
        let read = |i: usize| {
            let f = std::fs::File::open(img.blob_path(&img.layers[i].digest)).unwrap();
            let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(f));
            tar.entries()
                .unwrap()
                .map(|e| {
                    let mut e = e.unwrap();
                    let path = e.path().unwrap().to_string_lossy().into_owned();
                    let kind = e.header().entry_type();
                    let mode = e.header().mode().unwrap();
                    let link = e
                        .link_name()
                        .unwrap()
                        .map(|l| l.to_string_lossy().into_owned());
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
        assert!(
            img.layers[0].size > size,
            "{} <= {size}",
            img.layers[0].size
        );
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
    ) -> (
        Registry,
        FaultyProxy,
        support::OciFixture,
        std::process::Output,
    ) {
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
        let get = || {
            support::registry::http_request(proxy.addr(), "GET", "/v2/")
                .unwrap()
                .0
        };
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
}
