//! What a build of an rpm image knows once it has resolved: the image's database, the plan,
//! the repositories read and the local packages; what `fetch` downloads and `unpack` writes.
use std::path::PathBuf;

use super::resolve::Resolution;
use erdma_rpm::repo::LoadedRepo;
use erdma_rpm::PackageMeta;

/// What a build of an rpm image knows about its database and repositories after resolving.
pub(crate) struct Resolved {
    pub(crate) db: erdma_rpm::rpmdb::Database,
    pub(crate) plan: Resolution,
    pub(crate) repos: Vec<LoadedRepo>,
    pub(crate) local: Vec<(PathBuf, PackageMeta)>,
}
