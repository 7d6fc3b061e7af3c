//! The replication wire protocol: framing, checksums, the shared-secret handshake.
//!
//! Owns: [`Frame`] encoding and decoding, [`FrameType`], and the challenge/response handshake
//! ([`client_handshake`], [`server_handshake`]). Every frame is
//!
//! ```text
//! len:u32 LE | crc:u32 LE | epoch:u64 LE | type:u8 | payload (len - 9 bytes)
//! ```
//!
//! where `crc` is CRC32C of everything after it. Invariants: a frame whose checksum does not
//! match, whose length exceeds [`MAX_FRAME_BYTES`] or whose type is unknown is never handed to
//! the caller — it is a [`ReplError::Corrupt`] and the caller drops the connection; every frame
//! carries the sender's epoch (term), so a receiver can fence a sender of an older epoch on any
//! frame, not only at the handshake.
//!
//! The handshake proves to each side that the other knows the shared secret, without sending
//! it: the client sends a fresh 32-byte nonce; the server answers with its own nonce and
//! `HMAC-SHA256(secret, "nvmedb-server" | client_nonce | server_nonce)`; the client checks it and
//! answers `HMAC-SHA256(secret, "nvmedb-client" | server_nonce | client_nonce | role | epoch)`.
//! After the handshake, frames are protected by CRC only (integrity against accidents, not
//! against an active attacker on the path; there is no encryption). Replication listens on
//! loopback unless told otherwise.

use crate::error::ReplError;
use crate::util::bytes::{u32_at, u64_at};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{Read, Write};

/// Welcome flag: the standby holds no usable copy of the database and asks for a base backup.
pub const WELCOME_NEEDS_BASE_BACKUP: u64 = 1;

/// Largest frame body accepted (a bigger length prefix is corruption).
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Bytes before the payload: len, crc, epoch, type.
pub const FRAME_HEADER_BYTES: usize = 4 + 4 + 8 + 1;
const NONCE: usize = 32;
const MAC: usize = 32;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// Client → server: role u8, nonce `[u8; 32]`.
    Hello = 1,
    /// Server → client: nonce `[u8; 32]`, mac `[u8; 32]`.
    Challenge = 2,
    /// Client → server: mac `[u8; 32]`, then role-specific u64 (the primary's durable log
    /// position), then role-specific bytes (a primary's epoch history).
    Auth = 3,
    /// Server → client: the standby's persisted log position u64 (its epoch in the header),
    /// optionally flags u64 ([`WELCOME_NEEDS_BASE_BACKUP`]).
    Welcome = 4,
    /// Primary → standby: primary's locally durable LSN u64, count u32, then records
    /// (lsn u64, end u64, kind u8, len u32, payload).
    Records = 5,
    /// Standby → primary: persisted position u64 (the shadow counter update).
    Ack = 6,
    /// Either way, then the connection closes: code u8 ([`RefuseCode`]), UTF-8 message.
    Refused = 7,
    /// Mirror: name_len u16, name, offset u64, bytes — one data-page write.
    PageWrite = 8,
    /// Mirror: name_len u16, name — sync that file.
    PageSync = 9,
    /// Mirror: the write or sync is done on the standby.
    PageAck = 10,
    /// Admin → standby: promote yourself.
    Promote = 11,
    /// Standby → admin: promoted; new epoch u64, log end u64.
    Promoted = 12,
    /// Admin → standby: report status.
    Status = 13,
    /// Standby → admin: UTF-8 status text.
    StatusReply = 14,
    /// Primary → standby, after the welcome: the synchronous set, as
    /// [`ClusterView::encode`](super::ClusterView::encode) text.
    Cluster = 15,
    /// Admin (a promoting standby) → standby: adopt the frame's epoch and drop the old primary.
    Fence = 16,
    /// Standby → admin: fenced; persisted log position u64, then the log's epoch history
    /// ([`History::encode`](super::state::History::encode); absent from older senders).
    FenceAck = 17,
    /// Admin (a promoting standby) → standby: send your records from LSN u64 on; the caller's
    /// last record is at LSN u64 with CRC u32 (`u64::MAX` when it has none), which this log
    /// must hold too; then (absent from older senders) the LSN u64 at which to stop. Answered
    /// by `Records` frames, the last with no records.
    Fetch = 18,
    /// Primary → standby, base backup: name_len u16, name, offset u64, bytes of a data file.
    BaseFile = 19,
    /// Primary → standby, base backup done: log start u64, then the catalog
    /// ([`encode_catalog`](crate::table::catalog::encode_catalog)); answered by a `Welcome`.
    BaseDone = 20,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<Self> {
        use FrameType::*;
        Some(match v {
            1 => Hello,
            2 => Challenge,
            3 => Auth,
            4 => Welcome,
            5 => Records,
            6 => Ack,
            7 => Refused,
            8 => PageWrite,
            9 => PageSync,
            10 => PageAck,
            11 => Promote,
            12 => Promoted,
            13 => Status,
            14 => StatusReply,
            15 => Cluster,
            16 => Fence,
            17 => FenceAck,
            18 => Fetch,
            19 => BaseFile,
            20 => BaseDone,
            _ => return None,
        })
    }
}

/// Why a peer refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RefuseCode {
    /// Wrong secret.
    Auth = 1,
    /// The sender's epoch is older than the receiver's.
    Fenced = 2,
    /// The logs disagree (standby ahead of or behind what the primary can send).
    Diverged = 3,
    /// Unexpected frame.
    Protocol = 4,
    /// The request cannot be served now (e.g. fencing could not reach enough standbys).
    Unavailable = 5,
}

/// The role a connecting client plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Ships log records.
    Log = 1,
    /// Mirrors data-page writes.
    Mirror = 2,
    /// Administration (promote, status).
    Admin = 3,
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The sender's epoch.
    pub epoch: u64,
    /// What it is.
    pub kind: FrameType,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Encodes a frame into `out` (appending).
pub fn encode_frame(out: &mut Vec<u8>, epoch: u64, kind: FrameType, payload: &[u8]) {
    let start = out.len();
    out.resize(start + FRAME_HEADER_BYTES, 0);
    out.extend_from_slice(payload);
    seal_frame(&mut out[start..], epoch, kind);
}

/// Fills in the header of the frame in `buf` (its payload after [`FRAME_HEADER_BYTES`]).
fn seal_frame(buf: &mut [u8], epoch: u64, kind: FrameType) {
    let body = buf.len() - 8;
    assert!(body <= MAX_FRAME_BYTES, "frame of {body} bytes exceeds the maximum");
    buf[..4].copy_from_slice(&(body as u32).to_le_bytes());
    buf[8..16].copy_from_slice(&epoch.to_le_bytes());
    buf[16] = kind as u8;
    let crc = crate::util::crc32c(&buf[8..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Writes one frame.
pub fn write_frame(
    w: &mut impl Write,
    peer: &str,
    epoch: u64,
    kind: FrameType,
    payload: &[u8],
) -> Result<(), ReplError> {
    let mut buf = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
    encode_frame(&mut buf, epoch, kind, payload);
    w.write_all(&buf).and_then(|()| w.flush()).map_err(|e| ReplError::io(peer, "send", e))
}

/// Sends one frame whose payload is already in `buf` after [`FRAME_HEADER_BYTES`] reserved
/// bytes: fills the header in place and writes the whole buffer in one call (no copy of the
/// payload, unlike [`write_frame`]). `buf` keeps the encoded frame.
pub fn send_frame(
    w: &mut impl Write,
    peer: &str,
    epoch: u64,
    kind: FrameType,
    buf: &mut [u8],
) -> Result<(), ReplError> {
    assert!(buf.len() >= FRAME_HEADER_BYTES, "send_frame needs the header's room");
    seal_frame(buf, epoch, kind);
    w.write_all(buf).and_then(|()| w.flush()).map_err(|e| ReplError::io(peer, "send", e))
}

/// Reads one frame. A clean end of stream before the first byte is `Ok(None)`.
pub fn read_frame(r: &mut impl Read, peer: &str) -> Result<Option<Frame>, ReplError> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(ReplError::io(peer, "receive", std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReplError::io(peer, "receive", e)),
        }
    }
    let len = u32_at(&head, 0) as usize;
    let crc = u32_at(&head, 4);
    if !(9..=MAX_FRAME_BYTES).contains(&len) {
        return Err(ReplError::Corrupt {
            peer: peer.into(),
            detail: format!("frame length {len} out of range"),
        });
    }
    // The epoch and type first, then the payload straight into its own buffer (no move of
    // the payload afterwards); the checksum covers both.
    let mut et = [0u8; 9];
    r.read_exact(&mut et).map_err(|e| ReplError::io(peer, "receive", e))?;
    let mut payload = vec![0u8; len - 9];
    r.read_exact(&mut payload).map_err(|e| ReplError::io(peer, "receive", e))?;
    let actual = crate::util::crc32c_append(crate::util::crc32c(&et), &payload);
    if actual != crc {
        return Err(ReplError::Corrupt {
            peer: peer.into(),
            detail: format!(
                "frame checksum mismatch (stored {crc:#010x}, computed {actual:#010x}, {len} bytes)"
            ),
        });
    }
    let epoch = u64_at(&et, 0);
    let kind = FrameType::from_u8(et[8]).ok_or_else(|| ReplError::Corrupt {
        peer: peer.into(),
        detail: format!("unknown frame type {}", et[8]),
    })?;
    Ok(Some(Frame { epoch, kind, payload }))
}

/// Reads a frame, treating end of stream as an error.
pub fn expect_frame(r: &mut impl Read, peer: &str) -> Result<Frame, ReplError> {
    read_frame(r, peer)?
        .ok_or_else(|| ReplError::io(peer, "receive", std::io::ErrorKind::UnexpectedEof.into()))
}

/// Turns a [`FrameType::Refused`] frame into its error.
pub fn refused_error(peer: &str, f: &Frame, our_epoch: u64) -> ReplError {
    let code = f.payload.first().copied().unwrap_or(0);
    let msg = String::from_utf8_lossy(f.payload.get(1..).unwrap_or(&[])).into_owned();
    match code {
        c if c == RefuseCode::Auth as u8 => ReplError::AuthFailed { peer: peer.into(), detail: msg },
        c if c == RefuseCode::Fenced as u8 => {
            ReplError::Fenced { peer: peer.into(), our_epoch, their_epoch: f.epoch }
        }
        c if c == RefuseCode::Diverged as u8 => ReplError::Diverged { peer: peer.into(), detail: msg },
        c if c == RefuseCode::Unavailable as u8 => ReplError::NotFenced { detail: format!("{peer}: {msg}") },
        _ => ReplError::Protocol { peer: peer.into(), detail: msg },
    }
}

/// Payload of a [`FrameType::Refused`] frame.
pub fn refuse_payload(code: RefuseCode, msg: &str) -> Vec<u8> {
    let mut p = vec![code as u8];
    p.extend_from_slice(msg.as_bytes());
    p
}

fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    let ok = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut n)).is_ok();
    if !ok {
        // No /dev/urandom: fall back to time-seeded randomness (weaker, still unique).
        crate::util::Rng::new(crate::util::Rng::seed_from_time()).fill(&mut n);
    }
    n
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> hmac::digest::CtOutput<Hmac<Sha256>> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
    for p in parts {
        m.update(p);
    }
    m.finalize()
}

fn verify(secret: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes keys of any length");
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

/// What the client learned from a successful handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Welcome {
    /// The server's epoch.
    pub epoch: u64,
    /// The value the server sent with its welcome (the standby's persisted position).
    pub position: u64,
    /// Flags the server sent ([`WELCOME_NEEDS_BASE_BACKUP`]).
    pub flags: u64,
}

/// Client side of the handshake: proves the secret, checks the server's proof, sends `arg`
/// (role-specific, e.g. the primary's log end) and returns the server's welcome.
///
/// Errors: [`ReplError::AuthFailed`] when the server does not know the secret or refuses ours;
/// [`ReplError::Fenced`] when the server's epoch is newer than `epoch`.
pub fn client_handshake<S: Read + Write>(
    s: &mut S,
    peer: &str,
    secret: &[u8],
    role: Role,
    epoch: u64,
    arg: u64,
) -> Result<Welcome, ReplError> {
    client_handshake_with(s, peer, secret, role, epoch, arg, &[])
}

/// [`client_handshake`] that also sends `extra` bytes with the proof (a primary's history).
pub fn client_handshake_with<S: Read + Write>(
    s: &mut S,
    peer: &str,
    secret: &[u8],
    role: Role,
    epoch: u64,
    arg: u64,
    extra: &[u8],
) -> Result<Welcome, ReplError> {
    let cn = nonce();
    let mut hello = vec![role as u8];
    hello.extend_from_slice(&cn);
    write_frame(s, peer, epoch, FrameType::Hello, &hello)?;
    let f = expect_frame(s, peer)?;
    if f.kind == FrameType::Refused {
        return Err(refused_error(peer, &f, epoch));
    }
    if f.kind != FrameType::Challenge || f.payload.len() != NONCE + MAC {
        return Err(ReplError::Protocol {
            peer: peer.into(),
            detail: format!("expected a challenge, got {:?}", f.kind),
        });
    }
    let (sn, smac) = f.payload.split_at(NONCE);
    if !verify(secret, &[b"nvmedb-server", &cn, sn], smac) {
        let _ = write_frame(
            s,
            peer,
            epoch,
            FrameType::Refused,
            &refuse_payload(RefuseCode::Auth, "the server's proof does not match the client's secret"),
        );
        return Err(ReplError::AuthFailed {
            peer: peer.into(),
            detail: "the server's proof does not match our secret".into(),
        });
    }
    let tag = mac(secret, &[b"nvmedb-client", sn, &cn, &[role as u8], &epoch.to_le_bytes()]).into_bytes();
    let mut auth = tag.to_vec();
    auth.extend_from_slice(&arg.to_le_bytes());
    auth.extend_from_slice(extra);
    write_frame(s, peer, epoch, FrameType::Auth, &auth)?;
    let f = expect_frame(s, peer)?;
    match f.kind {
        FrameType::Welcome if f.payload.len() == 8 || f.payload.len() == 16 => Ok(Welcome {
            epoch: f.epoch,
            position: u64_at(&f.payload, 0),
            flags: f.payload.get(8..16).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
        }),
        FrameType::Refused => Err(refused_error(peer, &f, epoch)),
        k => Err(ReplError::Protocol { peer: peer.into(), detail: format!("expected a welcome, got {k:?}") }),
    }
}

/// What the server learned from a client that proved the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The client's role.
    pub role: Role,
    /// The client's epoch.
    pub epoch: u64,
    /// The value sent with the client's proof.
    pub arg: u64,
    /// Bytes sent after it (a primary's history).
    pub extra: Vec<u8>,
}

/// Server side of the handshake up to (not including) the welcome, which the caller sends
/// after deciding (epoch check, position). A client that does not know the secret gets a
/// `Refused(Auth)` frame and [`ReplError::AuthFailed`] is returned.
pub fn server_handshake<S: Read + Write>(
    s: &mut S,
    peer: &str,
    secret: &[u8],
    our_epoch: u64,
) -> Result<Hello, ReplError> {
    let f = expect_frame(s, peer)?;
    if f.kind != FrameType::Hello || f.payload.len() != 1 + NONCE {
        return Err(ReplError::Protocol {
            peer: peer.into(),
            detail: format!("expected a hello, got {:?}", f.kind),
        });
    }
    let role = match f.payload[0] {
        1 => Role::Log,
        2 => Role::Mirror,
        3 => Role::Admin,
        r => return Err(ReplError::Protocol { peer: peer.into(), detail: format!("unknown role {r}") }),
    };
    let cn = &f.payload[1..];
    let sn = nonce();
    let mut ch = sn.to_vec();
    ch.extend_from_slice(&mac(secret, &[b"nvmedb-server", cn, &sn]).into_bytes());
    write_frame(s, peer, our_epoch, FrameType::Challenge, &ch)?;
    let a = expect_frame(s, peer)?;
    if a.kind == FrameType::Refused {
        return Err(ReplError::AuthFailed {
            peer: peer.into(),
            detail: "the client refused our proof: the secrets differ".into(),
        });
    }
    if a.kind != FrameType::Auth || a.payload.len() < MAC + 8 {
        return Err(ReplError::Protocol {
            peer: peer.into(),
            detail: format!("expected auth, got {:?}", a.kind),
        });
    }
    if !verify(secret, &[b"nvmedb-client", &sn, cn, &[role as u8], &a.epoch.to_le_bytes()], &a.payload[..MAC])
    {
        let _ = write_frame(
            s,
            peer,
            our_epoch,
            FrameType::Refused,
            &refuse_payload(RefuseCode::Auth, "wrong replication secret"),
        );
        return Err(ReplError::AuthFailed {
            peer: peer.into(),
            detail: "the client's proof does not match our secret".into(),
        });
    }
    let arg = u64_at(&a.payload, MAC);
    Ok(Hello { role, epoch: a.epoch, arg, extra: a.payload[MAC + 8..].to_vec() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn frames_round_trip_and_corruption_is_detected() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 7, FrameType::Ack, &42u64.to_le_bytes());
        let f = read_frame(&mut &buf[..], "t").unwrap().unwrap();
        assert_eq!(f, Frame { epoch: 7, kind: FrameType::Ack, payload: 42u64.to_le_bytes().to_vec() });
        // Every single-bit flip after the length is caught by the checksum (or the length check).
        for byte in 0..buf.len() {
            let mut bad = buf.clone();
            bad[byte] ^= 0x10;
            let r = read_frame(&mut &bad[..], "t");
            assert!(
                matches!(r, Err(ReplError::Corrupt { .. }) | Err(ReplError::Disconnected { .. })),
                "flip in byte {byte} not rejected: {r:?}"
            );
        }
        assert!(read_frame(&mut &[][..], "t").unwrap().is_none());
    }

    #[test]
    fn a_frame_sealed_in_place_is_the_encoded_frame() {
        let payload: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let mut expected = Vec::new();
        encode_frame(&mut expected, 3, FrameType::Records, &payload);
        let mut buf = vec![0xAA; FRAME_HEADER_BYTES];
        buf.extend_from_slice(&payload);
        let mut sent = Vec::new();
        send_frame(&mut sent, "t", 3, FrameType::Records, &mut buf).unwrap();
        assert_eq!(sent, expected);
        let f = read_frame(&mut &sent[..], "t").unwrap().unwrap();
        assert_eq!((f.epoch, f.kind, f.payload), (3, FrameType::Records, payload));
        let mut bad = sent.clone();
        bad[FRAME_HEADER_BYTES + 60_000] ^= 1;
        assert!(matches!(read_frame(&mut &bad[..], "t"), Err(ReplError::Corrupt { .. })));
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn handshake_accepts_the_right_secret_and_refuses_a_wrong_one() {
        for (client_secret, ok) in [(&b"s3cret"[..], true), (&b"wrong"[..], false)] {
            let (mut c, mut s) = pair();
            let server = std::thread::spawn(move || {
                let h = server_handshake(&mut s, "client", b"s3cret", 5);
                if let Ok(h) = &h {
                    write_frame(&mut s, "client", 5, FrameType::Welcome, &h.arg.to_le_bytes()).unwrap();
                }
                h
            });
            let r = client_handshake(&mut c, "server", client_secret, Role::Log, 5, 99);
            let h = server.join().unwrap();
            if ok {
                assert_eq!(r.unwrap(), Welcome { epoch: 5, position: 99, flags: 0 });
                assert_eq!(h.unwrap(), Hello { role: Role::Log, epoch: 5, arg: 99, extra: Vec::new() });
            } else {
                assert!(matches!(r, Err(ReplError::AuthFailed { .. })), "{r:?}");
                assert!(matches!(h, Err(ReplError::AuthFailed { .. })), "{h:?}");
            }
        }
    }
}
