//! The repositories of an rpm build fetched ahead ([`crate::packages::prefetch`]): once the
//! base's os-release has streamed past, the recipe it picks is known, and with it `$releasever`
//! and the recipe's own repositories; the base's `/etc/yum.repos.d/*.repo` files, read with
//! the variables of `/etc/dnf/vars` and `/etc/yum/vars` seen so far, add the base's. Each
//! repository starts [`erdma_rpm::repo::prefetch`] at its URLs (`baseurl`, `--repo ID=URL`,
//! the recipe's, or what its `mirrorlist` gives, fetched first): `repomd.xml` and its
//! signature held unverified, the `primary` indexed (on another core than the layer read's)
//! and kept in the metadata cache by the checksum it was checked against. The build proper (`sources.rs`, `load_repo`) verifies them with the keys
//! it reads from the finished base.
//!
//! The layers stream past the top one first, so the first version of a file seen is the
//! image's. The fetches are named by the repository's name and URLs as the build proper
//! computes them; where a file that changes them streams past late (a variables file after
//! the `.repo` file using it), or a lower layer's file that a whiteout hides started one, the
//! build proper finds no fetch under its name and fetches itself, and the fetch is stopped
//! when the build is done with the image.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use erdma_rpm::repo::{Prefetched, RepoError};

use super::repos;
use super::sources::{
    base_name, fetch_mirrorlist, known_base_urls, mirrorlist_source, recipe_repo_urls,
    wanted_base_repos,
};
use crate::packages::prefetch::{Ahead, Tasks};
use crate::packages::{Backend, Repository};

/// What the recipe the build picks for a base says of the repositories the build reads.
#[derive(Debug, Clone)]
pub struct Picked {
    pub backend: Backend,
    /// dnf's `$releasever`.
    pub version_id: String,
    /// As the build uses them (URLs filled in for the architecture, NCCL's where asked for).
    pub repositories: Vec<Repository>,
    /// The files the recipe removes (a `.repo` among them is not read).
    pub remove_files: Vec<String>,
}

/// The build's pick for a base with this os-release (its content; `None` where it picks none).
pub type RecipeOf = Box<dyn Fn(&[u8]) -> Option<Picked> + Send + Sync>;

/// What names one fetch: the repository's name and its URLs, or its mirrorlist
/// ([`mirrorlist_source`]).
type Key = (String, Vec<String>);

/// What a fetch ahead found: the repository's URLs (a mirrorlist's, once fetched: none where
/// it could not be) and what one of them served, or why none did.
#[derive(Debug)]
pub struct Listed {
    pub urls: Vec<String>,
    pub read: Result<Prefetched, RepoError>,
}

impl Listed {
    /// What was fetched of the repository, for its load.
    pub fn ahead(self) -> Ahead<Prefetched, RepoError> {
        match self.read {
            Ok(fetched) => Ahead::Fetched(fetched),
            Err(e) if e.is_unreachable() => Ahead::Unreachable(e),
            Err(_) => Ahead::Nothing,
        }
    }
}

/// The fetches started ahead for one build.
pub struct Prefetches {
    http: erdma_http::Client,
    /// The rpm metadata cache (`rpm/` under the build cache), as the build proper reads it.
    cache: PathBuf,
    basearch: String,
    /// `--repo NAME=URL`.
    repo_urls: BTreeMap<String, String>,
    recipe_of: RecipeOf,
    seen: Mutex<Seen>,
    tasks: Tasks<Key, Listed, RepoError>,
}

/// The files of the base read so far that say which repositories a build reads.
#[derive(Default)]
struct Seen {
    /// The os-release files, `.repo` files and variables files, by path.
    files: BTreeMap<String, Vec<u8>>,
    /// The build's pick for the os-release seen.
    recipe: Option<Picked>,
}

impl Prefetches {
    /// Fetches for an image of Debian architecture `arch`, into `cache_dir`'s rpm metadata
    /// cache, on the current runtime; `recipe_of` picks the recipe from the os-release.
    pub fn new(
        http: erdma_http::Client,
        cache_dir: &Path,
        arch: &str,
        repo_urls: BTreeMap<String, String>,
        recipe_of: RecipeOf,
    ) -> Prefetches {
        Prefetches {
            http,
            cache: cache_dir.join("rpm"),
            basearch: repos::basearch(arch).to_string(),
            repo_urls,
            recipe_of,
            seen: Mutex::new(Seen::default()),
            tasks: Tasks::on_current_runtime(),
        }
    }

    /// A file of the base as its layers stream past, the top layer first: of each path, the
    /// first version seen is the image's (a lower layer's is hidden by it).
    pub fn watch(&self, path: &str, data: &[u8]) {
        let relevant = path == "etc/os-release"
            || path == "usr/lib/os-release"
            || repos::is_repo_file(path)
            || repos::variable_dir(path).is_some();
        if !relevant {
            return;
        }
        let mut seen = self.seen.lock().expect("poisoned");
        if seen.files.contains_key(path) {
            return;
        }
        seen.files.insert(path.to_string(), data.to_vec());
        if path.ends_with("os-release") {
            // /etc/os-release wins over /usr/lib's, as the build reads them.
            let os_release =
                seen.files.get("etc/os-release").or(seen.files.get("usr/lib/os-release"));
            seen.recipe = os_release.and_then(|text| (self.recipe_of)(text));
        }
        self.start(&seen);
    }

    /// Starts the fetches of every repository `seen` names now (those started already are
    /// not started again).
    fn start(&self, seen: &Seen) {
        let Some(recipe) = seen.recipe.as_ref().filter(|r| r.backend == Backend::Rpm) else {
            return;
        };
        let mut vars = repos::builtin_variables(&recipe.version_id, &self.basearch);
        // In the order dnf reads them, the later winning.
        for dir in repos::VARIABLE_DIRS {
            let files =
                seen.files.iter().filter(|(path, _)| repos::variable_dir(path) == Some(dir));
            vars.extend(files.filter_map(|(path, data)| repos::variable_file(path, data)));
        }
        let repo_files = seen
            .files
            .iter()
            .filter(|(path, _)| repos::is_repo_file(path))
            .map(|(path, data)| (path, String::from_utf8_lossy(data)));
        for repo in &recipe.repositories {
            if !repo.from_base {
                self.fetch(repo.name.clone(), recipe_repo_urls(repo, &self.repo_urls));
                continue;
            }
            for (path, text) in repo_files.clone() {
                let defined = repos::parse(&format!("/{path}"), &text, &vars);
                for yr in wanted_base_repos(defined, &recipe.remove_files) {
                    // Not under --mirror (no fetch ahead is made then).
                    if let Some(urls) = known_base_urls(&yr, &self.repo_urls, &[]) {
                        self.fetch(base_name(&yr.id), urls);
                    } else if let Some(list) = &yr.mirrorlist {
                        self.fetch_listed(base_name(&yr.id), list.clone());
                    }
                }
            }
        }
    }

    fn fetch(&self, name: String, urls: Vec<String>) {
        if urls.is_empty() {
            return;
        }
        let (http, cache) = (self.http.clone(), self.cache.clone());
        let key = (name.clone(), urls.clone());
        self.tasks.start(key, || async move {
            let read = erdma_rpm::repo::prefetch(&http, &name, &urls, &cache).await;
            Ok(Listed { urls, read })
        });
    }

    /// The fetch of a repository given by the mirrorlist `list`: the list, then the mirrors
    /// it gives, in order.
    fn fetch_listed(&self, name: String, list: String) {
        let (http, cache) = (self.http.clone(), self.cache.clone());
        let key = (name.clone(), mirrorlist_source(&list));
        self.tasks.start(key, || async move {
            // A list that cannot be fetched for a reason other than the network is the build
            // proper's to fetch again and report.
            let urls = fetch_mirrorlist(&http, &list).await?;
            if urls.is_empty() {
                let read = Err(RepoError::Unreachable { name, tried: Vec::new() });
                return Ok(Listed { urls, read });
            }
            let read = erdma_rpm::repo::prefetch(&http, &name, &urls, &cache).await;
            Ok(Listed { urls, read })
        });
    }

    /// The fetch ahead of repository `name` at `source` (its URLs, or its mirrorlist as
    /// `sources.rs`'s `mirrorlist_source` names it), once it is done; `None` where none was
    /// started, or its mirrorlist could not be read for a reason the build reports itself.
    /// (A repository no mirror of answered is a [`Listed`] whose `read` says so.)
    pub async fn take(&self, name: &str, source: &[String]) -> Option<Listed> {
        let key = (name.to_string(), source.to_vec());
        match self.tasks.take(&key, RepoError::is_unreachable).await {
            Ahead::Fetched(listed) => Some(listed),
            Ahead::Nothing | Ahead::Unreachable(_) => None,
        }
    }

    /// Whether the recipe the build picks, once the os-release has streamed past, is an rpm
    /// recipe.
    pub fn is_rpm_build(&self) -> bool {
        let seen = self.seen.lock().expect("poisoned");
        seen.recipe.as_ref().is_some_and(|r| r.backend == Backend::Rpm)
    }

    /// How many fetches were started and not yet taken (for the tests).
    pub fn started(&self) -> usize {
        self.tasks.started()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in recipe for the release, as the build picks it.
    fn picked(os_release: &[u8]) -> Option<Picked> {
        let os = crate::distro::OsRelease::parse(&String::from_utf8_lossy(os_release));
        Some(crate::recipe::Recipe::for_os(&os).ok()?.for_build(false, "amd64").picked())
    }

    /// Serves `body` to every request on 127.0.0.1; returns the port.
    fn serve(body: String) -> u16 {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(format!("{head}{body}").as_bytes());
            }
        });
        port
    }

    /// The files stream past as a Rocky 9 image's layer has them (variables, then `.repo`
    /// files, then `usr/lib/os-release`): once the release is known, a fetch starts for each
    /// repository the build will read, named as the build names it (a mirrorlist's by the
    /// list, the URLs it gives coming back with what was fetched), and none for what it will
    /// not read. Port 1, where nothing listens (a port bound to 0 is never given it), stands
    /// in for every mirror.
    #[tokio::test]
    async fn the_repositories_the_build_reads_start_once_the_release_is_known() {
        let port = 1;
        let at = |path: &str| format!("http://127.0.0.1:{port}/{path}");
        let lists = serve(format!("# the nearest first\n{}\n", at("appstream/")));
        let repo_urls = BTreeMap::from([("erdma".to_string(), at("erdma"))]);
        let recipe_of: RecipeOf = Box::new(picked);
        let http = erdma_http::Client::new(erdma_http::Timeouts::default());
        let cache = tempfile::tempdir().unwrap();
        let ahead = Prefetches::new(http, cache.path(), "amd64", repo_urls, recipe_of);

        ahead.watch("etc/dnf/vars/contentdir", b"pub/rocky\n");
        let list = format!(
            "http://127.0.0.1:{lists}/mirrorlist?arch=$basearch&repo=AppStream-$releasever"
        );
        let rocky = format!(
            "[baseos]\nname=BaseOS\nbaseurl={}\ngpgcheck=1\n\n\
             [appstream]\nmirrorlist={list}\n\n[devel]\nenabled=0\nbaseurl={}\n",
            at("$contentdir/$releasever/BaseOS/$basearch/os/"),
            at("devel/"),
        );
        ahead.watch("etc/yum.repos.d/rocky.repo", rocky.as_bytes());
        // MLNX_OFED's, which the recipe removes, and files dnf does not read.
        let ofed = format!("[mlnx_ofed]\nbaseurl={}\n", at("ofed/"));
        ahead.watch("etc/yum.repos.d/mlnx_ofed.repo", ofed.as_bytes());
        ahead.watch("etc/yum.repos.d/other.repo.rpmnew", ofed.as_bytes());
        ahead.watch("etc/yum.repos.d/sub/x.repo", ofed.as_bytes());
        assert_eq!(ahead.started(), 0, "nothing before the release is known");
        ahead.watch(
            "usr/lib/os-release",
            b"NAME=\"Rocky Linux\"\nID=\"rocky\"\nVERSION_ID=\"9.5\"\n",
        );
        // Again, as a later layer may bring the same file: nothing is started twice.
        ahead.watch("etc/yum.repos.d/rocky.repo", rocky.as_bytes());
        assert_eq!(ahead.started(), 3);

        // Each is found under the name and URLs the build gives it, unreachable.
        let unreachable = |got: Option<Listed>, urls: &[String]| match got {
            Some(listed) => {
                assert_eq!(listed.urls, urls);
                match listed.ahead() {
                    Ahead::Unreachable(e) => assert!(e.to_string().contains("127.0.0.1"), "{e}"),
                    other => panic!("{other:?}"),
                }
            }
            None => panic!("no fetch under the build's name and URLs"),
        };
        let baseos = vec![at("pub/rocky/9/BaseOS/x86_64/os/")];
        unreachable(ahead.take(&base_name("baseos"), &baseos).await, &baseos);
        unreachable(ahead.take("erdma", &[at("erdma")]).await, &[at("erdma")]);
        let list = format!("http://127.0.0.1:{lists}/mirrorlist?arch=x86_64&repo=AppStream-9");
        let appstream = ahead.take(&base_name("appstream"), &mirrorlist_source(&list)).await;
        unreachable(appstream, &[at("appstream/")]);
        assert_eq!(ahead.started(), 0);

        // A Debian base starts nothing here (apt's sources are apt::prefetch's).
        let recipe_of: RecipeOf = Box::new(picked);
        let http = erdma_http::Client::new(erdma_http::Timeouts::default());
        let debian = Prefetches::new(http, cache.path(), "amd64", BTreeMap::new(), recipe_of);
        debian.watch("etc/yum.repos.d/rocky.repo", rocky.as_bytes());
        debian
            .watch("etc/os-release", b"ID=debian\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\n");
        assert_eq!(debian.started(), 0);
    }

    /// The layers stream past the top one first: a lower layer's `.repo` file, variables file
    /// or os-release does not replace the one above it; dnf's variables beat yum's, and a file
    /// in a directory below `vars/` is none.
    #[tokio::test]
    async fn the_top_layer_s_files_and_dnf_s_variables_are_the_ones_read() {
        // Port 1: nothing listens there.
        let port = 1;
        let at = |path: &str| format!("http://127.0.0.1:{port}/{path}");
        let repo_urls = BTreeMap::from([("erdma".to_string(), at("erdma"))]);
        let http = erdma_http::Client::new(erdma_http::Timeouts::default());
        let cache = tempfile::tempdir().unwrap();
        let ahead = Prefetches::new(http, cache.path(), "amd64", repo_urls, Box::new(picked));
        let repo = |path: &str| format!("[baseos]\nbaseurl={}\n", at(path));
        // The top layer.
        ahead.watch("etc/yum.repos.d/rocky.repo", repo("corp/$contentdir/").as_bytes());
        ahead.watch("etc/dnf/vars/contentdir", b"dnf\n");
        ahead.watch("etc/yum/vars/contentdir", b"yum\n");
        ahead.watch("etc/dnf/vars/sub/contentdir", b"nested\n");
        ahead.watch("etc/os-release", b"ID=\"rocky\"\nVERSION_ID=\"9.5\"\n");
        // The layer below it.
        ahead.watch("etc/yum.repos.d/rocky.repo", repo("public/").as_bytes());
        ahead.watch("etc/dnf/vars/contentdir", b"lower\n");
        ahead.watch("usr/lib/os-release", b"ID=debian\nVERSION_ID=\"12\"\n");
        assert_eq!(ahead.started(), 2, "the recipe's erdma and the top layer's baseos");
        let baseos = ahead.take(&base_name("baseos"), &[at("corp/dnf/")]).await;
        assert!(baseos.is_some(), "{baseos:?}");
        assert_eq!(ahead.started(), 1);
    }
}
