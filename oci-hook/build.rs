//! Compiles the kubelet device-plugin API (`proto/deviceplugin_v1beta1.proto`) into Rust with
//! protoc (Debian's `protobuf-compiler`, installed by scripts/setup).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/deviceplugin_v1beta1.proto");
    tonic_prost_build::configure().build_client(true).build_server(true).compile_protos(&["proto/deviceplugin_v1beta1.proto"], &["proto"])?;
    Ok(())
}
