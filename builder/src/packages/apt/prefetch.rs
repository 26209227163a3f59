//! The base's apt sources fetched ahead ([`crate::packages::prefetch`]): each `deb` suite
//! of `sources.list` and `sources.list.d` starts [`erdma_deb::repo::prefetch_index`] (the
//! `InRelease` held unverified, the indices it lists kept in the index cache by the hash
//! their content was checked against). The build proper verifies that `InRelease` with the
//! keys the finished read of the base gives (`sources.rs`, `base_specs`).
use std::path::{Path, PathBuf};

use erdma_deb::repo::{self, Prefetched, RepoError, RepoSpec, SourceEntry};

use crate::packages::prefetch::{Ahead, Tasks};

/// What names one fetch: the archive, suite, components and architecture.
type Key = (String, String, Vec<String>, String);

/// The fetches started ahead for one build.
pub struct Prefetches {
    http: erdma_http::Client,
    /// The index cache (`indices/` under the build cache), as the build proper reads it.
    cache: PathBuf,
    arch: String,
    tasks: Tasks<Key, Prefetched, RepoError>,
    /// Set once the build is known not to be apt's.
    stopped: std::sync::atomic::AtomicBool,
}

/// The apt sources a file of the base holds, by its path in the image; `None` for any other
/// file (as apt reads them: `sources.list`, and `sources.list.d`'s `*.list` and `*.sources`).
fn sources_in(path: &str, data: &[u8]) -> Option<Vec<SourceEntry>> {
    let text = || String::from_utf8_lossy(data);
    if path == "etc/apt/sources.list" {
        return Some(repo::parse_one_line_sources(&text()));
    }
    let name = path.strip_prefix("etc/apt/sources.list.d/").filter(|n| !n.contains('/'))?;
    if name.ends_with(".sources") {
        Some(repo::parse_deb822_sources(&text()))
    } else if name.ends_with(".list") {
        Some(repo::parse_one_line_sources(&text()))
    } else {
        None
    }
}

impl Prefetches {
    /// Fetches for an image of Debian architecture `arch`, into `cache_dir`'s index cache, on
    /// the current runtime.
    pub fn new(http: erdma_http::Client, cache_dir: &Path, arch: &str) -> Prefetches {
        Prefetches {
            http,
            cache: cache_dir.join("indices"),
            arch: arch.to_string(),
            tasks: Tasks::on_current_runtime(),
            stopped: Default::default(),
        }
    }

    fn key(spec: &RepoSpec) -> Key {
        (spec.url.clone(), spec.suite.clone(), spec.components.clone(), spec.arch.clone())
    }

    /// A file of the base as its layer streams past: apt sources start the fetches of the
    /// archives they name (each suite of each `deb` entry at its first URI, as the build
    /// proper tries it first), once per archive.
    pub fn watch(&self, path: &str, data: &[u8]) {
        if self.stopped.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let Some(entries) = sources_in(path, data) else { return };
        for e in entries {
            // As base_specs reads them: Mellanox's repository is dropped, trusted=yes refused.
            if !e.types.iter().any(|t| t == "deb")
                || e.trusted
                || e.uris.iter().any(|u| u.contains("mellanox") || u.contains("/mlnx"))
            {
                continue;
            }
            let Some(url) = e.uris.first() else { continue };
            for suite in &e.suites {
                let spec = RepoSpec {
                    url: url.clone(),
                    suite: suite.clone(),
                    components: e.components.clone(),
                    arch: self.arch.clone(),
                    keyring: Vec::new(),
                };
                let (http, cache) = (self.http.clone(), self.cache.clone());
                self.tasks.start(Prefetches::key(&spec), || async move {
                    repo::prefetch_index(&http, &spec, &cache).await
                });
            }
        }
    }

    /// The fetch ahead of `spec`'s archive, once it is done.
    pub async fn take(&self, spec: &RepoSpec) -> Ahead<Prefetched, RepoError> {
        self.tasks.take(&Prefetches::key(spec), RepoError::is_unreachable).await
    }

    /// How many fetches were started and not yet taken (for the tests).
    pub fn started(&self) -> usize {
        self.tasks.started()
    }

    /// Stops the fetches started, dropping what they fetched, and starts none after (the build
    /// is not apt's, or has read its indices).
    pub fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::Relaxed);
        self.tasks.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_apt_s_source_files_are_read_as_sources() {
        let line = b"deb http://archive.example/debian bookworm main\n";
        let deb822 = b"Types: deb\nURIs: http://archive.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n";
        assert_eq!(sources_in("etc/apt/sources.list", line).unwrap().len(), 1);
        let d = sources_in("etc/apt/sources.list.d/debian.sources", deb822).unwrap();
        assert_eq!(d[0].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(sources_in("etc/apt/sources.list.d/x.list", line).unwrap().len(), 1);
        for other in [
            "etc/apt/sources.list.d/x.list.save",
            "etc/apt/sources.list.d/sub/x.list",
            "etc/apt/apt.conf",
            "usr/etc/apt/sources.list",
        ] {
            assert!(sources_in(other, line).is_none(), "{other}");
        }
    }

    /// One fetch per `deb` suite, however often the sources stream past; source entries,
    /// Mellanox's repository and `trusted=yes` start none. An archive that cannot be reached
    /// is said so, for the build to go on to its next mirror.
    #[tokio::test]
    async fn a_fetch_per_suite_and_an_unreachable_archive_said_so() {
        // Port 1, where nothing listens (a port bound to 0 is never given it).
        let port = 1;
        let url = format!("http://127.0.0.1:{port}/debian");
        let http = erdma_http::Client::new(erdma_http::Timeouts::default());
        let cache = tempfile::tempdir().unwrap();
        let ahead = Prefetches::new(http, cache.path(), "amd64");
        let sources = format!(
            "Types: deb deb-src\nURIs: {url}\nSuites: bookworm bookworm-updates\nComponents: main\n\n\
             Types: deb-src\nURIs: http://127.0.0.1:{port}/source\nSuites: trixie\nComponents: main\n\n\
             Types: deb\nURIs: http://linux.mellanox.com/public/repo/mlnx_ofed/latest/debian12.1/x86_64\nSuites: ./\n\n\
             Types: deb\nURIs: http://127.0.0.1:{port}/insecure\nSuites: ./\nTrusted: yes\n"
        );
        ahead.watch("etc/apt/sources.list.d/debian.sources", sources.as_bytes());
        ahead.watch("etc/apt/sources.list.d/debian.sources", sources.as_bytes());
        ahead.watch("etc/apt/sources.list", format!("deb {url} bookworm main\n").as_bytes());
        assert_eq!(ahead.started(), 2);
        let spec = |suite: &str| RepoSpec {
            url: url.clone(),
            suite: suite.into(),
            components: vec!["main".into()],
            arch: "amd64".into(),
            keyring: Vec::new(),
        };
        let Ahead::Unreachable(e) = ahead.take(&spec("bookworm")).await else {
            panic!("not unreachable")
        };
        assert!(e.is_unreachable() && e.to_string().contains(&url), "{e}");
        // Taken once; a suite never named was never started.
        assert!(matches!(ahead.take(&spec("bookworm")).await, Ahead::Nothing));
        assert!(matches!(ahead.take(&spec("trixie")).await, Ahead::Nothing));
        assert_eq!(ahead.started(), 1);
    }
}
