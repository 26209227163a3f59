//! `NodePrepareResources` for one ERI, timed as kubelet experiences it: over the DRA socket (v1),
//! a fresh claim each run (so every run reads the claim, discovers the devices and writes a CDI
//! spec), against `erdma-dra-plugin`'s code in this process, the API server stand-in of the
//! tests on 127.0.0.1 and the `two` fixture host. Beside it, interleaved run by run: the same
//! claim's GET through kube's client alone (the API server's share of a prepare, which a real
//! API server makes larger or smaller), and `NodeUnprepareResources`. Used by bench/dra_prepare.sh.
//!
//!   cargo run --release --example dra_prepare -- [RUNS]      (needs root: mknod)
// An example has no API.
#![allow(unreachable_pub)]
use std::time::{Duration, Instant};

use erdma_kube::dra::{self, pb};
use erdma_testkit::apiserver::ApiServer;
use erdma_testkit::openapi::Schema;
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let f = erdma_testkit::Fixture::new("two", "log_level = \"warn\"");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let schema = Schema::load(
            &erdma_testkit::repo_root()
                .join("testdata/k8s/openapi-v3/apis__resource.k8s.io__v1_openapi.json"),
        )
        .unwrap();
        let api = ApiServer::start(schema).await;
        api.put(
            "/api/v1/nodes/node-a",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "uid": "5d7e0c1a-0000-4000-8000-00000000a0de"}}),
        );
        let client = kube::Client::try_from(kube::Config::new(api.url.parse().unwrap())).unwrap();
        let root = f.dir.path();
        let settings = dra::kubelet::Settings {
            driver: dra::DRIVER.into(),
            node: "node-a".into(),
            registry_dir: root.join("registry"),
            plugin_dir: root.join("plugin"),
            cdi_dir: root.join("cdi"),
            shares: 1,
            poll: Duration::from_millis(500),
        };
        let socket = settings.dra_socket();
        let config = erdma_oci_hook::config::Config::load_from(&f.config_path).unwrap();
        let driver = dra::kubelet::Driver {
            config,
            api: dra::apiserver::ApiServer::new(client.clone(), dra::DRIVER, "node-a"),
            settings,
        };
        tokio::spawn(dra::kubelet::run(driver));
        let mut channel = None;
        for _ in 0..200 {
            if let Ok(c) = erdma_kube::kubelet::unix_channel(&socket).await {
                channel = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut kubelet = pb::v1::dra_plugin_client::DraPluginClient::new(channel.expect("the DRA socket"));
        let claims = kube::Api::<k8s_openapi::api::resource::v1::ResourceClaim>::namespaced(client, "ns1");
        let (mut prep, mut unprep, mut get) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..runs + 10 {
            let uid = format!("3f1c2b7e-5d0a-4c1e-9a63-{i:012x}");
            let name = format!("claim-{i}");
            api.put(
                &format!("/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/{name}"),
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                       "metadata": {"name": name, "namespace": "ns1", "uid": uid},
                       "spec": {"devices": {"requests": [{"name": "eri", "exactly": {"deviceClassName": "erdma.aliyun.com"}}]}},
                       "status": {"allocation": {"devices": {"results": [
                           {"request": "eri", "driver": "erdma.aliyun.com", "pool": "node-a", "device": "erdma-1"}]}}}}),
            );
            let claim = pb::v1::Claim { namespace: "ns1".into(), name: name.clone(), uid: uid.clone() };
            let t = Instant::now();
            let a = kubelet
                .node_prepare_resources(pb::v1::NodePrepareResourcesRequest { claims: vec![claim.clone()] })
                .await
                .unwrap()
                .into_inner();
            let took = t.elapsed();
            assert_eq!(a.claims[&uid].error, "", "prepare failed");
            let t = Instant::now();
            claims.get(&name).await.unwrap();
            let took_get = t.elapsed();
            let t = Instant::now();
            let u = kubelet
                .node_unprepare_resources(pb::v1::NodeUnprepareResourcesRequest { claims: vec![claim] })
                .await
                .unwrap()
                .into_inner();
            let took_un = t.elapsed();
            assert_eq!(u.claims[&uid].error, "", "unprepare failed");
            if i >= 10 {
                prep.push(took);
                get.push(took_get);
                unprep.push(took_un);
            }
        }
        println!("dra_prepare: {runs} runs after 10 warm-up, one ERI per claim, `two` fixture host");
        println!("{:<40} {:>8} {:>8} {:>8}", "", "p50 ms", "p90 ms", "max ms");
        for (what, v) in [
            ("NodePrepareResources (1 claim, 1 ERI)", &mut prep),
            ("  of it: the claim's GET alone", &mut get),
            ("NodeUnprepareResources", &mut unprep),
        ] {
            v.sort();
            println!(
                "{what:<40} {:>8.3} {:>8.3} {:>8.3}",
                percentile(v, 0.5),
                percentile(v, 0.9),
                percentile(v, 1.0)
            );
        }
    });
}
