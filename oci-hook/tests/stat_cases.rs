//! `erdma-oci-hook stat` over the fixture hosts' counters (`testdata/sysfs/*/…/hw_counters`,
//! testdata/sysfs/README.md "Counters"): the rates it prints as the counters move under it,
//! under both drivers' names, and what it does with counters that go backwards, a device that
//! disappears, a file that does not read, and a device it does not know. No root needed.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use serde_json::Value;

use crate::support::{self, Fixture};

/// The hw_counters file of `device`'s port 1 in the fixture's copy of sysfs.
fn counter(fx: &Fixture, device: &str, name: &str) -> PathBuf {
    let class = fx.sysfs.join("class/infiniband").join(device);
    std::fs::canonicalize(class).unwrap().join("ports/1/hw_counters").join(name)
}

fn read_u64(p: &Path) -> u64 {
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

/// `stat --json` started: its output read line by line.
struct Running {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Running {
    fn start(fx: &Fixture, args: &[&str]) -> Running {
        let mut child = fx
            .command("erdma-oci-hook")
            .arg("stat")
            .arg("--json")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Running { child, lines }
    }

    fn next(&mut self) -> Value {
        let line = self.lines.next().expect("a line").unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn finish(mut self) {
        assert!(self.lines.next().is_none(), "no more lines after --count");
        assert!(self.child.wait().unwrap().success());
    }
}

fn port<'v>(line: &'v Value, device: &str) -> &'v Value {
    line["ports"].as_array().unwrap().iter().find(|p| p["device"] == device).unwrap()
}

/// `interval`, as the rates say the program timed it, is the time between its two lines (each
/// line's `time`, taken with its reading) within 0.1 s.
fn assert_near_lines(interval: f64, first: &Value, second: &Value) {
    let between = second["time"].as_f64().unwrap() - first["time"].as_f64().unwrap();
    assert!((interval - between).abs() < 0.1, "{interval} s against {between} s between lines");
}

/// Rates from two readings a second apart while the counters move between them, under the
/// out-of-tree driver's names (`two`) and upstream's (`upstream`).
#[test]
fn rates_follow_the_counters_under_both_names() {
    for (scenario, prefix) in [("two", "hw_"), ("upstream", "")] {
        let fx = Fixture::sysfs_only(scenario, "");
        let tx = counter(&fx, "erdma_0", &format!("{prefix}tx_bytes_cnt"));
        let rx_pkts = counter(&fx, "erdma_0", &format!("{prefix}rx_packets_cnt"));
        let (tx0, rx0) = (read_u64(&tx), read_u64(&rx_pkts));
        let mut run = Running::start(&fx, &["--count", "1", "--interval", "1"]);
        let first = run.next();
        let p = port(&first, "erdma_0");
        assert_eq!(p["state"], "ACTIVE", "{first}");
        assert_eq!(p["netdev"], "eth0", "{first}");
        assert!(p["rates"].as_object().unwrap().is_empty(), "one reading, no rate: {first}");
        // 3 GB sent and 2 M packets received in the interval.
        std::fs::write(&tx, format!("{}\n", tx0 + 3_000_000_000)).unwrap();
        std::fs::write(&rx_pkts, format!("{}\n", rx0 + 2_000_000)).unwrap();
        let second = run.next();
        run.finish();
        let p = port(&second, "erdma_0");
        let rate = |c: &str| p["rates"][c].as_f64().unwrap_or_else(|| panic!("{c}: {second}"));
        // Each rate is the counter's increase over the interval as the program timed it: at
        // least the second it slept (a slow start makes it no shorter), about the time between
        // its two lines, and the same for every counter.
        let interval = 3.0e9 / rate("tx_bytes");
        assert!(interval >= 1.0, "{scenario}: {interval} s: {second}");
        assert_near_lines(interval, &first, &second);
        assert!((rate("rx_packets") * interval - 2.0e6).abs() < 1.0, "{scenario}: {second}");
        assert_eq!(rate("rx_bytes"), 0.0, "{second}");
        assert_eq!(p["totals"]["tx_bytes"], 3_000_000_000u64, "{second}");
        assert_eq!(p["reset"], false);
    }
}

/// A counter that goes backwards (the driver reloaded), a device whose directory goes away and
/// a counter file that stops reading: no negative rate, `gone`, an unknown rate.
#[test]
fn resets_gone_devices_and_unreadable_counters() {
    let fx = Fixture::sysfs_only("two", "");
    let tx0 = counter(&fx, "erdma_0", "hw_tx_bytes_cnt");
    let rx0 = counter(&fx, "erdma_0", "hw_rx_bytes_cnt");
    let mut run = Running::start(&fx, &["--count", "1", "--interval", "1"]);
    let first = run.next();
    std::fs::write(&tx0, "1000\n").unwrap();
    std::fs::write(&rx0, "not a number\n").unwrap();
    std::fs::remove_file(fx.sysfs.join("class/infiniband/erdma_1")).unwrap();
    let line = run.next();
    run.finish();
    let p = port(&line, "erdma_0");
    assert_eq!(p["reset"], true, "{line}");
    // The new value over the interval.
    let interval = 1000.0 / p["rates"]["tx_bytes"].as_f64().unwrap();
    assert!(interval >= 1.0, "{interval} s: {line}");
    assert_near_lines(interval, &first, &line);
    assert!(p["rates"].get("rx_bytes").is_none(), "{line}");
    assert_eq!(p["unreadable"], serde_json::json!(["hw_rx_bytes_cnt"]), "{line}");
    assert_eq!(port(&line, "erdma_1")["state"], "gone", "{line}");
}

/// The table for a terminal-less run, `-d` for one device, and a device the host has not.
#[test]
fn the_table_and_bad_devices() {
    let fx = Fixture::sysfs_only("rocep-ens5", "");
    let out = fx
        .command("erdma-oci-hook")
        .args(["stat", "-d", "rocep26s0", "--count", "1", "--interval", "0.2"])
        .output()
        .unwrap();
    support::assert_success("stat -d rocep26s0", &out);
    let text = support::text(&out.stdout);
    assert!(text.contains("rocep26s0/1  ens5  ACTIVE  mtu 8500"), "{text}");
    assert!(!text.contains("rocep156s0"), "{text}");
    for label in ["rx B/s", "tx B/s", "rx pkt/s", "tx pkt/s", "drops/s"] {
        assert!(text.contains(label), "{label}: {text}");
    }
    let out = fx.command("erdma-oci-hook").args(["stat", "-d", "erdma_9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = support::text(&out.stderr);
    assert!(
        err.contains("no eRDMA device erdma_9 on this host (there are: rocep156s0, rocep26s0)"),
        "{err}"
    );
    let out = fx.command("erdma-oci-hook").args(["stat", "--interval", "0"]).output().unwrap();
    assert!(!out.status.success() && support::text(&out.stderr).contains("--interval"));
}
