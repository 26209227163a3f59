//! The NRI plugin daemon: connects to the runtime's NRI socket, registers, subscribes to
//! `CreateContainer` (and `RemoveContainer` where it keeps records of whom it gave ERIs:
//! [`crate::holders`]), and answers each call in this process (no process is started per
//! container). When the runtime goes away (restart, `Shutdown`), it connects again.
use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::Message as _;

use super::adjust;
use super::pb;
use super::wire::{self, code, Demux, Message, PLUGIN_CONN, REQUEST, RESPONSE, RUNTIME_CONN};
use crate::holders;
use erdma_oci_hook::config::Config;
use erdma_oci_hook::discover;

/// Where containerd and CRI-O listen for external NRI plugins by default.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// NRI's event mask bit for `event` (nri `EventMask.Set`: `1 << (event - 1)`).
fn mask(event: pb::Event) -> i32 {
    1 << (event as i32 - 1)
}

pub struct NriPlugin {
    pub config: Config,
    /// The plugin's name and two-digit index, which orders it among the runtime's plugins.
    pub name: String,
    pub idx: String,
    /// Where it records the containers it gives ERIs to, one file each, for the metrics;
    /// `None`: no records.
    pub records: Option<PathBuf>,
}

/// How a connection ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The runtime closed it (restarting, or it dropped us).
    Closed,
    /// The runtime called `Shutdown`.
    Shutdown,
}

fn status_err(code: i32, message: String) -> Result<Vec<u8>, wire::Status> {
    Err(wire::Status { code, message })
}

impl NriPlugin {
    /// Checks the name and index as the runtime will (nri `CheckPluginIndex`).
    pub fn validate(&self) -> Result<(), String> {
        if self.idx.len() != 2 || !self.idx.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "invalid plugin index `{}`: NRI wants two digits, such as 10",
                self.idx
            ));
        }
        if self.name.is_empty() || self.name.contains('/') {
            return Err(format!("invalid plugin name `{}`", self.name));
        }
        Ok(())
    }

    /// Answers one call of the `Plugin` service: the reply's payload, or a ttrpc status.
    pub fn handle(
        &self,
        method: &str,
        payload: &[u8],
    ) -> (Result<Vec<u8>, wire::Status>, Option<Ended>) {
        let decode_err = |e: prost::DecodeError| wire::Status {
            code: code::INVALID_ARGUMENT,
            message: format!("{method}: {e}"),
        };
        let reply = match method {
            "Configure" => match pb::ConfigureRequest::decode(payload) {
                Ok(req) => {
                    tracing::info!(runtime = %req.runtime_name, version = %req.runtime_version, "configured by the runtime");
                    let mut events = mask(pb::Event::CreateContainer);
                    if self.records.is_some() {
                        events |= mask(pb::Event::RemoveContainer);
                    }
                    Ok(pb::ConfigureResponse { events }.encode_to_vec())
                }
                Err(e) => Err(decode_err(e)),
            },
            // Containers that already exist were edited (or not) when they were created; the
            // records of those that are gone are dropped.
            "Synchronize" => match pb::SynchronizeRequest::decode(payload) {
                Ok(req) => {
                    self.synchronize(&req);
                    Ok(pb::SynchronizeResponse::default().encode_to_vec())
                }
                Err(e) => Err(decode_err(e)),
            },
            "CreateContainer" => match pb::CreateContainerRequest::decode(payload) {
                Ok(req) => self.create_container(&req),
                Err(e) => Err(decode_err(e)),
            },
            "UpdateContainer" => Ok(pb::UpdateContainerResponse::default().encode_to_vec()),
            "StopContainer" => Ok(pb::StopContainerResponse::default().encode_to_vec()),
            "StateChange" => match pb::StateChangeEvent::decode(payload) {
                Ok(ev) => {
                    if ev.event == pb::Event::RemoveContainer as i32 {
                        self.removed(ev.container.as_ref());
                    }
                    Ok(pb::Empty::default().encode_to_vec())
                }
                Err(e) => Err(decode_err(e)),
            },
            "RemoveContainer" => match pb::RemoveContainerRequest::decode(payload) {
                Ok(req) => {
                    self.removed(req.container.as_ref());
                    Ok(pb::RemoveContainerResponse::default().encode_to_vec())
                }
                Err(e) => Err(decode_err(e)),
            },
            "Shutdown" => return (Ok(pb::Empty::default().encode_to_vec()), Some(Ended::Shutdown)),
            other => status_err(
                code::UNIMPLEMENTED,
                format!("{PLUGIN_SERVICE}/{other} is not implemented by erdma-nri-plugin"),
            ),
        };
        (reply, None)
    }

    /// Drops the records of containers the runtime no longer has (those removed while the
    /// plugin was away). Where later NRI splits the list (`more`), nothing is dropped: a
    /// container of a later part would lose its record.
    fn synchronize(&self, req: &pb::SynchronizeRequest) {
        let Some(dir) = &self.records else { return };
        if req.more {
            return;
        }
        let live = req.containers.iter().map(|c| c.id.clone()).collect();
        match holders::keep_only(dir, &live) {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(removed = n, "dropped the records of containers gone while away")
            }
            Err(e) => tracing::warn!(dir = %dir.display(), "records: {e}"),
        }
    }

    /// The runtime removed `ctr`: its record goes.
    fn removed(&self, ctr: Option<&pb::Container>) {
        let (Some(dir), Some(ctr)) = (&self.records, ctr) else { return };
        if let Err(e) = holders::forget(dir, &ctr.id) {
            tracing::warn!(container = %ctr.name, "records: {e}");
        }
    }

    fn create_container(&self, req: &pb::CreateContainerRequest) -> Result<Vec<u8>, wire::Status> {
        let Some(ctr) = req.container.as_ref() else {
            return status_err(
                code::INVALID_ARGUMENT,
                "CreateContainer without a container".into(),
            );
        };
        let pod = req.pod.as_ref();
        let started = Instant::now();
        let host = || {
            discover::discover(&self.config.sysfs_root, &self.config.dev_root, &self.config.drivers)
        };
        let decision = adjust::create(pod, ctr, host, &self.config);
        tracing::debug!(
            pod = %adjust::pod_name(pod),
            elapsed_us = started.elapsed().as_micros() as u64,
            asked = decision.as_ref().map_or(true, |d| d.adjust.is_some()),
            "CreateContainer decided"
        );
        match decision {
            Ok(d) => {
                if let Some(r) = &d.report {
                    tracing::info!(pod = %adjust::pod_name(pod), container = %ctr.name, devices = ?r.devices, nodes = ?r.nodes, memlock = r.memlock, env = ?r.env_added, "eRDMA given");
                    for w in &r.warnings {
                        tracing::warn!(pod = %adjust::pod_name(pod), container = %ctr.name, "{w}");
                    }
                    if let Some(dir) = &self.records {
                        let record = holders::Record {
                            namespace: pod.map(|p| p.namespace.clone()).unwrap_or_default(),
                            pod: pod.map(|p| p.name.clone()).unwrap_or_default(),
                            container: ctr.name.clone(),
                            devices: r.devices.clone(),
                        };
                        // The record serves the metrics only: the container is not refused
                        // for it.
                        if let Err(e) = holders::record(dir, &ctr.id, &record) {
                            tracing::warn!(pod = %adjust::pod_name(pod), container = %ctr.name, dir = %dir.display(), "records: {e}");
                        }
                    }
                }
                Ok(pb::CreateContainerResponse { adjust: d.adjust, ..Default::default() }
                    .encode_to_vec())
            }
            Err(e) => {
                tracing::error!(pod = %adjust::pod_name(pod), container = %ctr.name, "refused: {e}");
                status_err(code::FAILED_PRECONDITION, format!("erdma-nri-plugin: {e}"))
            }
        }
    }

    /// Registers on `conn` and serves it until the runtime closes it or shuts us down.
    pub fn serve(&self, conn: UnixStream) -> io::Result<Ended> {
        let mut reader = conn.try_clone()?;
        let mut writer = conn;
        let register = pb::RegisterPluginRequest {
            plugin_name: self.name.clone(),
            plugin_idx: self.idx.clone(),
        };
        let call = wire::Request {
            service: RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: register.encode_to_vec(),
            timeout_nano: 5_000_000_000,
        };
        wire::write_message(
            &mut writer,
            &Message {
                conn: RUNTIME_CONN,
                stream: 1,
                kind: REQUEST,
                flags: 0,
                body: call.encode_to_vec(),
            },
        )?;
        let mut demux = Demux::default();
        while let Some(m) = demux.next(&mut reader)? {
            match (m.conn, m.kind) {
                (RUNTIME_CONN, RESPONSE) if m.stream == 1 => {
                    let resp = wire::Response::decode(&m.body[..])
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    match resp.status {
                        Some(s) if s.code != code::OK => {
                            return Err(io::Error::other(format!(
                                "the runtime refused the registration of {}-{}: {}",
                                self.idx, self.name, s.message
                            )))
                        }
                        _ => {
                            tracing::info!(plugin = %format!("{}-{}", self.idx, self.name), "registered with the runtime")
                        }
                    }
                }
                (PLUGIN_CONN, REQUEST) => {
                    let (reply, ended) = match wire::Request::decode(&m.body[..]) {
                        Ok(req) if req.service == PLUGIN_SERVICE => {
                            self.handle(&req.method, &req.payload)
                        }
                        Ok(req) => (
                            status_err(
                                code::UNIMPLEMENTED,
                                format!("unknown service {}", req.service),
                            ),
                            None,
                        ),
                        Err(e) => (
                            status_err(
                                code::INVALID_ARGUMENT,
                                format!("malformed ttrpc request: {e}"),
                            ),
                            None,
                        ),
                    };
                    let resp = match reply {
                        Ok(payload) => wire::Response {
                            status: Some(wire::Status { code: code::OK, message: String::new() }),
                            payload,
                        },
                        Err(status) => wire::Response { status: Some(status), payload: Vec::new() },
                    };
                    wire::write_message(
                        &mut writer,
                        &Message {
                            conn: PLUGIN_CONN,
                            stream: m.stream,
                            kind: RESPONSE,
                            flags: 0,
                            body: resp.encode_to_vec(),
                        },
                    )?;
                    if let Some(e) = ended {
                        return Ok(e);
                    }
                }
                // Nothing else is expected: our only call is the registration.
                (c, k) => tracing::debug!(conn = c, kind = k, "ignored an unexpected message"),
            }
        }
        Ok(Ended::Closed)
    }

    /// Connects to `socket` and serves, again and again: the runtime restarting (or not up
    /// yet) is waited for, every `retry`. Returns only if `once`, after the first connection.
    pub fn run(&self, socket: &Path, retry: Duration, once: bool) -> io::Result<()> {
        let mut warned = false;
        loop {
            match UnixStream::connect(socket) {
                Ok(conn) => {
                    warned = false;
                    match self.serve(conn) {
                        Ok(e) => {
                            tracing::info!(socket = %socket.display(), "the runtime ended the connection ({e:?}); reconnecting")
                        }
                        Err(e) => {
                            tracing::warn!(socket = %socket.display(), "connection failed: {e}; reconnecting")
                        }
                    }
                    if once {
                        return Ok(());
                    }
                }
                Err(e) if !warned => {
                    tracing::warn!(socket = %socket.display(), "cannot connect to the runtime's NRI socket: {e}; is NRI enabled (containerd 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false; CRI-O: [crio.nri] enable_nri = true)? retrying");
                    warned = true;
                }
                Err(_) => {}
            }
            std::thread::sleep(retry);
        }
    }
}

/// The default socket, as a path.
pub fn default_socket() -> PathBuf {
    PathBuf::from(DEFAULT_SOCKET)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin() -> NriPlugin {
        NriPlugin {
            config: Config::default(),
            name: "erdma".into(),
            idx: "10".into(),
            records: None,
        }
    }

    #[test]
    fn subscribes_to_create_container_only() {
        let (r, e) = plugin().handle(
            "Configure",
            &pb::ConfigureRequest { runtime_name: "containerd".into(), ..Default::default() }
                .encode_to_vec(),
        );
        assert_eq!(
            pb::ConfigureResponse::decode(&r.unwrap()[..]).unwrap().events,
            0b1000,
            "CREATE_CONTAINER is event 4"
        );
        assert!(e.is_none());
    }

    /// With records kept: REMOVE_CONTAINER too; a removal (as v0.6.1's StateChange and later
    /// NRI's RemoveContainer) drops the container's record, a synchronisation those of the
    /// containers the runtime no longer lists, but not while more of the list is to come.
    #[test]
    fn records_follow_the_runtime_s_containers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("records");
        let p = NriPlugin { records: Some(dir.clone()), ..plugin() };
        let (r, _) = p.handle("Configure", &pb::ConfigureRequest::default().encode_to_vec());
        assert_eq!(
            pb::ConfigureResponse::decode(&r.unwrap()[..]).unwrap().events,
            0b100_0000_1000,
            "CREATE_CONTAINER is event 4, REMOVE_CONTAINER 11"
        );
        let rec = |c: &str| holders::Record {
            namespace: "ml".into(),
            pod: "p".into(),
            container: c.into(),
            devices: vec!["erdma_0".into()],
        };
        for id in ["a1", "b2", "c3", "d4"] {
            holders::record(&dir, id, &rec(id)).unwrap();
        }
        let ctr = |id: &str| pb::Container { id: id.into(), ..Default::default() };
        let names = || -> Vec<String> {
            holders::recorded(&dir).into_iter().map(|h| h.container).collect()
        };
        let event = pb::StateChangeEvent {
            event: pb::Event::RemoveContainer as i32,
            container: Some(ctr("a1")),
            ..Default::default()
        };
        p.handle("StateChange", &event.encode_to_vec()).0.unwrap();
        // Another event for a container does not touch its record.
        let other = pb::StateChangeEvent {
            event: pb::Event::StopContainer as i32,
            container: Some(ctr("b2")),
            ..Default::default()
        };
        p.handle("StateChange", &other.encode_to_vec()).0.unwrap();
        assert_eq!(names(), ["b2", "c3", "d4"]);
        let removed = pb::RemoveContainerRequest { container: Some(ctr("b2")), pod: None };
        p.handle("RemoveContainer", &removed.encode_to_vec()).0.unwrap();
        assert_eq!(names(), ["c3", "d4"]);
        let partial =
            pb::SynchronizeRequest { containers: vec![ctr("c3")], more: true, pods: vec![] };
        p.handle("Synchronize", &partial.encode_to_vec()).0.unwrap();
        assert_eq!(names(), ["c3", "d4"], "more is to come: nothing dropped");
        let whole =
            pb::SynchronizeRequest { containers: vec![ctr("c3")], more: false, pods: vec![] };
        p.handle("Synchronize", &whole.encode_to_vec()).0.unwrap();
        assert_eq!(names(), ["c3"]);
        // Without records, nothing is written or removed.
        plugin()
            .handle(
                "RemoveContainer",
                &pb::RemoveContainerRequest { container: Some(ctr("c3")), pod: None }
                    .encode_to_vec(),
            )
            .0
            .unwrap();
        assert_eq!(names(), ["c3"]);
    }

    #[test]
    fn shutdown_ends_and_unknown_methods_are_unimplemented() {
        assert_eq!(plugin().handle("Shutdown", &[]).1, Some(Ended::Shutdown));
        assert_eq!(plugin().handle("Frobnicate", &[]).0.unwrap_err().code, code::UNIMPLEMENTED);
        assert_eq!(
            plugin().handle("CreateContainer", &[0xff, 0xff]).0.unwrap_err().code,
            code::INVALID_ARGUMENT
        );
    }

    #[test]
    fn names_are_checked_as_the_runtime_does() {
        assert!(plugin().validate().is_ok());
        for idx in ["1", "100", "a1"] {
            assert!(NriPlugin { idx: idx.into(), ..plugin() }.validate().is_err(), "{idx}");
        }
    }

    /// A fake runtime on the other end of a socket pair: the registration, Configure, a
    /// CreateContainer (a container that does not ask gets no adjustment) and Shutdown, all over
    /// the mux and ttrpc as containerd frames them.
    #[test]
    fn speaks_the_protocol_to_a_runtime() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || plugin().serve(ours));
        let mut r = theirs.try_clone().unwrap();
        let mut w = theirs;
        let mut d = Demux::default();
        let reg = d.next(&mut r).unwrap().unwrap();
        assert_eq!((reg.conn, reg.stream, reg.kind), (RUNTIME_CONN, 1, REQUEST));
        let call = wire::Request::decode(&reg.body[..]).unwrap();
        assert_eq!(
            (call.service.as_str(), call.method.as_str()),
            (RUNTIME_SERVICE, "RegisterPlugin")
        );
        let req = pb::RegisterPluginRequest::decode(&call.payload[..]).unwrap();
        assert_eq!((req.plugin_name.as_str(), req.plugin_idx.as_str()), ("erdma", "10"));
        let ok = wire::Response { status: None, payload: pb::Empty::default().encode_to_vec() };
        wire::write_message(
            &mut w,
            &Message {
                conn: RUNTIME_CONN,
                stream: 1,
                kind: RESPONSE,
                flags: 0,
                body: ok.encode_to_vec(),
            },
        )
        .unwrap();
        let mut ask = |stream: u32, method: &str, payload: Vec<u8>| {
            let req = wire::Request {
                service: PLUGIN_SERVICE.into(),
                method: method.into(),
                payload,
                timeout_nano: 0,
            };
            wire::write_message(
                &mut w,
                &Message {
                    conn: PLUGIN_CONN,
                    stream,
                    kind: REQUEST,
                    flags: 0,
                    body: req.encode_to_vec(),
                },
            )
            .unwrap();
            let m = d.next(&mut r).unwrap().unwrap();
            assert_eq!((m.conn, m.stream, m.kind), (PLUGIN_CONN, stream, RESPONSE));
            wire::Response::decode(&m.body[..]).unwrap()
        };
        let conf = ask(1, "Configure", pb::ConfigureRequest::default().encode_to_vec());
        assert_eq!(pb::ConfigureResponse::decode(&conf.payload[..]).unwrap().events, 8);
        let ctr = pb::Container { name: "plain".into(), ..Default::default() };
        let created = ask(
            3,
            "CreateContainer",
            pb::CreateContainerRequest { pod: None, container: Some(ctr) }.encode_to_vec(),
        );
        assert_eq!(created.status.unwrap().code, code::OK);
        assert_eq!(pb::CreateContainerResponse::decode(&created.payload[..]).unwrap().adjust, None);
        let bye = ask(5, "Shutdown", vec![]);
        assert_eq!(bye.status.unwrap().code, code::OK);
        assert_eq!(t.join().unwrap().unwrap(), Ended::Shutdown);
    }
}
