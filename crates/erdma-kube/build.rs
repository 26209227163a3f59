//! Compiles the gRPC/protobuf APIs erdma-kit speaks into Rust with protoc (Debian's
//! `protobuf-compiler`, installed by scripts/setup):
//! - `proto/deviceplugin_v1beta1.proto`: kubelet's device-plugin API (client and server);
//! - `proto/nri_v1alpha1.proto`: the NRI plugin API's messages (carried over ttrpc by `nri/`);
//! - `proto/cri_v1.proto`: the CRI runtime API, client only (the tests and the NRI bench drive
//!   containerd with it as kubelet does).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/deviceplugin_v1beta1.proto"], &["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_protos(&["proto/nri_v1alpha1.proto"], &["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_protos(&["proto/cri_v1.proto"], &["proto"])?;
    Ok(())
}
