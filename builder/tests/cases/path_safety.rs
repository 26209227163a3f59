//! Path safety of package payloads: entries with `..`, absolute
//! names, odd bytes, hard links or symlinked parents in a `.deb`, an `.rpm` or a local
//! `--package` never land outside their place in the layer, and setuid/setgid files and
//! device nodes are reported by `plan` and `build`.
//!
//! The hostile `.deb`s are made by hand (dpkg-deb refuses such names): each tar header is
//! written here byte by byte, the archive by binutils' `ar`, and `dpkg-deb` reads the result
//! back to show it is a package. The hostile `.rpm`s are built by `rpmbuild` and then have
//! names in their header patched (rpmbuild cannot make them either); setuid files and device
//! nodes come from `dpkg-deb --build` and `rpmbuild`'s `%attr` and `%dev`. Everything is
//! installed with `--package FILE --allow-unsigned-package` into small bases made here (an
//! empty dpkg status; an rpm database `rpm --initdb` wrote), so no network is needed.
//!
//! What is refused (one `error:` line naming the package and the entry, nothing written):
//! `..` anywhere, hard links to anything but an earlier file of the same package, names with a
//! newline or NUL, a file or symlink that would replace a directory, and any entry under a
//! symlink that the build itself installs (the same package's or another's). What is kept,
//! normalised: absolute names (`/usr/bin/x` is `usr/bin/x`, as in every rpm), and entries
//! under the base image's own directory symlinks, resolved inside the image as dpkg and rpm
//! write through them (merged /usr).
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::text;
use crate::support::{self, debs, fixture, rpm_repo};

fn s(p: &Path) -> String {
    p.display().to_string()
}

// ---------------------------------------------------------------------------------------------
// Hand-made tar and .deb.

/// One entry of a hand-made tar: the name as raw bytes (`..`, newlines and non-UTF-8 are
/// written as they are), its type flag, mode, content, link target and device numbers. With
/// `pax_path`, a pax extended header carries the name instead (it may hold a NUL byte, which a
/// plain header cannot).
#[derive(Clone, Copy)]
struct T<'a> {
    name: &'a [u8],
    kind: u8,
    mode: u32,
    body: &'a [u8],
    link: &'a [u8],
    dev: (u32, u32),
    pax_path: Option<&'a [u8]>,
}

const BLANK: T<'static> =
    T { name: b"", kind: b'0', mode: 0o644, body: b"", link: b"", dev: (0, 0), pax_path: None };

fn file<'a>(name: &'a [u8], body: &'a [u8]) -> T<'a> {
    T { name, body, ..BLANK }
}
fn dirent(name: &[u8]) -> T<'_> {
    T { name, kind: b'5', mode: 0o755, ..BLANK }
}
fn symlink<'a>(name: &'a [u8], target: &'a [u8]) -> T<'a> {
    T { name, kind: b'2', mode: 0o777, link: target, ..BLANK }
}
fn hardlink<'a>(name: &'a [u8], target: &'a [u8]) -> T<'a> {
    T { name, kind: b'1', link: target, ..BLANK }
}

/// A ustar header (POSIX.1-1988, the layout GNU tar and dpkg-deb write).
fn header(
    name: &[u8],
    kind: u8,
    mode: u32,
    size: usize,
    link: &[u8],
    dev: (u32, u32),
) -> [u8; 512] {
    assert!(name.len() <= 100 && link.len() <= 100, "short names only");
    let mut h = [0u8; 512];
    let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let digits = format!("{v:0w$o}", w = len - 1);
        h[at..at + len - 1].copy_from_slice(digits.as_bytes());
    };
    h[..name.len()].copy_from_slice(name);
    octal(&mut h, 100, 8, u64::from(mode));
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, size as u64);
    octal(&mut h, 136, 12, 1_700_000_000);
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    octal(&mut h, 329, 8, u64::from(dev.0));
    octal(&mut h, 337, 8, u64::from(dev.1));
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    octal(&mut h, 148, 7, u64::from(sum));
    h
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn tar(entries: &[T<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        if let Some(p) = e.pax_path {
            // A pax record is `LEN path=VALUE\n`, LEN counting itself.
            let mut record = Vec::new();
            for digits in 1..4 {
                let len = digits + 1 + "path=".len() + p.len() + 1;
                if len.to_string().len() == digits {
                    record = format!("{len} path=").into_bytes();
                    record.extend_from_slice(p);
                    record.push(b'\n');
                    break;
                }
            }
            out.extend_from_slice(&header(
                b"./PaxHeaders/x",
                b'x',
                0o644,
                record.len(),
                b"",
                (0, 0),
            ));
            out.extend_from_slice(&record);
            pad(&mut out);
        }
        out.extend_from_slice(&header(e.name, e.kind, e.mode, e.body.len(), e.link, e.dev));
        out.extend_from_slice(e.body);
        pad(&mut out);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// A `.deb` of `name` 1.0 (`Architecture: all`) whose `data.tar` holds `entries`, made with
/// binutils' `ar` from hand-made tars, into `dir/NAME_1.0_all.deb`.
fn hand_deb(dir: &Path, name: &str, depends: Option<&str>, entries: &[T<'_>]) -> PathBuf {
    let depends = depends.map(|d| format!("Depends: {d}\n")).unwrap_or_default();
    let control = format!("Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: erdma-kit tests <tests@erdma-kit.invalid>\n{depends}Description: hostile payload (TEST ONLY)\n");
    hand_deb_with(dir, name, &control, &[], entries)
}

/// [`hand_deb`] with the control file's text and more control members given, into
/// `dir/STEM_1.0_all.deb`.
fn hand_deb_with(
    dir: &Path,
    stem: &str,
    control: &str,
    control_extra: &[T<'_>],
    entries: &[T<'_>],
) -> PathBuf {
    let work = dir.join(format!("{stem}.parts"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("debian-binary"), "2.0\n").unwrap();
    let mut members = vec![dirent(b"./"), file(b"./control", control.as_bytes())];
    members.extend_from_slice(control_extra);
    std::fs::write(work.join("control.tar"), tar(&members)).unwrap();
    let mut data = vec![dirent(b"./")];
    data.extend_from_slice(entries);
    std::fs::write(work.join("data.tar"), tar(&data)).unwrap();
    let deb = dir.join(format!("{stem}_1.0_all.deb"));
    let _ = std::fs::remove_file(&deb);
    // deb(5): the members in this order.
    let out = Command::new("ar")
        .arg("rc")
        .arg(&deb)
        .args(["debian-binary", "control.tar", "data.tar"])
        .current_dir(&work)
        .output()
        .unwrap();
    support::assert_success("ar rc", &out);
    deb
}

/// `dpkg-deb --contents`: what dpkg itself sees in the package.
fn dpkg_contents(deb: &Path) -> String {
    let out = Command::new("dpkg-deb").arg("--contents").arg(deb).output().unwrap();
    support::assert_success("dpkg-deb --contents", &out);
    text(&out.stdout)
}

fn require_deb_tools() -> bool {
    support::require(
        support::have("ar") && support::have("dpkg-deb"),
        "binutils' ar and dpkg-deb are needed (run scripts/setup)",
    )
}

// ---------------------------------------------------------------------------------------------
// Bases, recipes, builds.

/// A small Debian-like base: `usr/lib/` a directory, `lib -> usr/lib` (merged /usr),
/// `opt/up -> ../..` and `opt/abs -> /etc` (links that would leave the root if resolved
/// outside the image), an empty dpkg status.
fn deb_base(dir: &Path) -> fixture::OciFixture {
    support::fixture_image(
        dir,
        &[vec![
            ("usr/", b"".as_slice(), 0o755),
            ("usr/bin/", b"", 0o755),
            ("usr/lib/", b"", 0o755),
            ("lib", b"usr/lib", 0o120777),
            ("etc/", b"", 0o755),
            ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644),
            ("opt/", b"", 0o755),
            ("opt/up", b"../..", 0o120777),
            ("opt/abs", b"/etc", 0o120777),
            ("var/lib/dpkg/status", b"", 0o644),
        ]],
        &[("PATH", "/usr/bin")],
        Some(support::DEBIAN12_OS_RELEASE),
    )
}

/// A recipe of `backend` with no repository and no package: only what `--package` brings.
fn bare_recipe(dir: &Path, backend: &str) -> PathBuf {
    let (id, version) = if backend == "apt" { ("debian", "12") } else { ("rocky", "9") };
    let path = dir.join(format!("bare-{backend}.toml"));
    std::fs::write(&path, format!("[distro]\nid = \"{id}\"\nversion_id = \"{version}\"\npretty = \"path safety test ({backend})\"\nbackend = \"{backend}\"\n")).unwrap();
    path
}

/// A test's directory, a base and a bare recipe of one backend, and where output would go.
struct Work {
    tmp: tempfile::TempDir,
    base: fixture::OciFixture,
    recipe: PathBuf,
    dest: PathBuf,
}

fn work(backend: &str) -> Work {
    let tmp = tempfile::tempdir().unwrap();
    let base = if backend == "apt" {
        deb_base(&tmp.path().join("base"))
    } else {
        rpm_base(&tmp.path().join("base"))
    };
    let recipe = bare_recipe(tmp.path(), backend);
    let dest = tmp.path().join("out");
    Work { tmp, base, recipe, dest }
}

/// `erdma-build CMD --json --base BASE --recipe RECIPE --no-packages --package P… --allow-unsigned-package [--output]`
/// with a cache of its own.
fn run(
    cmd: &str,
    base: &fixture::OciFixture,
    recipe: &Path,
    packages: &[&Path],
    output: Option<&Path>,
    cache: &Path,
) -> Output {
    let mut args: Vec<String> = vec![
        cmd.into(),
        "--json".into(),
        "--base".into(),
        base.reference(),
        "--recipe".into(),
        s(recipe),
        "--no-packages".into(),
        "--allow-unsigned-package".into(),
    ];
    for p in packages {
        args.extend(["--package".into(), s(p)]);
    }
    if let Some(o) = output {
        args.extend(["--output".into(), format!("oci:{}:x", s(o))]);
    }
    Command::new(support::bin())
        .args(&args)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", cache)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Asserts a failed build: exit 1, one `error:` line and no cause below it, no panic, nothing
/// at `dest`. Returns the error line.
#[track_caller]
fn refused_line(out: &Output, dest: &Path) -> String {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "expected a refusal\n{err}\n{}", text(&out.stdout));
    assert!(!err.contains("panicked") && !err.contains("Caused by"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(!dest.exists(), "a refused build writes nothing: {}", dest.display());
    lines[0].to_string()
}

/// Asserts a failed build as [`refused_line`] does, but with one cause below the `error:`
/// line (an error the build read, kept whole). Returns the error line and the cause's.
#[track_caller]
fn refused_with_cause(out: &Output, dest: &Path) -> (String, String) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "expected a refusal\n{err}\n{}", text(&out.stdout));
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    let causes: Vec<&str> = err.lines().filter(|l| l.starts_with("  Caused by: ")).collect();
    assert_eq!(causes.len(), 1, "{err}");
    assert!(!dest.exists(), "a refused build writes nothing: {}", dest.display());
    (lines[0].to_string(), causes[0].to_string())
}

/// Asserts a refused build ([`refused_line`]) whose line names `package` and `entry` with
/// `reason`. Returns the error line.
#[track_caller]
fn assert_refused(out: &Output, package: &str, entry: &str, reason: &str, dest: &Path) -> String {
    let line = refused_line(out, dest);
    let err = text(&out.stderr);
    assert!(
        line.starts_with(&format!("error: package {package}")),
        "names the package {package}: {err}"
    );
    assert!(line.contains(&format!("refusing entry `{entry}`")), "names the entry {entry}: {err}");
    assert!(line.contains(reason), "says why ({reason}): {err}");
    line
}

/// (type, mode, link target) of each entry of the image's top layer, by path as stored.
fn top_layer(layout: &Path) -> BTreeMap<String, (tar::EntryType, u32, Option<String>)> {
    let img = fixture::read_fixture(layout, "x");
    let last = img.layers.last().unwrap();
    let f = std::fs::File::open(img.blob_path(&last.digest)).unwrap();
    let mut raw = Vec::new();
    flate2::read::MultiGzDecoder::new(f).read_to_end(&mut raw).unwrap();
    let mut a = tar::Archive::new(raw.as_slice());
    a.entries()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let path = text(&e.path_bytes());
            let link = e.link_name_bytes().map(|l| text(&l));
            (path, (e.header().entry_type(), e.header().mode().unwrap(), link))
        })
        .collect()
}

/// The layer's own promise: every name relative and free of `..`, no entry under a symlink,
/// file or whiteout of the same layer (which an extractor would write through), and hard links
/// only to a regular file written before them.
#[track_caller]
fn assert_layer_stays_inside(layer: &BTreeMap<String, (tar::EntryType, u32, Option<String>)>) {
    for (path, (kind, _, _)) in layer {
        assert!(!path.starts_with('/') && !path.split('/').any(|c| c == ".."), "{path}");
        let trimmed = path.trim_end_matches('/');
        let mut at = trimmed;
        while let Some((parent, _)) = at.rsplit_once('/') {
            if let Some((k, _, _)) = layer.get(parent).or_else(|| layer.get(&format!("{parent}/")))
            {
                assert!(k.is_dir(), "{path} lies under {parent}, a {k:?} of the layer");
            }
            at = parent;
        }
        // A hard link names a regular file of the same layer that sorts before it (so an
        // extractor has already written it, inside the root).
        if *kind == tar::EntryType::Link {
            let to = layer[path].2.as_deref().unwrap_or_default();
            assert!(
                to < path.as_str()
                    && layer.get(to).is_some_and(|(k, _, _)| *k == tar::EntryType::Regular),
                "{path} links to {to}, not an earlier regular file of the layer"
            );
        }
        assert!(
            !matches!(kind, tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo),
            "{path}: {kind:?}"
        );
    }
}

/// Extracts the top layer with GNU tar into `root/` (beside an empty `outside/`) and checks
/// that everything is under `root` and `outside` stays empty.
#[track_caller]
fn extract_and_check(layout: &Path, tmp: &Path) -> PathBuf {
    let img = fixture::read_fixture(layout, "x");
    let blob = img.blob_path(&img.layers.last().unwrap().digest);
    let root = tmp.join("extract/root");
    let outside = tmp.join("extract/outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let out = Command::new("tar")
        .args(["-x", "-z", "--no-same-owner", "-C"])
        .arg(&root)
        .arg("-f")
        .arg(&blob)
        .output()
        .unwrap();
    support::assert_success("tar -x of the new layer", &out);
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "something was extracted outside the root"
    );
    root
}

// ---------------------------------------------------------------------------------------------
// .deb

/// Each hostile `.deb` (alone, as `--package`) is refused with one line naming the package and
/// the entry; nothing is written.
#[test]
fn hostile_debs_are_refused_naming_package_and_entry() {
    if !require_deb_tools() {
        return;
    }
    let Work { tmp, base, recipe, dest } = work("apt");
    let cases: Vec<(&str, Vec<T<'_>>, &str, &str)> = vec![
        (
            "dotdot",
            vec![file(b"./../../etc/passwd", b"owned\n")],
            "./../../etc/passwd",
            "would be outside the image root",
        ),
        (
            "inner-dotdot",
            vec![dirent(b"./a/"), file(b"./a/../../b", b"x")],
            "./a/../../b",
            "would be outside the image root",
        ),
        ("dotdot-dir", vec![dirent(b"../")], "../", "would be outside the image root"),
        (
            "link-dotdot",
            vec![hardlink(b"./x", b"../../etc/shadow")],
            "./x",
            "would be outside the image root",
        ),
        (
            "link-abs",
            vec![hardlink(b"./usr/bin/x", b"/etc/shadow")],
            "usr/bin/x",
            "hard link to `etc/shadow`, which is not a regular file of this package before it",
        ),
        (
            "link-dir",
            vec![dirent(b"./usr/"), hardlink(b"./usr/bin/y", b"./usr/")],
            "usr/bin/y",
            "hard link to `usr`",
        ),
        (
            "newline",
            vec![file(b"./usr/bin/a\nb", b"x")],
            "usr/bin/a\\nb",
            "its name holds a newline or NUL byte",
        ),
        (
            "nul",
            vec![T { pax_path: Some(b"./usr/bin/a\0b"), ..file(b"./usr/bin/pax", b"x") }],
            "usr/bin/a\\0b",
            "its name holds a newline or NUL byte",
        ),
        (
            "latin1",
            vec![file(b"./usr/bin/caf\xe9", b"x")],
            "./usr/bin/caf\u{fffd}",
            "path is not UTF-8",
        ),
        // A symlink where the base has a directory would hide the whole directory.
        (
            "dir-to-link",
            vec![symlink(b"./usr/lib", b"/tmp"), file(b"./usr/lib/x", b"x")],
            "usr/lib",
            "would replace the directory /usr/lib of the base image with a symlink",
        ),
        (
            "dir-to-file",
            vec![file(b"./etc", b"x")],
            "etc",
            "would replace the directory /etc of the base image with a file",
        ),
        // A symlink the package itself installs, then an entry under it.
        (
            "under-own-link",
            vec![
                dirent(b"./srv/"),
                symlink(b"./srv/evil", b"/"),
                file(b"./srv/evil/etc/passwd", b"owned\n"),
            ],
            "srv/evil/etc/passwd",
            "lies under /srv/evil, a symlink to `/` that this build installs",
        ),
        (
            "under-own-dotdot-link",
            vec![
                symlink(b"./srv/up", b"../.."),
                dirent(b"./srv/up/"),
                dirent(b"./srv/up/etc/"),
                file(b"./srv/up/etc/cron", b"x"),
            ],
            "srv/up/etc",
            "lies under /srv/up, a symlink to `../..` that this build installs",
        ),
        // Through the base's merged-/usr link to a symlink of the package.
        (
            "under-own-link-via-base",
            vec![symlink(b"./lib/evil", b"/etc"), file(b"./usr/lib/evil/shadow", b"x")],
            "usr/lib/evil/shadow",
            "lies under /usr/lib/evil, a symlink to `/etc`",
        ),
    ];
    for (name, entries, entry, reason) in &cases {
        let deb = hand_deb(tmp.path(), &format!("hostile-{name}"), None, entries);
        if *name == "dotdot" {
            // dpkg reads it as a package, and sees the name as it is.
            assert!(dpkg_contents(&deb).contains("./../../etc/passwd"), "{}", dpkg_contents(&deb));
        }
        let cache = tmp.path().join(format!("cache-{name}"));
        let out = run("build", &base, &recipe, &[&deb], Some(&dest), &cache);
        let line =
            assert_refused(&out, &format!("hostile-{name} 1.0 (unsigned "), entry, reason, &dest);
        eprintln!("{name}: {line}");
        // plan reads a --package file too, and refuses the same.
        let out = run("plan", &base, &recipe, &[&deb], None, &cache);
        assert_refused(&out, &format!("hostile-{name} 1.0 (unsigned "), entry, reason, &dest);
    }
}

/// The control part names files in /var/lib/dpkg/info: a package name that is not dpkg's
/// (`../../x`, `evil/x`) or a control member in a subdirectory is refused.
#[test]
fn hostile_control_names_are_refused() {
    if !require_deb_tools() {
        return;
    }
    let Work { tmp, base, recipe, dest } = work("apt");
    let control = |name: &str| {
        format!("Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: x <x@erdma-kit.invalid>\nDescription: hostile control (TEST ONLY)\n")
    };
    let data = [dirent(b"./usr/"), dirent(b"./usr/share/"), file(b"./usr/share/x", b"x")];
    for (stem, name) in [("dotdot", "../../x"), ("slash", "evil/x")] {
        let deb = hand_deb_with(tmp.path(), stem, &control(name), &[], &data);
        let out = run("build", &base, &recipe, &[&deb], Some(&dest), &tmp.path().join("cache"));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("error: malformed package control in {name} 1.0 (unsigned "))
                && err.contains("is not a valid package name and architecture for dpkg"),
            "{err}"
        );
        assert!(!dest.exists());
    }
    let deb = hand_deb_with(
        tmp.path(),
        "subdir",
        &control("subdir"),
        &[file(b"./sub/postinst", b"#!/bin/sh\n")],
        &data,
    );
    let out = run("build", &base, &recipe, &[&deb], Some(&dest), &tmp.path().join("cache"));
    assert_refused(
        &out,
        "subdir 1.0",
        "sub/postinst",
        "a control file must have a plain name",
        &dest,
    );
}

/// A symlink one package installs is seen by the next one, whichever is installed first: a
/// file under it is refused, and so is the link over a directory an earlier file made.
#[test]
fn a_symlink_of_one_deb_never_carries_anothers_files() {
    if !require_deb_tools() {
        return;
    }
    let Work { tmp, base, recipe, dest } = work("apt");
    let mut seen = Vec::new();
    // Packages are unpacked in name order here: `a-` first.
    for (link_name, file_name) in [("evil-a-link", "evil-b-file"), ("evil-b-link", "evil-a-file")] {
        let dir = tmp.path().join(link_name);
        let link =
            hand_deb(&dir, link_name, None, &[dirent(b"./srv/"), symlink(b"./srv/evil", b"/etc")]);
        let file = hand_deb(
            &dir,
            file_name,
            None,
            &[
                dirent(b"./srv/"),
                dirent(b"./srv/evil/"),
                dirent(b"./srv/evil/cron.d/"),
                file(b"./srv/evil/cron.d/x", b"* * * * * root id\n"),
            ],
        );
        let out = run("build", &base, &recipe, &[&link, &file], Some(&dest), &dir.join("cache"));
        let err = text(&out.stderr);
        if err.contains(&format!("error: package {file_name} ")) {
            // The package's `srv/evil/` directory entry is left out (a symlink is there), its
            // first child refused.
            assert_refused(
                &out,
                file_name,
                "srv/evil/cron.d",
                "lies under /srv/evil, a symlink to `/etc` that this build installs",
                &dest,
            );
            seen.push("file under the link");
        } else {
            assert_refused(
                &out,
                link_name,
                "srv/evil",
                "would replace the directory /srv/evil this build made with a symlink",
                &dest,
            );
            seen.push("link over the directory");
        }
    }
    seen.sort();
    assert_eq!(seen, ["file under the link", "link over the directory"], "both orders are tried");
}

/// Absolute names and the base's own directory symlinks are kept, resolved inside the image:
/// the layer holds only relative names, nothing under a symlink of its own, and GNU tar
/// extracts it without writing outside the root.
#[test]
fn absolute_names_and_base_links_stay_inside_the_layer() {
    if !require_deb_tools() {
        return;
    }
    let Work { tmp, base, recipe, dest } = work("apt");
    let deb = hand_deb(
        tmp.path(),
        "inside",
        None,
        &[
            // Absolute names, as some tar writers store them.
            dirent(b"/abs/"),
            file(b"/abs/path", b"absolute\n"),
            // The base's `lib -> usr/lib` (merged /usr): written through, the link kept.
            dirent(b"./lib/"),
            file(b"./lib/libx.so.1", b"x"),
            // The base's `opt/up -> ../..` and `opt/abs -> /etc`: resolved inside the image.
            dirent(b"./opt/up/"),
            file(b"./opt/up/etc/motd2", b"through ../..\n"),
            file(b"./opt/abs/issue2", b"through /etc\n"),
            // A symlink of the package pointing out is kept as a link: it is resolved at run
            // time, inside the container.
            symlink(b"./usr/bin/root-link", b"../../../../.."),
            // A hard link to an earlier file of the package stays a link, by the names the
            // files have in the layer (one resolved through the base's `lib -> usr/lib`).
            hardlink(b"./abs/path2", b"/abs/path"),
            hardlink(b"./abs/libx-again", b"./lib/libx.so.1"),
        ],
    );
    let cache = tmp.path().join("cache");
    let out = run("build", &base, &recipe, &[&deb], Some(&dest), &cache);
    support::assert_success("build of absolute names and base links", &out);
    let layer = top_layer(&dest);
    for want in [
        "abs/path",
        "abs/path2",
        "usr/lib/libx.so.1",
        "etc/motd2",
        "etc/issue2",
        "usr/bin/root-link",
    ] {
        assert!(layer.contains_key(want), "{want} not in {:?}", layer.keys().collect::<Vec<_>>());
    }
    for gone in ["lib/", "lib/libx.so.1", "opt/up/", "opt/up/etc/motd2", "opt/abs/issue2"] {
        assert!(!layer.contains_key(gone), "{gone} in the layer");
    }
    assert_eq!(layer["abs/path2"].0, tar::EntryType::Link, "hard links stay links");
    assert_eq!(layer["abs/path2"].2.as_deref(), Some("abs/path"));
    // The first name in path order carries the bytes (tar writes a file before its links).
    assert_eq!(layer["abs/libx-again"].0, tar::EntryType::Regular);
    assert_eq!(layer["usr/lib/libx.so.1"].2.as_deref(), Some("abs/libx-again"));
    assert_eq!(layer["usr/bin/root-link"].2.as_deref(), Some("../../../../.."));
    assert_layer_stays_inside(&layer);
    let root = extract_and_check(&dest, tmp.path());
    assert_eq!(std::fs::read_to_string(root.join("etc/motd2")).unwrap(), "through ../..\n");
    assert_eq!(std::fs::read_to_string(root.join("abs/path2")).unwrap(), "absolute\n");
    use std::os::unix::fs::MetadataExt as _;
    let ino = |p: &str| std::fs::metadata(root.join(p)).unwrap().ino();
    assert_eq!(ino("abs/path2"), ino("abs/path"));
    assert_eq!(ino("usr/lib/libx.so.1"), ino("abs/libx-again"));
    // dpkg's file list names the entries as the package does.
    let list = std::fs::read_to_string(root.join("var/lib/dpkg/info/inside.list")).unwrap();
    assert!(
        list.lines().any(|l| l == "/abs/path") && list.lines().any(|l| l == "/opt/up/etc/motd2"),
        "{list}"
    );
}

/// Setuid and setgid files (from dpkg-deb) and device nodes and a FIFO (hand-made: dpkg-deb
/// would need mknod) are listed by `plan`, text and JSON, and by `build`; the files keep their
/// bits in the layer, the devices are not created.
#[test]
fn setuid_files_and_device_nodes_in_debs_are_reported() {
    if !require_deb_tools() {
        return;
    }
    let Work { tmp, base, recipe, .. } = work("apt");
    let suid = debs::fake_deb(
        tmp.path(),
        debs::FakeDeb {
            name: "suid-tool",
            arch: "all",
            files: vec![
                ("/usr/bin/suid-tool", b"#!/bin/sh\nid\n".as_slice(), 0o4755),
                ("/usr/bin/sgid-tool", b"#!/bin/sh\nid\n".as_slice(), 0o2755),
                ("/usr/bin/plain", b"#!/bin/sh\n".as_slice(), 0o755),
            ],
            ..Default::default()
        },
    );
    let listing = dpkg_contents(&suid);
    assert!(
        listing.lines().any(|l| l.starts_with("-rwsr-xr-x") && l.ends_with("./usr/bin/suid-tool")),
        "{listing}"
    );
    let devices = hand_deb(
        tmp.path(),
        "dev-nodes",
        None,
        &[
            dirent(b"./opt/"),
            T { name: b"./opt/null", kind: b'3', mode: 0o666, dev: (1, 3), ..BLANK },
            T { name: b"./opt/sda", kind: b'4', mode: 0o660, dev: (8, 0), ..BLANK },
            T { name: b"./opt/pipe", kind: b'6', mode: 0o600, ..BLANK },
            file(b"./opt/readme", b"x"),
        ],
    );
    assert!(
        dpkg_contents(&devices)
            .lines()
            .any(|l| l.starts_with("crw-rw-rw-") && l.ends_with("./opt/null")),
        "{}",
        dpkg_contents(&devices)
    );
    let cache = tmp.path().join("cache");
    let want = serde_json::json!([
        {"package": "suid-tool 1.0", "path": "/usr/bin/sgid-tool", "kind": "setgid", "mode": "2755", "created": true},
        {"package": "suid-tool 1.0", "path": "/usr/bin/suid-tool", "kind": "setuid", "mode": "4755", "created": true},
        {"package": "dev-nodes 1.0", "path": "/opt/null", "kind": "char", "mode": "666", "major": 1, "minor": 3, "created": false},
        {"package": "dev-nodes 1.0", "path": "/opt/pipe", "kind": "fifo", "mode": "600", "created": false},
        {"package": "dev-nodes 1.0", "path": "/opt/sda", "kind": "block", "mode": "660", "major": 8, "minor": 0, "created": false},
    ]);
    let sorted = |v: &Value| {
        let mut v = v.as_array().cloned().unwrap_or_default();
        v.sort_by_key(|f| {
            (
                f["package"].as_str().unwrap_or_default().to_string(),
                f["path"].as_str().unwrap_or_default().to_string(),
            )
        });
        Value::Array(v)
    };
    let out = run("plan", &base, &recipe, &[&suid, &devices], None, &cache);
    support::assert_success("plan", &out);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pk = &plan["images"][0]["packages"];
    assert_eq!(sorted(&pk["special_files"]), sorted(&want), "{pk}");
    assert!(pk.get("not_inspected").is_none(), "--package files are read: {pk}");
    // The text report says the same, one line each.
    let mut args: Vec<String> = vec![
        "plan".into(),
        "--base".into(),
        base.reference(),
        "--recipe".into(),
        s(&recipe),
        "--no-packages".into(),
        "--allow-unsigned-package".into(),
    ];
    args.extend(["--package".into(), s(&suid), "--package".into(), s(&devices)]);
    let out = Command::new(support::bin())
        .args(&args)
        .env("NO_COLOR", "1")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    support::assert_success("plan (text)", &out);
    let plan_text = text(&out.stdout);
    for line in [
        "  setuid file /usr/bin/suid-tool (mode 4755) in package suid-tool 1.0",
        "  setgid file /usr/bin/sgid-tool (mode 2755) in package suid-tool 1.0",
        "  char device /opt/null 1:3 (mode 666, not created) in package dev-nodes 1.0",
        "  block device /opt/sda 8:0 (mode 660, not created) in package dev-nodes 1.0",
        "  fifo /opt/pipe (mode 600, not created) in package dev-nodes 1.0",
    ] {
        assert!(plan_text.lines().any(|l| l == line), "no line `{line}` in\n{plan_text}");
    }

    let dest = tmp.path().join("out");
    let out = run("build", &base, &recipe, &[&suid, &devices], Some(&dest), &cache);
    support::assert_success("build", &out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sorted(&report["images"][0]["packages"]["special_files"]), sorted(&want));
    let layer = top_layer(&dest);
    assert_eq!(layer["usr/bin/suid-tool"].1, 0o4755);
    assert_eq!(layer["usr/bin/sgid-tool"].1, 0o2755);
    assert!(layer.contains_key("opt/readme"));
    for dev in ["opt/null", "opt/sda", "opt/pipe"] {
        assert!(!layer.contains_key(dev), "{dev} created");
    }
    assert_layer_stays_inside(&layer);
}

/// `plan` reads the packages it has on disk and names the others; `plan --download` fetches
/// them into the cache (verified as a build does) and reads them all; a later plan reads them
/// from the cache.
#[test]
fn plan_download_reads_repository_payloads() {
    let tmp = tempfile::tempdir().unwrap();
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    // A copy: the server writes its log beside the directory it serves.
    let www = tmp.path().join("debian-demo");
    support::assert_success(
        "cp -r debian-demo",
        &Command::new("cp")
            .arg("-r")
            .arg(testdata.join("repos/debian-demo"))
            .arg(&www)
            .output()
            .unwrap(),
    );
    let served = support::apt_repo::Served::start(&www);
    let mirror = served.url("");
    let base = format!("oci:{}:latest", s(&testdata.join("images/debian12-mini")));
    let key = s(&testdata.join("repos/debian-demo/demo-key.asc"));
    let cache = tmp.path().join("cache");
    let plan = |download: bool| -> Value {
        let mut args = vec![
            "plan",
            "--json",
            "--base",
            &base,
            "--mirror",
            &mirror,
            "--keyring",
            &key,
            "--no-packages",
            "--install",
            "ibverbs-utils",
        ];
        if download {
            args.push("--download");
        }
        let out = Command::new(support::bin())
            .args(&args)
            .env("NO_COLOR", "1")
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap();
        support::assert_success("plan", &out);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["images"][0]["packages"].clone()
    };
    let cold = plan(false);
    let names: Vec<String> = cold["install"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} {}", p["name"].as_str().unwrap(), p["version"].as_str().unwrap()))
        .collect();
    assert!(names.iter().any(|n| n.starts_with("ibverbs-utils ")), "{cold}");
    let mut not_read: Vec<String> = cold["not_inspected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    not_read.sort();
    let mut all = names.clone();
    all.sort();
    assert_eq!(not_read, all, "nothing was downloaded, nothing read");
    assert_eq!(cold["downloaded_bytes"], 0);
    let warm = plan(true);
    assert!(warm.get("not_inspected").is_none(), "{warm}");
    assert!(warm["downloaded_bytes"].as_u64().unwrap() > 0, "{warm}");
    // Debian's rdma-core packages have no setuid file or device node.
    assert!(warm.get("special_files").is_none(), "{warm}");
    let again = plan(false);
    assert!(again.get("not_inspected").is_none(), "read from the cache: {again}");
    assert_eq!(again["downloaded_bytes"], 0);
}

// ---------------------------------------------------------------------------------------------
// .rpm

fn require_rpm_tools() -> bool {
    support::require(
        support::have("rpmbuild") && support::have("rpm"),
        "rpm and rpmbuild are needed (run scripts/setup)",
    )
}

/// A base with an empty rpm database (`rpm --initdb`, SQLite as EL9 keeps it), `usr/lib/` a
/// directory and `lib -> usr/lib`.
fn rpm_base(dir: &Path) -> fixture::OciFixture {
    let root = dir.with_extension("root");
    std::fs::create_dir_all(&root).unwrap();
    let out = Command::new("rpm")
        .arg("--root")
        .arg(&root)
        .args(["--dbpath", "/var/lib/rpm", "--define", "_db_backend sqlite", "--initdb"])
        .output()
        .unwrap();
    support::assert_success("rpm --initdb", &out);
    let db = std::fs::read(root.join("var/lib/rpm/rpmdb.sqlite")).unwrap();
    support::fixture_image(
        dir,
        &[vec![
            ("usr/", b"".as_slice(), 0o755),
            ("usr/bin/", b"", 0o755),
            ("usr/lib/", b"", 0o755),
            ("lib", b"usr/lib", 0o120777),
            ("etc/", b"", 0o755),
            ("var/lib/rpm/", b"", 0o755),
            ("var/lib/rpm/rpmdb.sqlite", db.as_slice(), 0o644),
        ]],
        &[("PATH", "/usr/bin")],
        Some(rpm_repo::ROCKY9_OS_RELEASE),
    )
}

/// Builds `name`-1.0-1.noarch.rpm with `rpmbuild`: `stage` lays out the build root (files,
/// symlinks), `files` is the `%files` list as written.
fn rpmbuild(
    dir: &Path,
    name: &str,
    requires: &[&str],
    stage: &dyn Fn(&Path),
    files: &[&str],
) -> PathBuf {
    let top = dir.join(format!("rpmbuild-{name}"));
    let root = top.join("stage");
    std::fs::create_dir_all(top.join("SPECS")).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    stage(&root);
    let requires: String = requires.iter().map(|r| format!("Requires: {r}\n")).collect();
    let spec = format!(
        "%global debug_package %{{nil}}\n%global __os_install_post %{{nil}}\n%global _build_id_links none\n\
Name: {name}\nVersion: 1.0\nRelease: 1\nLicense: MIT\nSummary: path safety fixture (TEST ONLY)\nBuildArch: noarch\nAutoReqProv: no\n{requires}\n\
%description\nA package for erdma-kit's path safety tests (TEST ONLY).\n\n%prep\n%build\n%install\ncp -a {}/. %{{buildroot}}/\n\n\
%files\n%defattr(-,root,root,-)\n{}\n",
        root.display(),
        files.join("\n")
    );
    let spec_path = top.join("SPECS").join(format!("{name}.spec"));
    std::fs::write(&spec_path, spec).unwrap();
    let out = Command::new("rpmbuild")
        .args(["-bb", "--quiet", "--define"])
        .arg(format!("_topdir {}", top.display()))
        .args(["--define", "_binary_payload w19.zstdio"])
        .arg(&spec_path)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap();
    support::assert_success(&format!("rpmbuild {name}"), &out);
    let rpm = top.join("RPMS/noarch").join(format!("{name}-1.0-1.noarch.rpm"));
    assert!(rpm.is_file(), "{}", rpm.display());
    rpm
}

/// Replaces `from` by `to` (same length) everywhere in the file: names in an rpm's header.
/// Then, as an attacker would, recomputes the digests that cover the header (the signature
/// header's SHA1 and SHA256 of the main header, and its MD5 of header and payload): an unsigned
/// `--package` gets its digests checked, as rpm checks them, so only erdma-build's own path
/// checks stand between these names and the layer.
fn patch(rpm: &Path, from: &[u8], to: &[u8]) -> PathBuf {
    use sha2::Digest;
    assert_eq!(from.len(), to.len());
    let original = std::fs::read(rpm).unwrap();
    // The 96-byte lead, the signature header padded to 8 bytes, then the main header: each
    // header is 16 bytes (magic, reserved, index count, data length), 16 per index entry, data.
    let be = |b: &[u8], at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let sig_len = 16 + 16 * be(&original, 104) + be(&original, 108);
    let start = 96 + sig_len.div_ceil(8) * 8;
    let end = start + 16 + 16 * be(&original, start + 8) + be(&original, start + 12);
    // Only the main header: the payload (and its digest) stay as rpmbuild made them.
    let mut bytes = original.clone();
    let mut n = 0;
    let mut i = start;
    while let Some(at) = bytes[i..end].windows(from.len()).position(|w| w == from) {
        bytes[i + at..i + at + to.len()].copy_from_slice(to);
        i += at + to.len();
        n += 1;
    }
    assert!(n > 0, "`{}` not in the header of {}", from.escape_ascii(), rpm.display());
    // SHA1 too (rpm 4.18 still writes it, and `rpm -K` checks it), by coreutils' sha1sum.
    let sha1 = |b: &[u8]| {
        let f = rpm.with_extension("header");
        std::fs::write(&f, b).unwrap();
        let out = Command::new("sha1sum").arg(&f).output().unwrap();
        support::assert_success("sha1sum", &out);
        out.stdout[..40].to_vec()
    };
    let digests = |b: &[u8]| {
        [
            sha1(&b[start..end]),
            hex::encode(sha2::Sha256::digest(&b[start..end])).into_bytes(),
            md5::Md5::digest(&b[start..]).to_vec(),
        ]
    };
    for (old, new) in digests(&original).into_iter().zip(digests(&bytes)) {
        let at = bytes[96..start]
            .windows(old.len())
            .position(|w| w == old.as_slice())
            .expect("the digest in the signature header")
            + 96;
        bytes[at..at + new.len()].copy_from_slice(&new);
    }
    let out = rpm.with_file_name(format!("patched-{}", rpm.file_name().unwrap().to_string_lossy()));
    std::fs::write(&out, bytes).unwrap();
    out
}

/// An unsigned `--package` whose header or payload was damaged after rpmbuild (digests not
/// recomputed) is refused by its digests, as `rpm -K` refuses it, before anything is read
/// from it; nothing is written.
#[test]
fn damaged_unsigned_rpms_are_refused_by_their_digests() {
    if !require_rpm_tools() {
        return;
    }
    let Work { tmp, base, recipe, dest } = work("rpm");
    let rpm = rpmbuild(
        tmp.path(),
        "rpm-damaged",
        &[],
        &|r| write(r, "usr/bin/tool", &[7u8; 4096], 0o755),
        &["/usr/bin/tool"],
    );
    let bytes = std::fs::read(&rpm).unwrap();
    // The summary in the main header, then the payload's last byte (zstd's frame end).
    let summary = bytes.windows(10).position(|w| w == b"path safet").unwrap();
    for (at, which) in [(summary, "header SHA256"), (bytes.len() - 1, "payload SHA256")] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x20;
        let path = tmp.path().join(format!("damaged-{at}.rpm"));
        std::fs::write(&path, bad).unwrap();
        let k = Command::new("rpm").args(["-K", "--nosignature"]).arg(&path).output().unwrap();
        assert!(!k.status.success(), "rpm -K took the damage: {}", text(&k.stdout));
        let (line, cause) = refused_with_cause(
            &run("build", &base, &recipe, &[&path], Some(&dest), &tmp.path().join("cache")),
            &dest,
        );
        assert!(
            line.contains(&format!("--package {}", path.display()))
                && cause.contains(which)
                && cause.contains("mismatch"),
            "{line}\n{cause}"
        );
    }
}

/// Package payloads are bounded as layers are (`--max-inflation`): a `.deb` whose
/// `data.tar.gz` is 1 GiB of zeros in 1 MiB, and an rpm whose zstd payload is 200 MiB of
/// zeros in 12 KiB (rpmbuild's own), are refused after about 64 MiB + 100 × what was read,
/// naming the package; nothing is written. Raised, the rpm goes in.
#[test]
fn package_payload_bombs_are_refused() {
    if !require_deb_tools() || !require_rpm_tools() {
        return;
    }
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path();
    let dest = w.join("out");
    let gzip = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    // data.tar.gz: the headers, then 16 gzip members of 64 MiB of zeros (one gzip stream).
    let size = 16usize << 26;
    let mut head = Vec::new();
    for d in [b"./".as_slice(), b"./usr/", b"./usr/share/"] {
        head.extend_from_slice(&header(d, b'5', 0o755, 0, b"", (0, 0)));
    }
    head.extend_from_slice(&header(b"./usr/share/zeros", b'0', 0o644, size, b"", (0, 0)));
    let chunk = gzip(&vec![0u8; 64 << 20]);
    let mut data = gzip(&head);
    for _ in 0..16 {
        data.extend_from_slice(&chunk);
    }
    data.extend(gzip(&[0u8; 1024]));
    let parts = w.join("bomb.parts");
    std::fs::create_dir_all(&parts).unwrap();
    std::fs::write(parts.join("debian-binary"), "2.0\n").unwrap();
    let control = "Package: deb-bomb\nVersion: 1.0\nArchitecture: all\nMaintainer: erdma-kit tests <tests@erdma-kit.invalid>\nDescription: decompression bomb (TEST ONLY)\n";
    std::fs::write(
        parts.join("control.tar"),
        tar(&[dirent(b"./"), file(b"./control", control.as_bytes())]),
    )
    .unwrap();
    std::fs::write(parts.join("data.tar.gz"), &data).unwrap();
    let deb = w.join("deb-bomb_1.0_all.deb");
    support::assert_success(
        "ar rc",
        &Command::new("ar")
            .arg("rc")
            .arg(&deb)
            .args(["debian-binary", "control.tar", "data.tar.gz"])
            .current_dir(&parts)
            .output()
            .unwrap(),
    );
    assert!(
        dpkg_contents(&deb).contains(&format!("{size} 2023-11-14 22:13 ./usr/share/zeros")),
        "dpkg-deb reads it: {}",
        dpkg_contents(&deb)
    );
    let line = refused_line(
        &run(
            "build",
            &deb_base(&w.join("deb-base")),
            &bare_recipe(w, "apt"),
            &[&deb],
            Some(&dest),
            &w.join("cache"),
        ),
        &dest,
    );
    assert!(
        line.starts_with("error: data.tar.gz of deb-bomb 1.0")
            && line.contains("inflates more than 100×")
            && line.contains("--max-inflation"),
        "{line}"
    );

    let rpm = rpmbuild(
        w,
        "rpm-bomb",
        &[],
        &|r| {
            std::fs::create_dir_all(r.join("usr/share")).unwrap();
            std::fs::File::create(r.join("usr/share/zeros")).unwrap().set_len(200 << 20).unwrap();
        },
        &["/usr/share/zeros"],
    );
    let len = std::fs::metadata(&rpm).unwrap().len();
    assert!(len < (200 << 20) / 1000, "{len}");
    let rpm_base = rpm_base(&w.join("rpm-base"));
    let recipe = bare_recipe(w, "rpm");
    let line = refused_line(
        &run("build", &rpm_base, &recipe, &[&rpm], Some(&dest), &w.join("cache")),
        &dest,
    );
    assert!(
        line.starts_with("error: the payload of rpm-bomb-1.0-1.noarch")
            && line.contains("inflates more than 100×"),
        "{line}"
    );
    // A genuine package of zeros: raised, it is built.
    let mut args: Vec<String> = vec![
        "build".into(),
        "--quiet".into(),
        "--max-inflation".into(),
        "0".into(),
        "--base".into(),
        rpm_base.reference(),
        "--recipe".into(),
        s(&recipe),
        "--no-packages".into(),
        "--allow-unsigned-package".into(),
        "--package".into(),
        s(&rpm),
    ];
    args.extend(["--output".into(), format!("oci:{}:x", s(&dest))]);
    let out = Command::new(support::bin())
        .args(&args)
        .env("XDG_CACHE_HOME", w.join("cache"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn write(root: &Path, rel: &str, content: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, content).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn link(root: &Path, rel: &str, target: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, p).unwrap();
}

/// Hostile `.rpm`s as `--package`: `..` and a newline in header names (patched after
/// rpmbuild), a symlink replacing the base's directory, a file under the package's own
/// symlink, and a file under another package's symlink. Each is refused naming the package
/// and the entry; nothing is written.
#[test]
fn hostile_rpms_are_refused_naming_package_and_entry() {
    if !require_rpm_tools() {
        return;
    }
    let Work { tmp, base, recipe, dest } = work("rpm");
    let w = tmp.path();

    let dotdot = rpmbuild(
        w,
        "rpm-dotdot",
        &[],
        &|r| write(r, "zz/zz/etc/passwd", b"owned\n", 0o644),
        &["/zz/zz/etc/passwd"],
    );
    // rpm stores `/zz/zz/etc/` once, in DIRNAMES: now `/../../etc/`.
    let dotdot = patch(&dotdot, b"/zz/zz/etc/", b"/../../etc/");
    // Its digests recomputed, rpm itself takes the file as whole and reads the patched name.
    let k = Command::new("rpm").args(["-K", "--nosignature"]).arg(&dotdot).output().unwrap();
    assert!(k.status.success(), "rpm -K: {}", text(&k.stdout));
    assert!(
        text(
            &Command::new("rpm")
                .args(["-qlp", "--nosignature"])
                .arg(&dotdot)
                .output()
                .unwrap()
                .stdout
        )
        .lines()
        .any(|l| l == "/../../etc/passwd"),
        "rpm reads the patched name"
    );
    let newline = patch(
        &rpmbuild(
            w,
            "rpm-newline",
            &[],
            &|r| write(r, "usr/bin/evil_nl", b"x", 0o755),
            &["/usr/bin/evil_nl"],
        ),
        b"evil_nl",
        b"evil\nnl",
    );
    let dir_to_link =
        rpmbuild(w, "rpm-dir-to-link", &[], &|r| link(r, "usr/lib", "/tmp"), &["/usr/lib"]);
    let own_link = rpmbuild(
        w,
        "rpm-own-link",
        &[],
        &|r| {
            link(r, "opt/evil", "/");
            write(r, "opt/zzzz/passwd", b"owned\n", 0o644);
        },
        &["/opt/evil", "/opt/zzzz/passwd"],
    );
    let own_link = patch(&own_link, b"/opt/zzzz/", b"/opt/evil/");
    let cases: Vec<(&str, PathBuf, &str, &str)> = vec![
        ("rpm-dotdot-1.0-1.noarch", dotdot, "/../../etc/passwd", "would be outside the image root"),
        (
            "rpm-newline-1.0-1.noarch",
            newline,
            "/usr/bin/evil\\nnl",
            "its name holds a newline or NUL byte",
        ),
        (
            "rpm-dir-to-link-1.0-1.noarch",
            dir_to_link,
            "/usr/lib",
            "would replace the directory /usr/lib of the base image with a symlink",
        ),
        (
            "rpm-own-link-1.0-1.noarch",
            own_link,
            "/opt/evil/passwd",
            "lies under /opt/evil, a symlink of the package",
        ),
    ];
    for (package, rpm, entry, reason) in &cases {
        let cache = w.join(format!("cache-{package}"));
        let out = run("build", &base, &recipe, &[rpm], Some(&dest), &cache);
        let line = assert_refused(&out, package, entry, reason, &dest);
        eprintln!("{package}: {line}");
        // plan reads the header of a --package file, and refuses too.
        let out = run("plan", &base, &recipe, &[rpm], None, &cache);
        let reason = if reason.contains("of the package") {
            "lies under /opt/evil, a symlink to `/`"
        } else {
            reason
        };
        assert_refused(&out, package, entry, reason, &dest);
    }

    // Another package's symlink, installed first (the file's package requires it).
    let link_pkg =
        rpmbuild(w, "rpm-evil-link", &[], &|r| link(r, "srv/evil", "/etc"), &["/srv/evil"]);
    let file_pkg = rpmbuild(
        w,
        "rpm-evil-file",
        &["rpm-evil-link"],
        &|r| write(r, "srv/evil/cron.d/x", b"* * * * * root id\n", 0o644),
        &["/srv/evil/cron.d/x"],
    );
    let out =
        run("build", &base, &recipe, &[&link_pkg, &file_pkg], Some(&dest), &w.join("cache-cross"));
    assert_refused(
        &out,
        "rpm-evil-file-1.0-1.noarch",
        "/srv/evil/cron.d/x",
        "lies under /srv/evil, a symlink to `/etc` that this build installs",
        &dest,
    );
}

/// Setuid and setgid files (`%attr`) and device nodes (`%dev`) in an rpm are listed by `plan`
/// (from the header) and `build`; the files keep their bits, the devices are not created, and
/// a file through the base's `lib -> usr/lib` lands in `usr/lib`.
#[test]
fn setuid_files_and_device_nodes_in_rpms_are_reported() {
    if !require_rpm_tools() {
        return;
    }
    let Work { tmp, base, recipe, .. } = work("rpm");
    let rpm = rpmbuild(
        tmp.path(),
        "rpm-special",
        &[],
        &|r| {
            write(r, "usr/bin/suid-tool", b"#!/bin/sh\nid\n", 0o755);
            write(r, "usr/bin/sgid-tool", b"#!/bin/sh\nid\n", 0o755);
            write(r, "lib/librpm-special.so", b"x", 0o644);
        },
        &[
            "%attr(4755,root,root) /usr/bin/suid-tool",
            "%attr(2755,root,root) /usr/bin/sgid-tool",
            "/lib/librpm-special.so",
            "%dev(c,1,3) %attr(0666,root,root) /opt/null",
            "%dev(b,8,0) %attr(0660,root,root) /opt/sda",
        ],
    );
    let dump = text(
        &Command::new("rpm")
            .args(["-qp", "--nosignature", "--dump"])
            .arg(&rpm)
            .output()
            .unwrap()
            .stdout,
    );
    assert!(
        dump.lines().any(|l| l.starts_with("/opt/null ") && l.contains(" 020666 ")),
        "rpm --dump:\n{dump}"
    );
    let want = serde_json::json!([
        {"package": "rpm-special 1.0-1", "path": "/opt/null", "kind": "char", "mode": "666", "major": 1, "minor": 3, "created": false},
        {"package": "rpm-special 1.0-1", "path": "/opt/sda", "kind": "block", "mode": "660", "major": 8, "minor": 0, "created": false},
        {"package": "rpm-special 1.0-1", "path": "/usr/bin/sgid-tool", "kind": "setgid", "mode": "2755", "created": true},
        {"package": "rpm-special 1.0-1", "path": "/usr/bin/suid-tool", "kind": "setuid", "mode": "4755", "created": true},
    ]);
    let sorted = |v: &Value| {
        let mut v = v.as_array().cloned().unwrap_or_default();
        v.sort_by_key(|f| f["path"].as_str().unwrap_or_default().to_string());
        Value::Array(v)
    };
    let cache = tmp.path().join("cache");
    let out = run("plan", &base, &recipe, &[&rpm], None, &cache);
    support::assert_success("plan (rpm)", &out);
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sorted(&plan["images"][0]["packages"]["special_files"]), sorted(&want), "{plan}");
    let dest = tmp.path().join("out");
    let out = run("build", &base, &recipe, &[&rpm], Some(&dest), &cache);
    support::assert_success("build (rpm)", &out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sorted(&report["images"][0]["packages"]["special_files"]), sorted(&want));
    let layer = top_layer(&dest);
    assert_eq!(layer["usr/bin/suid-tool"].1, 0o4755);
    assert_eq!(layer["usr/bin/sgid-tool"].1, 0o2755);
    assert!(
        layer.contains_key("usr/lib/librpm-special.so")
            && !layer.contains_key("lib/librpm-special.so"),
        "{:?}",
        layer.keys().collect::<Vec<_>>()
    );
    assert!(!layer.contains_key("opt/null") && !layer.contains_key("opt/sda"));
    assert_layer_stays_inside(&layer);
    extract_and_check(&dest, tmp.path());
}
