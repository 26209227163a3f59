//! `plan --json` and `build --json` as users' scripts read them, held in snapshots for both
//! package backends: a change in the code behind them (the backend interface, the crates
//! split) shows here as a changed report. Filtered: temporary paths, digests, times, ports,
//! key fingerprints and the sizes of packages built per run.
use std::path::Path;

use serde_json::Value;

use super::build_cached as build;
use super::rpm::Setup;
use crate::support;
use crate::support::rpm_repo::BaseKind;

use crate::support::testdata;

/// The report as text, with what differs from run to run replaced.
fn stable(report: &Value, tmp: &Path) -> String {
    let text = serde_json::to_string_pretty(report).unwrap();
    let filters: Vec<(String, &str)> = vec![
        (regex::escape(&tmp.to_string_lossy()), "[TMP]"),
        (regex::escape(&testdata("")), "[TESTDATA]/"),
        (regex::escape(&support::test_cache().to_string_lossy()), "[CACHE]"),
        // The fixture bases the tests cache under the target directory, wherever that is.
        (r#"oci:[^"]*/erdma-test-cache/([a-z0-9-]+)-[0-9a-f]{16}/"#.into(), "oci:[CACHE]/$1/"),
        (r"sha256:[0-9a-f]{64}".into(), "sha256:[DIGEST]"),
        (r#""[0-9a-f]{64}""#.into(), r#""[SHA256]""#),
        (r"\b[0-9A-F]{40}\b".into(), "[FINGERPRINT]"),
        (r"127\.0\.0\.1:[0-9]+".into(), "127.0.0.1:[PORT]"),
        (
            r#"("(size|downloaded_bytes|bytes_downloaded|bytes_uploaded|archive_size)": )[0-9]+"#
                .into(),
            "$1[N]",
        ),
        (r#"("[a-z_]*(seconds|_ms|time)": )[0-9.]+"#.into(), "$1[T]"),
        (r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z".into(), "[TIME]"),
    ];
    let mut out = text;
    for (re, with) in &filters {
        out = regex_replace(&out, re, with);
    }
    out
}

fn regex_replace(text: &str, re: &str, with: &str) -> String {
    regex::Regex::new(re).unwrap().replace_all(text, with).into_owned()
}

#[test]
fn apt_plan_and_build_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let mini = format!("oci:{}:latest", testdata("images/debian12-mini"));
    let mirror = format!("file://{}", testdata("repos/debian-demo"));
    let key = testdata("repos/debian-demo/demo-key.asc");
    let out = support::run_build([
        "plan",
        "--json",
        "--base",
        &mini,
        "--mirror",
        &mirror,
        "--keyring",
        &key,
    ]);
    support::assert_success("plan", &out);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    insta::assert_snapshot!("apt_plan", stable(&plan, tmp.path()));
    let output = format!("oci:{}:demo", tmp.path().join("out").display());
    let report = build(
        &["--base", &mini, "--mirror", &mirror, "--keyring", &key, "--output", &output],
        &cache,
    );
    insta::assert_snapshot!("apt_build", stable(&report, tmp.path()));
}

/// An Alibaba Cloud Linux 3 base with Mellanox OFED's packages: installs, replacements and
/// removals, rpm's vocabulary in the report.
#[test]
fn rpm_plan_and_build_reports() {
    let setup = Setup::new(BaseKind::Alinux3BdbOfed);
    let out = support::run_build(setup.args("plan"));
    support::assert_success("plan (rpm)", &out);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    insta::assert_snapshot!("rpm_plan", stable(&plan, setup.tmp.path()));
    let (report, _layout) = setup.build(&[]);
    insta::assert_snapshot!("rpm_build", stable(&report, setup.tmp.path()));
}
