//! One registries.conf file's TOML into [`RegistriesConf`]: version 2 as written, version 1
//! (`[registries.search]`, `.insecure`, `.block`) converted as containers/image's
//! `pkg/sysregistriesv2` does, unknown keys collected for a warning. Which files are read and
//! how they merge is [`super`]'s.

use std::path::Path;

use serde::Deserialize;

use super::*;

/// containers/image `parseLocation`: trailing `/` dropped, `http://` and `https://` refused.
fn parse_location(input: &str) -> Result<String, String> {
    let trimmed = input.trim_end_matches('/');
    if trimmed.starts_with("http://") || trimmed.starts_with("https://") {
        return Err(format!("{input:?} must not have a scheme"));
    }
    Ok(trimmed.to_owned())
}

fn invalid(file: &Path, message: String) -> ConfError {
    ConfError::Invalid { file: file.to_owned(), message }
}

/// A file as written; absent and empty values are told apart where containers/image does.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RawFile {
    registry: Option<Vec<RawRegistry>>,
    unqualified_search_registries: Option<Vec<String>>,
    credential_helpers: Option<Vec<String>>,
    #[serde(default)]
    short_name_mode: String,
    #[serde(default)]
    additional_layer_store_auth_helper: String,
    aliases: Option<BTreeMap<String, String>>,
    /// Version 1's `[registries.search]`, `[registries.insecure]` and `[registries.block]`.
    #[serde(default)]
    registries: RawV1,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct RawRegistry {
    prefix: String,
    location: String,
    insecure: bool,
    blocked: bool,
    mirror_by_digest_only: bool,
    pull_from_mirror: String,
    mirror: Vec<RawMirror>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct RawMirror {
    location: String,
    insecure: bool,
    pull_from_mirror: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawV1 {
    search: RawV1List,
    insecure: RawV1List,
    block: RawV1List,
}

#[derive(Deserialize, Default)]
struct RawV1List {
    registries: Option<Vec<String>>,
}

const TOP_KEYS: &[&str] = &[
    "registry",
    "unqualified-search-registries",
    "credential-helpers",
    "short-name-mode",
    "additional-layer-store-auth-helper",
    "aliases",
    "registries",
];
const REGISTRY_KEYS: &[&str] = &[
    "prefix",
    "location",
    "insecure",
    "blocked",
    "mirror-by-digest-only",
    "pull-from-mirror",
    "mirror",
];
const MIRROR_KEYS: &[&str] = &["location", "insecure", "pull-from-mirror"];
const V1_TABLES: &[&str] = &["search", "insecure", "block"];

pub(super) fn parse_file(
    text: &str,
    file: &Path,
    drop_in: bool,
) -> Result<RegistriesConf, ConfError> {
    let syntax = |e: toml::de::Error| {
        let message = e.message().trim_end();
        let message = match e.span() {
            Some(span) => {
                let before = &text.as_bytes()[..span.start.min(text.len())];
                let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
                format!("line {line}: {message}")
            }
            None => message.to_owned(),
        };
        ConfError::Syntax { file: file.to_owned(), message }
    };
    let raw: RawFile = toml::from_str(text).map_err(syntax)?;
    let table: toml::Table = toml::from_str(text).map_err(syntax)?;

    // Set as containers/image tells it: a list present, even empty; a string not empty.
    let v1 = &raw.registries;
    let v1_set = [&v1.search, &v1.insecure, &v1.block].iter().any(|l| l.registries.is_some());
    let v2_keys: Vec<&str> = [
        ("[[registry]]", raw.registry.is_some()),
        ("unqualified-search-registries", raw.unqualified_search_registries.is_some()),
        ("credential-helpers", raw.credential_helpers.is_some()),
        ("short-name-mode", !raw.short_name_mode.is_empty()),
        ("additional-layer-store-auth-helper", !raw.additional_layer_store_auth_helper.is_empty()),
        ("[aliases]", raw.aliases.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
    .collect();

    // containers-registries.conf(5), Short-Name Aliasing: Modes.
    if !matches!(raw.short_name_mode.as_str(), "" | "enforcing" | "permissive" | "disabled") {
        let message = format!(
            "short-name-mode {:?} is not \"enforcing\", \"permissive\" or \"disabled\"",
            raw.short_name_mode
        );
        return Err(invalid(file, message));
    }

    let (registries, search, search_key) = if v1_set {
        // containers-registries.conf.d(5): "All drop-in configuration files must be specified
        // in the version 2"; containers/image refuses a file with both versions.
        if drop_in {
            let message = "drop-in files must use version 2 ([[registry]], unqualified-search-registries), \
                           not the version 1 tables [registries.search], [registries.insecure] and [registries.block]";
            return Err(invalid(file, message.to_owned()));
        }
        if !v2_keys.is_empty() {
            let message = format!(
                "the version 1 tables [registries.search], [registries.insecure] and [registries.block] \
                 cannot be mixed with version 2 settings (here: {})",
                v2_keys.join(", ")
            );
            return Err(invalid(file, message));
        }
        let registries = registries_v1(&raw.registries, file)?;
        (registries, raw.registries.search.registries, "[registries.search]: registries")
    } else {
        let registries = registries_v2(raw.registry.unwrap_or_default(), file)?;
        (registries, raw.unqualified_search_registries, "unqualified-search-registries")
    };

    let search = match search {
        None => None,
        Some(list) => Some(
            list.iter()
                .map(|entry| {
                    let host = parse_location(entry)
                        .map_err(|e| invalid(file, format!("{search_key}: {e}")))?;
                    if !is_domain(&host) {
                        return Err(invalid(
                            file,
                            format!("{search_key}: {entry:?} is not a host[:port]"),
                        ));
                    }
                    Ok(host)
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };

    // Within one file the first entry for a prefix wins and later ones are ignored, as in
    // containers/image; entries are kept sorted by prefix.
    let mut by_prefix = BTreeMap::new();
    for r in registries {
        by_prefix.entry(r.prefix.clone()).or_insert(r);
    }
    Ok(RegistriesConf {
        registries: by_prefix.into_values().collect(),
        unqualified_search_registries_file: search.as_ref().map(|_| file.to_owned()),
        unqualified_search_registries: search.unwrap_or_default(),
        files: vec![file.to_owned()],
        unknown_keys: unknown_keys(&table)
            .into_iter()
            .map(|key| UnknownKey { file: file.to_owned(), key })
            .collect(),
    })
}

/// The `[[registry]]` entries, checked as containers/image checks them.
fn registries_v2(raw: Vec<RawRegistry>, file: &Path) -> Result<Vec<Registry>, ConfError> {
    let mut out: Vec<Registry> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let at = format!("[[registry]] {}", i + 1);
        let err = |message: String| invalid(file, format!("{at}: {message}"));
        let location = parse_location(&r.location).map_err(|e| err(format!("location {e}")))?;
        // containers-registries.conf(5), Choosing a [[registry]] TOML table: prefix defaults to
        // location; Remapping and mirroring registries: only a wildcard prefix may go without
        // a location.
        let prefix = if r.prefix.is_empty() {
            if location.is_empty() {
                return Err(err("neither prefix nor location is set".to_owned()));
            }
            location.clone()
        } else {
            let prefix = parse_location(&r.prefix).map_err(|e| err(format!("prefix {e}")))?;
            if !prefix.starts_with("*.") && location.is_empty() {
                return Err(err(format!("location is unset, which only a wildcard prefix such as \"*.example.com\" allows (prefix {prefix:?})")));
            }
            prefix
        };
        if prefix.starts_with("*.") && prefix.contains(['/', '@', ':']) {
            return Err(err(format!(
                "wildcard prefix {prefix:?} must be of the form \"*.example.com\", without port, path, tag or digest"
            )));
        }
        if !r.pull_from_mirror.is_empty() {
            return Err(err(
                "pull-from-mirror belongs in [[registry.mirror]], not in [[registry]]".to_owned(),
            ));
        }
        let mut mirrors = Vec::with_capacity(r.mirror.len());
        for (j, m) in r.mirror.into_iter().enumerate() {
            let err = |message: String| err(format!("[[registry.mirror]] {}: {message}", j + 1));
            let location = parse_location(&m.location).map_err(|e| err(format!("location {e}")))?;
            if location.is_empty() {
                return Err(err("location is unset".to_owned()));
            }
            if r.mirror_by_digest_only && !m.pull_from_mirror.is_empty() {
                return Err(err(
                    "pull-from-mirror cannot be set when the registry sets mirror-by-digest-only"
                        .to_owned(),
                ));
            }
            let pull_from_mirror = match m.pull_from_mirror.as_str() {
                "" | "all" => PullFromMirror::All,
                "digest-only" => PullFromMirror::DigestOnly,
                "tag-only" => PullFromMirror::TagOnly,
                other => {
                    return Err(err(format!(
                        "pull-from-mirror {other:?} is not \"all\", \"digest-only\" or \"tag-only\""
                    )));
                }
            };
            mirrors.push(Mirror { location, insecure: m.insecure, pull_from_mirror });
        }
        out.push(Registry {
            prefix,
            location,
            insecure: r.insecure,
            blocked: r.blocked,
            mirror_by_digest_only: r.mirror_by_digest_only,
            mirrors,
            file: file.to_owned(),
        });
    }
    // One registry under several prefixes must agree on insecure and blocked.
    fn physical(r: &Registry) -> &str {
        if r.location.is_empty() {
            &r.prefix
        } else {
            &r.location
        }
    }
    for (j, b) in out.iter().enumerate() {
        let conflict = out[..j].iter().position(|a| {
            physical(a) == physical(b) && (a.insecure != b.insecure || a.blocked != b.blocked)
        });
        if let Some(i) = conflict {
            let what = if out[i].insecure != b.insecure { "insecure" } else { "blocked" };
            let message = format!(
                "[[registry]] {}: {:?} is also in [[registry]] {} with a different {what} setting",
                j + 1,
                physical(b),
                i + 1
            );
            return Err(invalid(file, message));
        }
    }
    Ok(out)
}

/// containers-registries.conf(5), VERSION 1 FORMAT: each registry listed under
/// `[registries.block]` or `[registries.insecure]` becomes an entry with that prefix and
/// location; blocked ones first, each once, in the order first listed, as containers/image
/// converts them.
fn registries_v1(v1: &RawV1, file: &Path) -> Result<Vec<Registry>, ConfError> {
    let mut out: Vec<Registry> = Vec::new();
    for (table, list, blocks) in [("block", &v1.block, true), ("insecure", &v1.insecure, false)] {
        let at = format!("[registries.{table}]: registries");
        for entry in list.registries.iter().flatten() {
            let location =
                parse_location(entry).map_err(|e| invalid(file, format!("{at}: {e}")))?;
            if location.is_empty() {
                return Err(invalid(file, format!("{at}: an entry is empty")));
            }
            let i = match out.iter().position(|r| r.location == location) {
                Some(i) => i,
                None => {
                    out.push(Registry {
                        prefix: location.clone(),
                        location,
                        insecure: false,
                        blocked: false,
                        mirror_by_digest_only: false,
                        mirrors: Vec::new(),
                        file: file.to_owned(),
                    });
                    out.len() - 1
                }
            };
            if blocks {
                out[i].blocked = true;
            } else {
                out[i].insecure = true;
            }
        }
    }
    Ok(out)
}

/// The keys of `table` no reader here knows, as dotted paths.
fn unknown_keys(table: &toml::Table) -> Vec<String> {
    fn extra(table: &toml::Table, known: &[&str], at: &str, out: &mut Vec<String>) {
        for key in table.keys().filter(|k| !known.contains(&k.as_str())) {
            out.push(if at.is_empty() { key.clone() } else { format!("{at}.{key}") });
        }
    }
    fn tables(value: Option<&toml::Value>) -> impl Iterator<Item = (usize, &toml::Table)> {
        let items = value.and_then(toml::Value::as_array).into_iter().flatten();
        items.enumerate().filter_map(|(i, v)| v.as_table().map(|t| (i + 1, t)))
    }
    let mut out = Vec::new();
    extra(table, TOP_KEYS, "", &mut out);
    for (i, registry) in tables(table.get("registry")) {
        let at = format!("registry[{i}]");
        extra(registry, REGISTRY_KEYS, &at, &mut out);
        for (j, mirror) in tables(registry.get("mirror")) {
            extra(mirror, MIRROR_KEYS, &format!("{at}.mirror[{j}]"), &mut out);
        }
    }
    if let Some(v1) = table.get("registries").and_then(toml::Value::as_table) {
        extra(v1, V1_TABLES, "registries", &mut out);
        for name in V1_TABLES {
            if let Some(list) = v1.get(*name).and_then(toml::Value::as_table) {
                extra(list, &["registries"], &format!("registries.{name}"), &mut out);
            }
        }
    }
    out
}
