//! Repositories fetched ahead: while the base's layer is still being read, the repositories
//! its files name start their fetches, so that the build proper, once it knows the recipe and
//! the keys, finds them in hand instead of waiting for them after the layer. apt's sources
//! ([`super::apt::prefetch`]) and yum's `.repo` files ([`super::rpm::prefetch`]) each say
//! which files they read and what they start; this module holds what both share: the watcher
//! the layer read calls ([`FetchAhead`]) and the fetches by key ([`Tasks`]).
//!
//! Nothing fetched ahead is trusted on its own: the build proper verifies what was fetched
//! with the keys the finished read of the base gives, as if it had fetched it itself, and an
//! index kept by a fetch ahead is named by the hash its content was checked against, so it is
//! read only where verified metadata lists that hash. A repository a later layer replaces, or
//! one the build does not read, costs a download and nothing else.
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;

use super::{apt, rpm};

/// What a fetch ahead left for the build proper.
#[derive(Debug)]
pub enum Ahead<T, E> {
    /// None was started for the repository, or it failed for a reason the build proper meets
    /// and reports itself, fetching again (a missing or malformed file, a cache it could not
    /// write).
    Nothing,
    /// What was fetched, still to be verified.
    Fetched(T),
    /// No mirror could be reached, after the client's retries: the build proper goes on (to
    /// the next mirror, or to say so) rather than wait for the same timeouts again.
    Unreachable(E),
}

/// Fetches started on the build's runtime, one per key, each taken once by the build proper.
pub struct Tasks<K, T, E> {
    handle: tokio::runtime::Handle,
    started: Mutex<HashMap<K, tokio::task::JoinHandle<Result<T, E>>>>,
}

impl<K, T, E> Tasks<K, T, E> {
    /// Stops every fetch started (what they kept so far stays, written whole or not at all).
    pub fn abort_all(&self) {
        for (_, task) in self.started.lock().expect("poisoned").drain() {
            task.abort();
        }
    }
}

impl<K, T, E> Tasks<K, T, E>
where
    K: Eq + Hash,
    T: Send + 'static,
    E: Send + 'static,
{
    /// Fetches on the current runtime (panics outside one).
    pub fn on_current_runtime() -> Self {
        Tasks { handle: tokio::runtime::Handle::current(), started: Mutex::new(HashMap::new()) }
    }

    /// Starts `fetch` (made only then) unless a fetch of `key` was started already.
    pub fn start<F>(&self, key: K, fetch: impl FnOnce() -> F)
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
    {
        let mut started = self.started.lock().expect("poisoned");
        if let std::collections::hash_map::Entry::Vacant(v) = started.entry(key) {
            v.insert(self.handle.spawn(fetch()));
        }
    }

    /// The fetch of `key`, once it is done (`unreachable` tells which failures mean that no
    /// mirror answered).
    pub async fn take(&self, key: &K, unreachable: fn(&E) -> bool) -> Ahead<T, E> {
        let task = self.started.lock().expect("poisoned").remove(key);
        let Some(task) = task else { return Ahead::Nothing };
        match task.await {
            Ok(Ok(fetched)) => Ahead::Fetched(fetched),
            Ok(Err(e)) if unreachable(&e) => Ahead::Unreachable(e),
            Ok(Err(_)) | Err(_) => Ahead::Nothing,
        }
    }

    /// How many fetches were started and not yet taken (for the tests).
    pub fn started(&self) -> usize {
        self.started.lock().expect("poisoned").len()
    }
}

/// Fetches nobody took (a repository the build did not read, a build that failed) stop with
/// the build's use of them.
impl<K, T, E> Drop for Tasks<K, T, E> {
    fn drop(&mut self) {
        self.abort_all();
    }
}

/// The fetches ahead of one image's build, apt's and rpm's: each reacts to its own files only.
pub struct FetchAhead {
    pub apt: apt::prefetch::Prefetches,
    pub rpm: rpm::prefetch::Prefetches,
}

impl FetchAhead {
    /// A file of the base as its layer streams past. Once the os-release has said that the
    /// build is an rpm build, apt sources the base also has (an image made from a Debian
    /// root, a leftover file) fetch nothing, and what they started is stopped.
    pub fn watch(&self, path: &str, data: &[u8]) {
        self.rpm.watch(path, data);
        if self.rpm.is_rpm_build() {
            self.apt.stop();
        } else {
            self.apt.watch(path, data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picked(os_release: &[u8]) -> Option<rpm::prefetch::Picked> {
        let os = crate::distro::OsRelease::parse(&String::from_utf8_lossy(os_release));
        Some(crate::recipe::Recipe::for_os(&os).ok()?.for_build(false, "amd64").picked())
    }

    /// An EL image that also has apt sources (one made from a Debian root) fetches nothing
    /// from them once its os-release says the build is rpm's, and what they started before
    /// is stopped; a Debian image's sources fetch as before.
    #[tokio::test]
    async fn apt_sources_of_an_rpm_build_fetch_nothing() {
        // Port 1, where nothing listens (a port bound to 0 is never given it): the fetches
        // fail, after the client's retries.
        let port = 1;
        let sources = format!("deb http://127.0.0.1:{port}/debian bookworm main\n");
        let cache = tempfile::tempdir().unwrap();
        let ahead = || {
            let http = erdma_http::Client::new(erdma_http::Timeouts::default());
            FetchAhead {
                apt: apt::prefetch::Prefetches::new(http.clone(), cache.path(), "amd64"),
                rpm: rpm::prefetch::Prefetches::new(
                    http,
                    cache.path(),
                    "amd64",
                    Default::default(),
                    Box::new(picked),
                ),
            }
        };
        let rocky = b"ID=\"rocky\"\nVERSION_ID=\"9.5\"\n";
        let el = ahead();
        el.watch("etc/apt/sources.list", sources.as_bytes());
        assert_eq!(el.apt.started(), 1);
        el.watch("etc/os-release", rocky);
        assert!(el.rpm.is_rpm_build());
        assert_eq!(el.apt.started(), 0, "stopped");
        el.watch(
            "etc/apt/sources.list.d/more.list",
            sources.replace("bookworm", "trixie").as_bytes(),
        );
        assert_eq!(el.apt.started(), 0);

        let debian = ahead();
        debian.watch("etc/apt/sources.list", sources.as_bytes());
        debian.watch(
            "usr/lib/os-release",
            b"ID=debian\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\n",
        );
        assert!(!debian.rpm.is_rpm_build());
        assert_eq!((debian.apt.started(), debian.rpm.started()), (1, 0));
    }
}
