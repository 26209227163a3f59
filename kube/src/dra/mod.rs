//! The DRA driver `erdma.aliyun.com` (`erdma-dra-plugin`): eRDMA devices for Kubernetes'
//! Dynamic Resource Allocation (`resource.k8s.io/v1`), beside the device plugin
//! ([`crate::deviceplugin`]), never on the same node as it.
//!
//! The pipeline, one module each:
//! - [`devices`]: what this node publishes (an ERI per device, its attributes) and the
//!   ResourceSlice that carries it;
//! - [`apiserver`]: the API server (kube's client): the slice kept equal to the node, the claims
//!   read;
//! - [`claims`]: a claim prepared as a CDI spec of its own, and unprepared;
//! - [`kubelet`]: kubelet's side: plugin registration, the DRA service (v1 and v1beta1) and
//!   device health (v1alpha1 and v1beta1), and the loop that keeps them served.

pub mod apiserver;
pub mod claims;
pub mod devices;
pub mod kubelet;

/// The driver's name: the domain of its attributes and of its DeviceClass, and the CDI vendor
/// of its claims' specs. Alibaba Cloud's domain, as the device plugin's resource (`aliyun/erdma`)
/// and the CDI kind of the host's spec (`aliyun.com/erdma`) are: the vendor's own, as a DRA
/// driver name should be.
pub const DRIVER: &str = "erdma.aliyun.com";
/// kubelet's directory of registration sockets (its plugin watcher's).
pub const REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// The directory of the driver's own socket(s), by kubelet's convention.
pub const PLUGIN_DIR: &str = "/var/lib/kubelet/plugins/erdma.aliyun.com";
/// The DRA service's socket in that directory.
pub const DRA_SOCKET: &str = "dra.sock";
/// Where the claims' CDI specs go: the directory for generated, transient specs (CDI's
/// `DefaultDynamicDir`), which containerd and CRI-O read.
pub const CDI_DIR: &str = "/var/run/cdi";
/// The plugin type kubelet's plugin watcher knows DRA drivers by.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The DRA services offered, as registration names them (newest first).
pub const VERSIONS: &[&str] = &["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// The generated APIs (`proto/`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    /// kubelet's plugin registration (`pluginregistration`).
    pub mod registration {
        tonic::include_proto!("pluginregistration");
    }
    /// The DRA service, v1 (Kubernetes 1.34+).
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    /// The DRA service, v1beta1 (Kubernetes 1.32 and 1.33).
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
    }
    /// Device health, v1alpha1 (Kubernetes 1.34, feature ResourceHealthStatus).
    pub mod health_v1alpha1 {
        include!(concat!(env!("OUT_DIR"), "/dra_health/v1alpha1.rs"));
    }
    /// Device health, v1beta1.
    pub mod health_v1beta1 {
        include!(concat!(env!("OUT_DIR"), "/dra_health/v1beta1.rs"));
    }
}
