//! `/etc/shells` as debianutils' tools leave it (debianutils 5.x, Debian 12 and 13):
//! - `add-shell SHELL…` in a postinst (tmux, fish): each shell, and the same name in its real
//!   directory (`realpath -m`), appended where no line matches it;
//! - `update-shells`, which debianutils' postinst runs when its file trigger on
//!   `/usr/share/debianutils/shells.d` fires (a package ships a file there: zsh, screen) and on
//!   its own configure: `/etc/shells` merged with the shells the template
//!   (`/usr/share/debianutils/shells`) and `shells.d` list, and the state file
//!   `/var/lib/shells.state` rewritten, so a shell an administrator removed stays removed.
//!
//! Both follow the scripts of `/usr/sbin/add-shell` and `/usr/sbin/update-shells` line by line,
//! as `sh` reads them: a last line without a newline is not read (`while read`), a shell is the
//! text of a line before its first `#`. The files keep the mode of the file they replace
//! (`chmod --reference`); the base's metadata is not kept here, so they are written 0644
//! root, which is what every Debian and Ubuntu release has. Held against `apt-get install` in
//! Docker (the integration tests: tmux for add-shell, zsh for the trigger).
use crate::error::Result;
use crate::packages::image;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

const ETC_SHELLS: &str = "/etc/shells";
const TEMPLATE: &str = "/usr/share/debianutils/shells";
/// The directory debianutils' file trigger watches.
pub(super) const SHELLS_D: &str = "/usr/share/debianutils/shells.d";
const STATE: &str = "/var/lib/shells.state";
/// The largest `/etc/shells` (or list) read.
const MAX: u64 = 1 << 20;

/// What the scripts do to the shells, in the order they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// `add-shell SHELL…`.
    Add(Vec<String>),
    /// `update-shells` (the file trigger, or debianutils' own configure).
    Update,
}

/// Reads `add-shell SHELL…`: `None` for a form not emulated (no shell, an option, a shell
/// that is not an absolute plain path).
pub(super) fn parse_add(words: &[String]) -> Option<Change> {
    let shells = &words[1..];
    let plain = |s: &str| {
        s.starts_with('/')
            && s.len() > 1
            && !s.ends_with('/')
            && s.bytes().all(|b| b.is_ascii_graphic() && !b"\\[]*^$#'\"`".contains(&b))
    };
    (!shells.is_empty() && shells.iter().all(|s| plain(s))).then(|| Change::Add(shells.to_vec()))
}

/// Whether the image has debianutils' `update-shells`, without which its trigger is not the
/// one emulated here.
pub(super) fn has_update_shells(base: &dyn BaseFiles) -> Result<bool> {
    Ok(base.kind(&image::real(UPDATE_SHELLS, base)?)?.is_some())
}

const UPDATE_SHELLS: &str = "/usr/sbin/update-shells";

/// The two `update-shells` there are: debianutils 5.7 (Debian 12) adds every listed shell to
/// the set, duplicates included (zsh's `/bin/zsh` and `/usr/bin/zsh` on merged `/usr` give
/// `/usr/bin/zsh` twice); later ones (Debian 13's 5.23) add each name once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Duplicates,
    Once,
}

impl Variant {
    /// Which one the image's script is, told by the lines that differ; `None` for a script
    /// that is neither.
    fn of(script: &[u8]) -> Option<Variant> {
        let s = std::str::from_utf8(script).ok()?;
        let common = s.contains("STATE_FILE=\"$ROOT/var/lib/shells.state\"")
            && s.contains("hashset_contains \"$STATE_SHELLS\" \"$shell\"");
        let once = s.contains("if ! hashset_contains \"$PKG_SHELLS\" \"$line\"; then")
            && s.contains("if ! hashset_contains \"$PKG_SHELLS\" \"$realshell\"; then");
        let dup = s.contains("\t\tPKG_SHELLS=\"$PKG_SHELLS$line#\"\n")
            && s.contains("if [ \"$line\" != \"$realshell\" ]; then");
        match (common, once, dup) {
            (true, true, false) => Some(Variant::Once),
            (true, false, true) => Some(Variant::Duplicates),
            _ => None,
        }
    }
}

/// Applies `changes` in order to the image's `/etc/shells` (and update-shells' state).
/// Refuses (an error naming the command) where the real tool would fail or read what is not
/// emulated.
pub(super) fn apply(
    changes: &[(String, Change)],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    for (package, change) in changes {
        let refuse =
            |why: String| crate::packages::scripts::needs_sandbox(package, "postinst", why);
        match change {
            Change::Add(shells) => {
                let Some(text) = image::read(ETC_SHELLS, base, layer, MAX)? else {
                    return Err(refuse(format!(
                        "add-shell {}: the image has no {ETC_SHELLS} (add-shell fails)",
                        shells.join(" ")
                    )));
                };
                let text = add(&text, shells, |dir| real_dir(dir, base, layer))
                    .ok_or_else(|| refuse(format!("add-shell {}", shells.join(" "))))?;
                write(ETC_SHELLS, text, base, layer)?;
            }
            Change::Update => {
                let script = image::read(UPDATE_SHELLS, base, layer, MAX)?;
                let Some(variant) = script.as_deref().and_then(Variant::of) else {
                    return Err(refuse(format!(
                        "update-shells ({UPDATE_SHELLS} is not one of the versions emulated)"
                    )));
                };
                let etc = image::read(ETC_SHELLS, base, layer, MAX)?;
                let template = image::read(TEMPLATE, base, layer, MAX)?;
                let state = image::read(STATE, base, layer, MAX)?;
                let mut lists = Vec::new();
                lists.extend(template.clone());
                let mut names = image::list(SHELLS_D, base, layer)?;
                // `LC_COLLATE=C.UTF-8`: byte order.
                names.sort();
                for name in names {
                    let path = format!("{SHELLS_D}/{name}");
                    match image::kind(&path, base, layer)? {
                        Some(erdma_oci::rootfs::SnapEntry::File(_)) => {}
                        Some(erdma_oci::rootfs::SnapEntry::Dir) | None => continue,
                        // `test -f` follows a symlink: not told here.
                        Some(_) => return Err(refuse(format!("update-shells ({path})"))),
                    }
                    match image::read(&path, base, layer, MAX)? {
                        Some(t) => lists.push(t),
                        None => return Err(refuse(format!("update-shells ({path})"))),
                    }
                }
                let Some(source) = etc.or(template) else {
                    return Err(refuse(format!(
                        "update-shells: neither {ETC_SHELLS} nor {TEMPLATE} is in the image"
                    )));
                };
                let (etc, state) = update(variant, &source, &lists, state.as_deref(), |dir| {
                    real_dir(dir, base, layer)
                })
                .ok_or_else(|| refuse("update-shells".into()))?;
                write(ETC_SHELLS, etc, base, layer)?;
                write(STATE, state, base, layer)?;
            }
        }
    }
    Ok(())
}

fn write(path: &str, text: Vec<u8>, base: &dyn BaseFiles, layer: &mut LayerContents) -> Result<()> {
    let real = image::real(path, base)?;
    Ok(layer.add_file(&real, text, 0o644)?)
}

/// `dpkg-realpath DIR` (every symlink resolved, the last one too) in the image; `None` where it
/// leads through a symlink of the layer (not told here).
fn real_dir(dir: &str, base: &dyn BaseFiles, layer: &LayerContents) -> Option<String> {
    let real = image::real_dir(dir, base).ok()?;
    let real = real.as_str();
    if layer.files().any(|(p, e)| {
        matches!(e.kind, erdma_oci::layer::EntryKind::Symlink(_))
            && (real == p || real.starts_with(&format!("{p}/")))
    }) {
        return None;
    }
    Some(format!("/{real}"))
}

/// The lines `while read` reads: every line ended by a newline (the text of an unterminated
/// last line is not read).
fn read_lines(text: &[u8]) -> Option<Vec<&str>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut lines: Vec<&str> = text.split('\n').collect();
    lines.pop();
    Some(lines)
}

/// The name `SHELL` has in its real directory: `dirname(realpath)/basename`.
fn in_real_dir(shell: &str, real_dir: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let (dir, name) = shell.rsplit_once('/')?;
    let dir = if dir.is_empty() { "/" } else { dir };
    let real = real_dir(dir)?;
    Some(if real == "/" { format!("/{name}") } else { format!("{real}/{name}") })
}

/// add-shell: `text` with each of `shells`, and the name in its real directory, appended where
/// no line is it. `None` where the tool would do what is not reproduced (a file that does not
/// end in a newline).
fn add(
    text: &[u8],
    shells: &[String],
    real_dir: impl Fn(&str) -> Option<String>,
) -> Option<Vec<u8>> {
    if !text.is_empty() && !text.ends_with(b"\n") {
        return None;
    }
    let mut out = text.to_vec();
    for shell in shells {
        // `realpath -m SHELL` follows a symlink at SHELL itself too; a shell that is one is not
        // reproduced (real_dir resolves directories only).
        let real = in_real_dir(shell, &real_dir)?;
        for j in [shell.as_str(), real.as_str()] {
            // `grep -q "^J$"`: the names carry no regular-expression character but `.`.
            let matches = |line: &str| {
                line.len() == j.len()
                    && line.bytes().zip(j.bytes()).all(|(l, c)| c == b'.' || l == c)
            };
            let present = std::str::from_utf8(&out).ok()?.split('\n').any(matches);
            if !present {
                out.extend_from_slice(j.as_bytes());
                out.push(b'\n');
            }
        }
    }
    Some(out)
}

/// A hashset as update-shells keeps one: `#a#b#`.
fn contains(set: &str, x: &str) -> bool {
    set.contains(&format!("#{x}#"))
}

/// update-shells: the new `/etc/shells` and state file from `source` (`/etc/shells`, else the
/// template), `lists` (the template and each `shells.d` file, in glob order) and the old state.
fn update(
    variant: Variant,
    source: &[u8],
    lists: &[Vec<u8>],
    state: Option<&[u8]>,
    real_dir: impl Fn(&str) -> Option<String>,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let before_hash = |l: &str| l.split('#').next().unwrap_or_default().to_string();
    let mut pkg = String::from("#");
    for list in lists {
        for line in read_lines(list)? {
            let line = before_hash(line);
            if line.is_empty() {
                continue;
            }
            // A relative name would be resolved against the working directory.
            if !line.starts_with('/') || line.len() < 2 {
                return None;
            }
            let real = in_real_dir(&line, &real_dir)?;
            match variant {
                Variant::Duplicates => {
                    pkg.push_str(&line);
                    pkg.push('#');
                    if real != line {
                        pkg.push_str(&real);
                        pkg.push('#');
                    }
                }
                Variant::Once => {
                    for name in [&line, &real] {
                        if !contains(&pkg, name) {
                            pkg.push_str(name);
                            pkg.push('#');
                        }
                    }
                }
            }
        }
    }
    let mut old_state = String::from("#");
    if let Some(state) = state {
        for line in read_lines(state)? {
            let line = before_hash(line);
            if !line.is_empty() {
                old_state.push_str(&line);
                old_state.push('#');
            }
        }
    }
    let mut etc_out = String::new();
    let mut etc = String::from("#");
    for line in read_lines(source)? {
        let shell = before_hash(line);
        let keep = shell.is_empty() || contains(&pkg, &shell) || !contains(&old_state, &shell);
        if keep && (shell.is_empty() || !contains(&etc, &shell)) {
            etc_out.push_str(line);
            etc_out.push('\n');
            etc.push_str(&shell);
            etc.push('#');
        }
    }
    let mut state_out = String::new();
    // `set -- ${PKG_SHELLS###}` split on `#`: every name, duplicates included.
    for shell in pkg[1..].split('#').filter(|s| !s.is_empty()) {
        state_out.push_str(shell);
        state_out.push('\n');
        if !contains(&etc, shell) && !contains(&old_state, shell) {
            etc_out.push_str(shell);
            etc_out.push('\n');
        }
    }
    Some((etc_out.into_bytes(), state_out.into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merged `/usr`: `/bin` is `/usr/bin`.
    fn merged(dir: &str) -> Option<String> {
        Some(match dir.strip_prefix("/bin") {
            Some(rest) => format!("/usr/bin{rest}"),
            None => dir.to_string(),
        })
    }

    const BOOKWORM: &str = "# /etc/shells: valid login shells\n/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n/bin/rbash\n/usr/bin/rbash\n/bin/dash\n/usr/bin/dash\n";

    /// tmux's postinst (`add-shell /usr/bin/tmux`) on Debian 12's `/etc/shells`; `/bin/zsh`
    /// gets its `/usr/bin` twin; a name already there is not added again; `.` matches any
    /// character as grep's does.
    #[test]
    fn add_shell_appends_what_is_missing() {
        let out = add(BOOKWORM.as_bytes(), &["/usr/bin/tmux".into()], merged).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), format!("{BOOKWORM}/usr/bin/tmux\n"));
        let out = add(BOOKWORM.as_bytes(), &["/bin/zsh".into(), "/bin/sh".into()], merged).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), format!("{BOOKWORM}/bin/zsh\n/usr/bin/zsh\n"));
        let out = add(b"/usr/bin/py3x1\n", &["/usr/bin/py3.1".into()], merged).unwrap();
        assert_eq!(out, b"/usr/bin/py3x1\n".to_vec());
        assert!(add(b"/bin/sh", &["/bin/x".into()], merged).is_none());
    }

    /// update-shells on Debian 12's files when zsh ships `shells.d/zsh`: the new shells are
    /// appended after the existing lines, the state lists every packaged shell; a shell the
    /// administrator removed from `/etc/shells` (in the state, not in the file, not packaged
    /// any more) stays out; one still packaged comes back; local additions and comments stay.
    #[test]
    fn update_shells_merges_as_the_script_does() {
        let template = b"# /etc/shells: valid login shells\n/bin/sh\n".to_vec();
        let bash = b"/bin/bash\n/bin/rbash\n".to_vec();
        let zsh = b"/bin/zsh\n/usr/bin/zsh\n".to_vec();
        let state = "/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n/bin/rbash\n/usr/bin/rbash\n/bin/dash\n/usr/bin/dash\n";
        let lists = [template.clone(), bash.clone(), zsh];
        let (etc, st) = update(
            Variant::Duplicates,
            BOOKWORM.as_bytes(),
            &lists,
            Some(state.as_bytes()),
            merged,
        )
        .unwrap();
        // dash's list is not among these: its lines, in the state, are dropped. zsh's
        // `/usr/bin/zsh` is listed and is also `/bin/zsh`'s twin: the script appends it twice
        // (as Debian 12's apt-get install zsh leaves it, seen in Docker).
        assert_eq!(
            String::from_utf8(etc).unwrap(),
            "# /etc/shells: valid login shells\n/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n/bin/rbash\n/usr/bin/rbash\n/bin/zsh\n/usr/bin/zsh\n/usr/bin/zsh\n"
        );
        assert_eq!(
            String::from_utf8(st).unwrap(),
            "/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n/bin/rbash\n/usr/bin/rbash\n/bin/zsh\n/usr/bin/zsh\n/usr/bin/zsh\n"
        );
        // An administrator's removal of /bin/rbash (in the state, gone from the file) holds;
        // a local addition stays; an unterminated last line is not read.
        let etc_text = "# x\n/bin/sh\n/usr/bin/sh\n/opt/mysh\n/bin/bash";
        let (etc, _) = update(
            Variant::Duplicates,
            etc_text.as_bytes(),
            &[template.clone(), bash.clone()],
            Some(state.as_bytes()),
            merged,
        )
        .unwrap();
        assert_eq!(String::from_utf8(etc).unwrap(), "# x\n/bin/sh\n/usr/bin/sh\n/opt/mysh\n");
        // Debian 13's adds each name once.
        let (etc, st) =
            update(Variant::Once, BOOKWORM.as_bytes(), &lists, Some(state.as_bytes()), merged)
                .unwrap();
        assert!(String::from_utf8(etc)
            .unwrap()
            .ends_with("/usr/bin/rbash\n/bin/zsh\n/usr/bin/zsh\n"));
        assert!(String::from_utf8(st)
            .unwrap()
            .ends_with("/usr/bin/rbash\n/bin/zsh\n/usr/bin/zsh\n"));
    }

    /// The image's own script tells which, by the lines that differ between debianutils
    /// 5.7-0.5~deb12u1 and 5.23.2 (`/usr/sbin/update-shells` of each, read from the Debian 12
    /// and 13 archives; `testdata/facts/README.md`); the integration tests run the real ones.
    #[test]
    fn the_variant_is_read_from_the_image_script() {
        let head = "STATE_FILE=\"$ROOT/var/lib/shells.state\"\n";
        let tail = "if ! hashset_contains \"$STATE_SHELLS\" \"$shell\"; then\n";
        let d12 =
            "\t\tPKG_SHELLS=\"$PKG_SHELLS$line#\"\n\t\tif [ \"$line\" != \"$realshell\" ]; then\n";
        let d13 = "\t\tif ! hashset_contains \"$PKG_SHELLS\" \"$line\"; then\n\t\t\tPKG_SHELLS=\"$PKG_SHELLS$line#\"\n\t\tfi\n\t\tif ! hashset_contains \"$PKG_SHELLS\" \"$realshell\"; then\n";
        let of = |body: &str| Variant::of(format!("{head}{body}{tail}").as_bytes());
        assert_eq!(of(d12), Some(Variant::Duplicates));
        assert_eq!(of(d13), Some(Variant::Once));
        assert_eq!(of(""), None);
        assert_eq!(Variant::of(d12.as_bytes()), None);
    }
}
