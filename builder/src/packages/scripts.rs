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
use std::collections::BTreeMap;

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
    /// Run by the image's own package manager in a sandbox ([`crate::sandbox`]): its effect
    /// is in the layer as the run left it.
    Run(String),
}

impl std::fmt::Display for ScriptRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, detail) = match &self.outcome {
            Outcome::Emulated(d) => ("emulated", d),
            Outcome::NoEffect(d) => ("no effect", d),
            Outcome::NotRun(d) => ("not run", d),
            Outcome::Run(d) => ("run", d),
        };
        write!(f, "{} {}: {what}: {detail}", self.package, self.script)
    }
}

/// How a simple command is joined to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sep {
    /// `;`, `;;`, `&`, a newline: the next command runs whatever this one's status.
    Seq,
    And,
    Or,
    Pipe,
}

/// What a test is known to give: `None` when it cannot be told without running it.
pub type Truth = Option<bool>;

/// One open `if`: whether the branch being read can run, whether an earlier branch was
/// certainly taken, whether every condition read so far was certain, and whether the branch
/// being read certainly runs (when its `if` does).
#[derive(Debug, Clone, Copy)]
struct IfFrame {
    active: bool,
    taken: bool,
    decided: bool,
    sure: bool,
}

/// One open `case`: whether it is on `$1`, whether its current branch can run, whether it
/// certainly runs, and whether an earlier pattern certainly matched (the first match wins).
#[derive(Debug, Clone, Copy)]
struct CaseFrame {
    on_arg: bool,
    active: bool,
    sure: bool,
    matched: bool,
}

/// A `$` inside single quotes, where the shell expands nothing: kept apart from the `$`s
/// [`expand`] reads, and put back in every word that leaves the reader.
const QUOTED_DOLLAR: char = '\u{E000}';

/// Put before a `$(…)` inside double quotes: its output is one word, even when empty, where an
/// unquoted one would be split (or vanish).
const QUOTED_SUBST: char = '\u{E001}';

fn restore(w: &str) -> String {
    w.replace(QUOTED_DOLLAR, "$").replace(QUOTED_SUBST, "")
}

/// The simple commands of a shell script that may run when it is called with `args` as its
/// arguments (`["configure", OLD]`; `None`: unknown), each as its words with quotes removed, in
/// order. Left out: keywords, `case` patterns, redirections, comments and assignments; what
/// cannot run for these arguments (the branches of `case "$1"` whose patterns do not match, an
/// `if` branch or an `&&`/`||` operand whose test is certainly false or certainly settled); and
/// function bodies, whose commands stand in for each call. A test is evaluated only where it is
/// certain: `[`/`test` comparing strings made of literals, the arguments and variables set from
/// them, and `dpkg --compare-versions` of such strings; anything else is taken as possibly
/// true and possibly false, so a reader of the result sees more than would run, never less.
/// Commands inside `$(…)` or backquotes are not split out; the caller sees them as words of the
/// command around them (an unknown command).
pub fn commands(script: &str, args: Option<&[&str]>) -> Vec<Vec<String>> {
    commands_with(script, args, &[], &Known::NOTHING)
}

/// What the caller can tell about commands without running them.
pub struct Known<'a> {
    /// Whether a command succeeds (`dpkg-statoverride --list PATH` against the image's
    /// database, a file test); `None`: not known.
    pub status: &'a dyn Fn(&[String]) -> Truth,
    /// What a query prints, for `NAME=$(COMMAND)` (`dpkg-divert --truename PATH`); `None`: not
    /// known, and the assignment is then an unknown command.
    pub output: &'a dyn Fn(&[String]) -> Option<String>,
}

impl Known<'_> {
    /// Nothing known.
    pub const NOTHING: Known<'static> = Known { status: &|_| None, output: &|_| None };
}

/// [`commands`], with `env` the variables the package manager exports to the script (dpkg's
/// `DPKG_ROOT`, empty when it installs to `/`) and `known` what the caller can answer for. An
/// assignment `NAME=$(COMMAND)` whose command `known` prints for is a query, not a command:
/// the variable gets the output without its trailing newlines.
pub fn commands_with(
    script: &str,
    args: Option<&[&str]>,
    env: &[(&str, &str)],
    known: &Known<'_>,
) -> Vec<Vec<String>> {
    let mut functions: BTreeMap<String, String> = Default::default();
    let main = without_functions(script, &mut functions);
    read(&main, args, env, known, &functions, 0)
}

/// How deep function calls are followed (a function that calls itself stops there, and the
/// call counts as a command nobody knows).
const MAX_CALL_DEPTH: usize = 8;

/// [`commands_with`] over a script without function definitions: a call of one of
/// `functions` stands for the commands of its body, read with the call's arguments as `$1`,
/// `$2`, … (`None` where one of them is not known); `depth`: calls followed so far.
fn read(
    main: &str,
    args: Option<&[&str]>,
    env: &[(&str, &str)],
    known: &Known<'_>,
    functions: &BTreeMap<String, String>,
    depth: usize,
) -> Vec<Vec<String>> {
    let main = unroll_loops(main);
    let mut reader = Reader {
        args,
        env,
        known,
        functions,
        depth,
        out: Vec::new(),
        vars: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        cases: Vec::new(),
        ifs: Vec::new(),
        condition: None,
        chain: (None, Sep::Seq),
        expect_in: false,
    };
    'lines: for line in logical_lines(&main) {
        let rest = reader.case_pattern(line.trim_start());
        for (words, sep) in split_commands(rest) {
            let (words, negate) = reader.keywords(&words);
            if reader.command(words, negate, sep) {
                break 'lines;
            }
        }
    }
    reader.out
}

/// The state of [`read`] going through a script, line by line and command by command.
struct Reader<'a> {
    args: Option<&'a [&'a str]>,
    env: &'a [(&'a str, &'a str)],
    known: &'a Known<'a>,
    functions: &'a BTreeMap<String, String>,
    depth: usize,
    /// The commands read so far that run.
    out: Vec<Vec<String>>,
    /// The variables whose values are known here.
    vars: BTreeMap<String, String>,
    cases: Vec<CaseFrame>,
    ifs: Vec<IfFrame>,
    /// Reading an `if`/`elif` condition: `Some(is_elif)`.
    condition: Option<bool>,
    /// The status of the last command of the current `&&`/`||` list and how it is joined on.
    chain: (Truth, Sep),
    expect_in: bool,
}

impl<'a> Reader<'a> {
    /// Whether what is being read can run.
    fn active(&self) -> bool {
        self.cases.iter().all(|c| !c.on_arg || c.active) && self.ifs.iter().all(|f| f.active)
    }

    /// Whether what is being read certainly runs (not only possibly): a variable set there
    /// has that value after it; one set anywhere else is not known.
    fn sure(&self) -> bool {
        self.cases.iter().all(|c| c.sure) && self.ifs.iter().all(|f| f.sure)
    }

    /// A `case` pattern that starts the line (`configure)`, `abort-upgrade|abort-remove)`)
    /// decides the branch; the rest of the line is returned.
    fn case_pattern<'l>(&mut self, mut rest: &'l str) -> &'l str {
        let arg1 = self.args.map(|a| a.first().copied().unwrap_or(""));
        if let Some(top) = self.cases.last_mut() {
            if let Some(end) = pattern_end(rest) {
                let head = rest[..end - 1].trim_start_matches('(');
                match arg1.filter(|_| top.on_arg) {
                    Some(a) => {
                        let matches =
                            head.split('|').any(|alt| glob(alt.trim().trim_matches('"'), a));
                        top.active = matches && !top.matched;
                        top.sure = top.active;
                        top.matched |= matches;
                    }
                    None => {
                        top.active = true;
                        top.sure = false;
                    }
                }
                rest = &rest[end..];
            }
        }
        rest
    }

    /// The keywords that start a command (and what follows `for`, `case`), acted on: the
    /// words left, and whether the command's status is negated (`!`).
    fn keywords<'w>(&mut self, mut words: &'w [String]) -> (&'w [String], bool) {
        let mut negate = false;
        loop {
            match words.first().map(String::as_str) {
                Some("if") => {
                    let parent = self.active();
                    self.ifs.push(IfFrame {
                        active: parent,
                        taken: false,
                        decided: true,
                        sure: false,
                    });
                    self.condition = Some(false);
                    self.chain = (None, Sep::Seq);
                    words = &words[1..];
                }
                Some("elif") => {
                    if let Some(f) = self.ifs.last_mut() {
                        f.active = !f.taken;
                        f.sure = false;
                    }
                    self.condition = Some(true);
                    self.chain = (None, Sep::Seq);
                    words = &words[1..];
                }
                Some("then") => {
                    let chain = self.chain.0;
                    if let (Some(f), Some(_)) = (self.ifs.last_mut(), self.condition.take()) {
                        let was = f.active;
                        f.active = was && chain != Some(false);
                        f.sure = f.decided && !f.taken && chain == Some(true);
                        f.decided &= chain.is_some();
                        f.taken = f.taken || (was && chain == Some(true));
                    }
                    self.chain = (None, Sep::Seq);
                    words = &words[1..];
                }
                Some("else") => {
                    if let Some(f) = self.ifs.last_mut() {
                        f.active = !f.taken;
                        f.sure = f.decided && !f.taken;
                    }
                    words = &words[1..];
                }
                Some("fi") => {
                    self.ifs.pop();
                    words = &words[1..];
                }
                Some("!") => {
                    negate = !negate;
                    words = &words[1..];
                }
                Some("do" | "done" | "while" | "until" | "{" | "}") => words = &words[1..],
                Some("esac") => {
                    self.cases.pop();
                    words = &words[1..];
                }
                Some("for") => words = &[],
                Some("case") => {
                    let on_arg = words.get(1).is_some_and(|w| w == "$1" || w == "${1}");
                    self.cases.push(CaseFrame {
                        on_arg,
                        active: true,
                        sure: false,
                        matched: false,
                    });
                    self.expect_in = !words.iter().any(|w| w == "in");
                    words = &[];
                }
                Some("in") if self.expect_in => {
                    self.expect_in = false;
                    words = &[];
                }
                _ => break,
            }
        }
        (words, negate)
    }

    /// One simple command (after its keywords), joined on by `sep`: its assignments kept, its
    /// words expanded, its status told, and the command recorded where it runs (a function's
    /// commands in its place). True when it ends the script.
    fn command(&mut self, words: &[String], negate: bool, sep: Sep) -> bool {
        let words = strip_redirections(words);
        let queried = self.with_outputs(&words);
        let plain = |w: &String| is_assignment(w) && !w.contains("$(") && !w.contains('`');
        let n_assign = queried.iter().take_while(|w| plain(w)).count();
        let (assigns, words) = queried.split_at(n_assign);
        // Short-circuit: the operand of a settled `&&`/`||` does not run.
        let skipped = matches!(self.chain, (Some(false), Sep::And) | (Some(true), Sep::Or));
        let runs = !skipped && self.active();
        // The operand of an `&&`/`||` whose left side is not known may or may not run.
        let certain_operand = match self.chain {
            (_, Sep::Seq | Sep::Pipe) => true,
            (t, Sep::And) => t == Some(true),
            (t, Sep::Or) => t == Some(false),
        };
        if runs && words.is_empty() {
            self.assign(assigns, certain_operand);
        }
        if words.is_empty() && assigns.is_empty() {
            // Keywords alone (`then`, `fi`): the list goes on as it was joined.
            if sep != Sep::Seq {
                self.chain.1 = sep;
            }
            return false;
        }
        let words = self.expanded(words);
        let truth = if skipped {
            self.chain.0
        } else if words.is_empty() {
            Some(true)
        } else {
            evaluate(&words, self.args, &self.vars)
                .or_else(|| (self.known.status)(&words))
                .map(|t| t != negate)
        };
        self.chain = (truth, sep);
        if !runs || words.is_empty() {
            return false;
        }
        // `exit` outside any condition ends the script; `return` in a function, where it
        // certainly runs, ends the function.
        let certain = self.ifs.is_empty() && self.cases.is_empty() && self.condition.is_none();
        let surely = certain_operand && self.condition.is_none() && self.sure();
        let ends = match words[0].as_str() {
            "exit" => certain,
            "return" => self.depth > 0 && surely,
            _ => false,
        };
        if ends && sep == Sep::Seq {
            self.out.push(words);
            return true;
        }
        match self.functions.get(&words[0]) {
            Some(body) if self.depth < MAX_CALL_DEPTH => {
                // The arguments as the call has them; one still holding a `$` is unknown.
                let call: Option<Vec<&str>> =
                    words[1..].iter().map(|w| (!w.contains('$')).then_some(w.as_str())).collect();
                let (env, known, functions) = (self.env, self.known, self.functions);
                self.out.extend(read(body, call.as_deref(), env, known, functions, self.depth + 1));
            }
            _ => self.out.push(words),
        }
        false
    }

    /// `x=$(cmd)` runs cmd: kept, so that it is seen as a command nobody knows, unless `known`
    /// prints for it (then the assignment is plain, its value that output).
    fn with_outputs(&self, words: &[String]) -> Vec<String> {
        words
            .iter()
            .map(|w| {
                match substitution(w, self.args, &self.vars).and_then(|q| (self.known.output)(&q)) {
                    Some(out) => format!(
                        "{}={}",
                        w.split_once('=').map(|(n, _)| n).unwrap_or_default(),
                        out.trim_end_matches('\n').replace('$', &QUOTED_DOLLAR.to_string())
                    ),
                    None => w.clone(),
                }
            })
            .collect()
    }

    /// Assignments alone on a command that runs: each variable gets its value where the
    /// assignment certainly runs, and is no longer known otherwise.
    fn assign(&mut self, assigns: &[String], certain_operand: bool) {
        let certain = certain_operand && self.condition.is_none() && self.sure();
        for a in assigns {
            let (name, value) = a.split_once('=').unwrap_or_default();
            match expand(value, self.args, &self.vars).filter(|_| certain) {
                Some(v) => self.vars.insert(name.to_string(), v),
                None => self.vars.remove(name),
            };
        }
    }

    /// Each word with the variables known here put in (`$GROUP` set above), the others as
    /// written; `"$@"` (and `$*`) is the arguments, each a word, where they are known.
    fn expanded(&self, words: &[String]) -> Vec<String> {
        let (args, vars) = (self.args, &self.vars);
        words
            .iter()
            .flat_map(|w| {
                if let ("$@" | "$*", Some(a)) = (w.as_str(), args) {
                    return a.iter().map(|s| s.to_string()).collect();
                }
                // `"$(cmd)"` whose output `known` tells: that output, one word.
                if w.starts_with(QUOTED_SUBST) {
                    if let Some(out) =
                        command_of(w, args, vars).and_then(|q| (self.known.output)(&q))
                    {
                        return vec![out.trim_end_matches('\n').to_string()];
                    }
                }
                if w.contains('$') {
                    vec![expand(w, args, vars).unwrap_or_else(|| restore(w))]
                } else {
                    vec![restore(w)]
                }
            })
            .collect()
    }
}

/// The command of an assignment `NAME=$(COMMAND)` (the whole value one substitution of one
/// simple command), its words expanded; `None` for anything else.
fn substitution(
    word: &str,
    args: Option<&[&str]>,
    vars: &BTreeMap<String, String>,
) -> Option<Vec<String>> {
    if !is_assignment(word) {
        return None;
    }
    let (_, value) = word.split_once('=')?;
    command_of(value, args, vars)
}

/// The command of a word that is one command substitution, `$(cmd)` (quoted or not), with
/// the known variables put in; `None` for anything else.
fn command_of(
    word: &str,
    args: Option<&[&str]>,
    vars: &BTreeMap<String, String>,
) -> Option<Vec<String>> {
    let value = word.strip_prefix(QUOTED_SUBST).unwrap_or(word);
    let inner = value.strip_prefix("$(")?.strip_suffix(')')?;
    if inner.contains(['(', ')', '`']) {
        return None;
    }
    let mut cmds = split_commands(inner);
    let (words, sep) = cmds.pop()?;
    if !cmds.is_empty() || sep != Sep::Seq || words.is_empty() {
        return None;
    }
    strip_redirections(&words)
        .iter()
        .map(|w| match w.contains('$') {
            true => expand(w, args, vars),
            false => Some(restore(w)),
        })
        .collect()
}

/// `word` with `$1`, `${1}`, `${1:-}`, … and the known variables put in; `None` when it uses
/// anything else (another expansion, an unknown variable, unknown arguments).
fn expand(word: &str, args: Option<&[&str]>, vars: &BTreeMap<String, String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = if let Some(b) = after.strip_prefix('{') {
            let close = b.find('}')?;
            let inner = &b[..close];
            (inner.strip_suffix(":-").unwrap_or(inner), close + 2)
        } else {
            // `$1x` is `$1` then `x`; `$name_2` is one name.
            let n = if after.starts_with(|c: char| c.is_ascii_digit()) {
                1
            } else {
                after.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count()
            };
            (&after[..n], n)
        };
        if name.is_empty() {
            return None;
        }
        let value = match name.parse::<usize>() {
            Ok(0) => return None,
            Ok(i) => args?.get(i - 1).copied().unwrap_or("").to_string(),
            Err(_) => vars.get(name)?.clone(),
        };
        out.push_str(&value);
        rest = &after[len..];
    }
    out.push_str(rest);
    Some(restore(&out))
}

/// Whether a command succeeds, where that is certain without running it.
fn evaluate(words: &[String], args: Option<&[&str]>, vars: &BTreeMap<String, String>) -> Truth {
    match words[0].as_str() {
        "true" | ":" => Some(true),
        "false" => Some(false),
        "[" if words.last().is_some_and(|w| w == "]") => {
            test_expr(&words[1..words.len() - 1], args, vars)
        }
        "test" => test_expr(&words[1..], args, vars),
        "dpkg" if words.get(1).is_some_and(|w| w == "--compare-versions") && words.len() == 5 => {
            let a = expand(&words[2], args, vars)?;
            let b = expand(&words[4], args, vars)?;
            compare_versions(&a, &words[3], &b)
        }
        _ => None,
    }
}

/// test(1) over strings: `-o` binds looser than `-a`, `!` negates a primary; `=`, `==`, `!=`,
/// `-n`, `-z` and a lone string are told; file and number tests are not.
fn test_expr(w: &[String], args: Option<&[&str]>, vars: &BTreeMap<String, String>) -> Truth {
    if let Some(i) = w.iter().position(|x| x == "-o") {
        let (a, b) = (test_expr(&w[..i], args, vars), test_expr(&w[i + 1..], args, vars));
        return match (a, b) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        };
    }
    if let Some(i) = w.iter().position(|x| x == "-a") {
        let (a, b) = (test_expr(&w[..i], args, vars), test_expr(&w[i + 1..], args, vars));
        return match (a, b) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        };
    }
    let x = |i: usize| expand(&w[i], args, vars);
    match w {
        [bang, rest @ ..] if bang == "!" && !rest.is_empty() => {
            test_expr(rest, args, vars).map(|t| !t)
        }
        [_] => Some(!x(0)?.is_empty()),
        [op, _] if op == "-n" => Some(!x(1)?.is_empty()),
        [op, _] if op == "-z" => Some(x(1)?.is_empty()),
        // A file test of the empty name (`[ -x "$(command -v tool)" ]` where there is none).
        [op, _]
            if matches!(
                op.as_str(),
                "-e" | "-f" | "-d" | "-x" | "-s" | "-r" | "-w" | "-L" | "-h"
            ) && x(1)?.is_empty() =>
        {
            Some(false)
        }
        [_, op, _] if op == "=" || op == "==" => Some(x(0)? == x(2)?),
        [_, op, _] if op == "!=" => Some(x(0)? != x(2)?),
        _ => None,
    }
}

/// `dpkg --compare-versions A OP B` (dpkg(1)): an empty version is earlier than any other,
/// except for the `-nl` operators, which take it as later; `<` and `>` are the deprecated
/// spellings of `le` and `ge`.
fn compare_versions(a: &str, op: &str, b: &str) -> Truth {
    use std::cmp::Ordering::{self, Equal, Greater, Less};
    let nl = op.ends_with("-nl");
    let ord: Ordering = match (a.is_empty(), b.is_empty()) {
        (true, true) => Equal,
        (true, false) => {
            if nl {
                Greater
            } else {
                Less
            }
        }
        (false, true) => {
            if nl {
                Less
            } else {
                Greater
            }
        }
        (false, false) => {
            let va: erdma_deb::version::Version = a.parse().ok()?;
            let vb: erdma_deb::version::Version = b.parse().ok()?;
            va.cmp(&vb)
        }
    };
    Some(match op.trim_end_matches("-nl") {
        "lt" | "<<" => ord == Less,
        "le" | "<=" | "<" => ord != Greater,
        "eq" | "=" => ord == Equal,
        "ne" => ord != Equal,
        "ge" | ">=" | ">" => ord != Less,
        "gt" | ">>" => ord == Greater,
        _ => return None,
    })
}

/// The script without its function definitions (`name() {` … `}` on lines of their own,
/// also `function name {`), whose bodies go to `functions`, read where they are called.
fn without_functions(script: &str, functions: &mut BTreeMap<String, String>) -> String {
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
        functions.insert(name, body);
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
/// How many times, in all, `for` loops are unrolled in one script.
const MAX_UNROLLED: usize = 64;

/// `for NAME in WORDS; do BODY done` over words that are known (literals, or one `$(seq …)` of
/// literal numbers: ucf's preinst, owfs-common's `for conffile in owfs.conf`) written out as
/// `NAME=WORD` and the body, once per word, as sh runs it; any other loop is left as it is
/// (its body read once, with NAME unknown).
fn unroll_loops(script: &str) -> String {
    let mut lines = logical_lines(script);
    let mut budget = MAX_UNROLLED;
    let mut i = 0;
    while i < lines.len() {
        let Some((name, values, body_from)) = for_header(&lines, i) else {
            i += 1;
            continue;
        };
        let Some(done) = matching_done(&lines, body_from) else {
            i += 1;
            continue;
        };
        let body = &lines[body_from..done];
        let jumps = body.iter().any(|l| {
            l.split(|c: char| c.is_whitespace() || c == ';')
                .any(|w| w == "break" || w == "continue")
        });
        if jumps || values.len() > budget {
            i += 1;
            continue;
        }
        budget -= values.len();
        let mut unrolled = Vec::new();
        for v in &values {
            unrolled.push(format!("{name}={v}"));
            unrolled.extend(body.iter().cloned());
        }
        lines.splice(i..=done, unrolled);
    }
    lines.join("\n")
}

/// A `for NAME in WORDS; do` at line `i` (or with `do` alone on the next line) whose words are
/// known: the name, the words and the first line of the body.
fn for_header(lines: &[String], i: usize) -> Option<(String, Vec<String>, usize)> {
    let rest = lines[i].trim().strip_prefix("for ")?;
    let (head, body_from) = match rest.strip_suffix("do").map(str::trim_end) {
        Some(h) => (h.strip_suffix(';')?.trim(), i + 1),
        None if lines.get(i + 1).is_some_and(|l| l.trim() == "do") => (rest.trim(), i + 2),
        None => return None,
    };
    let (name, list) = head.split_once(" in ")?;
    let name = name.trim();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let list = list.trim();
    let seq = list.strip_prefix("$(").and_then(|l| l.strip_suffix(')')).and_then(|l| {
        l.trim().strip_prefix("seq ").or_else(|| l.trim().strip_prefix("/usr/bin/seq "))
    });
    let values: Vec<String> = match seq {
        Some(args) => {
            let n: Vec<i64> =
                args.split_whitespace().map(str::parse).collect::<Result<_, _>>().ok()?;
            let (first, step, last) = match n.as_slice() {
                [l] => (1, 1, *l),
                [f, l] => (*f, 1, *l),
                [f, s, l] if *s != 0 => (*f, *s, *l),
                _ => return None,
            };
            let mut out = Vec::new();
            let mut x = first;
            while (step > 0 && x <= last) || (step < 0 && x >= last) {
                out.push(x.to_string());
                x += step;
                if out.len() > MAX_UNROLLED {
                    return None;
                }
            }
            out
        }
        None => {
            let words: Vec<&str> = list.split_whitespace().collect();
            let literal = |w: &str| {
                !w.is_empty()
                    && w.bytes().all(|b| b.is_ascii_alphanumeric() || b"_./:+-@,".contains(&b))
            };
            if !words.iter().all(|w| literal(w)) {
                return None;
            }
            words.into_iter().map(str::to_string).collect()
        }
    };
    Some((name.to_string(), values, body_from))
}

/// The line of the `done` that closes a loop whose body starts at `from`.
fn matching_done(lines: &[String], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, l) in lines.iter().enumerate().skip(from) {
        let t = l.trim();
        let first = t.split(|c: char| c.is_whitespace() || c == ';').next().unwrap_or_default();
        match first {
            // A loop on one line opens and closes itself.
            "for" | "while" | "until" if !t.contains("done") => depth += 1,
            "done" if depth == 0 => return Some(k),
            "done" => depth -= 1,
            _ => {}
        }
    }
    None
}

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
fn split_commands(line: &str) -> Vec<(Vec<String>, Sep)> {
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
            Some('\'') if c == '$' => word.push(QUOTED_DOLLAR),
            Some('"') if c == '$' && chars.peek() == Some(&'(') => {
                word.push(QUOTED_SUBST);
                word.push(c);
            }
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
                // `&>FILE`: a redirection of both streams, not a background `&`.
                '&' if chars.peek() == Some(&'>') => {
                    end_word(&mut words, &mut word, &mut in_word);
                    word.push(c);
                    in_word = true;
                }
                ';' | '&' | '|' => {
                    end_word(&mut words, &mut word, &mut in_word);
                    // `2>&1`: the `&` belongs to the redirection.
                    if c == '&'
                        && chars.peek() != Some(&'&')
                        && words.last().is_some_and(|w| w.ends_with('>'))
                    {
                        let mut w = words.pop().unwrap_or_default();
                        w.push('&');
                        word = w;
                        in_word = true;
                        continue;
                    }
                    let doubled = chars.peek() == Some(&c);
                    if doubled {
                        chars.next();
                    }
                    let sep = match (c, doubled) {
                        ('&', true) => Sep::And,
                        ('|', true) => Sep::Or,
                        ('|', false) => Sep::Pipe,
                        _ => Sep::Seq,
                    };
                    cmds.push((std::mem::take(&mut words), sep));
                }
                c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
                // `$(…)`: one word up to its closing parenthesis, whatever it holds.
                '$' if chars.peek() == Some(&'(') => {
                    word.push(c);
                    let mut depth = 0usize;
                    for n in chars.by_ref() {
                        word.push(n);
                        match n {
                            '(' => depth += 1,
                            ')' => depth -= 1,
                            _ => {}
                        }
                        if depth == 0 {
                            break;
                        }
                    }
                    in_word = true;
                }
                _ => {
                    word.push(c);
                    in_word = true;
                }
            },
        }
    }
    end_word(&mut words, &mut word, &mut in_word);
    cmds.push((words, Sep::Seq));
    // An empty command keeps its separator only when it joins (`a &&` at the end of a line).
    cmds.into_iter().filter(|(c, sep)| !c.is_empty() || *sep != Sep::Seq).collect()
}

/// The words without the redirections that change nothing (`>/dev/null`, `2>&1`, `>&2`,
/// `<file`). One that writes a file (`> /etc/x`, `>>"$log"`) stays, as one word `>TARGET`:
/// the command then writes something, whatever it is ([`is_inert`] says no).
fn strip_redirections(words: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let body = w.trim_start_matches(|c: char| c.is_ascii_digit());
        // `&>FILE` and `>&FILE` redirect both streams.
        let body = body.strip_prefix('&').filter(|b| b.starts_with('>')).unwrap_or(body);
        if !(body.starts_with('>') || body.starts_with('<')) {
            out.push(w.clone());
            continue;
        }
        let input = body.starts_with('<');
        let target_at = body.len() - body.trim_start_matches(['>', '<', '&', '|']).len();
        let (op, target) = body.split_at(target_at);
        let target = if target.is_empty() {
            // `> file`: the target is the next word; `2>&` alone has none.
            if op.ends_with('&') {
                String::new()
            } else {
                it.next().cloned().unwrap_or_default()
            }
        } else {
            target.to_string()
        };
        // A copy of another descriptor (`2>&1`, `>&2`, `>&-`): no file.
        let dup = op.ends_with('&') && target.bytes().all(|b| b.is_ascii_digit() || b == b'-');
        if !input && !dup && target != "/dev/null" {
            out.push(format!(">{target}"));
        }
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

/// The refusal of an emulation that, once it sees the image, finds what it cannot reproduce
/// (a home to create, a database it cannot order): the build goes to the sandbox, or with
/// `--no-sandbox` stops with this error.
pub(crate) fn needs_sandbox(package: &str, script: &str, command: String) -> crate::error::Error {
    crate::error::Error::from(crate::packages::PackageError::Script {
        package: package.to_string(),
        script: script.to_string(),
        command,
        hint: "drop --no-sandbox to run it in a sandbox over the base, as the image's package manager runs it",
    })
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
        // Output into a file (`echo x > /etc/y`) is an effect.
        && !words.iter().any(|w| w.starts_with('>'))
        // A comparison, used as a test.
        || (words[0] == "dpkg" && words.get(1).is_some_and(|w| w == "--compare-versions"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(s: &str) -> Vec<String> {
        commands(s, None).into_iter().map(|c| c.join(" ")).collect()
    }

    /// iputils-ping's `PROGRAM=$(dpkg-divert --truename /bin/ping)`: a query the caller
    /// answers sets the variable; one it does not stays a command nobody knows, whole.
    #[test]
    fn a_known_query_sets_a_variable() {
        let s = "PROGRAM=$(dpkg-divert --truename /bin/ping)\nif command -v setcap > /dev/null; then\n  setcap cap_net_raw+ep $PROGRAM\nfi\nK=$(uname -r)\nV=\"$(cat /etc/x)\"\n";
        let output = |w: &[String]| -> Option<String> {
            (w == ["dpkg-divert", "--truename", "/bin/ping"]).then(|| "/bin/ping.real\n".into())
        };
        let known = Known { status: &|_| None, output: &output };
        let got: Vec<String> = commands_with(s, Some(&["configure", ""]), &[], &known)
            .iter()
            .map(|c| c.join(" "))
            .collect();
        assert_eq!(
            got,
            [
                "command -v setcap",
                "setcap cap_net_raw+ep /bin/ping.real",
                "K=$(uname -r)",
                "V=$(cat /etc/x)"
            ]
        );
        // Unanswered, the query itself is what the caller sees.
        assert_eq!(
            cmds("P=$(dpkg-divert --truename /bin/ping)\n"),
            ["P=$(dpkg-divert --truename /bin/ping)"]
        );
    }

    /// `for` over known words is read once per word with the variable set (owfs-common's
    /// `for conffile in owfs.conf`, ucf's preinst `for i in $(seq 6 -1 0)`); over unknown
    /// words, or with `break`, the body is read once with the variable unknown.
    #[test]
    fn loops_over_known_words_are_unrolled() {
        let s = "for conffile in owfs.conf x.conf; do\n  ucf /usr/share/owfs/$conffile /etc/$conffile\ndone\n";
        assert_eq!(
            cmds(s),
            [
                "ucf /usr/share/owfs/owfs.conf /etc/owfs.conf",
                "ucf /usr/share/owfs/x.conf /etc/x.conf"
            ]
        );
        let s = "for i in $(seq 2 -1 0); do\n  if [ \"$i\" = 1 ]; then\n    echo one\n  fi\ndone\n";
        assert_eq!(cmds(s), ["[ 2 = 1 ]", "[ 1 = 1 ]", "echo one", "[ 0 = 1 ]"]);
        let s = "for f in /etc/*.conf; do\n  rm $f\ndone\n";
        assert_eq!(cmds(s), ["rm $f"]);
        let s = "for f in a b\ndo\n  [ -e $f ] && break\ndone\n";
        assert_eq!(cmds(s), ["[ -e $f ]", "break"]);
    }

    /// dh_installtmpfiles' guard (trixie's tmux): `[ -x "$(command -v systemd-tmpfiles)" ]`.
    /// Quoted, the answered output is one word even when empty, and a file test of the empty
    /// name is false: where the tool is missing the branch does not run. Unanswered, the
    /// branch may run.
    #[test]
    fn a_quoted_substitution_is_one_word() {
        let s = "if [ -x \"$(command -v systemd-tmpfiles)\" ]; then\n  systemd-tmpfiles --create x.conf || true\nfi\n";
        let run = |found: Option<&'static str>| -> Vec<String> {
            let output = move |w: &[String]| -> Option<String> {
                (w == ["command", "-v", "systemd-tmpfiles"]).then(|| found.unwrap_or("").into())
            };
            let known = Known { status: &|_| None, output: &output };
            commands_with(s, Some(&["configure", ""]), &[], &known)
                .iter()
                .map(|c| c.join(" "))
                .collect()
        };
        assert_eq!(run(None), ["[ -x  ]"]);
        assert_eq!(
            run(Some("/usr/bin/systemd-tmpfiles\n")),
            ["[ -x /usr/bin/systemd-tmpfiles ]", "systemd-tmpfiles --create x.conf", "true"]
        );
        assert_eq!(
            cmds(s),
            ["[ -x $(command -v systemd-tmpfiles) ]", "systemd-tmpfiles --create x.conf", "true"]
        );
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
        let with =
            |a: &str| commands(s, Some(&[a])).into_iter().map(|c| c.join(" ")).collect::<Vec<_>>();
        assert_eq!(with("install"), ["set -eu", "set +eu"]);
        // On an upgrade the function gets `${2:-}`, empty here: an empty version is earlier
        // than any, so it returns before the `mv`.
        assert_eq!(
            with("upgrade"),
            ["set -eu", "dpkg --compare-versions  lt 3.114", "return 0", "set +eu"]
        );
        assert_eq!(
            commands(s, Some(&["upgrade", "3.113"]))
                .into_iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>(),
            ["set -eu", "dpkg --compare-versions 3.113 lt 3.114", "return 0", "set +eu"]
        );
        assert_eq!(
            commands(s, Some(&["upgrade", "3.134"]))
                .into_iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>(),
            [
                "set -eu",
                "dpkg --compare-versions 3.134 lt 3.114",
                "mv --no-clobber /etc/adduser.conf /etc/adduser.conf.update-old",
                "set +eu"
            ]
        );
        // softhsm2-common's postinst (Debian 12): a function called with arguments, `"$@"`.
        let s = "set_perms() {\n    if ! dpkg-statoverride --list \"$4\" >/dev/null; then\n        dpkg-statoverride --update --add \"$@\"\n    fi\n}\ncase \"$1\" in\n    configure)\n\tset_perms root softhsm 0750 /etc/softhsm\n\tset_perms root softhsm 02770 /var/lib/softhsm\n    ;;\nesac\n";
        assert_eq!(
            commands(s, Some(&["configure", ""]))
                .into_iter()
                .map(|c| c.join(" "))
                .collect::<Vec<_>>(),
            [
                "dpkg-statoverride --list /etc/softhsm",
                "dpkg-statoverride --update --add root softhsm 0750 /etc/softhsm",
                "dpkg-statoverride --list /var/lib/softhsm",
                "dpkg-statoverride --update --add root softhsm 02770 /var/lib/softhsm"
            ]
        );
        let s =
            "case \"$1\" in\n  configure|abort-*)\n    a\n  ;;\n  remove) b ;;\n  *) c ;;\nesac\n";
        let with =
            |a: &str| commands(s, Some(&[a])).into_iter().map(|c| c.join(" ")).collect::<Vec<_>>();
        // The first pattern that matches is the branch that runs, as in sh.
        assert_eq!(with("configure"), ["a"]);
        assert_eq!(with("abort-upgrade"), ["a"]);
        assert_eq!(with("purge"), ["c"]);
        assert_eq!(cmds(s), ["a", "b", "c"]);
        // A case on something else than $1 hides nothing.
        assert_eq!(cmds("case $x in\n y) z ;;\nesac\n"), ["z"]);
    }

    fn run(s: &str, args: &[&str]) -> Vec<String> {
        commands(s, Some(args)).into_iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn conditions_on_the_arguments_are_evaluated() {
        // libgssapi-krb5-2 1.20.1-2+deb12u5's postinst (Debian 12), as shipped.
        let gss = "#! /bin/sh\n\nset -e\n\nif [ \"configure\" = \"$1\" -a \"x$2\" != \"x\" ]; then\n    if dpkg --compare-versions $2  lt 1.12.1+dfsg-2\\\n        && test -f /usr/etc/gss/mech; then\n\tcp /usr/etc/gss/mech /etc/gss/mech\n\tfi\n    fi\n\n\n\nexit 0\n";
        // The words as they run, the arguments put in.
        let test = |old: &str| format!("[ configure = configure -a x{old} != x ]");
        // A first install: $2 is empty, the test is false, `cp` does not run.
        assert_eq!(run(gss, &["configure", ""]), ["set -e", &test(""), "exit 0"]);
        // From a version before 1.12.1+dfsg-2 it runs; from a later one it does not.
        let cmp = |old: &str| format!("dpkg --compare-versions {old} lt 1.12.1+dfsg-2");
        assert_eq!(
            run(gss, &["configure", "1.12-1"]),
            [
                "set -e",
                &test("1.12-1"),
                &cmp("1.12-1"),
                "test -f /usr/etc/gss/mech",
                "cp /usr/etc/gss/mech /etc/gss/mech",
                "exit 0"
            ]
        );
        assert_eq!(
            run(gss, &["configure", "1.20.1-1"]),
            ["set -e", &test("1.20.1-1"), &cmp("1.20.1-1"), "exit 0"]
        );
        // openssh-client 1:9.2p1-2's postinst (Debian 12), its configure part.
        let ssh = "action=\"$1\"\numask 022\nupdate_ssh_group_name() {\n\tif getent group ssh >/dev/null && ! getent group _ssh >/dev/null; then\n\t\tgroupmod -n _ssh ssh\n\tfi\n}\nset_perms() {\n\tif ! getent group _ssh >/dev/null; then\n\t\taddgroup --system --quiet --force-badname _ssh\n\tfi\n}\nif [ \"$action\" = configure ]; then\n\tif dpkg --compare-versions \"$2\" lt-nl 1:8.4p1-6~; then\n\t\tupdate_ssh_group_name\n\tfi\n\tset_perms\nfi\n";
        assert_eq!(
            run(ssh, &["configure", ""]),
            [
                "umask 022",
                "[ configure = configure ]",
                "dpkg --compare-versions  lt-nl 1:8.4p1-6~",
                "getent group _ssh",
                "addgroup --system --quiet --force-badname _ssh"
            ]
        );
        assert!(run(ssh, &["configure", "1:8.0p1-1"]).contains(&"groupmod -n _ssh ssh".to_string()));
        // Not `configure`: the umask and the test.
        assert_eq!(
            run(ssh, &["abort-upgrade", ""]),
            ["umask 022", "[ abort-upgrade = configure ]"]
        );
        // Unknown arguments: every branch counts.
        assert!(commands(ssh, None).iter().any(|c| c[0] == "groupmod"));
    }

    #[test]
    fn short_circuits_and_version_comparisons() {
        let s = "[ \"$1\" = remove ] && rm -f /x\n[ \"$1\" = configure ] || chown a /y\ntrue || chmod 1 /z\ngetent group g || addgroup --system g\n";
        assert_eq!(
            run(s, &["configure"]),
            [
                "[ configure = remove ]",
                "[ configure = configure ]",
                "true",
                "getent group g",
                "addgroup --system g"
            ]
        );
        for (a, op, b, want) in [
            ("", "lt", "1.0", true),
            ("", "lt-nl", "1.0", false),
            ("1.0", "lt", "1.0-1", true),
            ("2:1", "gt", "1:9", true),
            ("1.0", "<", "1.0", true),
            ("1.0~rc1", "ge", "1.0", false),
            ("1.0", "eq", "1.0", true),
        ] {
            assert_eq!(compare_versions(a, op, b), Some(want), "{a} {op} {b}");
        }
        assert_eq!(compare_versions("1.0", "bogus", "1.0"), None);
        let vars = BTreeMap::from([("v".to_string(), "x".to_string())]);
        assert_eq!(expand("a${1}b$2$v${3:-}", Some(&["1", "2"]), &vars).as_deref(), Some("a1b2x"));
        assert_eq!(expand("$HOME", Some(&[]), &vars), None);
        assert_eq!(expand("$1", None, &vars), None);
    }

    /// A variable is known after an assignment that certainly ran, and put into the words of
    /// the commands that follow (plocate's `GROUP="plocate"` … `addgroup --system "$GROUP"`);
    /// one assigned where it may or may not run is not known, nor what single quotes hide.
    #[test]
    fn variables_known_where_they_certainly_were_set() {
        let s = "GROUP=\"plocate\"\nif [ \"$1\" = configure ]; then\n  addgroup --system \"$GROUP\"\nfi\n";
        assert_eq!(run(s, &["configure", ""])[1], "addgroup --system plocate");
        // Set in a branch that may not run, or on the right of an unknown `&&`: not known.
        let s = "X=a\nif [ -f /etc/x ]; then X=b; fi\ncmd $X\n[ -e /y ] && Y=1\ncmd2 $Y\n";
        let got = run(s, &["configure", ""]);
        assert!(got.contains(&"cmd $X".to_string()), "{got:?}");
        assert!(got.contains(&"cmd2 $Y".to_string()), "{got:?}");
        // Set in the branch that certainly runs, the else of a certainly false test, a case
        // branch on $1: known.
        let s = "if [ \"$1\" = remove ]; then X=r; else X=c; fi\ncase \"$1\" in\n  configure)\n    Y=k\n  ;;\nesac\ncmd $X $Y\n";
        let got = run(s, &["configure", ""]);
        assert!(got.contains(&"cmd c k".to_string()), "{got:?}");
        // Single quotes keep their `$`.
        assert_eq!(run("V=1\nawk '{print $1}' $V\n", &["configure"]), ["awk {print $1} 1"]);
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

    /// Output thrown away or copied between descriptors changes nothing; output into a file
    /// is an effect, so the command is not inert (the build would otherwise drop it).
    #[test]
    fn redirections_into_files_are_effects() {
        let w = |s: &str| split_commands(s).remove(0).0;
        for quiet in [
            "echo x >/dev/null",
            "echo x > /dev/null 2>&1",
            "echo x 2>/dev/null",
            "echo x >&2",
            "echo x &>/dev/null",
            "printf x 1>&2",
            "echo x <input",
        ] {
            let words = strip_redirections(&w(quiet));
            assert!(is_inert(&words), "{quiet}: {words:?}");
        }
        for writes in [
            "echo x > /etc/foo.conf",
            "echo x >>/var/log/x",
            "printf x 2> /tmp/err",
            "echo x &>/etc/both",
            "echo \"$v\" >\"$file\"",
        ] {
            let words = strip_redirections(&w(writes));
            assert!(!is_inert(&words), "{writes}: {words:?}");
        }
        assert_eq!(strip_redirections(&w("echo x > /etc/foo")), ["echo", "x", ">/etc/foo"]);
        assert_eq!(
            cmds("update-alternatives --install a b c 5 >/dev/null 2>&1"),
            ["update-alternatives --install a b c 5"]
        );
    }
}
