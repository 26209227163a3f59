//! Who holds which ERI: the containers each ERI is handed to, from the records of the three ways
//! erdma-kit hands one out.
//!
//! - The device plugin's allocations and the DRA driver's claims: kubelet keeps both and serves
//!   them through its PodResources API ([`pod_resources`]). An allocation names its ERI through
//!   the device ID the plugin advertised ([`crate::deviceplugin::device_of`]); a claim's device
//!   through the driver, pool and device name the driver published (`erdma-0`, `erdma-0-s1`:
//!   [`crate::dra::devices`]).
//! - The NRI plugin's: a container that asks by annotation or env has no record in kubelet, so
//!   the plugin writes one file per container it gives ERIs to ([`record`]) and removes it when
//!   the runtime removes the container ([`forget`], and [`keep_only`] at each synchronisation).
//!
//! Read by the metrics' info series ([`crate::metrics`]). The record directory is input to the
//! exporter, not trusted: a file that is not a record of ours is skipped, never followed.
use std::collections::BTreeSet;
use std::io::{self, Read as _, Write as _};
use std::path::Path;

/// kubelet's PodResources socket.
pub const PODRESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Where the DaemonSets keep the NRI plugin's records (`deploy/`: a host directory, so that they
/// outlive a restart of the pod; tmpfs, so not a reboot, which the containers do not outlive
/// either).
pub const NRI_RECORDS: &str = "/run/erdma-kit/nri-records";

/// The PodResources API's messages and client.
pub mod podresources {
    #![allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
    tonic::include_proto!("v1");
}

/// One ERI handed to one container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    pub device: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// Which of kubelet's records name our ERIs.
#[derive(Debug, Clone, Default)]
pub struct Kinds<'a> {
    /// The device plugin's extended resource (`aliyun/erdma`).
    pub resource: Option<&'a str>,
    /// The DRA driver's name (`erdma.aliyun.com`).
    pub dra_driver: Option<&'a str>,
}

/// The ERI of `eris` that a DRA device named `device` stands for: its DNS label, or a share of
/// it (`erdma-0-s3`), as [`crate::dra::devices::published`] names them.
pub fn dra_device_eri<'a>(device: &str, eris: &'a [String]) -> Option<&'a str> {
    eris.iter().map(String::as_str).find(|eri| {
        let Some(label) = crate::dra::devices::dns_label(eri) else { return false };
        match device.strip_prefix(label.as_str()) {
            Some("") => true,
            Some(rest) => rest
                .strip_prefix("-s")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
            None => false,
        }
    })
}

/// The holders in kubelet's `list` whose devices are ours (`kinds`), `eris` being the node's
/// ERIs (a DRA device name is matched against them; one that matches none is left out).
pub fn from_pod_resources(
    list: &podresources::ListPodResourcesResponse,
    kinds: &Kinds<'_>,
    eris: &[String],
) -> Vec<Holder> {
    let mut out = BTreeSet::new();
    for pod in &list.pod_resources {
        for c in &pod.containers {
            let holder = |device: &str| Holder {
                device: device.to_string(),
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: c.name.clone(),
            };
            if let Some(resource) = kinds.resource {
                for d in c.devices.iter().filter(|d| d.resource_name == resource) {
                    for id in &d.device_ids {
                        out.insert(holder(crate::deviceplugin::device_of(id)));
                    }
                }
            }
            if let Some(driver) = kinds.dra_driver {
                for claimed in c.dynamic_resources.iter().flat_map(|r| &r.claim_resources) {
                    if claimed.driver_name != driver {
                        continue;
                    }
                    if let Some(eri) = dra_device_eri(&claimed.device_name, eris) {
                        out.insert(holder(eri));
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// kubelet's PodResources `List` over `socket`.
pub async fn pod_resources(
    socket: &Path,
) -> Result<podresources::ListPodResourcesResponse, String> {
    let channel = crate::kubelet::unix_channel(socket)
        .await
        .map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    let mut client =
        podresources::pod_resources_lister_client::PodResourcesListerClient::new(channel);
    Ok(client
        .list(podresources::ListPodResourcesRequest {})
        .await
        .map_err(|e| format!("PodResources List: {}", e.message()))?
        .into_inner())
}

/// The NRI plugin's record of one container: whose it is and the ERIs it was given.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub devices: Vec<String>,
}

/// The largest record file read (a record is a few hundred bytes).
const MAX_RECORD: u64 = 64 << 10;
/// The most record files read in one pass.
const MAX_RECORDS: usize = 100_000;
/// The suffix of record files (a file without it, such as a temporary one, is not a record).
const SUFFIX: &str = ".json";

/// A container ID as a file name: what the runtimes use (64 hex digits for containerd and
/// CRI-O), and nothing that could leave the directory or hide in it.
fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn bad_id(id: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("container ID {id:?} is not a file name"))
}

/// Writes the record of container `id` in `dir` (created if missing), replacing any earlier one
/// whole: written to a temporary file, synced, renamed over.
pub fn record(dir: &Path, id: &str, record: &Record) -> io::Result<()> {
    if !valid_id(id) {
        return Err(bad_id(id));
    }
    std::fs::create_dir_all(dir)?;
    let body = serde_json::to_vec(record).map_err(io::Error::other)?;
    let tmp = dir.join(format!(".{id}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(format!("{id}{SUFFIX}")))
}

/// Removes the record of container `id`; none is no error.
pub fn forget(dir: &Path, id: &str) -> io::Result<()> {
    if !valid_id(id) {
        return Err(bad_id(id));
    }
    match std::fs::remove_file(dir.join(format!("{id}{SUFFIX}"))) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes every record but those of `ids` (the containers the runtime still has); the number
/// removed. A missing directory has none.
pub fn keep_only(dir: &Path, ids: &BTreeSet<String>) -> io::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let name = entry?.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else { continue };
        if valid_id(id) && !ids.contains(id) {
            forget(dir, id)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// One record file, if it is one: a regular file itself (a link is not read through: the file
/// opened must be the one looked at), at most [`MAX_RECORD`] bytes, a [`Record`].
fn read_record(path: &Path) -> Option<Record> {
    use std::os::unix::fs::MetadataExt as _;
    let looked = std::fs::symlink_metadata(path).ok()?;
    if !looked.is_file() {
        return None;
    }
    let f = std::fs::File::open(path).ok()?;
    let opened = f.metadata().ok()?;
    if (opened.dev(), opened.ino()) != (looked.dev(), looked.ino()) {
        return None;
    }
    let mut body = Vec::new();
    f.take(MAX_RECORD + 1).read_to_end(&mut body).ok()?;
    if body.len() as u64 > MAX_RECORD {
        return None;
    }
    serde_json::from_slice(&body).ok()
}

/// The holders the NRI plugin recorded in `dir`, one per (device, container); files that are
/// not records are skipped.
pub fn recorded(dir: &Path) -> Vec<Holder> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out = BTreeSet::new();
    for entry in entries.flatten().take(MAX_RECORDS) {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else { continue };
        if !valid_id(id) {
            continue;
        }
        let Some(r) = read_record(&entry.path()) else {
            tracing::debug!(file = %entry.path().display(), "not an NRI record; skipped");
            continue;
        };
        for device in r.devices {
            out.insert(Holder {
                device,
                namespace: r.namespace.clone(),
                pod: r.pod.clone(),
                container: r.container.clone(),
            });
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::podresources as pr;
    use super::*;

    fn eris() -> Vec<String> {
        vec!["erdma_0".into(), "erdma_1".into(), "erdma_10".into()]
    }

    #[test]
    fn dra_device_names_map_to_their_eri_and_no_other() {
        let e = eris();
        assert_eq!(dra_device_eri("erdma-0", &e), Some("erdma_0"));
        assert_eq!(dra_device_eri("erdma-1-s3", &e), Some("erdma_1"));
        assert_eq!(dra_device_eri("erdma-10-s0", &e), Some("erdma_10"));
        // erdma-1's prefix is not enough: erdma-10 is another ERI, erdma-1-x none.
        assert_eq!(dra_device_eri("erdma-10", &e), Some("erdma_10"));
        for none in ["erdma-1-s", "erdma-1-x", "erdma-2", "gpu-0", "erdma-1-s1a", ""] {
            assert_eq!(dra_device_eri(none, &e), None, "{none}");
        }
    }

    fn claim(driver: &str, device: &str) -> pr::ClaimResource {
        pr::ClaimResource {
            cdi_devices: vec![pr::CdiDevice { name: format!("{driver}/erdma=x") }],
            driver_name: driver.into(),
            pool_name: "node-1".into(),
            device_name: device.into(),
        }
    }

    #[test]
    fn pod_resources_name_holders_by_plugin_and_by_claim() {
        let list = pr::ListPodResourcesResponse {
            pod_resources: vec![pr::PodResources {
                name: "trainer-0".into(),
                namespace: "ml".into(),
                containers: vec![
                    pr::ContainerResources {
                        name: "by-plugin".into(),
                        devices: vec![
                            pr::ContainerDevices {
                                resource_name: "aliyun/erdma".into(),
                                device_ids: vec!["erdma_1-3".into()],
                            },
                            pr::ContainerDevices {
                                resource_name: "nvidia.com/gpu".into(),
                                device_ids: vec!["GPU-0".into()],
                            },
                        ],
                        dynamic_resources: vec![],
                    },
                    pr::ContainerResources {
                        name: "by-claim".into(),
                        devices: vec![],
                        dynamic_resources: vec![pr::DynamicResource {
                            claim_name: "rdma".into(),
                            claim_namespace: "ml".into(),
                            claim_resources: vec![
                                claim("erdma.aliyun.com", "erdma-0-s2"),
                                claim("gpu.nvidia.com", "gpu-0"),
                                // Another driver's device of the same name is not ours.
                                claim("other.example.com", "erdma-1"),
                                claim("erdma.aliyun.com", "erdma-7"),
                            ],
                        }],
                    },
                ],
            }],
        };
        let kinds = Kinds { resource: Some("aliyun/erdma"), dra_driver: Some("erdma.aliyun.com") };
        let got = from_pod_resources(&list, &kinds, &eris());
        let pairs: Vec<(&str, &str)> =
            got.iter().map(|h| (h.device.as_str(), h.container.as_str())).collect();
        assert_eq!(pairs, [("erdma_0", "by-claim"), ("erdma_1", "by-plugin")]);
        assert!(got.iter().all(|h| h.namespace == "ml" && h.pod == "trainer-0"));
        // Each source only when asked for.
        let only_plugin = Kinds { resource: Some("aliyun/erdma"), dra_driver: None };
        assert_eq!(from_pod_resources(&list, &only_plugin, &eris()).len(), 1);
        let only_dra = Kinds { resource: None, dra_driver: Some("erdma.aliyun.com") };
        assert_eq!(from_pod_resources(&list, &only_dra, &eris())[0].container, "by-claim");
    }

    fn rec(container: &str, devices: &[&str]) -> Record {
        Record {
            namespace: "ml".into(),
            pod: "p".into(),
            container: container.into(),
            devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn records_are_written_whole_read_back_and_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("holders");
        assert!(recorded(&dir).is_empty(), "no directory yet: no holders");
        record(&dir, "aaa", &rec("a", &["erdma_0", "erdma_1"])).unwrap();
        record(&dir, "bbb", &rec("b", &["erdma_1"])).unwrap();
        // Written again: replaced, not appended.
        record(&dir, "bbb", &rec("b", &["erdma_0"])).unwrap();
        let got: Vec<(String, String)> =
            recorded(&dir).into_iter().map(|h| (h.device, h.container)).collect();
        assert_eq!(
            got,
            [
                ("erdma_0".into(), "a".into()),
                ("erdma_0".into(), "b".into()),
                ("erdma_1".into(), "a".into())
            ]
        );
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        forget(&dir, "aaa").unwrap();
        forget(&dir, "aaa").unwrap();
        assert_eq!(recorded(&dir).len(), 1);
        let keep: BTreeSet<String> = ["ccc".to_string()].into();
        assert_eq!(keep_only(&dir, &keep).unwrap(), 1);
        assert!(recorded(&dir).is_empty());
        assert_eq!(keep_only(&tmp.path().join("none"), &keep).unwrap(), 0);
    }

    #[test]
    fn hostile_ids_and_files_are_refused_or_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for id in ["", "../x", "a/b", ".hidden", &"a".repeat(129)] {
            assert!(record(dir, id, &rec("c", &["erdma_0"])).is_err(), "{id:?}");
            assert!(forget(dir, id).is_err(), "{id:?}");
        }
        // Not records: another shape, too big, not JSON, a link to a record elsewhere, a
        // directory, a name without the suffix.
        std::fs::write(dir.join("shape.json"), br#"{"pod":"p"}"#).unwrap();
        std::fs::write(
            dir.join("extra.json"),
            br#"{"namespace":"n","pod":"p","container":"c","devices":[],"x":1}"#,
        )
        .unwrap();
        std::fs::write(dir.join("big.json"), vec![b' '; (MAX_RECORD + 1) as usize]).unwrap();
        std::fs::write(dir.join("text.json"), b"erdma_0").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        record(elsewhere.path(), "real", &rec("linked", &["erdma_0"])).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("real.json"), dir.join("link.json"))
            .unwrap();
        std::fs::create_dir(dir.join("sub.json")).unwrap();
        std::fs::write(dir.join("bare"), serde_json::to_vec(&rec("bare", &["erdma_0"])).unwrap())
            .unwrap();
        assert!(recorded(dir).is_empty(), "{:?}", recorded(dir));
        // One good record beside them is read.
        record(dir, "good", &rec("good", &["erdma_1"])).unwrap();
        let got = recorded(dir);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].container, "good");
    }
}
