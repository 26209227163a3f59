//! System users and groups that maintainer scripts add with adduser(8) and addgroup(8), written
//! as adduser writes them: `etc/passwd`, `etc/shadow`, `etc/group`, `etc/gshadow` and the
//! backups (`passwd-`, …) that shadow's tools leave of the state before their last change.
use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::packages::PackageError;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents};

/// `addgroup --system [--quiet] NAME`: the name, for exactly that form.
pub(super) fn system_group(words: &[String]) -> Option<String> {
    let mut system = false;
    let mut name = None;
    for w in &words[1..] {
        match w.as_str() {
            "--system" => system = true,
            // Relaxes adduser's name check only; the name is checked here.
            "--quiet" | "--force-badname" => {}
            w if !w.starts_with('-') && name.is_none() => name = Some(w.to_string()),
            _ => return None,
        }
    }
    let name = name?;
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
        && !name.starts_with('-');
    (system && valid).then_some(name)
}

/// `addgroup --system NAME` for each name, as adduser does it: the lowest free gid from
/// FIRST_SYSTEM_GID (100) to LAST_SYSTEM_GID (999), a line in group and gshadow, and the
/// previous versions kept as `group-` and `gshadow-`. A group the image has already is left
/// alone (adduser: "The group `NAME' already exists as a system group").
pub(super) fn add_system_groups(
    names: &[String],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    let old_group = base.read("etc/group", 4 << 20)?.unwrap_or_default();
    let old_gshadow = base.read("etc/gshadow", 4 << 20)?;
    let mut group = String::from_utf8_lossy(&old_group).into_owned();
    let mut gshadow = old_gshadow.as_ref().map(|g| String::from_utf8_lossy(g).into_owned());
    // Each `addgroup` saves the file as it found it: the backups are the state before the last.
    let (mut before_group, mut before_gshadow) = (old_group.clone(), old_gshadow.clone());
    let mut added = false;
    for name in names {
        if group.lines().any(|l| l.split(':').next() == Some(name.as_str())) {
            continue;
        }
        before_group = group.clone().into_bytes();
        before_gshadow = gshadow.clone().map(String::into_bytes);
        let used: BTreeSet<u32> =
            group.lines().filter_map(|l| l.split(':').nth(2)?.parse().ok()).collect();
        let gid = (100..=999)
            .find(|g| !used.contains(g))
            .ok_or_else(|| Error::from(PackageError::NoGid { group: name.clone() }))?;
        if !group.is_empty() && !group.ends_with('\n') {
            group.push('\n');
        }
        group.push_str(&format!("{name}:x:{gid}:\n"));
        if let Some(g) = gshadow.as_mut() {
            if !g.is_empty() && !g.ends_with('\n') {
                g.push('\n');
            }
            g.push_str(&format!("{name}:!::\n"));
        }
        added = true;
    }
    if !added {
        return Ok(());
    }
    layer.add_file("etc/group", group.into_bytes(), 0o644)?;
    layer.add_file("etc/group-", before_group, 0o644)?;
    if let (Some(new), Some(old)) = (gshadow, before_gshadow) {
        layer.insert(
            "etc/gshadow",
            Entry { kind: EntryKind::File(new.into_bytes()), mode: 0o640, uid: 0, gid: 42 },
        )?;
        layer.insert(
            "etc/gshadow-",
            Entry { kind: EntryKind::File(old), mode: 0o640, uid: 0, gid: 42 },
        )?;
    }
    Ok(())
}

/// The id of `name` in the image's `db` (`etc/passwd`, `etc/group`) as it is after this build's
/// changes: the layer's copy where the build wrote one (the system groups it added), else the
/// base's.
pub(super) fn image_id(
    base: &dyn BaseFiles,
    layer: &LayerContents,
    db: &str,
    name: &str,
) -> Result<Option<u64>> {
    let bytes = super::image::read(db, base, layer, 4 << 20)?.unwrap_or_default();
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .find(|l| l.split(':').next() == Some(name))
        .and_then(|l| l.split(':').nth(2)?.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn only_the_plain_system_group_form_is_emulated() {
        assert_eq!(system_group(&w("addgroup --system --quiet rdma")).as_deref(), Some("rdma"));
        assert_eq!(system_group(&w("addgroup --system _ssh")).as_deref(), Some("_ssh"));
        // openssh-client's postinst (Debian 12).
        assert_eq!(
            system_group(&w("addgroup --system --quiet --force-badname _ssh")).as_deref(),
            Some("_ssh")
        );
        assert_eq!(system_group(&w("addgroup rdma")), None);
        assert_eq!(system_group(&w("addgroup --system --gid 5 rdma")), None);
        assert_eq!(system_group(&w("addgroup --system a b")), None);
        assert_eq!(system_group(&w("addgroup --system $GROUP")), None);
    }
}
