//! Preparing a claim: the devices the API server allocated to it (its status), checked against
//! what this node publishes, turned into one CDI spec per claim: its ERIs' uverbs nodes as CDI
//! devices `<claim uid>-<eri>`, and as the spec's own edits (applied once to a container given
//! any of them) `rdma_cm` and the environment for exactly the claim's ERIs ([`crate::grant`]).
//! kubelet hands the CDI device IDs to the runtime, which applies the spec.
//!
//! The spec files are the driver's only state: prepared again (kubelet retries, or calls again
//! after a restart of either), a claim's spec is rewritten with the same content; unprepared, it
//! is removed, whether or not this process wrote it. Every write is atomic (a temporary file
//! renamed over the spec), so an engine reading the directory, or a kubelet that gives up on
//! the call midway, never sees half a spec.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::Value;

use super::devices::Published;
use crate::grant::GrantError;
use erdma_oci_hook::config::Config;
use erdma_oci_hook::discover::Host;

/// A claim as kubelet names it (`NodePrepareResources`' `Claim`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "claim {}/{} (uid {})", self.namespace, self.name, self.uid)
    }
}

/// One device the API server allocated to a claim, from this driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// The claim's request it serves.
    pub request: String,
    pub pool: String,
    pub device: String,
}

/// A device of a prepared claim, as kubelet is told (`NodePrepareResourceResponse.devices`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PreparedDevice {
    pub request: String,
    pub pool: String,
    pub device: String,
    pub cdi_device_ids: Vec<String>,
}

/// Why a claim cannot be prepared or unprepared: a message for kubelet (and the pod's
/// events), naming the claim, then the problem as its cause.
#[derive(Debug, thiserror::Error)]
#[error("{claim}")]
pub struct PrepareError {
    pub claim: ClaimRef,
    #[source]
    pub problem: Box<Problem>,
}

/// What is wrong with a claim.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("its uid is not a Kubernetes UID (letters, digits and '-', at most 64)")]
    BadUid,
    #[error("the API server has uid {0} under that name (the claim was deleted and made again); kubelet's claim is gone")]
    UidMismatch(String),
    #[error("it has no allocation in its status (not yet allocated, or deallocated)")]
    NotAllocated,
    #[error("its allocation gives {0} opaque parameters, which this driver does not take")]
    Parameters(String),
    #[error("device {device} is allocated from pool {pool}, not from this node's ({node})")]
    OtherPool { device: String, pool: String, node: String },
    #[error("device {device} is not published on this node (it went, or was never here); published: {published}")]
    UnknownDevice { device: String, published: String },
    #[error(transparent)]
    Unusable(GrantError),
    #[error(transparent)]
    Devices(super::devices::ListError),
    #[error("writing its CDI spec {0}")]
    Write(PathBuf, #[source] erdma_oci_hook::error::Error),
    #[error("removing its CDI spec {0}")]
    Remove(PathBuf, #[source] std::io::Error),
    #[error("reading it from the API server")]
    Api(#[source] kube::Error),
}

impl ClaimRef {
    /// `problem`, about this claim.
    pub fn error(&self, problem: Problem) -> PrepareError {
        PrepareError { claim: self.clone(), problem: Box::new(problem) }
    }
}

/// A UID kubelet may name: what goes into file and CDI device names here, so nothing else.
pub fn check_uid(claim: &ClaimRef) -> Result<(), PrepareError> {
    let uid = claim.uid.as_str();
    let ok = !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !uid.starts_with('-')
        && !uid.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(claim.error(Problem::BadUid))
    }
}

/// The CDI kind of the claims' specs: `<driver>/claim`.
pub fn cdi_kind(driver: &str) -> String {
    format!("{driver}/claim")
}

/// The CDI spec file of claim `uid` in `cdi_dir`.
pub fn spec_path(cdi_dir: &Path, driver: &str, uid: &str) -> PathBuf {
    cdi_dir.join(format!("{driver}-claim_{uid}.json"))
}

/// This driver's devices in `claim`'s allocation, after checking it is the claim kubelet means
/// (same UID) and gives this driver no parameters.
pub fn allocated(
    claim: &ClaimRef,
    found: &ResourceClaim,
    driver: &str,
) -> Result<Vec<Allocated>, PrepareError> {
    let found_uid = found.metadata.uid.clone().unwrap_or_default();
    if found_uid != claim.uid {
        return Err(claim.error(Problem::UidMismatch(found_uid)));
    }
    let devices = found
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .ok_or_else(|| claim.error(Problem::NotAllocated))?;
    let ours = |requests: &Option<Vec<String>>| {
        // A configuration names the requests it is for, or none for all; ours where any of
        // our devices serves one of them.
        requests.as_ref().is_none_or(|r| {
            devices.results.iter().flatten().any(|d| d.driver == driver && r.contains(&d.request))
        })
    };
    if devices
        .config
        .iter()
        .flatten()
        .any(|c| c.opaque.as_ref().is_some_and(|o| o.driver == driver) && ours(&c.requests))
    {
        return Err(claim.error(Problem::Parameters(driver.to_string())));
    }
    Ok(devices
        .results
        .iter()
        .flatten()
        .filter(|d| d.driver == driver)
        .map(|d| Allocated {
            request: d.request.clone(),
            pool: d.pool.clone(),
            device: d.device.clone(),
        })
        .collect())
}

/// A prepared claim: its CDI spec and what kubelet is told.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub spec: Value,
    pub devices: Vec<PreparedDevice>,
}

/// What the driver prepares claims with.
pub struct Preparer<'a> {
    pub config: &'a Config,
    pub driver: &'a str,
    pub node: &'a str,
    pub host: &'a Host,
    pub published: &'a [Published],
}

impl Preparer<'_> {
    /// The CDI spec and devices for `claim`, given `allocated` (its devices of this driver).
    pub fn prepare(
        &self,
        claim: &ClaimRef,
        allocated: &[Allocated],
    ) -> Result<Prepared, PrepareError> {
        check_uid(claim)?;
        let mut eris: Vec<&str> = Vec::new();
        for a in allocated {
            if a.pool != self.node {
                return Err(claim.error(Problem::OtherPool {
                    device: a.device.clone(),
                    pool: a.pool.clone(),
                    node: self.node.to_string(),
                }));
            }
            let p = self.published.iter().find(|p| p.name == a.device).ok_or_else(|| {
                claim.error(Problem::UnknownDevice {
                    device: a.device.clone(),
                    published: self.published_names(),
                })
            })?;
            eris.push(&p.eri);
        }
        let chosen = crate::grant::usable(self.host, eris.iter().copied())
            .map_err(|e| claim.error(Problem::Unusable(e)))?;
        let kind = cdi_kind(self.driver);
        let cdi_name = |eri: &str| format!("{}-{eri}", claim.uid);
        let devices: Vec<PreparedDevice> = allocated
            .iter()
            .zip(&eris)
            .map(|(a, eri)| PreparedDevice {
                request: a.request.clone(),
                pool: a.pool.clone(),
                device: a.device.clone(),
                cdi_device_ids: vec![format!("{kind}={}", cdi_name(eri))],
            })
            .collect();

        // Kubelet does not say which GPUs the pod gets: NCCL's settings are derived against all
        // of the host's, as for the device plugin's Allocate.
        let usable: Vec<_> = self.host.devices.iter().filter(|d| d.uverbs.is_some()).collect();
        let topology = erdma_oci_hook::topology::of_host(self.config, &usable);
        let ctx = erdma_oci_hook::nccl::Context {
            topology: Some(&topology),
            ..erdma_oci_hook::nccl::Context::of(self.config)
        };
        let net = erdma_oci_hook::netns::Net::any_container(self.config.network);
        let envs: BTreeMap<String, String> = crate::grant::envs(self.host, &chosen, &net, &ctx);
        let rdma_cm = self
            .host
            .rdma_cm
            .as_ref()
            .ok_or(GrantError::NoRdmaCm)
            .map_err(|e| claim.error(Problem::Unusable(e)))?;
        let cdi_devices: Vec<(String, Vec<&erdma_oci_hook::discover::CharDev>)> =
            chosen.iter().map(|d| (cdi_name(&d.name), d.uverbs.iter().collect())).collect();
        let env: Vec<String> = envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let spec = erdma_oci_hook::cdi::render(&kind, &cdi_devices, &[rdma_cm], env);
        Ok(Prepared { spec, devices })
    }

    fn published_names(&self) -> String {
        let names: Vec<&str> = self.published.iter().map(|p| p.name.as_str()).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// Writes claim `claim`'s spec into `cdi_dir`, atomically.
pub fn write_spec(
    cdi_dir: &Path,
    driver: &str,
    claim: &ClaimRef,
    spec: &Value,
) -> Result<PathBuf, PrepareError> {
    let path = spec_path(cdi_dir, driver, &claim.uid);
    let mut text = serde_json::to_vec_pretty(spec).expect("a JSON value serialises");
    text.push(b'\n');
    erdma_oci_hook::cdi::write(&path, &text)
        .map_err(|e| claim.error(Problem::Write(path.clone(), e)))?;
    Ok(path)
}

/// Removes claim `claim`'s spec from `cdi_dir`; one that is not there is already unprepared.
pub fn remove_spec(cdi_dir: &Path, driver: &str, claim: &ClaimRef) -> Result<(), PrepareError> {
    check_uid(claim)?;
    let path = spec_path(cdi_dir, driver, &claim.uid);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(claim.error(Problem::Remove(path, e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_that_could_name_another_file_are_refused() {
        let c = |uid: &str| ClaimRef { namespace: "ns".into(), name: "c".into(), uid: uid.into() };
        assert!(check_uid(&c("3f1c2b7e-5d0a-4c1e-9a63-0d2b9e7f1a44")).is_ok());
        for bad in ["", "../x", "a/b", "-a", "a-", "a.b", "a b", &"a".repeat(65)] {
            assert!(check_uid(&c(bad)).is_err(), "{bad:?} accepted");
        }
    }
}
