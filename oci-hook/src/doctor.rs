//! `erdma-oci-hook doctor`: whether this host is ready for eRDMA containers.
//!
//! Read-only. Everything comes from the configured `sysfs_root` and `dev_root`, the engines'
//! config paths and the CDI directories, so the checks run on the fixture trees in
//! `testdata/sysfs`. A check is `ok`, `warn` (containers work, but something is missing: GPU
//! Direct RDMA, an optional CDI spec, an engine that does not raise memlock) or `fail` (eRDMA
//! containers will not work, or may corrupt data); the host is ready when nothing failed.
//!
//! What is checked, in report order (ids in brackets):
//! - the erdma kernel driver and its version, `module/erdma/version` (`driver`);
//! - the eRDMA devices (`devices`), each port's state, `PORT_ACTIVE` expected (`port.DEV.N`),
//!   each device's uverbs node in /dev (`uverbs.DEV`), and `rdma_cm` (`rdma_cm`);
//! - the kernel's RDMA namespace mode, `module/ib_core/parameters/netns_mode`, and what it means
//!   for containers on their own network (`rdma-netns`);
//! - the netdev MTU and what it means for NCCL's LL128 protocol, the ECS eRDMA-on-GPU guide (`mtu`);
//! - whether NCCL will use GPU Direct RDMA for this host's GPUs and ERIs, and why: the
//!   peer-memory module NCCL looks for, the dma-buf path, and each GPU's PCIe path type to its
//!   ERI against NCCL's default level (`gpu-direct-rdma`, [`crate::topology`]);
//! - per engine, whether it is installed, told by its programs on PATH and its socket (not by
//!   its config files: a fresh Docker has no daemon.json), its version and so the path that fits
//!   it (CDI from Docker 25, containerd 1.7, CRI-O 1.23, Podman 4.1; else erdma-runtime or the
//!   hook), whether its config registers erdma-runtime or the precreate hook (`engine.ENGINE`),
//!   and the memlock limit its containers get (`memlock.ENGINE`);
//! - the CDI spec, present and what `cdi generate` would write now (`cdi`).
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

use crate::cdi;
use crate::config::{Config, Memlock};
use crate::discover::{self, Host, RdmaDevice};
use crate::engine::{self, Engine, Registration};
use erdma_common::nccl::{ll128_off, mtu_expected, MTU_JUMBO, MTU_STANDARD, NO_LL128};

/// The eRDMA driver's kernel module.
pub const ERDMA_MODULE: &str = "erdma";
/// The module GPU Direct RDMA needs (NVIDIA driver 470 and later).
pub const PEERMEM_MODULE: &str = "nvidia_peermem";
/// `ib_port_state` PORT_ACTIVE.
const PORT_ACTIVE: u32 = 4;

pub use crate::check::{Check, Status};

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
}

/// The report `--json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// No check failed (warnings allowed).
    pub ready: bool,
    pub summary: Summary,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn new(checks: Vec<Check>) -> Report {
        let mut summary = Summary::default();
        for c in &checks {
            match c.status {
                Status::Ok => summary.ok += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
            }
        }
        Report { ready: summary.fail == 0, summary, checks }
    }

    /// One line per check with its mark, the hint indented under a check that is not ok, and a
    /// summary line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for c in &self.checks {
            let mark = match c.status {
                Status::Ok => "[ ok ]",
                Status::Warn => "[warn]",
                Status::Fail => "[FAIL]",
            };
            out.push_str(&format!("{mark} {}\n", c.message));
            if let Some(hint) = &c.hint {
                out.push_str(&format!("       hint: {hint}\n"));
            }
        }
        let Summary { ok, warn, fail } = self.summary;
        let warnings = plural(warn, "warning");
        if self.ready {
            out.push_str(&format!("ready for eRDMA containers: {ok} ok, {warnings}\n"));
        } else {
            out.push_str(&format!(
                "not ready for eRDMA containers: {fail} failed, {warnings}, {ok} ok\n"
            ));
        }
        out
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Where to look besides the hook config's `sysfs_root` and `dev_root`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The hook config file (named in hints about `memlock`; it need not exist).
    pub config_path: PathBuf,
    /// Docker's daemon.json.
    pub docker_config: PathBuf,
    /// containerd's main config (its `imports` are followed).
    pub containerd_config: PathBuf,
    /// CRI-O's main config (`crio.conf.d` beside it is read too).
    pub crio_config: PathBuf,
    /// Podman's OCI hooks directory.
    pub podman_hooks_dir: PathBuf,
    /// CDI spec directories, lowest precedence first.
    pub cdi_dirs: Vec<PathBuf>,
    /// Where the engines' programs and sockets are looked for.
    pub probe: engine::detect::Probe,
    /// `--image`: one container started through an engine, checked inside ([`crate::trial`]).
    pub trial: Option<crate::trial::Options>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            config_path: PathBuf::from(crate::config::DEFAULT_PATH),
            docker_config: Engine::Docker.default_config_path().to_path_buf(),
            containerd_config: Engine::Containerd.default_config_path().to_path_buf(),
            crio_config: Engine::Crio.default_config_path().to_path_buf(),
            podman_hooks_dir: Engine::Podman.default_config_path().to_path_buf(),
            cdi_dirs: cdi::SPEC_DIRS.iter().map(PathBuf::from).collect(),
            probe: engine::detect::Probe::default(),
            trial: None,
        }
    }
}

impl Options {
    fn engine_config(&self, engine: Engine) -> &Path {
        match engine {
            Engine::Docker => &self.docker_config,
            Engine::Containerd => &self.containerd_config,
            Engine::Crio => &self.crio_config,
            Engine::Podman => &self.podman_hooks_dir,
        }
    }
}

/// Runs every check. Problems are checks, never errors: the report is always complete.
pub fn run(config: &Config, opts: &Options) -> Report {
    let mut checks = vec![driver(config)];
    let host = match discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers) {
        Ok(host) => {
            device_checks(config, opts, &host, &mut checks);
            Some(host)
        }
        Err(e) => {
            checks.push(Check::fail(
                "devices",
                format!("cannot list the RDMA devices: {e}"),
                "check that the sysfs root in the hook config is right and readable",
                json!({"error": e.to_string()}),
            ));
            None
        }
    };
    checks.push(gdr_check(config, host.as_ref()));
    for engine in Engine::ALL {
        engine_checks(engine, config, opts, &mut checks);
    }
    checks.push(cdi_check(config, host.as_ref(), opts));
    if let Some(t) = &opts.trial {
        checks.extend(crate::trial::run(config, host.as_ref(), t));
    }
    Report::new(checks)
}

/// A loaded module as `/sys/module/NAME` shows it.
struct Module {
    version: Option<String>,
    /// `live`, `coming` or `going` (absent for built-in modules).
    initstate: Option<String>,
}

fn module(sysfs: &Path, name: &str) -> Option<Module> {
    let dir = sysfs.join("module").join(name);
    let attr = |name: &str| crate::sysfs::read_trim(&dir.join(name)).filter(|s| !s.is_empty());
    dir.is_dir().then(|| Module { version: attr("version"), initstate: attr("initstate") })
}

fn driver(config: &Config) -> Check {
    let dir = config.sysfs_root.join("module").join(ERDMA_MODULE);
    let Some(m) = module(&config.sysfs_root, ERDMA_MODULE) else {
        return Check::fail(
            "driver",
            format!("the erdma kernel driver is not loaded (no {})", dir.display()),
            "load it with `modprobe erdma`; if it is missing, install Alibaba Cloud's eRDMA driver package",
            json!({"module": ERDMA_MODULE, "loaded": false, "version": null, "initstate": null}),
        );
    };
    let details = json!({"module": ERDMA_MODULE, "loaded": true, "version": m.version, "initstate": m.initstate});
    if let Some(state) = m.initstate.as_deref().filter(|s| *s != "live") {
        return Check::fail("driver", format!("the erdma kernel driver is `{state}`, not live"), "wait for it to finish loading or unloading, then reload it: `modprobe -r erdma && modprobe erdma`", details);
    }
    match &m.version {
        Some(v) => Check::ok("driver", format!("erdma driver {v} loaded"), details),
        None => Check::ok("driver", "erdma driver loaded (it reports no version)", details),
    }
}

fn device_checks(config: &Config, opts: &Options, host: &Host, checks: &mut Vec<Check>) {
    let others: Vec<Value> =
        host.others.iter().map(|d| json!({"name": d.name, "driver": d.driver})).collect();
    let others_note = if host.others.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = host
            .others
            .iter()
            .map(|d| format!("{} ({})", d.name, d.driver.as_deref().unwrap_or("unknown driver")))
            .collect();
        format!("; not eRDMA, left alone: {}", list.join(", "))
    };
    let names: Vec<&str> = host.devices.iter().map(|d| d.name.as_str()).collect();
    let details = json!({"drivers": config.drivers, "devices": names, "others": others});
    if host.devices.is_empty() {
        checks.push(Check::fail(
            "devices",
            format!("no eRDMA device (driver {}) under {}{others_note}", config.drivers.join(", "), config.sysfs_root.join("class/infiniband").display()),
            "attach an Elastic RDMA Interface (an ENI with RDMA enabled) to the instance and load the erdma driver",
            details,
        ));
        return;
    }
    checks.push(Check::ok(
        "devices",
        format!("{}: {}{others_note}", plural(names.len(), "eRDMA device"), names.join(", ")),
        details,
    ));
    for d in &host.devices {
        port_checks(d, checks);
        checks.push(uverbs_check(d));
    }
    checks.push(match &host.rdma_cm {
        Some(cm) => Check::ok("rdma_cm", format!("{} ({}:{})", cm.path, cm.major, cm.minor), json!({"path": cm.path, "host_path": cm.host_path, "major": cm.major, "minor": cm.minor})),
        None => Check::fail(
            "rdma_cm",
            "no usable /dev/infiniband/rdma_cm: every eRDMA container needs it",
            "load the rdma_ucm module (`modprobe rdma_ucm`) and check that udev created the node",
            json!({"path": "/dev/infiniband/rdma_cm", "host_path": config.dev_root.join("infiniband/rdma_cm")}),
        ),
    });
    checks.push(netns_check(config, host));
    checks.push(mtu_check(config, opts, host));
    checks.push(nccl_check(config, host));
}

/// The kernel's RDMA namespace mode (`rdma system show netns`), read from `ib_core`'s
/// parameter, and what it means with the configured `network` policy.
fn netns_check(config: &Config, host: &Host) -> Check {
    use crate::config::NetworkPolicy;
    use crate::netns::RdmaNetns;
    let param = config.sysfs_root.join(crate::netns::NETNS_MODE_PARAM);
    let details = json!({"mode": host.rdma_netns, "source": param, "network": config.network});
    match (host.rdma_netns, config.network) {
        (RdmaNetns::Shared, NetworkPolicy::Any) => Check::ok(
            "rdma-netns",
            "RDMA namespace mode shared: containers on their own network use the devices too (NCCL_SOCKET_IFNAME from their namespace); rdma_cm-based programs need host networking",
            details,
        ),
        (RdmaNetns::Shared, NetworkPolicy::Require) => Check::ok(
            "rdma-netns",
            "RDMA namespace mode shared; the config requires host networking (network = \"require\"), so containers on their own network are refused",
            details,
        ),
        (RdmaNetns::Exclusive, _) => Check::warn(
            "rdma-netns",
            "RDMA namespace mode exclusive: the devices belong to the host's network namespace, so only containers on the host network can use them; others are refused",
            "`rdma system set netns shared` (or ib_core's netns_mode=1 at boot) lets containers on their own network use eRDMA",
            details,
        ),
        (RdmaNetns::Unknown, _) => Check::warn(
            "rdma-netns",
            format!("RDMA namespace mode unknown: {} cannot be read (is ib_core loaded?)", param.display()),
            "`rdma system show netns` tells it; `modprobe ib_core` if the RDMA core is not loaded",
            details,
        ),
    }
}

/// The NCCL settings a container given every device gets here (`nccl.rs`; `erdma-oci-hook env`
/// prints them for jobs without an engine). A warning when some cannot be derived.
fn nccl_check(config: &Config, host: &Host) -> Check {
    let usable: Vec<&RdmaDevice> = host.devices.iter().filter(|d| d.uverbs.is_some()).collect();
    let d = crate::nccl::derive_for_any_gpus(host, &usable, &crate::netns::Net::Host, config);
    let set: Vec<String> = d.vars.iter().map(|v| format!("{}={}", v.name, v.value)).collect();
    let details = json!({"vars": d.vars, "notes": d.notes});
    let shown = if set.is_empty() { "nothing can be derived".to_string() } else { set.join(" ") };
    if d.get("NCCL_IB_HCA").is_none()
        || d.notes.iter().any(|n| n.contains("differ") || n.contains("no netdev"))
    {
        return Check::warn("nccl-env", format!("derived for all devices: {shown}; {}", d.notes.join("; ")), "jobs without erdma-runtime or the hooks: `erdma-oci-hook env --devices NAME` prints the settings for the devices a job uses", details);
    }
    Check::ok("nccl-env", format!("derived for all devices: {shown}"), details)
}

fn port_checks(d: &RdmaDevice, checks: &mut Vec<Check>) {
    if d.ports.is_empty() {
        checks.push(Check::fail(
            format!("port.{}", d.name),
            format!("{} has no ports in sysfs", d.name),
            format!("reload the erdma driver (`modprobe -r erdma && modprobe erdma`) and check `ibv_devinfo -d {}`", d.name),
            json!({"device": d.name}),
        ));
    }
    for p in &d.ports {
        let id = format!("port.{}.{}", d.name, p.num);
        let details = json!({"device": d.name, "port": p.num, "state": p.state, "state_name": p.state_name, "link_layer": p.link_layer, "netdev": p.netdev});
        let netdev = p.netdev.as_deref().unwrap_or("its netdev");
        if p.state == PORT_ACTIVE {
            let via = p.netdev.as_deref().map(|n| format!(", netdev {n}")).unwrap_or_default();
            checks.push(Check::ok(
                id,
                format!("{} port {}: PORT_ACTIVE{via}", d.name, p.num),
                details,
            ));
        } else {
            let state = if p.state_name.is_empty() {
                format!("state {}", p.state)
            } else {
                format!("PORT_{} ({})", p.state_name, p.state)
            };
            checks.push(Check::fail(
                id,
                format!("{} port {}: {state}, not PORT_ACTIVE", d.name, p.num),
                format!("the secondary ENI behind {} ({netdev}) is not set up: attach it and bring {netdev} up, then check `ibv_devinfo -d {}` and `eadm ver`", d.name, d.name),
                details,
            ));
        }
    }
}

fn uverbs_check(d: &RdmaDevice) -> Check {
    let id = format!("uverbs.{}", d.name);
    match &d.uverbs {
        Some(u) => Check::ok(
            id,
            format!("{}: {} ({}:{})", d.name, u.path, u.major, u.minor),
            json!({"device": d.name, "path": u.path, "host_path": u.host_path, "major": u.major, "minor": u.minor, "problem": null}),
        ),
        None => {
            let problem = d.problem.as_deref().unwrap_or("no uverbs node");
            Check::fail(
                id,
                format!("{} has no usable uverbs node: {problem}", d.name),
                "udev makes /dev/infiniband/uverbsN when the driver binds: check `ls -l /dev/infiniband` and rdma-core's udev rules, or reload the erdma driver",
                json!({"device": d.name, "path": null, "host_path": null, "major": null, "minor": null, "problem": problem}),
            )
        }
    }
}

/// The MTU of the netdevs behind the eRDMA ports, judged by the rule the spec edits use
/// (`modify::mtu_expected`, `modify::ll128_off`; the ECS eRDMA-on-GPU guide).
fn mtu_check(config: &Config, opts: &Options, host: &Host) -> Check {
    let ports: Vec<_> =
        host.devices.iter().flat_map(|d| d.ports.iter().map(move |p| (d, p))).collect();
    let netdevs: Vec<Value> = ports
        .iter()
        .map(|(d, p)| json!({"device": d.name, "port": p.num, "netdev": p.netdev, "mtu": p.mtu}))
        .collect();
    let mtus: Vec<u32> = ports.iter().filter_map(|(_, p)| p.mtu).collect();
    let unknown: Vec<String> = ports
        .iter()
        .filter(|(_, p)| p.mtu.is_none())
        .map(|(d, p)| format!("{} port {}", d.name, p.num))
        .collect();
    // "MTU 8500 on eth0, eth1; 1400 on eth2": each netdev once, MTUs in device order.
    let mut groups: Vec<(u32, Vec<String>)> = Vec::new();
    for (d, p) in &ports {
        let Some(mtu) = p.mtu else { continue };
        let name = p.netdev.clone().unwrap_or_else(|| format!("{} port {}", d.name, p.num));
        match groups.iter_mut().find(|(m, _)| *m == mtu) {
            Some((_, names)) if names.contains(&name) => {}
            Some((_, names)) => names.push(name),
            None => groups.push((mtu, vec![name])),
        }
    }
    groups.iter_mut().for_each(|(_, names)| names.sort());
    let seen = groups
        .iter()
        .map(|(m, names)| format!("{m} on {}", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let (proto, no_ll128) = NO_LL128;
    let off = ll128_off(&mtus);
    let ll128 = if mtus.is_empty() {
        "unknown"
    } else if off {
        "off"
    } else {
        "safe"
    };
    let env: Vec<String> = if off { vec![format!("{proto}={no_ll128}")] } else { Vec::new() };
    let details = json!({"netdevs": netdevs, "ll128": ll128, "env": env});

    let bad: Vec<String> = groups
        .iter()
        .filter(|(m, _)| !mtu_expected(*m))
        .flat_map(|(_, names)| names.iter().cloned())
        .collect();
    if !bad.is_empty() {
        return Check::fail(
            "mtu",
            format!("MTU {seen}: eRDMA expects {MTU_JUMBO} (jumbo frames) or {MTU_STANDARD}; another MTU risks data corruption (the ECS eRDMA-on-GPU guide)"),
            format!("set the MTU of {} to {MTU_JUMBO} or {MTU_STANDARD}, the same on every node (`ip link set {} mtu {MTU_JUMBO}`)", bad.join(", "), bad[0]),
            details,
        );
    }
    if mtus.is_empty() {
        return Check::warn("mtu", "no eRDMA port has a netdev with an MTU in sysfs: cannot tell whether NCCL's LL128 protocol is safe", "check the eRDMA interfaces with `ip link` and `ibv_devinfo`", details);
    }
    let unknown_note = if unknown.is_empty() {
        String::new()
    } else {
        format!(" ({} without a netdev MTU)", unknown.join(", "))
    };
    if !unknown.is_empty() {
        return Check::warn(
            "mtu",
            format!("MTU {seen}{unknown_note}"),
            "check the eRDMA interfaces with `ip link` and `ibv_devinfo`",
            details,
        );
    }
    if groups.len() > 1 {
        return Check::warn(
            "mtu",
            format!("MTU {seen}: the ERIs' MTUs differ, so a container given all of them runs without NCCL's LL128 protocol ({proto}={no_ll128}) and every node must match each ERI's MTU"),
            format!("set one MTU on every ERI, {MTU_JUMBO} with jumbo frames (`ip link set {} mtu {MTU_JUMBO}`)", groups.iter().find(|(m, _)| *m != MTU_JUMBO).map(|(_, n)| n[0].as_str()).unwrap_or("IF")),
            details,
        );
    }
    if !off {
        return Check::ok(
            "mtu",
            format!("MTU {seen}: jumbo frames, NCCL's LL128 protocol is safe"),
            details,
        );
    }
    if config.env_presets {
        Check::ok("mtu", format!("MTU {seen}: without jumbo frames NCCL's LL128 protocol must be off; erdma-runtime, the hooks and the CDI spec add {proto}={no_ll128}"), details)
    } else {
        Check::warn(
            "mtu",
            format!("MTU {seen}: NCCL's LL128 protocol must be off, and with env_presets = false nothing adds {proto}={no_ll128}"),
            format!("set {proto}={no_ll128} in every job, or env_presets = true in {}", opts.config_path.display()),
            details,
        )
    }
}

/// What the dma-buf path to GPU memory has on this host: a kernel of 5.12 or later (dma-buf
/// memory regions in the RDMA core) and NVIDIA's open kernel module (`/proc/driver/nvidia/version`
/// says "Open Kernel Module"). NCCL then still probes the RDMA provider (`ibv_reg_dmabuf_mr`),
/// and upstream rdma-core's erdma provider does not implement it (`providers/erdma/erdma.c`).
fn dmabuf_host(config: &Config) -> (Option<String>, bool) {
    let kernel = crate::sysfs::read_trim(&config.proc_root.join("sys/kernel/osrelease"));
    let recent = kernel.as_deref().is_some_and(|k| {
        let mut it = k.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u32>().ok());
        (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (5, 12)
    });
    let open = std::fs::read_to_string(config.proc_root.join("driver/nvidia/version"))
        .is_ok_and(|v| v.contains("Open Kernel Module"));
    (kernel, recent && open)
}

/// Whether NCCL will use GPU Direct RDMA for this host's GPU/ERI pairs, and why: NCCL's own
/// rules (`paths.cc`, `ncclTopoCheckGdr`: a NIC that can register GPU memory, and a path no
/// farther than `NCCL_NET_GDR_LEVEL`, `PXB` by default), with what erdma-kit sets for asking
/// containers.
fn gdr_check(config: &Config, host: Option<&Host>) -> Check {
    let id = "gpu-direct-rdma";
    let usable: Vec<&RdmaDevice> =
        host.map(|h| h.devices.iter().filter(|d| d.uverbs.is_some()).collect()).unwrap_or_default();
    let t = crate::topology::of_host(config, &usable);
    let peermem = module(&config.sysfs_root, PEERMEM_MODULE);
    // The topology probed it where it found GPUs; without GPUs the report still says.
    let gdr = t
        .gdr
        .clone()
        .unwrap_or_else(|| crate::topology::gdr(&config.sysfs_root, &config.proc_root));
    let (kernel, dmabuf) = dmabuf_host(config);
    let mut details = json!({
        "gpus": t.gpus.len(), "pairs": t.pairs, "possible": gdr.possible, "why": gdr.why,
        "module": PEERMEM_MODULE, "loaded": peermem.is_some(), "version": peermem.as_ref().and_then(|m| m.version.clone()),
        "kernel": kernel, "dmabuf_host": dmabuf,
    });
    if t.gpus.is_empty() {
        return Check::ok(id, format!("no NVIDIA GPU (nothing bound to the nvidia driver under {}): GPU Direct RDMA does not apply", config.sysfs_root.join("bus/pci/drivers/nvidia").display()), details);
    }
    if !gdr.possible {
        let dmabuf_note = if dmabuf {
            "; the kernel and NVIDIA's open kernel module would allow dma-buf, but upstream rdma-core's erdma provider cannot register it (no ibv_reg_dmabuf_mr), so NCCL's probe fails unless the image's provider can"
        } else {
            ""
        };
        return Check::warn(
            id,
            format!("NCCL will not use GPU Direct RDMA: {}{dmabuf_note}; RDMA itself works", gdr.why),
            "`modprobe nvidia_peermem` (NVIDIA driver 470 or later), and again after every reboot (list it in /etc/modules-load.d)",
            details,
        );
    }
    let names: Vec<&str> = t.eris.iter().map(|(n, _)| n.as_str()).collect();
    let all: Vec<usize> = t.gpus.iter().map(|g| g.index).collect();
    let Some(level) = t.gdr_level_needed(&all, &names) else {
        return Check::warn(id, format!("{}, but no eRDMA device could be placed on the PCIe tree: NCCL's choice cannot be told", gdr.why), "check `ls -l /sys/class/infiniband/*/device`", details);
    };
    details["level"] = json!(level.name());
    let far: Vec<String> = t
        .pairs
        .iter()
        .filter(|p| p.path > crate::topology::GDR_DEFAULT_LEVEL)
        .map(|p| format!("GPU {} {} from {}", p.gpu, p.path.name(), p.eris.join(", ")))
        .collect();
    let default = crate::topology::GDR_DEFAULT_LEVEL.name();
    if far.is_empty() {
        return Check::ok(id, format!("NCCL will use GPU Direct RDMA for every GPU: {}; each GPU is at most {} from its ERI, within NCCL's default {default}", gdr.why, level.name()), details);
    }
    let shown = if far.len() > 2 {
        format!("{} and {} more", far[..2].join(", "), far.len() - 2)
    } else {
        far.join(", ")
    };
    if config.env_presets {
        Check::ok(id, format!("NCCL alone would not use GPU Direct RDMA here ({shown}: beyond its default {default}); containers that ask get NCCL_NET_GDR_LEVEL={}, with which it will: {}", level.name(), gdr.why), details)
    } else {
        Check::warn(id, format!("NCCL will not use GPU Direct RDMA ({shown}: beyond its default {default}), and with env_presets = false nothing sets NCCL_NET_GDR_LEVEL"), format!("set NCCL_NET_GDR_LEVEL={} in every job, or env_presets = true in the hook config", level.name()), details)
    }
}

/// `erdma-oci-hook configure ENGINE`, with `--config` when `path` is not the default.
fn configure_command(engine: Engine, path: &Path) -> String {
    if path == engine.default_config_path() {
        format!("erdma-oci-hook configure {}", engine.arg())
    } else {
        format!("erdma-oci-hook configure {} --config {}", engine.arg(), path.display())
    }
}

/// Whether `program` exists: a path, or a name looked up on PATH (Docker allows one).
fn program_exists(program: &Path) -> bool {
    if program.components().count() > 1 {
        return program.is_file();
    }
    std::env::var_os("PATH").is_some_and(|path| engine::detect::which(&path, program).is_some())
}

fn engine_checks(engine: Engine, config: &Config, opts: &Options, checks: &mut Vec<Check>) {
    let path = opts.engine_config(engine);
    let id = format!("engine.{}", engine.arg());
    let name = engine.display_name();
    let configure = configure_command(engine, path);
    let reg = match engine::inspect(engine, path) {
        Ok(r) => r,
        Err(e) => {
            // With its causes: the parser's line and column of a malformed file.
            let error = erdma_common::errors::chain(&e);
            checks.push(Check::fail(
                id,
                format!("{name}: {error}"),
                format!("fix the file, then run `{configure}`"),
                json!({"engine": engine, "config_path": path, "error": error}),
            ));
            return;
        }
    };
    let mut details = serde_json::to_value(&reg).expect("a Registration serialises");
    // Installed is what is there (programs, socket), not whether a config file exists: a fresh
    // Docker has no daemon.json and still runs containers, none of which gets eRDMA.
    let found = engine::detect::detect(engine, &opts.probe);
    details["found"] = serde_json::to_value(&found).expect("serialises");
    let (fits, fits_note) = path_that_fits(engine, found.as_ref());
    details["recommended"] = json!(fits);
    if !reg.installed && found.is_none() {
        checks.push(Check::ok(
            id,
            format!(
                "{name}: not installed (no {} on PATH, no socket, no {})",
                engine.programs().join(" or "),
                path.display()
            ),
            details,
        ));
        return;
    }
    let seen = match &found {
        Some(f) => format!("{name} {}", f.version.as_deref().unwrap_or("(version unknown)")),
        None => name.to_string(),
    };
    let check = match &reg.entry {
        None => {
            let what = match (engine, reg.installed) {
                (_, false) => format!(
                    "installed, but {} does not exist, so nothing gives its containers eRDMA",
                    path.display()
                ),
                (Engine::Podman, true) => {
                    format!("{} has no erdma-oci-hook precreate hook", path.display())
                }
                (_, true) => format!("{} does not register erdma-runtime", path.display()),
            };
            Check::warn(
                id,
                format!("{seen}: {what}; {fits_note}"),
                format!("run `{configure}` to give its containers eRDMA"),
                details,
            )
        }
        Some(entry) => {
            let what = match engine {
                Engine::Docker => format!("runtime `{}` in {}", entry.name, entry.file.display()),
                Engine::Containerd | Engine::Crio => {
                    format!("runtime handler `{}` in {}", entry.name, entry.file.display())
                }
                Engine::Podman => format!("precreate hook {}", entry.file.display()),
            };
            let exists = entry.program.as_deref().is_some_and(program_exists);
            details["entry"]["program_exists"] = json!(exists);
            match &entry.program {
                // Registered and working: the CDI note only when the version says something.
                Some(p) if exists => {
                    let note = if found.as_ref().is_some_and(|f| f.version.is_some()) {
                        format!("; {fits_note}")
                    } else {
                        String::new()
                    };
                    Check::ok(id, format!("{seen}: {what} runs {}{note}", p.display()), details)
                }
                Some(p) => Check::fail(
                    id,
                    format!("{name}: {what} runs {}, which does not exist", p.display()),
                    format!("install it there, or run `{configure}` again"),
                    details,
                ),
                None => Check::fail(
                    id,
                    format!("{name}: {what} names no program"),
                    format!("run `{configure}` again"),
                    details,
                ),
            }
        }
    };
    checks.push(check);
    checks.push(memlock_check(engine, config, opts, &reg));
}

/// Which eRDMA path fits an engine of this version: CDI where the engine has it (`cdi`), else
/// the runtime wrapper (`runtime`; the precreate hook for Podman), and a note saying why.
fn path_that_fits(engine: Engine, found: Option<&engine::detect::Found>) -> (&'static str, String) {
    let (major, minor) = engine.cdi_since();
    let fallback = if engine == Engine::Podman { "hooks" } else { "runtime" };
    let fallback_how =
        if engine == Engine::Podman { "the precreate hook" } else { "erdma-runtime" };
    match found.map(|f| (f, engine::detect::has_cdi(f))) {
        Some((f, Some(true))) => ("cdi", format!("{} {} has CDI ({major}.{minor}+): `--device {}=all` with `erdma-oci-hook cdi generate`, or {fallback_how}", engine.display_name(), f.version.as_deref().unwrap_or(""), cdi::KIND)),
        Some((f, Some(false))) => (fallback, format!("{} {} has no CDI (it came in {major}.{minor}): use {fallback_how}", engine.display_name(), f.version.as_deref().unwrap_or(""))),
        _ => (fallback, format!("its version is unknown: {fallback_how} works on every version")),
    }
}

/// `4 MiB`, `64 KiB`, `1000 bytes`.
fn bytes(n: u64) -> String {
    match n {
        n if n > 0 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n > 0 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

fn memlock_value(m: Memlock) -> Value {
    serde_json::to_value(m).expect("a Memlock serialises")
}

fn memlock_check(engine: Engine, config: &Config, opts: &Options, reg: &Registration) -> Check {
    let id = format!("memlock.{}", engine.arg());
    let name = engine.display_name();
    let configure = configure_command(engine, &reg.config_path);
    if reg.entry.is_some() {
        let by = if engine == Engine::Podman { "the precreate hook" } else { "erdma-runtime" };
        let details =
            json!({"engine": engine, "source": "erdma", "memlock": memlock_value(config.memlock)});
        return match config.memlock {
            Memlock::Unlimited => Check::ok(id, format!("{name}: containers that ask for eRDMA get memlock unlimited (set by {by})"), details),
            Memlock::Bytes(n) => Check::warn(
                id,
                format!("{name}: containers that ask for eRDMA get memlock {} (`memlock` in {})", bytes(n), opts.config_path.display()),
                format!("set memlock = \"unlimited\" in {}: verbs pin memory, and with too little ibv_reg_mr fails and NCCL falls back to TCP", opts.config_path.display()),
                details,
            ),
        };
    }
    let hint = match engine {
        Engine::Docker | Engine::Podman => {
            format!("run `{configure}`, or start containers with `--ulimit memlock=-1`")
        }
        Engine::Containerd | Engine::Crio => format!(
            "run `{configure}`: Kubernetes pods cannot raise their memlock limit themselves"
        ),
    };
    match reg.default_memlock {
        Some(m) => {
            let details = json!({"engine": engine, "source": "default-ulimits", "memlock": memlock_value(m)});
            let from = format!("from default-ulimits in {}", reg.config_path.display());
            match m {
                Memlock::Unlimited => Check::ok(id, format!("{name}: containers get memlock unlimited {from}"), details),
                Memlock::Bytes(n) => Check::warn(id, format!("{name}: containers get memlock {} {from}, not raised for eRDMA", bytes(n)), hint, details),
            }
        }
        None => Check::warn(
            id,
            format!(
                "{name}: containers get the engine's default memlock, not raised for eRDMA ({}'s own limit: 8 MiB on kernels 5.16+, 64 KiB before)",
                if engine == Engine::Podman { "podman" } else { "the daemon" }
            ),
            hint,
            json!({"engine": engine, "source": "engine-default", "memlock": null}),
        ),
    }
}

/// A spec file of our kind in a CDI directory: parsed, or `None` when it is not JSON (a YAML
/// spec someone else wrote; this crate writes JSON).
type FoundSpec = (PathBuf, Option<Value>);

fn find_specs(dirs: &[PathBuf]) -> Result<Vec<FoundSpec>, String> {
    let mut found = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("reading {}: {e}", dir.display())),
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json" || x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.get("kind").and_then(Value::as_str) == Some(cdi::KIND) => {
                    found.push((path, Some(v)))
                }
                Ok(_) => {}
                Err(_)
                    if text
                        .lines()
                        .any(|l| l.trim_start().starts_with("kind:") && l.contains(cdi::KIND)) =>
                {
                    found.push((path, None))
                }
                Err(_) => {}
            }
        }
    }
    Ok(found)
}

fn device_names(spec: &Value) -> Vec<String> {
    spec.get("devices")
        .and_then(Value::as_array)
        .map(|d| {
            d.iter()
                .filter_map(|d| d.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn env_of(spec: &Value) -> Vec<String> {
    spec.pointer("/containerEdits/env")
        .and_then(Value::as_array)
        .map(|e| e.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// How a spec on disk differs from the one `cdi generate` would write now, in a few words.
fn difference(found: &Value, want: &Value) -> String {
    let minus = |a: &[String], b: &[String]| {
        a.iter().filter(|x| !b.contains(x)).cloned().collect::<Vec<_>>()
    };
    let (f, w) = (device_names(found), device_names(want));
    let mut parts = Vec::new();
    let gone = minus(&f, &w);
    if !gone.is_empty() {
        parts.push(format!("it has devices this host no longer has ({})", gone.join(", ")));
    }
    let new = minus(&w, &f);
    if !new.is_empty() {
        parts.push(format!("it lacks devices this host has ({})", new.join(", ")));
    }
    let (fe, we) = (env_of(found), env_of(want));
    let missing = minus(&we, &fe);
    if !missing.is_empty() {
        parts.push(format!("its env lacks {}", missing.join(" ")));
    }
    let extra = minus(&fe, &we);
    if !extra.is_empty() {
        parts.push(format!("its env has {}, no longer wanted", extra.join(" ")));
    }
    if parts.is_empty() {
        parts.push(match (found.get("cdiVersion"), want.get("cdiVersion")) {
            (a, b) if a != b => format!(
                "cdiVersion {} instead of {}",
                a.unwrap_or(&Value::Null),
                b.unwrap_or(&Value::Null)
            ),
            _ => "its device nodes or edits differ from what `cdi generate` writes now".to_string(),
        });
    }
    parts.join("; ")
}

fn cdi_check(config: &Config, host: Option<&Host>, opts: &Options) -> Check {
    let dirs: Vec<String> = opts.cdi_dirs.iter().map(|d| d.display().to_string()).collect();
    let suggested = opts
        .cdi_dirs
        .first()
        .map(PathBuf::as_path)
        .unwrap_or(Path::new(cdi::SPEC_DIRS[0]))
        .join(cdi::SPEC_FILE);
    let generate = |path: &Path| format!("erdma-oci-hook cdi generate --output {}", path.display());
    let found = match find_specs(&opts.cdi_dirs) {
        Ok(f) => f,
        Err(e) => {
            return Check::fail(
                "cdi",
                format!("cannot read the CDI specs: {e}"),
                "check the permissions of the CDI directories",
                json!({"dirs": dirs, "error": e}),
            )
        }
    };
    // What `cdi generate` would write now; an error when the host has nothing to describe.
    let want = match host {
        Some(h) => cdi::spec_for(h, config).map_err(|e| e.to_string()),
        None => Err("the RDMA devices could not be listed".to_string()),
    };
    let specs: Vec<Value> = found
        .iter()
        .map(|(path, spec)| {
            let state = match (spec, &want) {
                (None, _) => "not-json",
                (Some(s), Ok(w)) if s == w => "current",
                _ => "stale",
            };
            json!({"path": path, "state": state})
        })
        .collect();
    let details = json!({"kind": cdi::KIND, "dirs": dirs, "specs": specs});
    if found.is_empty() {
        let message = format!(
            "no CDI spec for {} in {} (optional: erdma-runtime and the hooks do not need one)",
            cdi::KIND,
            dirs.join(", ")
        );
        return match want {
            Ok(_) => Check::warn(
                "cdi",
                message,
                format!(
                    "for `--device {}=all` in CDI-aware engines: `{}`",
                    cdi::KIND,
                    generate(&suggested)
                ),
                details,
            ),
            Err(_) => Check::warn(
                "cdi",
                message,
                format!("once the device checks pass: `{}`", generate(&suggested)),
                details,
            ),
        };
    }
    for (path, spec) in &found {
        let Some(spec) = spec else { continue };
        match &want {
            Ok(w) if spec == w => {}
            Ok(w) => {
                return Check::fail(
                    "cdi",
                    format!("CDI spec {} is stale: {}", path.display(), difference(spec, w)),
                    format!("regenerate it: `{}`", generate(path)),
                    details,
                )
            }
            Err(e) => {
                return Check::fail(
                    "cdi",
                    format!(
                        "CDI spec {} describes eRDMA devices, but none can be described now: {e}",
                        path.display()
                    ),
                    format!("fix the device checks, then `{}`, or remove it", generate(path)),
                    details,
                )
            }
        }
    }
    if let Some((path, _)) = found.iter().find(|(_, spec)| spec.is_none()) {
        return Check::warn(
            "cdi",
            format!("CDI spec {} for {} was not written by `cdi generate` (not JSON): cannot tell whether it is current", path.display(), cdi::KIND),
            format!("replace it with `{}`", generate(&path.with_extension("json"))),
            details,
        );
    }
    if found.len() > 1 {
        let paths: Vec<String> = found.iter().map(|(p, _)| p.display().to_string()).collect();
        return Check::warn(
            "cdi",
            format!("{} is defined by {} CDI specs ({}): devices defined twice conflict in one directory, or the later directory's win", cdi::KIND, found.len(), paths.join(", ")),
            "keep one of them",
            details,
        );
    }
    let (path, spec) = &found[0];
    let names = spec.as_ref().map(device_names).unwrap_or_default();
    Check::ok(
        "cdi",
        format!("CDI spec {} is current ({}={})", path.display(), cdi::KIND, names.join(",")),
        details,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_exit_rule() {
        let r = Report::new(vec![
            Check::ok("a", "fine", json!({})),
            Check::warn("b", "meh", "do x", json!({})),
        ]);
        assert!(r.ready, "warnings do not fail");
        assert_eq!(r.summary, Summary { ok: 1, warn: 1, fail: 0 });
        assert_eq!(r.render(), "[ ok ] fine\n[warn] meh\n       hint: do x\nready for eRDMA containers: 1 ok, 1 warning\n");
        let r = Report::new(vec![Check::fail("c", "broken", "fix it", json!({}))]);
        assert!(!r.ready);
        assert!(
            r.render().ends_with("not ready for eRDMA containers: 1 failed, 0 warnings, 0 ok\n"),
            "{}",
            r.render()
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(
            j["checks"][0],
            json!({"id": "c", "status": "fail", "message": "broken", "hint": "fix it", "details": {}})
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(4 << 20), "4 MiB");
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes(1000), "1000 bytes");
        assert_eq!(bytes(0), "0 bytes");
    }

    #[test]
    fn configure_hint_names_the_path_only_when_not_the_default() {
        assert_eq!(
            configure_command(Engine::Docker, Path::new("/etc/docker/daemon.json")),
            "erdma-oci-hook configure docker"
        );
        assert_eq!(
            configure_command(Engine::Podman, Path::new("/tmp/hooks.d")),
            "erdma-oci-hook configure podman --config /tmp/hooks.d"
        );
    }

    #[test]
    fn stale_spec_reasons() {
        let spec = |devs: &[&str], env: &[&str]| json!({"cdiVersion": "0.5.0", "kind": cdi::KIND, "devices": devs.iter().map(|d| json!({"name": d})).collect::<Vec<_>>(), "containerEdits": {"env": env}});
        let want = spec(&["erdma_0", "all"], &["NCCL_IB_HCA=erdma_0", "NCCL_PROTO=^LL128"]);
        let found = spec(&["erdma_0", "erdma_1", "all"], &["NCCL_IB_HCA=erdma_0,erdma_1"]);
        assert_eq!(
            difference(&found, &want),
            "it has devices this host no longer has (erdma_1); its env lacks NCCL_IB_HCA=erdma_0 NCCL_PROTO=^LL128; its env has NCCL_IB_HCA=erdma_0,erdma_1, no longer wanted"
        );
        let mut old = want.clone();
        old["cdiVersion"] = json!("0.3.0");
        assert_eq!(difference(&old, &want), "cdiVersion \"0.3.0\" instead of \"0.5.0\"");
        let mut nodes = want.clone();
        nodes["containerEdits"]["deviceNodes"] = json!([]);
        assert!(difference(&nodes, &want).contains("device nodes"));
    }

    fn host(ports: &[(&str, Option<&str>, Option<u32>)]) -> Host {
        use crate::discover::Port;
        let devices = ports
            .iter()
            .map(|(name, netdev, mtu)| RdmaDevice {
                name: name.to_string(),
                driver: Some("erdma".into()),
                ports: vec![Port {
                    num: 1,
                    state: 4,
                    state_name: "ACTIVE".into(),
                    link_layer: Some("Ethernet".into()),
                    netdev: netdev.map(str::to_string),
                    mtu: *mtu,
                    roce_v2_ipv4_gid: None,
                    roce_v2_ipv4: None,
                }],
                uverbs: None,
                problem: None,
            })
            .collect();
        Host {
            devices,
            others: vec![],
            rdma_cm: None,
            netdevs: vec![],
            rdma_netns: Default::default(),
        }
    }

    #[test]
    fn mtu_rule_is_the_spec_edits_rule() {
        let (config, opts) = (Config::default(), Options::default());
        // Mixed 8500 and 1400: each valid, but they differ: LL128 off, as `modify::apply` does,
        // and a warning naming the one to change.
        let c = mtu_check(
            &config,
            &opts,
            &host(&[("erdma_0", Some("eth0"), Some(8500)), ("erdma_1", Some("eth1"), Some(1400))]),
        );
        assert_eq!((c.status, c.details["ll128"].as_str()), (Status::Warn, Some("off")));
        assert!(
            c.message.starts_with("MTU 8500 on eth0; 1400 on eth1: the ERIs' MTUs differ"),
            "{}",
            c.message
        );
        assert!(c.hint.as_deref().unwrap().contains("ip link set eth1 mtu 8500"), "{:?}", c.hint);
        // Two ports on one netdev name it once.
        let c = mtu_check(
            &config,
            &opts,
            &host(&[("erdma_0", Some("eth0"), Some(8500)), ("erdma_1", Some("eth0"), Some(8500))]),
        );
        assert_eq!(c.message, "MTU 8500 on eth0: jumbo frames, NCCL's LL128 protocol is safe");
        // A port whose MTU is unknown cannot be judged.
        let c = mtu_check(
            &config,
            &opts,
            &host(&[("erdma_0", Some("eth0"), Some(8500)), ("erdma_1", None, None)]),
        );
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("erdma_1 port 1 without a netdev MTU"), "{}", c.message);
        let c = mtu_check(&config, &opts, &host(&[("erdma_0", None, None)]));
        assert_eq!((c.status, c.details["ll128"].as_str()), (Status::Warn, Some("unknown")));
        // 1500 is neither: a failure, even beside a valid one.
        let c = mtu_check(
            &config,
            &opts,
            &host(&[("erdma_0", Some("eth0"), Some(1500)), ("erdma_1", Some("eth1"), Some(8500))]),
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.hint.as_deref().unwrap().starts_with("set the MTU of eth0 to 8500 or 1400"));
    }

    #[test]
    fn missing_sysfs_is_a_report_not_an_error() {
        let config = Config {
            sysfs_root: "/nonexistent/sys".into(),
            dev_root: "/nonexistent/dev".into(),
            ..Config::default()
        };
        let nowhere = PathBuf::from("/nonexistent/etc");
        let opts = Options {
            config_path: nowhere.join("oci-hook.toml"),
            docker_config: nowhere.join("daemon.json"),
            containerd_config: nowhere.join("config.toml"),
            crio_config: nowhere.join("crio.conf"),
            podman_hooks_dir: nowhere.join("hooks.d"),
            cdi_dirs: vec![nowhere.join("cdi")],
            probe: engine::detect::Probe {
                path: std::ffi::OsString::new(),
                root: nowhere.clone(),
                timeout: std::time::Duration::from_secs(1),
            },
            trial: None,
        };
        let r = run(&config, &opts);
        let status = |id: &str| r.checks.iter().find(|c| c.id == id).map(|c| c.status);
        assert_eq!(status("driver"), Some(Status::Fail));
        assert_eq!(status("devices"), Some(Status::Fail));
        assert_eq!(status("gpu-direct-rdma"), Some(Status::Ok), "no GPU: GDR does not apply");
        assert_eq!(status("engine.docker"), Some(Status::Ok), "not installed is not a failure");
        assert_eq!(
            status("memlock.docker"),
            None,
            "no memlock for an engine that is not installed"
        );
        assert_eq!(status("cdi"), Some(Status::Warn));
        assert!(!r.ready);
        assert!(
            r.checks.iter().all(|c| (c.status == Status::Ok) == c.hint.is_none()),
            "a hint exactly when not ok"
        );
    }
}
