//! `config.json` I/O. The spec is not ours: it is edited as JSON so fields we do not know
//! survive, and written atomically (temporary file, rename, same mode; see [`write_atomic`] for
//! why a bundle's spec is not fsync'd). Files that outlive a boot (engine configs, CDI specs)
//! go through [`write_bytes_atomic`], which is.
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::de::value::SeqAccessDeserializer;
use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub fn read(path: &Path) -> Result<(Vec<u8>, Value)> {
    let raw = std::fs::read(path).map_err(Error::io("reading", path))?;
    let spec: Value = serde_json::from_slice(&raw).map_err(|source| Error::Json {
        what: "OCI spec",
        path: path.to_path_buf(),
        source,
    })?;
    if !spec.is_object() {
        return Err(not_an_object(path));
    }
    Ok((raw, spec))
}

fn not_an_object(path: &Path) -> Error {
    Error::Malformed {
        what: "OCI spec",
        path: path.to_path_buf(),
        reason: "not a JSON object".into(),
    }
}

/// Members of `linux` that the eRDMA edit (`crate::hooks::edit_in_place`) neither reads nor
/// writes. [`Editable`] keeps their bytes instead of parsing them. `seccomp` is most of a
/// spec's size where an engine sets a profile (5.8 of Docker's 9.1 kB with its default
/// profile; containerd's CRI with `RuntimeDefault` likewise).
pub const NOT_EDITED: &[&str] = &["seccomp", "maskedPaths", "readonlyPaths"];

/// A spec as the edit sees it: every member parsed into `value` except `linux`'s
/// [`NOT_EDITED`] members, which stand there as `null` and keep their bytes. [`Editable::to_vec`]
/// writes them back as they were, in their places. What this saves an asking `create` is
/// building, serialising and dropping the tree of a seccomp profile (docs/benchmarks.md).
///
/// Parsed members behave as in a whole-spec parse (`serde_json::Value`): a key given twice
/// keeps its first place and its last value; so do the kept members.
#[derive(Debug)]
pub struct Editable {
    pub value: Value,
    /// `linux`'s kept members, by key.
    kept: Vec<(String, Box<RawValue>)>,
}

/// The top level of a spec, read in one pass: each member into a `Value`, `linux` through
/// [`Linux`].
struct Top<'a>(&'a mut Vec<(String, Box<RawValue>)>);

/// `linux`: an object's members into `Value`s but for [`NOT_EDITED`], whose bytes go to the
/// list; anything else (not an object) into a `Value` as it is.
struct Linux<'a>(&'a mut Vec<(String, Box<RawValue>)>);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = Map<String, Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = Map<String, Value>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Self::Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = m.next_key::<String>()? {
            let value = match key.as_str() {
                "linux" => m.next_value_seed(Linux(&mut *self.0))?,
                _ => m.next_value()?,
            };
            map.insert(key, value);
        }
        Ok(map)
    }
}

impl<'de> DeserializeSeed<'de> for Linux<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Linux<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> std::result::Result<Value, A::Error> {
        // A `linux` given twice: the last one's kept members only, as its value wins.
        self.0.clear();
        let mut map = Map::new();
        while let Some(key) = m.next_key::<String>()? {
            let value = if NOT_EDITED.contains(&key.as_str()) {
                let raw = m.next_value::<Box<RawValue>>()?;
                self.0.retain(|(name, _)| *name != key);
                self.0.push((key.clone(), raw));
                Value::Null
            } else {
                m.next_value()?
            };
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Value, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
}

impl Editable {
    /// Parses `raw` (the spec at `path`, named in errors), in one pass.
    pub fn parse(raw: &[u8], path: &Path) -> Result<Editable> {
        let json = |source| Error::Json { what: "OCI spec", path: path.to_path_buf(), source };
        let mut kept = Vec::new();
        let mut de = serde_json::Deserializer::from_slice(raw);
        // Anything but an object fails here as the whole-spec parse would, with serde_json's
        // own message for what is not JSON at all.
        let value = match Top(&mut kept).deserialize(&mut de).and_then(|v| de.end().map(|()| v)) {
            Ok(v) => v,
            Err(e) if e.is_data() => return Err(not_an_object(path)),
            Err(e) => return Err(json(e)),
        };
        Ok(Editable { value: Value::Object(value), kept })
    }

    /// The spec as JSON: `value` compact, the kept members as they were read. A kept member
    /// whose `null` the edit replaced (none does) is written as the edit left it.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a Value serialises")
    }
}

impl Serialize for Editable {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        struct Linux<'a>(&'a Map<String, Value>, &'a [(String, Box<RawValue>)]);
        impl Serialize for Linux<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(self.0.len()))?;
                for (k, v) in self.0 {
                    match self.1.iter().find(|(name, _)| name == k) {
                        Some((_, raw)) if v.is_null() => m.serialize_entry(k, raw)?,
                        _ => m.serialize_entry(k, v)?,
                    }
                }
                m.end()
            }
        }
        let Some(top) = self.value.as_object().filter(|_| !self.kept.is_empty()) else {
            return self.value.serialize(s);
        };
        let mut m = s.serialize_map(Some(top.len()))?;
        for (k, v) in top {
            match v.as_object() {
                Some(linux) if k == "linux" => m.serialize_entry(k, &Linux(linux, &self.kept))?,
                _ => m.serialize_entry(k, v)?,
            }
        }
        m.end()
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
    let dir = path.parent().unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = tempfile::Builder::new()
        .prefix(".config.json.")
        .tempfile_in(dir)
        .map_err(Error::io("writing", path))?;
    tmp.write_all(data).map_err(Error::io("writing", path))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("writing", path))?;
    match renameat_with(CWD, tmp.path(), CWD, path, RenameFlags::EXCHANGE) {
        // The new spec is in place; the temporary's name now holds the old one. A failure to
        // remove it leaves a stray hidden file in the bundle, not a wrong spec.
        Ok(()) => {
            if let Err(e) = tmp.close() {
                tracing::warn!("removing the previous {} after the edit: {e}", path.display());
            }
        }
        Err(_) => {
            tmp.persist(path).map_err(|e| Error::io("writing", path)(e.error))?;
        }
    }
    Ok(())
}

/// Writes `data` to `path` through a temporary file, fsync'd, and a rename (same mode if it
/// existed): for files that must survive a crash whole (engine configs, CDI specs).
pub fn write_bytes_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = tempfile::Builder::new()
        .prefix(".erdma.")
        .tempfile_in(dir)
        .map_err(Error::io("writing", path))?;
    tmp.write_all(data).map_err(Error::io("writing", path))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("writing", path))?;
    tmp.as_file().sync_all().map_err(Error::io("writing", path))?;
    tmp.persist(path).map_err(|e| Error::io("writing", path)(e.error))?;
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
        for k in NOT_EDITED {
            expect["linux"][*k] = Value::Null;
        }
        assert_eq!(spec.value, expect);
        let keys = |v: &Value| v["linux"].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&spec.value), keys(&whole(DOCKER.as_bytes())));
        // Unedited, it writes back what Docker wrote, byte for byte (Docker writes compact
        // JSON, as serde_json does).
        assert_eq!(String::from_utf8(spec.to_vec()).unwrap(), DOCKER);
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
}
