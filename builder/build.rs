//! The `--version` line: version, commit and target (erdma-buildinfo).
#![forbid(unsafe_code)]
fn main() {
    erdma_buildinfo::emit();
}
