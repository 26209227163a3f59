//! A Prometheus scrape of the device plugin's `/metrics` on a host with four ERIs (the `four`
//! sysfs fixture, the out-of-tree driver's 55 counters per port), timed as Prometheus
//! experiences it: an HTTP GET on 127.0.0.1, the counters read from sysfs and the pods from a
//! PodResources stand-in (kubelet's API, here in this process: 8 pods holding the 4 ERIs).
//! Beside it, interleaved run by run, the floor of that work: reading the same counter files
//! and nothing else. Then the plugin's peak RSS (`VmHWM`). Used by bench/metrics_scrape.sh.
//!
//!   cargo build --release -p erdma-kube --bins --examples
//!   target/release/examples/metrics_scrape [RUNS]
// An example has no API.
#![allow(unreachable_pub)]
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use erdma_kube::holders::podresources as pr;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

struct Pods;

#[tonic::async_trait]
impl pr::pod_resources_lister_server::PodResourcesLister for Pods {
    async fn list(
        &self,
        _: tonic::Request<pr::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<pr::ListPodResourcesResponse>, tonic::Status> {
        let devices = ["rocep9s0", "rocep10s0", "rocep11s0", "rocep12s0"];
        let pod_resources = (0..8)
            .map(|i| pr::PodResources {
                name: format!("trainer-{i}"),
                namespace: "ml".into(),
                containers: vec![pr::ContainerResources {
                    name: "worker".into(),
                    devices: vec![pr::ContainerDevices {
                        resource_name: "aliyun/erdma".into(),
                        device_ids: vec![format!("{}-{}", devices[i % 4], i / 4)],
                    }],
                    dynamic_resources: vec![],
                }],
            })
            .collect();
        Ok(tonic::Response::new(pr::ListPodResourcesResponse { pod_resources }))
    }
}

fn get(addr: SocketAddr) -> usize {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    assert!(reply.starts_with(b"HTTP/1.1 200 OK"));
    reply.len()
}

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    let f = erdma_testkit::Fixture::sysfs_only("four", "log_level = \"warn\"");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let socket = f.dir.path().join("pod-resources.sock");
    let listener = rt.block_on(async { tokio::net::UnixListener::bind(&socket).unwrap() });
    rt.spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(pr::pod_resources_lister_server::PodResourcesListerServer::new(Pods))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await;
    });
    let dir = f.dir.path().join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // No kubelet: the plugin waits for one to register with, and serves its metrics meanwhile.
    let mut plugin = std::process::Command::new(erdma_testkit::bin("erdma-device-plugin"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .arg("--socket-dir")
        .arg(&dir)
        .args(["--metrics-address", &addr.to_string(), "--podresources-socket"])
        .arg(&socket)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < until, "the plugin serves no metrics");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The floor: the counter files of the four ports, read.
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(f.sysfs.join("class/infiniband"))
        .unwrap()
        .flatten()
        .flat_map(|d| {
            let dir = std::fs::canonicalize(d.path()).unwrap().join("ports/1/hw_counters");
            std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect::<Vec<_>>()
        })
        .collect();
    let size = get(addr);
    for _ in 0..20 {
        get(addr);
    }
    let (mut scrape, mut floor) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t = Instant::now();
        get(addr);
        scrape.push(t.elapsed());
        let t = Instant::now();
        let mut sum = 0u64;
        for p in &files {
            sum = sum.wrapping_add(std::fs::read_to_string(p).unwrap().trim().parse().unwrap_or(0));
        }
        std::hint::black_box(sum);
        floor.push(t.elapsed());
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", plugin.id())).unwrap();
    let hwm = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap_or("VmHWM: ?").to_string();
    let _ = plugin.kill();
    let _ = plugin.wait();
    scrape.sort();
    floor.sort();
    println!(
        "{runs} scrapes of 4 ERIs ({} counter files, {size} bytes of reply), 8 pods:",
        files.len()
    );
    println!("| | p50 | p95 |");
    println!("| --- | --- | --- |");
    println!(
        "| GET /metrics (device plugin) | {:.3} ms | {:.3} ms |",
        percentile(&scrape, 0.5),
        percentile(&scrape, 0.95)
    );
    println!(
        "| the counter files read, nothing else | {:.3} ms | {:.3} ms |",
        percentile(&floor, 0.5),
        percentile(&floor, 0.95)
    );
    println!("device plugin peak RSS: {}", hwm.trim_start_matches("VmHWM:").trim());
}
