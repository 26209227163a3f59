//! `erdma-runtime`: thin; the work is in `erdma_oci_hook::runtime`.
fn main() {
    std::process::exit(erdma_oci_hook::runtime::main_with(std::env::args_os().skip(1).collect()));
}
