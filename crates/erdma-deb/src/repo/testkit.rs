//! Test helpers shared by the repository tests: a throw-away GnuPG home, a local HTTP server,
//! a signed repository published into a folder.
#![allow(dead_code)]

use super::*;
use erdma_common::dates::civil_from_days;
use erdma_common::dates::now;
use erdma_http::Client;
use sha2::{Digest as _, Sha256};
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use std::time::Instant;

/// A temporary GNUPGHOME; its gpg-agent is stopped on drop.
pub(crate) struct Gpg {
    pub(crate) home: tempfile::TempDir,
}

impl Gpg {
    pub(crate) fn new() -> Self {
        // Short path: the agent's socket lives in it (sockaddr_un holds 108 bytes).
        let home = tempfile::Builder::new()
            .prefix("gpg")
            .tempdir_in("/tmp")
            .expect("creating a GNUPGHOME");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        Gpg { home }
    }

    pub(crate) fn run(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args(["--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running gpg (is gnupg installed?)");
        assert!(
            out.status.success(),
            "gpg {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `gpg --quick-gen-key`; returns the primary key's fingerprint.
    pub(crate) fn gen_key(
        &self,
        email: &str,
        algo: &str,
        usage: &str,
        expire: &str,
        extra: &[&str],
    ) -> String {
        let uid = format!("Test {email} <{email}>");
        let mut args = extra.to_vec();
        args.extend(["--quick-gen-key", &uid, algo, usage, expire]);
        self.run(&args);
        self.fingerprints(email)[0].clone()
    }

    /// Fingerprints of the primary key and subkeys of `email`, in order.
    pub(crate) fn fingerprints(&self, email: &str) -> Vec<String> {
        let out = self.run(&["--with-colons", "--list-keys", email]);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("fpr:"))
            .map(|l| l.split(':').nth(9).unwrap().to_owned())
            .collect()
    }

    pub(crate) fn export(&self, who: &str, armor: bool) -> Vec<u8> {
        let mut args = vec!["--export"];
        if armor {
            args.insert(0, "--armor");
        }
        args.push(who);
        let out = self.run(&args);
        assert!(!out.is_empty(), "gpg exported nothing for {who}");
        out
    }

    pub(crate) fn sign(&self, signer: &str, data: &[u8], mode: &[&str], extra: &[&str]) -> Vec<u8> {
        let input = self.home.path().join("input");
        let output = self.home.path().join("output");
        std::fs::write(&input, data).unwrap();
        let _ = std::fs::remove_file(&output);
        let mut args = extra.to_vec();
        args.extend(["--yes", "--local-user", signer]);
        args.extend(mode);
        args.extend(["--output", output.to_str().unwrap(), input.to_str().unwrap()]);
        self.run(&args);
        std::fs::read(&output).unwrap()
    }

    pub(crate) fn clearsign(&self, signer: &str, data: &[u8]) -> Vec<u8> {
        self.sign(signer, data, &["--clearsign"], &[])
    }

    /// `gpg -abs` (armoured) or `gpg -bs` (binary).
    pub(crate) fn detach_sign(&self, signer: &str, data: &[u8], armor: bool) -> Vec<u8> {
        let mode: &[&str] = if armor { &["--armor", "--detach-sign"] } else { &["--detach-sign"] };
        self.sign(signer, data, mode, &[])
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", self.home.path())
            .args(["--kill", "gpg-agent"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `python3 -m http.server` serving a directory on 127.0.0.1; killed on drop.
pub(crate) struct HttpServer {
    pub(crate) child: Child,
    pub(crate) url: String,
}

impl HttpServer {
    pub(crate) fn start(dir: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string(), "--directory"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting python3 -m http.server");
        let server = HttpServer { child, url: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "http.server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) const DEB_SHA: &str = "5d41402abc4b2a76b9719d911017c592aaf4c6f8c2a0c8f8f4c6f8c2a0c8f8f4";

pub(crate) fn packages_text(prefix: &str) -> String {
    format!(
        "Package: erdma-tools\n\
         Version: 1.0-1\n\
         Architecture: amd64\n\
         Depends: libc6 (>= 2.34), liberdma1 (= 1.0-1)\n\
         Filename: {prefix}erdma-tools_1.0-1_amd64.deb\n\
         Size: 1234\n\
         SHA256: {DEB_SHA}\n\
         Description: eRDMA tools\n \
         Tools for the Alibaba Cloud elastic RDMA adapter.\n\
         \n\
         Package: liberdma1\n\
         Version: 1.0-1\n\
         Architecture: amd64\n\
         Filename: {prefix}liberdma1_1.0-1_amd64.deb\n\
         Size: 99\n\
         SHA256: {}\n\
         Description: eRDMA provider for libibverbs\n",
        "AB".repeat(32)
    )
}

pub(crate) fn compress(name: &str, data: &[u8]) -> Vec<u8> {
    if name.ends_with(".xz") {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
        e.write_all(data).unwrap();
        e.finish().unwrap()
    } else if name.ends_with(".gz") {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    } else {
        data.to_vec()
    }
}

pub(crate) fn rfc2822(secs: i64) -> String {
    pub(crate) const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    pub(crate) const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let days = secs.div_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let s = secs.rem_euclid(86_400);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} UTC",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[m as usize - 1],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

pub(crate) fn apt_ftparchive_available() -> bool {
    Command::new("apt-ftparchive")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A Release written by hand: `header`, then the SHA256 of every index under `meta`.
pub(crate) fn hand_release(meta: &Path, header: &str) -> String {
    pub(crate) fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.file_name().unwrap().to_str().unwrap().starts_with("Packages") {
                let rel = p.strip_prefix(base).unwrap().to_str().unwrap().to_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut files = Vec::new();
    walk(meta, meta, &mut files);
    files.sort();
    let mut text = header.to_owned();
    text.push_str("SHA256:\n");
    for (rel, data) in files {
        text.push_str(&format!(
            " {} {:>8} {rel}\n",
            hex::encode(Sha256::digest(&data)),
            data.len()
        ));
    }
    text
}

/// A signed repository in a temporary directory, to be served over HTTP.
pub(crate) struct Fixture {
    pub(crate) root: tempfile::TempDir,
    pub(crate) gpg: Gpg,
    pub(crate) fpr: String,
    pub(crate) keyring: Vec<u8>,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        let gpg = Gpg::new();
        let fpr = gpg.gen_key("repo@example.org", "ed25519", "sign", "never", &[]);
        let keyring = gpg.export(&fpr, false);
        Fixture { root: tempfile::tempdir().unwrap(), gpg, fpr, keyring }
    }

    /// Writes `index_dir/Packages.{formats}` below `root/meta_rel`, a Release for them
    /// (by apt-ftparchive unless `header` asks for a hand-written one), InRelease and
    /// Release.gpg. Returns the metadata directory.
    pub(crate) fn publish(
        &self,
        meta_rel: &str,
        index_dir: &str,
        formats: &[&str],
        filename_prefix: &str,
        components: Option<&str>,
        header: Option<&str>,
    ) -> PathBuf {
        let meta = self.root.path().join(meta_rel);
        let idx = meta.join(index_dir);
        std::fs::create_dir_all(&idx).unwrap();
        let text = packages_text(filename_prefix);
        for f in formats {
            let name = format!("Packages{f}");
            std::fs::write(idx.join(&name), compress(&name, text.as_bytes())).unwrap();
        }
        let release = match header {
            None if apt_ftparchive_available() => {
                let mut cmd = Command::new("apt-ftparchive");
                for (k, v) in [
                    ("Origin", "erdma-test"),
                    ("Label", "erdma"),
                    ("Suite", "bookworm"),
                    ("Codename", "bookworm"),
                    ("Architectures", "amd64 arm64"),
                ] {
                    cmd.arg("-o").arg(format!("APT::FTPArchive::Release::{k}={v}"));
                }
                if let Some(c) = components {
                    cmd.arg("-o").arg(format!("APT::FTPArchive::Release::Components={c}"));
                }
                let out = cmd.args(["release", "."]).current_dir(&meta).output().unwrap();
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8(out.stdout).unwrap()
            }
            None => {
                let mut h = format!(
                    "Origin: erdma-test\nLabel: erdma\nSuite: bookworm\nCodename: bookworm\n\
                     Date: {}\nArchitectures: amd64 arm64\n",
                    rfc2822(now())
                );
                if let Some(c) = components {
                    h.push_str(&format!("Components: {c}\n"));
                }
                hand_release(&meta, &h)
            }
            Some(h) => hand_release(&meta, h),
        };
        self.sign_release(&meta, release.as_bytes());
        meta
    }

    pub(crate) fn sign_release(&self, meta: &Path, release: &[u8]) {
        std::fs::write(meta.join("Release"), release).unwrap();
        std::fs::write(meta.join("InRelease"), self.gpg.clearsign(&self.fpr, release)).unwrap();
        std::fs::write(meta.join("Release.gpg"), self.gpg.detach_sign(&self.fpr, release, true))
            .unwrap();
    }

    pub(crate) fn spec(&self, url: &str, suite: &str, components: &[&str]) -> RepoSpec {
        RepoSpec {
            url: url.to_owned(),
            suite: suite.to_owned(),
            components: components.iter().map(|c| c.to_string()).collect(),
            arch: "amd64".into(),
            keyring: self.keyring.clone(),
        }
    }
}

pub(crate) fn client() -> Client {
    Client::new(erdma_http::Timeouts::default())
}

pub(crate) fn err_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

pub(crate) const RELEASE: &str = "Origin: erdma-test\nLabel: erdma\nSuite: bookworm\n\
    Description: a line\n -starting with a dash inside a continuation\n\
    -----\nSHA256:\n 0000000000000000000000000000000000000000000000000000000000000000 1 main/x\n";
