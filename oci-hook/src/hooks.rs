//! The spec edit shared by `erdma-runtime` and Podman's hooks.d `precreate` stage, and the
//! `precreate` stage itself (the spec on stdin, the edited spec on stdout).
//!
//! Only a runtime wrapper or a `precreate` hook can change rlimits and namespaces: once the
//! runtime has read `config.json`, changes to it no longer affect the container (OCI runtime
//! spec, "Lifecycle").
use std::io::{Read, Write};
use std::path::Path;

use serde_json::Value;

use crate::config::Config;
use crate::discover;
use crate::error::{Error, Result};
use crate::modify::{self, Report};
use crate::request::{self, Request};
use crate::spec::Editable;

/// The spec `spec` becomes when its container asks for eRDMA, with what was done; `None` when
/// it does not ask (the caller must then leave the spec untouched, byte for byte).
///
/// Everything is computed on a copy: on error the caller's spec is as it was.
pub fn edit(spec: &Value, config: &Config) -> Result<Option<(Value, Report)>> {
    let mut edited = spec.clone();
    Ok(edit_in_place(&mut edited, config)?.map(|report| (edited, report)))
}

/// [`edit`] without the copy, for a caller that drops `spec` on error (`erdma-runtime` reads
/// the spec, edits it and writes it back, or writes nothing): `None` and `spec` untouched when
/// the container does not ask; on error `spec` may be partly edited. The copy and its drop
/// are about a tenth of an asking `create`'s own work.
pub fn edit_in_place(spec: &mut Value, config: &Config) -> Result<Option<Report>> {
    let request = request::from_spec(spec, config)?;
    if request == Request::None {
        return Ok(None);
    }
    let host = discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
    let (devices, nodes) = modify::select(&request, &host, config)?;
    let (devices, nodes, placement) = modify::place(spec, &host, config, &request, devices, nodes);
    let mut report = modify::apply(spec, &host, &devices, &nodes, config, &placement)?;
    // Things that do not stop the container but will make eRDMA slow or absent in it.
    if request == Request::All {
        for d in host.devices.iter().filter(|d| d.uverbs.is_none()) {
            report.warnings.push(format!(
                "{} left out: {}",
                d.name,
                d.problem.as_deref().unwrap_or("no usable uverbs node")
            ));
        }
    }
    for d in &devices {
        for p in d.ports.iter().filter(|p| p.state != 4) {
            report.warnings.push(format!(
                "{} port {} is {} (not ACTIVE): RDMA traffic over it will fail",
                d.name, p.num, p.state_name
            ));
        }
    }
    Ok(Some(report))
}

/// [`edit_in_place`] over a spec's bytes, as erdma-runtime and `precreate` take them: `None`,
/// the bytes left unparsed, where they cannot ask ([`request::may_ask`]), and `None` where the
/// container does not ask; else the spec read as [`Editable`] (the members the edit never reads
/// kept as their bytes), edited, with what was done. `path` names the spec in errors.
pub fn edit_bytes<'a>(
    raw: &'a [u8],
    path: &Path,
    config: &Config,
) -> Result<Option<(Editable<'a>, Report)>> {
    if !request::may_ask(raw, config) {
        return Ok(None);
    }
    let mut spec = Editable::parse(raw, path)?;
    Ok(edit_in_place(&mut spec.value, config)?.map(|report| (spec, report)))
}

/// Logs what [`edit`] did for `what` (a bundle path, `stdin`).
pub fn log_report(what: &str, report: &Report) {
    tracing::info!(
        devices = %report.devices.join(","),
        nodes = %report.nodes.join(","),
        memlock = report.memlock,
        network = ?report.network,
        env_added = %report.env_added.join(" "),
        "eRDMA edit of {what}"
    );
    for p in &report.pairing {
        tracing::info!("{what}: {p}");
    }
    for w in &report.warnings {
        tracing::warn!("{what}: {w}");
    }
}

/// Podman hooks.d `precreate`: reads the spec from `input`, writes the edited spec to `output`
/// (the input unchanged, byte for byte, when the container does not ask; left unparsed when
/// its bytes cannot ask, [`request::may_ask`]).
pub fn precreate(config: &Config, input: &mut dyn Read, output: &mut dyn Write) -> Result<()> {
    let mut raw = Vec::new();
    input.read_to_end(&mut raw).map_err(Error::io("reading the OCI spec from", "stdin"))?;
    // On error nothing is written.
    let out = edit_bytes(&raw, "stdin".as_ref(), config)?.map(|(spec, report)| {
        log_report("precreate spec", &report);
        spec.to_vec()
    });
    if out.is_none() {
        tracing::debug!("precreate: the container does not ask for eRDMA; spec passed through");
    }
    output
        .write_all(out.as_deref().unwrap_or(&raw))
        .and_then(|()| output.flush())
        .map_err(Error::io("writing the OCI spec to", "stdout"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn none_host() -> Config {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/sysfs/none");
        Config {
            sysfs_root: format!("{dir}/sys").into(),
            dev_root: format!("{dir}/dev-absent").into(),
            ..Config::default()
        }
    }

    #[test]
    fn precreate_echoes_a_spec_that_does_not_ask() {
        // Odd formatting and unknown fields: the bytes come back as they were.
        let input = b"{ \"ociVersion\":\"1.0.2\",  \"x-unknown\": [1,2],\n \"process\": {\"env\": [\"A=b\"]}}".to_vec();
        let mut out = Vec::new();
        precreate(&none_host(), &mut input.as_slice(), &mut out).unwrap();
        assert_eq!(out, input);
    }

    #[test]
    fn precreate_errors() {
        let mut out = Vec::new();
        let e =
            precreate(&none_host(), &mut b"{\"ERDMA_VISIBLE_DEVICES\" nope".as_slice(), &mut out)
                .unwrap_err();
        assert_eq!(e.to_string(), "malformed OCI spec stdin");
        // What serde_json found is the cause, kept as it is.
        let cause = std::error::Error::source(&e).expect("a cause");
        assert!(cause.is::<serde_json::Error>(), "{cause}");
        let e =
            precreate(&none_host(), &mut b"[\"ERDMA_VISIBLE_DEVICES=all\"]".as_slice(), &mut out)
                .unwrap_err()
                .to_string();
        assert!(e.contains("not a JSON object"), "{e}");
        assert!(out.is_empty());
        // Bytes that cannot ask are passed through unparsed: the runtime that reads them next
        // judges them, as it would without the hook.
        precreate(&none_host(), &mut b"{nope".as_slice(), &mut out).unwrap();
        assert_eq!(out, b"{nope");
        out.clear();
        // Asking on a host without devices is an error, and nothing is written.
        let spec = serde_json::to_vec(&json!({"process": {"env": ["ERDMA_VISIBLE_DEVICES=all"]}}))
            .unwrap();
        let e = precreate(&none_host(), &mut spec.as_slice(), &mut out).unwrap_err().to_string();
        assert!(e.contains("no eRDMA device was found"), "{e}");
        assert!(out.is_empty());
    }
}
