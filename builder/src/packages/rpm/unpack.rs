//! Unpacking an `.rpm`'s payload into the layer: each entry checked
//! ([`crate::packages::payload`]), owners mapped through the image's passwd and group as they
//! are when rpm unpacks the package (after its `%pre`).
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::fetch::package_file;
use super::plan::Resolved;
use super::scripts::Accounted;
use crate::error::{Error, Result};
use crate::packages::ldconfig;
use crate::packages::payload::Refused;
use crate::packages::users;
use crate::packages::PackagesReport;
use crate::packages::{alternatives, PackageError};
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents, Placing};
use erdma_rpm::package::{FileInfo, PayloadSink, RpmError, UnpackError, Written};
use erdma_rpm::PackageMeta;

/// Why [`LayerSink`] did not write an entry.
enum SinkError {
    Refused(Refused),
    Layer(erdma_oci::Error),
}

/// A payload's files into the layer, as rpm's fsm writes them (lib/fsm.c): through the image's
/// symlinked directories ([`crate::packages::payload::Placer`]: EL9's merged /usr puts a
/// package's `/sbin/x` in `usr/sbin/x`, and the `sbin -> usr/sbin` link stays), owners by name
/// from the image's passwd and group (root for a name it does not know, as lib/rpmug.c), the
/// header's mode and mtime (`rpm -V` compares both; a symlink's mode is 0777), a hard link set
/// as links to its first name.
struct LayerSink<'a, 'b> {
    layer: &'a mut LayerContents,
    placer: &'a mut crate::packages::payload::Placer<'b>,
    passwd: &'a BTreeMap<String, u32>,
    group: &'a BTreeMap<String, u32>,
}

impl PayloadSink for LayerSink<'_, '_> {
    type Content = EntryKind;
    type Error = SinkError;

    fn content(
        &mut self,
        from: &mut dyn std::io::Read,
        size: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> std::io::Result<EntryKind> {
        self.layer.file_kind(from, size, each)
    }

    fn write(
        &mut self,
        file: &FileInfo,
        path: &str,
        what: Written<'_, EntryKind>,
    ) -> std::result::Result<Option<String>, SinkError> {
        let (kind, placing, link_to) = match what {
            Written::Dir => (EntryKind::Dir, Placing::Dir, None),
            Written::Symlink(to) => {
                (EntryKind::Symlink(to.to_string()), Placing::Symlink(to), None)
            }
            Written::File { content, link_to } => (content.clone(), Placing::File, link_to),
        };
        let Some(at) = self.placer.place(path, placing).map_err(SinkError::Refused)? else {
            return Ok(None);
        };
        let mode = if matches!(kind, EntryKind::Symlink(_)) { 0o777 } else { file.mode & 0o7777 };
        let id = |names: &BTreeMap<String, u32>, name: &str| {
            u64::from(names.get(name).copied().unwrap_or(0))
        };
        let entry = Entry {
            kind,
            mode,
            uid: id(self.passwd, &file.user),
            gid: id(self.group, &file.group),
        };
        match link_to {
            Some(to) => self.layer.add_hardlink(&at, to),
            None => self.layer.insert(&at, entry),
        }
        .map_err(SinkError::Layer)?;
        self.layer.set_mtime(&at, u64::from(file.mtime));
        Ok(Some(at))
    }
}

/// The header's file list through [`crate::packages::payload::Placer`], as an unpack would
/// place it (header order: a directory or symlink before what is under it).
pub(crate) fn check_paths(
    pkg: &erdma_rpm::package::Package,
    meta: &PackageMeta,
    placer: &mut crate::packages::payload::Placer<'_>,
) -> Result<()> {
    use crate::packages::payload::check_name;
    for f in pkg.files().iter().filter(|f| !f.is_ghost()) {
        let refuse = |why: Refused| {
            Error::refused(format!("{} ({})", meta.nevra(), meta.origin), &f.path, why)
        };
        let norm = erdma_oci::layer::normalize(&f.path).ok_or_else(|| refuse(Refused::Escapes))?;
        check_name(&norm).map_err(refuse)?;
        let kind = match f.file_type() {
            0o040000 => Placing::Dir,
            0o100000 => Placing::File,
            0o120000 => Placing::Symlink(&f.link_to),
            _ => continue,
        };
        placer.place(&norm, kind).map_err(refuse)?;
    }
    Ok(())
}

/// The package's setuid and setgid files, device nodes, FIFOs and sockets, from its header
/// ([`crate::packages::payload::special`]); `%ghost` files are not in the payload.
pub(crate) fn note_special(
    pkg: &erdma_rpm::package::Package,
    label: &str,
    report: &mut PackagesReport,
) {
    use crate::packages::payload::{special, FileType};
    for f in pkg.files().iter().filter(|f| !f.is_ghost()) {
        // Linux's `new_encode_dev` (include/linux/kdev_t.h), as rpm stores `FILERDEVS`.
        let (major, minor) = ((f.rdev >> 8) & 0xfff, (f.rdev & 0xff) | ((f.rdev >> 12) & 0xfff00));
        let t = match f.file_type() {
            0o040000 => FileType::Dir,
            0o100000 => FileType::File,
            0o120000 => FileType::Symlink,
            0o020000 => FileType::Char { major, minor },
            0o060000 => FileType::Block { major, minor },
            0o010000 => FileType::Fifo,
            0o140000 => FileType::Socket,
            _ => continue,
        };
        report.special_files.extend(special(label, &f.path, t, f.mode));
    }
}

/// `name → id` from an `/etc/passwd` or `/etc/group` of the image (the layer's, where the build
/// wrote one: scriptlets' accounts, or `setup` on EL).
pub(crate) fn ids(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?.to_string();
            let id = f.nth(1)?.parse().ok()?;
            Some((name, id))
        })
        .collect()
}

/// Writes the planned packages' payloads into the layer, whites out the files of the packages
/// that go (replaced, upgraded, removed) that nothing new puts back and no package that stays
/// owns, and writes the rpm database with the gone packages' headers removed and the new ones
/// added as rpm stores them. The scriptlets' system groups and users (`accounted`) go in as rpm
/// runs them: every `%pretrans` first, then for each package its `%pre`, its files, its `%post`,
/// and every `%posttrans` last ([`users::apply`]). Returns the paths removed.
pub(crate) fn unpack(
    resolved: &Resolved,
    files: &[(PathBuf, erdma_rpm::package::Package)],
    accounted: &mut Accounted,
    base: &dyn BaseFiles,
    arch: &str,
    layer: &mut LayerContents,
    inflation: u64,
) -> Result<Vec<String>> {
    let day = users::today();
    users::apply(&accounted.pretrans, base, layer, day, users::Tools::RedHat)?;
    let read = |p: &str, layer: &LayerContents| -> Result<BTreeMap<String, u32>> {
        let bytes = crate::packages::image::read(p, base, layer, 4 << 20)?.unwrap_or_default();
        Ok(ids(&String::from_utf8_lossy(&bytes)))
    };
    // The image's names, read again after anything that may change them.
    let mut names: Option<(BTreeMap<String, u32>, BTreeMap<String, u32>)> = None;
    // rpm writes through the directory symlinks the image has (merged /usr on EL9: /sbin ->
    // usr/sbin), and never replaces such a symlink with a directory; nothing is written
    // through a symlink this build installs (one placer for every package).
    let mut placer = crate::packages::payload::Placer::new(base);
    let now = erdma_common::dates::now().max(0) as u32;
    let color = erdma_rpm::rpmdb::transaction_color(&super::image::Image(base), arch);
    let mut blobs = Vec::new();
    for (i, ((path, pkg), planned)) in files.iter().zip(&resolved.plan.install).enumerate() {
        let (pre, post) = (accounted.pre.get(i), accounted.post.get(i));
        if let Some(pre) = pre.filter(|ops| !ops.is_empty()) {
            users::apply(pre, base, layer, day, users::Tools::RedHat)?;
            names = None;
        }
        if names.is_none() {
            names = Some((read("etc/passwd", layer)?, read("etc/group", layer)?));
        }
        let (passwd, group) = names.as_ref().expect("read above");
        // rpm resolves file owners by name as it unpacks, after the package's %pre, and falls
        // back to root (with a warning) for a name the image does not know (lib/fsm.c,
        // lib/rpmug.c).
        let package = || format!("{} ({})", planned.package.nevra(), planned.package.origin);
        let entry_error = |e: UnpackError<SinkError>| match e {
            UnpackError::Package(RpmError::UnsafePath { entry, .. }) => Error::PackageEntry {
                package: package(),
                entry: entry.escape_debug().to_string(),
                reason: crate::packages::payload::Refused::Escapes.to_string(),
            },
            UnpackError::Package(RpmError::BadEntry { entry, reason, .. }) => Error::PackageEntry {
                package: package(),
                entry: entry.escape_debug().to_string(),
                reason,
            },
            UnpackError::Package(RpmError::Limit { exceeded, .. }) => {
                Error::Limit { what: format!("the payload of {}", package()), exceeded }
            }
            UnpackError::Package(e) => package_file(path.display(), e),
            UnpackError::Sink { entry, error: SinkError::Refused(why) } => {
                Error::refused(package(), &entry, why)
            }
            UnpackError::Sink { entry, error: SinkError::Layer(e) } => Error::PackageLayer {
                package: package(),
                entry: entry.escape_debug().to_string(),
                source: Box::new(e),
            },
        };
        let mut sink = LayerSink { layer, placer: &mut placer, passwd, group };
        let unpacked = pkg
            .unpack(
                path,
                &mut sink,
                &erdma_rpm::package::UnpackOptions { inflation, nodocs: false },
            )
            .map_err(entry_error)?;
        if pkg.files().iter().any(|f| f.path == "/etc/passwd" || f.path == "/etc/group") {
            names = None;
        }
        if let Some(post) = post.filter(|ops| !ops.is_empty()) {
            users::apply(post, base, layer, day, users::Tools::RedHat)?;
            names = None;
        }
        if let Some(alts) = accounted.post_alternatives.get(i).filter(|a| !a.is_empty()) {
            alternatives::apply(alternatives::Tool::Chkconfig, alts, base, layer)?;
        }
        let ctx = erdma_rpm::rpmdb::InstallCtx {
            install_time: now,
            tid: now,
            color,
            file_states: unpacked.file_states.clone(),
        };
        blobs.push(
            erdma_rpm::rpmdb::installed_header(&pkg.header, &pkg.signature, &ctx)
                .map_err(|e| package_file(path.display(), e))?,
        );
    }
    let mut gone_hnums = Vec::new();
    let mut gone_files: Vec<String> = Vec::new();
    let mut kept_files: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let fates = installed_fates(resolved);
    for &(hnum, h, goes) in &fates {
        if goes {
            gone_hnums.push(hnum);
            gone_files.extend(h.file_paths());
        } else {
            kept_files.extend(h.file_paths());
        }
    }
    let mut removed = Vec::new();
    for f in gone_files {
        let Some(rel) = erdma_oci::layer::normalize(&f) else { continue };
        let Some(rel) = base.real_path(&rel)?.filter(|p| !p.is_empty()) else { continue };
        if kept_files.contains(&f) || layer.files().any(|(p, _)| p == rel) {
            continue;
        }
        // Directories stay: other packages' files may live in them, and rpm -e keeps a
        // directory that is not empty.
        if matches!(base.kind(&rel)?, Some(erdma_oci::rootfs::SnapEntry::Dir) | None) {
            continue;
        }
        layer.add_whiteout(&rel)?;
        removed.push(f);
    }
    users::apply(&accounted.posttrans, base, layer, day, users::Tools::RedHat)?;
    alternatives::apply(
        alternatives::Tool::Chkconfig,
        &accounted.posttrans_alternatives,
        base,
        layer,
    )?;
    super::presets::apply(&accounted.presets, base, layer)?;
    ldconfig(&fates, files, &mut accounted.records, base, arch, layer)?;
    for db_file in erdma_rpm::rpmdb::write(&resolved.db, &gone_hnums, &blobs)
        .map_err(|e| Error::from(PackageError::WriteDatabase(Box::new(e))))?
    {
        super::image::apply(db_file, layer)?;
    }
    removed.sort();
    Ok(removed)
}

/// `ldconfig`, where a scriptlet or a trigger runs it (`records`, [`ldconfig::first_run`]): as
/// rpm runs glibc's file trigger once the transaction's files are in, `/etc/ld.so.cache` is
/// rewritten for the image with every package in ([`ldconfig::run`], the image's glibc as the
/// plan leaves it: a planned build, else the installed one of `fates`).
fn ldconfig(
    fates: &[(u32, &erdma_rpm::header::Header, bool)],
    files: &[(PathBuf, erdma_rpm::package::Package)],
    records: &mut [crate::packages::scripts::ScriptRecord],
    base: &dyn BaseFiles,
    arch: &str,
    layer: &mut LayerContents,
) -> Result<()> {
    use crate::packages::ldcache::{Arch, Build, Glibc};
    let Some(first) = ldconfig::first_run(records) else {
        return Ok(());
    };
    let (package, script) = (first.package.clone(), first.script.clone());
    let planned = files.iter().map(|(_, p)| &p.header).find(|h| h.name() == "glibc");
    let staying =
        fates.iter().find(|(_, h, goes)| !goes && h.name() == "glibc").map(|(_, h, _)| *h);
    let installed =
        planned.or(staying).and_then(|h| Glibc::from_version(&h.evr().version, Build::Other));
    let image = Arch::from_rpm(arch)
        .map(|arch| ldconfig::Ldconfig { arch, family: ldconfig::Family::Rpm, installed })
        .ok_or_else(|| format!("not emulated on {arch}"));
    let adds_conf_dir = files
        .iter()
        .any(|(_, p)| p.header.file_paths().iter().any(|f| f.starts_with("/etc/ld.so.conf.d/")));
    ldconfig::run(base, layer, image, (&package, &script), adds_conf_dir, records)
}

/// Each installed package (its header number and header) and whether this transaction takes
/// it away: removed, or replaced by a new build, an upgrade or a downgrade.
pub(super) fn installed_fates(resolved: &Resolved) -> Vec<(u32, &erdma_rpm::header::Header, bool)> {
    let mut gone: Vec<String> = resolved.plan.remove.iter().map(|r| r.nevra.clone()).collect();
    for p in &resolved.plan.install {
        match &p.action {
            super::resolve::Action::Install => {}
            // `from` is the EVR the same name had.
            super::resolve::Action::Upgrade { from }
            | super::resolve::Action::Downgrade { from } => {
                gone.push(format!("{}-{from}", p.package.name))
            }
            super::resolve::Action::Replace { from } => gone.extend(from.iter().cloned()),
        }
    }
    resolved
        .db
        .headers()
        .iter()
        .map(|(hnum, h)| {
            let (name, evr) = (h.name(), h.evr());
            let nevra = format!("{name}-{evr}.{}", h.arch());
            // A removal may name the package as `name-evr.arch` or by its EVR alone.
            let goes =
                gone.iter().any(|g| g == &nevra || g == &format!("{name}-{evr}") || g == &name);
            (*hnum, h, goes)
        })
        .collect()
}
