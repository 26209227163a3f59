//! Container start through the CRI, timed as kubelet experiences it: `CreateContainer` +
//! `StartContainer` on a running host-network pod, for several variants (a containerd socket,
//! a runtime handler, the container's env) interleaved round by round, so drift on the machine
//! hits all of them alike. The container runs `true`; it is removed after each run, outside the
//! timing. Used by bench/nri_start.sh.
//!
//!   cargo run --release --example cri_start -- --image IMG --runs N \
//!       --variant 'plain=/run/a.sock,runc' --variant 'nri ask=/run/b.sock,runc,ERDMA_VISIBLE_DEVICES=all'
// An example has no API: its generated client is `pub` for its own modules.
#![allow(unreachable_pub)]
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;

#[allow(clippy::all, missing_docs)]
mod cri {
    tonic::include_proto!("runtime.v1");
}
use cri::runtime_service_client::RuntimeServiceClient;

#[derive(Parser, Debug)]
struct Cli {
    /// `NAME=SOCKET,HANDLER[,pod-network][,edits=FILE][,KEY=VALUE…]`: a containerd CRI socket,
    /// the pod's runtime handler (`runc` is containerd's default), `pod-network` for a pod on
    /// the containerd's CNI network instead of the host's, `edits=FILE` for device nodes and
    /// env given in the container's own CRI config (FILE: a CDI `containerEdits` object, JSON,
    /// its `env` and `deviceNodes`), and env for the container.
    #[arg(long = "variant", required = true)]
    variants: Vec<String>,
    /// The image the containers run (already in the k8s.io namespace of every containerd).
    #[arg(long)]
    image: String,
    #[arg(long, default_value_t = 100)]
    runs: usize,
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// `A/B`: also print the paired difference of two variants (by name): the median and the
    /// 10th and 90th percentiles of A's time minus B's in the same round, and how many rounds
    /// A took longer. Rounds share the machine's drift, so this is steadier than the
    /// difference of the two p50s.
    #[arg(long = "pair")]
    pairs: Vec<String>,
    /// Print the figures as JSON too.
    #[arg(long)]
    json: bool,
}

struct Variant {
    name: String,
    client: RuntimeServiceClient<tonic::transport::Channel>,
    handler: String,
    envs: Vec<cri::KeyValue>,
    devices: Vec<cri::Device>,
    pod: String,
    pod_config: cri::PodSandboxConfig,
    times: Vec<Duration>,
}

fn pod_config(name: &str, pod_network: bool) -> cri::PodSandboxConfig {
    // NamespaceMode NODE (2): host networking, as `hostNetwork: true` makes kubelet ask; POD
    // (0): a namespace of the pod's own, set up by CNI.
    let ns =
        cri::NamespaceOption { network: if pod_network { 0 } else { 2 }, ..Default::default() };
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "bench".into(),
            attempt: 0,
        }),
        // kubelet leaves the hostname out for host-network pods (they share the host's UTS).
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(ns),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The env and device nodes of a CDI `containerEdits` object in `path`, as a container's CRI
/// config carries them.
fn edits(path: &str) -> Result<(Vec<cri::KeyValue>, Vec<cri::Device>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    // A whole CDI spec (or anything else) would give no edits, and the variant would measure
    // nothing: only a `containerEdits` object is taken.
    if !v.is_object() || v.get("env").is_none() && v.get("deviceNodes").is_none() {
        return Err("not a CDI containerEdits object (no `env`, no `deviceNodes`)".into());
    }
    let str_of = |v: &serde_json::Value, key: &str| v[key].as_str().map(str::to_string);
    let mut envs = Vec::new();
    for e in v["env"].as_array().into_iter().flatten() {
        let (k, val) = e
            .as_str()
            .and_then(|e| e.split_once('='))
            .ok_or_else(|| format!("env entry {e} is not \"KEY=VALUE\""))?;
        envs.push(cri::KeyValue { key: k.into(), value: val.into() });
    }
    let mut devices = Vec::new();
    for d in v["deviceNodes"].as_array().into_iter().flatten() {
        let container_path =
            str_of(d, "path").ok_or_else(|| format!("device node {d}: no path"))?;
        devices.push(cri::Device {
            host_path: str_of(d, "hostPath").unwrap_or_else(|| container_path.clone()),
            container_path,
            permissions: str_of(d, "permissions").unwrap_or_else(|| "rwm".into()),
        });
    }
    Ok((envs, devices))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let mut variants = Vec::new();
    for (i, spec) in cli.variants.iter().enumerate() {
        let (name, rest) = spec.split_once('=').ok_or_else(|| {
            format!("--variant {spec}: expected NAME=SOCKET,HANDLER[,pod-network][,KEY=VALUE…]")
        })?;
        let mut parts = rest.split(',');
        let socket = PathBuf::from(parts.next().unwrap_or_default());
        let handler = parts
            .next()
            .ok_or_else(|| format!("--variant {spec}: no runtime handler"))?
            .to_string();
        let mut pod_network = false;
        let (mut envs, mut devices) = (Vec::new(), Vec::new());
        for kv in parts {
            if kv == "pod-network" {
                pod_network = true;
                continue;
            }
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("--variant {spec}: `{kv}` is not KEY=VALUE"))?;
            if k == "edits" {
                let (e, d) = edits(v).map_err(|e| format!("--variant {spec}: {v}: {e}"))?;
                envs.extend(e);
                devices.extend(d);
            } else {
                envs.push(cri::KeyValue { key: k.into(), value: v.into() });
            }
        }
        let mut client = RuntimeServiceClient::new(
            erdma_kube::kubelet::unix_channel(&socket)
                .await
                .map_err(|e| format!("{}: {e}", socket.display()))?,
        );
        let cfg = pod_config(&format!("bench-{i}"), pod_network);
        let pod = client
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(cfg.clone()),
                runtime_handler: handler.clone(),
            })
            .await
            .map_err(|e| format!("{name} ({handler}): RunPodSandbox: {}", e.message()))?
            .into_inner()
            .pod_sandbox_id;
        variants.push(Variant {
            name: name.into(),
            client,
            handler,
            envs,
            devices,
            pod,
            pod_config: cfg,
            times: Vec::new(),
        });
    }
    // Each pair as the two variants' places, found before the rounds: a pair that names no
    // variant is refused before them, not after.
    let mut pairs = Vec::new();
    for pair in &cli.pairs {
        let (a, b) = pair.split_once('/').ok_or_else(|| format!("--pair {pair}: expected A/B"))?;
        let place = |name: &str| {
            variants
                .iter()
                .position(|v| v.name == name)
                .ok_or_else(|| format!("--pair {pair}: no variant named `{name}`"))
        };
        pairs.push((place(a)?, place(b)?));
    }
    eprintln!(
        "cri_start: {} variants, {} runs each (+{} warm-up)",
        variants.len(),
        cli.runs,
        cli.warmup
    );
    for round in 0..cli.runs + cli.warmup {
        for v in variants.iter_mut() {
            let config = cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata { name: format!("c{round}"), attempt: 0 }),
                image: Some(cri::ImageSpec { image: cli.image.clone(), ..Default::default() }),
                command: vec!["true".into()],
                envs: v.envs.clone(),
                devices: v.devices.clone(),
                ..Default::default()
            };
            let t = Instant::now();
            let id = v
                .client
                .create_container(cri::CreateContainerRequest {
                    pod_sandbox_id: v.pod.clone(),
                    config: Some(config),
                    sandbox_config: Some(v.pod_config.clone()),
                })
                .await
                .map_err(|e| {
                    format!("{} ({}): CreateContainer: {}", v.name, v.handler, e.message())
                })?
                .into_inner()
                .container_id;
            v.client
                .start_container(cri::StartContainerRequest { container_id: id.clone() })
                .await
                .map_err(|e| format!("{}: StartContainer: {}", v.name, e.message()))?;
            let took = t.elapsed();
            if round >= cli.warmup {
                v.times.push(took);
            }
            // Outside the timing: wait for `true` to exit (as a finished pod's container), then
            // remove it; removing a container whose shim is still winding down races with it.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let st = v
                    .client
                    .container_status(cri::ContainerStatusRequest {
                        container_id: id.clone(),
                        verbose: false,
                    })
                    .await?
                    .into_inner();
                if st.status.is_some_and(|s| s.state == cri::ContainerState::ContainerExited as i32)
                    || Instant::now() > deadline
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            v.client
                .remove_container(cri::RemoveContainerRequest { container_id: id })
                .await
                .map_err(|e| format!("{}: RemoveContainer: {}", v.name, e.message()))?;
        }
    }
    // Per pair, A's time minus B's in each round (before the times are sorted below), sorted.
    let differences: Vec<Vec<f64>> = pairs
        .iter()
        .map(|&(a, b)| {
            let (ta, tb) = (&variants[a].times, &variants[b].times);
            let mut d: Vec<f64> = ta
                .iter()
                .zip(tb)
                .map(|(x, y)| (x.as_secs_f64() - y.as_secs_f64()) * 1000.0)
                .collect();
            d.sort_by(f64::total_cmp);
            d
        })
        .collect();
    let base = {
        let mut t = variants[0].times.clone();
        t.sort();
        percentile(&t, 0.5)
    };
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>10}",
        "variant", "p50 ms", "p90 ms", "mean ms", "p50 added"
    );
    let mut json = Vec::new();
    for v in variants.iter_mut() {
        v.times.sort();
        let (p50, p90) = (percentile(&v.times, 0.5), percentile(&v.times, 0.9));
        let mean =
            v.times.iter().map(Duration::as_secs_f64).sum::<f64>() / v.times.len() as f64 * 1000.0;
        println!("{:<28} {:>9.2} {:>9.2} {:>9.2} {:>+10.2}", v.name, p50, p90, mean, p50 - base);
        json.push(serde_json::json!({"variant": v.name, "handler": v.handler, "runs": v.times.len(), "p50_ms": p50, "p90_ms": p90, "mean_ms": mean, "p50_added_ms": p50 - base}));
        v.client
            .stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: v.pod.clone() })
            .await?;
        v.client
            .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: v.pod.clone() })
            .await?;
    }
    for (&(a, b), d) in pairs.iter().zip(&differences) {
        let (a, b) = (&variants[a].name, &variants[b].name);
        let at = |p: f64| d[((d.len() as f64 - 1.0) * p).round() as usize];
        let longer = d.iter().filter(|x| **x > 0.0).count();
        println!(
            "paired {a} − {b}: p50 {:+.2} ms (p10 {:+.2}, p90 {:+.2}), longer in {longer} of {} rounds",
            at(0.5),
            at(0.1),
            at(0.9),
            d.len()
        );
        json.push(serde_json::json!({"pair": [a, b], "p50_ms": at(0.5), "p10_ms": at(0.1), "p90_ms": at(0.9), "longer": longer, "rounds": d.len()}));
    }
    if cli.json {
        println!("{}", serde_json::Value::Array(json));
    }
    Ok(())
}
