//! Unpacking a `.deb`'s data into the layer: each entry checked ([`crate::packages::payload`]),
//! conffiles, diversions and replaced files handled as dpkg does.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use md5::{Digest as _, Md5};

use super::dpkg::{info_name, write_info, BaseStatus, SumsWanted, INFO, STATUS};
use super::fetch::on_disk;
use super::order;
use super::resolve::Installed;
use super::resolve::{self, package_label, Planned};
use super::scripts::{self, Accounted};
use crate::error::{Error, Result};
use crate::packages::payload::{self, FileType, Placer, Refused};
use crate::packages::users;
use crate::packages::{Inputs, PackagesReport};
use erdma_deb::deb::{self, DataKind};
use erdma_deb::deb822::Paragraph;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents};

/// A refused entry, or a `.deb` that cannot be read, as one line naming the package.
pub(crate) fn entry_error(
    planned: &Planned,
    path: &Path,
    e: deb::DebError,
    refused: Option<(String, Refused)>,
) -> Error {
    let package = package_label(planned);
    let shown = |entry: &str| entry.escape_debug().to_string();
    match (refused, e) {
        (Some((entry, why)), _) => Error::refused(package, &entry, why),
        (None, deb::DebError::UnsafePath { entry, .. }) => Error::PackageEntry {
            package,
            entry: shown(&entry),
            reason: Refused::Escapes.to_string(),
        },
        (None, deb::DebError::BadEntry { entry, reason, .. }) => {
            Error::PackageEntry { package, entry: shown(&entry), reason }
        }
        (None, deb::DebError::BadHeader { entry, field, source, .. }) => {
            Error::PackageEntryHeader { package, entry: shown(&entry), field, source }
        }
        (None, deb::DebError::Limit { member, exceeded, .. }) => {
            Error::Limit { what: format!("{member} of {package}"), exceeded }
        }
        (None, source) => Error::Deb { path: path.to_owned(), source: Box::new(source) },
    }
}

/// A hard link to anything but a regular file of the same package seen before it (tar writes
/// a file's first name before its other names): `/etc/shadow`, a directory, a later entry.
pub(crate) fn dangling_link(path: &Path, entry: &str, target: &str) -> deb::DebError {
    deb::DebError::BadEntry {
        path: path.to_owned(),
        member: "data.tar".into(),
        entry: entry.to_string(),
        reason: format!(
            "hard link to `{}`, which is not a regular file of this package before it",
            target.escape_debug()
        ),
    }
}

/// What the scripts and the report keep of one payload entry of the package `label`: its
/// path in `list` (and in `executable` when it is a regular file with an execute bit), and
/// what the report lists of it (setuid and setgid files, device nodes, FIFOs).
fn note_entry(
    entry: &deb::DataEntry,
    label: &str,
    list: &mut Vec<String>,
    executable: &mut BTreeSet<String>,
    special: &mut Vec<payload::SpecialFile>,
) {
    list.push(format!("/{}", entry.path));
    if matches!(entry.kind, DataKind::File { .. }) && entry.mode & 0o111 != 0 {
        executable.insert(format!("/{}", entry.path));
    }
    special.extend(payload::special(label, &entry.path, file_type(&entry.kind), entry.mode));
}

/// The `.deb` payload's entry kind, for [`payload::special`].
pub(crate) fn file_type(kind: &DataKind) -> FileType {
    match kind {
        DataKind::Dir => FileType::Dir,
        DataKind::File { .. } | DataKind::Hardlink(_) => FileType::File,
        DataKind::Symlink(_) => FileType::Symlink,
        DataKind::Fifo => FileType::Fifo,
        DataKind::CharDevice { major, minor } => FileType::Char { major: *major, minor: *minor },
        DataKind::BlockDevice { major, minor } => FileType::Block { major: *major, minor: *minor },
    }
}

/// Reads the payload of each package of `res` that is on disk (a `--package` file, a `.deb`
/// in the cache, one a `file://` repository serves that hashes as its index says) for the
/// report's special files, without writing anything; the others are named in
/// [`PackagesReport::not_inspected`]. `debs`: every package's file, when they were fetched.
pub(crate) fn inspect(
    res: &resolve::Resolution,
    debs: Option<&[PathBuf]>,
    status: &BaseStatus,
    base: &dyn BaseFiles,
    inputs: &Inputs<'_>,
    report: &mut PackagesReport,
) -> Result<()> {
    let inflation = inputs.http.inflation();
    // What a build would refuse, a plan refuses too (for the packages it can read).
    let mut placer = Placer::new(base);
    let installed = Installed::from_status(&status.paragraphs);
    let mut accounted = Accounted::default();
    accounted.ucf_planned = res.install.iter().any(|p| p.name == "ucf");
    // Each package read: its plan index, control part and payload list.
    let mut read = Vec::new();
    for (i, planned) in res.install.iter().enumerate() {
        let path = match debs {
            Some(d) => Some(d[i].clone()),
            None => on_disk(&planned.pkg, &inputs.cache_dir.join("debs")),
        };
        let Some(path) = path else {
            report.not_inspected.push(format!("{} {}", planned.name, planned.version));
            continue;
        };
        let label = format!("{} {}", planned.name, planned.version);
        let mut refused: Option<(String, Refused)> = None;
        let mut files: BTreeSet<String> = BTreeSet::new();
        let mut list = Vec::new();
        let mut executable = BTreeSet::new();
        let kept = super::fetch::kept_payload(&planned.pkg, &path, &inputs.cache_dir);
        deb::for_each_data_entry_kept(&path, inflation, kept.as_deref(), |entry, _| {
            note_entry(&entry, &label, &mut list, &mut executable, &mut report.special_files);
            let place = match &entry.kind {
                DataKind::Dir => erdma_oci::layer::Placing::Dir,
                DataKind::Symlink(t) => erdma_oci::layer::Placing::Symlink(t),
                DataKind::File { .. } => {
                    files.insert(entry.path.clone());
                    erdma_oci::layer::Placing::File
                }
                DataKind::Hardlink(target) if files.contains(target) => {
                    erdma_oci::layer::Placing::File
                }
                DataKind::Hardlink(target) => {
                    return Err(dangling_link(&path, &entry.path, target))
                }
                DataKind::Fifo | DataKind::CharDevice { .. } | DataKind::BlockDevice { .. } => {
                    return Ok(())
                }
            };
            if let Err(why) =
                payload::check_name(&entry.path).and_then(|()| placer.place(&entry.path, place))
            {
                refused = Some((entry.path.clone(), why.clone()));
                return Err(deb::DebError::Handler {
                    entry: entry.path.clone(),
                    source: Box::new(why),
                });
            }
            Ok(())
        })
        .map_err(|e| entry_error(planned, &path, e, refused.take()))?;
        let deb = deb::read_control(&path).map_err(|e| entry_error(planned, &path, e, None))?;
        read.push((i, deb, list, executable));
    }
    // The scripts in the order dpkg configures the packages.
    for i in order::configure_order(&res.install, &status.paragraphs)?.order {
        let Some((_, deb, list, executable)) = read.iter().find(|r| r.0 == i) else { continue };
        let planned = &res.install[i];
        let old = installed.iter().find(|i| i.name == planned.name).map(|i| &i.version);
        let payload = scripts::Payload { list, executable };
        scripts::account(
            planned,
            deb,
            &payload,
            old,
            base,
            None,
            inputs.skip_scripts,
            &mut accounted,
        )?;
    }
    for gone in &res.remove {
        scripts::removed(gone, &info_name(&gone.paragraph, &gone.arch), base, &mut accounted)?;
    }
    scripts::check_interests(
        &accounted.interests,
        read.iter().flat_map(|r| r.2.iter().map(String::as_str)),
    )?;
    report.scripts.extend(accounted.records);
    Ok(())
}

/// Unpacks the packages into `layer` and writes the dpkg database, the removals and the
/// emulated maintainer-script effects. Every entry goes where [`Placer`] says, and the
/// report gets the payloads' special files.
pub(super) fn unpack(
    res: &resolve::Resolution,
    debs: &[PathBuf],
    status: &BaseStatus,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    inputs: &Inputs<'_>,
    report: &mut PackagesReport,
) -> Result<Vec<String>> {
    let mut new_paths: BTreeSet<String> = BTreeSet::new();
    let installed = Installed::from_status(&status.paragraphs);
    let mut accounted = Accounted::default();
    accounted.ucf_planned = res.install.iter().any(|p| p.name == "ucf");
    let mut stanzas: Vec<Paragraph> = Vec::new();
    // One placer for all the packages: a symlink one installs is seen by the next.
    let mut placer = Placer::new(base);
    // Each package's control part and payload list, for its scripts.
    let mut unpacked = Vec::new();
    for (planned, path) in res.install.iter().zip(debs) {
        let mut into = UnpackInto { placer: &mut placer, layer, new_paths: &mut new_paths, report };
        let kept = super::fetch::kept_payload(&planned.pkg, path, &inputs.cache_dir);
        let file = DebFile { path, kept: kept.as_deref(), inflation: inputs.http.inflation() };
        let (deb, list, executable) = unpack_one(planned, file, &mut into, &mut stanzas)?;
        unpacked.push((planned, deb, list, executable));
    }
    // The scripts are read once every package is unpacked, in the order dpkg configures them.
    for i in order::configure_order(&res.install, &status.paragraphs)?.order {
        let (planned, deb, list, executable) = &unpacked[i];
        let old = installed.iter().find(|i| i.name == planned.name).map(|i| &i.version);
        let payload = scripts::Payload { list, executable };
        scripts::account(
            planned,
            deb,
            &payload,
            old,
            base,
            Some(layer),
            inputs.skip_scripts,
            &mut accounted,
        )?;
    }
    let removed_files = remove(res, base, layer, &new_paths, &mut accounted)?;
    write_status(res, status, stanzas, layer)?;
    let payloads = unpacked.iter().flat_map(|u| u.2.iter().map(String::as_str));
    apply_scripts(&mut accounted, payloads, base, layer, &new_paths, inputs)?;
    report.scripts.extend(accounted.records);
    Ok(removed_files)
}

/// Where [`unpack_one`] reads a package: the `.deb`, where its decompressed payload is kept
/// ([`super::fetch::kept_payload`]), how far it may inflate.
struct DebFile<'a> {
    path: &'a Path,
    kept: Option<&'a Path>,
    inflation: u64,
}

/// Where [`unpack_one`] writes: the layer through the one placer of the install, the paths
/// it adds, the report's special files.
struct UnpackInto<'p, 'b, 'l> {
    placer: &'p mut Placer<'b>,
    layer: &'l mut LayerContents,
    new_paths: &'l mut BTreeSet<String>,
    report: &'l mut PackagesReport,
}

/// One `.deb` (`planned`, at `path`) unpacked into the layer as dpkg unpacks it, its info
/// files written and its status stanza added to `stanzas`: its control part, its payload's
/// paths (`/.` first) and the regular files with an execute bit, for its scripts.
fn unpack_one(
    planned: &Planned,
    file: DebFile<'_>,
    into: &mut UnpackInto<'_, '_, '_>,
    stanzas: &mut Vec<Paragraph>,
) -> Result<(deb::Deb, Vec<String>, BTreeSet<String>)> {
    let UnpackInto { placer, layer, new_paths, report } = into;
    let DebFile { path, kept, inflation } = file;
    let deb = deb::read_control(path).map_err(|e| entry_error(planned, path, e, None))?;
    let label = format!("{} {}", planned.name, planned.version);
    let mut list = vec!["/.".to_string()];
    let mut executable = BTreeSet::new();
    // Each regular file of the package, for its hard links, with its MD5 where dpkg records
    // one (SumsWanted: the conffiles', or every file's for a package without md5sums).
    let wanted = SumsWanted::of(&deb, planned)?;
    let mut files: BTreeMap<String, Option<[u8; 16]>> = BTreeMap::new();
    // Each regular file's name (as the package has it) and MD5 in payload order, for an
    // md5sums dpkg computes when the package has none; where each landed in the layer.
    let mut sums: Vec<(String, [u8; 16])> = Vec::new();
    let mut landed: BTreeMap<String, String> = BTreeMap::new();
    // The entry refused and why, for the error that names the package.
    let mut refused: Option<(String, Refused)> = None;
    deb::for_each_data_entry_kept(path, inflation, kept, |entry, data| {
        let mut refuse = |why: Refused| {
            refused = Some((entry.path.clone(), why.clone()));
            deb::DebError::Handler { entry: entry.path.clone(), source: Box::new(why) }
        };
        payload::check_name(&entry.path).map_err(&mut refuse)?;
        note_entry(&entry, &label, &mut list, &mut executable, &mut report.special_files);
        let kind = match &entry.kind {
            DataKind::Dir => EntryKind::Dir,
            DataKind::File { size } => {
                let mut md5 = wanted.wants(&entry.path).then(Md5::new);
                let kind = layer
                    .file_kind(data, *size, &mut |chunk| {
                        if let Some(md5) = md5.as_mut() {
                            md5.update(chunk);
                        }
                    })
                    .map_err(|e| deb::DebError::Handler {
                        entry: entry.path.clone(),
                        source: Box::new(e),
                    })?;
                let sum = md5.map(|m| <[u8; 16]>::from(m.finalize()));
                files.insert(entry.path.clone(), sum);
                if let Some(sum) = sum {
                    sums.push((entry.path.clone(), sum));
                }
                kind
            }
            DataKind::Symlink(target) => EntryKind::Symlink(target.clone()),
            // A hard link stays one: another name of the file, as dpkg's link(2) leaves
            // it. tar writes the first name of a file before its links, so a link to
            // anything else (`/etc/shadow`, a directory) is not a file of this package.
            DataKind::Hardlink(target) => {
                let (Some(sum), Some(to)) = (files.get(target), landed.get(target)) else {
                    return Err(dangling_link(path, &entry.path, target));
                };
                let (sum, to) = (*sum, to.clone());
                let Some(real) = placer
                    .place(&entry.path, erdma_oci::layer::Placing::File)
                    .map_err(&mut refuse)?
                else {
                    return Ok(());
                };
                layer.add_hardlink(&real, &to).map_err(|e| deb::DebError::Handler {
                    entry: entry.path.clone(),
                    source: Box::new(e),
                })?;
                // A link wanted where its target was not (a conffile linked to a file that is
                // not one): the MD5 of the bytes the target left in the layer.
                let sum = match sum {
                    None if wanted.wants(&entry.path) => {
                        Some(md5_in_layer(layer, &to).map_err(|e| deb::DebError::Handler {
                            entry: entry.path.clone(),
                            source: Box::new(e),
                        })?)
                    }
                    sum => sum,
                };
                files.insert(entry.path.clone(), sum);
                if let Some(sum) = sum {
                    sums.push((entry.path.clone(), sum));
                }
                landed.insert(entry.path.clone(), real.clone());
                new_paths.insert(real);
                return Ok(());
            }
            // Not created (see payload::SpecialFile::created); listed in the report.
            DataKind::Fifo | DataKind::CharDevice { .. } | DataKind::BlockDevice { .. } => {
                return Ok(())
            }
        };
        let place = match &kind {
            EntryKind::Dir => erdma_oci::layer::Placing::Dir,
            EntryKind::Symlink(t) => erdma_oci::layer::Placing::Symlink(t),
            _ => erdma_oci::layer::Placing::File,
        };
        let Some(real) = placer.place(&entry.path, place).map_err(&mut refuse)? else {
            return Ok(());
        };
        layer
            .insert(&real, Entry { kind, mode: entry.mode, uid: entry.uid, gid: entry.gid })
            .map_err(|e| deb::DebError::Handler {
                entry: entry.path.clone(),
                source: Box::new(e),
            })?;
        if !matches!(entry.kind, DataKind::Dir) {
            landed.insert(entry.path.clone(), real.clone());
            new_paths.insert(real);
        }
        Ok(())
    })
    .map_err(|e| entry_error(planned, path, e, refused.take()))?;
    write_info(&deb, planned, &list, &files, &sums, layer, stanzas)?;
    Ok((deb, list, executable))
}

/// The MD5 of the regular file the layer holds at `path`, held or spooled.
fn md5_in_layer(layer: &LayerContents, path: &str) -> std::io::Result<[u8; 16]> {
    let not_a_file = || std::io::Error::other(format!("{path}: not a regular file in the layer"));
    let mut md5 = Md5::new();
    std::io::copy(&mut layer.file_reader(path)?.ok_or_else(not_a_file)?, &mut md5)?;
    Ok(md5.finalize().into())
}

/// What the removed packages owned and nothing new provides goes, as `apt remove` would, with
/// their info files; returns the files removed.
fn remove(
    res: &resolve::Resolution,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    new_paths: &BTreeSet<String>,
    accounted: &mut Accounted,
) -> Result<Vec<String>> {
    let mut removed_files = Vec::new();
    for gone in &res.remove {
        let iname = info_name(&gone.paragraph, &gone.arch);
        scripts::removed(gone, &iname, base, accounted)?;
        if let Some(list) = base.read(&format!("{INFO}/{iname}.list"), 16 << 20)? {
            for p in String::from_utf8_lossy(&list).lines() {
                let Some(p) = erdma_oci::layer::normalize(p) else { continue };
                let Some(p) = base.real_path(&p)?.filter(|p| !p.is_empty()) else { continue };
                // Directories stay (dpkg leaves those other packages use), and so do paths
                // the image does not have any more.
                if new_paths.contains(&p)
                    || !matches!(
                        base.kind(&p)?,
                        Some(
                            erdma_oci::rootfs::SnapEntry::File(_)
                                | erdma_oci::rootfs::SnapEntry::Symlink(_)
                        )
                    )
                {
                    continue;
                }
                layer.add_whiteout(&p)?;
                removed_files.push(format!("/{p}"));
            }
        }
        let replaced = res.install.iter().any(|p| p.name == gone.name);
        for suffix in [
            "list",
            "md5sums",
            "conffiles",
            "shlibs",
            "symbols",
            "triggers",
            "preinst",
            "postinst",
            "prerm",
            "postrm",
            "templates",
            "config",
        ] {
            let p = format!("{INFO}/{iname}.{suffix}");
            // A replacement under the same info name has just written its own files there.
            if replaced && layer_has(layer, &p) {
                continue;
            }
            if base.read(&p, 64 << 20)?.is_some() {
                layer.add_whiteout(&p)?;
            }
        }
    }
    Ok(removed_files)
}

/// The status file: the base's stanzas, less what went, plus what came (`stanzas`), sorted by
/// name as dpkg keeps it; the base's as status-old.
fn write_status(
    res: &resolve::Resolution,
    status: &BaseStatus,
    stanzas: Vec<Paragraph>,
    layer: &mut LayerContents,
) -> Result<()> {
    let gone: BTreeSet<(&str, &str)> =
        res.remove.iter().map(|i| (i.name.as_str(), i.arch.as_str())).collect();
    let mut all: Vec<Paragraph> = status
        .paragraphs
        .iter()
        .filter(|p| {
            let key =
                (p.get("Package").unwrap_or_default(), p.get("Architecture").unwrap_or_default());
            !gone.contains(&key)
                && !res.install.iter().any(|n| {
                    n.name == key.0 && (n.arch == key.1 || key.1 == "all" || n.arch == "all")
                })
        })
        .cloned()
        .collect();
    all.extend(stanzas);
    all.sort_by(|a, b| {
        (a.get("Package"), a.get("Architecture")).cmp(&(b.get("Package"), b.get("Architecture")))
    });
    let text: String = all.iter().map(|p| format!("{p}\n")).collect();
    layer.add_file(STATUS, text.into_bytes(), 0o644)?;
    // dpkg keeps the previous status as status-old; apt-get leaves one too.
    if let Some(old) = &status.raw {
        layer.add_file("var/lib/dpkg/status-old", old.clone(), 0o644)?;
    }
    Ok(())
}

/// What the scripts do, once every package is unpacked and configured, in dpkg's order; then
/// the triggers. `payloads`: every path the packages install, for the file triggers.
fn apply_scripts<'a>(
    accounted: &mut Accounted,
    payloads: impl Iterator<Item = &'a str>,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    new_paths: &BTreeSet<String>,
    inputs: &Inputs<'_>,
) -> Result<()> {
    scripts::check_assumed(&accounted.assumed, base, layer)?;
    scripts::check_interests(&accounted.interests, payloads)?;
    scripts::register_interests(&accounted.interests, base, layer)?;
    users::apply(&accounted.accounts, base, layer, users::today(), users::Tools::Debian)?;
    crate::packages::alternatives::apply(
        crate::packages::alternatives::Tool::Dpkg,
        &accounted.alternatives,
        base,
        layer,
    )?;
    super::ucf::apply(&accounted.ucf, base, layer)?;
    scripts::apply_file_changes(&accounted.file_changes, base, layer)?;
    scripts::apply_stat_adds(&accounted.stat_adds, base, layer)?;
    super::services::apply(&accounted.services, base, layer)?;
    // Then the triggers, as dpkg processes them once every package is configured:
    // debianutils' `update-shells`, libc-bin's `ldconfig`.
    let mut shells = accounted.shells.clone();
    if let Some(package) = &accounted.shells_trigger {
        shells.push((package.clone(), super::shells::Change::Update));
    }
    super::shells::apply(&shells, base, layer)?;
    scripts::apply_statoverrides(base, layer, new_paths)?;
    // Triggers last, as dpkg processes them: libc-bin's `ldconfig`.
    if let Some((package, script)) = &accounted.ldconfig {
        use crate::packages::ldconfig::{self, Family, Ldconfig};
        let image = crate::packages::ldcache::Arch::from_debian(inputs.arch)
            .map(|arch| Ldconfig { arch, family: Family::Debian, installed: None })
            .ok_or_else(|| format!("not emulated on {}", inputs.arch));
        let adds_conf_dir = new_paths.iter().any(|p| p.starts_with("etc/ld.so.conf.d/"));
        let trigger = (package.as_str(), script.as_str());
        ldconfig::run(base, layer, image, trigger, adds_conf_dir, &mut accounted.records)?;
    }
    Ok(())
}

pub(crate) fn layer_has(layer: &LayerContents, path: &str) -> bool {
    layer.files().any(|(p, e)| p == path && e.kind != EntryKind::Whiteout)
}
