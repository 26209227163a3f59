//! The base image's files as `erdma_rpm`'s database code reads them
//! ([`erdma_rpm::rpmdb::ImageFiles`]), and the database files it writes put into the layer.
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_rpm::rpmdb::{DbFile, FilesError, ImageFiles};

/// The base's files, read from its layers.
pub(super) struct Image<'a>(pub(super) &'a dyn BaseFiles);

impl ImageFiles for Image<'_> {
    fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>, FilesError> {
        Ok(self.0.read(path, max)?)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, FilesError> {
        Ok(self.0.list(dir)?)
    }
    fn real_path(&self, path: &str) -> Result<Option<String>, FilesError> {
        Ok(self.0.real_path(path)?)
    }
}

/// Puts a file of the new database into the layer, or whites its path out.
pub(super) fn apply(file: DbFile, layer: &mut LayerContents) -> erdma_oci::Result<()> {
    match file {
        DbFile::File { path, bytes, mode } => layer.add_file(&path, bytes, mode),
        DbFile::Whiteout { path } => layer.add_whiteout(&path),
    }
}
