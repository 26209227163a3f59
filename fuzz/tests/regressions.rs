//! Every fuzz target on its seeds and on each input that once made it fail
//! (`fuzz/regressions/TARGET/`): each must return without panicking (hangs are the fuzzer's to find: `scripts/fuzz`). This is
//! what the normal test run keeps of the fuzzing; `scripts/fuzz` does the exploring.
#![forbid(unsafe_code)]
// A test binary has no API: its helpers are `pub` for the modules beside them.
#![allow(unreachable_pub)]
use std::panic::{self, AssertUnwindSafe};

use erdma_fuzz::{root, seeds, TARGETS};

#[test]
fn every_target_survives_its_seeds_and_regressions() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for t in TARGETS {
        let mut inputs = seeds(t);
        assert!(
            !inputs.is_empty(),
            "fuzz target {} has no seeds (fuzz/seeds/{0}/ or its list)",
            t.name
        );
        let dir = root().join("fuzz/regressions").join(t.name);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                inputs.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
        for (path, data) in inputs {
            let r = panic::catch_unwind(AssertUnwindSafe(|| (t.run)(&data)));
            ran += 1;
            if let Err(e) = r {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{}: {} panicked: {msg}", t.name, path.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
