//! The device plugin's `/metrics` (`--metrics-address`) over the fixture hosts' counters
//! (testdata/sysfs/README.md, "Counters"), with a kubelet stand-in serving the PodResources API
//! as kubelet does: the exposition is held against the real `promtool check metrics`, and a real
//! Prometheus server scrapes it and answers a `rate()` over counters that move, go backwards
//! and disappear. No root needed.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use erdma_kube::holders::podresources as pr;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::deviceplugin_cases::{spawn_plugin, start_kubelet};
use crate::support::{self, Fixture};

/// kubelet's PodResources `List`: one pod whose container holds `erdma_0` twice (two of its
/// shares) and a GPU, one whose container holds `erdma_1` through a DRA claim (with a GPU
/// claimed from NVIDIA's driver), another pod without devices.
struct TestPodResources;

#[tonic::async_trait]
impl pr::pod_resources_lister_server::PodResourcesLister for TestPodResources {
    async fn list(
        &self,
        _: tonic::Request<pr::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<pr::ListPodResourcesResponse>, tonic::Status> {
        let devices = vec![
            pr::ContainerDevices {
                resource_name: "aliyun/erdma".into(),
                device_ids: vec!["erdma_0-0".into(), "erdma_0-1".into()],
            },
            pr::ContainerDevices {
                resource_name: "nvidia.com/gpu".into(),
                device_ids: vec!["GPU-0".into()],
            },
        ];
        Ok(tonic::Response::new(pr::ListPodResourcesResponse {
            pod_resources: vec![
                pr::PodResources {
                    name: "trainer-0".into(),
                    namespace: "ml".into(),
                    containers: vec![pr::ContainerResources {
                        name: "worker".into(),
                        devices,
                        dynamic_resources: vec![],
                    }],
                },
                pr::PodResources {
                    name: "claimed-0".into(),
                    namespace: "ml".into(),
                    containers: vec![pr::ContainerResources {
                        name: "rank0".into(),
                        devices: vec![],
                        dynamic_resources: vec![pr::DynamicResource {
                            claim_name: "claimed-0-rdma".into(),
                            claim_namespace: "ml".into(),
                            claim_resources: vec![
                                pr::ClaimResource {
                                    cdi_devices: vec![pr::CdiDevice {
                                        name: "k8s.erdma.aliyun.com/claim=uid-erdma-1".into(),
                                    }],
                                    driver_name: erdma_kube::dra::DRIVER.into(),
                                    pool_name: "node-1".into(),
                                    device_name: "erdma-1".into(),
                                },
                                pr::ClaimResource {
                                    cdi_devices: vec![],
                                    driver_name: "gpu.nvidia.com".into(),
                                    pool_name: "node-1".into(),
                                    device_name: "gpu-0".into(),
                                },
                            ],
                        }],
                    }],
                },
                pr::PodResources {
                    name: "idle".into(),
                    namespace: "default".into(),
                    containers: vec![pr::ContainerResources {
                        name: "c".into(),
                        devices: vec![],
                        dynamic_resources: vec![],
                    }],
                },
            ],
        }))
    }
}

pub(crate) fn start_podresources(path: &Path) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(pr::pod_resources_lister_server::PodResourcesListerServer::new(
                TestPodResources,
            ))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await;
    })
}

/// A port on 127.0.0.1 nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` over HTTP/1.1: the status line and the body.
fn get(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// `GET /metrics` once the plugin serves it (within 20 s).
pub(crate) fn scrape(addr: SocketAddr) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((status, body)) = get(addr, "/metrics") {
            assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
            return body;
        }
        assert!(Instant::now() < until, "no /metrics on {addr}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn counter(fx: &Fixture, device: &str, name: &str) -> std::path::PathBuf {
    let class = fx.sysfs.join("class/infiniband").join(device);
    std::fs::canonicalize(class).unwrap().join("ports/1/hw_counters").join(name)
}

/// The plugin with metrics over `scenario`, a test kubelet and PodResources: the metrics'
/// address. The runtime keeps them running.
fn serve(rt: &tokio::runtime::Runtime, fx: &Fixture) -> (SocketAddr, tokio::process::Child) {
    let dir = fx.dir.path().join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let podresources = fx.dir.path().join("pod-resources.sock");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = rt.block_on(async {
        let (tx, _rx) = mpsc::channel(4);
        std::mem::forget(_rx);
        start_kubelet(&dir, tx);
        start_podresources(&podresources);
        spawn_plugin(
            fx,
            &dir,
            &[
                "--metrics-address",
                &addr.to_string(),
                "--podresources-socket",
                podresources.to_str().unwrap(),
            ],
        )
    });
    (addr, child)
}

#[test]
fn metrics_name_each_eri_and_the_pods_it_is_handed_to() {
    let fx = Fixture::sysfs_only("two", "");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (addr, _plugin) = serve(&rt, &fx);
    let body = scrape(addr);
    let node = erdma_kube::metrics::node_name();
    let want = [
        format!("erdma_port_transmit_bytes_total{{node=\"{node}\",device=\"erdma_0\",port=\"1\",netdev=\"eth0\"}} 7000000046"),
        format!("erdma_port_receive_packets_total{{node=\"{node}\",device=\"erdma_1\",port=\"1\",netdev=\"eth1\"}} 3400050"),
        format!("erdma_port_dropped_packets_total{{node=\"{node}\",device=\"erdma_0\",port=\"1\",netdev=\"eth0\",direction=\"transmit\",reason=\"bandwidth_limit\"}} 0"),
        format!("erdma_port_driver_events_total{{node=\"{node}\",device=\"erdma_0\",port=\"1\",netdev=\"eth0\",counter=\"listen_create_cnt\"}} 0"),
        format!("erdma_port_up{{node=\"{node}\",device=\"erdma_1\",port=\"1\",netdev=\"eth1\"}} 1"),
        format!("erdma_port_mtu_bytes{{node=\"{node}\",device=\"erdma_0\",port=\"1\",netdev=\"eth0\"}} 8500"),
        format!("erdma_device_container_info{{node=\"{node}\",device=\"erdma_0\",namespace=\"ml\",pod=\"trainer-0\",container=\"worker\"}} 1"),
    ];
    for w in &want {
        assert!(body.lines().any(|l| l == w), "{w}\nnot in:\n{body}");
    }
    assert_eq!(
        body.matches("erdma_device_container_info{").count(),
        1,
        "one per container and device"
    );
    assert!(!body.contains("GPU-0") && !body.contains("idle"), "{body}");
    // The device plugin serves beside no DRA driver of ours: the claim is not read as one.
    assert!(!body.contains("claimed-0"), "{body}");
    // The real promtool's lint of the exposition.
    if support::require(
        support::have("promtool"),
        "promtool is needed (Debian's prometheus; scripts/setup)",
    ) {
        let mut check = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        check.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        let out = check.wait_with_output().unwrap();
        support::assert_success("promtool check metrics", &out);
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    }
    let (status, _) = get(addr, "/").unwrap();
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    // A counter file that stops reading: its series goes, the gauge says so; never a 0.
    std::fs::write(counter(&fx, "erdma_1", "hw_tx_bytes_cnt"), "garbage\n").unwrap();
    let body = scrape(addr);
    let line = |name: &str, device: &str| {
        body.lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{")) && l.contains(&format!("device=\"{device}\""))
            })
            .map(str::to_string)
    };
    assert_eq!(line("erdma_port_transmit_bytes_total", "erdma_1"), None, "{body}");
    assert!(line("erdma_port_transmit_bytes_total", "erdma_0").is_some(), "{body}");
    assert!(
        line("erdma_port_unreadable_counters", "erdma_1").is_some_and(|l| l.ends_with(" 1")),
        "{body}"
    );
}

/// The DRA plugin's exporter (its driver, no device plugin resource) with the NRI plugin's
/// records: the ERI a claim holds and the one a container asked for by annotation both carry
/// their pods; a record removed (the container gone) ends its series; a record directory with
/// files that are not records does not break the scrape.
#[test]
fn claims_and_nri_records_name_their_pods() {
    let fx = Fixture::sysfs_only("two", "");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let podresources = fx.dir.path().join("pod-resources.sock");
    let records = fx.dir.path().join("nri-records");
    let _kubelet = {
        let _in_runtime = rt.enter();
        start_podresources(&podresources)
    };
    let record = erdma_kube::holders::Record {
        namespace: "batch".into(),
        pod: "by-annotation".into(),
        container: "main".into(),
        devices: vec!["erdma_0".into()],
    };
    erdma_kube::holders::record(&records, "0123abcd", &record).unwrap();
    std::fs::write(records.join("junk.json"), b"{not json").unwrap();
    let exporter = erdma_kube::metrics::Exporter {
        config: erdma_oci_hook::config::Config::load_from(&fx.config_path).unwrap(),
        node: "node-1".into(),
        podresources: Some(podresources),
        resource: None,
        dra_driver: Some(erdma_kube::dra::DRIVER.into()),
        nri_records: Some(records.clone()),
    };
    let info = |body: &str| -> Vec<String> {
        body.lines()
            .filter(|l| l.starts_with("erdma_device_container_info{"))
            .map(str::to_string)
            .collect()
    };
    let body = rt.block_on(exporter.scrape());
    assert_eq!(
        info(&body),
        [
            r#"erdma_device_container_info{node="node-1",device="erdma_0",namespace="batch",pod="by-annotation",container="main"} 1"#,
            r#"erdma_device_container_info{node="node-1",device="erdma_1",namespace="ml",pod="claimed-0",container="rank0"} 1"#,
        ],
        "{body}"
    );
    // The device plugin's allocation (trainer-0) is not this exporter's to read.
    assert!(!body.contains("trainer-0"), "{body}");
    erdma_kube::holders::forget(&records, "0123abcd").unwrap();
    let body = rt.block_on(exporter.scrape());
    assert_eq!(info(&body).len(), 1, "{body}");
    assert!(info(&body)[0].contains("claimed-0"), "{body}");
    // Traffic is served as before.
    assert!(body.contains("erdma_port_transmit_bytes_total{"), "{body}");
}

/// A real Prometheus server scrapes the plugin every second while erdma_0 sends 1 GB/s;
/// `rate()` over the series gives that back. Then erdma_0's counter goes backwards (the driver
/// reloaded) and erdma_1 disappears: the rate is the new count's, never negative, and
/// erdma_1's series ends (Prometheus marks it stale).
#[test]
fn prometheus_scrapes_and_answers_rate() {
    if !support::require(
        support::have("prometheus"),
        "prometheus is needed (Debian's prometheus; scripts/setup)",
    ) {
        return;
    }
    let fx = Fixture::sysfs_only("two", "");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let (addr, _plugin) = serve(&rt, &fx);
    scrape(addr);
    let prom_dir = fx.dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let config = prom_dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: erdma\n    static_configs:\n      - targets: ['{addr}']\n"),
    )
    .unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(prom_dir.join("log")).unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", prom_dir.join("data").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let query = |q: &str| -> Value {
        let enc: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, body) = get(web, &format!("/api/v1/query?query={enc}")).unwrap_or_default();
        assert!(status.contains("200"), "{status} {body}");
        serde_json::from_str(&body).unwrap()
    };
    let tx = counter(&fx, "erdma_0", "hw_tx_bytes_cnt");
    let mut value: u64 = std::fs::read_to_string(&tx).unwrap().trim().parse().unwrap();
    // 1 GB per second of wall time (whatever the sleeps take under load), written every
    // 100 ms, for `secs`.
    let send = |value: &mut u64, secs: u64| {
        let (start, base) = (Instant::now(), *value);
        while start.elapsed() < Duration::from_secs(secs) {
            *value = base + (start.elapsed().as_secs_f64() * 1e9) as u64;
            // Whole or not at all, as the kernel hands a counter over: a plain write truncates
            // first, and a scrape in between read an empty counter (seen under load).
            // Outside hw_counters, whose every file the exporter reads.
            let next = fx.dir.path().join("hw_tx_bytes_cnt.next");
            std::fs::write(&next, format!("{value}\n")).unwrap();
            std::fs::rename(&next, &tx).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Prometheus up and scraping (two samples of the target) before the traffic starts.
    let until = Instant::now() + Duration::from_secs(60);
    let scraped = || -> u32 {
        if get(web, "/-/ready").is_none_or(|(s, _)| !s.contains("200")) {
            return 0;
        }
        let n = &query("count_over_time(up[1m])")["data"]["result"][0]["value"][1];
        n.as_str().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    while scraped() < 2 {
        assert!(Instant::now() < until, "Prometheus scrapes nothing");
        std::thread::sleep(Duration::from_millis(200));
    }
    send(&mut value, 8);
    let rate = |q: &str| -> Vec<(String, f64)> {
        query(q)["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["metric"]["device"].as_str().unwrap().to_string(),
                    r["value"][1].as_str().unwrap().parse::<f64>().unwrap(),
                )
            })
            .collect()
    };
    let got = rate("rate(erdma_port_transmit_bytes_total[5s])");
    let log = || std::fs::read_to_string(prom_dir.join("log")).unwrap_or_default();
    let of = |got: &[(String, f64)], d: &str| got.iter().find(|(x, _)| x == d).map(|(_, r)| *r);
    assert!(
        of(&got, "erdma_0").is_some_and(|r| (0.6e9..=1.4e9).contains(&r)),
        "erdma_0 at 1 GB/s: {got:?}\n{}",
        log()
    );
    assert_eq!(of(&got, "erdma_1"), Some(0.0), "erdma_1 is idle: {got:?}");

    // The driver reloads: erdma_0 counts from 0 again, at the same pace; erdma_1 goes away.
    value = 0;
    std::fs::remove_file(fx.sysfs.join("class/infiniband/erdma_1")).unwrap();
    send(&mut value, 8);
    // The pace over the last five seconds, all of them after the reset (eight seconds of
    // sending): several samples, so one scrape or write held up on a busy machine is averaged
    // in rather than being half of what is measured.
    let got = rate("rate(erdma_port_transmit_bytes_total[5s])");
    assert!(
        of(&got, "erdma_0").is_some_and(|r| (0.6e9..=1.4e9).contains(&r)),
        "after the reset, the same pace: {got:?}\n{}",
        log()
    );
    let got = rate("rate(erdma_port_transmit_bytes_total[20s])");
    assert!(
        of(&got, "erdma_0").is_some_and(|r| r > 0.0),
        "across the reset, not negative: {got:?}"
    );
    let now = query("erdma_port_up");
    let devices: Vec<&str> = now["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metric"]["device"].as_str().unwrap())
        .collect();
    let _ = prom.kill();
    let _ = prom.wait();
    assert_eq!(devices, ["erdma_0"], "erdma_1's series ended: {now}");
}

/// deploy/monitoring/: every query of the Grafana dashboard is valid PromQL to the real
/// `promtool check rules` and names only metrics the exporter serves; the PodMonitor selects
/// the DaemonSet's pods and names the device plugin's port.
#[test]
fn the_dashboard_and_pod_monitor_match_the_metrics() {
    let dir = support::repo_root().join("deploy/monitoring");
    let dash: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("grafana-dashboard.json")).unwrap())
            .unwrap();
    let mut exprs: Vec<String> = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            // label_values(METRIC{…}, LABEL): the metric selector is PromQL.
            let inner = q.trim_start_matches("label_values(").rsplit_once(',').unwrap().0;
            exprs.push(inner.to_string());
        }
    }
    assert!(exprs.len() >= 8, "{exprs:?}");
    // The exporter's families, for the fixture host with a pod holding an ERI.
    let fx = Fixture::sysfs_only("two", "");
    let host = erdma_oci_hook::discover::discover(&fx.sysfs, &fx.dev, &["erdma".into()]).unwrap();
    let ports = erdma_oci_hook::counters::sample(&fx.sysfs, &host, &[]);
    let grant = erdma_kube::holders::Holder {
        device: "erdma_0".into(),
        namespace: "ml".into(),
        pod: "trainer-0".into(),
        container: "worker".into(),
    };
    let body = erdma_kube::metrics::render("n1", &ports, &[grant]);
    let families: Vec<&str> =
        body.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        for name in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if name.starts_with("erdma_") {
                assert!(families.contains(&name), "{name} (in `{e}`) is not served: {families:?}");
            }
        }
        let promql =
            e.replace("$__rate_interval", "1m").replace("$node", ".*").replace("$device", ".*");
        rules.push_str(&format!("      - record: dashboard:q{i}\n        expr: '{promql}'\n"));
    }
    if support::require(
        support::have("promtool"),
        "promtool is needed (Debian's prometheus; scripts/setup)",
    ) {
        let file = fx.dir.path().join("dashboard-rules.yml");
        std::fs::write(&file, &rules).unwrap();
        let out = Command::new("promtool").args(["check", "rules"]).arg(&file).output().unwrap();
        support::assert_success(&format!("promtool check rules\n{rules}"), &out);
    }
    let monitor = std::fs::read_to_string(dir.join("erdma-kit-podmonitor.yaml")).unwrap();
    let ds =
        std::fs::read_to_string(support::repo_root().join("deploy/erdma-kit-nri.yaml")).unwrap();
    for want in ["app.kubernetes.io/name: erdma-kit", "- port: metrics", "path: /metrics"] {
        assert!(monitor.contains(want), "{want}");
    }
    assert!(ds.contains("app.kubernetes.io/name: erdma-kit") && ds.contains("- name: metrics"));
}
