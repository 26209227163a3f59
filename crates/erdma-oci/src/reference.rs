//! Image references (`[HOST[:PORT]/]PATH[:TAG][@DIGEST]`) parsed by hand, as the grammar of
//! distribution's `reference/regexp.go` and `reference/normalize.go` has them, into
//! [`oci_client::Reference`].
//!
//! `Reference`'s own parser compiles one large regular expression the first time it runs
//! (about 16 ms, a tenth of a warm build); this reads the same grammar in a pass over the bytes.
//! One difference is deliberate: a tag is ASCII word characters, dots and dashes as Docker's
//! grammar says, where the regex crate's `\w` would also take other Unicode letters. The tests
//! hold the rest against `Reference`'s parser.
use oci_client::{ParseError, Reference};

/// Longest repository name (`NAME_TOTAL_LENGTH_MAX` in distribution's reference package).
const NAME_MAX: usize = 255;

/// Parses `s` as [`Reference`]'s `FromStr` would: Docker Hub for a name without a host
/// (`library/` before a single component), `latest` without a tag or digest.
pub fn parse(s: &str) -> Result<Reference, ParseError> {
    if s.is_empty() {
        return Err(ParseError::NameEmpty);
    }
    let (rest, digest) = match s.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (s, None),
    };
    // A tag follows the last `:` after the last `/` (a port's `:` comes before one).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if !valid_name(name) || !tag.is_none_or(valid_tag) || !digest.is_none_or(valid_digest) {
        return Err(ParseError::ReferenceInvalidFormat);
    }
    let (registry, repository) = split_domain(name);
    if repository.len() > NAME_MAX {
        return Err(ParseError::NameTooLong);
    }
    if let Some(digest) = digest {
        let want = match digest.split_once(':') {
            Some(("sha256", hex)) => (hex, 64),
            Some(("sha384", hex)) => (hex, 96),
            Some(("sha512", hex)) => (hex, 128),
            Some(_) => return Err(ParseError::DigestUnsupported),
            None => return Err(ParseError::DigestInvalidFormat),
        };
        if want.0.len() != want.1 {
            return Err(ParseError::DigestInvalidLength);
        }
    }
    Ok(match (tag, digest) {
        (Some(t), Some(d)) => {
            Reference::with_tag_and_digest(registry, repository, t.into(), d.into())
        }
        (None, Some(d)) => Reference::with_digest(registry, repository, d.into()),
        (t, None) => Reference::with_tag(registry, repository, t.unwrap_or("latest").into()),
    })
}

/// `[domain '/'] path`: the first component may be a host (`domain-name[:port]`) when a path
/// follows it, else everything is path.
fn valid_name(name: &str) -> bool {
    if valid_path(name) {
        return true;
    }
    match name.split_once('/') {
        Some((domain, path)) => valid_domain(domain) && valid_path(path),
        None => false,
    }
}

/// `domain-component ('.' domain-component)* [':' port]`, a component being ASCII letters,
/// digits and inner `-`.
fn valid_domain(domain: &str) -> bool {
    let (host, port) = match domain.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    let component = |c: &str| {
        let b = c.as_bytes();
        !b.is_empty()
            && b.iter().all(|&x| x.is_ascii_alphanumeric() || x == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    host.split('.').all(component)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `path-component ('/' path-component)*`, a component being lower-case letters and digits
/// joined by `.`, `_`, `__` or any run of `-`.
fn valid_path(path: &str) -> bool {
    path.split('/').all(|c| {
        let b = c.as_bytes();
        let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
        if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
            return false;
        }
        let mut i = 0;
        while i < b.len() {
            if alnum(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !alnum(b[i]) {
                i += 1;
            }
            let sep = &b[start..i];
            let ok = matches!(sep, b"." | b"_" | b"__") || sep.iter().all(|&x| x == b'-');
            if !ok {
                return false;
            }
        }
        true
    })
}

/// `[\w][\w.-]{0,127}`, ASCII.
fn valid_tag(tag: &str) -> bool {
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let b = tag.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|&x| word(x) || x == b'.' || x == b'-')
}

/// `algorithm ':' hex{32,}`, the algorithm being components of a letter then letters and
/// digits, joined by one of `-_+.`.
fn valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else { return false };
    let component = |c: &str| {
        let b = c.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    algorithm.split(['-', '_', '+', '.']).all(component)
        && hex.len() >= 32
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Host and repository as `normalize.go`'s `splitDockerDomain` has them.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut rest) = match name.split_once('/') {
        Some((left, right)) if left.contains('.') || left.contains(':') || left == "localhost" => {
            (left.to_string(), right.to_string())
        }
        _ => ("docker.io".to_string(), name.to_string()),
    };
    if domain == "index.docker.io" {
        domain = "docker.io".into();
    }
    if domain == "docker.io" && !rest.contains('/') {
        rest = format!("library/{rest}");
    }
    (domain, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both parsers' answers, compared as (registry, repository, tag, digest) or the error.
    fn both(s: &str) -> (String, String) {
        let show = |r: Result<Reference, ParseError>| match r {
            Ok(r) => {
                format!("{} | {} | {:?} | {:?}", r.registry(), r.repository(), r.tag(), r.digest())
            }
            Err(e) => format!("error: {e}"),
        };
        (show(parse(s)), show(s.parse::<Reference>()))
    }

    #[test]
    fn agrees_with_the_regex_grammar() {
        let hex = "a".repeat(64);
        let cases = [
            "busybox",
            "busybox:1.36",
            "library/busybox",
            "docker.io/busybox",
            "index.docker.io/busybox:latest",
            "127.0.0.1:5000/base:1",
            "localhost/repo",
            "localhost:5000/a/b/c:v1.2-3_x",
            "Reg.Example-1.com/ns/repo",
            "reg.example/ns/repo@sha256:AAAA",
            "nvcr.io/nvidia/pytorch:24.05-py3",
            "a/b",
            "a__b/c.d/e---f",
            "a_b_c",
            "a___b",
            "a..b",
            "a._b",
            "A/b",
            "a/B",
            "a:5000",
            "a:5000/b",
            "a:/b",
            "a:5x/b",
            "-a.com/b",
            "a-.com/b",
            "a.com./b",
            "/a",
            "a/",
            "a//b",
            "a:",
            "a:-x",
            "a:.x",
            "a:_x",
            ":tag",
            "@sha256:x",
            "a@",
            "a:tag@",
            "a@sha256",
            "a@md5:0123456789abcdef0123456789abcdef",
            "a@sha256:0123456789abcdef0123456789abcde",
            "a@sha256:0123456789abcdef0123456789abcdef",
            "a@sha3+x.y:0123456789abcdef0123456789abcdef",
            "a@1sha:0123456789abcdef0123456789abcdef",
            "a@sha256:0123456789abcdef0123456789abcdeg",
            "a@sha256:a@b",
            "a:b:c",
            "reg.io:80/a:b:c",
            "[::1]:5000/a",
            "a b",
            "a\n",
        ];
        let mut cases: Vec<String> = cases.iter().map(|c| c.to_string()).collect();
        cases.push(format!("reg.example/ns/repo@sha256:{hex}"));
        cases.push(format!("reg.example/ns/repo:tag@sha256:{hex}"));
        cases.push(format!("repo@sha512:{}", "b".repeat(128)));
        cases.push(format!("repo@sha384:{}", "c".repeat(64)));
        cases.push(format!("a:{}", "t".repeat(128)));
        cases.push(format!("a:{}", "t".repeat(129)));
        cases.push(format!("reg.io/{}", "x".repeat(255)));
        cases.push(format!("reg.io/{}", "x".repeat(256)));
        cases.push("y".repeat(248));
        for c in &cases {
            let (ours, theirs) = both(c);
            assert_eq!(ours, theirs, "{c:?}");
        }
    }

    /// Strings built from the grammar's characters, many invalid: the same answer.
    #[test]
    fn agrees_on_generated_references() {
        const PIECES: &[&str] = &[
            "a",
            "b",
            "z9",
            "A",
            "0",
            ".",
            "_",
            "__",
            "-",
            "--",
            "/",
            ":",
            "@",
            "5000",
            "localhost",
            "reg.io",
            "sha256",
            "0123456789abcdef0123456789abcdef",
            "x.y",
            "é",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for _ in 0..20_000 {
            let n = 1 + next() % 8;
            let s: String =
                (0..n).map(|_| PIECES[(next() % PIECES.len() as u64) as usize]).collect();
            // The one deliberate difference: non-ASCII tags (see the module's note).
            if s.contains('é') && s.rsplit('/').next().is_some_and(|l| l.contains(':')) {
                continue;
            }
            let (ours, theirs) = both(&s);
            assert_eq!(ours, theirs, "{s:?}");
            accepted += usize::from(!ours.starts_with("error"));
        }
        assert!(accepted > 1000, "the generator makes valid references too: {accepted}");
    }

    #[test]
    fn non_ascii_tags_are_refused_as_docker_refuses_them() {
        assert!(parse("repo:é").is_err());
        assert!("repo:é".parse::<Reference>().is_ok(), "the regex crate's \\w is Unicode");
    }
}
