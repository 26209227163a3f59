//! Package scripts, one vocabulary for both backends: what each maintainer script (dpkg) or
//! scriptlet (rpm) of a package the build touches would have done, and what the build did
//! instead. Nothing is dropped silently: each script is reproduced ([`Outcome::Emulated`]),
//! shown to have nothing to do in this build ([`Outcome::NoEffect`]), or left unrun because
//! the user asked (`--skip-scripts`) or because the backend does not read it yet
//! ([`Outcome::NotRun`], with the reason). A script that fits none of these stops the build
//! before anything is written ([`crate::packages::PackageError::Script`]).
//!
//! The scripts are not run: [`commands`] reads the simple commands out of a POSIX shell script
//! well enough to recognise what debhelper and packagers write, and anything it cannot place is
//! an unknown command, which refuses.
use serde::Serialize;

/// One script of one package, and what the build did about it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ScriptRecord {
    /// `name version`.
    pub package: String,
    /// `preinst`, `postinst`, `config`, `triggers`, `prerm`, `postrm` (dpkg); `%pre`,
    /// `%post` (rpm).
    pub script: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "outcome", content = "detail")]
pub enum Outcome {
    /// Its effect is in the layer: what was written.
    Emulated(String),
    /// Run as the package manager would run it here, it changes nothing: why.
    NoEffect(String),
    /// Not run, and its effect is not in the layer: why (the user's `--skip-scripts`, or a
    /// case the backend does not read yet).
    NotRun(String),
}

impl std::fmt::Display for ScriptRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, detail) = match &self.outcome {
            Outcome::Emulated(d) => ("emulated", d),
            Outcome::NoEffect(d) => ("no effect", d),
            Outcome::NotRun(d) => ("not run", d),
        };
        write!(f, "{} {}: {what}: {detail}", self.package, self.script)
    }
}

/// The simple commands of a shell script that may run when it is called with `action` as its
/// first argument (`install`, `configure`; `None`: any), each as its words with quotes removed
/// (no expansion: `"$1"` stays `$1`), in order. Left out: keywords (`if`, `then`, `case` …
/// `in`, `fi`), `case` patterns, assignments before a command, redirections, comments, the
/// branches of a `case "$1" in` whose patterns do not match `action`, and function bodies,
/// whose commands stand in for each call of the function. Everything else is kept, so an
/// `if` whose test would be false still shows its commands: a reader of the result may see
/// more than would run, never less. Commands inside `$(…)` or backquotes are not split out;
/// the caller sees them as words of the command around them.
pub fn commands(script: &str, action: Option<&str>) -> Vec<Vec<String>> {
    let mut functions: std::collections::BTreeMap<String, Vec<Vec<String>>> = Default::default();
    let main = without_functions(script, &mut functions);
    let mut out = Vec::new();
    // One entry per open `case`: whether it is on `$1`, and whether its current branch can
    // run for `action`.
    let mut cases: Vec<(bool, bool)> = Vec::new();
    let mut expect_in = false;
    for line in logical_lines(&main) {
        let mut rest = line.trim_start();
        // A `case` pattern starts the line: `configure)`, `abort-upgrade|abort-remove)`.
        if let Some(top) = cases.last_mut() {
            if let Some(end) = pattern_end(rest) {
                let head = rest[..end - 1].trim_start_matches('(');
                top.1 = !top.0
                    || action.is_none_or(|a| {
                        head.split('|').any(|alt| glob(alt.trim().trim_matches('"'), a))
                    });
                rest = &rest[end..];
            }
        }
        for words in split_commands(rest) {
            let mut words: &[String] = &words;
            // Keywords that start a command, and what follows `for`, `case`.
            loop {
                match words.first().map(String::as_str) {
                    Some(
                        "if" | "then" | "else" | "elif" | "fi" | "do" | "done" | "while" | "until"
                        | "!" | "{" | "}",
                    ) => words = &words[1..],
                    Some("esac") => {
                        cases.pop();
                        words = &words[1..];
                    }
                    Some("for") => words = &[],
                    Some("case") => {
                        let on_arg = words.get(1).is_some_and(|w| w == "$1" || w == "${1}");
                        cases.push((on_arg, true));
                        expect_in = !words.iter().any(|w| w == "in");
                        words = &[];
                    }
                    Some("in") if expect_in => {
                        expect_in = false;
                        words = &[];
                    }
                    _ => break,
                }
            }
            let words: Vec<String> = strip_redirections(words)
                .into_iter()
                // `x=$(cmd)` runs cmd: kept, so that it is seen as a command nobody knows.
                .skip_while(|w| is_assignment(w) && !w.contains("$(") && !w.contains('`'))
                .collect();
            if words.is_empty() || cases.iter().any(|&(on_arg, active)| on_arg && !active) {
                continue;
            }
            match functions.get(&words[0]) {
                Some(body) => out.extend(body.iter().cloned()),
                None => out.push(words),
            }
        }
    }
    out
}

/// The script without its function definitions (`name() {` … `}` on lines of their own,
/// also `function name {`), whose commands go to `functions`, read with no action known.
fn without_functions(
    script: &str,
    functions: &mut std::collections::BTreeMap<String, Vec<Vec<String>>>,
) -> String {
    let mut main = String::new();
    let mut lines = script.lines();
    while let Some(line) = lines.next() {
        let Some(name) = function_start(line) else {
            main.push_str(line);
            main.push('\n');
            continue;
        };
        let mut body = String::new();
        let mut depth = 1usize;
        for l in lines.by_ref() {
            let t = l.trim();
            if t == "}" || t == "};" {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            } else if t.ends_with('{') {
                depth += 1;
            }
            body.push_str(l);
            body.push('\n');
        }
        let cmds = commands(&body, None);
        functions.insert(name, cmds);
    }
    main
}

/// `name() {`, `name () {`, `function name {`, `function name() {`: the name.
fn function_start(line: &str) -> Option<String> {
    let t = line.trim();
    let t = t.strip_suffix('{')?.trim_end();
    let t = t.strip_prefix("function ").map(str::trim_start).unwrap_or(t);
    let name = t.strip_suffix("()").map(str::trim_end).unwrap_or(t);
    let ok = !name.is_empty()
        && (t.ends_with("()") || line.trim_start().starts_with("function "))
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    ok.then(|| name.to_string())
}

/// A `case` pattern as sh matches it, for the patterns maintainer scripts use: literals, `*`
/// anywhere, `?`.
fn glob(pattern: &str, s: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), s.as_bytes())
}

/// Lines joined where a backslash continues them, comments removed.
fn logical_lines(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in script.lines() {
        if let Some(stripped) = line.strip_suffix('\\') {
            cur.push_str(stripped);
            cur.push(' ');
            continue;
        }
        cur.push_str(line);
        out.push(strip_comment(&std::mem::take(&mut cur)));
    }
    if !cur.is_empty() {
        out.push(strip_comment(&cur));
    }
    out
}

/// The line without a `#` comment (a `#` that starts a word, outside quotes).
fn strip_comment(line: &str) -> String {
    let mut quote = None;
    let mut prev_space = true;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' && quote != Some('\'') {
            escaped = true;
        } else if let Some(q) = quote {
            if c == q {
                quote = None;
            }
        } else if c == '\'' || c == '"' {
            quote = Some(c);
        } else if c == '#' && prev_space {
            return line[..i].to_string();
        }
        prev_space = c.is_whitespace() || c == ';' || c == '&' || c == '|';
    }
    line.to_string()
}

/// Where a `case` pattern at the start of `s` ends (after its `)`), if `s` starts with one.
fn pattern_end(s: &str) -> Option<usize> {
    let first = s.split_whitespace().next()?;
    if first.starts_with('(') && first.len() == 1 {
        return None;
    }
    let close = s.find(')')?;
    let head = &s[..close];
    let ok = !head.is_empty()
        && !head.contains('(')
        && head.split('|').all(|alt| {
            let alt = alt.trim();
            !alt.is_empty() && !alt.contains(char::is_whitespace) && !alt.contains('=')
        });
    ok.then_some(close + 1)
}

/// Splits a line into simple commands at `;`, `&&`, `||`, `|` and `&` outside quotes, and
/// each into words with quotes and backslashes removed. `;;` ends a case branch.
fn split_commands(line: &str) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote = None;
    let mut chars = line.chars().peekable();
    let end_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match quote {
            Some('\'') if c == '\'' => quote = None,
            Some('"') if c == '"' => quote = None,
            Some('"') if c == '\\' => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            Some(_) => word.push(c),
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    in_word = true;
                }
                '\\' => {
                    if let Some(n) = chars.next() {
                        word.push(n);
                    }
                    in_word = true;
                }
                ';' | '&' | '|' => {
                    end_word(&mut words, &mut word, &mut in_word);
                    if c == ';' && chars.peek() == Some(&';') {
                        chars.next();
                    }
                    if (c == '&' || c == '|') && chars.peek() == Some(&c) {
                        chars.next();
                    }
                    // `2>&1`: the `&` belongs to the redirection.
                    if c == '&' && words.last().is_some_and(|w| w.ends_with('>')) {
                        let mut w = words.pop().unwrap_or_default();
                        w.push('&');
                        word = w;
                        in_word = true;
                        continue;
                    }
                    cmds.push(std::mem::take(&mut words));
                }
                c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
                _ => {
                    word.push(c);
                    in_word = true;
                }
            },
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    cmds.push(words);
    cmds.into_iter().filter(|c| !c.is_empty()).collect()
}

/// The words without redirections (`>/dev/null`, `2>&1`, `> file`, `<file`).
fn strip_redirections(words: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for w in words {
        if skip_next {
            skip_next = false;
            continue;
        }
        let body = w.trim_start_matches(|c: char| c.is_ascii_digit());
        if body.starts_with('>') || body.starts_with('<') {
            let op_only = body.trim_start_matches(['>', '<', '&']).is_empty();
            if op_only && !body.ends_with('&') {
                skip_next = true;
            }
            continue;
        }
        out.push(w.clone());
    }
    out
}

fn is_assignment(w: &str) -> bool {
    match w.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Builtins and commands that change nothing in the image: tests (`dpkg --compare-versions`
/// too), output, shell state (`umask` is the script's own).
pub fn is_inert(words: &[String]) -> bool {
    matches!(
        words.first().map(String::as_str),
        Some(
            "set"
                | "exit"
                | "return"
                | "true"
                | "false"
                | ":"
                | "["
                | "test"
                | "echo"
                | "printf"
                | "local"
                | "shift"
                | "break"
                | "continue"
                | "getent"
                | "which"
                | "command"
                | "umask"
        )
    ) && !(words[0] == "command" && words.get(1).is_some_and(|w| w != "-v"))
        // A comparison, used as a test.
        || (words[0] == "dpkg" && words.get(1).is_some_and(|w| w == "--compare-versions"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(s: &str) -> Vec<String> {
        commands(s, None).into_iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn debhelper_and_hand_written_scripts() {
        // libibverbs1 44.0-2's postinst (Debian 12), as shipped.
        let s = "#!/bin/sh\n# postinst script for libibverbs1\n\nset -e\n\nif [ \"$1\" = configure ]; then\n    getent group rdma > /dev/null 2>&1 || addgroup --system --quiet rdma\nfi\n";
        assert_eq!(
            cmds(s),
            ["set -e", "[ $1 = configure ]", "getent group rdma", "addgroup --system --quiet rdma"]
        );
        // ibverbs-providers 44.0-2's postinst.
        let s = "#!/bin/sh\nset -e\n# Automatically added by dh_installdeb/13.11.4\ndpkg-maintscript-helper rm_conffile /etc/libibverbs.d/cxgb3.driver 27.0-2\\~ -- \"$@\"\n# End automatically added section\n";
        assert_eq!(
            cmds(s),
            [
                "set -e",
                "dpkg-maintscript-helper rm_conffile /etc/libibverbs.d/cxgb3.driver 27.0-2~ -- $@"
            ]
        );
    }

    #[test]
    fn case_patterns_keywords_and_continuations() {
        let s = "case \"$1\" in\n    configure|abort-upgrade)\n        update-alternatives --install /usr/bin/mpirun mpirun \\\n            /usr/bin/mpirun.openmpi 50\n    ;;\n    abort-remove) ;;\n    *) echo \"unknown\" >&2; exit 1 ;;\nesac\nFOO=1 ldconfig\nfor f in a b; do rm -f \"$f\"; done\n";
        assert_eq!(
            cmds(s),
            [
                "update-alternatives --install /usr/bin/mpirun mpirun /usr/bin/mpirun.openmpi 50",
                "echo unknown",
                "exit 1",
                "ldconfig",
                "rm -f $f"
            ]
        );
        assert!(is_inert(&["command".into(), "-v".into(), "x".into()]));
        assert!(!is_inert(&["command".into(), "useradd".into()]));
        assert!(!is_inert(&["addgroup".into()]));
    }

    #[test]
    fn case_on_the_action_and_functions() {
        // adduser 3.152's preinst (Debian 13), shortened: the function runs on upgrade only.
        let s = "set -eu\ncreate_adduser_conf() {\n  if dpkg --compare-versions \"$1\" lt 3.114; then\n    return 0\n  fi\n  mv --no-clobber /etc/adduser.conf /etc/adduser.conf.update-old\n}\n\ncase $1 in\n  upgrade)\n    create_adduser_conf \"${2:-}\"\n    ;;\nesac\nset +eu\n";
        let with = |a| commands(s, Some(a)).into_iter().map(|c| c.join(" ")).collect::<Vec<_>>();
        assert_eq!(with("install"), ["set -eu", "set +eu"]);
        assert_eq!(
            with("upgrade"),
            [
                "set -eu",
                "dpkg --compare-versions $1 lt 3.114",
                "return 0",
                "mv --no-clobber /etc/adduser.conf /etc/adduser.conf.update-old",
                "set +eu"
            ]
        );
        let s =
            "case \"$1\" in\n  configure|abort-*)\n    a\n  ;;\n  remove) b ;;\n  *) c ;;\nesac\n";
        let with = |a| commands(s, Some(a)).into_iter().map(|c| c.join(" ")).collect::<Vec<_>>();
        assert_eq!(with("configure"), ["a", "c"]);
        assert_eq!(with("abort-upgrade"), ["a", "c"]);
        assert_eq!(cmds(s), ["a", "b", "c"]);
        // A case on something else than $1 hides nothing.
        assert_eq!(cmds("case $x in\n y) z ;;\nesac\n"), ["z"]);
    }

    #[test]
    fn quotes_hide_separators_and_comments() {
        assert_eq!(
            cmds("echo 'a; b # c' && chmod 4755 \"/x y\" # note"),
            ["echo a; b # c", "chmod 4755 /x y"]
        );
        assert_eq!(cmds("x=1 ; bar 2>/dev/null"), ["bar"]);
        assert_eq!(cmds("x=$(useradd y)"), ["x=$(useradd y)"]);
    }
}
