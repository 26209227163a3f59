//! `erdma-nri-plugin`: the NRI plugin for eRDMA, a long-running daemon that containerd (1.7+,
//! with NRI enabled) and CRI-O (1.26+) call for each container they create; thin, the work is in
//! `erdma_kube::nri`. The hook config (`ERDMA_OCI_HOOK_CONFIG`, else
//! /etc/erdma/oci-hook.toml) gives the sysfs and /dev roots, drivers, memlock, network policy and
//! env policy, as for `erdma-runtime` and the hooks.
#![forbid(unsafe_code)]
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use erdma_kube::nri::plugin::{NriPlugin, DEFAULT_SOCKET};

#[derive(Parser, Debug)]
#[command(
    name = "erdma-nri-plugin",
    version = env!("ERDMA_VERSION"),
    about = "NRI plugin giving containers that ask for eRDMA their device nodes, memlock and NCCL env (containerd 1.7+, CRI-O 1.26+)",
    after_help = "A container asks through the device plugin's allocation (resources.limits aliyun/erdma), the annotation com.alibabacloud.erdma.devices (container or pod), or ERDMA_VISIBLE_DEVICES in its env. Others are not touched.\n\nNRI must be enabled in the runtime: containerd 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false; containerd 2.x: on by default; CRI-O: [crio.nri] enable_nri = true."
)]
struct Cli {
    /// The runtime's NRI socket.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The plugin's name, as the runtime logs it.
    #[arg(long, default_value = "erdma")]
    name: String,
    /// Two digits ordering this plugin among the runtime's NRI plugins (lower runs first).
    #[arg(long, default_value = "10")]
    idx: String,
    /// Milliseconds between attempts to connect while the runtime is away.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    retry_ms: u64,
    /// Serve one connection and exit (tests, debugging) instead of reconnecting for ever.
    #[arg(long)]
    once: bool,
    /// Record in DIR, one file per container, the ERIs given to each (removed with the
    /// container), for the metrics' pod labels (`--nri-records` of the plugin serving them)
    /// [default: no records].
    #[arg(long, value_name = "DIR")]
    records: Option<PathBuf>,
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
    let plugin = NriPlugin { config, name: cli.name, idx: cli.idx, records: cli.records };
    if let Err(e) = plugin.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    match plugin.run(&cli.socket, Duration::from_millis(cli.retry_ms.max(10)), cli.once) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
