//! Transfers that go wrong on the network: a mirror that stalls fails the build in bounded
//! time, naming the URL, and writes nothing.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::build_env;
use crate::support::testdata;

/// Serves `root` over HTTP/1.1 on 127.0.0.1, one thread per connection, except that a request
/// whose path `stalls` picks gets its headers and half of its body, then nothing more, with
/// the connection held open: a mirror that hangs mid-transfer. Returns the base URL.
fn stalling_mirror(root: PathBuf, stalls: fn(&str) -> bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let root = root.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                }
                let mut s = s;
                let Ok(body) = std::fs::read(root.join(path.trim_start_matches('/'))) else {
                    let _ = s.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    return;
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                if stalls(&path) {
                    let _ = s.write_all(&body[..body.len() / 2]);
                    let _ = s.flush();
                    // Hold the connection open, sending nothing, until the client gives up.
                    let _ = s.read(&mut [0u8; 1]);
                    std::thread::sleep(Duration::from_secs(600));
                    return;
                }
                let _ = s.write_all(&body);
            });
        }
    });
    url
}

/// Builds the offline demo against `mirror` with a 1 s read timeout; returns (stderr, time taken).
fn build_through(mirror: &str, out: &Path) -> (String, Duration) {
    let base = format!("oci:{}:latest", testdata("images/debian12-mini"));
    let key = testdata("repos/debian-demo/demo-key.asc");
    let cache = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let o = build_env(
        &[
            "build",
            "--base",
            &base,
            "--mirror",
            mirror,
            "--keyring",
            &key,
            "--read-timeout",
            "1",
            "--output",
            &format!("oci:{}:x", out.display()),
        ],
        &[("XDG_CACHE_HOME", cache.path().to_str().unwrap())],
    );
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    (stderr, took)
}

/// 4 tries × 1 s of silence + 3.5 s of backoff is the bound per file; a file is tried on one
/// mirror. Generous for a loaded machine, far below "forever".
const BOUND: Duration = Duration::from_secs(30);

#[test]
fn a_mirror_that_stalls_mid_package_fails_the_build_in_bounded_time() {
    let url = stalling_mirror(testdata("repos/debian-demo").into(), |p| p.ends_with(".deb"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (stderr, took) = build_through(&url, &out);
    assert!(took < BOUND, "took {took:?}\n{stderr}");
    let error =
        stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{stderr}"));
    // The error names the package's URL and why: the server went silent.
    assert!(error.contains(&format!("{url}/pool/")) && error.contains(".deb"), "{error}");
    assert!(stderr.contains("sent nothing for 1 s (read timeout"), "{stderr}");
    // It was retried before giving up.
    assert!(stderr.matches("retrying in").count() >= 3, "{stderr}");
    assert!(!out.exists(), "a failed build wrote {out:?}");
}

#[test]
fn a_mirror_that_stalls_on_its_release_file_fails_the_build_in_bounded_time() {
    let url = stalling_mirror(testdata("repos/debian-demo").into(), |p| p.ends_with("InRelease"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let (stderr, took) = build_through(&url, &out);
    assert!(took < BOUND, "took {took:?}\n{stderr}");
    assert!(
        stderr.contains(&format!("{url}/dists/bookworm/InRelease"))
            && stderr.contains("sent nothing for 1 s"),
        "{stderr}"
    );
    assert!(!out.exists());
}
