//! NRI's transport, written out: one unix-socket connection to the runtime (`nri.sock`),
//! multiplexed into two byte streams, each carrying ttrpc.
//!
//! - The multiplexer (nri `pkg/net/multiplex`): frames of an 8-byte header, the stream's
//!   connection ID and the payload length (both big-endian u32, payload at most 16 MiB), then the
//!   payload. Connection 1 carries the calls the runtime makes to the plugin (we serve them);
//!   connection 2 the calls the plugin makes to the runtime (we are the client). A frame is a
//!   piece of a byte stream, not a message: a writer may cut a message anywhere.
//! - ttrpc (containerd/ttrpc `channel.go`, `request.proto`): messages of a 10-byte header,
//!   length (u32, at most 4 MiB), stream ID (u32; a client's are odd), type (1 request, 2
//!   response) and flags, then a protobuf `Request{service, method, payload, timeout_nano,
//!   metadata}` or `Response{status, payload}`. Only unary calls are used by NRI.
//!
//! Everything here is bounded: a frame or a message over its limit ends the connection with an
//! error instead of an allocation the peer chose.
use std::collections::HashMap;
use std::io::{self, Read, Write};

/// The runtime's calls to the plugin (`Plugin` service; we answer).
pub const PLUGIN_CONN: u32 = 1;
/// The plugin's calls to the runtime (`Runtime` service; we ask).
pub const RUNTIME_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
/// nri `multiplex.maxPayloadSize`.
pub const MUX_MAX: usize = 1 << 24;
const TTRPC_HEADER: usize = 10;
/// ttrpc `messageLengthMax`.
pub const TTRPC_MAX: usize = 4 << 20;

pub const REQUEST: u8 = 1;
pub const RESPONSE: u8 = 2;

/// gRPC status codes ttrpc reuses.
pub mod code {
    pub const OK: i32 = 0;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const UNIMPLEMENTED: i32 = 12;
}

/// ttrpc's `Request`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(string, tag = "1")]
    pub service: String,
    #[prost(string, tag = "2")]
    pub method: String,
    #[prost(bytes = "vec", tag = "3")]
    pub payload: Vec<u8>,
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
}

/// `google.rpc.Status`, as ttrpc carries it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// ttrpc's `Response`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
}

/// One ttrpc message, on the multiplexed connection it came by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub conn: u32,
    pub stream: u32,
    pub kind: u8,
    pub flags: u8,
    pub body: Vec<u8>,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Writes `msg` as ttrpc on its connection, in as many mux frames as it takes.
pub fn write_message(w: &mut impl Write, msg: &Message) -> io::Result<()> {
    if msg.body.len() > TTRPC_MAX {
        return Err(invalid(format!(
            "ttrpc message of {} bytes is over the {TTRPC_MAX}-byte limit",
            msg.body.len()
        )));
    }
    let mut out = Vec::with_capacity(TTRPC_HEADER + msg.body.len() + MUX_HEADER);
    out.extend_from_slice(&(msg.body.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg.stream.to_be_bytes());
    out.push(msg.kind);
    out.push(msg.flags);
    out.extend_from_slice(&msg.body);
    // One write per frame, header and payload together: the peer reads them in one go, and
    // a single writer (the caller holds the connection) keeps frames whole.
    let mut framed = Vec::with_capacity(out.len() + MUX_HEADER);
    for chunk in out.chunks(MUX_MAX) {
        framed.extend_from_slice(&msg.conn.to_be_bytes());
        framed.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        framed.extend_from_slice(chunk);
    }
    w.write_all(&framed)?;
    w.flush()
}

/// Reads mux frames and hands out whole ttrpc messages, whichever connection completes one.
#[derive(Default)]
pub struct Demux {
    pending: HashMap<u32, Vec<u8>>,
}

impl Demux {
    /// The next whole message; `Ok(None)` at a clean end of the connection (between frames).
    pub fn next(&mut self, r: &mut impl Read) -> io::Result<Option<Message>> {
        loop {
            if let Some(m) = self.take_ready()? {
                return Ok(Some(m));
            }
            let mut hdr = [0u8; MUX_HEADER];
            if !read_full_or_eof(r, &mut hdr)? {
                return Ok(None);
            }
            let conn = u32::from_be_bytes(hdr[0..4].try_into().expect("4 bytes"));
            let len = u32::from_be_bytes(hdr[4..8].try_into().expect("4 bytes")) as usize;
            if len > MUX_MAX {
                return Err(invalid(format!(
                    "mux frame of {len} bytes is over the {MUX_MAX}-byte limit"
                )));
            }
            let mut payload = vec![0u8; len];
            r.read_exact(&mut payload)?;
            // Frames for a connection nobody opened are dropped, as nri's mux does.
            if conn != PLUGIN_CONN && conn != RUNTIME_CONN {
                continue;
            }
            // Bounded: a buffer holds at most one message (checked against TTRPC_MAX as soon
            // as its header is in) and one frame.
            self.pending.entry(conn).or_default().extend_from_slice(&payload);
        }
    }

    fn take_ready(&mut self) -> io::Result<Option<Message>> {
        for (&conn, buf) in self.pending.iter_mut() {
            if buf.len() < TTRPC_HEADER {
                continue;
            }
            let len = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
            if len > TTRPC_MAX {
                return Err(invalid(format!("ttrpc message of {len} bytes on connection {conn} is over the {TTRPC_MAX}-byte limit")));
            }
            if buf.len() < TTRPC_HEADER + len {
                continue;
            }
            let stream = u32::from_be_bytes(buf[4..8].try_into().expect("4 bytes"));
            let (kind, flags) = (buf[8], buf[9]);
            let body = buf[TTRPC_HEADER..TTRPC_HEADER + len].to_vec();
            buf.drain(..TTRPC_HEADER + len);
            return Ok(Some(Message { conn, stream, kind, flags, body }));
        }
        Ok(None)
    }
}

/// Fills `buf`; `false` when the stream ended before its first byte.
fn read_full_or_eof(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside a mux frame header",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    fn msg(conn: u32, stream: u32, body: Vec<u8>) -> Message {
        Message { conn, stream, kind: REQUEST, flags: 0, body }
    }

    #[test]
    fn round_trip_on_both_connections() {
        let mut wire = Vec::new();
        let a = msg(
            PLUGIN_CONN,
            1,
            Request {
                service: "s".into(),
                method: "m".into(),
                payload: vec![1, 2, 3],
                timeout_nano: 5,
            }
            .encode_to_vec(),
        );
        let b = msg(RUNTIME_CONN, 3, vec![]);
        write_message(&mut wire, &a).unwrap();
        write_message(&mut wire, &b).unwrap();
        // The exact bytes: mux header (conn 1, 10 + body), ttrpc header (len, stream 1, type 1, flags 0).
        assert_eq!(&wire[..8], &[0, 0, 0, 1, 0, 0, 0, 10 + a.body.len() as u8]);
        assert_eq!(&wire[8..18], &[0, 0, 0, a.body.len() as u8, 0, 0, 0, 1, 1, 0]);
        let mut r = &wire[..];
        let mut d = Demux::default();
        assert_eq!(d.next(&mut r).unwrap(), Some(a.clone()));
        assert_eq!(d.next(&mut r).unwrap(), Some(b));
        assert_eq!(d.next(&mut r).unwrap(), None);
        assert_eq!(Request::decode(&a.body[..]).unwrap().payload, vec![1, 2, 3]);
    }

    /// A peer (Go's bufio writer) may cut one message into several frames, and interleave
    /// frames of the other connection between them.
    #[test]
    fn messages_cut_across_frames_and_interleaved() {
        let body: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let mut one = Vec::new();
        write_message(&mut one, &msg(PLUGIN_CONN, 7, body.clone())).unwrap();
        let ttrpc = &one[8..]; // strip the single frame's header
        let mut other = Vec::new();
        write_message(&mut other, &msg(RUNTIME_CONN, 1, b"x".to_vec())).unwrap();
        let mut wire = Vec::new();
        for (i, chunk) in ttrpc.chunks(4096).enumerate() {
            wire.extend_from_slice(&PLUGIN_CONN.to_be_bytes());
            wire.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
            wire.extend_from_slice(chunk);
            if i == 0 {
                wire.extend_from_slice(&other);
            }
        }
        let mut r = &wire[..];
        let mut d = Demux::default();
        let first = d.next(&mut r).unwrap().unwrap();
        assert_eq!((first.conn, first.body.as_slice()), (RUNTIME_CONN, &b"x"[..]));
        let second = d.next(&mut r).unwrap().unwrap();
        assert_eq!((second.conn, second.stream, second.body), (PLUGIN_CONN, 7, body));
        assert_eq!(d.next(&mut r).unwrap(), None);
    }

    #[test]
    fn oversized_and_truncated_input_is_refused() {
        // A frame header claiming more than 16 MiB.
        let mut wire = Vec::new();
        wire.extend_from_slice(&1u32.to_be_bytes());
        wire.extend_from_slice(&((MUX_MAX + 1) as u32).to_be_bytes());
        let e = Demux::default().next(&mut &wire[..]).unwrap_err();
        assert!(e.to_string().contains("over the"), "{e}");
        // A ttrpc header claiming more than 4 MiB.
        let mut wire = Vec::new();
        wire.extend_from_slice(&1u32.to_be_bytes());
        wire.extend_from_slice(&10u32.to_be_bytes());
        wire.extend_from_slice(&((TTRPC_MAX + 1) as u32).to_be_bytes());
        wire.extend_from_slice(&[0, 0, 0, 1, 1, 0]);
        let e = Demux::default().next(&mut &wire[..]).unwrap_err();
        assert!(e.to_string().contains("ttrpc message"), "{e}");
        // A connection closed inside a frame.
        let e = Demux::default().next(&mut &[0u8, 0, 0][..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let mut wire = Vec::new();
        write_message(&mut wire, &msg(PLUGIN_CONN, 1, vec![9; 100])).unwrap();
        wire.truncate(50);
        assert!(Demux::default().next(&mut &wire[..]).is_err());
        // Too big to send.
        assert!(
            write_message(&mut Vec::new(), &msg(PLUGIN_CONN, 1, vec![0; TTRPC_MAX + 1])).is_err()
        );
    }

    #[test]
    fn frames_for_unknown_connections_are_dropped() {
        let mut wire = Vec::new();
        write_message(&mut wire, &msg(9, 1, b"ignored".to_vec())).unwrap();
        let m = msg(PLUGIN_CONN, 1, b"kept".to_vec());
        write_message(&mut wire, &m).unwrap();
        assert_eq!(Demux::default().next(&mut &wire[..]).unwrap(), Some(m));
    }
}
