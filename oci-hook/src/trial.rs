//! `erdma-oci-hook doctor --image IMAGE`: the whole chain proved with one short-lived container
//! (as `docker run --gpus all … nvidia-smi` proves a GPU host): started through the engine the
//! way a user would (Docker: `--runtime erdma`; Podman: the precreate hook's annotation;
//! containerd: `ctr run --runc-binary` with the erdma-runtime its config registers; or the CDI
//! device with `--cdi`; host networking), it reports what it got, and each finding becomes a
//! check in doctor's ok/warn/FAIL form:
//! - `container.start`: the engine started it (else the engine's own message);
//! - `container.devices`: the host's uverbs nodes and `rdma_cm` are in it;
//! - `container.memlock`: `ulimit -l` is what the hook config gives (`unlimited` by default);
//! - `container.nccl-env`: the NCCL settings this host's devices call for are in its env;
//! - `container.provider`: the image's libibverbs has the erdma provider (`erdma.driver` and
//!   `liberdma-rdmav*.so`), without which NCCL silently falls back to TCP;
//! - `container.ibv_devinfo`: when the image has it, it lists the host's eRDMA devices;
//! - `container.nccl`: the NCCL in the image, 2.19 or later for eRDMA (the PAI-DLC eRDMA guide).
//!
//! The container is removed whatever happens (`--rm`, then `rm -f` by name, also after a
//! timeout).
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::check::Check;
use crate::config::{Config, Memlock};
use crate::discover::Host;
use crate::engine::Engine;
use erdma_common::nccl::MIN;

/// What is printed inside the container, section by section. POSIX sh only (busybox too).
const SCRIPT: &str = r#"echo @@devices; ls /dev/infiniband 2>/dev/null
echo @@memlock; ulimit -l
echo @@env; env | grep -E '^(NCCL_|ERDMA_)'
echo @@provider; ls /etc/libibverbs.d/erdma.driver 2>/dev/null; for d in /usr/lib/*-linux-gnu/libibverbs /usr/lib64/libibverbs /usr/lib/libibverbs; do ls "$d"/liberdma-rdmav*.so 2>/dev/null; done
echo @@ibv; if command -v ibv_devinfo >/dev/null 2>&1; then ibv_devinfo -l 2>&1; echo "rc=$?"; else echo absent; fi
echo @@nccl; for d in /usr/lib/*-linux-gnu /usr/lib64 /usr/local/lib /usr/local/nccl/lib; do ls "$d"/libnccl.so.2.* 2>/dev/null; done
echo @@end
"#;

/// How to run the trial.
#[derive(Debug, Clone)]
pub struct Options {
    pub image: String,
    pub engine: Engine,
    /// The engine's CLI (`docker`, `podman`), found on PATH when not given.
    pub program: PathBuf,
    /// Podman, Docker 25+: ask with the CDI device `aliyun.com/erdma=all` instead of the
    /// runtime or hook.
    pub cdi: bool,
    /// How long the container may take, start to end.
    pub timeout: Duration,
    /// containerd (`ctr run`): the runtime binary to run the container with (`--runc-binary`),
    /// erdma-runtime as containerd's config registers it.
    pub runtime: Option<PathBuf>,
}

/// The engine command line that starts the container `name`.
pub fn command_line(opts: &Options, name: &str) -> Vec<String> {
    if opts.engine == Engine::Containerd {
        // `ctr run` as a containerd user runs a container with a runtime of their choice; the
        // image is one containerd has (`ctr images pull`/`import`), its command replaced.
        let mut args: Vec<String> = vec!["run".into(), "--rm".into(), "--net-host".into()];
        if opts.cdi {
            args.extend(["--device".into(), format!("{}=all", crate::cdi::KIND)]);
        } else {
            args.extend(["--env".into(), format!("{}=all", crate::request::ENV)]);
        }
        if let Some(r) = &opts.runtime {
            args.extend(["--runc-binary".into(), r.display().to_string()]);
        }
        args.extend([opts.image.clone(), name.into(), "sh".into(), "-c".into(), SCRIPT.into()]);
        return args;
    }
    let mut args: Vec<String> = vec![
        "run".into(),
        "--rm".into(),
        "--name".into(),
        name.into(),
        "--network".into(),
        "host".into(),
    ];
    match (opts.engine, opts.cdi) {
        (_, true) => args.extend(["--device".into(), format!("{}=all", crate::cdi::KIND)]),
        (Engine::Podman, false) => {
            args.extend(["--annotation".into(), format!("{}=all", crate::request::ANNOTATION)])
        }
        _ => args.extend([
            "--runtime".into(),
            "erdma".into(),
            "-e".into(),
            format!("{}=all", crate::request::ENV),
        ]),
    }
    args.extend([
        "--entrypoint".into(),
        "sh".into(),
        opts.image.clone(),
        "-c".into(),
        SCRIPT.into(),
    ]);
    args
}

/// Starts the container, waits for it (up to the timeout) and removes it; returns the checks.
pub fn run(config: &Config, host: Option<&Host>, opts: &Options) -> Vec<Check> {
    if opts.engine == Engine::Crio {
        return vec![Check::fail(
            "container.start",
            "CRI-O runs pods for a kubelet, not containers for a user: doctor --image runs through Docker, Podman or containerd",
            "start a pod with the `erdma` runtime class and run `ibv_devinfo` in it, or use --engine docker|podman|containerd",
            json!({"engine": opts.engine}),
        )];
    }
    if opts.engine == Engine::Containerd && opts.runtime.is_none() && !opts.cdi {
        return vec![Check::fail(
            "container.start",
            "containerd: no erdma-runtime to run the container with (containerd's config registers none, and it is not on PATH)",
            "run `erdma-oci-hook configure containerd`, or pass --cdi with a CDI spec (`erdma-oci-hook cdi generate`)",
            json!({"engine": opts.engine}),
        )];
    }
    let name = format!("erdma-doctor-{}", std::process::id());
    let args = command_line(opts, &name);
    let started = Instant::now();
    let out =
        crate::engine::detect::output_within(Command::new(&opts.program).args(&args), opts.timeout);
    // Removed whatever happened: `--rm` covers a normal exit; a timeout or an engine error may
    // leave it behind.
    let quiet = |args: &[&str]| {
        let _ = Command::new(&opts.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    match opts.engine {
        Engine::Containerd => {
            quiet(&["task", "kill", "-s", "SIGKILL", &name]);
            quiet(&["task", "delete", "-f", &name]);
            quiet(&["container", "delete", &name]);
        }
        _ => quiet(&["rm", "-f", &name]),
    }
    let shown = format!(
        "{} {}",
        opts.program.display(),
        args.iter().take_while(|a| **a != opts.image).cloned().collect::<Vec<_>>().join(" ")
            + " "
            + &opts.image
    );
    let out = match out {
        Ok(Some(out)) => out,
        Ok(None) => {
            return vec![Check::fail("container.start", format!("the container did not finish within {} s ({shown})", opts.timeout.as_secs()), "check the engine with a plain `run` of the image; a pull may be slow: pull the image first", json!({"command": shown}))];
        }
        Err(e) => {
            return vec![Check::fail(
                "container.start",
                format!("cannot run {}: {e}", opts.program.display()),
                format!("is {} installed? pass --engine for another", opts.engine.display_name()),
                json!({"command": shown}),
            )]
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() || !stdout.contains("@@end") {
        // The engine's error line (`docker: Error response from daemon: …`), not its usage note.
        let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let last = lines
            .iter()
            .find(|l| l.to_ascii_lowercase().contains("error"))
            .or(lines.last())
            .copied()
            .unwrap_or("no message")
            .to_string();
        let lower = last.to_ascii_lowercase();
        let hint = match opts.engine {
            // Docker 20.10: "Unknown runtime specified erdma"; 24+: "unknown or invalid runtime name: erdma".
            Engine::Docker if lower.contains("unknown runtime") || lower.contains("unknown or invalid runtime") => "register erdma-runtime: `erdma-oci-hook configure docker`, then restart dockerd".to_string(),
            Engine::Docker => "check `erdma-oci-hook doctor` above for Docker, and that the image can run `sh`".to_string(),
            Engine::Containerd if lower.contains("not found") && lower.contains("image") => format!("containerd has no image {}: `ctr images pull` or `ctr images import` it first", opts.image),
            Engine::Containerd => "check `erdma-oci-hook doctor` above for containerd (`configure containerd`), and that the image can run `sh`".to_string(),
            _ => "check `erdma-oci-hook doctor` above for Podman (`configure podman`, or `cdi generate` with --cdi), and that the image can run `sh`".to_string(),
        };
        return vec![Check::fail(
            "container.start",
            format!("the container failed: {last}"),
            hint,
            json!({"command": shown, "status": out.status.code(), "stderr": stderr}),
        )];
    }
    let took = started.elapsed().as_secs_f64();
    let mut checks = vec![Check::ok(
        "container.start",
        format!(
            "{} ran a container of {} ({took:.1} s) and removed it",
            opts.engine.display_name(),
            opts.image
        ),
        json!({"command": shown}),
    )];
    let section = |name: &str| -> Vec<String> {
        let start = format!("@@{name}");
        stdout
            .lines()
            .skip_while(|l| *l != start)
            .skip(1)
            .take_while(|l| !l.starts_with("@@"))
            .map(str::to_string)
            .collect()
    };
    checks.push(devices_check(host, &section("devices")));
    checks.push(memlock_check(config, &section("memlock")));
    // The container is on the host's network; a CDI spec holds what it holds for any network.
    let net = if opts.cdi {
        crate::netns::Net::any_container(config.network)
    } else {
        crate::netns::Net::Host
    };
    checks.push(env_check(config, host, &net, &section("env")));
    let provider = section("provider");
    checks.push(provider_check(&opts.image, &provider));
    checks.push(ibv_check(host, &section("ibv"), !provider.is_empty()));
    checks.push(nccl_check(&section("nccl")));
    checks
}

fn devices_check(host: Option<&Host>, listed: &[String]) -> Check {
    let listed: Vec<&str> = listed.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
    let Some(host) = host else {
        return Check::warn(
            "container.devices",
            format!("in the container: {}", listed.join(" ")),
            "the host's devices could not be listed (see above)",
            json!({"listed": listed}),
        );
    };
    let want: Vec<String> = host
        .devices
        .iter()
        .filter_map(|d| d.uverbs.as_ref())
        .chain(host.rdma_cm.as_ref())
        .map(|c| c.path.rsplit('/').next().unwrap_or("").to_string())
        .collect();
    let missing: Vec<&String> = want.iter().filter(|w| !listed.contains(&w.as_str())).collect();
    let details = json!({"expected": want, "listed": listed});
    if want.is_empty() {
        return Check::fail(
            "container.devices",
            "this host has no eRDMA device node to give a container",
            "see the device checks above",
            details,
        );
    }
    if missing.is_empty() {
        Check::ok(
            "container.devices",
            format!("/dev/infiniband in the container: {}", want.join(", ")),
            details,
        )
    } else {
        let missing: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        Check::fail(
            "container.devices",
            format!("the container lacks {} (it has: {})", missing.join(", "), if listed.is_empty() { "nothing".to_string() } else { listed.join(", ") }),
            "the engine did not apply eRDMA: check its registration above (`erdma-oci-hook configure ENGINE`) and the hook log",
            details,
        )
    }
}

fn memlock_check(config: &Config, lines: &[String]) -> Check {
    let got = lines.first().map(|l| l.trim().to_string()).unwrap_or_default();
    let want = match config.memlock {
        Memlock::Unlimited => "unlimited".to_string(),
        Memlock::Bytes(n) => (n / 1024).to_string(),
    };
    let details = json!({"ulimit_l": got, "expected": want});
    if got == want && got == "unlimited" {
        Check::ok("container.memlock", "memlock in the container: unlimited", details)
    } else if got == want {
        Check::warn("container.memlock", format!("memlock in the container: {got} KiB, as the hook config says"), "memlock = \"unlimited\" in the hook config: verbs pin memory, and with too little ibv_reg_mr fails", details)
    } else {
        Check::fail(
            "container.memlock",
            format!("memlock in the container: {got}, not {want}"),
            "the engine did not apply eRDMA's memlock: check its registration above",
            details,
        )
    }
}

fn env_check(
    config: &Config,
    host: Option<&Host>,
    net: &crate::netns::Net,
    lines: &[String],
) -> Check {
    let env: Vec<(&str, &str)> = lines.iter().filter_map(|l| l.split_once('=')).collect();
    let details_env: Vec<&String> = lines.iter().collect();
    let Some(host) = host else {
        return Check::warn(
            "container.nccl-env",
            "the host's devices could not be listed: the NCCL settings cannot be judged",
            "see above",
            json!({"env": details_env}),
        );
    };
    let usable: Vec<&crate::discover::RdmaDevice> =
        host.devices.iter().filter(|d| d.uverbs.is_some()).collect();
    // The trial container is given no GPU, which counts as all of the host's.
    let derived = crate::nccl::derive_for_any_gpus(host, &usable, net, config);
    let wrong: Vec<String> = derived
        .vars
        .iter()
        .filter(|v| !env.iter().any(|(k, val)| *k == v.name && *val == v.value))
        .map(|v| {
            format!(
                "{}={} (has: {})",
                v.name,
                v.value,
                env.iter().find(|(k, _)| *k == v.name).map(|(_, val)| *val).unwrap_or("unset")
            )
        })
        .collect();
    let details = json!({"env": details_env, "expected": derived.vars});
    if wrong.is_empty() {
        let set: Vec<String> =
            derived.vars.iter().map(|v| format!("{}={}", v.name, v.value)).collect();
        Check::ok(
            "container.nccl-env",
            format!("NCCL settings in the container: {}", set.join(" ")),
            details,
        )
    } else {
        Check::warn("container.nccl-env", format!("the container's NCCL settings differ from this host's: {}", wrong.join("; ")), "a value the image or job sets wins (env_policy in the hook config); `erdma-oci-hook env` prints what this host calls for", details)
    }
}

fn provider_check(image: &str, found: &[String]) -> Check {
    let driver = found.iter().any(|l| l.ends_with("/erdma.driver"));
    let lib = found.iter().find(|l| l.contains("liberdma-rdmav"));
    let details = json!({"files": found});
    match (driver, lib) {
        (true, Some(lib)) => Check::ok("container.provider", format!("the image's libibverbs has the erdma provider ({lib})"), details),
        _ => Check::fail(
            "container.provider",
            format!("{image} has no erdma provider ({}): libibverbs finds no eRDMA device and NCCL silently falls back to TCP", if driver { "no liberdma-rdmav*.so" } else { "no /etc/libibverbs.d/erdma.driver" }),
            format!("add the eRDMA user space: `erdma-build build --base {image} --output REF`"),
            details,
        ),
    }
}

fn ibv_check(host: Option<&Host>, lines: &[String], provider: bool) -> Check {
    let text = lines.join("\n");
    if lines.first().map(String::as_str) == Some("absent") {
        return Check::ok("container.ibv_devinfo", "ibv_devinfo is not in the image (rdma-core's ibverbs-utils / libibverbs-utils): skipped", json!({"present": false}));
    }
    let rc = lines.iter().rev().find_map(|l| l.strip_prefix("rc=")).unwrap_or("?").to_string();
    let names: Vec<&str> =
        host.map(|h| h.devices.iter().map(|d| d.name.as_str()).collect()).unwrap_or_default();
    let details = json!({"present": true, "output": text, "rc": rc, "expected": names});
    let shown: Vec<&str> =
        names.iter().copied().filter(|n| text.lines().any(|l| l.trim() == *n)).collect();
    if rc == "0" && !names.is_empty() && shown.len() == names.len() {
        return Check::ok(
            "container.ibv_devinfo",
            format!("ibv_devinfo in the container lists {}", shown.join(", ")),
            details,
        );
    }
    let why = if rc == "127" || text.contains("not found") || text.contains("No such file") {
        "did not run".to_string()
    } else if text.contains("No IB devices found") || text.contains("0 HCAs found") {
        "found no device".to_string()
    } else {
        format!(
            "listed {}",
            if shown.is_empty() {
                "none of this host's eRDMA devices".to_string()
            } else {
                shown.join(", ")
            }
        )
    };
    let hint = if provider {
        "the devices are in the container but verbs cannot open them: check the erdma driver and `ibv_devinfo` on the host"
    } else {
        "add the erdma provider to the image (see container.provider)"
    };
    Check::fail(
        "container.ibv_devinfo",
        format!(
            "ibv_devinfo in the container {why} (exit {rc}; expected {})",
            if names.is_empty() { "eRDMA devices".to_string() } else { names.join(", ") }
        ),
        hint,
        details,
    )
}

fn nccl_check(found: &[String]) -> Check {
    let libs: Vec<&String> = found.iter().filter(|l| !l.trim().is_empty()).collect();
    let version =
        libs.iter().find_map(|l| l.rsplit_once("libnccl.so.").map(|(_, v)| v.to_string()));
    let details = json!({"libraries": libs, "version": version});
    match version.as_deref().and_then(crate::engine::detect::major_minor) {
        Some(v) if v >= (MIN.major, MIN.minor) => Check::ok(
            "container.nccl",
            format!("NCCL {} in the image", version.as_deref().unwrap_or("")),
            details,
        ),
        Some(_) => Check::warn(
            "container.nccl",
            format!(
                "NCCL {} in the image is older than 2.19, which eRDMA needs",
                version.as_deref().unwrap_or("")
            ),
            "install NCCL 2.19 or later (`erdma-build build --nccl`)",
            details,
        ),
        None => Check::warn(
            "container.nccl",
            "no system NCCL in the image (a PyTorch wheel may bring its own)",
            "`erdma-build build --nccl` adds NVIDIA's NCCL for the image's CUDA",
            details,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_is_asked_as_a_user_would() {
        let mut o = Options {
            image: "img:1".into(),
            engine: Engine::Docker,
            program: "docker".into(),
            cdi: false,
            timeout: Duration::from_secs(60),
            runtime: None,
        };
        let a = command_line(&o, "n").join(" ");
        assert!(a.starts_with("run --rm --name n --network host --runtime erdma -e ERDMA_VISIBLE_DEVICES=all --entrypoint sh img:1 -c "), "{a}");
        o.engine = Engine::Podman;
        let a = command_line(&o, "n").join(" ");
        assert!(a.contains("--annotation com.alibabacloud.erdma.devices=all"), "{a}");
        o.cdi = true;
        assert!(command_line(&o, "n").join(" ").contains("--device aliyun.com/erdma=all"));
        let c = Options {
            engine: Engine::Containerd,
            cdi: false,
            runtime: Some("/usr/local/bin/erdma-runtime".into()),
            ..o
        };
        let a = command_line(&c, "n").join(" ");
        assert!(a.starts_with("run --rm --net-host --env ERDMA_VISIBLE_DEVICES=all --runc-binary /usr/local/bin/erdma-runtime img:1 n sh -c "), "{a}");
    }

    #[test]
    fn findings_from_what_the_container_printed() {
        let lines = |s: &str| s.lines().map(String::from).collect::<Vec<_>>();
        assert_eq!(provider_check("img", &lines("/etc/libibverbs.d/erdma.driver\n/usr/lib/x86_64-linux-gnu/libibverbs/liberdma-rdmav34.so")).status, crate::check::Status::Ok);
        let none = provider_check("img:1", &[]);
        assert_eq!(none.status, crate::check::Status::Fail);
        assert!(none.hint.as_deref().unwrap().contains("erdma-build build --base img:1"));
        assert_eq!(ibv_check(None, &lines("absent"), false).status, crate::check::Status::Ok);
        let no_dev = ibv_check(None, &lines("No IB devices found\nrc=255"), true);
        assert!(
            no_dev.status == crate::check::Status::Fail
                && no_dev.message.contains("found no device"),
            "{}",
            no_dev.message
        );
        assert_eq!(
            nccl_check(&lines("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5")).status,
            crate::check::Status::Ok
        );
        assert_eq!(
            nccl_check(&lines("/usr/lib64/libnccl.so.2.18.3")).status,
            crate::check::Status::Warn
        );
        let c = Config::default();
        assert_eq!(memlock_check(&c, &lines("unlimited")).status, crate::check::Status::Ok);
        assert_eq!(memlock_check(&c, &lines("8192")).status, crate::check::Status::Fail);
    }
}
