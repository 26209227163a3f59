//! The NCCL settings containers get, derived from the host: real runc runs the containers on
//! fixture hosts named as real ones are (testdata/sysfs/README.md), and the env inside is
//! asserted; `erdma-oci-hook env` prints the same for jobs without an engine.
use serde_json::Value;

use crate::support::{self, assert_success, text, Fixture};

const MEMLOCK: u64 = 4_194_304;

/// Runs `env` in a busybox container asking for `devices`, with the image's own `env`, under
/// erdma-runtime and real runc on fixture host `scenario`; returns the container's env lines.
fn env_inside(
    scenario: &str,
    extra_toml: &str,
    devices: &str,
    own: &[&str],
) -> (Vec<String>, Fixture) {
    let fx = Fixture::new(scenario, &format!("memlock = {MEMLOCK}\n{extra_toml}"));
    let ask = format!("ERDMA_VISIBLE_DEVICES={devices}");
    let mut vars = vec![ask.as_str()];
    vars.extend_from_slice(own);
    let out = support::run_busybox(&fx, "nccl", &["env"], &vars);
    (out.lines().map(str::to_string).collect(), fx)
}

fn value<'a>(env: &'a [String], k: &str) -> Option<&'a str> {
    let all: Vec<&str> = env.iter().filter_map(|l| l.strip_prefix(&format!("{k}="))).collect();
    assert!(all.len() <= 1, "{k} set {} times: {env:?}", all.len());
    all.first().copied()
}

/// A real ACK node: rocep26s0 ACTIVE on ens5, rocep156s0 DOWN on ens6, no eth0. An image built
/// with PAI-DLC's values (eth0, erdma, GID 1) gets them repaired; the DOWN port is left out.
#[test]
fn rocep_host_without_eth0_gets_its_own_names_and_pai_values_repaired_root() {
    if !support::require_runc() {
        return;
    }
    let (env, fx) = env_inside(
        "rocep-ens5",
        "",
        "all",
        &["NCCL_SOCKET_IFNAME=eth0", "NCCL_IB_HCA=erdma", "NCCL_DEBUG=WARN"],
    );
    assert_eq!(value(&env, "NCCL_IB_HCA"), Some("=rocep26s0:1"), "{env:?}");
    assert_eq!(value(&env, "NCCL_SOCKET_IFNAME"), Some("=ens5"), "{env:?}");
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("1"), "{env:?}");
    // The container's own working values win; NCCL_IB_DISABLE is never touched, and NCCL_NET=IB
    // makes NCCL stop instead of falling back to TCP (tcp_fallback = false).
    assert_eq!(value(&env, "NCCL_DEBUG"), Some("WARN"));
    assert_eq!((value(&env, "NCCL_IB_DISABLE"), value(&env, "NCCL_NET")), (None, Some("IB")));
    let log = fx.log_text();
    assert!(log.contains("NCCL_SOCKET_IFNAME=eth0 replaced by NCCL_SOCKET_IFNAME==ens5: it names no interface of this host (bond0, ens5, ens6, lo)"), "{log}");
    assert!(log.contains("NCCL_IB_HCA=erdma replaced by NCCL_IB_HCA==rocep26s0:1"), "{log}");

    // env_policy = "keep": the image's values reach the container, and the log says they cannot work.
    let (env, fx) =
        env_inside("rocep-ens5", "env_policy = \"keep\"", "all", &["NCCL_SOCKET_IFNAME=eth0"]);
    assert_eq!(value(&env, "NCCL_SOCKET_IFNAME"), Some("eth0"));
    assert!(
        fx.log_text().contains("NCCL_SOCKET_IFNAME=eth0 names no interface of this host"),
        "{}",
        fx.log_text()
    );
}

/// The ECS AI-training-cluster guide: two ACTIVE eRDMA devices on two netdevs; asking for one gives exactly that one.
#[test]
fn two_devices_on_two_netdevs_and_exact_names_root() {
    if !support::require_runc() {
        return;
    }
    let (env, _) = env_inside("two", "", "all", &[]);
    assert_eq!(value(&env, "NCCL_IB_HCA"), Some("=erdma_0:1,erdma_1:1"));
    assert_eq!(value(&env, "NCCL_SOCKET_IFNAME"), Some("=eth0,eth1"));
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("1"));
    let (env, _) = env_inside("two", "", "erdma_1", &[]);
    assert_eq!(
        (value(&env, "NCCL_IB_HCA"), value(&env, "NCCL_SOCKET_IFNAME")),
        (Some("=erdma_1:1"), Some("=eth1"))
    );
}

/// Alibaba's benchmark notes: RoCE v2 GIDs at 2 and 1 on one node. Together no index is set
/// (NCCL 2.21+ chooses per port); alone, each device gets its own.
#[test]
fn differing_gid_indexes_are_chosen_by_address_root() {
    if !support::require_runc() {
        return;
    }
    // GIDs at 2 and 1 with 172.16.0.5 and 172.16.1.5: NCCL 2.21+ picks each port's by address.
    let (env, _) = env_inside("gids-differ", "", "all", &[]);
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("-1"), "{env:?}");
    assert_eq!(value(&env, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET"));
    assert_eq!(value(&env, "NCCL_IB_ADDR_RANGE"), Some("172.16.0.0/23"));
    let (env, _) = env_inside("gids-differ", "", "erdma_0", &[]);
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("2"));
    let (env, _) = env_inside("gids-differ", "", "erdma_1", &[]);
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("1"));
}

/// An mlx5 RoCE port with a full GID table (the RoCE v2 article) beside eRDMA, when the operator counts
/// mlx5 in: its IPv4 RoCE v2 GID is at 3; with the eRDMA device (at 1) no single index fits.
#[test]
fn mlx5_roce_beside_erdma_root() {
    if !support::require_runc() {
        return;
    }
    let drivers = "drivers = [\"erdma\", \"mlx5_core\"]";
    let (env, _) = env_inside("mlx5-beside", drivers, "mlx5_0", &[]);
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("3"), "{env:?}");
    assert_eq!(value(&env, "NCCL_SOCKET_IFNAME"), Some("=ens1f0np0"));
    let (env, _) = env_inside("mlx5-beside", drivers, "all", &[]);
    // By address: 172.16.0.5 and 192.168.1.11 share only their first bit.
    assert_eq!(value(&env, "NCCL_IB_GID_INDEX"), Some("-1"), "{env:?}");
    assert_eq!(value(&env, "NCCL_IB_ADDR_RANGE"), Some("128.0.0.0/1"));
    assert_eq!(value(&env, "NCCL_IB_HCA"), Some("=erdma_0:1,mlx5_0:1"));
    // MTU 9000 on the mlx5 netdev: LL128 off.
    assert_eq!(value(&env, "NCCL_PROTO"), Some("^LL128"));
}

/// `erdma-oci-hook env` prints what a container would get, in each format.
#[test]
fn env_command_prints_the_derived_settings_root() {
    if !support::require(support::is_root(), "root (mknod) is needed") {
        return;
    }
    let fx = Fixture::new("rocep-ens5", "");
    let run = |args: &[&str]| {
        let out = fx.command("erdma-oci-hook").arg("env").args(args).output().unwrap();
        assert_success("erdma-oci-hook env", &out);
        (text(&out.stdout), text(&out.stderr))
    };
    let (shell, notes) = run(&[]);
    assert!(
        shell.lines().any(|l| l == "export NCCL_IB_HCA='=rocep26s0:1'")
            && shell.lines().any(|l| l == "export NCCL_SOCKET_IFNAME='=ens5'"),
        "{shell}"
    );
    assert!(notes.contains("rocep156s0:1 (DOWN)"), "{notes}");
    // The shell output is valid shell: sourced, it sets the variables.
    let sourced = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{shell}\necho \"$NCCL_IB_HCA|$NCCL_SOCKET_IFNAME|$NCCL_IB_GID_INDEX\""))
        .output()
        .unwrap();
    assert_eq!(text(&sourced.stdout).trim(), "=rocep26s0:1|=ens5|1");
    let (json, _) = run(&["--format", "json", "--devices", "rocep26s0"]);
    let j: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["devices"], serde_json::json!(["rocep26s0"]));
    assert_eq!(j["env"]["NCCL_IB_HCA"], "=rocep26s0:1");
    assert_eq!(j["env"]["NCCL_DEBUG"], "INFO");
    assert!(
        j["derived"].as_array().unwrap().iter().any(|v| v["name"] == "NCCL_SOCKET_IFNAME"
            && v["source"].as_str().unwrap().contains("netdevs")),
        "{j}"
    );
    let (file, _) = run(&["--format", "env-file"]);
    assert!(file.lines().any(|l| l == "NCCL_SOCKET_IFNAME==ens5"), "{file}");
    let (args, _) = run(&["--format", "mpirun"]);
    assert!(args.contains("-x NCCL_IB_HCA==rocep26s0:1"), "{args}");
    let (args, _) = run(&["--format", "docker-args"]);
    assert!(args.contains("-e NCCL_SOCKET_IFNAME==ens5"), "{args}");
    // An unknown device is one clear error.
    let out = fx.command("erdma-oci-hook").args(["env", "--devices", "erdma_9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("erdma_9"), "{}", text(&out.stderr));

    // For a job in a namespace of its own (a veth end `v0` with an address): its interface,
    // read from it; the HCA and GID as for the host.
    if support::have("ip") && support::have("unshare") {
        let ns = support::Netns::with_interface("v0", "10.99.0.1/24");
        let path = ns.path();
        let (shell, _) = run(&["--netns", path.to_str().unwrap()]);
        assert!(
            shell.lines().any(|l| l == "export NCCL_SOCKET_IFNAME='=v0'")
                && shell.lines().any(|l| l == "export NCCL_IB_HCA='=rocep26s0:1'")
                && shell.lines().any(|l| l == "export NCCL_IB_GID_INDEX='1'"),
            "{shell}"
        );
    }
    // A path that is no namespace: one clear error naming it.
    let out =
        fx.command("erdma-oci-hook").args(["env", "--netns", "/etc/hostname"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("/etc/hostname") && err.contains("not a namespace file"), "{err}");
}
