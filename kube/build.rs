//! Compiles the gRPC/protobuf APIs erdma-kit speaks into Rust, without protoc: protox (a
//! protobuf compiler in Rust) parses them into descriptors, which tonic-prost-build turns into
//! code, so `cargo install` needs nothing but cargo:
//! - `proto/deviceplugin_v1beta1.proto`: kubelet's device-plugin API (client and server);
//! - `proto/nri_v1alpha1.proto`: the NRI plugin API's messages (carried over ttrpc by `nri/`);
//! - `proto/cri_v1.proto`: the CRI runtime API, client only (the tests and the NRI bench drive
//!   containerd with it as kubelet does);
//! - `proto/podresources_v1.proto`: kubelet's PodResources API (client for the metrics' pod
//!   labels, server for the tests' kubelet stand-in);
//! - `proto/pluginregistration_v1.proto`, `proto/dra_v1.proto`, `proto/dra_v1beta1.proto`,
//!   `proto/dra_health_v1alpha1.proto`, `proto/dra_health_v1beta1.proto`: kubelet's plugin
//!   registration, DRA and DRA device-health APIs (server for `dra/`, client for the tests'
//!   kubelet stand-in). The health APIs' packages (`v1alpha1`, `v1beta1`) are as bare as the
//!   device-plugin API's (`v1beta1`), so their code goes to a directory of its own
//!   (`OUT_DIR/dra_health/`) instead of overwriting it.
//!
//! It also sets the `--version` line (version, commit, target: erdma-buildinfo).
#![forbid(unsafe_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    erdma_buildinfo::emit();
    println!("cargo:rerun-if-changed=proto");
    let fds = |file: &str| protox::compile([file], ["proto"]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds("proto/deviceplugin_v1beta1.proto")?)?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(fds("proto/nri_v1alpha1.proto")?)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(fds("proto/cri_v1.proto")?)?;
    for file in [
        "proto/pluginregistration_v1.proto",
        "proto/dra_v1.proto",
        "proto/dra_v1beta1.proto",
        "proto/podresources_v1.proto",
    ] {
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .compile_fds(fds(file)?)?;
    }
    let health = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("dra_health");
    std::fs::create_dir_all(&health)?;
    for file in ["proto/dra_health_v1alpha1.proto", "proto/dra_health_v1beta1.proto"] {
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .out_dir(&health)
            .compile_fds(fds(file)?)?;
    }
    Ok(())
}
