//! `config.json` I/O. The spec is not ours: it is edited as JSON so fields we do not know
//! survive, and written atomically (temporary file, rename, same mode; see [`write_atomic`] for
//! why a bundle's spec is not fsync'd). Files that outlive a boot (engine configs, CDI specs)
//! go through [`write_bytes_atomic`], which is.
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub fn read(path: &Path) -> Result<(Vec<u8>, Value)> {
    let raw = std::fs::read(path).map_err(Error::io("reading", path))?;
    let spec = parse_whole(&raw, path)?;
    Ok((raw, spec))
}

/// `raw` (the spec at `path`, named in errors) parsed whole; an error unless it is an object.
fn parse_whole(raw: &[u8], path: &Path) -> Result<Value> {
    let spec: Value = serde_json::from_slice(raw).map_err(|source| Error::Json {
        what: "OCI spec",
        path: path.to_path_buf(),
        source,
    })?;
    if !spec.is_object() {
        return Err(Error::Malformed {
            what: "OCI spec",
            path: path.to_path_buf(),
            reason: "not a JSON object".into(),
        });
    }
    Ok(spec)
}

/// Members of `linux` and `process` that the eRDMA edit (`crate::hooks::edit_in_place`)
/// neither reads nor writes. [`Editable`] keeps their bytes instead of parsing them.
/// `linux.seccomp` is most of a spec's size where an engine sets a profile (5.3 of Docker's
/// 9.1 kB with its default profile; containerd's CRI with `RuntimeDefault` likewise);
/// `process.capabilities` is the next largest (three to five lists of names), and
/// `process.args` a job's command line.
pub const NOT_EDITED: &[(&str, &[&str])] = &[
    ("linux", &["seccomp", "maskedPaths", "readonlyPaths"]),
    ("process", &["args", "capabilities"]),
];

/// A spec as the edit sees it: every member parsed into `value` except the [`NOT_EDITED`]
/// ones, which stand there as `null` and keep their bytes. [`Editable::to_vec`] writes them
/// back as they were, in their places. What this saves an asking `create` is building,
/// serialising and dropping the tree of a seccomp profile (docs/benchmarks.md).
///
/// Parsed members are what a whole-spec parse (`serde_json::Value`) gives: a key given twice
/// keeps its first place and its last value; so do the kept members. What the split takes that
/// a whole-spec parse refuses goes to the real runtime as the engine wrote it, for the runtime
/// to judge as it would without the wrapper: in a kept member, which is checked as JSON
/// structure only (serde_json's `IgnoredAny`), a lone surrogate, invalid UTF-8 in a string or a
/// number out of range; in any member, nesting up to serde_json's limit of 128 levels counted
/// from the member rather than from the spec (Go's decoder, runc's, allows 10,000). Whatever
/// the split does not read as plainly well-formed is parsed whole, without kept members, and
/// refused with serde_json's own error where it is not JSON.
#[derive(Debug)]
pub struct Editable<'a> {
    pub value: Value,
    raw: &'a [u8],
    kept: Kept,
}

/// [`Editable`]'s kept members: parent, key and where the bytes are in the spec.
type Kept = Vec<(&'static str, String, Range<usize>)>;

impl<'a> Editable<'a> {
    /// Reads `raw` (the spec at `path`, named in errors).
    pub fn parse(raw: &'a [u8], path: &Path) -> Result<Editable<'a>> {
        if let Some(split) = Self::split(raw) {
            return Ok(split);
        }
        Ok(Editable { value: parse_whole(raw, path)?, raw, kept: Vec::new() })
    }

    /// The spec's members found by their structure and each read on its own where it is, the
    /// kept ones checked as JSON text; `None` for anything else.
    fn split(raw: &'a [u8]) -> Option<Editable<'a>> {
        let mut kept = Kept::new();
        let mut value = Map::new();
        let end = members(raw, skip_ws(raw, 0), |key, at| {
            let (member, end) = match NOT_EDITED.iter().find(|(name, _)| *name == key) {
                Some(&(parent, keep)) if raw.get(at) == Some(&b'{') => {
                    // A parent given twice: the last one's kept members only, as its value wins.
                    kept.retain(|(p, ..)| *p != parent);
                    let mut map = Map::new();
                    let end = members(raw, at, |k, at| {
                        let (v, end) = if keep.contains(&k.as_str()) {
                            let (IgnoredAny, end) = read_at::<IgnoredAny>(raw, at)?;
                            kept.retain(|(p, name, _)| (*p, name) != (parent, &k));
                            kept.push((parent, k.clone(), at..end));
                            (Value::Null, end)
                        } else {
                            read_at::<Value>(raw, at)?
                        };
                        map.insert(k, v);
                        Some(end)
                    })?;
                    (Value::Object(map), end)
                }
                _ => read_at::<Value>(raw, at)?,
            };
            value.insert(key, member);
            Some(end)
        })?;
        (skip_ws(raw, end) == raw.len()).then(|| Editable {
            value: Value::Object(value),
            raw,
            kept,
        })
    }

    /// The spec as JSON: `value` compact, as serde_json writes it, the kept members as they
    /// were read. A kept member whose `null` the edit replaced (none does) is written as the
    /// edit left it.
    pub fn to_vec(&self) -> Vec<u8> {
        let Some(top) = self.value.as_object().filter(|_| !self.kept.is_empty()) else {
            return serde_json::to_vec(&self.value).expect("a Value serialises");
        };
        let mut out = Vec::with_capacity(self.raw.len() + 4096);
        write_object(&mut out, top, |out, k, v| match v.as_object() {
            Some(members) if self.kept.iter().any(|(p, ..)| *p == k) => {
                write_object(out, members, |out, mk, mv| {
                    match self.kept.iter().find(|(p, name, _)| (*p, name.as_str()) == (k, mk)) {
                        Some((.., span)) if mv.is_null() => {
                            out.extend_from_slice(&self.raw[span.clone()])
                        }
                        _ => write_json(out, mv),
                    }
                })
            }
            _ => write_json(out, v),
        });
        out
    }
}

/// `value` as serde_json writes it, compact.
fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    serde_json::to_writer(out, value).expect("a string or a Value serialises");
}

/// `{"key":value,…}` as serde_json writes an object, each value written by `value`.
fn write_object(
    out: &mut Vec<u8>,
    members: &Map<String, Value>,
    mut value: impl FnMut(&mut Vec<u8>, &str, &Value),
) {
    out.push(b'{');
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(out, k);
        out.push(b':');
        value(out, k, v);
    }
    out.push(b'}');
}

fn skip_ws(raw: &[u8], mut i: usize) -> usize {
    while matches!(raw.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The JSON value at `at` in `raw`, as a `T`, and the offset just past it.
fn read_at<'de, T: serde::Deserialize<'de>>(raw: &'de [u8], at: usize) -> Option<(T, usize)> {
    let mut values = serde_json::Deserializer::from_slice(raw.get(at..)?).into_iter::<T>();
    let value = values.next()?.ok()?;
    Some((value, at + values.byte_offset()))
}

/// Reads the object whose `{` is at `at`: each member's key, decoded, and where its value
/// starts go to `member`, which reads the value and says where it ends. The offset just past
/// the `}`; `None` where the bytes are not an object's.
fn members(
    raw: &[u8],
    at: usize,
    mut member: impl FnMut(String, usize) -> Option<usize>,
) -> Option<usize> {
    if raw.get(at) != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(raw, at + 1);
    if raw.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if raw.get(i) != Some(&b'"') {
            return None;
        }
        let (key, end) = read_at::<String>(raw, i)?;
        i = skip_ws(raw, end);
        if raw.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(raw, member(key, skip_ws(raw, i + 1))?);
        match raw.get(i)? {
            b',' => i = skip_ws(raw, i + 1),
            b'}' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Replaces a bundle's `config.json` (the runtime wrapper's edit) atomically: the new spec goes
/// to a temporary file in the same directory, which then takes the original's name in one step,
/// so every reader (the runtime exec'd right after us, an engine) opens either the old file or
/// the new one, complete, through the page cache. There is no fsync, unlike CONTRIBUTING.md's rule for files we own:
/// fsync only adds durability across a host crash, and this file has no use after one: the
/// container dies with the host, and engines write a new spec before they run a container
/// again (containerd, and Docker through it, into a new bundle directory at every task create;
/// the kubelet creates new containers; Podman rewrites `config.json` at every container init).
/// It was a journal commit on every asking `create` when the bundle is on a disk filesystem
/// (`/run` is one on some hosts, this project's CI machine among them): 0.22 ms on an idle
/// machine, several ms while anything else writes. On a tmpfs it costs and buys nothing.
///
/// The step is `renameat2(RENAME_EXCHANGE)`, then the old spec, now under the temporary name,
/// is unlinked: as atomic for readers as a rename, but ext4 starts writing the new file out at
/// once when a rename replaces a file (`auto_da_alloc`, its guard for programs that rename
/// without fsync), and not on an exchange. Measured over a freshly written spec, as an engine
/// leaves it: on ext4 0.06 ms for the replacing rename, 0.03 ms for exchange and unlink; on
/// tmpfs 0.016 and 0.019 ms. Where the exchange is not supported (or there is nothing to
/// exchange with), a plain rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = Temporary::beside(path, ".config.json.").map_err(Error::io("writing", path))?;
    tmp.file.write_all(data).map_err(Error::io("writing", path))?;
    tmp.file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("writing", path))?;
    match renameat_with(CWD, &tmp.path, CWD, path, RenameFlags::EXCHANGE) {
        // The new spec is in place; the temporary's name now holds the old one. A failure to
        // remove it leaves a stray hidden file in the bundle, not a wrong spec.
        Ok(()) => {
            if let Err(e) = tmp.remove() {
                tracing::warn!("removing the previous {} after the edit: {e}", path.display());
            }
        }
        Err(_) => {
            rustix::fs::rename(&tmp.path, path)
                .map_err(|e| Error::io("writing", path)(e.into()))?;
            tmp.kept = true;
        }
    }
    Ok(())
}

/// A new file beside another, `PREFIXXXXXXX` in the same directory (the prefix, then six random
/// letters and digits), opened for writing with mode 0600 and removed again when dropped unless
/// `kept`: what [`write_atomic`] and [`write_bytes_atomic`] write into before the rename. Made
/// here with `open(O_CREAT | O_EXCL)` rather than with the tempfile crate, whose name needs a
/// seed from `std::thread::current()` and an absolute path from `getcwd`: under musl that set
/// up the C library's allocator and a pthread key for the thread's handle, eight system calls
/// of an asking `create`'s 144. The name is drawn from std's `RandomState` (seeded once per
/// thread from the kernel, as the spec's maps already are).
struct Temporary {
    path: std::path::PathBuf,
    file: std::fs::File,
    kept: bool,
}

impl Temporary {
    fn beside(path: &Path, prefix: &str) -> std::io::Result<Temporary> {
        use rustix::fs::{Mode, OFlags};
        use std::hash::BuildHasher;
        const LETTERS: &[u8; 62] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let dir = path.parent().unwrap_or(Path::new("."));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        for attempt in 0u32..100 {
            let mut draw = std::hash::RandomState::new().hash_one(attempt);
            let mut name = String::from(prefix);
            for _ in 0..6 {
                name.push(char::from(LETTERS[(draw % 62) as usize]));
                draw /= 62;
            }
            let tmp = dir.join(name);
            match rustix::fs::open(&tmp, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => return Ok(Temporary { path: tmp, file: fd.into(), kept: false }),
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("100 temporary names taken in {}", dir.display()),
        ))
    }

    /// Removes the file now, reporting a failure that dropping would not.
    fn remove(mut self) -> std::io::Result<()> {
        self.kept = true;
        rustix::fs::unlink(&self.path).map_err(Into::into)
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.kept {
            let _ = rustix::fs::unlink(&self.path);
        }
    }
}

/// Writes `data` to `path` through a temporary file, fsync'd, and a rename (same mode if it
/// existed): for files that must survive a crash whole (engine configs, CDI specs).
pub fn write_bytes_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = Temporary::beside(path, ".erdma.").map_err(Error::io("writing", path))?;
    tmp.file.write_all(data).map_err(Error::io("writing", path))?;
    tmp.file
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("writing", path))?;
    tmp.file.sync_all().map_err(Error::io("writing", path))?;
    rustix::fs::rename(&tmp.path, path).map_err(|e| Error::io("writing", path)(e.into()))?;
    tmp.kept = true;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A real engine's spec (testdata/specs/README.md).
    pub(crate) const DOCKER: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/specs/docker-20.10-bridge.json"
    ));

    fn whole(raw: &[u8]) -> Value {
        serde_json::from_slice(raw).unwrap()
    }

    #[test]
    fn an_editable_spec_is_the_whole_spec_with_the_unedited_members_kept_as_bytes() {
        let spec = Editable::parse(DOCKER.as_bytes(), "config.json".as_ref()).unwrap();
        // What the edit sees: every member, the kept ones as `null` in their places.
        let mut expect = whole(DOCKER.as_bytes());
        for (parent, keys) in NOT_EDITED {
            for k in *keys {
                expect[parent][*k] = Value::Null;
            }
        }
        assert_eq!(spec.value, expect);
        for parent in ["linux", "process"] {
            let keys =
                |v: &Value| v[parent].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(&spec.value), keys(&whole(DOCKER.as_bytes())));
        }
        // Unedited, it writes back what Docker wrote, byte for byte (Docker writes compact
        // JSON, as serde_json does).
        assert_eq!(String::from_utf8(spec.to_vec()).unwrap(), DOCKER);
    }

    #[test]
    fn a_kept_member_is_checked_as_json_text_and_goes_on_as_written() {
        // A lone surrogate and a number past f64: the whole parse refuses them; kept, they go to
        // the runtime as the engine wrote them.
        let raw = br#"{"linux":{"seccomp":{"names":["\ud800"],"n":1e400},"devices":[]}}"#;
        assert!(serde_json::from_slice::<Value>(raw).is_err());
        let spec = Editable::parse(raw, "config.json".as_ref()).unwrap();
        assert_eq!(spec.to_vec(), raw);
        // Where it is not JSON text, the whole parse says why.
        let raw = br#"{"linux":{"seccomp":{"names":[,]}}}"#;
        let e = Editable::parse(raw, "config.json".as_ref()).unwrap_err();
        assert!(
            std::error::Error::source(&e).unwrap().to_string().contains("expected value"),
            "{e}"
        );
    }

    #[test]
    fn an_edited_spec_keeps_the_unedited_members_verbatim_and_in_place() {
        let raw = br#"{
  "ociVersion": "1.0.2",
  "linux": {
    "seccomp": {"defaultAction":  "SCMP_ACT_ERRNO", "n": 1.50},
    "namespaces": [{"type": "mount"}],
    "maskedPaths": ["/proc/kcore"]
  },
  "process": {"env": ["A=b"]}
}"#;
        let mut spec = Editable::parse(raw, "config.json".as_ref()).unwrap();
        spec.value["process"]["env"].as_array_mut().unwrap().push(json!("C=d"));
        spec.value["linux"]["devices"] = json!([]);
        assert_eq!(
            String::from_utf8(spec.to_vec()).unwrap(),
            r#"{"ociVersion":"1.0.2","linux":{"seccomp":{"defaultAction":  "SCMP_ACT_ERRNO", "n": 1.50},"namespaces":[{"type":"mount"}],"maskedPaths":["/proc/kcore"],"devices":[]},"process":{"env":["A=b","C=d"]}}"#
        );
        // A kept member the edit replaced is written as the edit left it.
        spec.value["linux"]["maskedPaths"] = json!(["/x"]);
        assert_eq!(whole(&spec.to_vec())["linux"]["maskedPaths"], json!(["/x"]));
    }

    #[test]
    fn an_editable_spec_reads_odd_specs_as_the_whole_spec_parse_does() {
        for raw in [
            // A key given twice: its first place, its last value, kept or parsed alike.
            &br#"{"linux":{"seccomp":1,"devices":[],"seccomp":2},"a":1,"a":2}"#[..],
            br#"{"linux":{"seccomp":{"x":1}},"linux":{"namespaces":[]}}"#,
            br#"{"linux":{"seccomp":{"x":1}},"linux":{"seccomp":[3]}}"#,
            br#"{"linux":{"seccomp":{"x":1}},"linux":"no object"}"#,
            br#"{"process":{"args":["a"],"env":[],"args":["b"]},"linux":{"seccomp":1}}"#,
            br#"{"process":{"capabilities":{"bounding":[]}},"linux":{"seccomp":1},"process":{"env":["A=b"]}}"#,
            br#"{"process":{"args":"x","capabilities":null},"linux":{"readonlyPaths":[]}}"#,
            br#"{"linux":"no object","process":null}"#,
            br#"{"linux":[{"seccomp":1}]}"#,
            b"{}",
            br#" {"l\u0069nux": {"seccomp": 1}} "#,
        ] {
            let spec = Editable::parse(raw, "config.json".as_ref()).unwrap();
            let text = String::from_utf8_lossy(raw);
            assert_eq!(whole(&spec.to_vec()), whole(raw), "{text}");
        }
        for (raw, err) in [
            (&b"[1]"[..], "malformed OCI spec config.json: not a JSON object"),
            (b"\"x\"", "malformed OCI spec config.json: not a JSON object"),
            // Not JSON before it is not an object: serde_json's error.
            (b"[1,", "malformed OCI spec config.json"),
            (b"5 x", "malformed OCI spec config.json"),
            (b"{\"a\": [1}", "malformed OCI spec config.json"),
            (b"{\"a\":1{}", "malformed OCI spec config.json"),
            (b"{\"a\" 1}", "malformed OCI spec config.json"),
            (b"{\"a\":\"\xff\"}", "malformed OCI spec config.json"),
            (b"{nope", "malformed OCI spec config.json"),
            (b"{\"linux\": {\"seccomp\": }}", "malformed OCI spec config.json"),
            (b"{} {}", "malformed OCI spec config.json"),
        ] {
            let e = Editable::parse(raw, "config.json".as_ref()).unwrap_err();
            assert_eq!(e.to_string(), err, "{}", String::from_utf8_lossy(raw));
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_atomic_replaces_keeps_the_mode_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, b"{\"old\": true}").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&p, br#"{"new": 1}"#).unwrap();
        assert_eq!(read(&p).unwrap().1, json!({"new": 1}));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(names(dir.path()), ["config.json"]);
        // Nothing to exchange with: a plain rename, default mode.
        let q = dir.path().join("alt.json");
        write_atomic(&q, br#"{"alt": []}"#).unwrap();
        assert_eq!(read(&q).unwrap().1, json!({"alt": []}));
        assert_eq!(std::fs::metadata(&q).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(names(dir.path()), ["alt.json", "config.json"]);
    }

    #[test]
    fn a_temporary_not_kept_is_removed_and_names_differ() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        // Names drawn afresh: the name of one removed is not the next one's.
        let gone = Temporary::beside(&p, ".config.json.").unwrap();
        let first = gone.path.clone();
        drop(gone);
        let (a, b) = (
            Temporary::beside(&p, ".config.json.").unwrap(),
            Temporary::beside(&p, ".config.json.").unwrap(),
        );
        assert_ne!(a.path, first);
        for t in [&a, &b] {
            let name = t.path.file_name().unwrap().to_str().unwrap();
            let tail = name.strip_prefix(".config.json.").unwrap();
            assert!(tail.len() == 6 && tail.bytes().all(|c| c.is_ascii_alphanumeric()), "{name}");
            let mode = std::fs::metadata(&t.path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{name}: for its owner only until the mode is set");
        }
        assert_eq!(names(dir.path()).len(), 2);
        drop(a);
        b.remove().unwrap();
        assert!(names(dir.path()).is_empty());
        // No directory to make it in: the error, and nothing made.
        assert!(Temporary::beside(&dir.path().join("gone/config.json"), ".config.json.").is_err());
        assert!(names(dir.path()).is_empty());
    }
}
