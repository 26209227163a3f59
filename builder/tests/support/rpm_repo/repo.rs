//! The signing key and the yum repositories served on 127.0.0.1, and dnf pointed at them.
use super::*;

/// An RSA key for rpm signatures in its own GNUPGHOME (rpm 4.14 on EL8 verifies RSA and DSA
/// only; [`super::super::apt_repo::TestKey`] does not expose its GNUPGHOME, which rpmsign needs).
pub struct RpmKey {
    home: tempfile::TempDir,
    fingerprint: String,
}

impl RpmKey {
    pub const UID: &'static str = "erdma-kit test rpm repo (TEST ONLY) <rpm@erdma-kit.invalid>";

    /// A new RSA 3072 signing key (a second or two).
    pub fn generate() -> RpmKey {
        let home = tempfile::Builder::new().prefix("erdma-rpmgpg-").tempdir_in("/tmp").unwrap();
        let mut k = RpmKey { home, fingerprint: String::new() };
        run_ok(
            "gpg --quick-gen-key rsa3072",
            k.gpg().args([
                "--passphrase",
                "",
                "--quick-gen-key",
                Self::UID,
                "rsa3072",
                "sign",
                "never",
            ]),
        );
        let listing = run_ok("gpg --list-keys", k.gpg().args(["--with-colons", "--list-keys"]));
        k.fingerprint = String::from_utf8_lossy(&listing)
            .lines()
            .find_map(|l| l.strip_prefix("fpr:").map(|r| r.trim_matches(':').to_string()))
            .expect("gpg lists a fingerprint");
        k
    }

    fn gpg(&self) -> Command {
        let mut c = Command::new("gpg");
        c.env("GNUPGHOME", self.home.path())
            .args(["--batch", "--yes", "--quiet", "--pinentry-mode", "loopback"])
            .stdin(Stdio::null());
        c
    }

    pub fn gnupghome(&self) -> &Path {
        self.home.path()
    }

    /// 40 upper-case hex digits.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// rpm's name for the key once imported: `gpg-pubkey-<last 8 hex digits, lower case>`.
    pub fn rpm_pubkey_name(&self) -> String {
        format!("gpg-pubkey-{}", self.fingerprint[32..].to_ascii_lowercase())
    }

    pub fn armored_public(&self) -> String {
        String::from_utf8(run_ok(
            "gpg --export --armor",
            self.gpg().args(["--armor", "--export", &self.fingerprint]),
        ))
        .unwrap()
    }

    /// `gpg --armor --detach-sign` (SHA-256), as `repomd.xml.asc`.
    pub fn detach_sign(&self, input: &Path, output: &Path) {
        run_ok(
            "gpg --detach-sign",
            self.gpg()
                .args(["--digest-algo", "SHA256", "--local-user", &self.fingerprint, "--output"])
                .arg(output)
                .args(["--armor", "--detach-sign"])
                .arg(input),
        );
    }

    /// `rpmsign --addsign` (with `--rpmv3` for header+payload signatures as EL8 makes them).
    pub fn sign_rpms(&self, rpms: &[PathBuf], rpmv3: bool) {
        if rpms.is_empty() {
            return;
        }
        let mut c = Command::new("rpmsign");
        c.arg("--addsign");
        if rpmv3 {
            c.arg("--rpmv3");
        }
        // Debian's rpm names /usr/bin/gpg2, which Debian's gnupg no longer ships.
        let gpg = ["/usr/bin/gpg", "/usr/bin/gpg2"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("gpg");
        c.args(["--define", &format!("__gpg {gpg}")])
            .args(["--define", &format!("_gpg_name {}", self.fingerprint)])
            .args(["--define", &format!("_gpg_path {}", self.home.path().display())])
            .args(["--define", "_gpg_digest_algo sha256"])
            .args([
                "--define",
                "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase=",
            ])
            .env("GNUPGHOME", self.home.path())
            .args(rpms);
        run_ok("rpmsign --addsign", &mut c);
    }
}

impl Drop for RpmKey {
    fn drop(&mut self) {
        super::super::apt_repo::kill_gpg_agent(self.home.path());
    }
}

/// Where a yum repository and its key sit below the served root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RpmLayout {
    /// Alibaba Cloud's eRDMA repository (the ECS AI-training-cluster guide):
    /// `erdma/yum/redhat/$releasever/erdma/x86_64/`, key at `erdma/GPGKEY`.
    Alibaba { releasever: String },
    /// NVIDIA's CUDA repository: `compute/cuda/repos/rhel9/x86_64/`, key
    /// `D42D0685.pub` in the same directory.
    Cuda { distro: String },
    /// Everything at the top; key `RPM-GPG-KEY-erdma-kit-test`.
    Flat,
}

impl RpmLayout {
    pub fn alibaba(releasever: &str) -> Self {
        RpmLayout::Alibaba { releasever: releasever.into() }
    }

    pub fn cuda(distro: &str) -> Self {
        RpmLayout::Cuda { distro: distro.into() }
    }

    /// `(repository directory, key file)` relative to the served root.
    pub fn paths(&self) -> (String, String) {
        match self {
            RpmLayout::Alibaba { releasever } => {
                (format!("erdma/yum/redhat/{releasever}/erdma/x86_64"), "erdma/GPGKEY".into())
            }
            RpmLayout::Cuda { distro } => {
                let d = format!("compute/cuda/repos/{distro}/x86_64");
                let k = format!("{d}/D42D0685.pub");
                (d, k)
            }
            RpmLayout::Flat => (String::new(), "RPM-GPG-KEY-erdma-kit-test".into()),
        }
    }
}

/// A signed yum repository under a temporary directory, served on 127.0.0.1 until dropped.
pub struct RpmRepo {
    layout: RpmLayout,
    served: Served,
    www: PathBuf,
    fingerprint: String,
    _tmp: tempfile::TempDir,
}

impl RpmRepo {
    /// Copies `rpms` into the layout's directory, signs each with `key` (`rpmsign --addsign`,
    /// `rpmv3` for header+payload signatures), runs `createrepo_c`, signs `repomd.xml`
    /// (`repodata/repomd.xml.asc`, armoured), writes the public key where the layout keeps it,
    /// and serves the tree.
    pub fn build(layout: RpmLayout, rpms: &[PathBuf], key: &RpmKey, rpmv3: bool) -> RpmRepo {
        let tmp = tempfile::Builder::new().prefix("erdma-rpm-repo-").tempdir().unwrap();
        let www = tmp.path().join("www");
        let (dir, key_rel) = layout.paths();
        let repo_dir = if dir.is_empty() { www.clone() } else { www.join(&dir) };
        fs::create_dir_all(&repo_dir).unwrap();
        let mut copies = Vec::new();
        for r in rpms {
            let to = repo_dir.join(r.file_name().unwrap());
            fs::copy(r, &to).unwrap_or_else(|e| panic!("copy {}: {e}", r.display()));
            fs::set_permissions(&to, fs::Permissions::from_mode(0o644)).unwrap();
            copies.push(to);
        }
        key.sign_rpms(&copies, rpmv3);
        run_ok(
            "createrepo_c",
            Command::new("createrepo_c")
                .args(["--quiet", "--general-compress-type", "gz", "--revision", "1700000000"])
                .arg(&repo_dir),
        );
        let repomd = repo_dir.join("repodata/repomd.xml");
        key.detach_sign(&repomd, &repomd.with_extension("xml.asc"));
        let key_path = www.join(&key_rel);
        fs::create_dir_all(key_path.parent().unwrap()).unwrap();
        fs::write(&key_path, key.armored_public()).unwrap();
        let served = Served::start(&www);
        RpmRepo { layout, served, www, fingerprint: key.fingerprint().to_string(), _tmp: tmp }
    }

    /// `http://127.0.0.1:PORT/erdma/yum/redhat/3/erdma/x86_64` (no trailing slash).
    pub fn url(&self) -> String {
        self.served.url(&self.layout.paths().0).trim_end_matches('/').to_string()
    }

    /// The URL of the armoured public key (`…/erdma/GPGKEY`, `…/D42D0685.pub`).
    pub fn key_url(&self) -> String {
        self.served.url(&self.layout.paths().1)
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub fn port(&self) -> u16 {
        self.served.port
    }

    /// The repository directory (holding the rpms and `repodata/`).
    pub fn dir(&self) -> PathBuf {
        let d = self.layout.paths().0;
        if d.is_empty() {
            self.www.clone()
        } else {
            self.www.join(d)
        }
    }

    pub fn repodata(&self) -> PathBuf {
        self.dir().join("repodata")
    }

    /// The signed rpm of package `name` (file name `NAME-V-R.ARCH.rpm`).
    pub fn rpm(&self, name: &str) -> PathBuf {
        rpms_in(&self.dir())
            .into_iter()
            .find(|p| rpm_name_of(p) == name)
            .unwrap_or_else(|| panic!("no {name} rpm in {}", self.dir().display()))
    }

    /// The `repodata/*-primary.xml.gz` file.
    pub fn primary(&self) -> PathBuf {
        fs::read_dir(self.repodata())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_string_lossy().ends_with("primary.xml.gz"))
            .expect("primary.xml.gz in repodata")
    }

    /// Flips one bit in the middle of `primary.xml.gz` (same size, wrong checksum).
    pub fn tamper_primary(&self) {
        flip_middle(&self.primary());
    }

    /// Changes the `<revision>` of `repomd.xml`: `repomd.xml.asc` no longer verifies.
    pub fn tamper_repomd(&self) {
        let p = self.repodata().join("repomd.xml");
        let t = fs::read_to_string(&p).unwrap();
        assert!(t.contains("<revision>1700000000</revision>"), "{t}");
        fs::write(
            &p,
            t.replace("<revision>1700000000</revision>", "<revision>1700000001</revision>"),
        )
        .unwrap();
    }

    /// Flips one bit in the middle of the rpm of `name` (its payload digest no longer matches).
    pub fn tamper_rpm(&self, name: &str) {
        flip_middle(&self.rpm(name));
    }

    /// Paths requested with GET, in order (from the server's log).
    pub fn get_paths(&self) -> Vec<String> {
        fs::read_to_string(self.www.with_extension("http.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                l.split_once("\"GET ").map(|(_, r)| r.split(' ').next().unwrap_or("").to_string())
            })
            .collect()
    }
}

/// `NAME` of `NAME-VERSION-RELEASE.ARCH.rpm`.
pub fn rpm_name_of(p: &Path) -> String {
    let f = p.file_name().unwrap().to_string_lossy();
    let stem = f.trim_end_matches(".rpm");
    let parts: Vec<&str> = stem.rsplitn(3, '-').collect();
    parts.last().unwrap().to_string()
}

fn flip_middle(p: &Path) {
    let mut b = fs::read(p).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x01;
    fs::write(p, b).unwrap();
}

/// A dnf configuration confined to `dir`: no host repositories, plugins or cache. Run dnf with
/// `HOME=dir/home` (see [`dnf_command`]): Debian's rpm keeps its database in `~/.rpmdb`
/// (`/usr/lib/rpm/macros`), so `dir/home/.rpmmacros` sets EL's `/var/lib/rpm` and SQLite.
pub fn dnf_conf(dir: &Path) -> PathBuf {
    let p = dir.join("dnf.conf");
    fs::create_dir_all(dir.join("reposdir")).unwrap();
    fs::create_dir_all(dir.join("home")).unwrap();
    fs::write(dir.join("home/.rpmmacros"), "%_dbpath /var/lib/rpm\n%_db_backend sqlite\n").unwrap();
    fs::write(
        &p,
        format!(
            "[main]\ngpgcheck=1\nreposdir={}\nplugins=0\ninstall_weak_deps=0\ncachedir={}\nkeepcache=0\n",
            dir.join("reposdir").display(),
            dir.join("cache").display()
        ),
    )
    .unwrap();
    p
}

/// `dnf -c CONF --installroot ROOT` with `HOME` set as [`dnf_conf`] needs (`conf` is what it
/// returned).
pub fn dnf_command(conf: &Path, root: &Path) -> Command {
    let mut c = Command::new("dnf");
    c.arg("-c")
        .arg(conf)
        .arg("--installroot")
        .arg(root)
        .env("HOME", conf.parent().unwrap().join("home"))
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    c
}
