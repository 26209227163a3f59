//! The base's repositories fetched ahead: while the base's layer is still being read, the apt
//! sources it names start their fetches ([`erdma_deb::repo::prefetch_index`]: the `InRelease`
//! and the indices it lists, kept in the index cache), so that the build proper, once it knows
//! the recipe and the keys, finds them in hand instead of waiting for them after the layer.
//!
//! Nothing fetched here is trusted on its own: the build proper verifies the `InRelease` with
//! the keys the finished read of the base gives (`sources.rs`, `base_specs`), and a kept
//! index is named by the hash its content was checked against, so it is read only where that
//! verified Release lists it. A source a later layer replaces, or one the build does not read,
//! costs a download and nothing else.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use erdma_deb::repo::{self, Prefetched, RepoSpec, SourceEntry};

/// What names one fetch: the archive, suite, components and architecture.
type Key = (String, String, Vec<String>, String);

/// The fetches started ahead for one build.
pub struct Prefetches {
    http: erdma_http::Client,
    /// The index cache (`indices/` under the build cache), as the build proper reads it.
    cache: PathBuf,
    arch: String,
    handle: tokio::runtime::Handle,
    started: Mutex<HashMap<Key, tokio::task::JoinHandle<Option<Prefetched>>>>,
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
            handle: tokio::runtime::Handle::current(),
            started: Mutex::new(HashMap::new()),
        }
    }

    fn key(spec: &RepoSpec) -> Key {
        (spec.url.clone(), spec.suite.clone(), spec.components.clone(), spec.arch.clone())
    }

    /// A file of the base as its layer streams past: apt sources start the fetches of the
    /// archives they name (each suite of each `deb` entry at its first URI, as the build
    /// proper tries it first), once per archive.
    pub fn watch(&self, path: &str, data: &[u8]) {
        let Some(entries) = sources_in(path, data) else { return };
        let mut started = self.started.lock().expect("poisoned");
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
                let key = Prefetches::key(&spec);
                if started.contains_key(&key) {
                    continue;
                }
                let (http, cache) = (self.http.clone(), self.cache.clone());
                // A failure is the build proper's to meet and report, fetching again.
                let task = self
                    .handle
                    .spawn(async move { repo::prefetch_index(&http, &spec, &cache).await.ok() });
                started.insert(key, task);
            }
        }
    }

    /// The fetch ahead of `spec`'s archive, once it is done; `None` where none was started or
    /// it failed (the build proper then fetches as without it).
    pub async fn take(&self, spec: &RepoSpec) -> Option<Prefetched> {
        let task = self.started.lock().expect("poisoned").remove(&Prefetches::key(spec))?;
        task.await.ok().flatten()
    }

    /// How many fetches were started (for the tests).
    pub fn started(&self) -> usize {
        self.started.lock().expect("poisoned").len()
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
}
