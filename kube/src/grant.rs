//! What a container handed a set of ERIs gets, whichever Kubernetes API handed them out (the
//! device plugin's `Allocate`, [`crate::deviceplugin`]; DRA's `NodePrepareResources`,
//! [`crate::dra`]): the ERIs checked usable, and the environment the hooks would set for them
//! (`ERDMA_VISIBLE_DEVICES`, the presets, the NCCL settings derived for exactly those ERIs).
use std::collections::BTreeMap;

use erdma_oci_hook::discover::{Host, RdmaDevice};
use erdma_oci_hook::netns::Net;

/// Why a set of ERIs cannot be handed to a container.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    #[error("device {0} is not advertised on this node")]
    Unknown(String),
    #[error("device {device} is unhealthy: {why}")]
    Unhealthy { device: String, why: String },
    #[error("this node has no usable /dev/infiniband/rdma_cm")]
    NoRdmaCm,
}

/// Healthy: every port PORT_ACTIVE and the uverbs node present (what a container needs).
pub fn healthy(d: &RdmaDevice) -> bool {
    d.all_ports_active() && d.uverbs.is_some()
}

/// The host's devices named `names` (each once, in the order given), each healthy, with the
/// host's `rdma_cm` present: else why not, naming the first device that fails.
pub fn usable<'h, 'n>(
    host: &'h Host,
    names: impl IntoIterator<Item = &'n str>,
) -> Result<Vec<&'h RdmaDevice>, GrantError> {
    let mut chosen: Vec<&RdmaDevice> = Vec::new();
    for n in names {
        if chosen.iter().any(|d| d.name == n) {
            continue;
        }
        let d = host
            .devices
            .iter()
            .find(|d| d.name == n)
            .ok_or_else(|| GrantError::Unknown(n.to_string()))?;
        if !healthy(d) {
            let why = d.problem.clone().unwrap_or_else(|| {
                if d.uverbs.is_none() {
                    "no uverbs node".into()
                } else {
                    "a port is not PORT_ACTIVE".into()
                }
            });
            return Err(GrantError::Unhealthy { device: d.name.clone(), why });
        }
        chosen.push(d);
    }
    host.rdma_cm.as_ref().ok_or(GrantError::NoRdmaCm)?;
    Ok(chosen)
}

/// The environment for a container given `chosen`: `ERDMA_VISIBLE_DEVICES` naming them (what the
/// NRI plugin and the hooks read as the container's request), the presets and the NCCL
/// settings derived for exactly these ERIs.
pub fn envs(
    host: &Host,
    chosen: &[&RdmaDevice],
    net: &Net,
    ctx: &erdma_oci_hook::nccl::Context,
) -> BTreeMap<String, String> {
    let derived = erdma_oci_hook::nccl::derive(host, chosen, net, ctx);
    let mut envs = BTreeMap::new();
    envs.insert(
        erdma_oci_hook::request::ENV.to_string(),
        chosen.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(","),
    );
    envs.extend(derived.with_presets());
    envs
}
