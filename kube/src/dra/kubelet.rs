//! kubelet's side of the DRA driver: the registration socket kubelet's plugin watcher finds in
//! its registry directory (`GetInfo`: type `DRAPlugin`, the driver's name, the DRA socket, the
//! versions offered), the DRA service on that socket in both versions kubelet may pick (v1,
//! v1beta1; the same answers), device health in both versions of that API, and the loop that
//! serves them, keeps this node's ResourceSlice current, and serves again when a socket goes
//! (a kubelet that restarts finds the registration socket again by itself).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::apiserver::{ApiServer, Publication};
use super::claims::{self, ClaimRef, PrepareError, PreparedDevice, Problem};
use super::devices::{self, Published};
use super::pb;
use erdma_oci_hook::config::Config;

/// What the driver runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The driver's name ([`super::DRIVER`]).
    pub driver: String,
    /// This node's name: the pool's, and the slice's node.
    pub node: String,
    /// kubelet's plugin registry directory ([`super::REGISTRY_DIR`]).
    pub registry_dir: PathBuf,
    /// The directory of the DRA socket ([`super::PLUGIN_DIR`]).
    pub plugin_dir: PathBuf,
    /// Where the claims' CDI specs go ([`super::CDI_DIR`]).
    pub cdi_dir: PathBuf,
    /// How many claims may hold one ERI at once.
    pub shares: u32,
    /// How often sysfs is read again (the slice, health) and the sockets checked.
    pub poll: Duration,
}

impl Settings {
    /// The registration socket: `<driver>-reg.sock` in the registry directory.
    pub fn registration_socket(&self) -> PathBuf {
        self.registry_dir.join(format!("{}-reg.sock", self.driver))
    }

    /// The DRA socket.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir.join(super::DRA_SOCKET)
    }
}

/// The driver: its settings, the hook config (sysfs and /dev roots, drivers, NCCL policy) and
/// the API server.
pub struct Driver {
    pub config: Config,
    pub settings: Settings,
    pub api: ApiServer,
}

/// Why the driver cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum DraError {
    #[error("creating {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("listening on {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Driver {
    /// Prepares one claim: reads its allocation, writes its CDI spec.
    pub async fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, PrepareError> {
        claims::check_uid(claim)?;
        let found = self
            .api
            .claim(&claim.namespace, &claim.name)
            .await
            .map_err(|e| claim.error(Problem::Api(e)))?;
        let driver = &self.settings.driver;
        let allocated = claims::allocated(claim, &found, driver)?;
        let (host, published) = devices::list(&self.config, self.settings.shares)
            .map_err(|e| claim.error(Problem::Devices(e)))?;
        let prepared = claims::Preparer {
            config: &self.config,
            driver,
            node: &self.settings.node,
            host: &host,
            published: &published,
        }
        .prepare(claim, &allocated)?;
        claims::write_spec(&self.settings.cdi_dir, driver, claim, &prepared.spec)?;
        Ok(prepared.devices)
    }

    /// Unprepares one claim: removes its CDI spec.
    pub fn unprepare(&self, claim: &ClaimRef) -> Result<(), PrepareError> {
        claims::remove_spec(&self.settings.cdi_dir, &self.settings.driver, claim)
    }

    /// Each claim's outcome, by UID, as kubelet wants every claim of its request answered.
    async fn prepare_all(
        &self,
        claims: Vec<ClaimRef>,
    ) -> BTreeMap<String, Result<Vec<PreparedDevice>, String>> {
        let mut out = BTreeMap::new();
        for c in claims {
            let r = self.prepare(&c).await.map_err(|e| {
                let message = erdma_common::errors::chain(&e);
                tracing::warn!("preparing {message}");
                message
            });
            if r.is_ok() {
                tracing::info!("prepared {c}");
            }
            out.insert(c.uid.clone(), r);
        }
        out
    }

    fn unprepare_all(&self, claims: Vec<ClaimRef>) -> BTreeMap<String, Result<(), String>> {
        claims
            .into_iter()
            .map(|c| {
                let r = self.unprepare(&c).map_err(|e| {
                    let message = erdma_common::errors::chain(&e);
                    tracing::warn!("unpreparing {message}");
                    message
                });
                (c.uid.clone(), r)
            })
            .collect()
    }

    /// The health of every published device: (pool, device, healthy).
    fn health(&self) -> Vec<(String, String, bool)> {
        match devices::list(&self.config, self.settings.shares) {
            Ok((_, published)) => published
                .into_iter()
                .map(|p| (self.settings.node.clone(), p.name, p.healthy))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The DRA service for one version of its API: the messages differ only in their package.
macro_rules! dra_service {
    ($version:ident) => {
        impl From<pb::$version::Claim> for ClaimRef {
            fn from(c: pb::$version::Claim) -> ClaimRef {
                ClaimRef { namespace: c.namespace, name: c.name, uid: c.uid }
            }
        }

        #[tonic::async_trait]
        impl pb::$version::dra_plugin_server::DraPlugin for Arc<Driver> {
            async fn node_prepare_resources(
                &self,
                req: Request<pb::$version::NodePrepareResourcesRequest>,
            ) -> Result<Response<pb::$version::NodePrepareResourcesResponse>, Status> {
                let claims = req.into_inner().claims.into_iter().map(ClaimRef::from).collect();
                let claims = self
                    .prepare_all(claims)
                    .await
                    .into_iter()
                    .map(|(uid, r)| {
                        let answer = match r {
                            Ok(devices) => pb::$version::NodePrepareResourceResponse {
                                devices: devices
                                    .into_iter()
                                    .map(|d| pb::$version::Device {
                                        request_names: vec![d.request],
                                        pool_name: d.pool,
                                        device_name: d.device,
                                        cdi_device_ids: d.cdi_device_ids,
                                    })
                                    .collect(),
                                error: String::new(),
                            },
                            Err(error) => pb::$version::NodePrepareResourceResponse {
                                devices: Vec::new(),
                                error,
                            },
                        };
                        (uid, answer)
                    })
                    .collect();
                Ok(Response::new(pb::$version::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<pb::$version::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<pb::$version::NodeUnprepareResourcesResponse>, Status> {
                let claims = req.into_inner().claims.into_iter().map(ClaimRef::from).collect();
                let claims = self
                    .unprepare_all(claims)
                    .into_iter()
                    .map(|(uid, r)| {
                        let error = r.err().unwrap_or_default();
                        (uid, pb::$version::NodeUnprepareResourceResponse { error })
                    })
                    .collect();
                Ok(Response::new(pb::$version::NodeUnprepareResourcesResponse { claims }))
            }
        }
    };
}
dra_service!(v1);
dra_service!(v1beta1);

type HealthStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Device health for one version of its API: every device each poll (kubelet takes a device it
/// stops hearing about as Unknown).
macro_rules! health_service {
    ($version:ident, $($extra:tt)*) => {
        #[tonic::async_trait]
        impl pb::$version::dra_resource_health_server::DraResourceHealth for Arc<Driver> {
            type NodeWatchResourcesStream = HealthStream<pb::$version::NodeWatchResourcesResponse>;

            async fn node_watch_resources(
                &self,
                _: Request<pb::$version::NodeWatchResourcesRequest>,
            ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    loop {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
                        let devices = me
                            .health()
                            .into_iter()
                            .map(|(pool_name, device_name, healthy)| pb::$version::DeviceHealth {
                                device: Some(pb::$version::DeviceIdentifier { pool_name, device_name }),
                                health: if healthy {
                                    pb::$version::HealthStatus::Healthy
                                } else {
                                    pb::$version::HealthStatus::Unhealthy
                                } as i32,
                                last_updated_time: now,
                                $($extra)*
                            })
                            .collect();
                        let update = pb::$version::NodeWatchResourcesResponse { devices };
                        if tx.send(Ok(update)).await.is_err() {
                            return;
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(me.settings.poll) => {}
                            _ = tx.closed() => return,
                        }
                    }
                });
                Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
            }
        }
    };
}
health_service!(health_v1alpha1,);
health_service!(health_v1beta1, health_check_timeout_seconds: 0, message: String::new(),);

/// kubelet's plugin watcher's view of the driver.
struct Registrar {
    info: pb::registration::PluginInfo,
}

#[tonic::async_trait]
impl pb::registration::registration_server::Registration for Arc<Registrar> {
    async fn get_info(
        &self,
        _: Request<pb::registration::InfoRequest>,
    ) -> Result<Response<pb::registration::PluginInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        req: Request<pb::registration::RegistrationStatus>,
    ) -> Result<Response<pb::registration::RegistrationStatusResponse>, Status> {
        let status = req.into_inner();
        if status.plugin_registered {
            tracing::info!("registered with kubelet as {}", self.info.name);
        } else {
            tracing::error!(
                "kubelet refused the registration of {}: {}",
                self.info.name,
                status.error
            );
        }
        Ok(Response::new(pb::registration::RegistrationStatusResponse {}))
    }
}

fn bind(path: &Path) -> Result<tokio::net::UnixListener, DraError> {
    let _ = std::fs::remove_file(path);
    tokio::net::UnixListener::bind(path)
        .map_err(|source| DraError::Listen { path: path.to_path_buf(), source })
}

/// Keeps this node's ResourceSlice equal to its devices: read every poll, written only when
/// they changed (a port's state, a device come or gone) or the last write failed.
pub async fn publish_loop(driver: Arc<Driver>) {
    let mut last: Option<Vec<Published>> = None;
    loop {
        match devices::list(&driver.config, driver.settings.shares) {
            Ok((_, now)) if last.as_ref() != Some(&now) => match driver.api.publish(&now).await {
                Ok(p) => {
                    if let Publication::Written(generation) = p {
                        tracing::info!(
                            "published {} device(s) of node {} (pool generation {generation})",
                            now.len(),
                            driver.settings.node
                        );
                    }
                    last = Some(now);
                }
                Err(e) => tracing::warn!(
                    "publishing the ResourceSlice: {}; trying again",
                    erdma_common::errors::chain(&e)
                ),
            },
            Ok(_) => {}
            Err(e) => tracing::warn!("{}", erdma_common::errors::chain(&e)),
        }
        tokio::time::sleep(driver.settings.poll).await;
    }
}

/// Serves the driver forever: the slice kept current, the DRA and health services on the DRA
/// socket, the registration socket for kubelet; both served again when either socket is removed
/// or its server stops.
pub async fn run(driver: Driver) -> Result<(), DraError> {
    let driver = Arc::new(driver);
    let s = driver.settings.clone();
    for dir in [&s.plugin_dir, &s.registry_dir] {
        std::fs::create_dir_all(dir)
            .map_err(|source| DraError::CreateDir { path: dir.clone(), source })?;
    }
    let publisher = tokio::spawn(publish_loop(Arc::clone(&driver)));
    let registrar = Arc::new(Registrar {
        info: pb::registration::PluginInfo {
            r#type: super::PLUGIN_TYPE.to_string(),
            name: s.driver.clone(),
            endpoint: s.dra_socket().display().to_string(),
            supported_versions: super::VERSIONS.iter().map(|v| v.to_string()).collect(),
        },
    });
    let (dra_path, reg_path) = (s.dra_socket(), s.registration_socket());
    let result = loop {
        let dra = match bind(&dra_path) {
            Ok(l) => l,
            Err(e) => break Err(e),
        };
        let dra_server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::v1::dra_plugin_server::DraPluginServer::new(Arc::clone(&driver)))
                .add_service(pb::v1beta1::dra_plugin_server::DraPluginServer::new(Arc::clone(
                    &driver,
                )))
                .add_service(
                    pb::health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
                        Arc::clone(&driver),
                    ),
                )
                .add_service(
                    pb::health_v1beta1::dra_resource_health_server::DraResourceHealthServer::new(
                        Arc::clone(&driver),
                    ),
                )
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(dra)),
        );
        // Registration last: kubelet dials the DRA socket as soon as it has registered.
        let reg = match bind(&reg_path) {
            Ok(l) => l,
            Err(e) => {
                dra_server.abort();
                break Err(e);
            }
        };
        let reg_server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::registration::registration_server::RegistrationServer::new(
                    Arc::clone(&registrar),
                ))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(reg)),
        );
        tracing::info!(
            "serving {} on {} (registration {})",
            s.driver,
            dra_path.display(),
            reg_path.display()
        );
        loop {
            tokio::time::sleep(s.poll).await;
            if dra_server.is_finished()
                || reg_server.is_finished()
                || !dra_path.exists()
                || !reg_path.exists()
            {
                tracing::info!("a socket of the driver went: serving again");
                break;
            }
        }
        dra_server.abort();
        reg_server.abort();
    };
    publisher.abort();
    result
}
