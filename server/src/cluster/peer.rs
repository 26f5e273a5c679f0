//! The peer protocol: how members talk to each other over TCP.
//!
//! One framing for every message: a u32 big-endian length, then a bincode
//! body (openraft's messages are serde types, encoded through bincode's
//! serde layer, decoded with a memory limit like every other input). A
//! frame carries a request id, so requests on one connection are answered
//! as they complete, and many can be in flight; the order requests are
//! *handled* in is the order they were sent where it matters (forwarded
//! writes enter the leader's log in arrival order).
//!
//! Requests: raft's own three (append entries, vote, install a snapshot
//! chunk), plus Arbor's: a write forwarded by a follower to the leader (the
//! answer is the entry's log index and outcome; the follower waits for its
//! own apply of it before it answers its client), a read index for `sync`,
//! and the batch of sessions a member's clients kept alive this tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::SessionId;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracing::debug;

use super::peer_tls::PeerTls;
use super::records::MemberId;
use super::types::{Command, Outcome, TypeConfig};

/// The largest peer frame: a batch of at most `RAFT_PAYLOAD_ENTRIES_MAX`
/// entries of at most a client frame each, or a snapshot chunk.
pub const PEER_FRAME_BYTES_MAX: usize = 96 * 1024 * 1024;
/// Entries in one append: bounds a frame (each entry is at most one client
/// frame, 1 MiB by default).
pub const RAFT_PAYLOAD_ENTRIES_MAX: u64 = 64;
/// Requests waiting for a connection to a peer, and in flight on it.
pub const PEER_REQUESTS_IN_FLIGHT_MAX: usize = 4096;
/// How long a connection attempt to a peer may take.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A decode may claim at most this much memory.
const PEER_DECODE_MEMORY_MAX: usize = 4 * PEER_FRAME_BYTES_MAX;

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<MemberId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Forward(Command),
    ReadIndex,
    Touch(Vec<SessionId>),
    /// Add (with its client and peer addresses) or remove a member.
    ChangeMember {
        id: MemberId,
        addrs: Option<(String, String)>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum PeerReply {
    Append(Result<AppendEntriesResponse<MemberId>, RaftError<MemberId>>),
    Vote(Result<VoteResponse<MemberId>, RaftError<MemberId>>),
    Snapshot(Result<InstallSnapshotResponse<MemberId>, RaftError<MemberId, InstallSnapshotError>>),
    /// The forwarded write's log index and outcome, or why it was not
    /// written (`NotLeader`: certainly not; anything else: unknown).
    Forwarded(Result<(u64, Outcome), ForwardRefused>),
    ReadIndex(Result<u64, ForwardRefused>),
    /// The leader took the touches.
    Touched,
    MemberChanged(Result<(), ForwardRefused>),
    /// Touches sent to a member that does not lead: they count for nothing.
    NotLeading,
}

/// Why the leader did not take a forwarded write or give a read index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ForwardRefused {
    /// This member does not lead (any more): the write was not made.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<MemberId> },
    /// The write may or may not have been made.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The leader refused the request as it stands (a membership change
    /// that cannot be made).
    #[error("refused: {0}")]
    Rejected(String),
}

#[derive(Debug, Serialize, Deserialize)]
struct Frame<T> {
    id: u64,
    body: T,
}

/// Why a request to a peer got no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("cannot reach member at {addr}: {reason}")]
    Unreachable { addr: String, reason: String },
    #[error("the connection to {addr} failed: {reason}")]
    Connection { addr: String, reason: String },
    #[error("too many requests to {addr} in flight")]
    Busy { addr: String },
}

const BINCODE: bincode::config::Configuration = bincode::config::standard();

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Bytes, String> {
    bincode::serde::encode_to_vec(value, BINCODE)
        .map(Bytes::from)
        .map_err(|err| err.to_string())
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, BINCODE.with_limit::<PEER_DECODE_MEMORY_MAX>())
            .map_err(|err| err.to_string())?;
    if used != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - used));
    }
    Ok(value)
}

pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(PEER_FRAME_BYTES_MAX)
        .new_codec()
}

type Waiter = oneshot::Sender<Result<PeerReply, PeerError>>;

/// A request on its way out, with who waits for its answer and, if asked,
/// who waits to learn it was written to the connection.
struct Outgoing {
    request: PeerRequest,
    answer: Waiter,
    sent: Option<oneshot::Sender<Result<(), PeerError>>>,
}

/// A peer connection's bytes: TCP, or TLS over it (boxed: a vtable call
/// per poll is nothing next to a raft message).
pub trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerStream for T {}

/// A connection to one peer, opened on first use and again after a failure;
/// requests on it are pipelined.
#[derive(Clone)]
pub struct PeerClient {
    addr: String,
    queue: mpsc::Sender<Outgoing>,
    /// Tells the connection task to drop its connection (see
    /// [`PeerClient::reset`]).
    reset: Arc<tokio::sync::Notify>,
}

/// Whom a [`PeerClient`] connects to, and how.
struct Target {
    id: MemberId,
    addr: String,
    tls: Option<Arc<PeerTls>>,
}

impl PeerClient {
    /// A client for member `id` at `addr`, over peer TLS if `tls` is set
    /// (the member's certificate must then name it); its connection task
    /// runs until every clone is dropped.
    pub fn new(id: MemberId, addr: String, tls: Option<Arc<PeerTls>>) -> Self {
        let (queue, requests) = mpsc::channel(PEER_REQUESTS_IN_FLIGHT_MAX);
        let target = Target {
            id,
            addr: addr.clone(),
            tls,
        };
        let reset = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(run_client(target, requests, reset.clone()));
        Self { addr, queue, reset }
    }

    /// Drops the connection, failing what waits on it: for a peer that
    /// stopped answering (a partition stalls a TCP connection for as long
    /// as it lasts, and what sits in it would arrive late). The connection
    /// is reset, not closed: bytes not yet delivered are thrown away. The
    /// next request opens a new one.
    pub fn reset(&self) {
        self.reset.notify_one();
    }

    /// Sends `request` and waits for its answer.
    pub async fn call(&self, request: PeerRequest) -> Result<PeerReply, PeerError> {
        self.send(request)?.await
    }

    /// Queues `request` now, so requests go out in the order of these
    /// calls; the returned future is its answer.
    pub fn send(
        &self,
        request: PeerRequest,
    ) -> Result<impl std::future::Future<Output = Result<PeerReply, PeerError>>, PeerError> {
        self.enqueue(request, None)
    }

    /// Like [`Self::send`], and also says once the request is written to
    /// the connection, or could not be: `Unreachable` means it never left,
    /// so sending it again cannot make it happen twice.
    #[allow(clippy::type_complexity)]
    pub fn send_tracked(
        &self,
        request: PeerRequest,
    ) -> Result<
        (
            impl std::future::Future<Output = Result<(), PeerError>>,
            impl std::future::Future<Output = Result<PeerReply, PeerError>>,
        ),
        PeerError,
    > {
        let (sent, written) = oneshot::channel();
        let answer = self.enqueue(request, Some(sent))?;
        let addr = self.addr.clone();
        let written = async move {
            written.await.map_err(|_| PeerError::Connection {
                addr,
                reason: "the connection task stopped".into(),
            })?
        };
        Ok((written, answer))
    }

    fn enqueue(
        &self,
        request: PeerRequest,
        sent: Option<oneshot::Sender<Result<(), PeerError>>>,
    ) -> Result<impl std::future::Future<Output = Result<PeerReply, PeerError>>, PeerError> {
        let (waiter, answer) = oneshot::channel();
        self.queue
            .try_send(Outgoing {
                request,
                answer: waiter,
                sent,
            })
            .map_err(|_| PeerError::Busy {
                addr: self.addr.clone(),
            })?;
        let addr = self.addr.clone();
        Ok(async move {
            answer.await.map_err(|_| PeerError::Connection {
                addr,
                reason: "the connection task stopped".into(),
            })?
        })
    }
}

/// Opens a connection to `target`: TCP, then TLS if it is configured.
async fn open(target: &Target) -> std::io::Result<Box<dyn PeerStream>> {
    let stream = tokio::time::timeout(PEER_CONNECT_TIMEOUT, TcpStream::connect(&target.addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = stream.set_nodelay(true);
    // Dropped, a connection is reset: nothing queued in it is sent later.
    let _ = stream.set_zero_linger();
    crate::net::idle_spin::watch(&stream);
    Ok(match &target.tls {
        Some(tls) => Box::new(tls.connect(stream, target.id).await?),
        None => Box::new(stream),
    })
}

async fn run_client(
    target: Target,
    mut requests: mpsc::Receiver<Outgoing>,
    reset: Arc<tokio::sync::Notify>,
) {
    let addr = target.addr.clone();
    let mut next_id = 0u64;
    while let Some(first) = requests.recv().await {
        let stream = match open(&target).await {
            Ok(stream) => stream,
            Err(err) => {
                let reason = err.to_string();
                let unreachable = PeerError::Unreachable {
                    addr: addr.clone(),
                    reason,
                };
                if let Some(sent) = first.sent {
                    let _ = sent.send(Err(unreachable.clone()));
                }
                let _ = first.answer.send(Err(unreachable));
                continue;
            }
        };
        let mut framed = Framed::new(stream, codec());
        let waiting: Arc<Mutex<HashMap<u64, Waiter>>> = Arc::default();
        let mut pending = Some(first);
        let failure = loop {
            let Outgoing {
                request,
                answer: waiter,
                sent,
            } = match pending.take() {
                Some(item) => item,
                None => tokio::select! {
                    item = requests.recv() => match item {
                        Some(item) => item,
                        None => return,
                    },
                    frame = framed.next() => match answer(&waiting, frame) {
                        Ok(()) => continue,
                        Err(reason) => break reason,
                    },
                    () = reset.notified() => break "reset: the peer stopped answering".to_owned(),
                },
            };
            next_id += 1;
            let bytes = match encode(&Frame {
                id: next_id,
                body: request,
            }) {
                Ok(bytes) => bytes,
                Err(reason) => {
                    let failed = PeerError::Connection {
                        addr: addr.clone(),
                        reason: format!("cannot encode the request: {reason}"),
                    };
                    if let Some(sent) = sent {
                        let _ = sent.send(Err(failed.clone()));
                    }
                    let _ = waiter.send(Err(failed));
                    continue;
                }
            };
            waiting.lock().insert(next_id, waiter);
            // A send that waits for room (the peer reads nothing) ends
            // on a reset too.
            let written = tokio::select! {
                written = framed.send(bytes) => written,
                () = reset.notified() => Err(std::io::Error::other("reset: the peer stopped reading")),
            };
            if let Some(sent) = sent {
                let _ =
                    sent.send(
                        written
                            .as_ref()
                            .map(|_| ())
                            .map_err(|err| PeerError::Connection {
                                addr: addr.clone(),
                                reason: err.to_string(),
                            }),
                    );
            }
            if let Err(err) = written {
                break err.to_string();
            }
        };
        debug!(%addr, reason = %failure, "peer connection lost");
        for (_, waiter) in waiting.lock().drain() {
            let _ = waiter.send(Err(PeerError::Connection {
                addr: addr.clone(),
                reason: failure.clone(),
            }));
        }
    }
}

/// Hands an answer to its waiter; an error ends the connection.
fn answer(
    waiting: &Mutex<HashMap<u64, Waiter>>,
    frame: Option<Result<bytes::BytesMut, std::io::Error>>,
) -> Result<(), String> {
    let bytes = match frame {
        None => return Err("closed by the peer".into()),
        Some(Err(err)) => return Err(err.to_string()),
        Some(Ok(bytes)) => bytes,
    };
    let frame: Frame<PeerReply> = decode(&bytes)?;
    if let Some(waiter) = waiting.lock().remove(&frame.id) {
        let _ = waiter.send(Ok(frame.body));
    }
    Ok(())
}
