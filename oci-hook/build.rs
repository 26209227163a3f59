//! The `--version` line: version, commit and target (erdma-buildinfo).
fn main() {
    erdma_buildinfo::emit();
}
