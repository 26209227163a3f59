//! The `prestart`/`createRuntime` hook, for engines that can only run a hook (OCI runtime spec,
//! "POSIX-platform Hooks"). The runtime has already read `config.json`, so editing it would
//! change nothing: the hook acts on the container directly.
//!
//! Input: the container state on stdin (`ociVersion`, `id`, `status`, `pid`, `bundle`,
//! `annotations`). The spec is read from `bundle/config.json`, trusted as much as the engine
//! that wrote it; its `process.env` is the container's env and is only used to see whether the
//! container asks (see [`crate::request`]). Nothing inside the container root is read or run:
//! paths in it are only resolved, through `pathrs`.
//!
//! For a container that asks, in this order, and every check before any change:
//! 1. devices are discovered and selected ([`crate::modify::select`]); each host node is
//!    re-checked with `lstat` (character device, the major:minor sysfs gave);
//! 2. the network namespace of the init process is compared with the hook's own (the host's):
//!    a private one fails under policy `require`; under `any` the NCCL settings are judged for
//!    that namespace (`/proc/PID/ns/net`), and a host in exclusive RDMA namespace mode refuses;
//! 3. the memlock change is checked: raising a hard limit needs `CAP_SYS_RESOURCE`;
//! 4. the device cgroup is located (v1: `devices.allow` of the init process's cgroup; v2 is
//!    only reported, see [`CgroupOutcome::Unsupported`]);
//! 5. every node path in the container root is inspected: `dev` and `dev/infiniband` must be
//!    directories or absent (a symlink is refused, never followed: CVE-2024-0132), a node path
//!    must be absent or already the identical character device;
//! 6. then: nodes are created (mode 0666), cgroup rules added, `RLIMIT_MEMLOCK` set with
//!    `prlimit(2)` — last, because lowering a hard limit cannot be undone. A failure undoes
//!    what the earlier steps did.
//!
//! Where the nodes go: runc runs these hooks after it has mounted the container's filesystems
//! (its `/dev` tmpfs among them) in the container's mount namespace and before `pivot_root`
//! (runc `libcontainer/rootfs_linux.go` `prepareRootfs` → `syncParentHooks`). A node made
//! through the host's view of `root.path` would be hidden under that tmpfs, so when the init
//! process has its own mount namespace the root is reached through `/proc/PID/root`.
//!
//! Declared in a spec (or by an engine) as, for example,
//! `{"path": "/usr/bin/erdma-oci-hook", "args": ["erdma-oci-hook", "createRuntime"],
//! "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}`: runc gives a hook exactly the `env` its
//! declaration lists, and the state's `pid` is runc's init process, whose rlimits survive the
//! exec of the container's program.
//!
//! Limits of a hook, documented rather than papered over:
//! - runc applies the spec's `process.rlimits` *after* these hooks (`procReady` comes after
//!   `procHooks`): a `RLIMIT_MEMLOCK` already in the spec wins over the one set here (reported
//!   as a warning).
//! - cgroup v1: the rules are added to what runc set just before the hooks ("Setup cgroup
//!   before prestart hook, so that the prestart hook could apply cgroup permissions",
//!   `process_linux.go`); a later re-application of the spec's rules (`runc update`,
//!   `docker update`, a systemd reload with the systemd cgroup driver) drops them again.
//! - cgroup v2 enforces device access with an eBPF program the runtime attaches; a hook cannot
//!   extend it safely (replacing it would drop the runtime's rules, and the program is
//!   rebuilt from the spec on every update). On v2 use `erdma-runtime` or the `precreate` hook,
//!   which put the devices in the spec before the runtime builds that program.
//! - CVE-2025-23266: the hook runs with the environment its declaration gives it and must
//!   never inherit the container's. [`run`] refuses to go on when dynamic-loader variables are
//!   set, and nothing from the container is executed.
use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use erdma_common::cgroups;
use oci_spec::runtime::State;
use pathrs::flags::{OpenFlags, ResolverFlags};
use pathrs::{InodeType, Root};
use rustix::fs::FileType;
use serde::Serialize;
use serde_json::Value;

use crate::config::Config;
use crate::discover::{self, CharDev};
use crate::error::{Error, Result};
use crate::request::{self, Request};
use crate::{modify, spec};

/// Mode of the nodes made in the container, as `--device` gives them.
pub const NODE_MODE: u32 = 0o666;
/// Where the nodes live inside the container.
const NODE_DIR: &str = "/dev/infiniband";

/// Variables the dynamic loader acts on. A hook started with one of them set was declared
/// with (or inherited) an environment it must not have (CVE-2025-23266).
const LOADER_VARS: &[&str] = &["LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"];

/// What the hook did, for logs and tests.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub container_id: String,
    pub pid: i32,
    pub devices: Vec<String>,
    pub nodes: Vec<NodeOutcome>,
    pub cgroup: CgroupOutcome,
    pub memlock: MemlockOutcome,
    pub network: NetworkOutcome,
    /// NCCL settings derived for the devices (`nccl.rs`) that the container's env lacks: a hook
    /// running after the runtime read the spec cannot set them, so they are reported.
    pub env_needed: Vec<String>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeOutcome {
    pub path: String,
    pub major: u32,
    pub minor: u32,
    /// `false` when the identical node was already there.
    pub created: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CgroupOutcome {
    /// cgroup v1: the rules written to `devices.allow` (those not already allowed).
    V1 { cgroup: PathBuf, added: Vec<String> },
    /// No v1 devices controller for the container (cgroup v2): nothing could be added.
    Unsupported { reason: String },
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct MemlockOutcome {
    /// Soft and hard limits before, `u64::MAX` for unlimited.
    pub before: (u64, u64),
    /// The value set as both soft and hard limit.
    pub set: u64,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkOutcome {
    /// The container shares the host's (the hook's) network namespace.
    Host,
    /// Its own namespace, allowed by the `any` policy.
    Own,
}

/// The hook's entry point: refuses a loader-tainted environment, applies, logs the outcome.
pub fn run(config: &Config, state: &[u8]) -> Result<()> {
    check_environment(std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()))?;
    match apply(config, state)? {
        None => tracing::debug!("container did not ask for eRDMA: nothing to do"),
        Some(r) => {
            for w in &r.warnings {
                tracing::warn!(container = %r.container_id, "{w}");
            }
            tracing::info!(container = %r.container_id, pid = r.pid, devices = ?r.devices, nodes = ?r.nodes, cgroup = ?r.cgroup, memlock = ?r.memlock, network = ?r.network, "prestart applied");
        }
    }
    Ok(())
}

/// Fails when a dynamic-loader variable is set (the names of the environment are given).
pub fn check_environment(names: impl IntoIterator<Item = String>) -> Result<()> {
    let bad: Vec<String> =
        names.into_iter().filter(|n| LOADER_VARS.contains(&n.as_str())).collect();
    if bad.is_empty() {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "erdma-oci-hook was started with {} set; declare the hook with a fixed `env` (CVE-2025-23266)",
        bad.join(", ")
    )))
}

/// The state JSON the runtime hands a hook, read and checked (`bundle` absolute): input from
/// the engine, on which nothing is acted here.
pub fn parse_state(state: &[u8]) -> Result<State> {
    let state: State = serde_json::from_slice(state).map_err(|source| Error::Json {
        what: "container state",
        path: PathBuf::from("<stdin>"),
        source,
    })?;
    let bundle = state.bundle();
    if bundle.as_os_str().is_empty() || !bundle.is_absolute() {
        return Err(malformed_state(format!(
            "`bundle` must be an absolute path, got {:?}",
            bundle.display().to_string()
        )));
    }
    Ok(state)
}

/// Does the work for the state JSON `state`. `Ok(None)`: the container did not ask.
pub fn apply(config: &Config, state: &[u8]) -> Result<Option<Report>> {
    let state = parse_state(state)?;
    let bundle = state.bundle();
    let (_, spec) = spec::read(&bundle.join("config.json"))?;
    let request = request::from_spec(&spec, config)?;
    if request == Request::None {
        return Ok(None);
    }
    let pid = match state.pid() {
        Some(p) if *p > 0 => *p,
        _ => return Err(malformed_state("no `pid` of the container's init process".into())),
    };
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    std::fs::symlink_metadata(&proc_dir).map_err(|e| Error::Sys {
        operation: format!(
            "the container's init process (pid {pid}, from the state) is not running"
        ),
        source: e,
    })?;

    // 1. Devices, and the host nodes once more right before use.
    let host = discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
    let (devices, nodes) = modify::select(&request, &host, config)?;
    let (devices, nodes, placement) = modify::place(&spec, &host, config, &request, devices, nodes);
    for n in &nodes {
        recheck_host_node(n)?;
    }
    let mut warnings = Vec::new();

    // 2. Network namespace: the NCCL settings are judged for the one the container is in.
    let (network, net) = if same_namespace(pid, "net")? {
        (NetworkOutcome::Host, crate::netns::Net::Host)
    } else {
        let net = modify::own_network(config, &host, &mut warnings, || {
            crate::netns::Net::read(&proc_dir.join("ns/net"))
        })?;
        (NetworkOutcome::Own, net)
    };

    // 2b. The NCCL settings, derived as the runtime wrapper derives them; the env is the
    // runtime's already, so what is missing or cannot work is said, not set.
    let mut env_needed = Vec::new();
    if config.env_presets {
        let env = spec
            .pointer("/process/env")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        let derived = crate::nccl::derive(&host, &devices, &net, &placement.context(config));
        let plan = crate::nccl::plan(
            &|k| crate::request::env_get(&env, k).map(str::to_string),
            &derived,
            &host,
            &net,
            &devices,
            crate::config::EnvPolicy::Keep,
            false,
        );
        env_needed = plan.set.iter().map(|c| format!("{}={}", c.name, c.value)).collect();
        if !env_needed.is_empty() {
            warnings.push(format!("the container's env lacks {}, which a prestart hook cannot set: use erdma-runtime, the precreate hook or the CDI spec, or set them (`erdma-oci-hook env`)", env_needed.join(" ")));
        }
        warnings.extend(plan.warnings);
    }

    // 3. Memlock.
    let want = config.memlock.value();
    let before = memlock_of(pid)?;
    if want > before.1 && !has_cap_sys_resource() {
        return Err(Error::Invalid(format!(
            "raising memlock of pid {pid} to {} needs CAP_SYS_RESOURCE (hard limit is {})",
            limit_str(want),
            limit_str(before.1)
        )));
    }
    if let Some(spec_value) = spec_memlock(&spec) {
        if spec_value != want {
            warnings.push(format!(
                "the spec sets RLIMIT_MEMLOCK to {}; runc applies it after this hook, so the container gets that instead of {}",
                limit_str(spec_value),
                limit_str(want)
            ));
        }
    }

    // 4. Device cgroup.
    let cgroup = DeviceCgroup::locate(pid)?;
    if let DeviceCgroup::Unsupported { reason } = &cgroup {
        warnings.push(format!("{reason}: the device nodes are created but opening them may fail with EPERM; on cgroup v2 use erdma-runtime or the precreate hook"));
    }

    // 5. The container root and every node path in it.
    let croot = ContainerRoot::open(bundle, &spec, pid)?;
    let plan = croot.plan(&nodes)?;

    // 6. Changes, each undone if a later one fails.
    let created = croot.create(&plan)?;
    let added = match cgroup.allow(&nodes) {
        Ok(a) => a,
        Err(e) => {
            croot.undo(&created);
            return Err(e);
        }
    };
    if let Err(e) = set_memlock(pid, want) {
        cgroup.undo(&added);
        croot.undo(&created);
        return Err(e);
    }

    Ok(Some(Report {
        container_id: state.id().to_string(),
        pid,
        devices: devices.iter().map(|d| d.name.clone()).collect(),
        nodes: plan
            .nodes
            .iter()
            .map(|(n, exists)| NodeOutcome {
                path: n.path.clone(),
                major: n.major,
                minor: n.minor,
                created: !exists,
            })
            .collect(),
        cgroup: match &cgroup {
            DeviceCgroup::V1 { path, .. } => CgroupOutcome::V1 {
                cgroup: path.clone(),
                added: added.iter().map(|r| r.to_string()).collect(),
            },
            DeviceCgroup::Unsupported { reason } => {
                CgroupOutcome::Unsupported { reason: reason.clone() }
            }
        },
        memlock: MemlockOutcome { before, set: want },
        network,
        env_needed,
        warnings,
    }))
}

fn malformed_state(reason: String) -> Error {
    Error::Malformed { what: "container state", path: PathBuf::from("<stdin>"), reason }
}

fn limit_str(v: u64) -> String {
    if v == u64::MAX {
        "unlimited".into()
    } else {
        v.to_string()
    }
}

/// `discover` checked the node; it is checked again right before its numbers are copied.
fn recheck_host_node(n: &CharDev) -> Result<()> {
    let meta = std::fs::symlink_metadata(&n.host_path)
        .map_err(Error::io("checking host device node", &n.host_path))?;
    let got = discover::split_rdev(meta.rdev());
    if !meta.file_type().is_char_device() || got != (n.major, n.minor) {
        return Err(Error::DeviceUnusable {
            name: n.path.clone(),
            reason: format!(
                "host node {} is no longer the character device {}:{} (now {:?} {}:{})",
                n.host_path.display(),
                n.major,
                n.minor,
                meta.file_type(),
                got.0,
                got.1
            ),
        });
    }
    Ok(())
}

/// Whether `pid` is in the hook's own namespace of kind `ns` (`net`, `mnt`).
fn same_namespace(pid: i32, ns: &str) -> Result<bool> {
    let id = |p: &str| {
        std::fs::metadata(p).map(|m| (m.dev(), m.ino())).map_err(Error::io("reading namespace", p))
    };
    Ok(id(&format!("/proc/{pid}/ns/{ns}"))? == id(&format!("/proc/self/ns/{ns}"))?)
}

/// Soft and hard `RLIMIT_MEMLOCK` of `pid`, from `/proc/PID/limits` (rustix's `prlimit` always
/// sets; reading first lets a refusal change nothing).
fn memlock_of(pid: i32) -> Result<(u64, u64)> {
    let path = format!("/proc/{pid}/limits");
    let text = std::fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
    parse_memlock(&text).ok_or_else(|| Error::Malformed {
        what: "limits",
        path: path.into(),
        reason: "no `Max locked memory` line".into(),
    })
}

fn parse_memlock(limits: &str) -> Option<(u64, u64)> {
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    let mut f = line["Max locked memory".len()..].split_whitespace();
    let v = |s: &str| if s == "unlimited" { Some(u64::MAX) } else { s.parse().ok() };
    Some((v(f.next()?)?, v(f.next()?)?))
}

fn has_cap_sys_resource() -> bool {
    rustix::thread::capabilities(None)
        .is_ok_and(|c| c.effective.contains(rustix::thread::CapabilitySet::SYS_RESOURCE))
}

/// `RLIMIT_MEMLOCK` in `process.rlimits` of the spec (the hard value), if any.
fn spec_memlock(spec: &Value) -> Option<u64> {
    spec.pointer("/process/rlimits")?
        .as_array()?
        .iter()
        .find(|r| r.get("type").and_then(Value::as_str) == Some("RLIMIT_MEMLOCK"))?
        .get("hard")?
        .as_u64()
}

fn set_memlock(pid: i32, value: u64) -> Result<()> {
    let rustix_pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| Error::Invalid(format!("invalid pid {pid}")))?;
    let v = (value != u64::MAX).then_some(value);
    rustix::process::prlimit(
        Some(rustix_pid),
        rustix::process::Resource::Memlock,
        rustix::process::Rlimit { current: v, maximum: v },
    )
    .map(|_| ())
    .map_err(|e| Error::Sys {
        operation: format!("setting memlock of pid {pid} to {} with prlimit", limit_str(value)),
        source: e.into(),
    })
}

/// A device-cgroup rule, as `devices.list` shows and `devices.allow` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    kind: char,
    major: Option<u32>,
    minor: Option<u32>,
    access: String,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: Option<u32>| v.map_or("*".to_string(), |v| v.to_string());
        write!(f, "{} {}:{} {}", self.kind, n(self.major), n(self.minor), self.access)
    }
}

impl Rule {
    fn char_rwm(n: &CharDev) -> Rule {
        Rule { kind: 'c', major: Some(n.major), minor: Some(n.minor), access: "rwm".into() }
    }

    fn parse(line: &str) -> Option<Rule> {
        let mut f = line.split_whitespace();
        let kind = f.next()?.chars().next()?;
        let (ma, mi) = f.next().unwrap_or("*:*").split_once(':')?;
        let num = |s: &str| if s == "*" { Some(None) } else { s.parse().ok().map(Some) };
        Some(Rule {
            kind,
            major: num(ma)?,
            minor: num(mi)?,
            access: f.next().unwrap_or("rwm").to_string(),
        })
    }

    /// Whether this (listed) rule already allows everything `want` asks.
    fn covers(&self, want: &Rule) -> bool {
        (self.kind == 'a' || self.kind == want.kind)
            && (self.kind == 'a' || self.major.is_none() || self.major == want.major)
            && (self.kind == 'a' || self.minor.is_none() || self.minor == want.minor)
            && want.access.chars().all(|c| self.access.contains(c))
    }
}

/// The container's devices cgroup. v1 only: its files are opened during the checks so the
/// changes cannot fail on a lookup.
enum DeviceCgroup {
    V1 { path: PathBuf, listed: Vec<Rule>, allow: File, deny: File },
    Unsupported { reason: String },
}

impl DeviceCgroup {
    /// From `/proc/PID/cgroup` (paths relative to the hook's cgroup namespace, the host's) and
    /// the host's v1 `devices` mount in `/proc/self/mountinfo`. Host paths throughout.
    fn locate(pid: i32) -> Result<DeviceCgroup> {
        let cg_file = format!("/proc/{pid}/cgroup");
        let cgroups = std::fs::read_to_string(&cg_file).map_err(Error::io("reading", &cg_file))?;
        let Some(cg_path) = cgroups::v1_path(&cgroups, "devices") else {
            let reason = if cgroups.lines().any(|l| l.starts_with("0::")) {
                format!("the container's cgroup is on cgroup v2 (no v1 devices controller in {cg_file}), where device access is an eBPF program the runtime owns and a hook cannot extend")
            } else {
                format!("no devices cgroup for the container in {cg_file}")
            };
            return Ok(DeviceCgroup::Unsupported { reason });
        };
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(Error::io("reading", "/proc/self/mountinfo"))?;
        let Some((mount_root, mount_point)) = cgroups::mount(&mountinfo, Some("devices")) else {
            return Ok(DeviceCgroup::Unsupported { reason: format!("the container is in devices cgroup {cg_path} but the hook sees no cgroup v1 devices mount") });
        };
        let rel = Path::new(&cg_path).strip_prefix(&mount_root).map_err(|_| {
            Error::Invalid(format!("devices cgroup {cg_path} of pid {pid} is outside the hierarchy mounted at {} (root {})", mount_point.display(), mount_root))
        })?;
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(Error::Invalid(format!(
                "devices cgroup path {cg_path} of pid {pid} is not a plain path"
            )));
        }
        let path = mount_point.join(rel);
        // cgroupfs has no symlinks; pathrs keeps the lookup under the mount all the same.
        let root = Root::open(&mount_point).map_err(|source| Error::InRoot {
            operation: "opening",
            path: "/".into(),
            root: mount_point.clone(),
            source,
        })?;
        let open = |name: &str, flags: OpenFlags| {
            let p = rel.join(name);
            root.resolve(&p).and_then(|h| h.reopen(flags)).map_err(|source| Error::InRoot {
                operation: "opening",
                path: p.display().to_string(),
                root: mount_point.clone(),
                source,
            })
        };
        let mut listed_text = String::new();
        std::io::Read::read_to_string(
            &mut open("devices.list", OpenFlags::O_RDONLY)?,
            &mut listed_text,
        )
        .map_err(Error::io("reading", path.join("devices.list")))?;
        let listed = listed_text.lines().filter_map(Rule::parse).collect();
        let allow = open("devices.allow", OpenFlags::O_WRONLY)?;
        let deny = open("devices.deny", OpenFlags::O_WRONLY)?;
        Ok(DeviceCgroup::V1 { path, listed, allow, deny })
    }

    /// Writes the rules `nodes` need that the cgroup does not already allow; returns them.
    fn allow(&self, nodes: &[&CharDev]) -> Result<Vec<Rule>> {
        let DeviceCgroup::V1 { path, listed, allow, .. } = self else { return Ok(Vec::new()) };
        let mut added = Vec::new();
        let mut seen = BTreeSet::new();
        for n in nodes {
            let rule = Rule::char_rwm(n);
            if listed.iter().any(|l| l.covers(&rule)) || !seen.insert((n.major, n.minor)) {
                continue;
            }
            // One rule per write(2): that is how the kernel parses devices.allow.
            if let Err(e) = (&*allow).write_all(rule.to_string().as_bytes()) {
                self.undo(&added);
                return Err(Error::Sys {
                    operation: format!(
                        "writing `{rule}` to {}",
                        path.join("devices.allow").display()
                    ),
                    source: e,
                });
            }
            added.push(rule);
        }
        Ok(added)
    }

    /// Removes rules this hook added (the cgroup denies by default, so a deny of the same
    /// rule removes the exception). Best effort: it runs on the way out of a failure.
    fn undo(&self, added: &[Rule]) {
        if let DeviceCgroup::V1 { deny, .. } = self {
            for r in added {
                let _ = (&*deny).write_all(r.to_string().as_bytes());
            }
        }
    }
}

/// What is to be made in the container root: each node and whether it is already there, and
/// which of `dev`, `dev/infiniband` must be created.
struct Plan<'a> {
    nodes: Vec<(&'a CharDev, bool)>,
    make_dirs: Vec<&'static str>,
}

/// What [`ContainerRoot::create`] made, for [`ContainerRoot::undo`].
struct Created {
    nodes: Vec<String>,
    dirs: Vec<&'static str>,
}

/// The container's root directory, opened with `pathrs` so that no lookup leaves it, and with
/// symlinks refused outright: a symlink where we create device nodes is an attack or a broken
/// image, never something to follow (CVE-2024-0132).
struct ContainerRoot {
    root: Root,
    /// For messages.
    display: PathBuf,
}

impl ContainerRoot {
    fn open(bundle: &Path, spec: &Value, pid: i32) -> Result<ContainerRoot> {
        let root_path = spec
            .pointer("/root/path")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| Error::Malformed {
                what: "OCI spec",
                path: bundle.join("config.json"),
                reason: "no `root.path`".into(),
            })?;
        // `root.path` and the bundle come from the engine: joining them is not joining an
        // untrusted path. Everything below the root goes through pathrs.
        let host_rootfs = bundle.join(root_path);
        let host_rootfs = std::fs::canonicalize(&host_rootfs)
            .map_err(Error::io("opening container root", &host_rootfs))?;
        let in_root = |operation, source| Error::InRoot {
            operation,
            path: "/".into(),
            root: host_rootfs.clone(),
            source,
        };
        let root = if same_namespace(pid, "mnt")? {
            Root::open(&host_rootfs).map_err(|e| in_root("opening", e))?
        } else {
            // The container's mounts (its /dev tmpfs) are only visible in its mount namespace.
            // A magic link, which `Root::open` (O_NOFOLLOW) rightly refuses: it is the host's
            // procfs naming the init process's root, not a path inside the container.
            let proc_root = PathBuf::from(format!("/proc/{pid}/root"));
            let fd = rustix::fs::open(
                &proc_root,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| {
                Error::io("opening the mount namespace of the init process at", &proc_root)(
                    e.into(),
                )
            })?;
            let ns_root = Root::from_fd(fd);
            let host_meta = std::fs::metadata(&host_rootfs)
                .map_err(Error::io("opening container root", &host_rootfs))?;
            let ns_meta = rustix::fs::fstat(ns_root.as_fd())
                .map_err(|e| Error::io("stat", &proc_root)(e.into()))?;
            if (ns_meta.st_dev, ns_meta.st_ino) == (host_meta.dev(), host_meta.ino()) {
                // Already switched to its root (a runtime that runs hooks after pivot_root).
                ns_root
            } else {
                let h = ns_root
                    .resolve(&host_rootfs)
                    .map_err(|e| in_root("resolving (in the init process's mount namespace)", e))?;
                Root::from_fd(OwnedFd::from(h))
            }
        };
        Ok(ContainerRoot {
            root: root.with_resolver_flags(ResolverFlags::NO_SYMLINKS),
            display: host_rootfs,
        })
    }

    fn hostile(&self, reason: String) -> Error {
        Error::HostileRoot { root: self.display.clone(), reason }
    }

    fn in_root(
        &self,
        operation: &'static str,
        path: &str,
    ) -> impl FnOnce(pathrs::error::Error) -> Error {
        let (root, path) = (self.display.clone(), path.to_string());
        move |source| Error::InRoot { operation, path, root, source }
    }

    /// The type and device numbers at `path` without following a final symlink; `None` when
    /// nothing is there.
    fn lstat(&self, path: &str) -> Result<Option<(FileType, (u32, u32))>> {
        match self.root.resolve_nofollow(path) {
            Ok(h) => {
                let st = rustix::fs::fstat(h.as_fd()).map_err(|e| Error::Sys {
                    operation: format!("stat {path} in container root {}", self.display.display()),
                    source: e.into(),
                })?;
                let dev = st.st_rdev as u64;
                Ok(Some((FileType::from_raw_mode(st.st_mode as _), discover::split_rdev(dev))))
            }
            Err(e)
                if e.kind()
                    == pathrs::error::ErrorKind::OsError(Some(
                        rustix::io::Errno::NOENT.raw_os_error(),
                    )) =>
            {
                Ok(None)
            }
            Err(e)
                if e.kind()
                    == pathrs::error::ErrorKind::OsError(Some(
                        rustix::io::Errno::LOOP.raw_os_error(),
                    )) =>
            {
                Err(self.hostile(format!("a path component of {path} is a symlink")))
            }
            Err(e) => Err(self.in_root("inspecting", path)(e)),
        }
    }

    fn describe(&self, path: &str, ft: FileType) -> String {
        match ft {
            FileType::Symlink => {
                let target = self
                    .root
                    .readlink(path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".into());
                format!("a symlink to {target}")
            }
            FileType::RegularFile => "a regular file".into(),
            FileType::Directory => "a directory".into(),
            FileType::Fifo => "a fifo".into(),
            FileType::Socket => "a socket".into(),
            FileType::BlockDevice => "a block device".into(),
            FileType::CharacterDevice => "a character device".into(),
            FileType::Unknown => "an unknown file type".into(),
        }
    }

    /// Inspects everything before anything is made.
    fn plan<'a>(&self, nodes: &[&'a CharDev]) -> Result<Plan<'a>> {
        let mut make_dirs = Vec::new();
        for dir in ["/dev", NODE_DIR] {
            match self.lstat(dir)? {
                Some((FileType::Directory, _)) => {}
                Some((ft, _)) => {
                    return Err(self
                        .hostile(format!("{dir} is {}, not a directory", self.describe(dir, ft))))
                }
                None => make_dirs.push(dir),
            }
            if !make_dirs.is_empty() && dir == "/dev" {
                // /dev itself is missing: dev/infiniband is too.
                make_dirs.push(NODE_DIR);
                break;
            }
        }
        let mut out = Vec::new();
        for n in nodes {
            if Path::new(&n.path).parent() != Some(Path::new(NODE_DIR)) {
                return Err(Error::Invalid(format!(
                    "device node path {} is not under {NODE_DIR}",
                    n.path
                )));
            }
            let exists = match self.lstat(&n.path)? {
                None => false,
                Some((FileType::CharacterDevice, got)) if got == (n.major, n.minor) => true,
                Some((FileType::CharacterDevice, got)) => {
                    return Err(self.hostile(format!(
                        "{} is already a character device {}:{}, not {}:{}",
                        n.path, got.0, got.1, n.major, n.minor
                    )))
                }
                Some((ft, _)) => {
                    return Err(self.hostile(format!(
                        "{} is already {}, not the character device {}:{}",
                        n.path,
                        self.describe(&n.path, ft),
                        n.major,
                        n.minor
                    )))
                }
            };
            out.push((*n, exists));
        }
        Ok(Plan { nodes: out, make_dirs })
    }

    /// Makes the directories and nodes of `plan`; on failure removes what it made.
    fn create(&self, plan: &Plan) -> Result<Created> {
        let mut done = Created { nodes: Vec::new(), dirs: Vec::new() };
        let r = (|| {
            for dir in &plan.make_dirs {
                self.root
                    .create(dir, &InodeType::Directory(std::fs::Permissions::from_mode(0o755)))
                    .map_err(self.in_root("creating directory", dir))?;
                done.dirs.push(*dir);
            }
            for (n, exists) in &plan.nodes {
                if *exists {
                    continue;
                }
                let dev = rustix::fs::makedev(n.major, n.minor);
                self.root
                    .create(
                        &n.path,
                        &InodeType::CharacterDevice(
                            std::fs::Permissions::from_mode(NODE_MODE),
                            dev,
                        ),
                    )
                    .map_err(self.in_root("creating device node", &n.path))?;
                done.nodes.push(n.path.clone());
                self.fix_mode(n)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => Ok(done),
            Err(e) => {
                self.undo(&done);
                Err(e)
            }
        }
    }

    /// mknod(2) applies the umask: set 0666 on the node just made, through its O_PATH handle
    /// (`/proc/self/fd/N` names exactly that inode), after checking it is still our node.
    fn fix_mode(&self, n: &CharDev) -> Result<()> {
        let h = self
            .root
            .resolve_nofollow(&n.path)
            .map_err(self.in_root("reopening device node", &n.path))?;
        let st = rustix::fs::fstat(h.as_fd()).map_err(|e| Error::Sys {
            operation: format!("stat {} in container root {}", n.path, self.display.display()),
            source: e.into(),
        })?;
        if FileType::from_raw_mode(st.st_mode as _) != FileType::CharacterDevice
            || discover::split_rdev(st.st_rdev as u64) != (n.major, n.minor)
        {
            return Err(self.hostile(format!("{} was replaced while it was being created", n.path)));
        }
        let fd_path = format!("/proc/self/fd/{}", h.as_fd().as_raw_fd());
        std::fs::set_permissions(&fd_path, std::fs::Permissions::from_mode(NODE_MODE)).map_err(
            |e| Error::Sys {
                operation: format!(
                    "chmod {:o} {} in container root {}",
                    NODE_MODE,
                    n.path,
                    self.display.display()
                ),
                source: e,
            },
        )
    }

    /// Removes what [`create`](Self::create) made. Best effort: it runs on the way out of a
    /// failure, whose error is the one reported.
    fn undo(&self, done: &Created) {
        for p in done.nodes.iter().rev() {
            let _ = self.root.remove_file(p);
        }
        for d in done.dirs.iter().rev() {
            let _ = self.root.remove_dir(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_line() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n\
                      Max locked memory         8388608              unlimited            bytes     \n";
        assert_eq!(parse_memlock(limits), Some((8388608, u64::MAX)));
        assert_eq!(parse_memlock("nothing"), None);
    }

    #[test]
    fn device_rules() {
        let want = Rule { kind: 'c', major: Some(231), minor: Some(192), access: "rwm".into() };
        assert_eq!(want.to_string(), "c 231:192 rwm");
        for (listed, covers) in [
            ("a *:* rwm", true),
            ("c *:* rwm", true),
            ("c 231:* rwm", true),
            ("c 231:192 rwm", true),
            ("c 231:192 rw", false),
            ("c 231:193 rwm", false),
            ("b *:* rwm", false),
        ] {
            assert_eq!(Rule::parse(listed).unwrap().covers(&want), covers, "{listed}");
        }
        assert_eq!(
            Rule::parse("c 10:58 rwm").unwrap(),
            Rule { kind: 'c', major: Some(10), minor: Some(58), access: "rwm".into() }
        );
    }

    #[test]
    fn loader_variables_refused() {
        assert!(check_environment(["PATH".to_string(), "ERDMA_OCI_HOOK_CONFIG".into()]).is_ok());
        let e =
            check_environment(["PATH".to_string(), "LD_PRELOAD".into()]).unwrap_err().to_string();
        assert!(e.contains("LD_PRELOAD") && e.contains("CVE-2025-23266"), "{e}");
    }

    #[test]
    fn not_asking_is_a_no_op_and_bad_state_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"env":["PATH=/bin"]}}"#,
        )
        .unwrap();
        let state = serde_json::json!({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1, "bundle": dir.path()});
        assert!(apply(&Config::default(), state.to_string().as_bytes()).unwrap().is_none());
        let e = apply(&Config::default(), b"{not json").unwrap_err().to_string();
        assert!(e.contains("malformed container state"), "{e}");
        let e = apply(
            &Config::default(),
            br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bundle"), "{e}");
    }
}
