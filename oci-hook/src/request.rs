//! Whether a container asks for eRDMA, and for which devices.
use serde_json::Value;

use crate::config::Config;
use crate::error::{Error, Result};

pub const ANNOTATION: &str = "com.alibabacloud.erdma.devices";
pub const ENV: &str = "ERDMA_VISIBLE_DEVICES";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    None,
    All,
    Named(Vec<String>),
}

fn parse(value: &str, source_name: &'static str) -> Result<Request> {
    let v = value.trim();
    match v {
        "" | "none" | "void" => Ok(Request::None),
        "all" => Ok(Request::All),
        _ => {
            let names: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
            if names.iter().any(|n| {
                n.is_empty()
                    || !n
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
            }) {
                return Err(Error::BadRequest { value: value.to_string(), source_name });
            }
            Ok(Request::Named(names))
        }
    }
}

/// The value of `name` in an OCI `process.env` list; the last definition wins, as in
/// execve's environment handling by runc.
pub fn env_get<'a>(env: &'a [Value], name: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
}

/// Whether a spec whose bytes are `raw` can ask for eRDMA under `config`: `false` only when it
/// certainly cannot, that is, the default request is `none` and the bytes hold neither the
/// annotation's key nor (where the env is honoured) the variable's name, nor a `\u` escape of a
/// letter, digit, `_` or `.`, the only way JSON could spell either without its letters. A
/// `create` that does not ask then leaves the spec unparsed, and the real runtime reads and
/// checks it as it would without the wrapper.
pub fn may_ask(raw: &[u8], config: &Config) -> bool {
    let has = |needle: &[u8]| find(raw, needle).is_some();
    // An escape that could stand for a character of either name (`\u0045` for `E`); others,
    // such as Go's `\u0026` for `&`, cannot make one.
    let spells = || {
        raw.windows(2).enumerate().filter(|(_, w)| w == b"\\u").map(|(at, _)| at).any(|at| {
            let hex = raw.get(at + 2..at + 6).and_then(|h| std::str::from_utf8(h).ok());
            hex.and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
                .is_none_or(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        })
    };
    !matches!(parse(&config.default_request, "the default_request setting"), Ok(Request::None))
        || has(ANNOTATION.as_bytes())
        || (config.accept_env && has(ENV.as_bytes()))
        || spells()
}

/// Where `needle` first occurs in `haystack`. memchr's portable Two-Way search, not
/// `memchr::memmem`: memmem picks its SIMD code by asking the CPU what it has (std's feature
/// detection, a series of `cpuid`s), and every `cpuid` traps to the hypervisor in a VM. For
/// erdma-runtime, a process that lives for one call, those traps cost more than the search of
/// a few kilobytes of spec saves (docs/benchmarks.md).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::arch::all::twoway::Finder::new(needle).find(haystack, needle)
}

/// The request in `spec`: the annotation first, then (if the operator allows) the env, then
/// the runtime-wide default.
pub fn from_spec(spec: &Value, config: &Config) -> Result<Request> {
    if let Some(v) =
        spec.pointer("/annotations").and_then(|a| a.get(ANNOTATION)).and_then(Value::as_str)
    {
        return parse(v, "the annotation");
    }
    if config.accept_env {
        let env = spec.pointer("/process/env").and_then(Value::as_array);
        if let Some(v) = env.and_then(|e| env_get(e, ENV)) {
            return parse(v, "ERDMA_VISIBLE_DEVICES");
        }
    }
    parse(&config.default_request, "the default_request setting")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotation_env_and_default() {
        let c = Config::default();
        let s = json!({"process": {"env": ["ERDMA_VISIBLE_DEVICES=erdma_0,erdma_1"]}});
        assert_eq!(
            from_spec(&s, &c).unwrap(),
            Request::Named(vec!["erdma_0".into(), "erdma_1".into()])
        );
        let s = json!({"annotations": {ANNOTATION: "all"}, "process": {"env": ["ERDMA_VISIBLE_DEVICES=none"]}});
        assert_eq!(from_spec(&s, &c).unwrap(), Request::All);
        assert_eq!(from_spec(&json!({}), &c).unwrap(), Request::None);
        let no_env = Config { accept_env: false, ..Config::default() };
        assert_eq!(
            from_spec(&json!({"process": {"env": ["ERDMA_VISIBLE_DEVICES=all"]}}), &no_env)
                .unwrap(),
            Request::None,
            "an image cannot grant itself devices"
        );
        let def = Config { default_request: "all".into(), ..Config::default() };
        assert_eq!(from_spec(&json!({}), &def).unwrap(), Request::All);
        assert!(from_spec(&json!({"annotations": {ANNOTATION: "../../x"}}), &c).is_err());
    }

    fn env(vars: &[&str]) -> Value {
        json!({"process": {"env": vars}})
    }

    #[test]
    fn only_bytes_that_cannot_ask_skip_the_parse() {
        let c = Config::default();
        let no_env = Config { accept_env: false, ..Config::default() };
        let def = Config { default_request: "all".into(), ..Config::default() };
        // Docker's spec for a container that does not ask: nothing to parse.
        let docker = crate::spec::tests::DOCKER;
        assert!(!may_ask(docker.as_bytes(), &c));
        assert!(may_ask(docker.as_bytes(), &def), "the default asks for every container");
        let with = |from: &str, to: &str| {
            assert!(docker.contains(from));
            docker.replacen(from, to, 1)
        };
        // The variable, or the annotation, anywhere: the parse decides.
        let asking = with(r#""HOSTNAME="#, r#""ERDMA_VISIBLE_DEVICES=all","HOSTNAME="#);
        assert!(may_ask(asking.as_bytes(), &c));
        assert!(!may_ask(asking.as_bytes(), &no_env), "the env is not honoured");
        let annotated = with(
            r#""hostname":"#,
            &format!(r#""annotations":{{"{ANNOTATION}":"all"}},"hostname":"#),
        );
        assert!(may_ask(annotated.as_bytes(), &no_env));
        // A `\u` escape can spell the name without its letters; the parse then finds it.
        let escaped = with(r#""HOSTNAME="#, r#""ERDMA\u005fVISIBLE_DEVICES=all","HOSTNAME="#);
        assert!(may_ask(escaped.as_bytes(), &c));
        let spec: Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(from_spec(&spec, &c).unwrap(), Request::All);
        // serde_json's token for raw JSON text is a key like any other: no request hides in it.
        let token = with(
            r#""hostname":"#,
            &format!(
                r#""annotations":{{"$serde_json::private::RawValue":"{{\"{ANNOTATION}\":\"all\"}}"}},"hostname":"#
            ),
        );
        let spec: Value = serde_json::from_str(&token).unwrap();
        assert_eq!(from_spec(&spec, &c).unwrap(), Request::None);
        // Go's encoding/json escapes `&`, `<` and `>` (`\u0026`): no name is spelt that way, so
        // such a spec still skips the parse.
        let amp = with(r#""sleep","300""#, r#""sh","-c","a \u0026\u0026 b \u003e c""#);
        assert!(!may_ask(amp.as_bytes(), &c));
        // Wherever may_ask says no, the parse agrees.
        for raw in [docker.to_string(), with("HOSTNAME=", "ERDMA_VISIBLE=")] {
            assert!(!may_ask(raw.as_bytes(), &c));
            let spec: Value = serde_json::from_str(&raw).unwrap();
            assert_eq!(from_spec(&spec, &c).unwrap(), Request::None);
        }
    }

    #[test]
    fn env_details() {
        let c = Config::default();
        // The last definition wins, as in the process's environment.
        assert_eq!(
            from_spec(&env(&["ERDMA_VISIBLE_DEVICES=all", "ERDMA_VISIBLE_DEVICES=none"]), &c)
                .unwrap(),
            Request::None
        );
        assert_eq!(
            from_spec(&env(&["ERDMA_VISIBLE_DEVICES=none", "ERDMA_VISIBLE_DEVICES=all"]), &c)
                .unwrap(),
            Request::All
        );
        // Neighbours and malformed entries are not the variable.
        assert_eq!(
            from_spec(
                &env(&[
                    "ERDMA_VISIBLE_DEVICES_X=all",
                    "ERDMA_VISIBLE_DEVICES",
                    "X_ERDMA_VISIBLE_DEVICES=all"
                ]),
                &c
            )
            .unwrap(),
            Request::None
        );
        // Empty and `void` mean none (as NVIDIA_VISIBLE_DEVICES); spaces around names are fine.
        assert_eq!(from_spec(&env(&["ERDMA_VISIBLE_DEVICES="]), &c).unwrap(), Request::None);
        assert_eq!(from_spec(&env(&["ERDMA_VISIBLE_DEVICES=void"]), &c).unwrap(), Request::None);
        assert_eq!(
            from_spec(&env(&["ERDMA_VISIBLE_DEVICES= erdma_0 , rocep9s0"]), &c).unwrap(),
            Request::Named(vec!["erdma_0".into(), "rocep9s0".into()])
        );
        // A spec without process or env.
        assert_eq!(from_spec(&json!({"process": {}}), &c).unwrap(), Request::None);
    }

    #[test]
    fn bad_values_name_their_source() {
        let c = Config::default();
        for bad in ["erdma_0,", "erdma 0", "a/b", ",", "erdma_0;rm"] {
            let e = from_spec(&env(&[&format!("ERDMA_VISIBLE_DEVICES={bad}")]), &c)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("`{bad}` from ERDMA_VISIBLE_DEVICES")), "{e}");
        }
        // The annotation comes first: a bad one is an error even when the env is fine.
        let s = json!({"annotations": {ANNOTATION: "x y"}, "process": {"env": ["ERDMA_VISIBLE_DEVICES=all"]}});
        assert!(from_spec(&s, &c).unwrap_err().to_string().contains("from the annotation"));
        // An annotation that is not a string does not ask.
        assert_eq!(from_spec(&json!({"annotations": {ANNOTATION: 1}}), &c).unwrap(), Request::None);
        let bad_default = Config { default_request: "everything!".into(), ..Config::default() };
        assert!(from_spec(&json!({}), &bad_default)
            .unwrap_err()
            .to_string()
            .contains("default_request"));
        // The annotation still asks when the env is ignored.
        let no_env = Config { accept_env: false, ..Config::default() };
        assert_eq!(
            from_spec(&json!({"annotations": {ANNOTATION: "erdma_1"}}), &no_env).unwrap(),
            Request::Named(vec!["erdma_1".into()])
        );
        // A container can opt out of a default of `all`.
        let def = Config { default_request: "all".into(), ..Config::default() };
        assert_eq!(from_spec(&env(&["ERDMA_VISIBLE_DEVICES=none"]), &def).unwrap(), Request::None);
    }
}
