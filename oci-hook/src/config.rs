//! The operator's configuration, `/etc/erdma/oci-hook.toml` (`ERDMA_OCI_HOOK_CONFIG` names
//! another file, for tests). A missing file means the defaults; unknown keys are errors.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const DEFAULT_PATH: &str = "/etc/erdma/oci-hook.toml";
pub const ENV_PATH: &str = match ENV_PATH_C.to_str() {
    Ok(name) => name,
    Err(_) => panic!("ASCII"),
};
/// [`ENV_PATH`] for the C library's `getenv`.
pub const ENV_PATH_C: &std::ffi::CStr = c"ERDMA_OCI_HOOK_CONFIG";

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The real OCI runtime `erdma-runtime` hands over to (a name on PATH or a path).
    pub runtime: String,
    /// Where `erdma-runtime` and the hooks log; never stdout, which belongs to the engine.
    pub log_file: Option<PathBuf>,
    /// `RUST_LOG`-style filter for that log.
    pub log_level: String,
    /// Root of sysfs, /dev and /proc, configurable so tests run on fixture trees (/proc for
    /// the NVIDIA driver's GPU list, `driver/nvidia/gpus`).
    pub sysfs_root: PathBuf,
    pub dev_root: PathBuf,
    pub proc_root: PathBuf,
    /// Kernel drivers whose RDMA devices count as eRDMA (add `mlx5_core` for RoCE NICs).
    pub drivers: Vec<String>,
    /// Honour `ERDMA_VISIBLE_DEVICES` from the image and container env. Off: only the
    /// annotation (set by the operator's orchestration) can ask, so an image cannot grant
    /// itself devices.
    pub accept_env: bool,
    /// What a container that does not ask gets: `none` (untouched) or `all`.
    pub default_request: String,
    /// `RLIMIT_MEMLOCK` for containers that ask: `unlimited` or a number of bytes.
    pub memlock: Memlock,
    /// Which networks a container that asks may be on: `any` (its own, with NCCL's settings
    /// read from it) or `require` (only the host's).
    pub network: NetworkPolicy,
    /// Set the NCCL environment: the settings derived from sysfs for the container's devices
    /// and the presets that hold on every eRDMA host (`nccl.rs`).
    pub env_presets: bool,
    /// Whose value wins when the container sets a variable the hook derives: `repair` (the
    /// container's, unless it cannot work on this host), `keep` (always the container's) or
    /// `replace` (always the derived one).
    pub env_policy: EnvPolicy,
    /// Let NCCL fall back to TCP sockets when eRDMA is unusable in a container that asked for
    /// it. Off (the default): such a container gets `NCCL_NET=IB`, and NCCL stops with its own
    /// error instead of running at TCP speed.
    pub tcp_fallback: bool,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum EnvPolicy {
    /// The container's value, unless it cannot work here (an `NCCL_IB_HCA` that selects none of
    /// its ACTIVE ports, an `NCCL_SOCKET_IFNAME` naming no interface of the host): replaced,
    /// with a warning.
    #[default]
    Repair,
    /// The container's value, always (a warning says when it cannot work).
    Keep,
    /// The derived value, always.
    Replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memlock {
    Unlimited,
    Bytes(u64),
}

impl Memlock {
    /// The value for `process.rlimits` (`u64::MAX` is RLIM_INFINITY).
    pub fn value(self) -> u64 {
        match self {
            Memlock::Unlimited => u64::MAX,
            Memlock::Bytes(b) => b,
        }
    }
}

impl Serialize for Memlock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Memlock::Unlimited => s.serialize_str("unlimited"),
            Memlock::Bytes(b) => s.serialize_u64(*b),
        }
    }
}

impl<'de> Deserialize<'de> for Memlock {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            N(u64),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) if s == "unlimited" => Ok(Memlock::Unlimited),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "memlock must be \"unlimited\" or a number of bytes, not `{s}`"
            ))),
            Raw::N(n) => Ok(Memlock::Bytes(n)),
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum NetworkPolicy {
    /// Refuse a container whose network namespace an engine manages (a pod without
    /// `hostNetwork: true`, `docker run` without `--network host`): for clusters that want
    /// every eRDMA job on the host's network.
    Require,
    /// Any network: a container on its own gets the devices, memlock and NCCL settings read
    /// from its namespace (`nccl.rs`), and one warning that `rdma_cm`-based programs need host
    /// networking. `warn`, its name before, is read as this.
    #[default]
    Any,
}

/// A setting that is one of a few words, read from the word only: a derived reading would also
/// take toml's table form of a unit variant (`network = { require = {} }`), and no key of the
/// file is a table, which the readers that look at less than the whole file rely on
/// ([`NotTable`]).
fn word<'de, D: serde::Deserializer<'de>, T: Copy>(
    d: D,
    words: &[(&str, T)],
    expected: &'static [&'static str],
) -> std::result::Result<T, D::Error> {
    let s = String::deserialize(d)?;
    match words.iter().find(|(w, _)| *w == s) {
        Some((_, v)) => Ok(*v),
        None => Err(serde::de::Error::unknown_variant(&s, expected)),
    }
}

impl<'de> Deserialize<'de> for NetworkPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use NetworkPolicy::*;
        word(d, &[("require", Require), ("any", Any), ("warn", Any)], &["require", "any"])
    }
}

impl<'de> Deserialize<'de> for EnvPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use EnvPolicy::*;
        let words = [("repair", Repair), ("keep", Keep), ("replace", Replace)];
        word(d, &words, &["repair", "keep", "replace"])
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            runtime: "runc".into(),
            log_file: None,
            log_level: "info".into(),
            sysfs_root: "/sys".into(),
            dev_root: "/dev".into(),
            proc_root: "/proc".into(),
            drivers: vec!["erdma".into()],
            accept_env: true,
            default_request: "none".into(),
            memlock: Memlock::Unlimited,
            network: NetworkPolicy::Any,
            env_presets: true,
            env_policy: EnvPolicy::Repair,
            tcp_fallback: false,
        }
    }
}

/// Every key of the file, as [`Config`] names its fields (a test holds the two alike).
pub const KEYS: &[&str] = &[
    "runtime",
    "log_file",
    "log_level",
    "sysfs_root",
    "dev_root",
    "proc_root",
    "drivers",
    "accept_env",
    "default_request",
    "memlock",
    "network",
    "env_presets",
    "env_policy",
    "tcp_fallback",
];

impl Config {
    /// Loads the file named by `ERDMA_OCI_HOOK_CONFIG`, else `/etc/erdma/oci-hook.toml`.
    pub fn load() -> Result<Config> {
        Self::load_from(&Self::path())
    }

    /// The file [`Config::load`] reads (it need not exist).
    pub fn path() -> PathBuf {
        std::env::var_os(ENV_PATH).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
    }

    pub fn load_from(path: &Path) -> Result<Config> {
        Self::read_as::<Config>(path, None, Config::default)
    }

    /// What a call that hands the container over to the real runtime unchanged reads
    /// (erdma-runtime's every subcommand but `create` and `run`): `runtime`, `log_file` and
    /// `log_level`, the rest left at its defaults. The file must be well-formed TOML without a
    /// table (no key takes one) and these three keys strings; what only the edit uses is
    /// neither read nor checked here, so that an engine can still stop and delete its
    /// containers while one of those settings is wrong (a `create` or `run` of a container that
    /// may ask, which uses them, refuses the file with its error). [`handover_plain`] reads the
    /// same from a file of the plainest form without a TOML parser.
    /// `read` is the file as the caller already read it, if it did ([`Read`]).
    pub fn load_handover(read: Option<Read>) -> Result<Config> {
        let h = Self::read_as::<Handover>(&Self::path(), read, Handover::default)?;
        Ok(Config {
            runtime: h.runtime,
            log_file: h.log_file,
            log_level: h.log_level,
            ..Config::default()
        })
    }

    /// What erdma-runtime's `create` and `run` read: the whole file, or where that is refused,
    /// with the refusal, the first look: what tells whether the container can ask for eRDMA
    /// ([`crate::request::may_ask`]), [`Config::load_handover`]'s keys, `accept_env` and
    /// `default_request`, the rest left at its defaults. Unknown keys are refused by the first
    /// look too (a misspelt `default_request` must not quietly leave every container without
    /// the default), as are a table anywhere (no key takes one: a `[table]` header would hide
    /// the keys after it) and those five keys' wrong types; the values of the keys only the
    /// edit uses are not looked at, so that a wrong one stops the containers that ask, which
    /// get the refusal, and no other. The file is read once, for both. [`handover_plain`] reads
    /// the same from a file of the plainest form ([`Plain::first_look`]). `read` is the file as
    /// the caller already read it, if it did ([`Read`]).
    pub fn load_or_first_look(read: Option<Read>) -> Result<(Config, Option<Error>)> {
        let path = Self::path();
        let Some(text) = Self::read_text(&path, read)? else {
            return Ok((Config::default(), None));
        };
        let refused = match toml::from_str::<Config>(&text) {
            Ok(config) => return Ok((config, None)),
            Err(source) => Error::Config { path: path.clone(), source },
        };
        let f = toml::from_str::<FirstLook>(&text)
            .map_err(|source| Error::Config { path: path.clone(), source })?;
        let config = Config {
            runtime: f.runtime,
            log_file: f.log_file,
            log_level: f.log_level,
            accept_env: f.accept_env,
            default_request: f.default_request,
            ..Config::default()
        };
        Ok((config, Some(refused)))
    }

    /// The file at `path` as a `T`; a missing file is `absent()`.
    fn read_as<T: serde::de::DeserializeOwned>(
        path: &Path,
        read: Option<Read>,
        absent: impl FnOnce() -> T,
    ) -> Result<T> {
        match Self::read_text(path, read)? {
            Some(text) => toml::from_str(&text)
                .map_err(|source| Error::Config { path: path.to_path_buf(), source }),
            None => Ok(absent()),
        }
    }

    /// The text of the file at `path`, or of what was `read` of it; `None` where there is no
    /// such file. Text that is not UTF-8 is refused alike either way.
    fn read_text(path: &Path, read: Option<Read>) -> Result<Option<String>> {
        if let Some(read) = read {
            let Some(bytes) = read.0 else { return Ok(None) };
            return String::from_utf8(bytes).map(Some).map_err(|_| {
                let e = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                );
                Error::io("reading config", path)(e)
            });
        }
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("reading config", path)(e)),
        }
    }
}

/// The configuration file as a caller already read it ([`Config::path`], whole; `None` where
/// there is none): erdma-runtime's quick way ([`crate::runtime::handover`]) hands what it read to
/// the full path, which then reads the same bytes instead of the file a second time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read(pub Option<Vec<u8>>);

/// The part of the file [`Config::load_handover`] reads; other keys are not looked at beyond
/// not being tables, which no key of the file is (a `[table]` header would take the keys
/// after it, `runtime` too, out of the top level).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(default)]
struct Handover {
    runtime: String,
    log_file: Option<PathBuf>,
    log_level: String,
    #[serde(flatten)]
    others: std::collections::BTreeMap<String, NotTable>,
}

/// A value not looked at, but refused where it is a table (or holds one, in an array): no key
/// of the file takes one.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct NotTable;

impl<'de> Deserialize<'de> for NotTable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NotTable;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string, number, boolean or array, not a table")
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<NotTable, E> {
                Ok(NotTable)
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<NotTable, E> {
                Ok(NotTable)
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<NotTable, E> {
                Ok(NotTable)
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<NotTable, E> {
                Ok(NotTable)
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<NotTable, E> {
                Ok(NotTable)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<NotTable, A::Error> {
                while seq.next_element::<NotTable>()?.is_some() {}
                Ok(NotTable)
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Default for Handover {
    fn default() -> Self {
        let Config { runtime, log_file, log_level, .. } = Config::default();
        Handover { runtime, log_file, log_level, others: Default::default() }
    }
}

/// The part of the file [`Config::load_or_first_look`] reads; the keys only the edit uses are
/// known and not looked at, any other key is an error.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
// In Config's order, which serde's message for an unknown key lists.
struct FirstLook {
    runtime: String,
    log_file: Option<PathBuf>,
    log_level: String,
    sysfs_root: NotTable,
    dev_root: NotTable,
    proc_root: NotTable,
    drivers: NotTable,
    accept_env: bool,
    default_request: String,
    memlock: NotTable,
    network: NotTable,
    env_presets: NotTable,
    env_policy: NotTable,
    tcp_fallback: NotTable,
}

impl Default for FirstLook {
    fn default() -> Self {
        let Config { runtime, log_file, log_level, accept_env, default_request, .. } =
            Config::default();
        let ignored = NotTable;
        FirstLook {
            runtime,
            log_file,
            log_level,
            sysfs_root: ignored,
            dev_root: ignored,
            proc_root: ignored,
            drivers: ignored,
            accept_env,
            default_request,
            memlock: ignored,
            network: ignored,
            env_presets: ignored,
            env_policy: ignored,
            tcp_fallback: ignored,
        }
    }
}

/// The keys [`Config::load_handover`] reads, as [`handover_plain`] finds them: each `None` when
/// the file does not set it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plain<'a> {
    pub runtime: Option<&'a [u8]>,
    pub log_file: Option<&'a [u8]>,
    pub log_level: Option<&'a [u8]>,
    /// What [`Config::load_or_first_look`] reads besides: `accept_env` and `default_request`.
    pub accept_env: Option<bool>,
    pub default_request: Option<&'a [u8]>,
    /// Whether [`Config::load_or_first_look`]'s first look takes the file: every key one of
    /// [`KEYS`], `accept_env` a boolean and `default_request` a string where they are set.
    pub first_look: bool,
}

/// [`Config::load_handover`]'s reading of `text`, without a TOML parser, for a file of the
/// plainest form only; `None` for any other, which then goes to the parser. erdma-runtime
/// reads its configuration on every call an engine makes, and a call it only hands over to the
/// real runtime (start, delete, state, kill: two or more per container) then touches no more
/// of the program than this and the `exec` (docs/benchmarks.md).
///
/// Plainest form: ASCII only; lines ended by `\n`; each line blank, a comment, or
/// `key = value` with an optional comment after it, where the key is bare (letters, digits,
/// `_`, `-`) and set once, and the value is a basic string without escapes, a literal string,
/// a decimal integer of up to 18 digits, `true`, `false`, or a one-line array of such strings.
/// That is a subset of TOML in which every document means what TOML says it means (tests compare
/// the two on generated files); what it leaves out (tables, dotted or quoted keys, escapes,
/// multi-line values, other numbers, dates, `\r`, control characters, any non-ASCII byte)
/// is refused, never guessed at. As for the parser, the three keys must be strings, and the
/// others' values are not looked at beyond their form; [`Plain::first_look`] says whether
/// the file also holds what `create` reads first.
pub fn handover_plain(text: &[u8]) -> Option<Plain<'_>> {
    let mut plain = Plain { first_look: true, ..Plain::default() };
    // Keys seen, for TOML's rule that a key is set once (a document has a handful).
    let mut seen: [&[u8]; 32] = [b""; 32];
    let mut n_seen = 0;
    if text.iter().any(|&c| (c < 0x20 && c != b'\t' && c != b'\n') || c >= 0x7f) {
        return None;
    }
    for line in text.split(|&c| c == b'\n') {
        let rest = trim_ws(line);
        if rest.is_empty() || rest[0] == b'#' {
            continue;
        }
        let key_len = rest.iter().position(|&c| !is_bare_key_byte(c)).unwrap_or(rest.len());
        let (key, rest) = rest.split_at(key_len);
        let rest = trim_ws(rest).strip_prefix(b"=")?;
        let rest = trim_ws(rest);
        if key.is_empty() || n_seen == seen.len() || seen[..n_seen].contains(&key) {
            return None;
        }
        seen[n_seen] = key;
        n_seen += 1;
        let (value, rest) = plain_value(rest)?;
        let rest = trim_ws(rest);
        if !(rest.is_empty() || rest[0] == b'#') {
            return None;
        }
        let slot = match key {
            b"runtime" => &mut plain.runtime,
            b"log_file" => &mut plain.log_file,
            b"log_level" => &mut plain.log_level,
            b"accept_env" => {
                plain.accept_env = value.boolean;
                plain.first_look &= value.boolean.is_some();
                continue;
            }
            b"default_request" => {
                plain.default_request = value.string;
                plain.first_look &= value.string.is_some();
                continue;
            }
            _ => {
                plain.first_look &= KEYS.iter().any(|k| k.as_bytes() == key);
                continue;
            }
        };
        *slot = Some(value.string?);
    }
    Some(plain)
}

/// One value of [`handover_plain`]'s form at the start of `s`, and what follows it.
#[derive(Default)]
struct PlainValue<'a> {
    /// The string's contents, for a string.
    string: Option<&'a [u8]>,
    /// The value, for `true` or `false`.
    boolean: Option<bool>,
}

fn plain_value(s: &[u8]) -> Option<(PlainValue<'_>, &[u8])> {
    if let Some((string, rest)) = plain_string(s) {
        return Some((PlainValue { string: Some(string), boolean: None }, rest));
    }
    let word =
        |w: &[u8]| s.strip_prefix(w).filter(|r| r.first().is_none_or(|&c| !is_bare_key_byte(c)));
    if let Some(rest) = word(b"true") {
        return Some((PlainValue { string: None, boolean: Some(true) }, rest));
    }
    if let Some(rest) = word(b"false") {
        return Some((PlainValue { string: None, boolean: Some(false) }, rest));
    }
    if let Some(mut rest) = s.strip_prefix(b"[") {
        loop {
            rest = trim_ws(rest);
            if let Some(after) = rest.strip_prefix(b"]") {
                return Some((PlainValue::default(), after));
            }
            let (_, after) = plain_string(rest)?;
            rest = trim_ws(after);
            match rest.first() {
                Some(b',') => rest = &rest[1..],
                Some(b']') => {}
                _ => return None,
            }
        }
    }
    // A decimal integer: an optional sign, then `0` or digits not starting with `0`; TOML's
    // underscores and other bases are left to the parser, as are numbers past 18 digits
    // (an i64 holds every one of those).
    let digits_at = usize::from(matches!(s.first(), Some(b'+' | b'-')));
    let digits = s[digits_at..].iter().take_while(|c| c.is_ascii_digit()).count();
    let end = digits_at + digits;
    let next_ok = s.get(end).is_none_or(|&c| c == b' ' || c == b'\t' || c == b'#');
    if digits == 0 || digits > 18 || (digits > 1 && s[digits_at] == b'0') || !next_ok {
        return None;
    }
    Some((PlainValue::default(), &s[end..]))
}

/// A basic string without escapes or a literal string at the start of `s` (its contents, and
/// what follows); not a multi-line one.
fn plain_string(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let quote = *s.first().filter(|q| matches!(q, b'"' | b'\''))?;
    let body = &s[1..];
    let end = body.iter().position(|&c| c == quote || (quote == b'"' && c == b'\\'))?;
    // `""` followed by a quote would open a multi-line string; a backslash is an escape.
    if body[end] != quote || (end == 0 && body.get(1) == Some(&quote)) {
        return None;
    }
    Some((&body[..end], &body[end + 1..]))
}

fn trim_ws(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&c| c != b' ' && c != b'\t').unwrap_or(s.len());
    let end = s.iter().rposition(|&c| c != b' ' && c != b'\t').map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

fn is_bare_key_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file the packages install as `/etc/erdma/oci-hook.toml`: as shipped (every key
    /// commented out) and with every key uncommented, it says the defaults, and it shows every
    /// key there is.
    #[test]
    fn shipped_file_shows_every_key_at_its_default() {
        let shipped = include_str!("../oci-hook.toml");
        assert_eq!(toml::from_str::<Config>(shipped).unwrap(), Config::default());
        let keys: Vec<&str> = shipped
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.contains(" = ") && !l.starts_with(' '))
            .collect();
        let uncommented = keys.iter().map(|l| format!("{l}\n")).collect::<String>();
        let all: Config = toml::from_str(&uncommented).unwrap();
        // log_file is shown with an example path; unset is its default.
        assert_eq!(Config { log_file: None, ..all.clone() }, Config::default());
        assert_eq!(all.log_file.as_deref(), Some(Path::new("/var/log/erdma-oci-hook.log")));
        let table = toml::Value::try_from(Config::default()).unwrap();
        let mut names: Vec<String> =
            keys.iter().map(|l| l.split(" = ").next().unwrap().to_string()).collect();
        names.sort();
        let mut want: Vec<String> = table.as_table().unwrap().keys().cloned().collect();
        want.push("log_file".into());
        want.sort();
        assert_eq!(names, want);
    }

    #[test]
    fn defaults_and_overrides() {
        let c: Config =
            toml::from_str("memlock = 8388608\nnetwork = \"warn\"\naccept_env = false\n").unwrap();
        assert_eq!(c.memlock, Memlock::Bytes(8 << 20));
        assert_eq!(c.network, NetworkPolicy::Any, "`warn` is read as `any`");
        assert_eq!(Config::default().network, NetworkPolicy::Any);
        let r: Config = toml::from_str("network = \"require\"\n").unwrap();
        assert_eq!(r.network, NetworkPolicy::Require);
        let e = toml::from_str::<Config>("network = \"host\"\n").unwrap_err().to_string();
        assert!(e.contains("require") && e.contains("any"), "{e}");
        assert!(!c.accept_env);
        assert_eq!(c.runtime, "runc");
        assert_eq!(Config::default().memlock.value(), u64::MAX);
        let e = toml::from_str::<Config>("memlok = 1\n").unwrap_err().to_string();
        assert!(e.contains("memlok"), "{e}");
        let e = toml::from_str::<Config>("memlock = \"lots\"\n").unwrap_err().to_string();
        assert!(e.contains("unlimited"), "{e}");
    }

    /// `handover_plain` against the TOML parser on generated files: wherever it answers, the
    /// parser reads the file, and the same three values from it; where the parser refuses a
    /// file, it does not answer. And `first_look` says whether the parser reads the file as
    /// `create` first reads it, with the same `accept_env` and `default_request`. Keys, values
    /// and line shapes are mixed from lists holding what the plain form takes and what lies
    /// just outside it.
    #[test]
    fn handover_plain_reads_what_toml_reads_or_nothing() {
        const KEYS: &[&str] = &[
            "runtime",
            "log_level",
            "log_file",
            "memlock",
            "drivers",
            "accept_env",
            "default_request",
            "default_request",
            "accept_env",
            "network",
            "memlok",
            "other",
            "Runtime",
            "run-time",
            "\"runtime\"",
            "a.b",
            "",
        ];
        const VALUES: &[&str] = &[
            r#""/usr/bin/runc""#,
            "'/usr/sbin/runc'",
            r#""runc""#,
            r#""""#,
            "''",
            r#""debug""#,
            r#""info""#,
            r#""none""#,
            r#""all""#,
            r#""a\"b""#,
            r#""a\u0041""#,
            r"'C:\x'",
            r#""""x""""#,
            "'''x'''",
            r#""""""#,
            "\"x\tz\"",
            "'it''s'",
            r#""unterminated"#,
            "5",
            "-0",
            "+12",
            "007",
            "0",
            "1_000",
            "0x10",
            "5.0",
            "1e5",
            "123456789012345678",
            "12345678901234567890",
            "true",
            "false",
            "truex",
            "[]",
            "[ ]",
            r#"["erdma", 'mlx5_core',]"#,
            r#"["a" "b"]"#,
            "[1, 2]",
            r#"["a""#,
            "[,]",
            "{a = 1}",
            "1979-05-27",
            "inf",
            "\"\u{e9}\"",
        ];
        const SHAPES: &[&str] = &[
            "{k} = {v}",
            "{k}={v}",
            "  {k}\t=  {v}  # note",
            "{k} = {v}#note",
            "{k} = {v} x",
            "# {k} = {v}",
            "",
            "[table]",
            "{k}",
            "{k} = {v}\r",
            "{k} = {v} # \u{e9}",
        ];
        // A small fixed generator: the same files on every run.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut answered, mut total, mut first_looks) = (0, 0, 0);
        for _ in 0..20_000 {
            let lines = 1 + next(4);
            let doc: String = (0..lines)
                .map(|_| {
                    SHAPES[next(SHAPES.len())]
                        .replace("{k}", KEYS[next(KEYS.len())])
                        .replace("{v}", VALUES[next(VALUES.len())])
                        + "\n"
                })
                .collect();
            total += 1;
            let parsed = toml::from_str::<Handover>(&doc);
            let Some(plain) = handover_plain(doc.as_bytes()) else { continue };
            answered += 1;
            let h =
                parsed.unwrap_or_else(|e| panic!("plain read a file TOML refuses: {doc:?}: {e}"));
            let text = |v: Option<&[u8]>| v.map(|b| String::from_utf8(b.to_vec()).unwrap());
            let want = Handover::default();
            assert_eq!(text(plain.runtime).unwrap_or(want.runtime), h.runtime, "{doc:?}");
            assert_eq!(text(plain.log_level).unwrap_or(want.log_level), h.log_level, "{doc:?}");
            assert_eq!(text(plain.log_file).map(PathBuf::from), h.log_file, "{doc:?}");
            let first = toml::from_str::<FirstLook>(&doc);
            assert_eq!(plain.first_look, first.is_ok(), "{doc:?}: {first:?}");
            if let Ok(f) = first {
                first_looks += 1;
                let want = FirstLook::default();
                assert_eq!(plain.accept_env.unwrap_or(want.accept_env), f.accept_env, "{doc:?}");
                let request = text(plain.default_request).unwrap_or(want.default_request);
                assert_eq!(request, f.default_request, "{doc:?}");
            }
        }
        // Not a test that passes by answering nothing: about one file in ten is plain, and
        // most of those hold what create reads first.
        assert!(answered * 20 > total, "{answered} of {total}");
        assert!(first_looks * 2 > answered, "{first_looks} of {answered}");
        eprintln!("{answered} of {total} plain, {first_looks} of them a first look");
    }

    /// The files erdma-kit itself writes or ships are plain: the shipped one and the one
    /// deploy/ writes, as they are and with every key set.
    #[test]
    fn shipped_and_deployed_files_are_plain() {
        let shipped = include_str!("../oci-hook.toml");
        assert_eq!(
            handover_plain(shipped.as_bytes()),
            Some(Plain { first_look: true, ..Plain::default() })
        );
        let uncommented: String = shipped
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.contains(" = ") && !l.starts_with(' '))
            .map(|l| format!("{l}\n"))
            .collect();
        let all = handover_plain(uncommented.as_bytes()).expect("every key uncommented is plain");
        assert_eq!(all.runtime, Some(&b"runc"[..]));
        assert_eq!((all.accept_env, all.default_request), (Some(true), Some(&b"none"[..])));
        assert!(all.first_look);
        let deployed = include_str!("../../deploy/erdma-kit-runtimeclass.yaml");
        let block: String = deployed
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("runtime = "))
            .take_while(|l| l.starts_with("    ") && !l.trim().is_empty())
            .map(|l| format!("{}\n", l.trim_start()))
            .collect();
        assert!(block.starts_with("runtime = "), "{block}");
        let deployed = handover_plain(block.as_bytes()).unwrap();
        assert_eq!(deployed.runtime, Some(&b"runc"[..]));
        assert!(deployed.first_look, "{block}");
        // Not plain: left to the parser, which reads the first (the others it refuses).
        for doc in [r#"runtime = "\u002Fusr/bin/runc""#, "[x]\nruntime = 'y'\n", "runtime = 1\n"] {
            assert_eq!(handover_plain(doc.as_bytes()), None, "{doc}");
        }
    }

    /// [`KEYS`] names every key of [`Config`], and `create`'s first look knows each of them
    /// (and no other).
    #[test]
    fn every_key_is_known_to_the_first_look() {
        let all = Config { log_file: Some("/x".into()), ..Config::default() };
        let table = toml::Value::try_from(&all).unwrap();
        let mut keys: Vec<&str> = table.as_table().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        let mut known = KEYS.to_vec();
        known.sort();
        assert_eq!(keys, known);
        let text = toml::to_string(&all).unwrap();
        assert!(toml::from_str::<FirstLook>(&text).is_ok(), "{text}");
        assert_eq!(handover_plain(text.as_bytes()).map(|p| p.first_look), Some(true), "{text}");
        let typo = format!("{text}default_requst = \"all\"\n");
        // Refused by both readers alike: create's first look stands in for the whole file's
        // reader where that refuses.
        let (full, first) = (toml::from_str::<Config>(&typo), toml::from_str::<FirstLook>(&typo));
        assert_eq!(full.unwrap_err().message(), first.unwrap_err().message());
        assert_eq!(handover_plain(typo.as_bytes()).map(|p| p.first_look), Some(false));
    }

    /// No key takes a table, so a table is refused by every reader alike: the first look and
    /// the handover's reading would otherwise miss the keys a `[table]` header takes out of
    /// the top level (`default_request`, `runtime`), and read their defaults instead.
    #[test]
    fn a_table_is_refused_by_every_reader() {
        for doc in [
            "[network]\ndefault_request = \"all\"\n",
            "env_presets = { default_request = \"all\" }\n",
            "drivers = [{ name = \"erdma\" }]\n",
            "[[memlock]]\nx = 1\n",
            "[other]\nruntime = \"crun\"\n",
            "sysfs_root = 1979-05-27\n",
            // toml's table form of a unit variant, which a derived reading of the two
            // policies would take.
            "network = { require = {} }\n",
            "env_policy = { keep = {} }\n",
            "[network]\nrequire = {}\n",
            "[network.require]\n",
        ] {
            assert!(toml::from_str::<Config>(doc).is_err(), "{doc}");
            assert!(toml::from_str::<FirstLook>(doc).is_err(), "{doc}");
            assert!(toml::from_str::<Handover>(doc).is_err(), "{doc}");
            assert_eq!(handover_plain(doc.as_bytes()), None, "{doc}");
        }
        // A value only the edit uses, wrong but not a table: refused by the whole file's
        // reader only.
        for doc in ["memlock = \"lots\"\n", "network = 5\n", "drivers = [1, [true]]\n"] {
            assert!(toml::from_str::<Config>(doc).is_err(), "{doc}");
            assert!(toml::from_str::<FirstLook>(doc).is_ok(), "{doc}");
            assert!(toml::from_str::<Handover>(doc).is_ok(), "{doc}");
        }
    }

    #[test]
    fn missing_file_is_defaults() {
        assert_eq!(
            Config::load_from(Path::new("/nonexistent/erdma.toml")).unwrap(),
            Config::default()
        );
    }

    /// What the caller already read is what is parsed; the file at the path is not read.
    #[test]
    fn a_read_file_is_taken_as_read() {
        let read = |bytes: Option<&[u8]>| Some(Read(bytes.map(<[u8]>::to_vec)));
        let (config, refused) =
            Config::load_or_first_look(read(Some(b"accept_env = false\n"))).unwrap();
        assert!(!config.accept_env && refused.is_none());
        let (config, refused) =
            Config::load_or_first_look(read(Some(b"accept_env = false\nmemlock = \"lots\"\n")))
                .unwrap();
        assert!(!config.accept_env);
        let why = std::error::Error::source(&refused.unwrap()).unwrap().to_string();
        assert!(why.contains("memlock"), "{why}");
        assert_eq!(Config::load_or_first_look(read(None)).unwrap().0, Config::default());
        // The file at the path is not read when the caller read it.
        let dir = tempfile::tempdir().unwrap();
        let there = dir.path().join("oci-hook.toml");
        std::fs::write(&there, "runtime = \"crun\"\n").unwrap();
        assert_eq!(Config::read_text(&there, read(None)).unwrap(), None);
        let text = Config::read_text(&there, read(Some(b"runtime = \"runc\"\n"))).unwrap();
        assert_eq!(text.as_deref(), Some("runtime = \"runc\"\n"));
        assert_eq!(
            Config::read_text(&there, None).unwrap().as_deref(),
            Some("runtime = \"crun\"\n")
        );
        let handover = Config::load_handover(read(Some(b"runtime = \"crun\"\n"))).unwrap();
        assert_eq!(handover.runtime, "crun");
        // Not UTF-8: refused as a read of the file refuses it, whole chain and kind.
        let odd = dir.path().join("odd.toml");
        std::fs::write(&odd, b"runtime = \"\xff\"\n").unwrap();
        let chain = |e: Error| {
            let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
            (e.to_string(), io.map(|io| (io.kind(), io.to_string())))
        };
        let from_file = chain(Config::read_text(&odd, None).unwrap_err());
        let from_read =
            chain(Config::read_text(&odd, read(Some(b"runtime = \"\xff\"\n"))).unwrap_err());
        assert_eq!(from_read, from_file);
        assert!(from_file.1.is_some_and(|(kind, _)| kind == std::io::ErrorKind::InvalidData));
    }
}
