//! `erdma-oci-hook stat`: live traffic per ERI, as `eadm stat -d DEV -l` shows it: receive and
//! transmit bytes and packets per second, their maximum, average and minimum over the session,
//! the totals since it began, drops, and the port's state beside them. [`Session::update`]
//! turns two readings of the counters ([`crate::counters`]) into rates; the caller reads,
//! sleeps and prints ([`render`], [`json_line`]).
//!
//! What the counters may do between two readings, and what a row then says:
//! - go backwards (the driver reloaded, the device was reset): a reset, as Prometheus takes it:
//!   the new value is what was counted since, so no rate is ever negative;
//! - a device or port disappears: its row says `gone` until it comes back, and its first
//!   reading then is a new start (no rate for that interval);
//! - a counter file cannot be read: that rate is unknown (`-`), never 0.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::counters::{Counter, PortSample};

/// The four rates a row shows.
const RATES: [(Counter, &str); 4] = [
    (Counter::RxBytes, "rx B/s"),
    (Counter::TxBytes, "tx B/s"),
    (Counter::RxPackets, "rx pkt/s"),
    (Counter::TxPackets, "tx pkt/s"),
];

/// Maximum, average and minimum of a rate over the session's intervals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    pub max: f64,
    pub avg: f64,
    pub min: f64,
    #[serde(skip)]
    sum: f64,
    #[serde(skip)]
    n: u64,
}

impl Spread {
    fn add(&mut self, v: f64) {
        if self.n == 0 {
            (self.max, self.min) = (v, v);
        }
        self.max = self.max.max(v);
        self.min = self.min.min(v);
        self.sum += v;
        self.n += 1;
        self.avg = self.sum / self.n as f64;
    }
}

/// One port's line for an interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// `ACTIVE`, `DOWN`…, or `gone` when the port was not found this time.
    pub state: String,
    pub mtu: Option<u32>,
    /// Per second over the interval, by counter (rx/tx bytes and packets); absent when unknown
    /// (the first reading, a counter that did not read).
    pub rates: BTreeMap<Counter, f64>,
    /// Over every interval of the session so far.
    pub spread: BTreeMap<Counter, Spread>,
    /// Counted since the session began (resets included, as increases since the reset).
    pub totals: BTreeMap<Counter, u64>,
    /// Packets dropped per second over the interval, transmit and receive.
    pub tx_drops: Option<f64>,
    pub rx_drops: Option<f64>,
    /// A counter went backwards this interval (the driver's counters restarted).
    pub reset: bool,
    /// Counter files that could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

#[derive(Debug, Default)]
struct Port {
    last: Option<(f64, PortSample)>,
    spread: BTreeMap<Counter, Spread>,
    totals: BTreeMap<Counter, u64>,
    netdev: Option<String>,
    mtu: Option<u32>,
}

/// The counters' history over a session: what each port read last, and the spread of its
/// rates.
#[derive(Debug, Default)]
pub struct Session {
    ports: BTreeMap<(String, u32), Port>,
}

/// What a counter counted between two readings: the difference, or after a reset (the value
/// went backwards) the new value, as Prometheus' `increase` takes it.
pub fn increase(before: u64, now: u64) -> (u64, bool) {
    if now >= before {
        (now - before, false)
    } else {
        (now, true)
    }
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// Takes a reading made at `now` (seconds, monotonic) and returns a row per port seen in
    /// this session, sorted by device and port.
    pub fn update(&mut self, now: f64, samples: Vec<PortSample>) -> Vec<Row> {
        let mut seen = Vec::new();
        let mut rows = Vec::new();
        for s in samples {
            let key = (s.device.clone(), s.port);
            seen.push(key.clone());
            let port = self.ports.entry(key).or_default();
            port.netdev.clone_from(&s.netdev);
            port.mtu = s.mtu;
            let mut row = Row {
                device: s.device.clone(),
                port: s.port,
                netdev: s.netdev.clone(),
                state: s.state_name.clone(),
                mtu: s.mtu,
                rates: BTreeMap::new(),
                spread: BTreeMap::new(),
                totals: BTreeMap::new(),
                tx_drops: None,
                rx_drops: None,
                reset: false,
                unreadable: s.unreadable.clone(),
            };
            if let Some((then, before)) = &port.last {
                let dt = now - then;
                if dt > 0.0 {
                    let per_second = |before: Option<u64>, now: Option<u64>, reset: &mut bool| {
                        let (inc, r) = increase(before?, now?);
                        *reset |= r;
                        Some((inc, inc as f64 / dt))
                    };
                    for c in Counter::ALL {
                        let Some((inc, rate)) = per_second(before.get(c), s.get(c), &mut row.reset)
                        else {
                            continue;
                        };
                        *port.totals.entry(c).or_default() += inc;
                        if RATES.iter().any(|(r, _)| *r == c) {
                            row.rates.insert(c, rate);
                            port.spread.entry(c).or_default().add(rate);
                        }
                    }
                    row.tx_drops = per_second(
                        before.sum(&Counter::TX_DROPS),
                        s.sum(&Counter::TX_DROPS),
                        &mut row.reset,
                    )
                    .map(|(_, r)| r);
                    row.rx_drops = per_second(
                        before.sum(&Counter::RX_DROPS),
                        s.sum(&Counter::RX_DROPS),
                        &mut row.reset,
                    )
                    .map(|(_, r)| r);
                }
            }
            row.spread = port.spread.clone();
            row.totals = port.totals.clone();
            port.last = Some((now, s));
            rows.push(row);
        }
        // Ports seen before and not now: gone; their next reading starts afresh.
        for (key, port) in self.ports.iter_mut().filter(|(k, _)| !seen.contains(k)) {
            port.last = None;
            rows.push(Row {
                device: key.0.clone(),
                port: key.1,
                netdev: port.netdev.clone(),
                state: "gone".into(),
                mtu: port.mtu,
                rates: BTreeMap::new(),
                spread: port.spread.clone(),
                totals: port.totals.clone(),
                tx_drops: None,
                rx_drops: None,
                reset: false,
                unreadable: Vec::new(),
            });
        }
        rows.sort_by(|a, b| (&a.device, a.port).cmp(&(&b.device, b.port)));
        rows
    }
}

/// A number with an SI prefix, three significant digits (`1.23 G`).
pub fn si(v: f64) -> String {
    const PREFIXES: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    let mut v = v;
    let mut i = 0;
    while v.abs() >= 999.5 && i < PREFIXES.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    let digits = if v.abs() >= 99.95 || i == 0 && v.fract() == 0.0 {
        0
    } else if v.abs() >= 9.995 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", PREFIXES[i]).trim_end().to_string()
}

/// The table for a terminal: one block per port, the interval's rates with the session's
/// maximum, average and minimum, totals, drops and state.
pub fn render(rows: &[Row], interval: f64, elapsed: f64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "erdma-oci-hook stat: every {} s, {} s so far (Ctrl-C stops)",
        si(interval),
        si(elapsed.round())
    );
    if rows.is_empty() {
        out.push_str("no eRDMA device found\n");
        return out;
    }
    for r in rows {
        let _ = writeln!(
            out,
            "\n{}/{}  {}  {}{}{}",
            r.device,
            r.port,
            r.netdev.as_deref().unwrap_or("-"),
            r.state,
            r.mtu.map(|m| format!("  mtu {m}")).unwrap_or_default(),
            if r.reset { "  (counters reset)" } else { "" }
        );
        let _ = writeln!(
            out,
            "  {:<9} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "", "now", "max", "avg", "min", "total"
        );
        for (c, label) in RATES {
            let now = r.rates.get(&c).map_or("-".to_string(), |v| si(*v));
            let (max, avg, min) = match r.spread.get(&c) {
                Some(s) => (si(s.max), si(s.avg), si(s.min)),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let total = r.totals.get(&c).map_or("-".to_string(), |v| si(*v as f64));
            let _ =
                writeln!(out, "  {label:<9} {now:>10} {max:>10} {avg:>10} {min:>10} {total:>10}");
        }
        let drops = |d: Option<f64>| d.map_or("-".to_string(), si);
        let _ = writeln!(
            out,
            "  drops/s   tx {}  rx {}{}",
            drops(r.tx_drops),
            drops(r.rx_drops),
            if r.unreadable.is_empty() {
                String::new()
            } else {
                format!("  unreadable: {}", r.unreadable.join(", "))
            }
        );
    }
    out
}

/// One JSON line for an interval: the time (seconds since the epoch) and the rows.
pub fn json_line(rows: &[Row], unix_time: f64) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        time: f64,
        ports: &'a [Row],
    }
    serde_json::to_string(&Line { time: unix_time, ports: rows }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(device: &str, values: &[(&str, u64)]) -> PortSample {
        PortSample {
            device: device.into(),
            port: 1,
            netdev: Some("eth1".into()),
            state: 4,
            state_name: "ACTIVE".into(),
            phys_state: Some("5: LinkUp".into()),
            mtu: Some(8500),
            counters: values.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            unreadable: Vec::new(),
        }
    }

    #[test]
    fn rates_spread_and_totals_over_a_session() {
        let mut s = Session::new();
        let names = |tx: u64, rx: u64| [("tx_bytes_cnt", tx), ("rx_bytes_cnt", rx)];
        let rows = s.update(0.0, vec![sample("erdma_0", &names(1000, 0))]);
        assert!(rows[0].rates.is_empty(), "no rate from one reading");
        let rows = s.update(2.0, vec![sample("erdma_0", &names(5000, 2000))]);
        assert_eq!(rows[0].rates[&Counter::TxBytes], 2000.0);
        assert_eq!(rows[0].rates[&Counter::RxBytes], 1000.0);
        assert!(!rows[0].rates.contains_key(&Counter::TxPackets), "not read: no rate");
        let rows = s.update(3.0, vec![sample("erdma_0", &names(11000, 2000))]);
        let tx = rows[0].spread[&Counter::TxBytes];
        assert_eq!((tx.max, tx.avg, tx.min), (6000.0, 4000.0, 2000.0));
        assert_eq!(rows[0].totals[&Counter::TxBytes], 10000);
        assert_eq!(rows[0].rates[&Counter::RxBytes], 0.0);
    }

    #[test]
    fn resets_disappearance_and_unreadable_counters() {
        let mut s = Session::new();
        s.update(
            0.0,
            vec![
                sample("erdma_0", &[("tx_bytes_cnt", 9000)]),
                sample("erdma_1", &[("hw_tx_bytes_cnt", 10)]),
            ],
        );
        // erdma_0's counter goes backwards (the driver reloaded): the new value is the increase.
        let rows = s.update(
            1.0,
            vec![
                sample("erdma_0", &[("tx_bytes_cnt", 300)]),
                sample("erdma_1", &[("hw_tx_bytes_cnt", 110)]),
            ],
        );
        assert!(rows[0].reset);
        assert_eq!(rows[0].rates[&Counter::TxBytes], 300.0);
        assert_eq!(rows[1].rates[&Counter::TxBytes], 100.0, "the out-of-tree driver's name");
        // erdma_1 disappears: gone, no rate; when it comes back, its first reading starts over.
        let rows = s.update(2.0, vec![sample("erdma_0", &[("tx_bytes_cnt", 400)])]);
        assert_eq!((rows[1].device.as_str(), rows[1].state.as_str()), ("erdma_1", "gone"));
        assert!(rows[1].rates.is_empty());
        let rows = s.update(
            3.0,
            vec![
                sample("erdma_0", &[("tx_bytes_cnt", 500)]),
                sample("erdma_1", &[("hw_tx_bytes_cnt", 5)]),
            ],
        );
        assert!(rows[1].rates.is_empty() && !rows[1].reset, "{:?}", rows[1]);
        assert_eq!(rows[1].totals[&Counter::TxBytes], 100, "the total keeps what was counted");
        // A counter that cannot be read: unknown, not zero.
        let mut odd = sample("erdma_0", &[]);
        odd.unreadable.push("tx_bytes_cnt".into());
        let rows = s.update(4.0, vec![odd, sample("erdma_1", &[("hw_tx_bytes_cnt", 5)])]);
        assert!(!rows[0].rates.contains_key(&Counter::TxBytes));
        assert!(render(&rows, 1.0, 4.0).contains("unreadable: tx_bytes_cnt"));
        assert!(rows.iter().all(|r| r.rates.values().all(|v| *v >= 0.0)));
    }

    #[test]
    fn numbers_read_as_eadm_prints_them() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(999.0), "999");
        assert_eq!(si(1234.0), "1.23 k");
        assert_eq!(si(12_345_678.0), "12.3 M");
        assert_eq!(si(123_456_789_012.0), "123 G");
        assert_eq!(si(0.5), "0.50");
        let line = json_line(&[], 1.5);
        assert_eq!(line, r#"{"time":1.5,"ports":[]}"#);
    }
}
