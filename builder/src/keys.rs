//! Repository keys: ASCII armour removal and OpenPGP v4 fingerprints (RFC 4880 §5.5.2, §12.2),
//! enough to pin a downloaded key. Signature checking of package indices comes with the apt
//! backend and uses a full OpenPGP implementation.
use base64::Engine as _;
use sha1::{Digest as _, Sha1};

use crate::error::{Error, Result};

/// Binary OpenPGP packets from an armoured or binary key file.
pub fn dearmor(data: &[u8]) -> Result<Vec<u8>> {
    let text = match std::str::from_utf8(data) {
        Ok(t) if t.contains("-----BEGIN PGP PUBLIC KEY BLOCK-----") => t,
        _ => {
            if data.first().is_some_and(|b| b & 0x80 != 0) {
                return Ok(data.to_vec());
            }
            return Err(Error::Unsupported("key is neither an armoured nor a binary OpenPGP public key".into()));
        }
    };
    let mut body = String::new();
    let mut in_block = false;
    let mut in_headers = false;
    for line in text.lines() {
        let line = line.trim_end();
        if line.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----") {
            in_block = true;
            in_headers = true;
            continue;
        }
        if !in_block {
            continue;
        }
        if line.starts_with("-----END PGP PUBLIC KEY BLOCK-----") {
            break;
        }
        if in_headers {
            if line.is_empty() {
                in_headers = false;
            } else if !line.contains(": ") {
                in_headers = false;
                body.push_str(line);
            }
            continue;
        }
        // The CRC-24 line starts with '='; padding '=' ends ordinary lines instead.
        if line.starts_with('=') {
            break;
        }
        body.push_str(line.trim());
    }
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| Error::Unsupported(format!("malformed armoured key: {e}")))
}

/// The v4 fingerprint of the first public-key packet, upper-case hex.
pub fn fingerprint(packets: &[u8]) -> Result<String> {
    let bad = |why: &str| Error::Unsupported(format!("malformed OpenPGP key: {why}"));
    let tag_byte = *packets.first().ok_or_else(|| bad("empty"))?;
    if tag_byte & 0x80 == 0 {
        return Err(bad("not a packet"));
    }
    let (tag, len, hdr) = if tag_byte & 0x40 != 0 {
        // New format header.
        let tag = tag_byte & 0x3f;
        let b0 = *packets.get(1).ok_or_else(|| bad("truncated"))? as usize;
        match b0 {
            0..=191 => (tag, b0, 2),
            192..=223 => (tag, ((b0 - 192) << 8) + *packets.get(2).ok_or_else(|| bad("truncated"))? as usize + 192, 3),
            255 => {
                let b = packets.get(2..6).ok_or_else(|| bad("truncated"))?;
                (tag, u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize, 6)
            }
            _ => return Err(bad("partial length in a key packet")),
        }
    } else {
        let tag = (tag_byte >> 2) & 0x0f;
        match tag_byte & 3 {
            0 => (tag, *packets.get(1).ok_or_else(|| bad("truncated"))? as usize, 2),
            1 => {
                let b = packets.get(1..3).ok_or_else(|| bad("truncated"))?;
                (tag, u16::from_be_bytes([b[0], b[1]]) as usize, 3)
            }
            2 => {
                let b = packets.get(1..5).ok_or_else(|| bad("truncated"))?;
                (tag, u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize, 5)
            }
            _ => return Err(bad("indeterminate length")),
        }
    };
    if tag != 6 {
        return Err(bad("first packet is not a public key"));
    }
    let body = packets.get(hdr..hdr + len).ok_or_else(|| bad("truncated"))?;
    if body.first() != Some(&4) {
        return Err(bad("only version 4 keys can be pinned"));
    }
    let mut h = Sha1::new();
    h.update([0x99]);
    h.update((len as u16).to_be_bytes());
    h.update(body);
    Ok(hex::encode_upper(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dearmor_and_fingerprint_round_trip() {
        // A synthetic v4 packet: version 4, time 0, algorithm 22 (EdDSA), then key material.
        let mut body = vec![4u8, 0, 0, 0, 0, 22];
        body.extend([9u8; 40]);
        let mut pkt = vec![0x99, 0, body.len() as u8];
        pkt.extend(&body);
        let armoured = format!(
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\nComment: test\n\n{}\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n",
            base64::engine::general_purpose::STANDARD.encode(&pkt)
        );
        assert_eq!(dearmor(armoured.as_bytes()).unwrap(), pkt);
        let fp = fingerprint(&pkt).unwrap();
        let mut h = Sha1::new();
        h.update([0x99, 0, body.len() as u8]);
        h.update(&body);
        assert_eq!(fp, hex::encode_upper(h.finalize()));
        assert!(dearmor(b"hello").is_err());
    }
}
