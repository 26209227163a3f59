//! `erdma-build self-image`: erdma-build's own container image, made by erdma-build, with no
//! Dockerfile and no base: one layer per platform holding the static program, CA certificates
//! and a non-root user, under one OCI index (`scripts/dist` makes it for linux/amd64 and
//! linux/arm64).
//!
//! The layer, for each `--binary PLATFORM=FILE`:
//!
//! ```text
//! /usr/bin/erdma-build                  0755 root  the program (static: nothing else is there)
//! /etc/ssl/certs/ca-certificates.crt    0644 root  --ca-certs (rustls reads it, SSL_CERT_FILE)
//! /etc/passwd, /etc/group               0644 root  root and erdma (65532:65532)
//! /home/erdma/                          0755 erdma HOME: the package cache, a Docker config
//! /tmp/                                 1777 root  the work directory of a build
//! ```
//!
//! The config runs `/usr/bin/erdma-build` as `65532:65532` in `/home/erdma`. Entries, times
//! (`SOURCE_DATE_EPOCH`, else 0) and compression are fixed, as for a build's layer: the same
//! inputs give the same digests.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::build::{platform_json, CONFIG_TYPE, INDEX_TYPE, MANIFEST_TYPE};
use crate::error::{Error, Result};
use erdma_common::progress::{Counters, Reporter};
use erdma_oci::config::rfc3339;
use erdma_oci::layer::{LayerCompression, LayerContents, LayerInfo};
use erdma_oci::registry::{Registries, RegistryOptions};
use erdma_oci::sink::{Sink, Top};
use erdma_oci::transport::ImageRef;

/// The user the image runs as: distroless's `nonroot` id, no login shell.
pub const UID: u64 = 65532;
pub const USER: &str = "erdma";
pub const HOME: &str = "/home/erdma";
pub const PROGRAM: &str = "/usr/bin/erdma-build";
pub const CA_CERTS: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The most a CA bundle may weigh (Debian's is about 220 KiB).
const MAX_CA_CERTS: u64 = 16 << 20;
/// The most a program may weigh.
const MAX_PROGRAM: u64 = 512 << 20;

pub struct Options {
    /// `--binary PLATFORM=FILE`, in the order given (the index's order).
    pub binaries: Vec<(String, PathBuf)>,
    pub ca_certs: PathBuf,
    pub labels: BTreeMap<String, String>,
    pub output: ImageRef,
    pub registry: RegistryOptions,
    pub epoch: u64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub output: String,
    /// The index's digest.
    pub digest: String,
    pub images: Vec<ImageReport>,
}

#[derive(Debug, Serialize)]
pub struct ImageReport {
    pub platform: String,
    pub binary: PathBuf,
    pub layer: LayerInfo,
    pub config_digest: String,
    pub manifest_digest: String,
}

/// The ELF machine (`e_machine`) each architecture's programs carry.
fn elf_machine(arch: &str) -> Option<u16> {
    match arch {
        "amd64" => Some(62),
        "arm64" => Some(183),
        _ => None,
    }
}

/// Why `bytes` cannot be the image's only program for `arch`: not a 64-bit little-endian ELF
/// executable of that machine, or one that asks for a program interpreter (dynamically linked).
fn check_program(bytes: &[u8], arch: &str) -> std::result::Result<(), String> {
    let truncated = || "a truncated ELF program".to_string();
    let u16_at = |o: u64| -> std::result::Result<u16, String> {
        let o = usize::try_from(o).map_err(|_| truncated())?;
        let b = o.checked_add(2).and_then(|e| bytes.get(o..e)).ok_or_else(truncated)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: u64| -> std::result::Result<u32, String> {
        Ok(u32::from(u16_at(o)?) | (u32::from(u16_at(o + 2)?) << 16))
    };
    let u64_at = |o: u64| -> std::result::Result<u64, String> {
        Ok(u64::from(u32_at(o)?) | (u64::from(u32_at(o + 4)?) << 32))
    };
    if bytes.get(..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF program".into());
    }
    let want = elf_machine(arch).ok_or_else(|| format!("no ELF machine known for {arch}"))?;
    let machine = u16_at(18)?;
    if machine != want {
        let name = match machine {
            62 => "x86_64",
            183 => "aarch64",
            _ => "another architecture",
        };
        return Err(format!("a program for {name}, not {arch}"));
    }
    // e_type: 2 executable, 3 shared object (a position-independent executable).
    if !matches!(u16_at(16)?, 2 | 3) {
        return Err("not an executable".into());
    }
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    for i in 0..u64::from(phnum) {
        let at = phoff.checked_add(i * u64::from(phentsize)).ok_or_else(truncated)?;
        // PT_INTERP: the loader a dynamically linked program needs.
        if u32_at(at)? == 3 {
            return Err("dynamically linked (it names a program interpreter); the image holds \
                        nothing else: give a static build (scripts/dist makes them)"
                .into());
        }
    }
    Ok(())
}

fn read_bounded(path: &Path, max: u64, what: &'static str) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(Error::io(what, path))?.len();
    if len > max {
        return Err(Error::SelfImageInput {
            path: path.to_path_buf(),
            problem: format!("{len} bytes, more than the {max} a {what} may have"),
        });
    }
    std::fs::read(path).map_err(Error::io(what, path))
}

/// The layer of one platform.
fn layer(program: Vec<u8>, ca_certs: &[u8]) -> Result<LayerContents> {
    let mut l = LayerContents::new();
    for (dir, mode) in [("usr", 0o755), ("usr/bin", 0o755), ("etc", 0o755), ("etc/ssl", 0o755)]
        .into_iter()
        .chain([("etc/ssl/certs", 0o755), ("home", 0o755), ("tmp", 0o1777)])
    {
        l.add_dir(dir, mode)?;
    }
    l.add_dir(&HOME[1..], 0o755)?;
    l.set_owner_mode(&HOME[1..], 0o755, UID, UID)?;
    l.add_file(&PROGRAM[1..], program, 0o755)?;
    l.add_file(&CA_CERTS[1..], ca_certs.to_vec(), 0o644)?;
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\n{USER}:x:{UID}:{UID}:erdma-build:{HOME}:/sbin/nologin\n"
    );
    l.add_file("etc/passwd", passwd.into_bytes(), 0o644)?;
    l.add_file("etc/group", format!("root:x:0:\n{USER}:x:{UID}:\n").into_bytes(), 0o644)?;
    Ok(l)
}

fn config(platform: &str, info: &LayerInfo, opts: &Options) -> Value {
    let mut parts = platform.splitn(3, '/');
    let (os, arch, variant) = (parts.next(), parts.next(), parts.next());
    let created = rfc3339(opts.epoch);
    let mut c = json!({
        "created": created,
        "architecture": arch,
        "os": os,
        "config": {
            "User": format!("{UID}:{UID}"),
            "Env": [
                "PATH=/usr/bin:/bin",
                format!("HOME={HOME}"),
                format!("SSL_CERT_FILE={CA_CERTS}"),
            ],
            "Entrypoint": [PROGRAM],
            "WorkingDir": HOME,
            "Labels": opts.labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [info.diff_id]},
        "history": [{"created": created, "created_by": "erdma-build self-image"}],
    });
    if let Some(v) = variant {
        c["variant"] = json!(v);
    }
    c
}

/// Checks every input, writes the layers, configs and manifests, then the index: nothing is
/// written to the output before every input was read and found good.
pub async fn write(opts: &Options, reporter: Arc<dyn Reporter>) -> Result<Report> {
    if opts.binaries.is_empty() {
        return Err(Error::SelfImageInput {
            path: PathBuf::new(),
            problem: "no --binary PLATFORM=FILE given".into(),
        });
    }
    let ca_certs = read_bounded(&opts.ca_certs, MAX_CA_CERTS, "CA bundle")?;
    if !ca_certs.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") {
        return Err(Error::SelfImageInput {
            path: opts.ca_certs.clone(),
            problem: "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        });
    }
    let work = tempfile::Builder::new()
        .prefix("erdma-build-")
        .tempdir()
        .map_err(Error::io("creating work directory", std::env::temp_dir()))?;
    let mut seen = Vec::new();
    let mut images = Vec::new();
    let mut raws = Vec::new();
    for (i, (platform, path)) in opts.binaries.iter().enumerate() {
        let arch = platform.split('/').nth(1).unwrap_or_default();
        if !platform.starts_with("linux/") || elf_machine(arch).is_none() {
            return Err(Error::SelfImageInput {
                path: path.clone(),
                problem: format!("platform {platform}: only linux/amd64 and linux/arm64 are made"),
            });
        }
        if seen.contains(&arch) {
            return Err(Error::SelfImageInput {
                path: path.clone(),
                problem: format!("a second program for {platform}"),
            });
        }
        seen.push(arch);
        reporter.step(&format!("adding {} for {platform}", path.display()));
        let program = read_bounded(path, MAX_PROGRAM, "program")?;
        check_program(&program, arch)
            .map_err(|problem| Error::SelfImageInput { path: path.clone(), problem })?;
        let layer_path = work.path().join(format!("layer-{i}"));
        let info = layer(program, &ca_certs)?.write_layer(
            &layer_path,
            LayerCompression::Gzip,
            opts.epoch,
            erdma_oci::layer::Split::Large,
        )?;
        let config_raw = serde_json::to_vec(&config(platform, &info, opts)).expect("json");
        let config_digest = erdma_oci::blob::sha256_digest(&config_raw);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config_raw.len()},
            "layers": [{"mediaType": info.media_type, "digest": info.digest, "size": info.size}],
        });
        let manifest_raw = serde_json::to_vec(&manifest).expect("json");
        let manifest_digest = erdma_oci::blob::sha256_digest(&manifest_raw);
        images.push(ImageReport {
            platform: platform.clone(),
            binary: path.clone(),
            layer: info,
            config_digest,
            manifest_digest,
        });
        raws.push((layer_path, config_raw, manifest_raw));
    }
    let manifests: Vec<Value> = images
        .iter()
        .zip(&raws)
        .map(|(img, (_, _, m))| {
            json!({"mediaType": MANIFEST_TYPE, "digest": img.manifest_digest, "size": m.len(),
                   "platform": platform_json(&img.platform)})
        })
        .collect();
    let raw = serde_json::to_vec(
        &json!({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests}),
    )
    .expect("json");
    let top =
        Top { digest: erdma_oci::blob::sha256_digest(&raw), media_type: INDEX_TYPE.into(), raw };

    let regs = Arc::new(Registries::new(&opts.registry));
    let counters = Arc::new(Counters::default());
    let sink = Sink::open(&opts.output, &regs, reporter.clone(), counters, 0).await?;
    if !sink.supports_index() {
        return Err(Error::OutputHoldsOneImage { output: opts.output.to_string() });
    }
    reporter.step("writing layers");
    for (img, (layer_path, config_raw, manifest_raw)) in images.iter().zip(&raws) {
        sink.put_file(layer_path, &img.layer.digest, img.layer.size).await?;
        sink.put_bytes(config_raw, &img.config_digest).await?;
        sink.put_child_manifest(manifest_raw, &img.manifest_digest, MANIFEST_TYPE).await?;
    }
    reporter.step(&format!("committing {}", opts.output));
    let digest = top.digest.clone();
    sink.commit(&top).await?;
    Ok(Report { output: opts.output.to_string(), digest, images })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 header with one program header of type `ptype`.
    fn elf(machine: u16, ptype: u32) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 0x38];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&2u16.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        b[0x40..0x44].copy_from_slice(&ptype.to_le_bytes());
        b
    }

    #[test]
    fn only_static_programs_of_the_platforms_architecture() {
        // PT_LOAD only: static.
        assert_eq!(check_program(&elf(62, 1), "amd64"), Ok(()));
        assert_eq!(check_program(&elf(183, 1), "arm64"), Ok(()));
        assert_eq!(
            check_program(&elf(62, 1), "arm64").unwrap_err(),
            "a program for x86_64, not arm64"
        );
        assert!(check_program(&elf(62, 3), "amd64").unwrap_err().starts_with("dynamically linked"));
        assert_eq!(
            check_program(b"#!/bin/sh\n", "amd64").unwrap_err(),
            "not a 64-bit little-endian ELF program"
        );
        // Program headers past the end of the file: refused, not read out of bounds.
        let mut short = elf(62, 1);
        short.truncate(0x40);
        assert_eq!(check_program(&short, "amd64").unwrap_err(), "a truncated ELF program");
        short.truncate(10);
        assert_eq!(check_program(&short, "amd64").unwrap_err(), "a truncated ELF program");
    }
}
