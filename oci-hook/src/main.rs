//! `erdma-oci-hook`: parse arguments, load the config, call the library, map errors to exit codes.
//! Hooks must not write to stdout unless it is their protocol (precreate); they log to the file
//! named in the config.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use erdma_oci_hook::config::Config;
use erdma_oci_hook::engine::{ConfigureOptions, Engine};

#[derive(Debug, Parser)]
#[command(name = "erdma-oci-hook", version, about = "eRDMA devices, memlock and host networking for containers: hooks, CDI specs and engine set-up")]
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
    /// Podman hooks.d precreate stage: OCI spec on stdin, edited spec on stdout.
    Precreate,
    /// OCI prestart hook: container state on stdin; acts on the container directly.
    Prestart,
    /// OCI createRuntime hook (same as prestart).
    #[command(name = "createRuntime", alias = "create-runtime")]
    CreateRuntime,
    /// Container Device Interface specs.
    Cdi {
        #[command(subcommand)]
        command: CdiCommand,
    },
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

#[derive(Debug, Subcommand)]
enum CdiCommand {
    /// Write a CDI spec for this host's eRDMA devices.
    Generate {
        /// Write here (atomically) instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "error: {e}");
            for cause in e.chain().skip(1) {
                let _ = writeln!(err, "  Caused by: {cause}");
            }
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::load()?;
    let _log = erdma_oci_hook::log::init(&config, "erdma-oci-hook");
    let result = dispatch(cli, &config);
    if let Err(e) = &result {
        tracing::error!("{}", e.chain().map(ToString::to_string).collect::<Vec<_>>().join(": "));
    }
    result
}

fn dispatch(cli: Cli, config: &Config) -> anyhow::Result<()> {
    match cli.command {
        Command::Devices { json } => {
            let host = erdma_oci_hook::discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&host)?)?;
            } else {
                for d in host.devices.iter().chain(&host.others) {
                    let ports: Vec<String> = d.ports.iter().map(|p| format!("port {} {} {} mtu {}", p.num, p.state_name, p.netdev.as_deref().unwrap_or("-"), p.mtu.map(|m| m.to_string()).unwrap_or("-".into()))).collect();
                    let node = d.uverbs.as_ref().map(|u| u.path.clone()).unwrap_or_else(|| format!("unusable: {}", d.problem.as_deref().unwrap_or("?")));
                    writeln!(out, "{} ({}) {} {}", d.name, d.driver.as_deref().unwrap_or("?"), node, ports.join(", "))?;
                }
                if host.devices.is_empty() && host.others.is_empty() {
                    writeln!(out, "no RDMA devices under {}", config.sysfs_root.display())?;
                }
            }
        }
        Command::Precreate => erdma_oci_hook::hooks::precreate(config, &mut std::io::stdin().lock(), &mut std::io::stdout().lock())?,
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
        Command::Configure { engine, dry_run, config: config_path, runtime_path } => {
            let me = std::env::current_exe()?;
            let runtime_path = runtime_path.unwrap_or_else(|| me.with_file_name("erdma-runtime"));
            let report = erdma_oci_hook::engine::configure(engine, &ConfigureOptions { dry_run, config_path, runtime_path, hook_path: me })?;
            let mut out = std::io::stdout().lock();
            if dry_run {
                write!(out, "{}", report.diff)?;
            } else if report.changed {
                let changed = std::iter::once((&report.path, report.changed, &report.backup)).chain(report.also.iter().map(|f| (&f.path, f.changed, &f.backup)));
                for (path, _, backup) in changed.filter(|(_, c, _)| *c) {
                    writeln!(out, "updated {}{}", path.display(), backup.as_ref().map(|b| format!(" (backup {})", b.display())).unwrap_or_default())?;
                }
            } else {
                writeln!(out, "{} already configured", report.path.display())?;
            }
            // Notes are advice, not data: stderr.
            for note in &report.notes {
                eprintln!("note: {note}");
            }
        }
    }
    Ok(())
}
