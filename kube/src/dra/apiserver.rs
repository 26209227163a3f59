//! The driver's side of the API server, through kube's client: reading a ResourceClaim, and
//! keeping this node's one ResourceSlice equal to what the node has.
//!
//! The slice is written as the API server expects of a driver (the Kubernetes documentation's
//! "Dynamic Resource Allocation" and `k8s.io/dynamic-resource-allocation/resourceslice`): one
//! pool named after the node, one slice in it (`resourceSliceCount: 1`), the pool's `generation`
//! raised on every change so that the scheduler never mixes two versions of a pool; owned by the
//! Node object where it can be read, so that it goes with the node. An update carries the
//! `resourceVersion` it was read at; a conflict (someone else wrote it meanwhile) means reading
//! it again.
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

use super::devices::{self, Published};

/// The API server, for one driver on one node.
#[derive(Clone)]
pub struct ApiServer {
    client: kube::Client,
    driver: String,
    node: String,
}

/// What publishing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// The slice was written, at this pool generation.
    Written(i64),
    /// The slice already said it.
    Unchanged,
}

impl ApiServer {
    pub fn new(client: kube::Client, driver: &str, node: &str) -> ApiServer {
        ApiServer { client, driver: driver.to_string(), node: node.to_string() }
    }

    /// The claim `namespace/name`.
    pub async fn claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, kube::Error> {
        Api::<ResourceClaim>::namespaced(self.client.clone(), namespace).get(name).await
    }

    /// This node's Node object as an owner of the slice, if it can be read.
    async fn owner(&self) -> Option<OwnerReference> {
        match Api::<Node>::all(self.client.clone()).get(&self.node).await {
            Ok(node) => Some(OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: self.node.clone(),
                uid: node.metadata.uid?,
                controller: Some(true),
                ..Default::default()
            }),
            Err(e) => {
                tracing::warn!(
                    "the ResourceSlice will have no owner (it stays if node {} is deleted): reading the Node: {}",
                    self.node,
                    erdma_common::errors::chain(&e)
                );
                None
            }
        }
    }

    /// Makes this node's slice say `devices`: created, replaced at the next pool generation, or
    /// left as it is when it already says it. A conflict is read again, a few times.
    pub async fn publish(&self, devices: &[Published]) -> Result<Publication, kube::Error> {
        let api = Api::<ResourceSlice>::all(self.client.clone());
        let name = devices::slice_name(&self.node, &self.driver);
        let mut tries = 0;
        loop {
            tries += 1;
            let result = match api.get_opt(&name).await? {
                Some(old) => {
                    let generation = old.spec.pool.generation;
                    let same = devices::slice_spec(&self.driver, &self.node, devices, generation);
                    if old.spec == same {
                        return Ok(Publication::Unchanged);
                    }
                    let mut new = old.clone();
                    new.spec =
                        devices::slice_spec(&self.driver, &self.node, devices, generation + 1);
                    api.replace(&name, &PostParams::default(), &new)
                        .await
                        .map(|_| Publication::Written(generation + 1))
                }
                None => {
                    let slice = ResourceSlice {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            owner_references: self.owner().await.map(|o| vec![o]),
                            ..Default::default()
                        },
                        spec: devices::slice_spec(&self.driver, &self.node, devices, 1),
                    };
                    api.create(&PostParams::default(), &slice)
                        .await
                        .map(|_| Publication::Written(1))
                }
            };
            match result {
                Err(kube::Error::Api(s))
                    if (s.is_conflict() || s.is_already_exists()) && tries < 4 =>
                {
                    tracing::info!("the ResourceSlice {name} changed meanwhile: reading it again");
                }
                other => return other,
            }
        }
    }
}
