//! The kubelet device plugin's gRPC side (device-plugin API v1beta1, `proto/`): serves
//! `DevicePlugin` on a unix socket in kubelet's device-plugin directory, registers it with
//! kubelet (`kubelet.sock`), streams the devices ([`crate::deviceplugin`]) and their health to
//! `ListAndWatch` whenever sysfs changes (re-read every poll interval: a port going DOWN makes
//! its device Unhealthy, and back), answers `Allocate` and `GetPreferredAllocation`, and
//! registers again when kubelet restarts (kubelet removes the plugins' sockets when it starts, and
//! recreates its own).
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::deviceplugin::{self, PluginConfig};
use erdma_oci_hook::config::Config;
use erdma_oci_hook::discover::{self, Host};

/// The generated API.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("v1beta1");
}

use pb::device_plugin_server::{DevicePlugin, DevicePluginServer};

/// The API version kubelet is told (`RegisterRequest.version`).
pub const VERSION: &str = "v1beta1";
/// kubelet's directory for plugin sockets.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";
/// kubelet's registration socket in it.
pub const KUBELET_SOCKET: &str = "kubelet.sock";

/// What the plugin serves from.
#[derive(Debug, Clone)]
pub struct Plugin {
    pub config: Config,
    pub plugin: PluginConfig,
    /// How often sysfs is read again for `ListAndWatch`.
    pub poll: Duration,
}

impl Plugin {
    fn host(&self) -> Result<Host, Status> {
        discover::discover(&self.config.sysfs_root, &self.config.dev_root, &self.config.drivers)
            .map_err(|e| Status::unavailable(format!("cannot list the RDMA devices: {e}")))
    }

    /// The devices as `ListAndWatch` sends them (an empty list when sysfs cannot be read).
    fn devices(&self) -> Vec<pb::Device> {
        let Ok(host) = self.host() else { return Vec::new() };
        deviceplugin::advertise(&host, &self.config.sysfs_root, &self.plugin)
            .into_iter()
            .map(|a| pb::Device {
                id: a.id,
                health: a.health.to_string(),
                topology: a
                    .numa
                    .map(|n| pb::TopologyInfo { nodes: vec![pb::NumaNode { id: i64::from(n) }] }),
            })
            .collect()
    }
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<pb::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for Arc<Plugin> {
    async fn get_device_plugin_options(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::DevicePluginOptions>, Status> {
        Ok(Response::new(pb::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut last: Option<Vec<pb::Device>> = None;
            loop {
                let now = me.devices();
                if last.as_ref() != Some(&now) {
                    if tx.send(Ok(pb::ListAndWatchResponse { devices: now.clone() })).await.is_err()
                    {
                        return;
                    }
                    last = Some(now);
                }
                tokio::select! {
                    _ = tokio::time::sleep(me.poll) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        req: Request<pb::PreferredAllocationRequest>,
    ) -> Result<Response<pb::PreferredAllocationResponse>, Status> {
        let host = self.host()?;
        let advertised = deviceplugin::advertise(&host, &self.config.sysfs_root, &self.plugin);
        let container_responses = req
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| pb::ContainerPreferredAllocationResponse {
                device_i_ds: deviceplugin::preferred(
                    &advertised,
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    usize::try_from(c.allocation_size).unwrap_or(0),
                ),
            })
            .collect();
        Ok(Response::new(pb::PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(
        &self,
        req: Request<pb::AllocateRequest>,
    ) -> Result<Response<pb::AllocateResponse>, Status> {
        let host = self.host()?;
        // Kubelet does not say which GPUs the pod gets: all of the host's count. One read for
        // all the containers of the request.
        let usable: Vec<_> = host.devices.iter().filter(|d| d.uverbs.is_some()).collect();
        let topology = erdma_oci_hook::topology::of_host(&self.config, &usable);
        let ctx = erdma_oci_hook::nccl::Context {
            topology: Some(&topology),
            ..erdma_oci_hook::nccl::Context::of(&self.config)
        };
        let mut container_responses = Vec::new();
        for c in req.into_inner().container_requests {
            let a = deviceplugin::allocate(
                &host,
                &self.plugin,
                &c.devices_ids,
                &erdma_oci_hook::netns::Net::any_container(self.config.network),
                &ctx,
            )
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
            container_responses.push(pb::ContainerAllocateResponse {
                envs: a.envs.into_iter().collect(),
                mounts: Vec::new(),
                devices: a
                    .devices
                    .into_iter()
                    .map(|d| pb::DeviceSpec {
                        container_path: d.container_path,
                        host_path: d.host_path,
                        permissions: d.permissions,
                    })
                    .collect(),
                annotations: Default::default(),
                cdi_devices: a.cdi_devices.into_iter().map(|name| pb::CdiDevice { name }).collect(),
            });
        }
        Ok(Response::new(pb::AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<pb::PreStartContainerRequest>,
    ) -> Result<Response<pb::PreStartContainerResponse>, Status> {
        Ok(Response::new(pb::PreStartContainerResponse {}))
    }
}

/// A gRPC channel over the unix socket `path` (the URI is a placeholder gRPC needs).
pub async fn unix_channel(
    path: &Path,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
}

/// Why the plugin cannot serve or register.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("connecting to {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("registering with {path}: {}", .status.message())]
    Register { path: PathBuf, status: tonic::Status },
    #[error("listening on {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Another plugin advertises the same resource on this node.
    #[error("{socket} is {whose}, which advertises {resource} on this node already; kubelet would take either plugin's answers. Use one: {choice}, or run erdma-device-plugin with another --resource")]
    TwoAdvertisers {
        socket: PathBuf,
        whose: &'static str,
        resource: &'static str,
        choice: &'static str,
    },
}

/// Registers `endpoint` (a socket name in `dir`) with the kubelet listening on `dir/kubelet.sock`.
pub async fn register(dir: &Path, endpoint: &str, resource: &str) -> Result<(), KubeletError> {
    let kubelet = dir.join(KUBELET_SOCKET);
    let channel = unix_channel(&kubelet)
        .await
        .map_err(|source| KubeletError::Connect { path: kubelet.clone(), source })?;
    let mut client = pb::registration_client::RegistrationClient::new(channel);
    client
        .register(pb::RegisterRequest {
            version: VERSION.to_string(),
            endpoint: endpoint.to_string(),
            resource_name: resource.to_string(),
            options: Some(pb::DevicePluginOptions {
                pre_start_required: false,
                get_preferred_allocation_available: true,
            }),
        })
        .await
        .map_err(|status| KubeletError::Register { path: kubelet.clone(), status })?;
    Ok(())
}

/// The inode of `path`, to tell a recreated socket from the one registered with.
fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// Serves the plugin on `dir/endpoint` and keeps it registered: forever, re-binding and
/// registering again whenever kubelet restarts (its socket's inode changes, or ours is gone).
pub async fn run(plugin: Plugin, dir: PathBuf, endpoint: String) -> Result<(), KubeletError> {
    let plugin = Arc::new(plugin);
    let socket = dir.join(&endpoint);
    loop {
        // Never two plugins advertising one resource on a node (checked again on every
        // registration: ACK's agent or Terway may come after us).
        if let Some(other) = deviceplugin::other_plugin_socket(&dir)
            .filter(|_| plugin.plugin.resource == deviceplugin::RESOURCE)
        {
            return Err(KubeletError::TwoAdvertisers {
                socket: other.socket,
                whose: other.whose,
                resource: deviceplugin::RESOURCE,
                choice: other.choice,
            });
        }
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket)
            .map_err(|source| KubeletError::Listen { path: socket.clone(), source })?;
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(Arc::clone(&plugin)))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        // kubelet may not be up yet: try until it answers. A kubelet that starts meanwhile
        // removes every socket in its directory, ours too, and then cannot dial the endpoint
        // we register (its Register fails): serve again on a fresh socket first.
        let kubelet = dir.join(KUBELET_SOCKET);
        let registered_with = loop {
            match register(&dir, &endpoint, &plugin.plugin.resource).await {
                Ok(()) => {
                    tracing::info!(
                        "registered {} with {} as {}",
                        socket.display(),
                        kubelet.display(),
                        plugin.plugin.resource
                    );
                    break Some(inode(&kubelet));
                }
                Err(_) if server.is_finished() || !socket.exists() => break None,
                Err(e) => {
                    tracing::warn!("{}; trying again", erdma_common::errors::chain(&e));
                    tokio::time::sleep(plugin.poll).await;
                }
            }
        };
        let Some(registered_with) = registered_with else {
            tracing::info!("the plugin socket went before kubelet took it: serving it again");
            server.abort();
            continue;
        };
        loop {
            tokio::time::sleep(plugin.poll).await;
            if server.is_finished() || !socket.exists() || inode(&kubelet) != registered_with {
                tracing::info!("kubelet restarted (or the plugin socket went): registering again");
                break;
            }
        }
        server.abort();
    }
}
