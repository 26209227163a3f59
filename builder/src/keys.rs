//! Repository keys: where a key file is read, a pin is enforced and the keys to trust are chosen.
//!
//! Key files are parsed with rpgp, whatever their form: binary (`gpg --export`, several keys
//! concatenated) or ASCII armour with one or several `PUBLIC KEY BLOCK`s. A pin names a primary
//! key's fingerprint (v4: 40 hex digits, v6: 64); only the pinned keys (with their subkeys) are
//! kept, so only they verify the repository and only they go into the image's
//! `/etc/apt/trusted.gpg.d/NAME.gpg` (which apt trusts for every source). Any other key in the
//! file is dropped with a warning; a repository signed by a dropped key fails (see
//! `packages::apt::repo`, which verifies against what is kept here).
use pgp::composed::{Deserializable, SignedPublicKey};
use pgp::ser::Serialize as _;
use pgp::types::KeyDetails as _;
use serde::Serialize;

use crate::error::{Error, Result};

const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
const END: &str = "-----END PGP PUBLIC KEY BLOCK-----";

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the keyring: {0}")]
    Unreadable(String),
    #[error("the keyring holds no public key")]
    Empty,
}

/// Every public key in `data`: binary packets, or every armoured block in it. A key rpgp cannot
/// read is skipped with a warning (if it was the signer, verification fails and says so).
pub fn parse(data: &[u8]) -> std::result::Result<Vec<SignedPublicKey>, KeyError> {
    let start = data.iter().position(|b| !b.is_ascii_whitespace()).ok_or(KeyError::Empty)?;
    let mut keys = Vec::new();
    let mut push = |parsed: Box<dyn Iterator<Item = pgp::errors::Result<SignedPublicKey>> + '_>| {
        for key in parsed {
            match key {
                Ok(k) => keys.push(k),
                Err(e) => tracing::warn!("skipping a key of the keyring: {e}"),
            }
        }
    };
    // Every OpenPGP packet starts with a tag byte with the high bit set (RFC 9580 §4.2);
    // anything else is taken for armour, which may have comment lines before it.
    if data[start] & 0x80 != 0 {
        push(SignedPublicKey::from_bytes_many(&data[start..]).map_err(|e| KeyError::Unreadable(e.to_string()))?);
    } else {
        let text = std::str::from_utf8(data).map_err(|_| KeyError::Unreadable("neither binary OpenPGP nor armour".into()))?;
        if !text.contains(BEGIN) {
            return Err(KeyError::Unreadable(format!("no `{BEGIN}` line")));
        }
        // rpgp reads one armour block per call; a `.asc` file may hold several.
        let mut rest = text;
        while let Some(b) = rest.find(BEGIN) {
            let block = &rest[b..];
            let e = block.find(END).ok_or_else(|| KeyError::Unreadable("an armoured key block has no END line".into()))? + END.len();
            let (parsed, _headers) = SignedPublicKey::from_armor_many(&block.as_bytes()[..e]).map_err(|e| KeyError::Unreadable(e.to_string()))?;
            push(parsed);
            rest = &block[e..];
        }
    }
    if keys.is_empty() {
        return Err(KeyError::Empty);
    }
    Ok(keys)
}

/// A primary key's fingerprint, upper-case hex: 40 digits for v4, 64 for v6.
pub fn fingerprint(key: &SignedPublicKey) -> String {
    format!("{:X}", key.primary_key.fingerprint())
}

/// The keys as one binary keyring, what `gpg --dearmor` writes and apt reads from
/// `trusted.gpg.d/*.gpg`.
pub fn to_binary(keys: &[SignedPublicKey]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for k in keys {
        k.to_writer(&mut out).map_err(|e| Error::Unsupported(format!("writing key {}: {e}", fingerprint(k))))?;
    }
    Ok(out)
}

/// Every key of an armoured or binary key file as one binary keyring.
pub fn dearmor(data: &[u8]) -> Result<Vec<u8>> {
    let keys = parse(data).map_err(|e| Error::Unsupported(format!("{e}")))?;
    to_binary(&keys)
}

/// A pin as written in a recipe: hex digits, spaces and a `0x` prefix allowed, 40 (v4) or 64 (v6)
/// digits; upper-case without spaces, or `None` when it is not one.
pub fn normalise_pin(pin: &str) -> Option<String> {
    let hex: String = pin.trim().trim_start_matches("0x").chars().filter(|c| !c.is_whitespace()).collect();
    ((hex.len() == 40 || hex.len() == 64) && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_ascii_uppercase())
}

/// What a repository trusts, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct Trusted {
    pub repository: String,
    /// Primary key fingerprints of the keys kept.
    pub fingerprints: Vec<String>,
    /// Where the keys came from: the recipe's `key_url`, or a `--keyring` file.
    pub source: String,
    /// `pinned` (the recipe's fingerprint matched), `keyring` (a file the user named) or
    /// `first-use` (downloaded, nothing to check it against).
    pub trust: &'static str,
    /// Keys of the file that the pin does not name: not trusted, not written to the image.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// The keys of `data` to trust: with a pin, only the key(s) whose primary fingerprint it names
/// (an error listing what the file holds when none does); without one, all of them.
pub fn select(data: &[u8], pin: Option<&str>, what: &str) -> Result<(Vec<SignedPublicKey>, Vec<String>)> {
    let keys = parse(data).map_err(|e| Error::Unsupported(format!("{what}: {e}")))?;
    let Some(pin) = pin else { return Ok((keys, Vec::new())) };
    let want = normalise_pin(pin).ok_or_else(|| Error::Unsupported(format!("{what}: the pin `{pin}` is not a key fingerprint (40 hex digits for a v4 key, 64 for v6)")))?;
    let (kept, other): (Vec<_>, Vec<_>) = keys.into_iter().partition(|k| fingerprint(k) == want);
    let dropped: Vec<String> = other.iter().map(fingerprint).collect();
    if kept.is_empty() {
        return Err(Error::Unsupported(format!("{what} holds key {}, but the recipe pins {want}", dropped.join(", "))));
    }
    for d in &dropped {
        tracing::warn!("{what} also holds key {d}, which the recipe does not pin: dropped (not trusted, not added to the image)");
    }
    Ok((kept, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Keys made by gpg in a throwaway home: (armoured public key, fingerprint) for each name.
    fn gpg_keys(names: &[&str], algo: &str) -> Option<Vec<(String, String)>> {
        let home = tempfile::tempdir().unwrap();
        let gpg = |args: &[&str]| Command::new("gpg").arg("--homedir").arg(home.path()).args(["--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]).args(args).output().ok();
        let mut out = Vec::new();
        for n in names {
            let o = gpg(&["--quick-gen-key", &format!("{n} <{n}@erdma-kit.invalid>"), algo, "sign", "never"])?;
            if !o.status.success() {
                return None;
            }
            let list = gpg(&["--with-colons", "--fingerprint", &format!("{n}@erdma-kit.invalid")])?;
            let text = String::from_utf8_lossy(&list.stdout).into_owned();
            let fpr = text.lines().find(|l| l.starts_with("fpr:"))?.split(':').nth(9)?.to_string();
            let armoured = gpg(&["--armor", "--export", &format!("{n}@erdma-kit.invalid")])?;
            out.push((String::from_utf8(armoured.stdout).ok()?, fpr));
        }
        Some(out)
    }

    #[test]
    fn every_block_and_every_binary_key_is_read() {
        let Some(keys) = gpg_keys(&["one", "two"], "ed25519") else {
            assert!(std::env::var_os("CI").is_none(), "gpg is needed");
            return;
        };
        let both = format!("{}\n{}", keys[0].0, keys[1].0);
        let parsed = parse(both.as_bytes()).unwrap();
        assert_eq!(parsed.iter().map(fingerprint).collect::<Vec<_>>(), [keys[0].1.clone(), keys[1].1.clone()]);
        // Binary keyrings (what dearmor writes) read back to the same keys.
        let binary = dearmor(both.as_bytes()).unwrap();
        assert_eq!(parse(&binary).unwrap().iter().map(fingerprint).collect::<Vec<_>>(), [keys[0].1.clone(), keys[1].1.clone()]);
        assert!(matches!(parse(b"  \n"), Err(KeyError::Empty)));
        assert!(parse(b"hello").is_err());
    }

    #[test]
    fn a_pin_keeps_only_its_key() {
        let Some(keys) = gpg_keys(&["pinned", "intruder"], "ed25519") else {
            assert!(std::env::var_os("CI").is_none(), "gpg is needed");
            return;
        };
        let both = format!("{}\n{}", keys[0].0, keys[1].0);
        let (kept, dropped) = select(both.as_bytes(), Some(&keys[0].1.to_lowercase()), "key").unwrap();
        assert_eq!(kept.iter().map(fingerprint).collect::<Vec<_>>(), [keys[0].1.clone()]);
        assert_eq!(dropped, [keys[1].1.clone()]);
        // No pin: all of them.
        assert_eq!(select(both.as_bytes(), None, "key").unwrap().0.len(), 2);
        // A pin no key matches names what the file holds.
        let e = select(keys[1].0.as_bytes(), Some(&keys[0].1), "key of repository `x`").unwrap_err().to_string();
        assert!(e.contains(&keys[1].1) && e.contains(&keys[0].1), "{e}");
        let e = select(both.as_bytes(), Some("1234"), "key").unwrap_err().to_string();
        assert!(e.contains("not a key fingerprint"), "{e}");
    }

    #[test]
    fn v6_keys_are_pinned_by_their_64_digit_fingerprint() {
        // RFC 9580 Annex A.3's sample v6 certificate (testdata/keys/README.md): gpg 2.2 makes no v6 keys.
        let cert = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/keys/rfc9580-v6-sample.pub.asc")).unwrap();
        const FP: &str = "CB186C4F0609A697E4D52DFA6C722B0C1F1E27C18A56708F6525EC27BAD9ACC9";
        assert_eq!(parse(&cert).unwrap().iter().map(fingerprint).collect::<Vec<_>>(), [FP]);
        assert_eq!(select(&cert, Some(&format!("0x{}", FP.to_lowercase())), "key").unwrap().0.len(), 1);
        // The v4-length prefix of it is no pin for it.
        assert!(select(&cert, Some(&FP[..40]), "key").is_err());
        // Round trip through the binary form the image gets.
        assert_eq!(fingerprint(&parse(&dearmor(&cert).unwrap()).unwrap()[0]), FP);
    }
}
