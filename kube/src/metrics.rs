//! Prometheus metrics of the node's ERIs, served on `/metrics` by the device plugin
//! (`--metrics-address`; off unless given, as the DaemonSet manifests give it): each port's
//! traffic counters as counters ([`erdma_oci_hook::counters`]), its state and MTU as gauges, and
//! which pod's containers each ERI is handed to ([`crate::holders`]: the device plugin's
//! allocations, DRA claims, the NRI plugin's records) as an info metric, so a dashboard can
//! join traffic to pods.
//!
//! The exposition is Prometheus' text format 0.0.4 (held against `promtool check metrics`).
//! A counter that goes backwards (the driver reloaded) is exposed as read: Prometheus takes a
//! decrease as a reset. A port that disappears has no series from then on, which Prometheus
//! marks stale; a counter file that does not read is left out, never exposed as 0.
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::holders::{self, Holder};
use erdma_oci_hook::config::Config;
use erdma_oci_hook::counters::{Counter, PortSample};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a scrape reads, and how.
pub struct Exporter {
    pub config: Config,
    /// The `node` label: the downward API's `NODE_NAME`, else the host name.
    pub node: String,
    /// kubelet's PodResources socket; `None`: no holders from kubelet.
    pub podresources: Option<PathBuf>,
    /// The extended resource whose device IDs name ERIs (`aliyun/erdma`), when the device
    /// plugin serves.
    pub resource: Option<String>,
    /// The DRA driver whose claims' devices are ERIs (`erdma.aliyun.com`), when it serves.
    pub dra_driver: Option<String>,
    /// The NRI plugin's record directory; `None`: none read.
    pub nri_records: Option<PathBuf>,
}

/// The counters by metric: name, help, and the direction's drop reason where it is one.
const TRAFFIC: [(Counter, &str, &str); 5] = [
    (
        Counter::TxBytes,
        "erdma_port_transmit_bytes_total",
        "Bytes the port sent (the erdma driver's tx_bytes_cnt).",
    ),
    (Counter::RxBytes, "erdma_port_receive_bytes_total", "Bytes the port received (rx_bytes_cnt)."),
    (
        Counter::TxPackets,
        "erdma_port_transmit_packets_total",
        "Packets the port sent (tx_packets_cnt).",
    ),
    (
        Counter::RxPackets,
        "erdma_port_receive_packets_total",
        "Packets the port received (rx_packets_cnt).",
    ),
    (
        Counter::TxRequests,
        "erdma_port_transmit_requests_total",
        "Send requests the port took (tx_reqs_cnt).",
    ),
];

/// Drops by direction and reason.
const DROPS: [(Counter, &str, &str); 6] = [
    (Counter::TxDisableDrops, "transmit", "disabled"),
    (Counter::TxBpsLimitDrops, "transmit", "bandwidth_limit"),
    (Counter::TxPpsLimitDrops, "transmit", "packet_rate_limit"),
    (Counter::RxDisableDrops, "receive", "disabled"),
    (Counter::RxBpsLimitDrops, "receive", "bandwidth_limit"),
    (Counter::RxPpsLimitDrops, "receive", "packet_rate_limit"),
];

/// A label value as the text format writes it: `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// `{node="…",device="…",port="1",netdev="…"}` and `extra` pairs.
fn labels(node: &str, p: &PortSample, extra: &[(&str, &str)]) -> String {
    let mut l = format!(
        "node=\"{}\",device=\"{}\",port=\"{}\",netdev=\"{}\"",
        escape(node),
        escape(&p.device),
        p.port,
        escape(p.netdev.as_deref().unwrap_or(""))
    );
    for (k, v) in extra {
        let _ = write!(l, ",{k}=\"{}\"", escape(v));
    }
    format!("{{{l}}}")
}

/// The exposition for `ports` on `node`, with `holders` as the pod info metric.
pub fn render(node: &str, ports: &[PortSample], holders: &[Holder]) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, lines: Vec<String>| {
        if lines.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for l in lines {
            let _ = writeln!(out, "{name}{l}");
        }
    };
    for (c, name, help) in TRAFFIC {
        let lines = ports
            .iter()
            .filter_map(|p| Some(format!("{} {}", labels(node, p, &[]), p.get(c)?)))
            .collect();
        family(name, "counter", help, lines);
    }
    let drops = ports
        .iter()
        .flat_map(|p| {
            DROPS.iter().filter_map(move |(c, direction, reason)| {
                let l = labels(node, p, &[("direction", direction), ("reason", reason)]);
                Some(format!("{l} {}", p.get(*c)?))
            })
        })
        .collect();
    family(
        "erdma_port_dropped_packets_total",
        "counter",
        "Packets the port dropped, by direction and reason (the erdma driver's *_drop_cnt: the ERI disabled, its bandwidth or packet-rate limit).",
        drops,
    );
    // The driver's other counters (the out-of-tree driver's connection and verbs counts).
    let known: Vec<&str> = Counter::ALL.iter().flat_map(|c| c.names()).collect();
    let others = ports
        .iter()
        .flat_map(|p| {
            p.counters
                .iter()
                .filter(|(n, _)| !known.contains(&n.as_str()))
                .map(move |(n, v)| format!("{} {v}", labels(node, p, &[("counter", n)])))
        })
        .collect();
    family(
        "erdma_port_driver_events_total",
        "counter",
        "The erdma driver's other per-port counters (connections, verbs calls), by file name.",
        others,
    );
    let gauge = |f: &dyn Fn(&PortSample) -> Option<String>| {
        ports.iter().filter_map(|p| Some(format!("{} {}", labels(node, p, &[]), f(p)?))).collect()
    };
    family(
        "erdma_port_up",
        "gauge",
        "1 when the port is ACTIVE (state 4), 0 otherwise.",
        gauge(&|p| Some(u8::from(p.state == 4).to_string())),
    );
    family(
        "erdma_port_state",
        "gauge",
        "The port's state as the RDMA core numbers it (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE).",
        gauge(&|p| Some(p.state.to_string())),
    );
    family(
        "erdma_port_mtu_bytes",
        "gauge",
        "The MTU of the port's network interface.",
        gauge(&|p| p.mtu.map(|m| m.to_string())),
    );
    family(
        "erdma_port_unreadable_counters",
        "gauge",
        "Counter files of the port that did not read as a number this scrape (left out above).",
        gauge(&|p| Some(p.unreadable.len().to_string())),
    );
    let info = holders
        .iter()
        .map(|g| {
            format!(
                "{{node=\"{}\",device=\"{}\",namespace=\"{}\",pod=\"{}\",container=\"{}\"}} 1",
                escape(node),
                escape(&g.device),
                escape(&g.namespace),
                escape(&g.pod),
                escape(&g.container)
            )
        })
        .collect();
    family(
        "erdma_device_container_info",
        "gauge",
        "The containers each eRDMA device is handed to (the device plugin's, DRA's and the NRI plugin's records), 1 per pair: join on device.",
        info,
    );
    out
}

impl Exporter {
    /// One scrape: the counters as sysfs has them now, the holders as kubelet and the NRI
    /// plugin record them.
    pub async fn scrape(&self) -> String {
        let ports = match erdma_oci_hook::discover::discover(
            &self.config.sysfs_root,
            &self.config.dev_root,
            &self.config.drivers,
        ) {
            Ok(host) => erdma_oci_hook::counters::sample(&self.config.sysfs_root, &host, &[]),
            Err(e) => {
                tracing::warn!("metrics: reading the devices: {e}");
                Vec::new()
            }
        };
        let mut holders = match &self.podresources {
            Some(socket) => match holders::pod_resources(socket).await {
                Ok(list) => {
                    let eris: Vec<String> = ports.iter().map(|p| p.device.clone()).collect();
                    let kinds = holders::Kinds {
                        resource: self.resource.as_deref(),
                        dra_driver: self.dra_driver.as_deref(),
                    };
                    holders::from_pod_resources(&list, &kinds, &eris)
                }
                Err(e) => {
                    tracing::debug!("metrics: no holders from kubelet: {e}");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        if let Some(dir) = &self.nri_records {
            holders.extend(holders::recorded(dir));
        }
        holders.sort();
        holders.dedup();
        render(&self.node, &ports, &holders)
    }
}

/// The `node` label: `NODE_NAME` (the DaemonSet sets it from `spec.nodeName`), else the host
/// name.
pub fn node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|n| n.trim().to_string())
        .unwrap_or_default()
}

/// The longest request head read.
const MAX_HEAD: usize = 8 << 10;

/// Serves `GET /metrics` (and `HEAD`) on `listener` until the task is dropped: one scrape per
/// request, `Connection: close`. Anything else is 404 (405 for another method); a request
/// head over 8 KiB or slower than 10 s is dropped.
pub async fn serve(listener: tokio::net::TcpListener, exporter: Arc<Exporter>) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else { continue };
        let exporter = Arc::clone(&exporter);
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(512);
            let read = async {
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
                    let n = conn.read(&mut buf).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                Some(())
            };
            let timed = tokio::time::timeout(std::time::Duration::from_secs(10), read).await;
            if !matches!(timed, Ok(Some(()))) {
                return;
            }
            let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut words = line.split(' ');
            let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let path = target.split('?').next().unwrap_or("");
            let (status, body) = match (method, path) {
                ("GET" | "HEAD", "/metrics") => ("200 OK", exporter.scrape().await),
                (_, "/metrics") => ("405 Method Not Allowed", "GET /metrics\n".to_string()),
                _ => ("404 Not Found", "the metrics are at /metrics\n".to_string()),
            };
            let mut reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if method != "HEAD" {
                reply.push_str(&body);
            }
            let _ = conn.write_all(reply.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

/// The command-line options of the metrics, the same for every plugin that serves them.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Serve Prometheus metrics of the node's ERIs on `http://ADDRESS/metrics` (`:9435` for
    /// every address): traffic counters, port state and MTU, and the pods each ERI is
    /// handed to [default: off].
    #[arg(long, value_name = "ADDRESS")]
    pub metrics_address: Option<String>,
    /// kubelet's PodResources socket, for the metrics' pod labels.
    #[arg(long, value_name = "PATH", default_value = holders::PODRESOURCES_SOCKET)]
    pub podresources_socket: PathBuf,
    /// The NRI plugin's record directory (its `--records`), for the pod labels of ERIs it
    /// gives by annotation or env [default: none].
    #[arg(long, value_name = "DIR")]
    pub nri_records: Option<PathBuf>,
}

/// Binds `args`' address and serves the metrics from a task of the current runtime; nothing
/// where no address is given. `resource` and `dra_driver`: which of kubelet's records are ours.
pub async fn start(
    args: &Args,
    config: Config,
    resource: Option<String>,
    dra_driver: Option<String>,
) -> Result<(), String> {
    let Some(address) = &args.metrics_address else { return Ok(()) };
    let addr = parse_address(address)?;
    let exporter = Arc::new(Exporter {
        config,
        node: node_name(),
        podresources: Some(args.podresources_socket.clone()),
        resource,
        dra_driver,
        nri_records: args.nri_records.clone(),
    });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("serving metrics on {addr}: {e} (hint: another --metrics-address)"))?;
    tokio::spawn(serve(listener, exporter));
    Ok(())
}

/// `host:port`, or `:port` for every address.
pub fn parse_address(a: &str) -> Result<std::net::SocketAddr, String> {
    let full = if a.starts_with(':') { format!("0.0.0.0{a}") } else { a.to_string() };
    full.parse().map_err(|_| format!("--metrics-address {a}: expected HOST:PORT or :PORT"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_addresses_read() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let g = Holder {
            device: "erdma_0".into(),
            namespace: "ns".into(),
            pod: "p\"1".into(),
            container: "c".into(),
        };
        let body = render("n\\1", &[], &[g]);
        assert!(body.contains(r#"erdma_device_container_info{node="n\\1",device="erdma_0",namespace="ns",pod="p\"1",container="c"} 1"#), "{body}");
        // No port: no traffic families at all (not an empty HELP/TYPE pair).
        assert!(!body.contains("erdma_port_"), "{body}");
        assert_eq!(parse_address(":9435"), Ok("0.0.0.0:9435".parse().unwrap()));
        assert_eq!(parse_address("127.0.0.1:80"), Ok("127.0.0.1:80".parse().unwrap()));
        assert!(parse_address("9435").is_err());
    }
}
