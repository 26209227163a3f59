//! `erdma-dra-plugin`: the DRA driver `erdma.aliyun.com` on one node; thin, the work is in
//! `erdma_kube::dra` (what is published, how a claim is prepared, kubelet's and the API
//! server's sides). The hook config (`ERDMA_OCI_HOOK_CONFIG`, else /etc/erdma/oci-hook.toml)
//! gives the sysfs and /dev roots, the drivers and the NCCL policy, as for the hooks.
#![forbid(unsafe_code)]
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use erdma_kube::dra;

#[derive(Parser, Debug)]
#[command(
    name = "erdma-dra-plugin",
    version = env!("ERDMA_VERSION"),
    about = "Kubernetes DRA driver for eRDMA (erdma.aliyun.com): publishes this node's ERIs as a ResourceSlice and prepares the claims kubelet hands it as CDI specs"
)]
struct Cli {
    /// This node's name (the pool's and the ResourceSlice's); in a DaemonSet, from the downward API.
    #[arg(long, env = "NODE_NAME", value_name = "NODE")]
    node_name: String,
    /// The driver's name, as DeviceClasses and claims name it.
    #[arg(long, value_name = "NAME", default_value = dra::DRIVER)]
    driver_name: String,
    /// kubelet's plugin registry directory (the registration socket goes there).
    #[arg(long, value_name = "DIR", default_value = dra::REGISTRY_DIR)]
    registry_dir: PathBuf,
    /// The directory of the DRA socket (`dra.sock`).
    #[arg(long, value_name = "DIR", default_value = dra::PLUGIN_DIR)]
    plugin_dir: PathBuf,
    /// Where each prepared claim's CDI spec is written (the runtime's CDI directory).
    #[arg(long, value_name = "DIR", default_value = dra::CDI_DIR)]
    cdi_dir: PathBuf,
    /// How many claims may hold one ERI at once (N > 1 publishes N devices per ERI).
    #[arg(long, default_value_t = 1)]
    shares: u32,
    /// Milliseconds between reads of sysfs (the ResourceSlice, health) and checks of the sockets.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    poll_ms: u64,
    /// A kubeconfig to reach the API server with; default: $KUBECONFIG, else the pod's service account.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    metrics: erdma_kube::metrics::Args,
}

fn fail(e: &(dyn std::error::Error + 'static)) -> ExitCode {
    eprintln!("error: {}", erdma_common::errors::chain(e));
    ExitCode::from(1)
}

async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, Box<dyn std::error::Error>> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(&path).map_err(|e| {
                format!("reading {}: {}", path.display(), erdma_common::errors::chain(&e))
            })?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    erdma_oci_hook::log::init_stderr();
    for (what, name) in [("--node-name", &cli.node_name), ("--driver-name", &cli.driver_name)] {
        if !dra::devices::dns_subdomain(name) {
            eprintln!("error: {what} {name:?} is not a DNS subdomain (lowercase letters, digits, '-' and '.'), as Kubernetes names nodes and drivers");
            return ExitCode::from(2);
        }
    }
    if !dra::devices::dns_subdomain(&dra::devices::slice_name(&cli.node_name, &cli.driver_name)) {
        eprintln!(
            "error: the ResourceSlice's name, {}, would be longer than 253 characters",
            dra::devices::slice_name(&cli.node_name, &cli.driver_name)
        );
        return ExitCode::from(2);
    }
    if let Some(Err(e)) =
        cli.metrics.metrics_address.as_deref().map(erdma_kube::metrics::parse_address)
    {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let config = match erdma_oci_hook::config::Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", erdma_common::errors::chain(&e));
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        let metrics = erdma_kube::metrics::start(
            &cli.metrics,
            config.clone(),
            None,
            Some(cli.driver_name.clone()),
        );
        if let Err(e) = metrics.await {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
        let client = match client(cli.kubeconfig).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "error: connecting to the API server: {}",
                    erdma_common::errors::chain(&*e)
                );
                return ExitCode::from(1);
            }
        };
        let settings = dra::kubelet::Settings {
            driver: cli.driver_name.clone(),
            node: cli.node_name.clone(),
            registry_dir: cli.registry_dir,
            plugin_dir: cli.plugin_dir,
            cdi_dir: cli.cdi_dir,
            shares: cli.shares.max(1),
            poll: std::time::Duration::from_millis(cli.poll_ms.max(10)),
        };
        let driver = dra::kubelet::Driver {
            config,
            api: dra::apiserver::ApiServer::new(client, &settings.driver, &settings.node),
            settings,
        };
        match dra::kubelet::run(driver).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        }
    })
}
