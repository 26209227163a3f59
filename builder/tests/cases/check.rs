//! `erdma-build check IMAGE`: readiness reports on images that are and are not ready.
use std::process::Output;

use serde_json::Value;

use super::nccl::{check_status, demo_archive_args, mini, nvidia, s};
use crate::support::nccl::{self as nv, Extras};
use crate::support::{self, apt_repo, debs};

fn check(args: &[&str]) -> (Output, Value) {
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = support::run_build(&all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check --json ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

fn failed(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_pai_ready_image_is_ready_and_its_base_is_not() {
    if !apt_repo::require_tools() {
        return;
    }
    let nvr = nvidia(&[]);
    let base = nv::extend(
        &mini(),
        &nvr.tmp.path().join("base"),
        "latest",
        &Extras { cuda: Some("12.4.1"), python3: true, ..Default::default() },
    );

    // What a user reads (snapshot, with the temporary path filtered).
    let human = support::run_build(["check", &base.reference(), "--profile", "pai-dlc"]);
    assert_eq!(human.status.code(), Some(1));
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex::escape(&s(&nvr.tmp.path().join("base"))), "[BASE]");
    settings.bind(|| {
        insta::assert_snapshot!("check_pai_dlc_not_ready", String::from_utf8_lossy(&human.stdout))
    });

    let (out, before) = check(&[&base.reference(), "--profile", "pai-dlc"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(before["ready"], false);
    assert_eq!(
        failed(&before),
        ["erdma-provider", "libibverbs", "librdmacm", "nccl"],
        "{before:#}"
    );
    assert_eq!(check_status(&before, "cuda"), "ok");
    assert_eq!(check_status(&before, "python3"), "ok");

    let layout = nvr.tmp.path().join("out");
    let mut args: Vec<String> = [
        "build",
        "--quiet",
        "--base",
        &base.reference(),
        "--nccl",
        "--profile",
        "pai-dlc",
        "--output",
        &format!("oci:{}:pai", s(&layout)),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(nvr.args());
    args.extend(demo_archive_args());
    support::assert_success("erdma-build build", &support::run_build(&args));

    let built = format!("oci:{}:pai", s(&layout));
    let (out, after) = check(&[&built, "--profile", "pai-dlc"]);
    assert_eq!(out.status.code(), Some(0), "{after:#}");
    assert_eq!(after["ready"], true);
    assert_eq!(after["profile"], "pai-dlc");
    for id in [
        "erdma-provider",
        "libibverbs",
        "librdmacm",
        "rdma-core-build",
        "mellanox-ofed",
        "cuda",
        "nccl",
        "python3",
        "nccl-env",
    ] {
        assert_eq!(check_status(&after, id), "ok", "{id}: {after:#}");
    }
    assert_eq!(after["facts"]["rdma"]["packages"]["libibverbs1"], "44.0-2");
    assert_eq!(after["facts"]["system_nccl"]["cuda"], "12.4");
    assert_eq!(after["nccl_env"]["NCCL_IB_HCA"], "erdma");

    // The human report: one line per check, then the verdict.
    let human = support::run_build(["check", &built, "--profile", "pai-dlc"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(human.status.success(), "{text}");
    assert!(text.contains("ok   nccl             NCCL 2.21.5+cuda12.4 at /usr/lib/x86_64-linux-gnu/libnccl.so.2 (libnccl2 2.21.5-1+cuda12.4)"), "{text}");
    assert!(text.trim_end().ends_with("(profile pai-dlc): ready (0 failed, 0 warnings)"), "{text}");

    // Outside PAI-DLC the same image is ready too, with PAI's host data called out.
    let (out, plain) = check(&[&built]);
    assert_eq!(out.status.code(), Some(0), "{plain:#}");
    assert_eq!(plain["profile"], Value::Null);
    let host: Vec<&str> = plain["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "nccl-host-env" && c["status"] == "warn")
        .map(|c| c["message"].as_str().unwrap())
        .collect();
    assert_eq!(host.len(), 3, "{plain:#}");
    assert!(
        host[0].starts_with("NCCL_SOCKET_IFNAME=eth0 is host data")
            && host[1].starts_with("NCCL_IB_HCA=erdma is host data")
            && host[2].starts_with("NCCL_IB_GID_INDEX=1 is host data"),
        "{host:?}"
    );
    assert_eq!(check_status(&plain, "nccl-env"), "ok");

    // PAI-DLC needs CUDA 12.1: an 11.8 image with everything else is not ready for it, and is
    // for plain eRDMA.
    let old_cuda = nv::extend(
        &mini(),
        &nvr.tmp.path().join("cuda11"),
        "latest",
        &Extras { cuda: Some("11.8.0"), cuda_in_env: true, python3: true, ..Default::default() },
    );
    let (_, r) = check(&[&old_cuda.reference(), "--profile", "pai-dlc"]);
    assert!(failed(&r).contains(&"cuda".to_string()), "{r:#}");
}

#[test]
fn an_ngc_like_image_with_ofed_and_old_pip_nccl_is_not_ready_for_both_reasons() {
    if !debs::require_ngc_like() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ngc = debs::ngc_like_base(&tmp.path().join("ngc"));
    let image = nv::extend(
        &ngc,
        &tmp.path().join("ngc-py"),
        "latest",
        &Extras {
            cuda: Some("12.2.2"),
            cuda_in_env: true,
            python3: true,
            pip_nccl: Some(("2.18.1", "12.1")),
            torch: true,
            env: vec![("NCCL_IB_HCA", "mlx5")],
            ..Default::default()
        },
    );
    let (out, r) = check(&[&image.reference()]);
    assert_eq!(out.status.code(), Some(1), "{r:#}");
    let fails = failed(&r);
    for want in ["mellanox-ofed", "nccl", "nccl-env"] {
        assert!(fails.contains(&want.to_string()), "{want} in {fails:?}");
    }
    let find =
        |id: &str| r["checks"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap().clone();
    let ofed = find("mellanox-ofed");
    assert!(
        ofed["message"].as_str().unwrap().contains(debs::OFED_VERSION)
            && ofed["message"]
                .as_str()
                .unwrap()
                .contains("/etc/apt/sources.list.d/mellanox_mlnx_ofed.list"),
        "{ofed}"
    );
    let nccl = find("nccl");
    assert!(nccl["message"].as_str().unwrap().contains("NCCL 2.18.1+cuda12.1 at /usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2; PyTorch loads the pip one"), "{nccl}");
    assert_eq!(nccl["hint"], "pip install -U nvidia-nccl-cu12");
    assert_eq!(r["facts"]["torch"]["loads"], "python");
    assert!(find("nccl-env")["message"]
        .as_str()
        .unwrap()
        .contains("NCCL_IB_HCA=mlx5 excludes the eRDMA devices"));
}

/// The offline demo (Debian 12 mini with the eRDMA packages from testdata) built into
/// `oci:DIR:demo` with `extra` arguments.
fn demo_image(dir: &std::path::Path, extra: &[&str]) -> String {
    let reference = format!("oci:{}:demo", s(dir));
    let mut args: Vec<String> = [
        "build",
        "--quiet",
        "--base",
        &format!("oci:{}:latest", crate::support::testdata("images/debian12-mini")),
        "--output",
        &reference,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(demo_archive_args());
    args.extend(extra.iter().map(|a| a.to_string()));
    support::assert_success("erdma-build build", &support::run_build(&args));
    reference
}

#[test]
fn host_data_baked_into_an_image_is_a_warning_outside_pai_dlc() {
    let tmp = tempfile::tempdir().unwrap();

    // A default build carries no host data: nothing to warn about.
    let plain = demo_image(&tmp.path().join("plain"), &[]);
    let (out, r) = check(&[&plain]);
    assert_eq!((out.status.code(), &r["ready"]), (Some(0), &Value::Bool(true)), "{r:#}");
    assert_eq!(check_status(&r, "nccl-env"), "ok");
    assert_eq!(check_status(&r, "nccl-host-env"), "ok");
    assert!(r["nccl_env"].get("NCCL_SOCKET_IFNAME").is_none(), "{r:#}");

    // One baked by hand: a warning saying what breaks where; still ready.
    let baked = demo_image(&tmp.path().join("baked"), &["-e", "NCCL_SOCKET_IFNAME=eth0"]);
    let (out, r) = check(&[&baked]);
    assert_eq!(out.status.code(), Some(0), "{r:#}");
    assert_eq!(r["ready"], true);
    assert_eq!(r["profile"], Value::Null);
    let host: Vec<&Value> =
        r["checks"].as_array().unwrap().iter().filter(|c| c["id"] == "nccl-host-env").collect();
    assert_eq!(host.len(), 1, "{r:#}");
    assert_eq!(host[0]["status"], "warn");
    assert_eq!(host[0]["message"], "NCCL_SOCKET_IFNAME=eth0 is host data: on a host without eth0 every NCCL job stops at start (\"Bootstrap : no socket interface found\")");
    assert!(
        host[0]["hint"].as_str().unwrap().starts_with(
            "leave it to erdma-oci-hook, which derives it per container, or set it at run time"
        ),
        "{r:#}"
    );

    // What a user reads.
    let human = support::run_build(["check", &baked]);
    assert_eq!(human.status.code(), Some(0));
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex::escape(&s(&tmp.path().join("baked"))), "[IMAGE]");
    settings.add_filter(r"x86_64-linux-gnu|aarch64-linux-gnu", "[TRIPLET]");
    settings.bind(|| {
        insta::assert_snapshot!("check_host_data_baked", String::from_utf8_lossy(&human.stdout))
    });

    // PAI-DLC's hosts have eth0: the profile expects it, and asks for its other two.
    let (out, r) = check(&[&baked, "--profile", "pai-dlc"]);
    assert_eq!(r["profile"], "pai-dlc");
    assert_eq!(out.status.code(), Some(1), "no CUDA, NCCL or Python in the demo: {r:#}");
    assert!(!r["checks"].as_array().unwrap().iter().any(|c| c["id"] == "nccl-host-env"), "{r:#}");
    let env = r["checks"].as_array().unwrap().iter().find(|c| c["id"] == "nccl-env").unwrap();
    assert_eq!(
        (env["status"].as_str(), env["message"].as_str()),
        (Some("warn"), Some("not set: NCCL_IB_GID_INDEX NCCL_IB_HCA")),
        "{r:#}"
    );
}

#[test]
fn an_image_that_cannot_be_read_exits_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out =
        support::run_build(["check", &format!("oci:{}:none", s(&tmp.path().join("missing")))]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // Timed step lines (`[  0.01s] reading …`) may come first in a log; then the error.
    let first = err.lines().find(|l| !l.starts_with('[')).unwrap_or_default();
    assert!(first.starts_with("error: "), "{err}");
    assert!(out.stdout.is_empty());
}
