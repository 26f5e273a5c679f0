//! The one task that owns the socket.
//!
//! [`connect`] tries the servers of a connect string in order and performs the
//! handshake; [`Connection::run`] then owns the socket, the queue of requests
//! awaiting replies, the heartbeat timers and the connection's state, and is the
//! only code that touches them. Client handles reach it through a bounded
//! channel of [`Command`]s, each answered on its own oneshot.
//!
//! Invariants:
//! * Replies come back in request order, so `pending` is a FIFO and a reply must
//!   match its front; anything else is a protocol violation that ends the
//!   connection (every waiter gets [`Error::ConnectionLoss`]).
//! * `pending` holds at most `max_in_flight` caller requests (each carries a
//!   semaphore permit) plus one heartbeat plus one close.
//! * Unsent bytes stay under [`WRITE_BUFFER_HIGH_WATER_BYTES`] plus one frame:
//!   past it, no command is taken from the channel until the socket drains.
//! * Reads, writes, commands and timers are served by one `select!` loop whose
//!   write branch is cancel-safe (`write`, not `write_all`), so a slow socket
//!   never stops us from reading replies and events.
//! * When the loop ends, `Shared::end` is set before any waiter is answered,
//!   and every waiter and watcher is answered: nobody hangs.
//!
//! This version does not reconnect. A reconnect would replace the socket and
//! re-send `pending` inside [`Connection::run`]; the handles would not change.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::codec::{self, DECODE_INPUT_BYTES_MAX};
use arbor_protocol::frame::{encode_frame, FrameDecoder, FrameError, DEFAULT_FRAME_BYTES_MAX};
use arbor_protocol::{
    ClientMessage, ConnectRequest, ConnectResponse, ErrorCode, Op, OpResult, ServerMessage,
    WatcherKind, Zxid, PROTOCOL_VERSION,
};
use bytes::BytesMut;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tracing::{debug, warn, Instrument};

use crate::error::{Ended, Error};
use crate::options::ClientOptions;
use crate::session::Shared;
use crate::watch::WatcherKey;

/// Past this many unsent bytes the task stops taking commands until the socket
/// drains; it also caps how many commands are batched into one write.
pub const WRITE_BUFFER_HIGH_WATER_BYTES: usize = 256 * 1024;

/// How long a client whose every handle was dropped waits for the server to
/// answer its `CloseSession` before it just closes the socket.
pub const CLOSE_ON_DROP_TIMEOUT: Duration = Duration::from_secs(1);

/// A request from a client handle to the connection task.
pub(crate) struct Command {
    pub(crate) op: Op,
    pub(crate) effect: Effect,
    pub(crate) reply: oneshot::Sender<Result<Reply, Error>>,
    /// Holds an in-flight slot until the reply (or the end of the connection).
    pub(crate) permit: OwnedSemaphorePermit,
}

/// The server's answer to one command.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) result: Result<OpResult, ErrorCode>,
}

/// What the reply does to the local watch registry. Applied by the task while
/// handling the reply, so no later frame is routed against a stale registry.
#[derive(Debug)]
pub(crate) enum Effect {
    None,
    /// A watcher registered before sending; removed if the request fails.
    Provisional(WatcherKey),
    /// Mirror a successful server-side `RemoveWatches` locally.
    RemoveLocal {
        path: String,
        kind: WatcherKind,
    },
}

/// A socket that has completed the handshake.
pub(crate) struct Established {
    reader: FramedRead<OwnedReadHalf, FrameDecoder>,
    writer: OwnedWriteHalf,
    pub(crate) response: ConnectResponse,
    addr: String,
}

/// Why one address of the connect string did not give a session.
enum Attempt {
    Io(std::io::Error),
    Refused { code: ErrorCode, message: String },
    Protocol(String),
}

/// Connects to the first server of `connect_string` (comma-separated
/// `host:port`) that completes the handshake within `connect_timeout`.
///
/// A refused resume is [`Error::SessionExpired`] at once: the session is gone
/// on every server. Otherwise the last failure is returned.
pub(crate) async fn connect(
    connect_string: &str,
    options: &ClientOptions,
) -> Result<Established, Error> {
    let request = ConnectRequest {
        protocol_version: PROTOCOL_VERSION,
        last_zxid_seen: 0,
        session_timeout_ms: options.session_timeout_ms(),
        session: options.resume,
    };
    let addrs = connect_string
        .split(',')
        .map(str::trim)
        .filter(|addr| !addr.is_empty());
    let connect_error = |source: std::io::Error| Error::Connect {
        addrs: connect_string.to_owned(),
        source: Arc::new(source),
    };
    let mut last_error = connect_error(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "the connect string names no server",
    ));
    for addr in addrs {
        let attempt = tokio::time::timeout(options.connect_timeout, handshake(addr, &request));
        let failure = match attempt.await {
            Ok(Ok(established)) => return Ok(established),
            Ok(Err(failure)) => failure,
            Err(_elapsed) => Attempt::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timeout",
            )),
        };
        last_error = match failure {
            Attempt::Refused {
                code: ErrorCode::SessionExpired,
                message,
            } => {
                debug!(addr, message, "session resume refused");
                return Err(Error::SessionExpired);
            }
            Attempt::Refused { code, message } => {
                debug!(addr, ?code, message, "handshake refused");
                Error::from_code(code, "")
            }
            Attempt::Io(source) => {
                debug!(addr, error = %source, "cannot connect");
                connect_error(source)
            }
            Attempt::Protocol(message) => {
                warn!(addr, message, "handshake broke the protocol");
                Error::Protocol(message)
            }
        };
    }
    Err(last_error)
}

async fn handshake(addr: &str, request: &ConnectRequest) -> Result<Established, Attempt> {
    let stream = TcpStream::connect(addr).await.map_err(Attempt::Io)?;
    // Requests are small and latency-bound; batching is done by us, not Nagle.
    stream.set_nodelay(true).map_err(Attempt::Io)?;
    let (read_half, mut writer) = stream.into_split();
    let mut frame = Vec::new();
    let connect = ClientMessage::Connect(request.clone());
    encode_frame(&connect, DEFAULT_FRAME_BYTES_MAX, &mut frame)
        .map_err(|err| Attempt::Protocol(err.to_string()))?;
    writer.write_all(&frame).await.map_err(Attempt::Io)?;

    // The server's limit is not known yet; the handshake answer is tiny.
    let mut reader = FramedRead::new(read_half, FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX));
    let payload = match reader.next().await {
        Some(Ok(payload)) => payload,
        Some(Err(FrameError::Io(err))) => return Err(Attempt::Io(err)),
        Some(Err(err)) => return Err(Attempt::Protocol(err.to_string())),
        None => {
            return Err(Attempt::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "server closed the connection during the handshake",
            )))
        }
    };
    let response = match codec::decode::<ServerMessage>(&payload) {
        Ok(ServerMessage::Connected(response)) => response,
        Ok(ServerMessage::Closing { code, message }) => {
            return Err(Attempt::Refused { code, message })
        }
        Ok(other) => {
            return Err(Attempt::Protocol(format!(
                "expected Connected, got {}",
                message_name(&other)
            )))
        }
        Err(err) => return Err(Attempt::Protocol(err.to_string())),
    };
    check_response(&response, request).map_err(Attempt::Protocol)?;
    let frame_bytes_max = frame_limit(&response);
    *reader.decoder_mut() = FrameDecoder::new(frame_bytes_max);
    Ok(Established {
        reader,
        writer,
        response,
        addr: addr.to_owned(),
    })
}

fn check_response(response: &ConnectResponse, request: &ConnectRequest) -> Result<(), String> {
    if response.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "server speaks protocol {}, we speak {PROTOCOL_VERSION}",
            response.protocol_version
        ));
    }
    if response.session_id == 0 {
        return Err("server assigned session id 0".to_owned());
    }
    if let Some(resume) = request.session {
        if resume.id != response.session_id {
            return Err(format!(
                "asked to resume session {:#x}, got {:#x}",
                resume.id, response.session_id
            ));
        }
    }
    // A zero timeout would make every heartbeat deadline "now".
    if response.session_timeout_ms < 3 {
        return Err(format!(
            "negotiated session timeout of {} ms is unusable",
            response.session_timeout_ms
        ));
    }
    if response.limits.frame_bytes_max == 0 {
        return Err("server frame limit is 0".to_owned());
    }
    Ok(())
}

/// The frame limit both ways: the server's, capped by what our decoder takes.
fn frame_limit(response: &ConnectResponse) -> usize {
    usize::try_from(response.limits.frame_bytes_max)
        .unwrap_or(usize::MAX)
        .min(DECODE_INPUT_BYTES_MAX)
}

fn message_name(message: &ServerMessage) -> &'static str {
    match message {
        ServerMessage::Connected(_) => "Connected",
        ServerMessage::Reply { .. } => "Reply",
        ServerMessage::Event(_) => "Event",
        ServerMessage::Closing { .. } => "Closing",
    }
}

/// Who waits for a pending reply.
enum Waiter {
    Caller(oneshot::Sender<Result<Reply, Error>>),
    /// Our own ping; the reply only proves the server is alive.
    Heartbeat,
    /// The `CloseSession` sent because every handle was dropped.
    CloseOnDrop,
}

struct Pending {
    xid: u64,
    op_name: &'static str,
    is_close: bool,
    waiter: Waiter,
    effect: Effect,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Why the connection is being closed by us.
#[derive(Debug, Clone, Copy)]
enum Closing {
    /// `Client::close` sent `CloseSession`; its reply ends the connection.
    Requested,
    /// Every handle was dropped; we sent `CloseSession` and wait until `deadline`.
    Dropped { deadline: Instant },
}

/// How the loop ended: the client's state from now on, and the error for the
/// requests still in flight (whose outcome may be unknown).
#[derive(Debug, Clone, Copy)]
struct Exit {
    state: Ended,
    in_flight: Ended,
}

impl Exit {
    fn both(ended: Ended) -> Exit {
        Exit {
            state: ended,
            in_flight: ended,
        }
    }
}

enum Step {
    Frame(Option<Result<BytesMut, FrameError>>),
    Written(std::io::Result<usize>),
    Command(Option<Command>),
    Timer,
}

pub(crate) struct Connection {
    reader: FramedRead<OwnedReadHalf, FrameDecoder>,
    writer: OwnedWriteHalf,
    commands: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    pending: VecDeque<Pending>,
    /// `max_in_flight` caller requests, plus one heartbeat and one close.
    pending_max: usize,
    next_xid: u64,
    /// Encoded frames not yet written; `out[..out_sent]` is already on the wire.
    out: Vec<u8>,
    out_sent: usize,
    frame_bytes_max: usize,
    ping_interval: Duration,
    read_timeout: Duration,
    last_sent: Instant,
    last_received: Instant,
    heartbeat_outstanding: bool,
    closing: Option<Closing>,
}

impl Connection {
    /// Spawns the task for `established`. It runs until the connection ends.
    pub(crate) fn spawn(
        established: Established,
        commands: mpsc::Receiver<Command>,
        shared: Arc<Shared>,
        max_in_flight: usize,
    ) {
        let session = shared.session();
        let span = tracing::debug_span!(
            "arbor_connection",
            session_id = session.credentials.id,
            addr = %established.addr,
        );
        let now = Instant::now();
        let connection = Connection {
            frame_bytes_max: frame_limit(&established.response),
            reader: established.reader,
            writer: established.writer,
            commands,
            shared,
            pending: VecDeque::with_capacity(max_in_flight + 2),
            pending_max: max_in_flight + 2,
            next_xid: 1,
            out: Vec::new(),
            out_sent: 0,
            // ZooKeeper's read timeout is 2/3 of the session timeout, and it
            // pings after half of that without sending.
            ping_interval: session.timeout / 3,
            read_timeout: session.timeout * 2 / 3,
            last_sent: now,
            last_received: now,
            heartbeat_outstanding: false,
            closing: None,
        };
        debug!(parent: &span, timeout_ms = session.timeout.as_millis() as u64, "connected");
        tokio::spawn(connection.run().instrument(span));
    }

    async fn run(mut self) {
        let exit = loop {
            let step = self.next_step().await;
            if let Some(exit) = self.handle(step) {
                break exit;
            }
        };
        self.shut(exit);
    }

    async fn next_step(&mut self) -> Step {
        let deadline = self.deadline();
        let unsent = self.out.len() - self.out_sent;
        let accepting = self.closing.is_none() && unsent < WRITE_BUFFER_HIGH_WATER_BYTES;
        tokio::select! {
            frame = self.reader.next() => Step::Frame(frame),
            written = self.writer.write(&self.out[self.out_sent..]), if unsent > 0 => {
                Step::Written(written)
            }
            command = self.commands.recv(), if accepting => Step::Command(command),
            () = tokio::time::sleep_until(deadline) => Step::Timer,
        }
    }

    /// The next moment a timer needs attention.
    fn deadline(&self) -> Instant {
        let mut deadline = self.last_received + self.read_timeout;
        // A ping only helps once the write buffer is empty, and one at a time
        // is enough; without these checks a past deadline would spin the loop.
        let idle = self.out_sent == self.out.len();
        if idle && !self.heartbeat_outstanding && self.closing.is_none() {
            deadline = deadline.min(self.last_sent + self.ping_interval);
        }
        if let Some(Closing::Dropped { deadline: close_by }) = self.closing {
            deadline = deadline.min(close_by);
        }
        deadline
    }

    fn handle(&mut self, step: Step) -> Option<Exit> {
        match step {
            Step::Frame(Some(Ok(payload))) => {
                self.last_received = Instant::now();
                match codec::decode::<ServerMessage>(&payload) {
                    Ok(message) => self.on_message(message),
                    Err(err) => {
                        warn!(error = %err, "undecodable frame from server");
                        Some(self.lost())
                    }
                }
            }
            Step::Frame(Some(Err(err))) => {
                warn!(error = %err, "cannot read from server");
                Some(self.lost())
            }
            Step::Frame(None) => {
                debug!(pending = self.pending.len(), "server closed the connection");
                Some(self.lost())
            }
            Step::Written(Ok(0)) => {
                debug!("server stopped reading");
                Some(self.lost())
            }
            Step::Written(Ok(written)) => {
                self.on_written(written);
                None
            }
            Step::Written(Err(err)) => {
                debug!(error = %err, "cannot write to server");
                Some(self.lost())
            }
            Step::Command(Some(command)) => self.on_commands(command),
            Step::Command(None) => self.on_handles_dropped(),
            Step::Timer => self.on_timer(),
        }
    }

    /// The connection is gone: if we were closing, the client is closed; the
    /// outcome of requests in flight is unknown either way.
    fn lost(&self) -> Exit {
        let state = match self.closing {
            Some(_) => Ended::Closed,
            None => Ended::ConnectionLoss,
        };
        Exit {
            state,
            in_flight: Ended::ConnectionLoss,
        }
    }

    fn on_written(&mut self, written: usize) {
        self.out_sent += written;
        self.last_sent = Instant::now();
        if self.out_sent == self.out.len() {
            self.out.clear();
            self.out_sent = 0;
            // One large request must not pin its buffer for the connection's life.
            if self.out.capacity() > 2 * WRITE_BUFFER_HIGH_WATER_BYTES {
                self.out.shrink_to(WRITE_BUFFER_HIGH_WATER_BYTES);
            }
        }
    }

    /// Encodes `first` and then every command already queued, up to the write
    /// high-water mark, so they leave in one write.
    fn on_commands(&mut self, first: Command) -> Option<Exit> {
        self.enqueue(first);
        while self.closing.is_none()
            && self.out.len() - self.out_sent < WRITE_BUFFER_HIGH_WATER_BYTES
        {
            match self.commands.try_recv() {
                Ok(command) => self.enqueue(command),
                // Disconnected is seen by the next `recv` in the loop.
                Err(_) => break,
            }
        }
        None
    }

    fn enqueue(&mut self, command: Command) {
        let Command {
            op,
            effect,
            reply,
            permit,
        } = command;
        let xid = self.next_xid;
        let op_name = op.name();
        let is_close = matches!(op, Op::CloseSession);
        let message = ClientMessage::Request { xid, op };
        if let Err(err) = encode_frame(&message, self.frame_bytes_max, &mut self.out) {
            debug!(xid, op = op_name, error = %err, "request not sent");
            if let Effect::Provisional(key) = &effect {
                self.shared.watches.lock().remove(key);
            }
            let error = match err {
                FrameError::TooLarge { len, max } => Error::TooLarge {
                    bytes: Some(len),
                    max: Some(max),
                },
                other => Error::Protocol(format!("cannot encode request: {other}")),
            };
            let _ = reply.send(Err(error));
            return;
        }
        debug!(xid, op = op_name, "request");
        self.next_xid += 1;
        if is_close {
            self.closing = Some(Closing::Requested);
        }
        self.push_pending(Pending {
            xid,
            op_name,
            is_close,
            waiter: Waiter::Caller(reply),
            effect,
            _permit: Some(permit),
        });
    }

    /// Sends a request of our own (heartbeat, close on drop).
    fn send_internal(&mut self, op: Op, waiter: Waiter) -> Result<(), Exit> {
        let xid = self.next_xid;
        let op_name = op.name();
        let is_close = matches!(op, Op::CloseSession);
        let message = ClientMessage::Request { xid, op };
        if let Err(err) = encode_frame(&message, self.frame_bytes_max, &mut self.out) {
            warn!(xid, op = op_name, error = %err, "cannot encode an internal request");
            return Err(self.lost());
        }
        debug!(xid, op = op_name, "request");
        self.next_xid += 1;
        self.push_pending(Pending {
            xid,
            op_name,
            is_close,
            waiter,
            effect: Effect::None,
            _permit: None,
        });
        Ok(())
    }

    fn push_pending(&mut self, pending: Pending) {
        // The semaphore bounds caller requests; internal ones are one each.
        debug_assert!(self.pending.len() < self.pending_max);
        self.pending.push_back(pending);
    }

    /// Every handle is gone: close the session so its ephemerals go now, not
    /// after the session timeout.
    fn on_handles_dropped(&mut self) -> Option<Exit> {
        debug!("every client handle dropped; closing the session");
        if let Err(exit) = self.send_internal(Op::CloseSession, Waiter::CloseOnDrop) {
            return Some(exit);
        }
        self.closing = Some(Closing::Dropped {
            deadline: Instant::now() + CLOSE_ON_DROP_TIMEOUT,
        });
        None
    }

    fn on_timer(&mut self) -> Option<Exit> {
        let now = Instant::now();
        if let Some(Closing::Dropped { deadline }) = self.closing {
            if now >= deadline {
                debug!("no answer to CloseSession; closing the socket");
                return Some(Exit::both(Ended::Closed));
            }
        }
        if now >= self.last_received + self.read_timeout {
            debug!(
                silent_ms = (now - self.last_received).as_millis() as u64,
                "nothing received within the read timeout"
            );
            return Some(self.lost());
        }
        let idle = self.out_sent == self.out.len();
        if idle
            && !self.heartbeat_outstanding
            && self.closing.is_none()
            && now >= self.last_sent + self.ping_interval
        {
            if let Err(exit) = self.send_internal(Op::Ping, Waiter::Heartbeat) {
                return Some(exit);
            }
            self.heartbeat_outstanding = true;
        }
        None
    }

    fn on_message(&mut self, message: ServerMessage) -> Option<Exit> {
        match message {
            ServerMessage::Reply { xid, zxid, result } => self.on_reply(xid, zxid, result),
            ServerMessage::Event(event) => {
                self.shared.observe_zxid(event.zxid);
                let reached = self.shared.watches.lock().route(&event);
                debug!(
                    event_type = ?event.event_type,
                    path = event.path,
                    zxid = event.zxid,
                    reached,
                    "watch event"
                );
                None
            }
            ServerMessage::Closing { code, message } => {
                debug!(?code, message, "server is closing the connection");
                if code == ErrorCode::SessionExpired {
                    Some(Exit::both(Ended::SessionExpired))
                } else {
                    Some(self.lost())
                }
            }
            ServerMessage::Connected(_) => {
                warn!("second Connected on one connection");
                Some(self.lost())
            }
        }
    }

    fn on_reply(
        &mut self,
        xid: u64,
        zxid: Zxid,
        result: Result<OpResult, ErrorCode>,
    ) -> Option<Exit> {
        self.shared.observe_zxid(zxid);
        let expected = self.pending.front().map(|pending| pending.xid);
        if expected != Some(xid) {
            warn!(xid, ?expected, "reply does not match the oldest request");
            return Some(self.lost());
        }
        let Some(pending) = self.pending.pop_front() else {
            return Some(self.lost());
        };
        debug!(
            xid,
            zxid,
            op = pending.op_name,
            error = ?result.as_ref().err(),
            "reply"
        );
        self.apply_effect(&pending.effect, &result);
        let expired = result == Err(ErrorCode::SessionExpired);
        if pending.is_close || expired {
            // Set before the caller hears, so its next call already fails fast.
            self.shared.end(if expired {
                Ended::SessionExpired
            } else {
                Ended::Closed
            });
        }
        match pending.waiter {
            Waiter::Caller(reply) => {
                if reply.send(Ok(Reply { result })).is_err() {
                    // The caller gave up; its provisional watcher has no owner.
                    if let Effect::Provisional(key) = &pending.effect {
                        self.shared.watches.lock().remove(key);
                    }
                }
            }
            Waiter::Heartbeat => self.heartbeat_outstanding = false,
            Waiter::CloseOnDrop => {}
        }
        if expired {
            return Some(Exit::both(Ended::SessionExpired));
        }
        if pending.is_close {
            return Some(Exit::both(Ended::Closed));
        }
        None
    }

    fn apply_effect(&self, effect: &Effect, result: &Result<OpResult, ErrorCode>) {
        match (effect, result) {
            (Effect::Provisional(key), Err(_)) => {
                self.shared.watches.lock().remove(key);
            }
            // NoWatcher: the server holds none, so local ones could never fire.
            (Effect::RemoveLocal { path, kind }, Ok(_) | Err(ErrorCode::NoWatcher)) => {
                let removed = self.shared.watches.lock().remove_kind(path, *kind);
                debug!(path, ?kind, removed, "local watchers removed");
            }
            _ => {}
        }
    }

    /// Answers everyone: in-flight callers, watchers, queued commands.
    fn shut(mut self, exit: Exit) {
        debug!(
            state = ?exit.state,
            pending = self.pending.len(),
            watchers = self.shared.watches.lock().len(),
            "connection ended"
        );
        self.shared.end(exit.state);
        for pending in self.pending.drain(..) {
            if let Waiter::Caller(reply) = pending.waiter {
                let _ = reply.send(Err(exit.in_flight.error()));
            }
        }
        self.shared.watches.lock().end_all(exit.state);
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            let _ = command.reply.send(Err(exit.state.error()));
        }
    }
}
