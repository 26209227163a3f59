//! Every fuzz target in one libFuzzer binary; `ERDMA_FUZZ_TARGET` names the one to run
//! (`erdma-fuzz --list` lists them).
#![no_main]
use std::sync::OnceLock;

fn target() -> &'static erdma_fuzz::Target {
    static T: OnceLock<&'static erdma_fuzz::Target> = OnceLock::new();
    T.get_or_init(|| {
        let name = std::env::var("ERDMA_FUZZ_TARGET").unwrap_or_default();
        erdma_fuzz::find(&name).unwrap_or_else(|| panic!("ERDMA_FUZZ_TARGET=`{name}` names no fuzz target (erdma-fuzz --list)"))
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    (target().run)(data);
});
