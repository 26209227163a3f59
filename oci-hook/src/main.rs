//! `erdma-oci-hook`: parse arguments, load the config, call the library, map errors to exit codes.
//! Hooks must not write to stdout unless it is their protocol (precreate); they log to the file
//! named in the config.
#![forbid(unsafe_code)]
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use erdma_oci_hook::config::Config;
use erdma_oci_hook::engine::{ConfigureOptions, Engine};

#[derive(Debug, Parser)]
#[command(
    name = "erdma-oci-hook",
    version = env!("ERDMA_VERSION"),
    about = "eRDMA devices, memlock and host networking for containers: hooks, CDI specs and engine set-up"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the eRDMA devices this host has.
    Devices {
        #[arg(long)]
        json: bool,
    },
    /// Live eRDMA traffic per ERI, as `eadm stat -d DEV -l` shows it: receive and transmit
    /// bytes and packets per second with their maximum, average and minimum over the session,
    /// totals, drops, and the port's state, from the driver's counters in sysfs
    /// (`ports/N/hw_counters`). Refreshes in place on a terminal until Ctrl-C.
    Stat {
        /// Only this device (e.g. `erdma_0`, `rocep26s0`); repeat for several [default: all].
        #[arg(short = 'd', long = "device", value_name = "NAME")]
        devices: Vec<String>,
        /// Seconds between readings.
        #[arg(short, long, value_name = "SECONDS", default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many intervals [default: until interrupted].
        #[arg(short, long, value_name = "N")]
        count: Option<u64>,
        /// One JSON line per reading instead of the table (the first without rates).
        #[arg(long)]
        json: bool,
    },
    /// Podman hooks.d precreate stage: OCI spec on stdin, edited spec on stdout.
    Precreate,
    /// OCI prestart hook: container state on stdin; acts on the container directly.
    Prestart,
    /// OCI createRuntime hook (same as prestart).
    #[command(name = "createRuntime", alias = "create-runtime")]
    CreateRuntime,
    /// Print the NCCL settings this host gives a container with these devices, for jobs
    /// started without a container engine (mpirun `-x`, `docker run --env-file`).
    ///
    /// What erdma-runtime and the hooks set: NCCL_IB_HCA, NCCL_SOCKET_IFNAME and
    /// NCCL_IB_GID_INDEX derived from sysfs, NCCL_NET_GDR_LEVEL where GPU Direct RDMA needs it,
    /// NCCL_PROTO=^LL128 under MTU 8500, NCCL_NET=IB (no silent fallback to TCP), and the
    /// presets that hold on every eRDMA host.
    Env {
        /// Devices by name, comma-separated [default: the ERIs that go with --gpus, else all
        /// usable eRDMA devices].
        #[arg(long, value_delimiter = ',', value_name = "NAME,…")]
        devices: Vec<String>,
        /// The job's GPUs, as NVIDIA_VISIBLE_DEVICES names them (`0,1`, UUIDs, `all`)
        /// [default: all].
        #[arg(long, value_name = "LIST")]
        gpus: Option<String>,
        #[arg(long, value_enum, default_value_t = EnvFormat::Shell)]
        format: EnvFormat,
        /// For a job in this network namespace (`/var/run/netns/NAME`, `/proc/PID/ns/net`):
        /// NCCL_SOCKET_IFNAME names its interfaces, read from it (needs root) [default: the
        /// host's network].
        #[arg(long, value_name = "PATH")]
        netns: Option<PathBuf>,
    },
    /// Show where the GPUs sit beside the eRDMA devices: the PCIe path type between each GPU
    /// and each ERI as NCCL classifies it (PIX, PXB, PHB, SYS), whether GPU Direct RDMA can
    /// work, and which ERI each GPU goes with.
    Topology {
        #[arg(long)]
        json: bool,
        /// Also place this network interface (its PCI function), e.g. the one NCCL's socket
        /// transport uses on a host without eRDMA; repeat for several.
        #[arg(long = "netdev", value_name = "IFNAME")]
        netdevs: Vec<String>,
    },
    /// Container Device Interface specs.
    Cdi {
        #[command(subcommand)]
        command: CdiCommand,
    },
    /// Tell whether this host is ready for eRDMA containers.
    ///
    /// Checks the erdma driver, devices and ports, the MTU, whether NCCL will use GPU Direct
    /// RDMA (nvidia_peermem, the GPUs' PCIe paths to the ERIs), each engine's
    /// registration and memlock, and the CDI spec. Exit 0 when nothing failed, 1 otherwise,
    /// 2 for a usage or hook-config error.
    Doctor(DoctorArgs),
    /// Register erdma-runtime or the hooks with a container engine.
    Configure {
        #[arg(value_enum)]
        engine: Engine,
        /// Print the change as a diff and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// docker: daemon.json; containerd, crio: the main config (the drop-in goes beside it);
        /// podman: the hooks directory [default: /etc/docker/daemon.json,
        /// /etc/containerd/config.toml, /etc/crio/crio.conf, /etc/containers/oci/hooks.d].
        #[arg(long)]
        config: Option<PathBuf>,
        /// Path of erdma-runtime [default: beside this binary].
        #[arg(long)]
        runtime_path: Option<PathBuf>,
    },
}

// `doctor`'s options (no doc comment: the variant's is the subcommand's help).
#[derive(Debug, clap::Args)]
struct DoctorArgs {
    /// Print the report as JSON (`ready`, `summary`, `checks`).
    #[arg(long)]
    json: bool,
    /// Docker's daemon config [default: /etc/docker/daemon.json].
    #[arg(long, value_name = "FILE")]
    docker_config: Option<PathBuf>,
    /// containerd's main config [default: /etc/containerd/config.toml].
    #[arg(long, value_name = "FILE")]
    containerd_config: Option<PathBuf>,
    /// CRI-O's main config, crio.conf.d beside it [default: /etc/crio/crio.conf].
    #[arg(long, value_name = "FILE")]
    crio_config: Option<PathBuf>,
    /// Podman's OCI hooks directory [default: /etc/containers/oci/hooks.d].
    #[arg(long, value_name = "DIR")]
    podman_hooks_dir: Option<PathBuf>,
    /// A CDI spec directory; repeat for several, lowest precedence first [default: /etc/cdi, /var/run/cdi].
    #[arg(long = "cdi-dir", value_name = "DIR")]
    cdi_dirs: Vec<PathBuf>,
    /// The root the engines' sockets are looked for under (`run/docker.sock`, …); their
    /// programs are looked for on PATH [default: /].
    #[arg(long, value_name = "DIR")]
    engine_root: Option<PathBuf>,
    /// Also start one short-lived container of IMAGE through an engine, as a user would
    /// (Docker: `--runtime erdma`; Podman: the hook's annotation; host networking), and
    /// check inside it: the device nodes, `ulimit -l`, the NCCL settings, the erdma
    /// provider, `ibv_devinfo` and NCCL when the image has them. Removed afterwards.
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// The engine for --image (containerd: through `ctr`, with the erdma-runtime its config
    /// registers; the image must be in containerd's store).
    #[arg(long, value_enum, default_value = "docker", requires = "image")]
    engine: Engine,
    /// With --image: ask with the CDI device `aliyun.com/erdma=all` (Podman 4.1+, Docker
    /// 25+; needs `erdma-oci-hook cdi generate`) instead of the runtime or hook.
    #[arg(long, requires = "image")]
    cdi: bool,
    /// With --image: seconds the container may take, image pull included.
    #[arg(long, value_name = "SECONDS", default_value_t = 120, requires = "image")]
    timeout: u64,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum EnvFormat {
    /// `export NAME='VALUE'` lines, for `eval` or `source`.
    Shell,
    /// `{"devices", "env", "derived", "notes"}`.
    Json,
    /// `-e NAME=VALUE` arguments for `docker run`.
    DockerArgs,
    /// `NAME=VALUE` lines, for `docker run --env-file`.
    EnvFile,
    /// `-x NAME=VALUE` arguments for Open MPI's `mpirun`.
    Mpirun,
}

#[derive(Debug, Subcommand)]
enum CdiCommand {
    /// Write a CDI spec for this host's eRDMA devices.
    Generate {
        /// Write here (atomically) instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

/// The hook config could not be loaded: `doctor` exits 2 for it (a usage problem, not a host
/// that is not ready).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ConfigError(erdma_oci_hook::Error);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config_error_code = if matches!(cli.command, Command::Doctor { .. }) { 2 } else { 1 };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "error: {e}");
            for cause in e.chain().skip(1) {
                let _ = writeln!(err, "  Caused by: {cause}");
            }
            if e.is::<ConfigError>() {
                let _ = writeln!(
                    err,
                    "hint: fix {} (or name another file with {})",
                    Config::path().display(),
                    erdma_oci_hook::config::ENV_PATH
                );
                return ExitCode::from(config_error_code);
            }
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let config = Config::load().map_err(ConfigError)?;
    let _log = erdma_oci_hook::log::init(&config, "erdma-oci-hook");
    let result = dispatch(cli, &config);
    if let Err(e) = &result {
        tracing::error!("{}", e.chain().map(ToString::to_string).collect::<Vec<_>>().join(": "));
    }
    result
}

/// Runs `cli`'s subcommand; those that are more than a call have a function of their own.
fn dispatch(cli: Cli, config: &Config) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Devices { json } => devices_command(config, json)?,
        Command::Stat { devices, interval, count, json } => {
            stat_command(config, &devices, interval, count, json)?
        }
        Command::Topology { json, netdevs } => topology_command(config, json, &netdevs)?,
        Command::Env { devices, format, netns, gpus } => {
            env_command(config, devices, format, netns, gpus)?
        }
        Command::Precreate => erdma_oci_hook::hooks::precreate(
            config,
            &mut std::io::stdin().lock(),
            &mut std::io::stdout().lock(),
        )?,
        Command::Prestart | Command::CreateRuntime => {
            let mut state = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut state)?;
            erdma_oci_hook::prestart::run(config, &state)?;
        }
        Command::Cdi { command: CdiCommand::Generate { output } } => {
            let spec = erdma_oci_hook::cdi::generate(config)?;
            let text = serde_json::to_string_pretty(&spec)? + "\n";
            match output {
                Some(path) => erdma_oci_hook::cdi::write(&path, text.as_bytes())?,
                None => std::io::stdout().lock().write_all(text.as_bytes())?,
            }
        }
        Command::Doctor(args) => return doctor_command(config, args),
        Command::Configure { engine, dry_run, config: config_path, runtime_path } => {
            configure_command(engine, dry_run, config_path, runtime_path)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `erdma-oci-hook devices`: each RDMA device with its node and ports, or the host as JSON.
/// Reads the counters every `interval` seconds and prints the rates: a table redrawn in place
/// on a terminal (appended otherwise), or a JSON line per interval.
fn stat_command(
    config: &Config,
    devices: &[String],
    interval: f64,
    count: Option<u64>,
    json: bool,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use std::time::{Duration, Instant, SystemTime};
    if !(interval.is_finite() && (0.01..=86_400.0).contains(&interval)) {
        anyhow::bail!("--interval {interval}: give seconds between 0.01 and 86400");
    }
    let discover = || {
        erdma_oci_hook::discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)
    };
    let known = discover()?;
    if let Some(unknown) = devices.iter().find(|d| !known.devices.iter().any(|k| &k.name == *d)) {
        let names: Vec<&str> = known.devices.iter().map(|d| d.name.as_str()).collect();
        anyhow::bail!(
            "no eRDMA device {unknown} on this host (there are: {})",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        );
    }
    let mut first = Some(known);
    let terminal = std::io::stdout().is_terminal() && !json;
    let mut session = erdma_oci_hook::stat::Session::new();
    let mut out = std::io::stdout().lock();
    // A reading now, then one per interval; `count` intervals have rates.
    let mut taken = 0u64;
    // The session's clock starts at the first reading, not before it: each reading is timed
    // where it is taken, so an interval is never shorter than the sleep (a start slowed by a
    // busy machine would otherwise shorten the first interval and overstate its rates).
    let mut start: Option<Instant> = None;
    loop {
        // The first reading uses the discovery that checked `-d` above.
        let host = match first.take() {
            Some(host) => host,
            None => discover()?,
        };
        let taken_at = Instant::now();
        // The time printed with a reading is its own, not the printing's.
        let unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let start = *start.get_or_insert(taken_at);
        let now = taken_at.duration_since(start).as_secs_f64();
        let rows = session
            .update(now, erdma_oci_hook::counters::sample(&config.sysfs_root, &host, devices));
        if json {
            // The first line has no rates yet: the counters as they stood.
            writeln!(out, "{}", erdma_oci_hook::stat::json_line(&rows, unix))?;
        } else {
            let table = erdma_oci_hook::stat::render(&rows, interval, now);
            if terminal {
                // Home and clear, then the table: redrawn in place.
                write!(out, "\x1b[H\x1b[2J{table}")?;
            } else {
                writeln!(out, "{table}")?;
            }
        }
        out.flush()?;
        if count.is_some_and(|c| taken >= c) {
            return Ok(());
        }
        taken += 1;
        let next = start + Duration::from_secs_f64(interval * taken as f64);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

fn devices_command(config: &Config, json: bool) -> anyhow::Result<()> {
    let host =
        erdma_oci_hook::discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&host)?)?;
        return Ok(());
    }
    for d in host.devices.iter().chain(&host.others) {
        let ports: Vec<String> = d
            .ports
            .iter()
            .map(|p| {
                format!(
                    "port {} {} {} mtu {}",
                    p.num,
                    p.state_name,
                    p.netdev.as_deref().unwrap_or("-"),
                    p.mtu.map(|m| m.to_string()).unwrap_or("-".into())
                )
            })
            .collect();
        let node = d
            .uverbs
            .as_ref()
            .map(|u| u.path.clone())
            .unwrap_or_else(|| format!("unusable: {}", d.problem.as_deref().unwrap_or("?")));
        writeln!(
            out,
            "{} ({}) {} {}",
            d.name,
            d.driver.as_deref().unwrap_or("?"),
            node,
            ports.join(", ")
        )?;
    }
    if host.devices.is_empty() && host.others.is_empty() {
        writeln!(out, "no RDMA devices under {}", config.sysfs_root.display())?;
    }
    Ok(())
}

/// `erdma-oci-hook env`: the NCCL settings a container with these devices (and GPUs, in this
/// network namespace) gets, in `format`; notes on stderr.
fn env_command(
    config: &Config,
    devices: Vec<String>,
    format: EnvFormat,
    netns: Option<PathBuf>,
    gpus: Option<String>,
) -> anyhow::Result<()> {
    let host =
        erdma_oci_hook::discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
    let request = if devices.is_empty() {
        erdma_oci_hook::request::Request::All
    } else {
        erdma_oci_hook::request::Request::Named(devices)
    };
    let (chosen, nodes) = erdma_oci_hook::modify::select(&request, &host, config)?;
    // The job's GPUs as a container's spec would give them.
    let spec = match &gpus {
        Some(g) => serde_json::json!({"process": {"env": [format!("NVIDIA_VISIBLE_DEVICES={g}")]}}),
        None => serde_json::json!({}),
    };
    let (chosen, _, placement) =
        erdma_oci_hook::modify::place(&spec, &host, config, &request, chosen, nodes);
    for p in &placement.pairing {
        eprintln!("note: {p}");
    }
    let net = match netns.map(|p| erdma_oci_hook::netns::Net::read(&p)) {
        None => erdma_oci_hook::netns::Net::Host,
        Some(erdma_oci_hook::netns::Net::Unread { why }) => {
            anyhow::bail!("the network namespace: {why}")
        }
        Some(net) => net,
    };
    let derived = erdma_oci_hook::nccl::derive(&host, &chosen, &net, &placement.context(config));
    let env = derived.with_presets();
    for n in &derived.notes {
        eprintln!("note: {n}");
    }
    let mut out = std::io::stdout().lock();
    match format {
        EnvFormat::Shell => {
            for (k, v) in &env {
                writeln!(out, "export {k}='{}'", v.replace('\'', "'\\''"))?;
            }
        }
        EnvFormat::Json => {
            let names: Vec<&str> = chosen.iter().map(|d| d.name.as_str()).collect();
            let env: serde_json::Map<String, serde_json::Value> =
                env.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"devices": names, "env": env, "derived": derived.vars, "notes": derived.notes})
                )?
            )?;
        }
        EnvFormat::DockerArgs => writeln!(
            out,
            "{}",
            env.iter().map(|(k, v)| format!("-e {k}={v}")).collect::<Vec<_>>().join(" ")
        )?,
        EnvFormat::EnvFile => {
            for (k, v) in &env {
                writeln!(out, "{k}={v}")?;
            }
        }
        EnvFormat::Mpirun => writeln!(
            out,
            "{}",
            env.iter().map(|(k, v)| format!("-x {k}={v}")).collect::<Vec<_>>().join(" ")
        )?,
    }
    Ok(())
}

/// `erdma-oci-hook doctor`: the report, as text or JSON; exit 0 when the host is ready, else 1.
fn doctor_command(config: &Config, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let json = args.json;
    let opts = doctor_options(args);
    let report = erdma_oci_hook::doctor::run(config, &opts);
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write!(out, "{}", report.render())?;
    }
    Ok(if report.ready { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// `doctor`'s options: each path given on the command line, else the default.
fn doctor_options(args: DoctorArgs) -> erdma_oci_hook::doctor::Options {
    let DoctorArgs {
        json: _,
        docker_config,
        containerd_config,
        crio_config,
        podman_hooks_dir,
        cdi_dirs,
        engine_root,
        image,
        engine,
        cdi,
        timeout,
    } = args;
    let defaults = erdma_oci_hook::doctor::Options::default();
    let containerd_config = containerd_config.unwrap_or(defaults.containerd_config.clone());
    erdma_oci_hook::doctor::Options {
        config_path: Config::path(),
        docker_config: docker_config.unwrap_or(defaults.docker_config),
        containerd_config: containerd_config.clone(),
        crio_config: crio_config.unwrap_or(defaults.crio_config),
        podman_hooks_dir: podman_hooks_dir.unwrap_or(defaults.podman_hooks_dir),
        cdi_dirs: if cdi_dirs.is_empty() { defaults.cdi_dirs } else { cdi_dirs },
        trial: image.map(|image| {
            // containerd's CLI is `ctr`; it runs the container with the erdma-runtime
            // containerd's config registers, else the one on PATH.
            let cli = if engine == Engine::Containerd { "ctr" } else { engine.arg() };
            let runtime = (engine == Engine::Containerd)
                .then(|| {
                    erdma_oci_hook::engine::inspect(engine, &containerd_config)
                        .ok()
                        .and_then(|r| r.entry)
                        .and_then(|e| e.program)
                })
                .flatten()
                .or_else(|| {
                    (engine == Engine::Containerd)
                        .then(|| {
                            erdma_oci_hook::engine::detect::which(
                                &defaults.probe.path,
                                "erdma-runtime",
                            )
                        })
                        .flatten()
                });
            erdma_oci_hook::trial::Options {
                image,
                engine,
                program: erdma_oci_hook::engine::detect::which(&defaults.probe.path, cli)
                    .unwrap_or_else(|| PathBuf::from(cli)),
                cdi,
                timeout: std::time::Duration::from_secs(timeout),
                runtime,
            }
        }),
        probe: erdma_oci_hook::engine::detect::Probe {
            root: engine_root.unwrap_or(defaults.probe.root.clone()),
            ..defaults.probe
        },
    }
}

/// `erdma-oci-hook configure`: registers erdma-runtime (beside this binary unless named) or
/// the hooks with `engine`, and says which files changed (with `dry_run`, the diff).
fn configure_command(
    engine: Engine,
    dry_run: bool,
    config_path: Option<PathBuf>,
    runtime_path: Option<PathBuf>,
) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let runtime_path = runtime_path.unwrap_or_else(|| me.with_file_name("erdma-runtime"));
    let report = erdma_oci_hook::engine::configure(
        engine,
        &ConfigureOptions { dry_run, config_path, runtime_path, hook_path: me },
    )?;
    let mut out = std::io::stdout().lock();
    if dry_run {
        write!(out, "{}", report.diff)?;
    } else if report.changed {
        let changed = std::iter::once((&report.path, report.changed, &report.backup))
            .chain(report.also.iter().map(|f| (&f.path, f.changed, &f.backup)));
        for (path, _, backup) in changed.filter(|(_, c, _)| *c) {
            writeln!(
                out,
                "updated {}{}",
                path.display(),
                backup.as_ref().map(|b| format!(" (backup {})", b.display())).unwrap_or_default()
            )?;
        }
    } else {
        writeln!(out, "{} already configured", report.path.display())?;
    }
    // Notes are advice, not data: stderr.
    for note in &report.notes {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// `erdma-oci-hook topology`.
fn topology_command(config: &Config, json: bool, netdevs: &[String]) -> anyhow::Result<()> {
    use erdma_oci_hook::topology;
    let host =
        erdma_oci_hook::discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
    let usable: Vec<_> = host.devices.iter().filter(|d| d.uverbs.is_some()).collect();
    let t = topology::of_host(config, &usable).with_driver_info(&config.proc_root);
    let mut nics: Vec<(String, topology::PciPlace)> = t.eris.clone();
    for n in netdevs {
        let place = topology::place_netdev(&config.sysfs_root, n).ok_or_else(|| {
            anyhow::anyhow!("network interface {n} is not a PCI function under {}; hint: `ls -l {}` shows where it is", config.sysfs_root.display(), config.sysfs_root.join("class/net").join(n).display())
        })?;
        nics.push((n.clone(), place));
    }
    let mut out = std::io::stdout().lock();
    let paths: Vec<serde_json::Value> = t
        .gpus
        .iter()
        .flat_map(|g| {
            nics.iter().map(move |(n, p)| {
                serde_json::json!({"gpu": g.place.bus_id, "nic": n, "type": topology::path_type(&g.place, p).name()})
            })
        })
        .collect();
    if json {
        let nics_json: Vec<serde_json::Value> =
            nics.iter().map(|(n, p)| serde_json::json!({"name": n, "place": p})).collect();
        let report = serde_json::json!({"gpus": t.gpus, "nics": nics_json, "paths": paths, "pairs": t.pairs, "gdr": t.gdr});
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    if t.gpus.is_empty() {
        writeln!(
            out,
            "no NVIDIA GPU under {}",
            config.sysfs_root.join("bus/pci/drivers/nvidia").display()
        )?;
    }
    for g in &t.gpus {
        let row: Vec<String> = nics
            .iter()
            .map(|(n, p)| format!("{n} {}", topology::path_type(&g.place, p).name()))
            .collect();
        writeln!(
            out,
            "GPU {} {} (NUMA {}): {}",
            g.index,
            g.place.bus_id,
            g.place.cpu,
            row.join(", ")
        )?;
    }
    for p in &t.pairs {
        writeln!(out, "GPU {} -> {} ({})", p.gpu, p.eris.join(", "), p.path.name())?;
    }
    if let Some(g) = &t.gdr {
        writeln!(out, "GPU Direct RDMA: {}", g.why)?;
    }
    Ok(())
}
