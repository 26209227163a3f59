//! Real, signed apt repositories built by the tests and served on 127.0.0.1, and an isolated
//! apt client configuration to check them with the real apt.
//!
//! - [`TestKey`]: an OpenPGP key generated at test time with gpg in a temporary GNUPGHOME.
//! - [`AptRepo`]: `apt-ftparchive` indexes (Packages, .gz, .xz; Release), signed `InRelease`
//!   (clearsigned) and `Release.gpg` (detached, armoured), served by
//!   `python3 -m http.server`; helpers to tamper with each level of the chain of trust.
//! - [`AptClient`]: `apt-get` with its own `APT_CONFIG` (sources, lists, cache, dpkg status,
//!   no host configuration parts), for self-tests and for comparing erdma-build with apt.
//!
//! Layouts follow Debian's repository format
//! (<https://wiki.debian.org/DebianRepository/Format>): [`Layout::Nested`] is the usual
//! `dists/SUITE/COMPONENT/binary-ARCH/` tree (Alibaba Cloud's eRDMA repository uses a suite
//! with a slash, `jammy/erdma`), [`Layout::Flat`] the "flat repository format" (`deb URL ./`).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::debian::run_ok;

/// Whether `gpg`, `apt-ftparchive`, `xz`, `gzip` and python3 are there.
pub fn can_build() -> bool {
    ["gpg", "apt-ftparchive", "xz", "gzip"].iter().all(|t| super::have(t)) && super::have(&python())
}

#[track_caller]
pub fn require_tools() -> bool {
    super::require(
        can_build(),
        "gpg, apt-ftparchive (apt-utils), xz-utils and python3 are needed (run scripts/setup)",
    )
}

/// Debian's python3 when present (a pyenv shim on PATH may pick another).
fn python() -> String {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3".into()
    } else {
        "python3".into()
    }
}

/// A test-only OpenPGP key pair in its own GNUPGHOME; the agent is stopped on drop.
pub struct TestKey {
    home: tempfile::TempDir,
    fingerprint: String,
}

impl TestKey {
    /// UID of every generated key.
    pub const UID: &'static str = "erdma-kit test repo (TEST ONLY)";

    /// A new Ed25519 signing key (instant to generate).
    pub fn generate() -> TestKey {
        Self::generate_with("ed25519")
    }

    /// A new key of gpg `--quick-gen-key` algorithm `algo` (`ed25519`, `rsa3072`, ...).
    pub fn generate_with(algo: &str) -> TestKey {
        // Short path: gpg-agent's socket lives in GNUPGHOME and sun_path is 108 bytes.
        let home = tempfile::Builder::new().prefix("erdma-gpg-").tempdir_in("/tmp").unwrap();
        let mut key = TestKey { home, fingerprint: String::new() };
        run_ok(
            "gpg --quick-gen-key",
            key.gpg().args([
                "--passphrase",
                "",
                "--quick-gen-key",
                Self::UID,
                algo,
                "sign",
                "never",
            ]),
        );
        let listing = run_ok("gpg --list-keys", key.gpg().args(["--with-colons", "--list-keys"]));
        key.fingerprint = String::from_utf8_lossy(&listing)
            .lines()
            .find_map(|l| l.strip_prefix("fpr:").map(|r| r.trim_matches(':').to_string()))
            .expect("gpg lists a fingerprint");
        key
    }

    fn gpg(&self) -> Command {
        let mut c = Command::new("gpg");
        c.env("GNUPGHOME", self.home.path())
            .args(["--batch", "--yes", "--quiet", "--pinentry-mode", "loopback"])
            .stdin(Stdio::null());
        c
    }

    /// 40 upper-case hex digits.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn armored_public(&self) -> String {
        let out = run_ok(
            "gpg --export --armor",
            self.gpg().args(["--armor", "--export", &self.fingerprint]),
        );
        String::from_utf8(out).unwrap()
    }

    pub fn binary_public(&self) -> Vec<u8> {
        run_ok("gpg --export", self.gpg().args(["--export", &self.fingerprint]))
    }

    /// Writes the public key as `dir/NAME` (binary when NAME ends in `.gpg`, armoured
    /// otherwise, e.g. `.asc`, as apt's `signed-by` expects) and returns the path.
    pub fn write_public(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        if name.ends_with(".gpg") {
            fs::write(&p, self.binary_public()).unwrap();
        } else {
            fs::write(&p, self.armored_public()).unwrap();
        }
        p
    }

    /// `gpg --clearsign` (SHA-512), as `InRelease`.
    pub fn clearsign(&self, input: &Path, output: &Path) {
        run_ok(
            "gpg --clearsign",
            self.gpg()
                .args(["--digest-algo", "SHA512", "--local-user", &self.fingerprint])
                .arg("--output")
                .arg(output)
                .arg("--clearsign")
                .arg(input),
        );
    }

    /// `gpg --armor --detach-sign` (SHA-512), as `Release.gpg`.
    pub fn detach_sign(&self, input: &Path, output: &Path) {
        run_ok(
            "gpg --detach-sign",
            self.gpg()
                .args(["--digest-algo", "SHA512", "--local-user", &self.fingerprint])
                .arg("--output")
                .arg(output)
                .args(["--armor", "--detach-sign"])
                .arg(input),
        );
    }
}

/// Stops the gpg-agent a test's GNUPGHOME started, so no daemon outlives the test.
pub fn kill_gpg_agent(home: &Path) {
    let _ = Command::new("gpgconf")
        .env("GNUPGHOME", home)
        .args(["--kill", "gpg-agent"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Drop for TestKey {
    fn drop(&mut self) {
        kill_gpg_agent(self.home.path());
    }
}

/// Where the indexes go in the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `dists/SUITE/{InRelease,Release,Release.gpg}` and
    /// `dists/SUITE/COMPONENT/binary-amd64/Packages{,.gz,.xz}`; `suite` may contain a slash
    /// (`bookworm/erdma`, like Alibaba Cloud's `jammy/erdma`). Source line:
    /// `deb URL SUITE COMPONENT`.
    Nested { suite: String, component: String },
    /// `Packages*`, `Release`, `InRelease`, `Release.gpg` at the top. Source line:
    /// `deb URL ./`.
    Flat,
}

impl Layout {
    /// `Nested { suite: "bookworm/erdma", component: "main" }`, the shape of Alibaba Cloud's
    /// eRDMA repository.
    pub fn erdma() -> Layout {
        Layout::Nested { suite: "bookworm/erdma".into(), component: "main".into() }
    }
}

/// A signed apt repository under a temporary directory, served over HTTP on 127.0.0.1 until
/// dropped.
pub struct AptRepo {
    layout: Layout,
    /// What is served (`www/`); the repository is `www/PREFIX`.
    www: PathBuf,
    prefix: String,
    port: u16,
    child: Child,
    log_path: PathBuf,
    fingerprint: String,
    // Last: removed after the server is gone.
    tmp: tempfile::TempDir,
}

/// `Origin` and `Label` of every generated Release file.
pub const ORIGIN: &str = "erdma-kit-test";

impl AptRepo {
    /// Builds a repository holding copies of `debs` (in `pool/`), indexed, signed with `key`,
    /// and starts serving it at `http://127.0.0.1:PORT/`.
    pub fn build(layout: Layout, debs: &[PathBuf], key: &TestKey) -> AptRepo {
        Self::build_under("", layout, debs, key)
    }

    /// [`AptRepo::build`] with the repository below a URL path, e.g. `erdma/apt/debian`
    /// (Alibaba Cloud serves `…/erdma/apt/ubuntu`): [`AptRepo::url`] then ends in it.
    pub fn build_under(prefix: &str, layout: Layout, debs: &[PathBuf], key: &TestKey) -> AptRepo {
        let tmp = tempfile::Builder::new().prefix("erdma-apt-repo-").tempdir().unwrap();
        let www = tmp.path().join("www");
        let prefix = prefix.trim_matches('/').to_string();
        let dir = if prefix.is_empty() { www.clone() } else { www.join(&prefix) };
        fs::create_dir_all(dir.join("pool")).unwrap();
        for deb in debs {
            let name = deb.file_name().expect("a .deb file name");
            fs::copy(deb, dir.join("pool").join(name))
                .unwrap_or_else(|e| panic!("copy {}: {e}", deb.display()));
        }
        write_indexes(&dir, &layout, key);
        let log_path = tmp.path().join("http.log");
        let (child, port) = serve(&www, &log_path);
        AptRepo {
            layout,
            www,
            prefix,
            port,
            child,
            log_path,
            fingerprint: key.fingerprint().to_string(),
            tmp,
        }
    }

    /// `http://127.0.0.1:PORT` (followed by `/PREFIX` for [`AptRepo::build_under`]).
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("http://127.0.0.1:{}", self.port)
        } else {
            format!("http://127.0.0.1:{}/{}", self.port, self.prefix)
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The repository's directory (what [`AptRepo::url`] points at).
    pub fn dir(&self) -> PathBuf {
        if self.prefix.is_empty() {
            self.www.clone()
        } else {
            self.www.join(&self.prefix)
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The suite (`bookworm/erdma`), or `./` for a flat repository.
    pub fn suite(&self) -> &str {
        match &self.layout {
            Layout::Nested { suite, .. } => suite,
            Layout::Flat => "./",
        }
    }

    /// Components (`["main"]`); none for a flat repository.
    pub fn components(&self) -> Vec<String> {
        match &self.layout {
            Layout::Nested { component, .. } => vec![component.clone()],
            Layout::Flat => Vec::new(),
        }
    }

    /// Fingerprint of the key that signed it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// `deb [signed-by=KEYRING] URL SUITE COMPONENT` (or `... URL ./`), one line.
    pub fn source_line(&self, keyring: &Path) -> String {
        let mut line =
            format!("deb [signed-by={}] {}/ {}", keyring.display(), self.url(), self.suite());
        for c in self.components() {
            line.push(' ');
            line.push_str(&c);
        }
        line
    }

    /// Directory holding InRelease, Release and Release.gpg.
    pub fn release_dir(&self) -> PathBuf {
        release_dir(&self.dir(), &self.layout)
    }

    /// Directory holding Packages, Packages.gz and Packages.xz.
    pub fn packages_dir(&self) -> PathBuf {
        packages_dir(&self.dir(), &self.layout)
    }

    /// The `.deb` in `pool/` whose name starts with `NAME_`.
    pub fn pool_deb(&self, name: &str) -> PathBuf {
        let prefix = format!("{name}_");
        fs::read_dir(self.dir().join("pool"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
            .unwrap_or_else(|| panic!("no {name}_*.deb in the repository's pool"))
    }

    /// Changes one character of the signed text of `InRelease` (the `Origin` value): its
    /// signature no longer verifies. `Release` and `Release.gpg` stay valid.
    pub fn tamper_inrelease(&self) {
        let p = self.release_dir().join("InRelease");
        let text = fs::read_to_string(&p).unwrap();
        let from = format!("\nOrigin: {ORIGIN}\n");
        assert!(text.contains(&from), "no Origin line in InRelease:\n{text}");
        let to = format!("\nOrigin: {}X\n", &ORIGIN[..ORIGIN.len() - 1]);
        fs::write(&p, text.replacen(&from, &to, 1)).unwrap();
        bump_mtime(&p);
    }

    /// Replaces `Packages.xz` and `Packages.gz` with valid streams of different content (an
    /// extra field in the first stanza); `Release` still lists the old hashes and sizes.
    pub fn tamper_packages(&self) {
        let p = self.packages_dir().join("Packages");
        let text = fs::read_to_string(&p).unwrap();
        let modified = match text.find('\n') {
            Some(i) => format!("{}\nX-Tampered: yes{}", &text[..i], &text[i..]),
            None => "Package: tampered\nVersion: 1\nArchitecture: all\n".into(),
        };
        let tmp = self.tmp.path().join("Packages.tampered");
        fs::write(&tmp, modified).unwrap();
        for (tool, name) in [("xz", "Packages.xz"), ("gzip", "Packages.gz")] {
            let dest = self.packages_dir().join(name);
            if dest.exists() {
                let packed = run_ok(tool, Command::new(tool).args(["-9", "-c"]).arg(&tmp));
                fs::write(&dest, packed).unwrap();
                bump_mtime(&dest);
            }
        }
    }

    /// Flips one bit in the middle of `pool/NAME_*.deb` (same size, wrong hashes).
    pub fn tamper_deb(&self, name: &str) {
        let p = self.pool_deb(name);
        let mut bytes = fs::read(&p).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x01;
        fs::write(&p, bytes).unwrap();
        bump_mtime(&p);
    }

    /// Request lines served so far (`GET /dists/... HTTP/1.1" 200`, from the server's log).
    pub fn requests(&self) -> Vec<String> {
        fs::read_to_string(&self.log_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let start = l.find("\"")? + 1;
                Some(l[start..].to_string())
            })
            .collect()
    }

    /// Paths requested with GET (query-less), in order.
    pub fn get_paths(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter_map(|r| {
                r.strip_prefix("GET ").map(|r| r.split(' ').next().unwrap_or("").to_string())
            })
            .collect()
    }

    /// Stops the server now (also done on drop).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AptRepo {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Moves the mtime of a tampered file 2 s past its old one. http.server answers a
/// conditional GET (`If-Modified-Since`, whole seconds) with 304 when the file is not newer,
/// so without this a client that fetched the file in the same second would be told nothing
/// changed and keep its good copy.
fn bump_mtime(p: &Path) {
    let f = File::options().write(true).open(p).unwrap();
    let old = f.metadata().unwrap().modified().unwrap();
    let new = std::cmp::max(old, std::time::SystemTime::now()) + Duration::from_secs(2);
    f.set_modified(new).unwrap();
}

fn release_dir(dir: &Path, layout: &Layout) -> PathBuf {
    match layout {
        Layout::Nested { suite, .. } => dir.join("dists").join(suite),
        Layout::Flat => dir.to_path_buf(),
    }
}

fn packages_dir(dir: &Path, layout: &Layout) -> PathBuf {
    match layout {
        Layout::Nested { component, .. } => {
            release_dir(dir, layout).join(component).join("binary-amd64")
        }
        Layout::Flat => dir.to_path_buf(),
    }
}

/// Packages{,.gz,.xz}, Release, InRelease, Release.gpg for the debs in `dir/pool`.
fn write_indexes(dir: &Path, layout: &Layout, key: &TestKey) {
    let pkgs_dir = packages_dir(dir, layout);
    fs::create_dir_all(&pkgs_dir).unwrap();
    // Run from the repository root so that `Filename:` is `pool/NAME.deb`, relative to the
    // URL of the source (for both layouts).
    let packages = run_ok(
        "apt-ftparchive packages",
        Command::new("apt-ftparchive").args(["packages", "pool"]).current_dir(dir),
    );
    assert!(!packages.is_empty(), "apt-ftparchive found no packages in {}/pool", dir.display());
    let packages_path = pkgs_dir.join("Packages");
    fs::write(&packages_path, &packages).unwrap();
    let gz = run_ok("gzip", Command::new("gzip").args(["-9", "-n", "-c"]).arg(&packages_path));
    fs::write(pkgs_dir.join("Packages.gz"), gz).unwrap();
    let xz = run_ok("xz", Command::new("xz").args(["-9", "-c"]).arg(&packages_path));
    fs::write(pkgs_dir.join("Packages.xz"), xz).unwrap();

    let rel_dir = release_dir(dir, layout);
    let mut cmd = Command::new("apt-ftparchive");
    let opt = |k: &str, v: &str| format!("-oAPT::FTPArchive::Release::{k}={v}");
    cmd.arg(opt("Origin", ORIGIN))
        .arg(opt("Label", ORIGIN))
        .arg(opt("Architectures", "amd64"))
        .arg(opt("Description", "erdma-kit test repository (TEST ONLY)"));
    if let Layout::Nested { suite, component } = layout {
        // apt compares the distribution of the source line with Suite and Codename; for a
        // distribution with a slash it looks at the part before it ("stable/updates"
        // style), so give it that part.
        let base = suite.split('/').next().unwrap();
        cmd.arg(opt("Suite", base)).arg(opt("Codename", base)).arg(opt("Components", component));
    }
    // Written beside, then moved in: apt-ftparchive would otherwise hash its own output.
    let release =
        run_ok("apt-ftparchive release", cmd.arg("release").arg(".").current_dir(&rel_dir));
    let tmp_release = dir.join(".Release.new");
    fs::write(&tmp_release, release).unwrap();
    fs::rename(&tmp_release, rel_dir.join("Release")).unwrap();
    key.clearsign(&rel_dir.join("Release"), &rel_dir.join("InRelease"));
    key.detach_sign(&rel_dir.join("Release"), &rel_dir.join("Release.gpg"));
}

/// Starts `python3 -m http.server` for `www` on a free port; retries when the port was taken.
/// A directory served over HTTP on 127.0.0.1 until dropped.
pub struct Served {
    child: Child,
    pub port: u16,
}

impl Served {
    pub fn start(www: &Path) -> Served {
        let (child, port) = serve(www, &www.with_extension("http.log"));
        Served { child, port }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{}", self.port, path.trim_start_matches('/'))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(www: &Path, log_path: &Path) -> (Child, u16) {
    let mut last = String::new();
    for _ in 0..5 {
        let port = super::free_port();
        let log = File::options().create(true).append(true).open(log_path).unwrap();
        let mut child = Command::new(python())
            .args(["-u", "-m", "http.server", "--bind", "127.0.0.1"])
            .arg(port.to_string())
            .arg("--directory")
            .arg(www)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn python3 -m http.server");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                last = format!("http.server exited with {status}");
                break;
            }
            if let Ok((200, _)) = super::registry::http_request(&addr, "GET", "/") {
                return (child, port);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                last = "http.server did not answer within 15s".into();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!(
        "cannot serve {}: {last}\n--- log\n{}",
        www.display(),
        fs::read_to_string(log_path).unwrap_or_default()
    );
}

/// `apt-get` and `apt-cache` confined to a temporary directory: their own sources, lists,
/// cache and an empty dpkg status, and none of the host's `/etc/apt` (APT_CONFIG points at
/// a file that sets `Dir::Etc::Parts` to an empty directory, so `apt.conf.d` is not read:
/// no host proxy, no `GzipIndexes`, default compression order with xz first).
pub struct AptClient {
    dir: tempfile::TempDir,
}

impl AptClient {
    /// A client whose only sources are `sources` (one-line format).
    pub fn new(sources: &str) -> AptClient {
        let dir = tempfile::Builder::new().prefix("erdma-apt-client-").tempdir().unwrap();
        let d = dir.path();
        for sub in [
            "etc/apt.conf.d",
            "etc/sources.list.d",
            "etc/preferences.d",
            "etc/trusted.gpg.d",
            "lists/partial",
            "cache/archives/partial",
            "archives/partial",
            "log",
        ] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        fs::write(d.join("etc/sources.list"), format!("{}\n", sources.trim_end())).unwrap();
        fs::write(d.join("status"), "").unwrap();
        let p = |s: &str| d.join(s).display().to_string();
        let conf = format!(
            r#"Dir::Etc::Parts "{parts}";
Dir::Etc::SourceList "{list}";
Dir::Etc::SourceParts "{listd}";
Dir::Etc::Preferences "{prefs}";
Dir::Etc::PreferencesParts "{prefsd}";
Dir::Etc::Trusted "{trusted}";
Dir::Etc::TrustedParts "{trustedd}";
Dir::State::Lists "{lists}";
Dir::State::status "{status}";
Dir::Cache "{cache}";
Dir::Cache::Archives "{archives}";
Dir::Log "{log}";
APT::Architecture "amd64";
APT::Architectures {{ "amd64"; }};
APT::Sandbox::User "root";
Acquire::Languages "none";
Acquire::Retries "0";
Debug::NoLocking "true";
"#,
            parts = p("etc/apt.conf.d"),
            list = p("etc/sources.list"),
            listd = p("etc/sources.list.d"),
            prefs = p("etc/preferences"),
            prefsd = p("etc/preferences.d"),
            trusted = p("etc/trusted.gpg"),
            trustedd = p("etc/trusted.gpg.d"),
            lists = p("lists"),
            status = p("status"),
            cache = p("cache"),
            archives = p("archives"),
            log = p("log"),
        );
        fs::write(d.join("apt.conf"), conf).unwrap();
        AptClient { dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `APT_CONFIG` file.
    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("apt.conf")
    }

    /// Where `apt-get download` puts packages (the working directory of [`AptClient::apt_get`]).
    pub fn downloads(&self) -> PathBuf {
        self.dir.path().join("downloads")
    }

    /// Runs `apt-get ARGS` with this configuration, in [`AptClient::downloads`].
    pub fn apt_get(&self, args: &[&str]) -> Output {
        self.run("apt-get", args)
    }

    pub fn apt_cache(&self, args: &[&str]) -> Output {
        self.run("apt-cache", args)
    }

    fn run(&self, tool: &str, args: &[&str]) -> Output {
        fs::create_dir_all(self.downloads()).unwrap();
        Command::new(tool)
            .env("APT_CONFIG", self.conf())
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("LC_ALL", "C")
            .args(args)
            .current_dir(self.downloads())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"))
    }

    /// `apt-get update`. apt exits 0 on some failures (an unreachable mirror only warns), so
    /// callers check stderr too: see [`update_ok`].
    pub fn update(&self) -> Output {
        self.apt_get(&["-q", "update"])
    }
}

/// Whether an `apt-get update` output is a clean success: exit 0 and no `W:`, `E:` or
/// `Err:` lines (apt prints `Err:` on stdout, `W:`/`E:` on stderr).
pub fn update_ok(out: &Output) -> bool {
    let all = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.success()
        && !all.lines().any(|l| l.starts_with("W:") || l.starts_with("E:") || l.starts_with("Err:"))
}
