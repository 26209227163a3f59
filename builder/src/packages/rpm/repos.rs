//! The image's yum/dnf repository configuration: `/etc/yum.repos.d/*.repo` read (the base's
//! own repositories, where dependencies come from) and written (the recipe's, so a later `dnf
//! install` in the image reaches them with the same trust).
//!
//! `.repo` files are INI as dnf reads them (libdnf's ConfigParser): `[id]` sections, `key=value`
//! (or `key: value`), `#`/`;` comments, values continued on indented lines (several `baseurl`s,
//! `gpgkey`s). Variables (`$releasever`, `$basearch`, `$arch`, and `/etc/dnf/vars/NAME`,
//! `/etc/yum/vars/NAME`) are expanded as dnf's substitutions do.
use std::collections::BTreeMap;

use crate::error::Result;
use erdma_oci::files::BaseFiles;

/// One `[id]` section of a `.repo` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YumRepo {
    pub id: String,
    /// The file it came from, for messages.
    pub file: String,
    pub baseurls: Vec<String>,
    pub mirrorlist: Option<String>,
    pub metalink: Option<String>,
    pub enabled: bool,
    pub gpgcheck: bool,
    pub repo_gpgcheck: bool,
    /// `gpgkey=` URLs (`file:///etc/pki/rpm-gpg/…` in distribution images).
    pub gpgkeys: Vec<String>,
}

/// Bounds: a `.repo` file is a few KiB; an image has a handful.
const MAX_REPO_FILE: u64 = 1 << 20;

/// dnf's booleans: `1`, `yes`, `true`, `on` (libdnf's OptionBool).
fn truthy(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// Expands `$name` and `${name}` from `vars`; unknown variables are left as they are, as dnf
/// leaves them.
pub fn substitute(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, used) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        match vars.get(name).filter(|_| !name.is_empty()) {
            Some(v) => {
                out.push_str(v);
                rest = &after[used..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Parses one `.repo` file (`file` names it in messages), expanding `vars`.
pub fn parse(file: &str, text: &str, vars: &BTreeMap<String, String>) -> Vec<YumRepo> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_end();
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        if let Some(id) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((id.trim().to_string(), Vec::new()));
            continue;
        }
        let Some((_, keys)) = sections.last_mut() else { continue };
        // A continuation line: more values for the last key.
        if line.starts_with(char::is_whitespace) {
            if let Some((_, v)) = keys.last_mut() {
                v.push('\n');
                v.push_str(trimmed);
            }
            continue;
        }
        let split = trimmed.find(['=', ':']).filter(|i| !trimmed[..*i].contains("//"));
        if let Some(i) = split {
            keys.push((
                trimmed[..i].trim().to_ascii_lowercase(),
                trimmed[i + 1..].trim().to_string(),
            ));
        }
    }
    let list = |v: &str| {
        v.split(|c: char| c == '\n' || c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(|s| substitute(s, vars))
            .collect::<Vec<_>>()
    };
    sections
        .into_iter()
        .filter(|(id, _)| id != "main")
        .map(|(id, keys)| {
            let get =
                |k: &str| keys.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
            YumRepo {
                id: substitute(&id, vars),
                file: file.to_string(),
                baseurls: get("baseurl").map(list).unwrap_or_default(),
                mirrorlist: get("mirrorlist")
                    .map(|v| substitute(v.trim(), vars))
                    .filter(|v| !v.is_empty()),
                metalink: get("metalink")
                    .map(|v| substitute(v.trim(), vars))
                    .filter(|v| !v.is_empty()),
                enabled: get("enabled").and_then(truthy).unwrap_or(true),
                gpgcheck: get("gpgcheck").and_then(truthy).unwrap_or(false),
                repo_gpgcheck: get("repo_gpgcheck").and_then(truthy).unwrap_or(false),
                gpgkeys: get("gpgkey").map(list).unwrap_or_default(),
            }
        })
        .collect()
}

/// dnf's substitution variables for the image: `releasever` (the release's major version, as
/// the `system-release(releasever)` of EL release packages is), `basearch`/`arch`, and any
/// `/etc/dnf/vars/NAME` or `/etc/yum/vars/NAME` file (first line), which win.
pub fn variables(
    base: &dyn BaseFiles,
    releasever: &str,
    basearch: &str,
) -> Result<BTreeMap<String, String>> {
    let mut vars = builtin_variables(releasever, basearch);
    for dir in VARIABLE_DIRS {
        for name in base.list(dir)? {
            if let Some(v) = base.read(&format!("{dir}/{name}"), 4096)? {
                if let Some((name, v)) = variable_file(&format!("{dir}/{name}"), &v) {
                    vars.insert(name, v);
                }
            }
        }
    }
    Ok(vars)
}

/// Where dnf reads variables from, the later winning.
pub const VARIABLE_DIRS: [&str; 2] = ["etc/yum/vars", "etc/dnf/vars"];

/// The variables dnf sets itself.
pub fn builtin_variables(releasever: &str, basearch: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    vars.insert("releasever".to_string(), releasever.to_string());
    vars.insert(
        "releasever_major".to_string(),
        releasever.split('.').next().unwrap_or(releasever).to_string(),
    );
    vars.insert("basearch".to_string(), basearch.to_string());
    vars.insert("arch".to_string(), basearch.to_string());
    vars
}

/// The variable a file of one of [`VARIABLE_DIRS`] (`path` in the image) sets, from its
/// content: its name and its first line; `None` for a name dnf does not take.
pub fn variable_file(path: &str, content: &[u8]) -> Option<(String, String)> {
    let name = path.rsplit_once('/')?.1;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let v = String::from_utf8_lossy(content).lines().next().unwrap_or("").trim().to_string();
    Some((name.to_string(), v))
}

/// Where dnf reads `.repo` files (in the image, without the leading `/`).
const REPO_DIR: &str = "etc/yum.repos.d";

/// Whether `path` (in the image, without the leading `/`) is a `.repo` file dnf reads.
pub fn is_repo_file(path: &str) -> bool {
    path.strip_prefix(REPO_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| !name.contains('/') && name.ends_with(".repo"))
}

/// Which of [`VARIABLE_DIRS`] `path` (in the image, without the leading `/`) is a variables
/// file of.
pub fn variable_dir(path: &str) -> Option<&'static str> {
    let (dir, name) = path.rsplit_once('/')?;
    VARIABLE_DIRS.into_iter().find(|d| *d == dir && !name.is_empty())
}

/// Every repository the base's `/etc/yum.repos.d/*.repo` files define, in file name order.
pub fn base_repos(base: &dyn BaseFiles, vars: &BTreeMap<String, String>) -> Result<Vec<YumRepo>> {
    let mut names = base.list(REPO_DIR)?;
    names.sort();
    let mut out = Vec::new();
    for path in names.into_iter().map(|n| format!("{REPO_DIR}/{n}")).filter(|p| is_repo_file(p)) {
        if let Some(text) = base.read(&path, MAX_REPO_FILE)? {
            out.extend(parse(&format!("/{path}"), &String::from_utf8_lossy(&text), vars));
        }
    }
    Ok(out)
}

/// The `.repo` file erdma-build writes for one of the recipe's repositories, as the ECS AI-training-cluster guide writes
/// `/etc/yum.repos.d/erdma.repo` (`gpgcheck = 1`, the key from `gpgkey`), with the URL the
/// build reached and the key it verified with, kept in the image at `key_path`.
pub fn repo_file(
    id: &str,
    url: &str,
    key_path: &str,
    repo_gpgcheck: bool,
    exclude: &[String],
) -> String {
    let mut text = format!("[{id}]\nname={id} (added by erdma-build)\nbaseurl={url}\nenabled=1\ngpgcheck=1\ngpgkey=file:///{key_path}\n");
    if repo_gpgcheck {
        text.push_str("repo_gpgcheck=1\n");
    }
    if !exclude.is_empty() {
        text.push_str(&format!("excludepkgs={}\n", exclude.join(" ")));
    }
    text
}

/// `text` (a `.repo` file) with `excludepkgs=…` added to section `id`, every other line kept
/// as it was; patterns the section already excludes are not repeated.
pub fn add_excludes(text: &str, id: &str, exclude: &[String]) -> String {
    let mut out = String::new();
    let mut in_section = false;
    let mut done = false;
    let line_for = |existing: &str| {
        let have: Vec<&str> = existing
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
        let new: Vec<&str> =
            exclude.iter().map(String::as_str).filter(|e| !have.contains(e)).collect();
        new.join(" ")
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if in_section && !done {
                out.push_str(&format!("excludepkgs={}\n", line_for("")));
                done = true;
            }
            in_section = name.trim() == id;
        } else if in_section && !done {
            if let Some((k, v)) = trimmed.split_once('=') {
                if matches!(k.trim(), "excludepkgs" | "exclude") {
                    let add = line_for(v);
                    out.push_str(line);
                    if !add.is_empty() {
                        out.push(' ');
                        out.push_str(&add);
                    }
                    out.push('\n');
                    done = true;
                    continue;
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    if in_section && !done {
        out.push_str(&format!("excludepkgs={}\n", line_for("")));
    }
    out
}

/// rpm's name for a Debian architecture (dnf's `$basearch`).
pub fn basearch(debian_arch: &str) -> &str {
    match debian_arch {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        "ppc64el" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [("releasever", "3"), ("basearch", "x86_64"), ("arch", "x86_64")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_repo_files_as_dnf_does() {
        // The ECS AI-training-cluster guide's erdma.repo, with spaces around `=`, and an Alibaba Cloud Linux 3 style
        // file with two sections, a continued baseurl and a disabled repository.
        let erdma = parse("erdma.repo", "[erdma]\nname = ERDMA Repository\nbaseurl = https://mirrors.aliyun.com/erdma/yum/redhat/$releasever/erdma/x86_64\ngpgcheck = 1\nenabled = 1\ngpgkey = https://mirrors.aliyun.com/erdma/GPGKEY\n", &vars());
        assert_eq!(erdma.len(), 1);
        assert_eq!(
            erdma[0].baseurls,
            ["https://mirrors.aliyun.com/erdma/yum/redhat/3/erdma/x86_64"]
        );
        assert!(erdma[0].enabled && erdma[0].gpgcheck && !erdma[0].repo_gpgcheck);
        let al = parse(
            "AliYun.repo",
            "[main]\ngpgcheck=1\n\n# comment\n[alinux3-os]\nname=alinux3-os\nbaseurl=http://mirrors.cloud.aliyuncs.com/alinux/$releasever/os/$basearch/\n  https://mirrors.aliyun.com/alinux/${releasever}/os/$basearch/\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-ALINUX-3\nenabled=1\n\n[alinux3-plus]\nbaseurl=http://x/$unknown/\nenabled=0\n",
            &vars(),
        );
        assert_eq!(al.len(), 2, "[main] is not a repository");
        assert_eq!(
            al[0].baseurls,
            [
                "http://mirrors.cloud.aliyuncs.com/alinux/3/os/x86_64/",
                "https://mirrors.aliyun.com/alinux/3/os/x86_64/"
            ]
        );
        assert_eq!(al[0].gpgkeys, ["file:///etc/pki/rpm-gpg/RPM-GPG-KEY-ALINUX-3"]);
        assert!(!al[0].gpgcheck, "gpgcheck in [main] is not read per repository here");
        assert!(!al[1].enabled);
        assert_eq!(al[1].baseurls, ["http://x/$unknown/"], "unknown variables stay");
    }

    #[test]
    fn excludes_go_into_one_section_only() {
        let text = "[cuda-rhel9-x86_64]\nname=cuda-rhel9-x86_64\nbaseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64\nenabled=1\n\n[other]\nbaseurl=http://x/\n";
        let ex = vec!["libnccl-*-*+cuda11.*".to_string()];
        let out = add_excludes(text, "cuda-rhel9-x86_64", &ex);
        let parsed = parse("cuda.repo", &out, &vars());
        assert_eq!(parsed.len(), 2);
        assert!(out.contains("enabled=1\n\nexcludepkgs=libnccl-*-*+cuda11.*\n[other]"), "{out}");
        let again = add_excludes(&out, "cuda-rhel9-x86_64", &ex);
        assert_eq!(again, out, "idempotent");
    }

    #[test]
    fn written_repo_files_read_back() {
        let text = repo_file(
            "erdma",
            "https://mirrors.aliyun.com/erdma/yum/redhat/3/erdma/x86_64",
            "etc/pki/rpm-gpg/RPM-GPG-KEY-erdma",
            false,
            &[],
        );
        let back = parse("erdma.repo", &text, &vars());
        assert_eq!(
            back[0].baseurls,
            ["https://mirrors.aliyun.com/erdma/yum/redhat/3/erdma/x86_64"]
        );
        assert_eq!(back[0].gpgkeys, ["file:///etc/pki/rpm-gpg/RPM-GPG-KEY-erdma"]);
        assert!(back[0].gpgcheck && back[0].enabled);
    }
}
