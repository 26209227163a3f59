//! A private certificate authority made with the `openssl` command, as an operator makes one
//! for a company registry: a CA, server certificates for 127.0.0.1 (valid, expired, or for
//! another name) and client certificates, signed by `openssl ca` with explicit validity dates.
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Ca {
    dir: PathBuf,
    pub cert: PathBuf,
    key: PathBuf,
}

/// A certificate and its key (PEM files).
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// When a certificate is valid.
#[derive(Clone, Copy)]
pub enum Validity {
    /// From yesterday for 30 days.
    Now,
    /// A month in 2020: expired.
    Expired,
}

#[track_caller]
fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
    super::assert_success(&format!("openssl {}", args.join(" ")), &out);
}

/// `date -u` as `openssl ca` wants it (`YYYYMMDDHHMMSSZ`), `offset` like `-1 day`.
fn date(offset: &str) -> String {
    let out = Command::new("date").args(["-u", "-d", offset, "+%Y%m%d%H%M%SZ"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl Ca {
    /// A new CA named `name` in `dir` (created).
    pub fn new(dir: &Path, name: &str) -> Ca {
        std::fs::create_dir_all(dir.join("newcerts")).unwrap();
        std::fs::write(dir.join("index.txt"), "").unwrap();
        std::fs::write(dir.join("serial"), "1000\n").unwrap();
        std::fs::write(
            dir.join("ca.cnf"),
            "[ca]\ndefault_ca = erdma\n[erdma]\ndir = .\ndatabase = index.txt\nnew_certs_dir = newcerts\nserial = serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\ncopy_extensions = none\n[any]\ncommonName = supplied\n",
        )
        .unwrap();
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "30",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            dir,
        );
        Ca { dir: dir.to_path_buf(), cert: dir.join("ca.pem"), key: dir.join("ca.key") }
    }

    /// A certificate for `names` (`IP:127.0.0.1`, `DNS:localhost`…) used for `usage`
    /// (`serverAuth` or `clientAuth`), valid as `validity` says.
    pub fn issue(&self, file: &str, names: &[&str], usage: &str, validity: Validity) -> Pair {
        let d = &self.dir;
        let mut ext = format!("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n");
        if !names.is_empty() {
            ext.push_str(&format!("subjectAltName={}\n", names.join(",")));
        }
        std::fs::write(d.join(format!("{file}.ext")), ext).unwrap();
        let (key, csr, cert) =
            (format!("{file}.key"), format!("{file}.csr"), format!("{file}.pem"));
        openssl(
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={file}"),
            ],
            d,
        );
        let (start, end) = match validity {
            Validity::Now => (date("-1 day"), date("+30 days")),
            Validity::Expired => ("20200101000000Z".to_string(), "20200201000000Z".to_string()),
        };
        openssl(
            &[
                "ca",
                "-batch",
                "-notext",
                "-config",
                "ca.cnf",
                "-cert",
                self.cert.to_str().unwrap(),
                "-keyfile",
                self.key.to_str().unwrap(),
                "-in",
                &csr,
                "-out",
                &cert,
                "-startdate",
                &start,
                "-enddate",
                &end,
                "-extfile",
                &format!("{file}.ext"),
            ],
            d,
        );
        Pair { cert: d.join(cert), key: d.join(key) }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, file: &str, validity: Validity) -> Pair {
        self.issue(file, &["IP:127.0.0.1", "DNS:localhost"], "serverAuth", validity)
    }

    /// A client certificate.
    pub fn client(&self, file: &str) -> Pair {
        self.issue(file, &[], "clientAuth", Validity::Now)
    }
}

/// A certs.d folder for one registry: `ca.crt` (when `ca` is given) and `client.cert`/`client.key`.
pub fn certs_dir(dir: &Path, ca: Option<&Ca>, client: Option<&Pair>) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    if let Some(ca) = ca {
        std::fs::copy(&ca.cert, dir.join("ca.crt")).unwrap();
    }
    if let Some(c) = client {
        std::fs::copy(&c.cert, dir.join("client.cert")).unwrap();
        std::fs::copy(&c.key, dir.join("client.key")).unwrap();
    }
    dir.to_path_buf()
}
