//! `erdma-fuzz`: runs every fuzz target (or those named) for a time, on stable Rust: each input a
//! seed from the real test files, mutated (bit flips, interesting bytes, inserted tokens, cut,
//! duplicated and spliced ranges). Not coverage-guided: `scripts/fuzz` uses libFuzzer where it
//! can be built, and this where it cannot.
//!
//! A panic is a crash: the input is written to `fuzz/artifacts/TARGET/crash-HASH`, counted, and
//! the run goes on. An input that takes longer than `--hang-ms` is a hang: written as
//! `hang-HASH`, and the process stops (a running call cannot be interrupted). Exit 1 when
//! anything was found.
//!
//!   erdma-fuzz [--seconds 10] [--seed 1] [--hang-ms 10000] [--json] [TARGET…]
#![forbid(unsafe_code)]
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use erdma_fuzz::{find, root, seeds, Rng, Target, TARGETS};

const TOKENS: &[&[u8]] = &[
    b"\n",
    b"\n\n",
    b": ",
    b"=",
    b" ",
    b"\t",
    b"-",
    b"..",
    b"/",
    b"../",
    b"\0",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"<",
    b">",
    b"</",
    b"-----BEGIN PGP SIGNED MESSAGE-----\n",
    b"-----BEGIN PGP SIGNATURE-----\n",
    b"0",
    b"4294967295",
    b"18446744073709551615",
    b"-1",
    b"99999999999999999999",
    b"~",
    b"+",
    b":",
    b"||",
    b"(",
    b")",
    b"|",
    b"!",
    b"\xff\xff\xff\xff",
    b"\x00\x00\x00\x00",
    b"\x8e\xad\xe8\x01",
    b"!<arch>\n",
    b"ustar\0",
    b".wh.",
    b".wh..wh..opq",
    b"\xc3\x28",
    b"%",
    b"*",
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..1 + rng.below(6) {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = [0u8, 0xff, 0x7f, 0x80, b'0', b'9', b'\n', b' '][rng.below(8)];
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                let i = rng.below(len + 1);
                input.splice(i..i, t.iter().copied());
            }
            3 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(64)).min(len);
                input.drain(a..b);
            }
            4 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(256)).min(len);
                let chunk = input[a..b].to_vec();
                let at = rng.below(len + 1);
                input.splice(at..at, chunk);
            }
            5 if !other.is_empty() => {
                let a = rng.below(other.len());
                let b = (a + 1 + rng.below(512)).min(other.len());
                let at = rng.below(len + 1);
                input.splice(at..at, other[a..b].iter().copied());
            }
            6 if len > 0 => input.truncate(rng.below(len)),
            7 if len >= 4 => {
                // A length or count field: set four bytes to an extreme.
                let i = rng.below(len - 3);
                let v: [u8; 4] =
                    [[0xff; 4], [0; 4], [0x7f, 0xff, 0xff, 0xff], [0, 0, 0x10, 0]][rng.below(4)];
                input[i..i + 4].copy_from_slice(&v);
            }
            _ => {
                let n = 1 + rng.below(16);
                let i = rng.below(len + 1);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                input.splice(i..i, bytes);
            }
        }
        if input.len() > 8 << 20 {
            input.truncate(8 << 20);
        }
    }
}

fn hash(data: &[u8]) -> String {
    // FNV-1a: a name for the artifact, not a security property.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

fn artifact(target: &str, kind: &str, data: &[u8]) -> PathBuf {
    let dir = root().join("fuzz/artifacts").join(target);
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{kind}-{}", hash(data)));
    let _ = std::fs::write(&p, data);
    p
}

struct Outcome {
    name: &'static str,
    execs: u64,
    crashes: Vec<(PathBuf, String)>,
    slowest: Duration,
    seeds: usize,
}

fn fuzz(t: &'static Target, budget: Duration, seed: u64, hang: Duration) -> Outcome {
    let corpus: Vec<Vec<u8>> = {
        let mut c: Vec<Vec<u8>> = seeds(t).into_iter().map(|(_, b)| b).collect();
        if c.is_empty() {
            c.push(Vec::new());
        }
        c
    };
    let n_seeds = corpus.len();
    // The watchdog: what runs now, since when (ms since `epoch`; 0 = nothing).
    let epoch = Instant::now();
    let started = Arc::new(AtomicU64::new(0));
    let current = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicU64::new(0));
    {
        let (started, current, done) =
            (Arc::clone(&started), Arc::clone(&current), Arc::clone(&done));
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            if done.load(Ordering::Relaxed) == 1 {
                return;
            }
            let s = started.load(Ordering::Relaxed);
            if s != 0 && epoch.elapsed().as_millis() as u64 > s + hang.as_millis() as u64 {
                let input = current.lock().map(|c| c.clone()).unwrap_or_default();
                let p = artifact(t.name, "hang", &input);
                eprintln!(
                    "erdma-fuzz: {}: an input ran for more than {} ms: {}",
                    t.name,
                    hang.as_millis(),
                    p.display()
                );
                std::process::exit(1);
            }
        });
    }
    let mut rng = Rng(seed.max(1) ^ (hash(t.name.as_bytes()).len() as u64) ^ 0x9e3779b97f4a7c15);
    let mut out = Outcome {
        name: t.name,
        execs: 0,
        crashes: Vec::new(),
        slowest: Duration::ZERO,
        seeds: n_seeds,
    };
    let until = Instant::now() + budget;
    // The seeds as they are first, then mutations.
    let mut i = 0usize;
    while Instant::now() < until {
        let input = if i < corpus.len() {
            corpus[i].clone()
        } else {
            let mut x = corpus[rng.below(corpus.len())].clone();
            let other = &corpus[rng.below(corpus.len())];
            mutate(&mut rng, &mut x, other);
            x
        };
        i += 1;
        if let Ok(mut c) = current.lock() {
            c.clone_from(&input);
        }
        let t0 = Instant::now();
        started.store((epoch.elapsed().as_millis() as u64).max(1), Ordering::Relaxed);
        let r = panic::catch_unwind(AssertUnwindSafe(|| (t.run)(&input)));
        started.store(0, Ordering::Relaxed);
        out.slowest = out.slowest.max(t0.elapsed());
        out.execs += 1;
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let p = artifact(t.name, "crash", &input);
            if out.crashes.len() < 20 {
                out.crashes.push((p, msg));
            }
        }
    }
    done.store(1, Ordering::Relaxed);
    out
}

fn main() {
    let mut seconds = 10u64;
    let mut seed = 1u64;
    let mut hang_ms = 10_000u64;
    let mut json = false;
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
                eprintln!("erdma-fuzz: {what} needs a number");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--seconds" => seconds = num("--seconds"),
            "--seed" => seed = num("--seed"),
            "--hang-ms" => hang_ms = num("--hang-ms"),
            "--json" => json = true,
            "--export-seeds" => {
                // Each target's seeds into DIR/TARGET/, as libFuzzer takes them (scripts/fuzz).
                let dir = PathBuf::from(args.next().unwrap_or_else(|| {
                    eprintln!("erdma-fuzz: --export-seeds needs a directory");
                    std::process::exit(2)
                }));
                for t in TARGETS {
                    let d = dir.join(t.name);
                    std::fs::create_dir_all(&d).expect("creating the seed directory");
                    for (p, data) in seeds(t) {
                        std::fs::write(d.join(hash(p.to_string_lossy().as_bytes())), data)
                            .expect("writing a seed");
                    }
                }
                return;
            }
            "--list" => {
                for t in TARGETS {
                    println!("{:<16} {}", t.name, t.input);
                }
                return;
            }
            "-h" | "--help" => {
                println!("usage: erdma-fuzz [--seconds N] [--seed S] [--hang-ms MS] [--json] [--list] [TARGET…]");
                return;
            }
            name => names.push(name.to_string()),
        }
    }
    let chosen: Vec<&'static Target> = if names.is_empty() {
        TARGETS.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                find(n).unwrap_or_else(|| {
                    eprintln!("erdma-fuzz: no target `{n}` (--list shows them)");
                    std::process::exit(2)
                })
            })
            .collect()
    };
    // Panics are expected findings here: counted, not printed one by one.
    panic::set_hook(Box::new(|_| {}));
    let mut found = false;
    let mut rows = Vec::new();
    for t in chosen {
        let o = fuzz(t, Duration::from_secs(seconds), seed, Duration::from_millis(hang_ms));
        found |= !o.crashes.is_empty();
        if !json {
            println!(
                "{:<16} {:>10} execs {:>4} seeds {:>3} crashes  slowest {:>8.2} ms",
                o.name,
                o.execs,
                o.seeds,
                o.crashes.len(),
                o.slowest.as_secs_f64() * 1000.0
            );
            for (p, m) in &o.crashes {
                println!("    crash {}: {}", p.display(), m.lines().next().unwrap_or(""));
            }
        }
        rows.push(serde_json::json!({"target": o.name, "execs": o.execs, "seeds": o.seeds, "crashes": o.crashes.iter().map(|(p, m)| serde_json::json!({"input": p, "panic": m})).collect::<Vec<_>>(), "slowest_ms": o.slowest.as_secs_f64() * 1000.0}));
    }
    if json {
        println!("{}", serde_json::Value::Array(rows));
    }
    std::process::exit(i32::from(found));
}
