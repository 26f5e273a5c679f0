//! The one task that owns the socket, and keeps the session connected.
//!
//! [`connect`] tries the servers of a connect string in a shuffled order and
//! performs the handshake; [`Connection::run`] then owns the socket, the queue
//! of requests awaiting replies, the heartbeat timers and the connection's
//! state, and is the only code that touches them. Client handles reach it
//! through a bounded channel of [`Command`]s, each answered on its own oneshot.
//!
//! When the connection is lost, the task fails every request in flight with
//! [`Error::ConnectionLoss`] (their outcome is unknown; nothing is ever
//! re-sent), moves to `Suspended`, and resumes the session with its id,
//! password and last zxid: every server in a fresh shuffled order, then a
//! pause ([`RECONNECT_BACKOFF_MIN`] doubling to [`RECONNECT_BACKOFF_MAX`]),
//! until the session timeout has passed since it last heard from a server
//! (then `Expired`) or a server refuses the resume as expired. Commands that
//! arrive meanwhile fail fast with `ConnectionLoss`; a close ends the client
//! at once. On a resume the first frames on the new connection are
//! [`Op::SetWatches`] batches re-registering every local watcher.
//!
//! Invariants:
//! * Replies come back in request order, so `pending` is a FIFO and a reply must
//!   match its front; anything else is a protocol violation that ends the
//!   connection (and so starts a reconnect).
//! * `pending` holds at most `max_in_flight` caller requests (each carries a
//!   semaphore permit) plus one heartbeat plus one close, plus the SetWatches
//!   batches of the current resume (at most one per watched path, so bounded
//!   by [`WATCHERS_MAX`](crate::WATCHERS_MAX)).
//! * Unsent bytes stay under [`WRITE_BUFFER_HIGH_WATER_BYTES`] plus one frame:
//!   past it, commands wait in `held`, unencoded, until the socket drains.
//!   (Right after a resume the SetWatches batches may exceed it; no command is
//!   encoded until they drain.)
//! * Reads, writes, commands and timers are served by one `select!` loop whose
//!   write branch is cancel-safe (`write`, not `write_all`), so a slow socket
//!   never stops us from reading replies and events.
//! * After taking a command the task yields once before it writes: callers
//!   woken by the replies it just read are runnable then, and their
//!   requests join the same write. It waits for no timer, only for tasks
//!   already runnable on the runtime, once.
//! * A state change is published before any waiter hears of it, and when the
//!   task ends every waiter and watcher is answered: nobody hangs.
//! * Request deadlines are the task's, so a call costs no timer of its own:
//!   every [`Command`] carries its deadline (call + request timeout), and the
//!   task fails those past it with [`Error::Timeout`], looking once per
//!   [`DEADLINE_TICK`] and only while any are waiting. A request already sent
//!   keeps its pending slot (and its in-flight permit) until its reply
//!   arrives and is discarded, so the FIFO matching never breaks; one still
//!   `held` is dropped unsent. A caller that gives up earlier drops its
//!   oneshot, with the same effect on its slot.
//! * `deadlines` lists the sent requests still waiting for their caller's
//!   answer in send order, which is deadline order up to scheduling jitter
//!   (every call of a client has the same timeout, and in-flight slots are
//!   handed out first come, first served), so a tick looks only at its
//!   front: O(expired) per tick. A request whose deadline is earlier than
//!   that of one sent before it waits for that one; it is never failed early.
//! * `held` holds commands taken from the channel that may not be sent yet
//!   (write buffer full, or a close in flight), so their deadlines are seen;
//!   it and `pending` hold at most `max_in_flight` caller requests together,
//!   one permit each.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::codec::{self, DECODE_INPUT_BYTES_MAX};
use arbor_protocol::frame::{encode_frame, FrameDecoder, FrameError, DEFAULT_FRAME_BYTES_MAX};
use arbor_protocol::{
    ClientMessage, ConnectRequest, ConnectResponse, ErrorCode, Op, OpResult, ServerMessage,
    SetWatches, WatcherKind, Zxid, PROTOCOL_VERSION,
};
use bytes::BytesMut;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit};
use tokio::time::{Instant, Sleep};
use tokio_util::codec::FramedRead;
use tracing::{debug, info, warn, Instrument};

use crate::error::{Ended, Error};
use crate::options::{AuthInfo, ClientOptions};
use crate::resume::{
    set_watches_batches, set_watches_budget, set_watches_op, RECONNECT_BACKOFF_MAX,
    RECONNECT_BACKOFF_MIN,
};
use crate::servers::ServerList;
use crate::session::{SessionInfo, Shared};
use crate::state::ConnectionState;
use crate::transport::{self, ReadHalf, WriteHalf};
use crate::watch::WatcherKey;

/// Past this many unsent bytes the task stops taking commands until the socket
/// drains; it also caps how many commands are batched into one write.
pub const WRITE_BUFFER_HIGH_WATER_BYTES: usize = 256 * 1024;

/// How long a client whose every handle was dropped waits for the server to
/// answer its `CloseSession` before it just closes the socket.
pub const CLOSE_ON_DROP_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the connection task looks for requests past their deadline,
/// while any are waiting: a call fails with [`Error::Timeout`] at most this
/// long after its request timeout (plus scheduling delay). Deadlines are
/// rounded up to a multiple of it, so all requests due within one tick are
/// failed by one wake-up.
pub const DEADLINE_TICK: Duration = Duration::from_millis(10);

/// Stands in for a deadline too far away to represent (a request timeout of
/// `Duration::MAX` means none): about 30 years, as tokio's own timers do.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The deadline of a call that starts now and may take `timeout`.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or_else(|| now + FAR_FUTURE)
}

/// A request from a client handle to the connection task.
pub(crate) struct Command {
    pub(crate) op: Op,
    pub(crate) effect: Effect,
    pub(crate) reply: oneshot::Sender<Result<Reply, Error>>,
    /// Holds an in-flight slot until the reply (or the end of the connection).
    pub(crate) permit: OwnedSemaphorePermit,
    /// When the caller is answered [`Error::Timeout`] if no reply came.
    pub(crate) deadline: Instant,
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
    reader: FramedRead<ReadHalf, FrameDecoder>,
    writer: WriteHalf,
    pub(crate) response: ConnectResponse,
    addr: String,
}

impl Established {
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }
}

/// Why one address of the connect string did not give a session.
enum Attempt {
    Io(std::io::Error),
    Refused { code: ErrorCode, message: String },
    Protocol(String),
}

/// Connects to the first server of `servers` (tried in a shuffled order) that
/// completes the handshake within `connect_timeout`.
///
/// A refused resume is [`Error::SessionExpired`] at once: the session is gone
/// on every server. Otherwise the last failure is returned.
pub(crate) async fn connect(
    servers: &ServerList,
    connect_string: &str,
    options: &ClientOptions,
) -> Result<Established, Error> {
    let request = ConnectRequest {
        protocol_version: PROTOCOL_VERSION,
        last_zxid_seen: 0,
        session_timeout_ms: options.session_timeout_ms(),
        session: options.resume,
    };
    let connect_error = |source: std::io::Error| Error::Connect {
        addrs: connect_string.to_owned(),
        source: Arc::new(source),
    };
    let mut last_error = connect_error(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "the connect string names no server",
    ));
    for addr in servers.shuffled() {
        let addr = addr.as_str();
        let attempt =
            tokio::time::timeout(options.connect_timeout, handshake(addr, &request, options));
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
            // Every server checks credentials alike.
            Attempt::Refused {
                code: ErrorCode::AuthFailed,
                message,
            } => {
                debug!(addr, message, "credentials refused");
                return Err(Error::AuthFailed);
            }
            // The server is up and says why it will not serve us (its
            // connection limits): that, not "unreachable", is the answer
            // if no other server takes us.
            Attempt::Refused {
                code: ErrorCode::LimitExceeded,
                message,
            } => {
                debug!(addr, message, "connection refused");
                Error::Refused {
                    addr: addr.to_owned(),
                    code: ErrorCode::LimitExceeded,
                    message,
                }
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

/// The xid of the auth requests a handshake sends: the session's own
/// requests start at 1.
const AUTH_XID: u64 = 0;

async fn handshake(
    addr: &str,
    request: &ConnectRequest,
    options: &ClientOptions,
) -> Result<Established, Attempt> {
    let (read_half, mut writer) = transport::connect(addr, options.tls.as_ref())
        .await
        .map_err(Attempt::Io)?;
    let mut frame = Vec::new();
    let connect = ClientMessage::Connect(request.clone());
    encode_frame(&connect, DEFAULT_FRAME_BYTES_MAX, &mut frame)
        .map_err(|err| Attempt::Protocol(err.to_string()))?;
    write_now(&mut writer, &frame).await?;

    // The server's limit is not known yet; the handshake answer is tiny.
    let mut reader = FramedRead::new(read_half, FrameDecoder::new(DEFAULT_FRAME_BYTES_MAX));
    let payload = next_frame(&mut reader, "the handshake").await?;
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
    prove(&mut reader, &mut writer, &options.auth, frame_bytes_max).await?;
    Ok(Established {
        reader,
        writer,
        response,
        addr: addr.to_owned(),
    })
}

/// Writes a message of the connection's setup and sends it (TLS holds
/// records back until flushed).
async fn write_now(writer: &mut WriteHalf, frame: &[u8]) -> Result<(), Attempt> {
    writer.write_all(frame).await.map_err(Attempt::Io)?;
    writer.flush().await.map_err(Attempt::Io)
}

/// The next frame of a connection being set up; `during` names the step
/// for the error if the server closes it.
async fn next_frame(
    reader: &mut FramedRead<ReadHalf, FrameDecoder>,
    during: &str,
) -> Result<BytesMut, Attempt> {
    match reader.next().await {
        Some(Ok(payload)) => Ok(payload),
        Some(Err(FrameError::Io(err))) => Err(Attempt::Io(err)),
        Some(Err(err)) => Err(Attempt::Protocol(err.to_string())),
        None => Err(Attempt::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("server closed the connection during {during}"),
        ))),
    }
}

/// Proves each of `auth` on a new connection, before anything else is sent
/// on it: the session's requests then run with every id proved.
async fn prove(
    reader: &mut FramedRead<ReadHalf, FrameDecoder>,
    writer: &mut WriteHalf,
    auth: &[AuthInfo],
    frame_bytes_max: usize,
) -> Result<(), Attempt> {
    for info in auth {
        let request = ClientMessage::Request {
            xid: AUTH_XID,
            op: Op::Auth {
                scheme: info.scheme.clone(),
                credentials: info.credentials.clone(),
            },
        };
        let mut frame = Vec::new();
        encode_frame(&request, frame_bytes_max, &mut frame)
            .map_err(|err| Attempt::Protocol(err.to_string()))?;
        write_now(writer, &frame).await?;
        let payload = next_frame(reader, "authentication").await?;
        match codec::decode::<ServerMessage>(&payload) {
            Ok(ServerMessage::Reply {
                xid: AUTH_XID,
                result: Ok(OpResult::Authenticated),
                ..
            }) => {}
            Ok(ServerMessage::Reply {
                xid: AUTH_XID,
                result: Err(code),
                ..
            }) => {
                return Err(Attempt::Refused {
                    code,
                    message: format!("{} credentials refused", info.scheme),
                })
            }
            Ok(ServerMessage::Closing { code, message }) => {
                return Err(Attempt::Refused { code, message })
            }
            Ok(other) => {
                return Err(Attempt::Protocol(format!(
                    "expected the answer to an auth request, got {}",
                    message_name(&other)
                )))
            }
            Err(err) => return Err(Attempt::Protocol(err.to_string())),
        }
    }
    Ok(())
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
    /// A caller already answered [`Error::Timeout`]; the reply is dropped.
    TimedOut,
    /// Our own ping; the reply only proves the server is alive.
    Heartbeat,
    /// A ping answered already (`heartbeat`: ours): a server answers pings
    /// at once, ahead of replies it still owes, so a write held up in the
    /// server never makes a live connection look dead. Its place is
    /// dropped when it reaches the front.
    Answered {
        heartbeat: bool,
    },
    /// The `CloseSession` sent because every handle was dropped.
    CloseOnDrop,
    /// One batch of watches registered again after a resume; kept to end its
    /// watchers if the server refuses it.
    SetWatches(SetWatches),
}

struct Pending {
    xid: u64,
    op_name: &'static str,
    is_close: bool,
    waiter: Waiter,
    effect: Effect,
    _permit: Option<OwnedSemaphorePermit>,
}

/// When a sent caller request must be answered, if its reply has not come.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    xid: u64,
    at: Instant,
}

/// Why the connection is being closed by us.
#[derive(Debug, Clone, Copy)]
enum Closing {
    /// `Client::close` sent `CloseSession`; its reply ends the connection.
    Requested,
    /// Every handle was dropped; we sent `CloseSession` and wait until `deadline`.
    Dropped { deadline: Instant },
}

/// How one connection's loop ended.
#[derive(Debug)]
enum Exit {
    /// The connection is gone but the session may live on: resume it.
    Lost,
    /// The client is done: `state` from now on, and the error for the
    /// requests still in flight (whose outcome may be unknown).
    End { state: Ended, in_flight: Error },
}

impl Exit {
    fn both(ended: Ended) -> Exit {
        Exit::End {
            state: ended,
            in_flight: ended.error(),
        }
    }
}

enum Step {
    Frame(Option<Result<BytesMut, FrameError>>),
    Written(std::io::Result<usize>),
    Flushed(std::io::Result<()>),
    Command(Option<Command>),
    Timer,
}

/// The socket of the current connection.
struct Socket {
    reader: FramedRead<ReadHalf, FrameDecoder>,
    writer: WriteHalf,
}

pub(crate) struct Connection {
    commands: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    servers: ServerList,
    options: ClientOptions,
    pending: VecDeque<Pending>,
    /// `max_in_flight` caller requests, plus one heartbeat and one close.
    pending_max: usize,
    /// The deadlines of the `Waiter::Caller`s in `pending`, in send order.
    deadlines: VecDeque<Deadline>,
    /// Commands taken from the channel but not sent yet (write buffer full,
    /// or closing), oldest first. With `pending`, at most `max_in_flight`.
    held: VecDeque<Command>,
    /// False once every handle is gone and the channel said so.
    receiving: bool,
    /// A command was encoded since the last write: let the callers that are
    /// already runnable add theirs before writing (see `next_step`).
    gather: bool,
    /// The one timer of the task, for every deadline; see `arm_timer`.
    timer: Pin<Box<Sleep>>,
    /// Where `timer` is set; `None` once it fired.
    timer_at: Option<Instant>,
    /// Request deadlines are rounded up to a multiple of `DEADLINE_TICK`
    /// counted from here.
    epoch: Instant,
    /// SetWatches batches awaiting their reply (on top of `pending_max`).
    set_watches_outstanding: usize,
    /// Never reset, not even by a resume: xids only grow within a session.
    next_xid: u64,
    /// Encoded frames not yet written; `out[..out_sent]` is already on the wire.
    out: Vec<u8>,
    out_sent: usize,
    frame_bytes_max: usize,
    ping_interval: Duration,
    read_timeout: Duration,
    last_sent: Instant,
    /// The last time we heard from a server; the session expires a session
    /// timeout after it unless resumed.
    last_received: Instant,
    heartbeat_outstanding: bool,
    closing: Option<Closing>,
    /// The server whose connection was just lost, tried last on reconnect.
    lost_server: Option<String>,
}

impl Connection {
    /// Spawns the task for `established`. It runs until the client ends.
    pub(crate) fn spawn(
        established: Established,
        commands: mpsc::Receiver<Command>,
        shared: Arc<Shared>,
        servers: ServerList,
        options: ClientOptions,
    ) {
        let session = shared.session();
        let span = tracing::debug_span!("arbor_connection", session_id = session.credentials.id);
        let now = Instant::now();
        let max_in_flight = options.max_in_flight;
        let mut connection = Connection {
            frame_bytes_max: frame_limit(&established.response),
            commands,
            shared,
            servers,
            options,
            pending: VecDeque::with_capacity(max_in_flight + 2),
            pending_max: max_in_flight + 2,
            // Grown on demand: most clients never have many requests out.
            deadlines: VecDeque::new(),
            held: VecDeque::new(),
            receiving: true,
            gather: false,
            timer: Box::pin(tokio::time::sleep_until(now)),
            timer_at: None,
            epoch: now,
            set_watches_outstanding: 0,
            next_xid: 1,
            out: Vec::new(),
            out_sent: 0,
            ping_interval: Duration::ZERO,
            read_timeout: Duration::ZERO,
            last_sent: now,
            last_received: now,
            heartbeat_outstanding: false,
            closing: None,
            lost_server: None,
        };
        connection.set_timers(session.timeout);
        debug!(
            parent: &span,
            addr = %established.addr,
            timeout_ms = session.timeout.as_millis() as u64,
            "connected"
        );
        tokio::spawn(connection.run(established).instrument(span));
    }

    /// ZooKeeper's read timeout is 2/3 of the session timeout, and it pings
    /// after half of that without sending.
    fn set_timers(&mut self, session_timeout: Duration) {
        self.ping_interval = session_timeout / 3;
        self.read_timeout = session_timeout * 2 / 3;
    }

    async fn run(mut self, established: Established) {
        let mut socket = Socket {
            reader: established.reader,
            writer: established.writer,
        };
        let (state, in_flight) = loop {
            if let Exit::End { state, in_flight } = self.serve(&mut socket).await {
                break (state, in_flight);
            }
            // Close the old socket now: a server still holding it would
            // otherwise see two connections of one session for a while.
            drop(socket);
            self.suspend();
            match self.reconnect().await {
                Ok(established) => socket = self.resume(established),
                Err(ended) => break (ended, ended.error()),
            }
        };
        self.shut(state, in_flight);
    }

    /// Serves one connection until it ends.
    async fn serve(&mut self, socket: &mut Socket) -> Exit {
        loop {
            let step = self.next_step(socket).await;
            if let Some(exit) = self.handle(step) {
                return exit;
            }
        }
    }

    async fn next_step(&mut self, socket: &mut Socket) -> Step {
        if std::mem::take(&mut self.gather) {
            // Callers woken by the replies just read are runnable now; one
            // yield lets them queue their next requests, so they leave in
            // one write instead of one each. With nothing else runnable the
            // yield returns at once: no delay is added. It also pays off
            // for a lone caller: measured on two cores, one get in flight
            // took 29-30 us at the median with it and 82-86 us without.
            tokio::task::yield_now().await;
            self.send_held();
        }
        self.arm_timer();
        let unsent = self.out.len() - self.out_sent;
        // Only TLS ever owes a flush; a plain socket's writes are sent.
        let flush_owed = socket.writer.needs_flush();
        let (reader, writer) = (&mut socket.reader, &mut socket.writer);
        let out = &self.out[self.out_sent..];
        tokio::select! {
            frame = reader.next() => Step::Frame(frame),
            step = async {
                if unsent > 0 {
                    Step::Written(writer.write(out).await)
                } else {
                    Step::Flushed(writer.flush().await)
                }
            }, if unsent > 0 || flush_owed => step,
            // Taken even when they cannot be sent, into `held`, so their
            // deadlines are seen.
            command = self.commands.recv(), if self.receiving => Step::Command(command),
            () = &mut self.timer => Step::Timer,
        }
    }

    /// Whether commands may be encoded now.
    fn accepting(&self) -> bool {
        self.closing.is_none() && self.out.len() - self.out_sent < WRITE_BUFFER_HIGH_WATER_BYTES
    }

    /// Sets the timer to the next deadline, lazily: only when a deadline
    /// came closer than the armed one, or it fired. Deadlines that move
    /// later (every frame moves the read deadline) leave it early; it then
    /// fires, `on_timer` finds nothing due, and it is set again. So the
    /// timer wheel is touched about once per deadline, not once per loop.
    fn arm_timer(&mut self) {
        let deadline = self.deadline();
        if self.timer_at.is_none_or(|armed| deadline < armed) {
            self.timer.as_mut().reset(deadline);
            self.timer_at = Some(deadline);
        }
    }

    /// `at` rounded up to the next multiple of [`DEADLINE_TICK`] since the
    /// task started, so the requests due within one tick share one wake-up
    /// (as ZooKeeper's ExpiryQueue buckets session deadlines).
    fn tick_after(&self, at: Instant) -> Instant {
        let tick_nanos = DEADLINE_TICK.as_nanos();
        let since_nanos = at.saturating_duration_since(self.epoch).as_nanos();
        let rounded_nanos = since_nanos.div_ceil(tick_nanos) * tick_nanos;
        u64::try_from(rounded_nanos)
            .ok()
            .and_then(|nanos| self.epoch.checked_add(Duration::from_nanos(nanos)))
            .unwrap_or(at)
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
        // Only the oldest of each queue: the others are due no earlier (see
        // the module invariants). Nothing here while no request waits, so an
        // idle client does not wake every tick.
        let sent_due = self.deadlines.front().map(|front| front.at);
        let held_due = self.held.front().map(|command| command.deadline);
        match sent_due.into_iter().chain(held_due).min() {
            // Rounding only delays, so it matters only if it is the earliest.
            Some(due) if due < deadline => self.tick_after(due).min(deadline),
            _ => deadline,
        }
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
            Step::Written(Err(err)) | Step::Flushed(Err(err)) => {
                debug!(error = %err, "cannot write to server");
                Some(self.lost())
            }
            Step::Flushed(Ok(())) => None,
            Step::Command(Some(command)) => {
                self.on_command(command);
                None
            }
            Step::Command(None) => {
                self.receiving = false;
                match self.closing {
                    // A close is already out; it ends the connection.
                    Some(_) => None,
                    None => self.on_handles_dropped(),
                }
            }
            Step::Timer => {
                self.timer_at = None;
                self.on_timer()
            }
        }
    }

    /// The connection is gone: if we were closing, the client is closed (the
    /// close's outcome is unknown); otherwise resume the session.
    fn lost(&self) -> Exit {
        match self.closing {
            Some(_) => Exit::End {
                state: Ended::Closed,
                in_flight: Error::ConnectionLoss,
            },
            None => Exit::Lost,
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
        if !self.held.is_empty() {
            self.send_held();
        }
    }

    /// Sends `first` after any held commands, or holds it too if they still
    /// cannot go.
    fn on_command(&mut self, first: Command) {
        self.gather = true;
        if self.held.is_empty() && self.accepting() {
            self.enqueue(first);
        } else {
            self.held.push_back(first);
        }
        self.send_held();
    }

    /// Encodes the held commands and then every command already queued, up
    /// to the write high-water mark, so they leave in one write.
    fn send_held(&mut self) {
        while self.accepting() {
            let command = match self.held.pop_front() {
                Some(command) => command,
                None => match self.commands.try_recv() {
                    Ok(command) => command,
                    // Disconnected is seen by the next `recv` in the loop.
                    Err(_) => break,
                },
            };
            self.enqueue(command);
        }
    }

    fn enqueue(&mut self, command: Command) {
        let Command {
            op,
            effect,
            reply,
            permit,
            deadline,
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
        self.deadlines.push_back(Deadline { xid, at: deadline });
        self.push_pending(Pending {
            xid,
            op_name,
            is_close,
            waiter: Waiter::Caller(reply),
            effect,
            _permit: Some(permit),
        });
    }

    /// Sends a request of our own (heartbeat, close on drop, SetWatches).
    fn send_internal(&mut self, op: Op, waiter: Waiter) -> Result<(), FrameError> {
        let xid = self.next_xid;
        let op_name = op.name();
        let is_close = matches!(op, Op::CloseSession);
        let message = ClientMessage::Request { xid, op };
        if let Err(err) = encode_frame(&message, self.frame_bytes_max, &mut self.out) {
            warn!(xid, op = op_name, error = %err, "cannot encode an internal request");
            return Err(err);
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
        // The semaphore bounds caller requests; internal ones are one each,
        // and SetWatches batches are counted on their own.
        debug_assert!(self.pending.len() < self.pending_max + self.set_watches_outstanding);
        // `expire_requests` finds a request by its xid's offset from the front.
        debug_assert!(self
            .pending
            .back()
            .is_none_or(|last| last.xid + 1 == pending.xid));
        self.pending.push_back(pending);
    }

    /// Every handle is gone: close the session so its ephemerals go now, not
    /// after the session timeout.
    fn on_handles_dropped(&mut self) -> Option<Exit> {
        debug!("every client handle dropped; closing the session");
        if self
            .send_internal(Op::CloseSession, Waiter::CloseOnDrop)
            .is_err()
        {
            return Some(Exit::both(Ended::Closed));
        }
        self.closing = Some(Closing::Dropped {
            deadline: Instant::now() + CLOSE_ON_DROP_TIMEOUT,
        });
        None
    }

    fn on_timer(&mut self) -> Option<Exit> {
        let now = Instant::now();
        self.expire_requests(now);
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
            if self.send_internal(Op::Ping, Waiter::Heartbeat).is_err() {
                return Some(self.lost());
            }
            self.heartbeat_outstanding = true;
        }
        None
    }

    /// Answers [`Error::Timeout`] to every caller whose deadline is past. A
    /// held command is dropped unsent; a sent one keeps its pending slot and
    /// permit until its reply comes and is discarded (`Waiter::TimedOut`).
    fn expire_requests(&mut self, now: Instant) {
        while let Some(command) = self.held.front() {
            if command.deadline > now {
                break;
            }
            let Some(command) = self.held.pop_front() else {
                break;
            };
            debug!(
                op = command.op.name(),
                "request timed out before it was sent"
            );
            self.drop_provisional(&command.effect);
            let _ = command.reply.send(Err(Error::Timeout));
        }
        while let Some(&Deadline { xid, at }) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            // Pending xids are consecutive, and this one is still pending:
            // its reply would have removed its deadline.
            let front_xid = self.pending.front().map_or(xid, |pending| pending.xid);
            let slot = usize::try_from(xid.wrapping_sub(front_xid))
                .ok()
                .and_then(|index| self.pending.get_mut(index))
                .filter(|pending| pending.xid == xid);
            let Some(pending) = slot else {
                debug_assert!(false, "deadline of xid {xid} has no pending request");
                continue;
            };
            if let Waiter::Caller(reply) = std::mem::replace(&mut pending.waiter, Waiter::TimedOut)
            {
                debug!(
                    xid,
                    op = pending.op_name,
                    "request timed out; its reply will be dropped"
                );
                let _ = reply.send(Err(Error::Timeout));
            }
        }
    }

    fn on_message(&mut self, message: ServerMessage) -> Option<Exit> {
        match message {
            ServerMessage::Reply { xid, zxid, result } => self.on_reply(xid, zxid, result),
            ServerMessage::Event(event) => {
                self.shared.observe_zxid(event.zxid);
                self.shared
                    .events_received
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

    /// Forgets the pings answered early at the front of `pending`; once
    /// our heartbeat's place is gone, the next may be sent (one at a time
    /// holds a place, as the invariants count).
    fn drop_answered_pings(&mut self) {
        while let Some(Waiter::Answered { heartbeat }) =
            self.pending.front().map(|pending| &pending.waiter)
        {
            if *heartbeat {
                self.heartbeat_outstanding = false;
            }
            self.pending.pop_front();
        }
    }

    /// Whether `xid` is a ping (ours or a caller's) answered ahead of the
    /// requests sent before it: its caller hears now, and it keeps its
    /// place (xids in `pending` stay consecutive) without a deadline.
    fn ping_answered_early(&mut self, xid: u64, result: &Result<OpResult, ErrorCode>) -> bool {
        let Some(front) = self.pending.front().map(|pending| pending.xid) else {
            return false;
        };
        let Some(pending) = xid
            .checked_sub(front)
            .and_then(|offset| usize::try_from(offset).ok())
            .and_then(|offset| self.pending.get_mut(offset))
        else {
            return false;
        };
        if pending.xid != xid || pending.op_name != Op::Ping.name() {
            return false;
        }
        let heartbeat = matches!(pending.waiter, Waiter::Heartbeat);
        match std::mem::replace(&mut pending.waiter, Waiter::Answered { heartbeat }) {
            Waiter::Caller(reply) => {
                let _ = reply.send(Ok(Reply {
                    result: result.clone(),
                }));
            }
            Waiter::Heartbeat | Waiter::TimedOut | Waiter::Answered { .. } => {}
            other @ (Waiter::CloseOnDrop | Waiter::SetWatches(_)) => {
                pending.waiter = other;
                return false;
            }
        }
        if let Some(at) = self.deadlines.iter().position(|due| due.xid == xid) {
            self.deadlines.remove(at);
        }
        true
    }

    fn on_reply(
        &mut self,
        xid: u64,
        zxid: Zxid,
        result: Result<OpResult, ErrorCode>,
    ) -> Option<Exit> {
        self.shared.observe_zxid(zxid);
        self.drop_answered_pings();
        let expected = self.pending.front().map(|pending| pending.xid);
        if expected != Some(xid) && self.ping_answered_early(xid, &result) {
            return None;
        }
        if expected != Some(xid) {
            warn!(xid, ?expected, "reply does not match the oldest request");
            return Some(self.lost());
        }
        let Some(pending) = self.pending.pop_front() else {
            return Some(self.lost());
        };
        if self
            .deadlines
            .front()
            .is_some_and(|deadline| deadline.xid == xid)
        {
            self.deadlines.pop_front();
        }
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
                    // The caller dropped the call; its provisional watcher
                    // has no owner.
                    self.drop_provisional(&pending.effect);
                }
            }
            Waiter::TimedOut => self.drop_provisional(&pending.effect),
            Waiter::Heartbeat | Waiter::Answered { heartbeat: true } => {
                self.heartbeat_outstanding = false
            }
            Waiter::Answered { heartbeat: false } => {}
            Waiter::CloseOnDrop => {}
            Waiter::SetWatches(batch) => {
                self.set_watches_outstanding -= 1;
                if let Err(code) = result {
                    if !expired {
                        let error = Error::from_code(code, "");
                        let ended = self.shared.watches.lock().end_batch(&batch, &error);
                        warn!(?code, paths = batch.len(), ended, "SetWatches refused");
                    }
                }
            }
        }
        if expired {
            return Some(Exit::both(Ended::SessionExpired));
        }
        if pending.is_close {
            return Some(Exit::both(Ended::Closed));
        }
        None
    }

    /// Removes the watcher a call registered before sending, once nobody
    /// will take it.
    fn drop_provisional(&self, effect: &Effect) {
        if let Effect::Provisional(key) = effect {
            self.shared.watches.lock().remove(key);
        }
    }

    fn apply_effect(&self, effect: &Effect, result: &Result<OpResult, ErrorCode>) {
        match (effect, result) {
            (Effect::Provisional(key), Err(_)) => {
                self.shared.watches.lock().remove(key);
            }
            // An exists watch on a missing node is an exist watch on resume.
            (Effect::Provisional(key), Ok(OpResult::Exists(None))) => {
                self.shared.watches.lock().mark_absent(key);
            }
            // NoWatcher: the server holds none, so local ones could never fire.
            (Effect::RemoveLocal { path, kind }, Ok(_) | Err(ErrorCode::NoWatcher)) => {
                let removed = self.shared.watches.lock().remove_kind(path, *kind);
                debug!(path, ?kind, removed, "local watchers removed");
            }
            _ => {}
        }
    }

    /// The connection is lost but the session may live: publish `Suspended`,
    /// then fail every request in flight (outcome unknown, never re-sent).
    fn suspend(&mut self) {
        self.lost_server = self.shared.server();
        self.shared.set_server(None);
        self.shared.state.set(ConnectionState::Suspended);
        let in_flight = self.pending.len();
        for pending in self.pending.drain(..) {
            if let Effect::Provisional(key) = &pending.effect {
                self.shared.watches.lock().remove(key);
            }
            if let Waiter::Caller(reply) = pending.waiter {
                let _ = reply.send(Err(Error::ConnectionLoss));
            }
        }
        self.deadlines.clear();
        self.out.clear();
        self.out_sent = 0;
        self.heartbeat_outstanding = false;
        self.set_watches_outstanding = 0;
        info!(
            in_flight,
            watchers = self.shared.watches.lock().len(),
            "connection lost; resuming the session"
        );
    }

    /// Tries every server in rounds until one resumes the session, the
    /// session times out, or the client is closed.
    async fn reconnect(&mut self) -> Result<Established, Ended> {
        // Held commands were never sent: refuse them first, as if they came now.
        while let Some(command) = self.held.pop_front() {
            self.refuse(command)?;
        }
        let expires_at = self.last_received + self.shared.session().timeout;
        let mut backoff = RECONNECT_BACKOFF_MIN;
        let mut lost = self.lost_server.take();
        loop {
            let mut order = self.servers.shuffled();
            // The server that just failed us is likely down: try it last.
            if let Some(lost) = lost.take() {
                if let Some(at) = order.iter().position(|addr| *addr == lost) {
                    let addr = order.remove(at);
                    order.push(addr);
                }
            }
            let count = order.len();
            for (tried, addr) in order.into_iter().enumerate() {
                let now = Instant::now();
                if now >= expires_at {
                    info!("no server resumed the session within its timeout");
                    return Err(Ended::SessionExpired);
                }
                let request = self.resume_request();
                // A hung server (it accepts but never answers) may not eat
                // the whole window: each server left gets an equal share, as
                // ZooKeeper's client gives each a session timeout / count.
                let untried = u32::try_from(count - tried).unwrap_or(u32::MAX);
                let limit = self
                    .options
                    .connect_timeout
                    .min((expires_at - now) / untried);
                let options = self.options.clone();
                let attempt = tokio::time::timeout(limit, handshake(&addr, &request, &options));
                match self.while_suspended(attempt).await? {
                    Ok(Ok(established)) => return Ok(established),
                    Ok(Err(Attempt::Refused {
                        code: ErrorCode::SessionExpired,
                        message,
                    })) => {
                        info!(addr, message, "session resume refused: expired");
                        return Err(Ended::SessionExpired);
                    }
                    Ok(Err(Attempt::Refused { code, message })) => {
                        debug!(addr, ?code, message, "resume refused")
                    }
                    Ok(Err(Attempt::Io(err))) => debug!(addr, error = %err, "cannot reconnect"),
                    Ok(Err(Attempt::Protocol(message))) => {
                        warn!(addr, message, "resume broke the protocol")
                    }
                    Err(_elapsed) => debug!(addr, "reconnect attempt timed out"),
                }
            }
            let now = Instant::now();
            if now >= expires_at {
                info!("no server resumed the session within its timeout");
                return Err(Ended::SessionExpired);
            }
            let pause = backoff.min(expires_at - now);
            self.while_suspended(tokio::time::sleep(pause)).await?;
            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
        }
    }

    fn resume_request(&self) -> ConnectRequest {
        ConnectRequest {
            protocol_version: PROTOCOL_VERSION,
            // A server behind what we have seen refuses, so we never go back
            // in time by switching servers.
            last_zxid_seen: self.shared.last_zxid(),
            session_timeout_ms: self.options.session_timeout_ms(),
            session: Some(self.shared.session().credentials),
        }
    }

    /// Runs `future` while answering commands: they fail fast with
    /// `ConnectionLoss`. `Err` if the client was closed meanwhile.
    async fn while_suspended<F: std::future::Future>(
        &mut self,
        future: F,
    ) -> Result<F::Output, Ended> {
        tokio::pin!(future);
        loop {
            tokio::select! {
                output = &mut future => return Ok(output),
                command = self.commands.recv() => match command {
                    Some(command) => self.refuse(command)?,
                    None => {
                        debug!("every client handle dropped while suspended");
                        return Err(Ended::Closed);
                    }
                },
            }
        }
    }

    /// Answers a command that came while suspended. A close ends the client
    /// at once: the server cannot be told, and closing must not wait for a
    /// reconnect that may never come.
    fn refuse(&mut self, command: Command) -> Result<(), Ended> {
        if let Effect::Provisional(key) = &command.effect {
            self.shared.watches.lock().remove(key);
        }
        if matches!(command.op, Op::CloseSession) {
            debug!("closed while suspended; the session is left to expire");
            self.shared.end(Ended::Closed);
            let _ = command.reply.send(Err(Error::ConnectionLoss));
            return Err(Ended::Closed);
        }
        let _ = command.reply.send(Err(Error::ConnectionLoss));
        Ok(())
    }

    /// Takes over the resumed connection: new limits and timers, then every
    /// local watcher registered again before any other request.
    fn resume(&mut self, established: Established) -> Socket {
        let info = SessionInfo::from_response(&established.response);
        self.shared.set_session(info);
        self.shared.set_server(Some(&established.addr));
        self.set_timers(info.timeout);
        self.frame_bytes_max = frame_limit(&established.response);
        let now = Instant::now();
        self.last_sent = now;
        self.last_received = now;
        // Not the handshake's zxid: changes after what we saw must still fire.
        let relative_zxid = self.shared.last_zxid();
        let all = self.shared.watches.lock().set_watches(relative_zxid);
        let paths = all.len();
        let batches = set_watches_batches(all, set_watches_budget(self.frame_bytes_max));
        let batch_count = batches.len();
        for batch in batches {
            self.set_watches_outstanding += 1;
            let waiter = Waiter::SetWatches(batch.clone());
            if let Err(err) = self.send_internal(set_watches_op(batch.clone()), waiter) {
                self.set_watches_outstanding -= 1;
                let error = match err {
                    FrameError::TooLarge { len, max } => Error::TooLarge {
                        bytes: Some(len),
                        max: Some(max),
                    },
                    other => Error::Protocol(format!("cannot encode SetWatches: {other}")),
                };
                self.shared.watches.lock().end_batch(&batch, &error);
            }
        }
        self.shared.state.set(ConnectionState::Reconnected);
        info!(
            addr = %established.addr,
            relative_zxid,
            paths,
            batches = batch_count,
            "session resumed"
        );
        Socket {
            reader: established.reader,
            writer: established.writer,
        }
    }

    /// Answers everyone: in-flight callers, watchers, queued commands.
    fn shut(mut self, state: Ended, in_flight: Error) {
        debug!(
            ?state,
            pending = self.pending.len(),
            watchers = self.shared.watches.lock().len(),
            "client ended"
        );
        self.shared.end(state);
        for pending in self.pending.drain(..) {
            if let Waiter::Caller(reply) = pending.waiter {
                let _ = reply.send(Err(in_flight.clone()));
            }
        }
        self.shared.watches.lock().end_all(state);
        self.commands.close();
        let unsent = self.held.drain(..);
        for command in unsent.chain(std::iter::from_fn(|| self.commands.try_recv().ok())) {
            let _ = command.reply.send(Err(state.error()));
        }
    }
}
