//! Maintainer scripts: which effects of the packages' `postinst` we reproduce.
use std::collections::BTreeSet;

use super::resolve::{self};
use crate::error::{Error, Result};
use crate::packages::PackageError;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents};

/// libibverbs1's postinst runs `addgroup --system --quiet rdma`; adduser picks the lowest free
/// gid from FIRST_SYSTEM_GID (100) to LAST_SYSTEM_GID (999) and writes group and gshadow,
/// keeping the previous versions as `group-` and `gshadow-`.
pub(crate) fn emulate_scripts(
    res: &resolve::Resolution,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    if !res.install.iter().any(|p| p.name == "libibverbs1") {
        return Ok(());
    }
    let group =
        String::from_utf8_lossy(&base.read("etc/group", 4 << 20)?.unwrap_or_default()).into_owned();
    if group.lines().any(|l| l.split(':').next() == Some("rdma")) {
        return Ok(());
    }
    let used: BTreeSet<u32> =
        group.lines().filter_map(|l| l.split(':').nth(2)?.parse().ok()).collect();
    let gid = (100..=999)
        .find(|g| !used.contains(g))
        .ok_or_else(|| Error::from(PackageError::NoGid { group: "rdma" }))?;
    let mut new_group = group.clone();
    if !new_group.is_empty() && !new_group.ends_with('\n') {
        new_group.push('\n');
    }
    new_group.push_str(&format!("rdma:x:{gid}:\n"));
    layer.add_file("etc/group", new_group.into_bytes(), 0o644)?;
    layer.add_file("etc/group-", group.into_bytes(), 0o644)?;
    if let Some(gshadow) = base.read("etc/gshadow", 4 << 20)? {
        let mut new = String::from_utf8_lossy(&gshadow).into_owned();
        if !new.is_empty() && !new.ends_with('\n') {
            new.push('\n');
        }
        new.push_str("rdma:!::\n");
        layer.insert(
            "etc/gshadow",
            Entry { kind: EntryKind::File(new.into_bytes()), mode: 0o640, uid: 0, gid: 42 },
        )?;
        layer.insert(
            "etc/gshadow-",
            Entry { kind: EntryKind::File(gshadow), mode: 0o640, uid: 0, gid: 42 },
        )?;
    }
    Ok(())
}
