//! OpenPGP for every package backend: where a key file is read, a pin is enforced and the keys to
//! trust are chosen, and where signatures over repository metadata are verified.
//!
//! Key files are parsed with rpgp, whatever their form: binary (`gpg --export`, several keys
//! concatenated) or ASCII armour with one or several `PUBLIC KEY BLOCK`s. A pin names a primary
//! key's fingerprint (v4: 40 hex digits, v6: 64); only the pinned keys (with their subkeys) are
//! kept, so only they verify the repository and only they go into the image's
//! `/etc/apt/trusted.gpg.d/NAME.gpg` (which apt trusts for every source). Any other key in the
//! file is dropped with a warning; a repository signed by a dropped key fails.
//!
//! Signatures ([`verify_clearsigned_with`], [`verify_detached_with`]) are verified with rpgp, which
//! leaves policy to its caller; the policy here is gpgv's as apt uses it: a signature counts when
//! it verifies against a primary key or signing subkey of the keyring that is bound by a valid
//! self-signature, not expired and not revoked; a signature that names a keyring key but does not
//! verify (gpgv's `BADSIG`) fails the whole file even when another signature is good; signatures
//! by keys outside the keyring are ignored; MD5, SHA-1 and RIPEMD-160 digests are refused as apt
//! refuses them (`methods/gpgv.cc`, "weak digest").
#![forbid(unsafe_code)]
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pgp::composed::{
    CleartextSignedMessage, Deserializable, DetachedSignature, SignedPublicKey, SignedPublicSubKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{PublicKey, Signature, SignatureType, SubpacketData};
use pgp::ser::Serialize as _;
use pgp::types::{KeyDetails, Tag};
use serde::Serialize;

use erdma_common::dates::format_utc;

const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
const END: &str = "-----END PGP PUBLIC KEY BLOCK-----";

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not OpenPGP data as far as its framing tells (no armour, no packet).
    #[error("cannot read the keyring: {0}")]
    NotOpenPgp(&'static str),
    /// OpenPGP framing that rpgp could not read.
    #[error("cannot read the keyring")]
    Unreadable(#[source] Box<pgp::errors::Error>),
    #[error("the keyring holds no public key")]
    Empty,
    /// A key file that cannot be used, with what it was for.
    #[error("{what}")]
    Unusable {
        what: String,
        #[source]
        source: Box<KeyError>,
    },
    #[error(
        "{what}: the pin `{pin}` is not a key fingerprint (40 hex digits for a v4 key, 64 for v6)"
    )]
    BadPin { what: String, pin: String },
    #[error("{what} holds key {held}, but the recipe pins {pin}")]
    PinMismatch { what: String, held: String, pin: String },
    #[error("writing key {fingerprint}")]
    Write {
        fingerprint: String,
        #[source]
        source: Box<pgp::errors::Error>,
    },
}

type Result<T, E = KeyError> = std::result::Result<T, E>;

/// Every public key in `data`: binary packets, or every armoured block in it. A key rpgp cannot
/// read is skipped with a warning (if it was the signer, verification fails and says so).
pub fn parse(data: &[u8]) -> Result<Vec<SignedPublicKey>> {
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
        push(
            SignedPublicKey::from_bytes_many(&data[start..])
                .map_err(|e| KeyError::Unreadable(Box::new(e)))?,
        );
    } else {
        let text = std::str::from_utf8(data)
            .map_err(|_| KeyError::NotOpenPgp("neither binary OpenPGP nor armour"))?;
        if !text.contains(BEGIN) {
            return Err(KeyError::NotOpenPgp("no `-----BEGIN PGP PUBLIC KEY BLOCK-----` line"));
        }
        // rpgp reads one armour block per call; a `.asc` file may hold several.
        let mut rest = text;
        while let Some(b) = rest.find(BEGIN) {
            let block = &rest[b..];
            let e = block
                .find(END)
                .ok_or_else(|| KeyError::NotOpenPgp("an armoured key block has no END line"))?
                + END.len();
            let (parsed, _headers) = SignedPublicKey::from_armor_many(&block.as_bytes()[..e])
                .map_err(|e| KeyError::Unreadable(Box::new(e)))?;
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
        k.to_writer(&mut out)
            .map_err(|e| KeyError::Write { fingerprint: fingerprint(k), source: Box::new(e) })?;
    }
    Ok(out)
}

/// The keys as ASCII armour, one `PUBLIC KEY BLOCK` each: what rpm's `--import` and dnf's
/// `gpgkey=` read (`/etc/pki/rpm-gpg/…`).
pub fn to_armored(keys: &[SignedPublicKey]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for k in keys {
        let block = k
            .to_armored_bytes(pgp::composed::ArmorOptions::default())
            .map_err(|e| KeyError::Write { fingerprint: fingerprint(k), source: Box::new(e) })?;
        out.extend_from_slice(&block);
        if !out.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    Ok(out)
}

/// Every key of an armoured or binary key file as one binary keyring.
pub fn dearmor(data: &[u8]) -> Result<Vec<u8>> {
    to_binary(&parse(data)?)
}

/// A pin as written in a recipe: hex digits, spaces and a `0x` prefix allowed, 40 (v4) or 64 (v6)
/// digits; upper-case without spaces, or `None` when it is not one.
pub fn normalise_pin(pin: &str) -> Option<String> {
    let hex: String =
        pin.trim().trim_start_matches("0x").chars().filter(|c| !c.is_whitespace()).collect();
    ((hex.len() == 40 || hex.len() == 64) && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_uppercase())
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
pub fn select(
    data: &[u8],
    pin: Option<&str>,
    what: &str,
) -> Result<(Vec<SignedPublicKey>, Vec<String>)> {
    let keys = parse(data)
        .map_err(|e| KeyError::Unusable { what: what.to_string(), source: Box::new(e) })?;
    let Some(pin) = pin else { return Ok((keys, Vec::new())) };
    let want = normalise_pin(pin)
        .ok_or_else(|| KeyError::BadPin { what: what.to_string(), pin: pin.to_string() })?;
    let (kept, other): (Vec<_>, Vec<_>) = keys.into_iter().partition(|k| fingerprint(k) == want);
    let dropped: Vec<String> = other.iter().map(fingerprint).collect();
    if kept.is_empty() {
        return Err(KeyError::PinMismatch {
            what: what.to_string(),
            held: dropped.join(", "),
            pin: want,
        });
    }
    for d in &dropped {
        tracing::warn!("{what} also holds key {d}, which the recipe does not pin: dropped (not trusted, not added to the image)");
    }
    Ok((kept, dropped))
}

// ---------------------------------------------------------------------------------------
// Signatures
// ---------------------------------------------------------------------------------------

/// Why an OpenPGP signature was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error(transparent)]
    Keyring(Box<KeyError>),

    #[error("the keyring holds no public key")]
    EmptyKeyring,

    /// What is wrong with it, and rpgp's error where rpgp found it.
    #[error("malformed signature: {what}")]
    Malformed {
        what: &'static str,
        #[source]
        source: Option<Box<pgp::errors::Error>>,
    },

    /// gpgv's `BADSIG`: the signature names a key of the keyring but does not verify.
    #[error("signature by key {key} does not match the signed data")]
    Bad { key: String },

    #[error("no valid signature by a key in the keyring ({details})")]
    NoValidSignature {
        details: String,
        /// How the signatures by keys outside the keyring name their issuers (fingerprint, or
        /// key ID), so a caller can tell whose they are.
        outside: Vec<String>,
    },
}

/// The public keys of a keyring file, and what was found of their self-signatures: a build
/// checks many signatures by one key (a repository's metadata, each of its packages), and each
/// check of a key's own binding is a public-key operation (an RSA 4096 verification costs
/// milliseconds). Clones share what was found; the keys cannot change.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<SignedPublicKey>,
    validity: Arc<Mutex<HashMap<Which, Found>>>,
}

/// Which key's validity: (key, subkey).
type Which = (usize, Option<usize>);
/// The time it was last found for, and what was found.
type Found = (i64, Result<bool, String>);

impl Keyring {
    /// Reads a binary keyring (`gpg --export`, several keys concatenated) or one or more
    /// ASCII-armoured key blocks ([`parse`]).
    pub fn load(data: &[u8]) -> Result<Self, SignatureError> {
        match parse(data) {
            Ok(keys) => Ok(Keyring::of(keys)),
            Err(KeyError::Empty) => Err(SignatureError::EmptyKeyring),
            Err(other) => Err(SignatureError::Keyring(Box::new(other))),
        }
    }

    /// A keyring of `keys`.
    pub fn of(keys: Vec<SignedPublicKey>) -> Self {
        Keyring { keys, validity: Arc::default() }
    }

    pub fn keys(&self) -> &[SignedPublicKey] {
        &self.keys
    }

    /// [`primary_validity`] of key `i` at `now`: whether it may sign (not when its binding has
    /// key flags without signing), or why it is not valid; found once per keyring and time.
    fn primary(&self, i: usize, now: i64) -> Result<bool, String> {
        self.found((i, None), now, || {
            primary_validity(&self.keys[i], now)
                .map(|binding| !has_key_flags(binding) || binding.key_flags().sign())
        })
    }

    /// [`subkey_validity`] of subkey `j` of key `i` at `now`, found once per keyring and time.
    fn subkey(&self, i: usize, j: usize, now: i64) -> Result<(), String> {
        let key = &self.keys[i];
        self.found((i, Some(j)), now, || {
            subkey_validity(&key.primary_key, &key.public_subkeys[j], now).map(|()| true)
        })
        .map(|_| ())
    }

    /// What `find` gives for `which` at `now`, from an earlier call for the same time where
    /// there was one (one time per key is kept: a keyring that lives long stays small). Found
    /// outside the lock: two threads asking at once may each find it.
    fn found(
        &self,
        which: Which,
        now: i64,
        find: impl FnOnce() -> Result<bool, String>,
    ) -> Result<bool, String> {
        if let Some((at, known)) = self.validity.lock().expect("poisoned").get(&which) {
            if *at == now {
                return known.clone();
            }
        }
        let known = find();
        self.validity.lock().expect("poisoned").insert(which, (now, known.clone()));
        known
    }
}

/// Verifies a clear-signed message (an `InRelease` file) against `keyring` at time `now` and
/// returns the signed text only, with LF line endings.
pub fn verify_clearsigned_with(
    text: &[u8],
    keyring: &Keyring,
    now: i64,
) -> Result<String, SignatureError> {
    let text = std::str::from_utf8(text).map_err(|_| SignatureError::Malformed {
        what: "the clear-signed message is not UTF-8",
        source: None,
    })?;
    let malformed = |e: Option<pgp::errors::Error>| SignatureError::Malformed {
        what: "not a clear-signed message",
        source: e.map(|e| Box::new(e) as _),
    };
    // rpgp reads the framing, the hash headers and the signatures, and refuses text before
    // the BEGIN line and after the signature block, as apt does since data outside the signed
    // part was used to inject content (CVE-2013-1051 and apt's 1.0.9 / 1.4.9 InRelease
    // splitting fixes). Its reading of the text between them looks for the end again after
    // each line, which is quadratic (40 ms for Debian 13's 140 KB InRelease): it is given
    // the message without that text, which is read here in one pass.
    let (framing, body) = split_cleartext(text).ok_or(malformed(None))?;
    let (msg, _headers) =
        CleartextSignedMessage::from_string(&framing).map_err(|e| malformed(Some(e)))?;
    let signed = signed_text(body);
    check_signatures(msg.signatures(), signed.as_bytes(), keyring, now)?;
    Ok(with_lf(&signed))
}

/// The signed text as callers get it: LF line endings, ending in one.
fn with_lf(signed: &str) -> String {
    let mut text = signed.replace("\r\n", "\n");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The text a clear-signed message (an `InRelease` file) says it signs, with LF line endings,
/// **not verified**: for deciding what to fetch ahead of the verification, never for trusting
/// what the text says. Whatever is fetched on its word must be checked against the text
/// [`verify_clearsigned_with`] returns before it is used. `None` if it is not framed as one.
pub fn unverified_cleartext(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    let (_, body) = split_cleartext(text)?;
    Some(with_lf(&signed_text(body)))
}

/// A clear-signed message split into its framing (the armour header lines and the signature
/// block, with nothing between them) and its dash-escaped text (RFC 9580 §7): the text starts
/// after the first empty line and ends before the first line that starts with `-----`, the
/// line break before that line being part of the framing. `None` without both.
fn split_cleartext(text: &str) -> Option<(String, &str)> {
    let mut at = 0;
    // The armour header: up to and including the first empty line.
    let body_start = loop {
        let end = text[at..].find('\n')? + at + 1;
        if text[at..end].trim_end_matches(['\r', '\n']).is_empty() {
            break end;
        }
        at = end;
    };
    let mut line = body_start;
    while !text[line..].starts_with("-----") {
        line = text[line..].find('\n')? + line + 1;
    }
    let body = &text[body_start..line];
    let body = body.strip_suffix("\r\n").or_else(|| body.strip_suffix('\n')).unwrap_or(body);
    Some((format!("{}{}", &text[..body_start], &text[line..]), body))
}

/// What the signatures of a clear-signed message cover (RFC 9580 §7.1): its text with dash
/// escapes removed and spaces and tabs trimmed from each line's content, then every line
/// break made CRLF, in the two steps rpgp's `CleartextSignedMessage::signed_text` takes.
fn signed_text(body: &str) -> String {
    let mut unescaped = String::with_capacity(body.len());
    for line in body.split_inclusive('\n') {
        let end = if line.ends_with("\r\n") { 2 } else { usize::from(line.ends_with('\n')) };
        let (content, newline) = line.split_at(line.len() - end);
        let content = content.strip_prefix("- ").unwrap_or(content);
        unescaped.push_str(content.trim_end_matches([' ', '\t']));
        unescaped.push_str(newline);
    }
    let mut out = String::with_capacity(unescaped.len() + unescaped.len() / 32);
    let mut rest = unescaped.as_str();
    while let Some(i) = rest.find('\n') {
        out.push_str(rest[..i].strip_suffix('\r').unwrap_or(&rest[..i]));
        out.push_str("\r\n");
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
    out
}

/// Verifies a detached signature (`Release.gpg`, armoured or binary) over `data` at time `now`.
pub fn verify_detached_with(
    data: &[u8],
    sig: &[u8],
    keyring: &Keyring,
    now: i64,
) -> Result<(), SignatureError> {
    let (parsed, _headers) = DetachedSignature::from_reader_many(sig)
        .map_err(|e| SignatureError::Malformed { what: "unreadable", source: Some(Box::new(e)) })?;
    let signatures = parsed
        .map(|s| s.map(|s| s.signature))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SignatureError::Malformed { what: "unreadable", source: Some(Box::new(e)) })?;
    check_signatures(&signatures, data, keyring, now)?;
    Ok(())
}

/// How a signature names its issuer, for messages.
fn issuer_name(sig: &Signature) -> String {
    if let Some(fp) = sig.issuer_fingerprint().first() {
        format!("{fp:X}")
    } else if let Some(id) = sig.issuer_key_id().first() {
        id.to_string().to_ascii_uppercase()
    } else {
        "(unnamed)".into()
    }
}

/// Whether `sig` names `key` as its issuer. `None` when it names no issuer at all.
fn names_issuer(sig: &Signature, key: &impl KeyDetails) -> Option<bool> {
    let fps = sig.issuer_fingerprint();
    let ids = sig.issuer_key_id();
    if fps.is_empty() && ids.is_empty() {
        return None;
    }
    let fp = key.fingerprint();
    let id = key.legacy_key_id();
    Some(fps.iter().any(|f| **f == fp) || ids.iter().any(|i| **i == id))
}

fn seconds(d: pgp::types::Duration) -> i64 {
    std::time::Duration::from(d).as_secs() as i64
}

fn created(sig: &Signature) -> i64 {
    sig.created().map(|t| i64::from(t.as_secs())).unwrap_or(0)
}

/// A signature whose own expiration time (a hashed subpacket) has passed.
fn signature_expired(sig: &Signature, now: i64) -> bool {
    match sig.signature_expiration_time().map(seconds) {
        Some(d) if d > 0 => created(sig) + d <= now,
        _ => false,
    }
}

/// Whether the hashed area has a Key Flags subpacket (without one, gpg lets a primary key
/// sign).
fn has_key_flags(sig: &Signature) -> bool {
    sig.config().is_some_and(|c| {
        c.hashed_subpackets().any(|p| matches!(p.data, SubpacketData::KeyFlags(_)))
    })
}

/// When a key bound by `binding` expires, if it does.
fn key_expiry(created_at: i64, binding: &Signature) -> Option<i64> {
    match binding.key_expiration_time().map(seconds) {
        Some(d) if d > 0 => Some(created_at + d),
        _ => None,
    }
}

/// The newest of `candidates` that `valid` holds for (of equal creation times, the first
/// given), checking the newest first: each check is a public-key operation (an RSA 4096
/// verification costs milliseconds), and an older signature cannot win once a newer one holds.
fn newest_valid<T>(
    candidates: Vec<T>,
    sig: impl Fn(&T) -> &Signature,
    valid: impl Fn(&T) -> bool,
) -> Option<T> {
    let mut order: Vec<(std::cmp::Reverse<i64>, usize, T)> = candidates
        .into_iter()
        .enumerate()
        .map(|(i, c)| (std::cmp::Reverse(created(sig(&c))), i, c))
        .collect();
    order.sort_by_key(|(newest, i, _)| (*newest, *i));
    order.into_iter().map(|(_, _, c)| c).find(|c| valid(c))
}

/// Whether the primary key may be trusted now, as gpg judges it: not revoked, bound to a
/// user ID or by a direct-key signature, not expired. Returns the newest self-signature.
fn primary_validity(key: &SignedPublicKey, now: i64) -> Result<&Signature, String> {
    let pk = &key.primary_key;
    for sig in &key.details.revocation_signatures {
        if names_issuer(sig, pk) != Some(false) && sig.verify_key(pk).is_ok() {
            return Err("revoked".into());
        }
    }
    // Self-signatures: over a user ID (third-party certifications, which Debian's keys carry
    // many of, are not), or direct-key ones (no user ID).
    let mut candidates: Vec<(&Signature, Option<&pgp::packet::UserId>)> = Vec::new();
    for user in &key.details.users {
        for sig in &user.signatures {
            if sig.typ() != Some(SignatureType::CertRevocation)
                && names_issuer(sig, pk) != Some(false)
                && !signature_expired(sig, now)
            {
                candidates.push((sig, Some(&user.id)));
            }
        }
    }
    for sig in &key.details.direct_signatures {
        if sig.typ() == Some(SignatureType::Key)
            && names_issuer(sig, pk) != Some(false)
            && !signature_expired(sig, now)
        {
            candidates.push((sig, None));
        }
    }
    let newest = newest_valid(
        candidates,
        |(sig, _)| sig,
        |(sig, user)| match user {
            Some(id) => sig.verify_certification(pk, Tag::UserId, id).is_ok(),
            None => sig.verify_key(pk).is_ok(),
        },
    );
    let (binding, _) = newest.ok_or_else(|| "without a valid self-signature".to_owned())?;
    if let Some(at) = key_expiry(i64::from(pk.created_at().as_secs()), binding) {
        if now >= at {
            return Err(format!("expired since {}", format_utc(at)));
        }
    }
    Ok(binding)
}

/// Whether a subkey may sign now: bound by a valid binding signature that marks it for
/// signing and carries a valid back-signature (RFC 9580 §5.2.1, 0x19), not expired, not
/// revoked.
fn subkey_validity(primary: &PublicKey, sub: &SignedPublicSubKey, now: i64) -> Result<(), String> {
    for sig in &sub.signatures {
        if sig.typ() == Some(SignatureType::SubkeyRevocation)
            && sig.verify_subkey_binding(primary, &sub.key).is_ok()
        {
            return Err("revoked".into());
        }
    }
    let candidates = sub
        .signatures
        .iter()
        .filter(|sig| {
            sig.typ() == Some(SignatureType::SubkeyBinding) && !signature_expired(sig, now)
        })
        .collect();
    let newest = newest_valid(
        candidates,
        |sig| sig,
        |sig| sig.verify_subkey_binding(primary, &sub.key).is_ok(),
    );
    let binding = newest.ok_or_else(|| "not bound to its primary key".to_owned())?;
    if !binding.key_flags().sign() {
        return Err("not a signing subkey".into());
    }
    let backsig_ok = binding
        .embedded_signature()
        .is_some_and(|b| b.verify_primary_key_binding(&sub.key, primary).is_ok());
    if !backsig_ok {
        return Err("without a valid primary key binding signature".into());
    }
    if let Some(at) = key_expiry(i64::from(sub.key.created_at().as_secs()), binding) {
        if now >= at {
            return Err(format!("expired since {}", format_utc(at)));
        }
    }
    Ok(())
}

/// The acceptance rule described in the module documentation.
fn check_signatures(
    signatures: &[Signature],
    data: &[u8],
    keyring: &Keyring,
    now: i64,
) -> Result<(), SignatureError> {
    if signatures.is_empty() {
        return Err(SignatureError::Malformed { what: "no signature found", source: None });
    }
    let mut good = false;
    let mut problems: Vec<String> = Vec::new();
    let mut outside: Vec<String> = Vec::new();
    for sig in signatures {
        let issuer = issuer_name(sig);
        if !matches!(sig.typ(), Some(SignatureType::Binary | SignatureType::Text)) {
            problems.push(format!("{issuer}: not a document signature"));
            continue;
        }
        if matches!(
            sig.hash_alg(),
            Some(
                HashAlgorithm::None
                    | HashAlgorithm::Md5
                    | HashAlgorithm::Sha1
                    | HashAlgorithm::Ripemd160
            ) | None
        ) {
            problems.push(format!("{issuer}: weak digest algorithm"));
            continue;
        }
        if signature_expired(sig, now) {
            problems.push(format!("{issuer}: the signature has expired"));
            continue;
        }
        let mut candidate = false;
        for (i, key) in keyring.keys.iter().enumerate() {
            let pk = &key.primary_key;
            let named = names_issuer(sig, pk);
            if named != Some(false) {
                candidate = true;
                match sig.verify(pk, data) {
                    Ok(()) => match keyring.primary(i, now) {
                        Ok(false) => problems.push(format!("{issuer}: key not marked for signing")),
                        Ok(true) => good = true,
                        Err(why) => problems.push(format!("{issuer}: key {why}")),
                    },
                    Err(_) if named == Some(true) => {
                        return Err(SignatureError::Bad { key: issuer });
                    }
                    Err(_) => {}
                }
            }
            for (j, sub) in key.public_subkeys.iter().enumerate() {
                let named = names_issuer(sig, &sub.key);
                if named == Some(false) {
                    continue;
                }
                candidate = true;
                match sig.verify(&sub.key, data) {
                    Ok(()) => {
                        match keyring.primary(i, now).and_then(|_| keyring.subkey(i, j, now)) {
                            Ok(()) => good = true,
                            Err(why) => problems.push(format!("{issuer}: key {why}")),
                        }
                    }
                    Err(_) if named == Some(true) => {
                        return Err(SignatureError::Bad { key: issuer });
                    }
                    Err(_) => {}
                }
            }
        }
        if !candidate {
            problems.push(format!("{issuer}: key not in the keyring"));
            outside.push(issuer);
        }
    }
    if good {
        return Ok(());
    }
    if problems.is_empty() {
        problems.push("no signature verifies against the keyring".into());
    }
    Err(SignatureError::NoValidSignature { details: problems.join("; "), outside })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Keys made by gpg in a throwaway home: (armoured public key, fingerprint) for each name.
    fn gpg_keys(names: &[&str], algo: &str) -> Option<Vec<(String, String)>> {
        let home = tempfile::tempdir().unwrap();
        let mut out = Vec::new();
        for n in names {
            let email = format!("{n}@erdma-kit.invalid");
            let user = format!("{n} <{email}>");
            gpg(home.path(), &["--quick-gen-key", &user, algo, "sign", "never"], "")?;
            let list = gpg(home.path(), &["--with-colons", "--fingerprint", &email], "")?;
            let fpr = list.lines().find(|l| l.starts_with("fpr:"))?.split(':').nth(9)?.to_string();
            out.push((gpg(home.path(), &["--armor", "--export", &email], "")?, fpr));
        }
        Some(out)
    }

    /// gpg in the throwaway home `home`, `input` on its stdin: its stdout when it succeeds.
    fn gpg(home: &std::path::Path, args: &[&str], input: &str) -> Option<String> {
        let mut cmd = Command::new("gpg");
        cmd.arg("--homedir").arg(home);
        cmd.args(["--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]);
        cmd.args(args).stdin(std::process::Stdio::piped());
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().ok()?;
        std::io::Write::write_all(&mut child.stdin.take()?, input.as_bytes()).ok()?;
        let out = child.wait_with_output().ok()?;
        out.status.success().then(|| String::from_utf8(out.stdout).ok()).flatten()
    }

    /// A key made by gpg in a throwaway home and `text` clear-signed with it (`gpg
    /// --clearsign`, which dash-escapes): (armoured public key, signed message).
    fn gpg_clearsigned(text: &str) -> Option<(String, String)> {
        let home = tempfile::tempdir().unwrap();
        let user = "cs <cs@erdma-kit.invalid>";
        gpg(home.path(), &["--quick-gen-key", user, "rsa2048", "sign", "never"], "")?;
        let key = gpg(home.path(), &["--armor", "--export", "cs@erdma-kit.invalid"], "")?;
        let signed = gpg(home.path(), &["--clearsign", "--digest-algo", "SHA256"], text)?;
        Some((key, signed))
    }

    /// The text the signatures cover, read in one pass, is what rpgp reads, on text that
    /// tries every rule of the framing: dash escapes, trailing blanks, CRLF, empty lines.
    #[test]
    fn the_signed_text_is_read_as_rpgp_reads_it() {
        let Some((key, signed)) = gpg_clearsigned("Origin: Debian\n") else {
            assert!(std::env::var_os("CI").is_none(), "gpg is needed");
            return;
        };
        let sig_block = &signed[signed.find("-----BEGIN PGP SIGNATURE-----").unwrap()..];
        let bodies = [
            "",
            "a",
            "a\nb",
            "a \t\nb\t",
            "- -----BEGIN PGP SIGNATURE-----\n- - x\n-x",
            "line\r\n\r\nnext\r\n",
            "cr inside\r \nx",
            "\n\n\n",
            " leading\n  \n",
            "ünïcode  \nend",
        ];
        for body in bodies {
            let full =
                format!("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{body}\n{sig_block}");
            let (framing, ours) = split_cleartext(&full).unwrap();
            assert_eq!(ours, body, "{body:?}");
            let (theirs, _) = CleartextSignedMessage::from_string(&full).unwrap();
            assert_eq!(signed_text(ours), theirs.signed_text(), "{body:?}");
            let (stub, _) = CleartextSignedMessage::from_string(&framing).unwrap();
            assert_eq!(stub.signatures().len(), theirs.signatures().len());
        }
        // The real thing: gpg's message verifies, and gives back its text.
        let keyring = Keyring::load(key.as_bytes()).unwrap();
        let now = 2_000_000_000;
        assert_eq!(
            verify_clearsigned_with(signed.as_bytes(), &keyring, now).unwrap(),
            "Origin: Debian\n"
        );
        let tricky = "- dashes\n-----not armour\ntrailing  \n\nlast";
        let (key, signed) = gpg_clearsigned(tricky).unwrap();
        assert_eq!(
            verify_clearsigned_with(
                signed.as_bytes(),
                &Keyring::load(key.as_bytes()).unwrap(),
                now
            )
            .unwrap(),
            "- dashes\n-----not armour\ntrailing\n\nlast\n"
        );
        // Framing damage is refused: no empty line after the header, no signature block.
        assert!(
            split_cleartext("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\nbody\n").is_none()
        );
        assert!(split_cleartext("-----BEGIN PGP SIGNED MESSAGE-----\n\nbody\n").is_none());
        assert!(verify_clearsigned_with(
            b"-----BEGIN PGP SIGNED MESSAGE-----\n\nx\n",
            &keyring,
            now
        )
        .is_err());
    }

    #[test]
    fn every_block_and_every_binary_key_is_read() {
        let Some(keys) = gpg_keys(&["one", "two"], "ed25519") else {
            assert!(std::env::var_os("CI").is_none(), "gpg is needed");
            return;
        };
        let both = format!("{}\n{}", keys[0].0, keys[1].0);
        let parsed = parse(both.as_bytes()).unwrap();
        assert_eq!(
            parsed.iter().map(fingerprint).collect::<Vec<_>>(),
            [keys[0].1.clone(), keys[1].1.clone()]
        );
        // Binary keyrings (what dearmor writes) read back to the same keys.
        let binary = dearmor(both.as_bytes()).unwrap();
        assert_eq!(
            parse(&binary).unwrap().iter().map(fingerprint).collect::<Vec<_>>(),
            [keys[0].1.clone(), keys[1].1.clone()]
        );
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
        let (kept, dropped) =
            select(both.as_bytes(), Some(&keys[0].1.to_lowercase()), "key").unwrap();
        assert_eq!(kept.iter().map(fingerprint).collect::<Vec<_>>(), [keys[0].1.clone()]);
        assert_eq!(dropped, [keys[1].1.clone()]);
        // No pin: all of them.
        assert_eq!(select(both.as_bytes(), None, "key").unwrap().0.len(), 2);
        // A pin no key matches names what the file holds.
        let e = select(keys[1].0.as_bytes(), Some(&keys[0].1), "key of repository `x`")
            .unwrap_err()
            .to_string();
        assert!(e.contains(&keys[1].1) && e.contains(&keys[0].1), "{e}");
        let e = select(both.as_bytes(), Some("1234"), "key").unwrap_err().to_string();
        assert!(e.contains("not a key fingerprint"), "{e}");
    }

    #[test]
    fn v6_keys_are_pinned_by_their_64_digit_fingerprint() {
        // RFC 9580 Annex A.3's sample v6 certificate (testdata/keys/README.md): gpg 2.2 makes no v6 keys.
        let cert = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/keys/rfc9580-v6-sample.pub.asc"
        ))
        .unwrap();
        const FP: &str = "CB186C4F0609A697E4D52DFA6C722B0C1F1E27C18A56708F6525EC27BAD9ACC9";
        assert_eq!(parse(&cert).unwrap().iter().map(fingerprint).collect::<Vec<_>>(), [FP]);
        assert_eq!(
            select(&cert, Some(&format!("0x{}", FP.to_lowercase())), "key").unwrap().0.len(),
            1
        );
        // The v4-length prefix of it is no pin for it.
        assert!(select(&cert, Some(&FP[..40]), "key").is_err());
        // Round trip through the binary form the image gets.
        assert_eq!(fingerprint(&parse(&dearmor(&cert).unwrap()).unwrap()[0]), FP);
    }
}
