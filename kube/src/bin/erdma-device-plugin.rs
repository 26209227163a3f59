//! `erdma-device-plugin`: the kubelet device plugin for eRDMA (`aliyun/erdma`); thin, the work
//! is in `erdma_kube::kubelet` (gRPC) and `erdma_kube::deviceplugin` (decisions). The
//! hook config (`ERDMA_OCI_HOOK_CONFIG`, else /etc/erdma/oci-hook.toml) gives the sysfs and /dev
//! roots and the drivers, as for the hooks.
#![forbid(unsafe_code)]
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "erdma-device-plugin",
    version = env!("ERDMA_VERSION"),
    about = "Kubelet device plugin advertising eRDMA devices (aliyun/erdma) to the scheduler"
)]
struct Cli {
    /// kubelet's device-plugin directory (its `kubelet.sock` and the plugins' sockets).
    #[arg(long, value_name = "DIR", default_value = erdma_kube::kubelet::DEFAULT_DIR)]
    socket_dir: PathBuf,
    /// The socket name the plugin serves on, in that directory.
    #[arg(long, value_name = "NAME", default_value = "erdma.sock")]
    endpoint: String,
    /// The extended resource pods request (`resources.limits`).
    #[arg(long, default_value = erdma_kube::deviceplugin::RESOURCE)]
    resource: String,
    /// How many containers may share one eRDMA device.
    #[arg(long, default_value_t = 8)]
    shares: u32,
    /// Answer Allocate with CDI device names (containerd 1.7+, CRI-O 1.23+ with `erdma-oci-hook cdi generate`'s spec) instead of device nodes.
    #[arg(long)]
    cdi: bool,
    /// Milliseconds between reads of sysfs (health) and checks for a kubelet restart.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    poll_ms: u64,
    #[command(flatten)]
    metrics: erdma_kube::metrics::Args,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    erdma_oci_hook::log::init_stderr();
    let config = match erdma_oci_hook::config::Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(Err(e)) =
        cli.metrics.metrics_address.as_deref().map(erdma_kube::metrics::parse_address)
    {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let metrics_config = config.clone();
    let plugin = erdma_kube::kubelet::Plugin {
        config,
        plugin: erdma_kube::deviceplugin::PluginConfig {
            resource: cli.resource,
            shares: cli.shares.max(1),
            cdi: cli.cdi,
        },
        poll: std::time::Duration::from_millis(cli.poll_ms.max(10)),
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let served = rt.block_on(erdma_kube::metrics::start(
        &cli.metrics,
        metrics_config,
        Some(plugin.plugin.resource.clone()),
        None,
    ));
    if let Err(e) = served {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    match rt.block_on(erdma_kube::kubelet::run(plugin, cli.socket_dir, cli.endpoint)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                eprintln!("  Caused by: {c}");
                cause = c.source();
            }
            ExitCode::from(1)
        }
    }
}
